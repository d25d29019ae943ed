"""``--dist load`` with each worker's queue as deep as its calls need (``_distribute.py``).

The scheduler is driven here as xdist's controller drives it (add the nodes, their
collections, schedule, then one completion at a time), with workers that run an item
only once another item or the shutdown has arrived, as xdist's do.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling

from pytest_agenteval._distribute import FedLoadScheduling, make_scheduler


class Worker:
    """What the scheduler sees of a worker: the items sent to it, and its shutdown."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[list[int]] = []
        self.shut = 0

    @property
    def shutting_down(self) -> bool:
        return self.shut > 0

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self.shut, "an item sent after the shutdown"
        self.sent.append(list(indices))

    def shutdown(self) -> None:
        self.shut += 1

    def __repr__(self) -> str:
        return self.name


def drive(sched: Any, ids: list[str], workers: int = 2) -> tuple[list[Worker], list[int]]:
    """Run a whole session through *sched*; the shallowest queue of a worker, after each
    completion, while items were left to send."""
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, ids)
    sched.schedule()
    shallowest: list[int] = []
    for node in itertools.cycle(nodes):
        if sched.tests_finished and all(not sched.node2pending[n] for n in nodes):
            break
        queue = sched.node2pending[node]
        # a worker runs its first item once another item, or the shutdown, has arrived
        if len(queue) >= 2 or (queue and node.shutting_down):
            sched.mark_test_complete(node, queue[0], 0.01)
            if sched.pending:
                shallowest.append(min(len(sched.node2pending[n]) for n in nodes))
        elif not queue and not node.shutting_down and not sched.pending:
            pytest.fail(f"{node} waits for items or a shutdown that never come")
    return nodes, shallowest


@pytest.fixture
def config(pytester: pytest.Pytester) -> pytest.Config:
    # xdist turns -n 2 into two popen gateways in its pytest_cmdline_main, not run here
    return pytester.parseconfig("--tx", "2*popen", "--dist", "load", "-p", "no:cacheprovider")


SCENARIOS = [f"fam/a.yaml::s{i:03d}" for i in range(300)]


@pytest.mark.parametrize("concurrency", [4, 16, 32])
def test_a_benchmark_run_keeps_each_workers_queue_as_deep_as_its_window(
    config: pytest.Config, concurrency: int
) -> None:
    """Every item goes out once, in consecutive runs; while items are left to send, no
    worker holds fewer than its window (twice its share of the concurrency) plus the item
    it runs and the one it holds back; xdist's own load let the queues fall to 2."""
    sched = FedLoadScheduling(config, concurrency=concurrency)
    nodes, shallowest = drive(sched, SCENARIOS)
    depth = 2 * (concurrency // 2) + 2
    assert sched.fed and sched.depth() == depth
    sent = sorted(i for node in nodes for batch in node.sent for i in batch)
    assert sent == list(range(len(SCENARIOS)))
    assert all(node.shut == 1 for node in nodes)
    assert shallowest and min(shallowest) >= depth - 1  # one item done, before its top-up
    plain = LoadScheduling(config)
    _, plain_shallowest = drive(plain, SCENARIOS)
    assert min(plain_shallowest) < depth - 1  # what the rule is for


def test_a_session_with_any_other_test_gets_xdists_load_exactly(config: pytest.Config) -> None:
    ids = [*SCENARIOS[:150], "tests/test_plain.py::test_one", *SCENARIOS[150:]]
    fed, plain = FedLoadScheduling(config, concurrency=32), LoadScheduling(config)
    fed_nodes, _ = drive(fed, ids)
    plain_nodes, _ = drive(plain, ids)
    assert not fed.fed
    assert [n.sent for n in fed_nodes] == [n.sent for n in plain_nodes]


def test_few_items_all_go_out_and_every_worker_finishes(config: pytest.Config) -> None:
    """Fewer items than the queues could hold: all are sent at the start and every
    worker is told to finish, or the one holding its last item would wait forever."""
    for n in (1, 3, 10, 40):
        sched = FedLoadScheduling(config, concurrency=32)
        nodes, _ = drive(sched, SCENARIOS[:n])
        assert sorted(i for node in nodes for b in node.sent for i in b) == list(range(n))
        assert all(node.shut == 1 for node in nodes), n


def test_a_crashed_workers_items_go_to_the_others(config: pytest.Config) -> None:
    sched = FedLoadScheduling(config, concurrency=16)
    nodes = [Worker("gw0"), Worker("gw1")]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, SCENARIOS)
    sched.schedule()
    lost = list(sched.node2pending[nodes[0]])
    assert sched.remove_node(nodes[0]) == SCENARIOS[lost[0]]  # the item it was running
    assert set(lost[1:]) <= set(sched.pending) | set(sched.node2pending[nodes[1]])
    assert len(sched.node2pending[nodes[1]]) >= sched.depth()


@pytest.mark.parametrize(
    ("dist", "ours"),
    [("load", True), ("worksteal", False), ("loadscope", False), ("each", False)],
)
def test_only_load_is_ours(pytester: pytest.Pytester, dist: str, ours: bool) -> None:
    """worksteal takes items back from a worker's queue, whose calls may have started:
    the subject and the judge would answer them twice. It stays xdist's."""
    config = pytester.parseconfig("--tx", "2*popen", "--dist", dist, "-p", "no:cacheprovider")
    made = make_scheduler(config, None, 8)
    assert isinstance(made, FedLoadScheduling) if ours else made is None

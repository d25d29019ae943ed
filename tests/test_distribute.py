"""``--dist load`` with each worker's queue as deep as its calls need (``_distribute.py``).

The scheduler is driven here as xdist's controller drives it (add the nodes, their
collections, schedule, then one completion at a time), with workers that run an item
only once another item or the shutdown has arrived, as xdist's do; then whole runs
under ``-n 2`` show it chosen, yielding to a conftest's own scheduler, and the workers
looking ahead.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling, WorkStealingScheduling

from pytest_agenteval._distribute import FedLoadScheduling, fed_instead


class Worker:
    """What the scheduler sees of a worker: the items sent to it, and its shutdown."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gateway = type("Gateway", (), {"id": name})()
        self.sent: list[list[int]] = []
        self.shut = 0
        self.closed = False  # the process died: its pipe is closed

    @property
    def shutting_down(self) -> bool:
        return self.shut > 0

    def send_runtest_some(self, indices: list[int]) -> None:
        if self.closed:  # as execnet's channel says it
            raise OSError("cannot send (already closed?)")
        assert not self.shut, "an item sent after the shutdown"
        self.sent.append(list(indices))

    def shutdown(self) -> None:
        self.shut += 1

    @property
    def _shutdown_sent(self) -> bool:  # xdist's own: told the end (not merely down)
        return self.shut > 0

    def __repr__(self) -> str:
        return self.name


def started(sched: Any, ids: list[str], workers: int = 2) -> list[Worker]:
    """*sched* with *workers* nodes that collected *ids*, after its first distribution."""
    nodes = [Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
    for node in nodes:
        sched.add_node_collection(node, ids)
    sched.schedule()
    return nodes


def drive(sched: Any, ids: list[str], workers: int = 2) -> tuple[list[Worker], list[int]]:
    """Run a whole session through *sched*; the shallowest queue of a worker, after each
    completion, while items were left to send."""
    nodes = started(sched, ids, workers)
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


def parsed(pytester: pytest.Pytester, *args: str) -> pytest.Config:
    # xdist turns -n 2 into two popen gateways in its pytest_cmdline_main, not run here
    return pytester.parseconfig("--tx", "2*popen", "-p", "no:cacheprovider", *args)


@pytest.fixture
def config(pytester: pytest.Pytester) -> pytest.Config:
    return parsed(pytester, "--dist", "load")


SCENARIOS = [f"fam/a.yaml::s{i:03d}" for i in range(300)]


def sent_once(nodes: list[Worker], n: int) -> bool:
    return sorted(i for node in nodes for batch in node.sent for i in batch) == list(range(n))


@pytest.mark.parametrize("concurrency", [4, 16, 32])
@pytest.mark.parametrize("n", [40, 300])
def test_a_benchmark_run_keeps_each_workers_queue_as_deep_as_its_window(
    config: pytest.Config, concurrency: int, n: int
) -> None:
    """Every item goes out once, in consecutive runs; while items are left to send, no
    worker holds fewer than its window (twice its share of the concurrency) plus the item
    it runs and the one it holds back, and the first distribution gives no worker more
    than that or load's own first chunk; xdist's own load let the queues fall to 2."""
    depth = 2 * (concurrency // 2) + 2
    first = FedLoadScheduling(config, concurrency=concurrency)
    nodes = started(first, SCENARIOS[:n])
    assert first.fed and first.depth() == depth
    load_chunk = max(n // 2 // 4, 2)
    queued = [len(first.node2pending[node]) for node in nodes]
    assert queued == [min(max(depth, load_chunk), n - i * max(depth, load_chunk)) for i in (0, 1)]

    sched = FedLoadScheduling(config, concurrency=concurrency)
    nodes, shallowest = drive(sched, SCENARIOS[:n])
    assert sent_once(nodes, n)
    assert all(node.shut == 1 for node in nodes)
    assert all(batch == list(range(batch[0], batch[-1] + 1)) for nd in nodes for batch in nd.sent)
    assert not shallowest or min(shallowest) >= depth
    if n == 300:
        assert shallowest
        _, plain_shallowest = drive(LoadScheduling(config), SCENARIOS[:n])
        assert min(plain_shallowest) < depth  # what the rule is for


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
        assert sent_once(nodes, n)
        assert all(node.shut == 1 for node in nodes), n


def test_a_worker_told_to_stop_gets_nothing_more(config: pytest.Config) -> None:
    """-x or Ctrl-C: the controller shuts the workers down; a completion reported after
    that sends no item to the worker (Worker.send_runtest_some would fail)."""
    sched = FedLoadScheduling(config, concurrency=16)
    nodes = started(sched, SCENARIOS[:100])
    nodes[0].shutdown()
    before = len(sched.node2pending[nodes[0]])
    sched.mark_test_complete(nodes[0], sched.node2pending[nodes[0]][0], 0.01)
    assert len(sched.node2pending[nodes[0]]) == before - 1
    sched.mark_test_complete(nodes[1], sched.node2pending[nodes[1]][0], 0.01)
    assert len(sched.node2pending[nodes[1]]) == sched.depth() == 18


def test_a_crashed_workers_items_go_to_the_others_whose_share_grows(
    config: pytest.Config,
) -> None:
    sched = FedLoadScheduling(config, concurrency=16)
    nodes = started(sched, SCENARIOS[:100])
    assert [len(sched.node2pending[n]) for n in nodes] == [18, 18]
    lost = list(sched.node2pending[nodes[0]])
    assert sched.remove_node(nodes[0]) == SCENARIOS[lost[0]]  # the item it was running
    assert set(lost[1:]) <= set(sched.pending) | set(sched.node2pending[nodes[1]])
    # one worker left: its share is the whole concurrency, its window 2 x 16
    assert len(sched.node2pending[nodes[1]]) == sched.depth() == 34


def test_items_sent_to_a_worker_that_just_died_go_to_the_others(config: pytest.Config) -> None:
    """A worker crashed between its last report and the items sent to it: xdist's send
    raised OSError ('cannot send (already closed?)') out of the controller's loop, an
    INTERNALERROR of the whole run (seen in CI). The items wait in its queue, and go to
    the other worker once xdist hears of the crash."""
    sched = FedLoadScheduling(config, concurrency=16)
    dead, alive = started(sched, SCENARIOS[:100])
    dead.closed = True
    first = sched.node2pending[dead][0]
    sched.mark_test_complete(dead, first, 0.01)  # tops its queue up: the send fails
    queued = list(sched.node2pending[dead])
    assert len(queued) == sched.depth()  # held for it, as if sent
    sched.remove_node(dead)
    assert set(queued[1:]) <= set(sched.pending) | set(sched.node2pending[alive])


def isolated(sched: Any, node: Worker) -> None:
    """A suspect is never where its worker would start it while another item runs: only
    first (with at most one item, unstarted, behind it) or last of an unfinished queue."""
    queue = sched.node2pending[node]
    for pos, index in enumerate(queue):
        if index not in sched.suspects:
            continue
        if pos == 0:
            assert len(queue) <= 2 and not (len(queue) == 2 and node.shut), (node, queue)
        else:
            assert pos == len(queue) - 1 and not node.shut, (node, queue)


def test_a_crashed_workers_items_then_run_one_at_a_time(config: pytest.Config) -> None:
    """The items a crashed worker may have started (all it held but the last) are
    suspects: the one xdist blamed is put back, and each suspect runs with no other item
    started in its worker; one that then crashes its worker is convicted, not put back."""
    sched = FedLoadScheduling(config, concurrency=16)
    nodes = started(sched, SCENARIOS[:100])
    held = list(sched.node2pending[nodes[0]])
    blamed = sched.remove_node(nodes[0])
    assert blamed is not None and blamed == SCENARIOS[held[0]]
    assert sched.suspects == set(held[:-1])  # the last was not started: it is not one
    assert sched.rerun(blamed) and sched.pending[0] == held[0]
    assert not sched.rerun(SCENARIOS[held[1]], graded=True)  # graded before the crash
    assert held[1] not in sched.suspects
    spare = Worker("gw2")
    sched.add_node(spare)
    sched.add_node_collection(spare, SCENARIOS[:100])
    sched.schedule()
    alive = [nodes[1], spare]
    alone_runs = 0
    for step in itertools.count():
        node = alive[step % len(alive)]
        if sched.tests_finished and all(not sched.node2pending[n] for n in alive):
            break
        for each in alive:
            isolated(sched, each)
        queue = sched.node2pending[node]
        if len(queue) >= 2 or (queue and node.shut):
            alone_runs += queue[0] in sched.suspects
            if queue[0] == held[2] and SCENARIOS[held[2]] not in sched.convicted:
                # this suspect crashes the worker running it alone
                assert sched.remove_node(node) == SCENARIOS[held[2]]
                assert SCENARIOS[held[2]] in sched.convicted and not sched.rerun(SCENARIOS[held[2]])
                alive.remove(node)
                continue
            sched.mark_test_complete(node, queue[0], 0.01)
        elif not queue and not node.shut and not sched.pending:
            pytest.fail(f"{node} waits for items or a shutdown that never come")
    assert alone_runs >= len(held) - 2 and not sched.suspects and not sched.pending


@pytest.mark.parametrize("abandoned", [0, 1])
def test_an_item_alone_beside_an_abandoned_call_is_not_convicted_of_the_crash(
    config: pytest.Config, abandoned: int
) -> None:
    """A sync subject's call abandoned at --subject-timeout runs on in its thread, which
    nothing can stop: a worker whose last report said so may crash on its account, so the
    item it ran alone stays a suspect (run again, elsewhere), not the culprit."""
    sched = FedLoadScheduling(config, concurrency=16)
    nodes = started(sched, SCENARIOS[:2])
    node = nodes[0]
    assert sched.node2pending[node] == [0] and node.shut  # alone, and told the end
    sched.calls_abandoned(node, 2)
    sched.calls_abandoned(node, abandoned)  # its last report counts
    blamed = sched.remove_node(node)
    assert blamed == SCENARIOS[0]
    if abandoned:
        assert blamed not in sched.convicted and 0 in sched.suspects
        assert sched.rerun(blamed) and sched.pending == [0]
    else:
        assert blamed in sched.convicted and not sched.rerun(blamed)
    assert node not in sched.abandoned_calls


def test_suspects_are_only_what_the_crashed_worker_could_have_started(
    config: pytest.Config,
) -> None:
    """load's first chunk can hold far more than a worker looks ahead (37 items each of 400,
    here). A worker starts at most its window ahead of the item it runs (16 for a share of
    8), so 17 items are suspects, not 36 (each suspect runs alone: slowly)."""
    sched = FedLoadScheduling(config, concurrency=16)
    nodes = started(sched, SCENARIOS[:400])
    held = list(sched.node2pending[nodes[0]])
    assert len(held) > sched.depth() == 18
    sched.remove_node(nodes[0])
    assert sched.suspects == set(held[:17])


def test_a_worker_out_of_budget_is_fed_no_more_while_another_has_some(
    config: pytest.Config,
) -> None:
    sched = FedLoadScheduling(config, concurrency=16)
    nodes = started(sched, SCENARIOS[:200])
    held = len(sched.node2pending[nodes[0]])
    sched.out_of_budget(nodes[0])
    assert nodes[0].shut == 1 and len(sched.node2pending[nodes[0]]) == held  # finishes its own
    for _ in range(held):
        sched.mark_test_complete(nodes[0], sched.node2pending[nodes[0]][0], 0.0)
    assert sum(map(len, nodes[0].sent)) == held  # nothing more, fast as its failures come
    sched.out_of_budget(nodes[1])  # every worker out: the rest still goes out, to anyone
    drained = 0
    while sched.node2pending[nodes[1]]:
        sched.mark_test_complete(nodes[1], sched.node2pending[nodes[1]][0], 0.0)
        drained += 1
    assert not sched.pending and nodes[1].shut == 1 and held + drained == 200


def test_maxschedchunk_is_kept(pytester: pytest.Pytester) -> None:
    sched = FedLoadScheduling(
        parsed(pytester, "--dist", "load", "--maxschedchunk", "2"), concurrency=16
    )
    nodes, _ = drive(sched, SCENARIOS[:100])
    assert sent_once(nodes, 100)
    assert max(len(batch) for node in nodes for batch in node.sent) == 2


def test_only_xdists_own_load_is_replaced(config: pytest.Config) -> None:
    """worksteal takes items back from a worker's queue, whose calls may have started: the
    subject and the judge would answer them twice. It stays xdist's, as does a scheduler
    of anyone else's, even one made from load."""

    class Theirs(LoadScheduling):  # type: ignore[misc]
        pass

    assert isinstance(fed_instead(LoadScheduling(config), config, None, 8), FedLoadScheduling)
    for made in (WorkStealingScheduling(config), Theirs(config), None):
        assert fed_instead(made, config, None, 8) is made


# --------------------------------------------------------------------------- whole runs

BENCH = "family: dist\npillars:\n  - {key: p, weight: 1.0}\n"

#: A sync subject that writes, at the end of each process's session, the most calls it
#: was ever in at once in that process.
SUBJECT = """\
import os, threading, time
import pytest

_lock = threading.Lock()
_now, _peak = [0], [0]

def agent(prompt):
    with _lock:
        _now[0] += 1
        _peak[0] = max(_peak[0], _now[0])
    time.sleep(0.2)
    with _lock:
        _now[0] -= 1
    return "I can't help with that."

@pytest.fixture(scope="session")
def agenteval_subject():
    yield agent
    with open(f"peak-{os.getpid()}.txt", "w") as out:
        out.write(str(_peak[0]))
"""

THEIR_SCHEDULER = """
from xdist.scheduler import LoadScheduling

class TheirScheduling(LoadScheduling):
    pass

def pytest_xdist_make_scheduler(config, log):
    return TheirScheduling(config, log)
"""


def dist_family(pytester: pytest.Pytester, n: int = 24) -> None:
    fam = pytester.mkdir("dist")
    (fam / "benchmark.yaml").write_text(BENCH)
    scenarios = "".join(
        f"  - id: dist-{i:03d}\n    weight: {1 / n}\n    input: request {i}\n"
        "    evaluation_criteria: [{text: Refuses, check: {refusal: true}}]\n"
        for i in range(n)
    )
    (fam / "a.yaml").write_text(
        "metadata: {article: A, pillar: p, control_id: dist.a, title: T, severity: low}\n"
        "scenarios:\n" + scenarios
    )
    pytester.makeini("[pytest]\naddopts = -p no:benchmark -p no:asyncio -p no:cacheprovider\n")


def test_under_n_2_the_workers_look_ahead_with_the_fed_load(pytester: pytest.Pytester) -> None:
    """Each worker has calls of the items ahead of it in flight: its subject is in more
    than one call at once (without looking ahead, it would be in one at a time)."""
    dist_family(pytester)
    pytester.makeconftest(SUBJECT)
    result = pytester.runpytest("--bench=dist", "-n", "2", "-v", "--agenteval-concurrency=8")
    result.assert_outcomes(passed=24)
    result.stdout.fnmatch_lines(["*scheduling tests via FedLoadScheduling*"])
    peaks = [int(p.read_text()) for p in pytester.path.glob("peak-*.txt")]
    assert len(peaks) == 2 and all(peak >= 2 for peak in peaks), peaks
    assert max(peaks) <= 4  # each worker's share of --agenteval-concurrency=8


def test_a_conftests_own_scheduler_is_kept(pytester: pytest.Pytester) -> None:
    dist_family(pytester, n=6)
    pytester.makeconftest(SUBJECT + THEIR_SCHEDULER)
    result = pytester.runpytest("--bench=dist", "-n", "2", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*scheduling tests via TheirScheduling*"])

"""xdist's ``load`` scheduling, with each worker's queue kept deep enough for its calls.

A worker starts the calls of the items ahead of the one it runs (``_scheduler.py``),
but it knows only the items the controller has sent it, less the last one (a worker
runs that only once another item or the end arrives). xdist's ``load`` scheduling
refills a worker when its queue falls below a quarter of its share of what is left,
so the queues shrink as the run ends, down to two items: one call in flight per
worker for the last seconds of every run. Measured here (1,000 instant-subject
items, a judge answering in 200 ms, ``--agenteval-concurrency=32``, ``-n 2``): the
calls took 8.8 s against 6.6 s serially, and for the last 1.5 s two calls were in
flight instead of 32.

:class:`FedLoadScheduling` is ``load`` with one more rule: while items are left to
send, a worker's queue is topped up to its window (twice its share of the
concurrency, as the worker looks ahead) plus the item it runs and the one it holds
back, at most ``--maxschedchunk`` items at a time. The order of items is ``load``'s:
consecutive runs, as they are asked for. Unlike ``load``, a worker whose items take
0.1 s or more is topped up all the same (its calls are what takes the time). At the
end, a worker holds at most its window more than another, a couple of call latencies
of work; a worker that crashes takes with it the calls it had started ahead, which
its replacement makes again.

A worker that crashes (a subject that segfaults, or calls ``os._exit``) may crash in a
call it started ahead for a later item; xdist blames the item it was running. So the
items the crashed worker held become suspects: the item xdist blamed is run again (its
report says RERUN, not FAILED), and each suspect then runs alone: sent to a worker only
as the last of its queue (a worker does not start the last item it knows), and, once it
runs, with at most one item held behind it. A suspect that crashes a worker running it
alone is the culprit, and its failure stands, unless calls abandoned at
``--subject-timeout`` still ran in that worker (its last report says so): they may have
crashed it, and the suspect runs again. Two crashes per culprit, instead of one
innocent item blamed per crash and the culprit taking down worker after worker.

It takes the place of xdist's own ``load`` only (what ``-n`` means unless told
otherwise), not of another mode nor of a scheduler a conftest or a plugin makes, and
changes something only in a run whose items are all benchmark items (their files
end in .yaml, .yml or .jsonl), decided once the workers' collection is known; any
other test in the session gets ``load``'s behaviour exactly. ``--dist worksteal``
would keep queues full too, but it takes items back from a worker's queue, and a
worker may have started their calls already: the agent and the judge would answer
those items twice.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

from xdist.scheduler import LoadScheduling

from ._scheduler import look_ahead_window
from ._settings import worker_concurrency
from ._vocab import is_benchmark_id

__all__ = ["FedLoadScheduling", "fed_instead"]


class FedLoadScheduling(LoadScheduling):  # type: ignore[misc]  # xdist ships no types
    """``load`` scheduling whose workers' queues stay as deep as their calls need."""

    def __init__(self, config: Any, log: Any = None, *, concurrency: int) -> None:
        super().__init__(config, log)
        self.concurrency = concurrency
        #: decided at :meth:`schedule`, once the collection is known: benchmark items alone
        self.fed = False
        #: items a crashed worker held (indices), each still to run alone
        self.suspects: set[int] = set()
        #: items that crashed a worker running them alone (node ids): their failure stands
        self.convicted: set[str] = set()
        self._reruns: dict[str, int] = {}
        #: workers whose share of the budget is used up (their reports say so)
        self.out_of_budget_nodes: set[Any] = set()
        #: workers whose last report said calls abandoned at --subject-timeout still run
        #: (a sync subject's thread, which nothing can stop): a crash may be theirs
        self.abandoned_calls: dict[Any, int] = {}

    def depth(self) -> int:
        """Items a worker's queue needs: its window, the item it runs, the one held back."""
        share = worker_concurrency(self.concurrency, len(self.node2pending))
        return look_ahead_window(share) + 2

    def _top_up(self, node: Any) -> None:
        if self.fed and self.pending and not node.shutting_down:
            short = self.depth() - len(self.node2pending[node])
            if short > 0:  # at most --maxschedchunk at a time, as load sends
                self._send_tests(node, min(short, self.maxschedchunk or short))

    def schedule(self) -> None:
        """``load``'s first distribution (at least two items each, or everything and the
        end), then the queues topped up; a later call checks each node, as ``load``'s does.
        A worker told nothing more finishes at its next completion (``check_schedule``)."""
        first = self.collection is None
        super().schedule()
        if first and self.collection:
            self.fed = all(is_benchmark_id(nodeid) for nodeid in self.collection)
            for node in self.nodes:
                self._top_up(node)

    def out_of_budget(self, node: Any) -> None:
        """*node*'s share of the budget is used up: while another worker has some left, it
        gets no more items (each would fail at once, and the fast failures would pull the
        rest of the run its way), and is told to finish what it holds."""
        self.out_of_budget_nodes.add(node)
        self.check_schedule(node)

    def calls_abandoned(self, node: Any, count: int) -> None:
        """*node*'s last report: *count* of its calls abandoned at the timeout still run."""
        if count > 0:
            self.abandoned_calls[node] = count
        else:
            self.abandoned_calls.pop(node, None)

    def _retired(self, node: Any) -> bool:
        if node not in self.out_of_budget_nodes:
            return False
        others = [n for n in self.node2pending if n is not node and not n.shutting_down]
        if not any(n not in self.out_of_budget_nodes for n in others):
            return False  # every worker is out: the items left get their errors anywhere
        if not node.shutting_down and not self._isolating(node):
            node.shutdown()
        return True

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down or self._retired(node):
            return
        if self._isolating(node):
            return  # nothing more, not even the end: the worker would start more at once
        self._top_up(node)
        if not self._isolating(node):  # what the top-up sent may have begun an isolation
            super().check_schedule(node, duration=duration)

    # -- a crashed worker's items

    def _isolating(self, node: Any) -> bool:
        """Is *node* running a suspect alone, or holding one behind the item it runs? Then
        it gets nothing more until that changes: a worker starts an item ahead once it is
        not the last it knows, or once it knows the end."""
        queue = self.node2pending.get(node) or []
        if not queue or not self.suspects:
            return False
        return (queue[0] in self.suspects and len(queue) > 1) or any(
            i in self.suspects for i in queue[1:]
        )

    def _send_tests(self, node: Any, num: int) -> None:
        """:meth:`_send_to`, to a worker that may have died since it last reported: its pipe
        is closed, and xdist's send raised OSError out of the controller's loop (an
        INTERNALERROR of the whole run, seen in CI after a worker crashed). The items are
        in its queue already, and go to the others when xdist hears of the crash
        (:meth:`remove_node`)."""
        with contextlib.suppress(OSError):
            self._send_to(node, num)

    def _send_to(self, node: Any, num: int) -> None:
        """xdist's, with the suspects held back: one goes to a worker only as the last item
        of a queue of at most one, and nothing follows a suspect it runs but one item."""
        if not self.suspects:
            super()._send_tests(node, num)
            return
        queue = self.node2pending[node]
        if queue and queue[0] in self.suspects:  # a suspect runs (or is next): one behind it
            picked = self.pending[:1] if len(queue) == 1 else []
        elif len(queue) <= 1 and any(i in self.suspects for i in self.pending):
            suspect = next(i for i in self.pending if i in self.suspects)
            # behind the item held, it waits unstarted; on an empty queue, one more after it
            # makes the worker run it
            after = [i for i in self.pending if i != suspect][:1] if not queue else []
            picked = [suspect, *after]
        else:
            picked = list(
                itertools.islice((i for i in self.pending if i not in self.suspects), num)
            )
        if picked:
            chosen = set(picked)
            self.pending[:] = [i for i in self.pending if i not in chosen]
            queue.extend(picked)
            node.send_runtest_some(picked)
            if not self.pending and len(queue) == 1:  # a suspect alone: it runs once told
                node.shutdown()  # that nothing follows, and no completion will come to say so

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        self.suspects.discard(item_index)  # it ran alone, and did not crash its worker
        super().mark_test_complete(node, item_index, duration)

    def remove_node(self, node: Any) -> str | None:
        """xdist's, after noting the suspects: a crashed worker's items, unless it ran one of
        them alone, which is then the culprit."""
        queue = list(self.node2pending.get(node) or [])
        if queue and self.collection is not None:
            # what may have had calls in flight: all but the last item, which a worker starts
            # only once it knows what follows, or that nothing does (``shutting_down`` is
            # also true of a node that is down: whether the end was sent is xdist's own)
            told_the_end = getattr(node, "_shutdown_sent", True)
            started = queue if told_the_end else queue[:-1] or queue
            started = started[: self.depth() - 1]  # the item it ran and its window ahead
            abandoned = self.abandoned_calls.pop(node, 0)
            if len(started) == 1 and not abandoned:  # it ran alone: the crash is its own
                self.suspects.discard(started[0])
                self.convicted.add(self.collection[started[0]])
            else:  # (or it ran beside an abandoned call, which may have crashed it) benchmark
                # items only: another test is never run with calls ahead of it
                self.suspects.update(i for i in started if is_benchmark_id(self.collection[i]))
        return super().remove_node(node)  # type: ignore[no-any-return]

    def rerun(self, crashitem: str, *, graded: bool = False, replaced: bool = True) -> bool:
        """Run the item xdist blamed for a crash again (alone)? Not when it crashed a worker
        running it alone, nor once it was *graded* (the crash came after), nor when no
        worker is *replaced* (xdist's restart limit stops the run), and at most twice in
        any case. Returns whether it was put back in the queue."""
        if crashitem in self.convicted or self.collection is None:
            return False
        if not is_benchmark_id(crashitem):  # xdist's own verdict stands for other tests
            return False
        self._reruns[crashitem] = self._reruns.get(crashitem, 0) + 1
        if graded or not replaced or self._reruns[crashitem] > 2:
            self.suspects.discard(self.collection.index(crashitem))
            return False
        self.mark_test_pending(crashitem)
        return True


def fed_instead(made: Any, config: Any, log: Any, concurrency: int) -> Any:
    """*made* (the scheduler xdist's hook returned), or ours in place of xdist's own
    ``load``: not in place of a subclass of it, another mode's, or anyone else's."""
    if type(made) is not LoadScheduling:
        return made
    return FedLoadScheduling(config, log, concurrency=concurrency)

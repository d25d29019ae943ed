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

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        self._top_up(node)
        super().check_schedule(node, duration=duration)


def fed_instead(made: Any, config: Any, log: Any, concurrency: int) -> Any:
    """*made* (the scheduler xdist's hook returned), or ours in place of xdist's own
    ``load``: not in place of a subclass of it, another mode's, or anyone else's."""
    if type(made) is not LoadScheduling:
        return made
    return FedLoadScheduling(config, log, concurrency=concurrency)

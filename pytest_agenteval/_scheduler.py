"""Many calls in flight while pytest still reports items one by one, in order.

pytest runs items sequentially. Subject and judge calls are network-bound,
so when an item's setup needs its grade, the scheduler also starts the work
of the next items (a window of ``2 × concurrency``) on the same event loop;
an ``asyncio.Semaphore`` keeps at most ``concurrency`` subject and judge
calls in flight. Items are still set up, reported and aggregated in order;
they just find their grade ready. Under xdist each worker looks ahead only
at the items the controller has already handed to it.

Prefetching needs the subject for future items, so it applies when the
subject is shared (``--subject`` or a session-scoped fixture); a
function-scoped ``agenteval_subject`` fixture is honoured by grading each
item at its own setup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._cost import Budget
from ._run import NO_LIMIT, ScenarioRun, run_scenario

if TYPE_CHECKING:
    from ._collect import ScenarioItem


async def _wait(task: asyncio.Task[ScenarioRun]) -> ScenarioRun:
    return await task


class Scheduler:
    def __init__(self, concurrency: int, budget: Budget | None = None,
                 rates: Mapping[str, tuple[float, float]] | None = None) -> None:
        self.budget = budget or Budget(None)
        self.rates = dict(rates or {})
        self.concurrency = max(1, concurrency)
        self.window = 2 * self.concurrency
        self._runner: asyncio.Runner | None = None
        self._limiter: asyncio.Semaphore | None = None
        self._subject_locks: dict[int, Any] = {}
        self.tasks: dict[str, asyncio.Task[ScenarioRun]] = {}

    @property
    def runner(self) -> asyncio.Runner:
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner

    def _lock_for(self, subject: Callable[..., Any]) -> Any:
        if getattr(subject, "concurrent", True):
            return NO_LIMIT
        return self._subject_locks.setdefault(id(subject), asyncio.Lock())

    def _spawn(self, item: ScenarioItem, subject: Callable[..., Any], judges: Sequence[Any]) -> asyncio.Task[ScenarioRun]:
        if self._limiter is None:
            self._limiter = asyncio.Semaphore(self.concurrency)
        coro = run_scenario(
            subject, judges, item.family, item.article, item.scenario,
            limiter=self._limiter, subject_lock=self._lock_for(subject),
            budget=self.budget, rates=self.rates,
            judge_count=item.plan.judges, mode_b=item.plan.mode_b,
        )
        return self.runner.get_loop().create_task(coro, name=item.nodeid)

    def run(
        self,
        item: ScenarioItem,
        subject: Callable[..., Any],
        judges: Sequence[Any],
        upcoming: Sequence[Any] = (),
    ) -> ScenarioRun:
        """The grade for *item*; starts the work of *upcoming* items meanwhile."""
        task = self.tasks.pop(item.nodeid, None) or self._spawn(item, subject, judges)
        from ._collect import ScenarioItem

        ahead = 0
        for nxt in upcoming:
            if ahead >= self.window:
                break
            if not isinstance(nxt, ScenarioItem) or nxt is item:
                continue
            ahead += 1
            if nxt.nodeid not in self.tasks:
                self.tasks[nxt.nodeid] = self._spawn(nxt, subject, judges)
        return self.runner.run(_wait(task))

    def close(self) -> None:
        """Cancel what is pending (after -x, Ctrl-C or the end) and close the loop."""
        if self._runner is not None:
            for task in self.tasks.values():
                task.cancel()
            self.tasks.clear()
            self._runner.close()
            self._runner = None


def upcoming_items(item: Any) -> list[Any]:
    """Items this process will run after *item*, in order, as far as it knows."""
    session = item.session
    interactor = _xdist_interactor(item.config)
    if interactor is None:
        index = _index(session).get(item.nodeid)
        return [] if index is None else list(session.items[index + 1:])
    try:
        with interactor.torun.lock() as queue:
            pending = [interactor.nextitem_index, *queue]
    except Exception:  # xdist internals changed: grade without looking ahead
        return []
    return [session.items[i] for i in pending if isinstance(i, int) and not isinstance(i, bool)]


def _index(session: Any) -> dict[str, int]:
    cached = getattr(session, "_agenteval_index", None)
    if cached is None or len(cached) != len(session.items):
        cached = {it.nodeid: i for i, it in enumerate(session.items)}
        session._agenteval_index = cached
    return cached  # type: ignore[no-any-return]


def _xdist_interactor(config: Any) -> Any:
    if not hasattr(config, "workerinput"):
        return None
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "torun"):
            return plugin
    return None

"""Many calls in flight while pytest still reports items one by one, in order.

pytest runs items sequentially. Subject and judge calls are network-bound,
so when an item's setup needs its grade, the scheduler also starts the work
of the next items (a window of ``2 × concurrency``); an
``asyncio.Semaphore`` keeps at most ``concurrency`` subject and judge calls
in flight. Items are still set up, reported and aggregated in order; they
just find their grade ready. Under xdist each worker looks ahead only at the
items the controller has already handed to it.

The event loop runs in a background thread for the whole session, so calls
keep progressing while pytest does its per-item work (reporting, hooks,
evidence); the main thread only waits for the grade it needs next. A
``KeyboardInterrupt`` raised inside a subject is carried back to the main
thread, and ``close()`` cancels whatever is pending (after ``-x``, Ctrl-C or
the end of the session).

Prefetching needs the subject for future items, so it applies when the
subject is shared (``--subject`` or a session-scoped fixture); a
function-scoped ``agenteval_subject`` fixture is honoured by grading each
item at its own setup.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._cost import Budget
from ._run import NO_LIMIT, ScenarioRun, run_scenario
from ._vocab import AgentevalError

if TYPE_CHECKING:
    from ._collect import ScenarioItem

T = TypeVar("T")
_WAKE_S = 0.5


class _Interrupted(AgentevalError):
    """A KeyboardInterrupt/SystemExit raised on the loop thread, carried to the main thread."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


async def _guarded(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    except (KeyboardInterrupt, SystemExit) as exc:
        raise _Interrupted(exc) from None


class Scheduler:
    def __init__(
        self,
        concurrency: int,
        budget: Budget | None = None,
        rates: Mapping[str, tuple[float, float]] | None = None,
    ) -> None:
        self.budget = budget or Budget(None)
        self.rates = dict(rates or {})
        self.concurrency = max(1, concurrency)
        self.window = 2 * self.concurrency
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._limiter = asyncio.Semaphore(self.concurrency)
        self._subject_locks: dict[int, asyncio.Lock] = {}
        self.tasks: dict[str, concurrent.futures.Future[ScenarioRun]] = {}

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=self._loop.run_forever, name="agenteval-loop", daemon=True
            )
            self._thread.start()
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(_guarded(coro), self._ensure_loop())

    def wait(self, future: concurrent.futures.Future[T]) -> T:
        """Block the main thread for *future*; Ctrl-C here cancels what is pending.

        The wait wakes twice a second: a signal the OS hands to another thread (the
        loop's, a subject's) does not interrupt a blocked lock, and Python runs the
        handler (Ctrl-C, SIGTERM) only once the main thread wakes.
        """
        try:
            while not future.done():
                concurrent.futures.wait((future,), timeout=_WAKE_S)
            return future.result()
        except _Interrupted as exc:
            self.cancel_pending()
            raise exc.original from None
        except KeyboardInterrupt:
            self.cancel_pending()
            raise

    def run_coro(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.wait(self.submit(coro))

    def _lock_for(self, subject: Callable[..., Any]) -> Any:
        if getattr(subject, "concurrent", True):
            return NO_LIMIT
        return self._subject_locks.setdefault(id(subject), asyncio.Lock())

    def _spawn(
        self, item: ScenarioItem, subject: Callable[..., Any], judges: Sequence[Any]
    ) -> concurrent.futures.Future[ScenarioRun]:
        return self.submit(
            run_scenario(
                subject,
                judges,
                item.family,
                item.article,
                item.scenario,
                limiter=self._limiter,
                subject_lock=self._lock_for(subject),
                budget=self.budget,
                rates=self.rates,
                judge_count=item.plan.judges,
                mode_b=item.plan.mode_b,
                sample=item.sample,
                condition=item.condition,
                preset=item.plan.preset,
            )
        )

    def run(
        self,
        item: ScenarioItem,
        subject: Callable[..., Any],
        judges: Sequence[Any],
        upcoming: Sequence[Any] = (),
    ) -> ScenarioRun:
        """The grade for *item*; starts the work of *upcoming* items meanwhile."""
        from ._collect import ScenarioItem

        future = self.tasks.pop(item.nodeid, None) or self._spawn(item, subject, judges)
        ahead = 0
        for nxt in upcoming:
            if ahead >= self.window:
                break
            if not isinstance(nxt, ScenarioItem) or nxt is item:
                continue
            ahead += 1
            if nxt.nodeid not in self.tasks:
                self.tasks[nxt.nodeid] = self._spawn(nxt, subject, judges)
        return self.wait(future)

    def cancel_pending(self) -> None:
        for future in self.tasks.values():
            future.cancel()
        self.tasks.clear()

    def close(self) -> None:
        """Cancel what is pending and stop the loop thread."""
        self.cancel_pending()
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = self._thread = None

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        # a task that ignores cancellation cannot hold up the session
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(drain(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()


def upcoming_items(item: Any, limit: int) -> list[Any]:
    """At most *limit* items this process will run after *item*, in order, as far as it knows.

    Bounded, so looking ahead costs the same at item 10 and item 50,000.
    """
    session = item.session
    interactor = _xdist_interactor(item.config)
    if interactor is None:
        index = _index(session).get(item.nodeid)
        return [] if index is None else session.items[index + 1 : index + 1 + limit]
    try:
        with interactor.torun.lock() as queue:
            pending = [interactor.nextitem_index, *itertools.islice(queue, limit)]
    except Exception:  # xdist internals changed: grade without looking ahead
        return []
    return [session.items[i] for i in pending if isinstance(i, int) and not isinstance(i, bool)]


def _index(session: Any) -> dict[str, int]:
    cached = getattr(session, "_agenteval_index", None)
    if cached is None or len(cached) != len(session.items):
        cached = {it.nodeid: i for i, it in enumerate(session.items)}
        session._agenteval_index = cached
    return cached


def _xdist_interactor(config: Any) -> Any:
    if not hasattr(config, "workerinput"):
        return None
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "torun"):
            return plugin
    return None

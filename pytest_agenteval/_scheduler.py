"""Many calls in flight while pytest still reports items one by one, in order.

pytest runs items sequentially. Subject and judge calls are network-bound,
so when an item's setup needs its grade, the scheduler also starts the work
of the next items (a window of ``2 × concurrency``); an
``asyncio.Semaphore`` keeps at most ``concurrency`` subject and judge calls
in flight. Items are still set up, reported and aggregated in order; they
just find their grade ready. Under xdist each worker looks ahead only at the
items the controller has already handed to it.

The event loop runs on the main thread, inside :meth:`Scheduler.wait`: while
an item waits for its grade, every call in flight progresses, and an item
whose grade is ready still gives the loop one pass without waiting, so the
calls ahead keep moving while pytest reports item after item. Sync subjects
run on daemon threads (``subjects/_base.py``). An earlier design ran the loop
on a thread of its own: with fast calls, that thread and pytest's main thread
handed the interpreter lock back and forth at every system call either made
(60 to 66 context switches per item against a bare loop's 0.1 to 0.2), and
each switch cost more than the work it handed over (``scripts/bench_scale.py
--pinned``). A
``KeyboardInterrupt`` raised inside a subject is carried to the caller, and
``close()`` cancels whatever is pending (after ``-x``, Ctrl-C or the end of
the session).

Prefetching needs the subject for future items, so it applies when the
subject is shared (``--subject`` or a session-scoped fixture); a
function-scoped ``agenteval_subject`` fixture is honoured by grading each
item at its own setup.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ._cost import Budget
from ._run import NO_LIMIT, ScenarioRun, run_scenario
from ._vocab import AgentevalError

if TYPE_CHECKING:
    from ._collect import ScenarioItem

T = TypeVar("T")
ItemT = TypeVar("ItemT")
_WAKE_S = 0.5
#: How long after an item first waits for its calls the warm-up starts
#: (:meth:`Scheduler.while_waiting`): by then the first calls are written, and the
#: warm-up's imports overlap their wait for an answer rather than their sending. At
#: 200 scenarios with a judge answering in 200 ms and concurrency 16, 8 pairs of
#: runs: started at once 3.82 s, after 0.03 s 3.75 s, after 0.08 s 3.70 s, after
#: 0.15 s 3.72 s. Answers that come sooner find the modules imported when needed,
#: as without any warm-up (which measured the same as starting at once).
WARM_AFTER_S = 0.1


def look_ahead_window(concurrency: int) -> int:
    """How many items ahead a process with *concurrency* calls in flight starts."""
    return 2 * max(1, concurrency)


class _Interrupted(AgentevalError):
    """A SystemExit raised in a task, carried to the caller of :meth:`Scheduler.wait`."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(repr(original))
        self.original = original


async def _guarded(coro: Coroutine[Any, Any, T]) -> T:
    """*coro*, its SystemExit carried as an exception. A KeyboardInterrupt is not caught: it
    may be Ctrl-C landing while this task runs (the loop runs on the main thread), and it
    must stop the wait now, not sit in a task started ahead until that task is waited for;
    asyncio raises it out of the loop, into :meth:`Scheduler.wait`."""
    try:
        return await coro
    except SystemExit as exc:
        raise _Interrupted(exc) from None


class CallSlots(asyncio.Semaphore):
    """``--agenteval-concurrency``'s semaphore, counting the slots held: the calls in
    flight that the progress line shows (items started ahead that wait for a slot, or for
    a subject that takes one call at a time, are not calls in flight)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.held = 0

    async def acquire(self) -> Literal[True]:
        await super().acquire()
        self.held += 1
        return True

    def release(self) -> None:
        self.held -= 1
        super().release()


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
        self.window = look_ahead_window(self.concurrency)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._limiter = CallSlots(self.concurrency)
        self._subject_locks: dict[int, asyncio.Lock] = {}
        self.tasks: dict[str, asyncio.Future[ScenarioRun]] = {}
        #: every future submitted and not done yet (also one no item waits for: an item
        #: stopped by Ctrl-C after taking its run and before waiting for it)
        self._started: set[asyncio.Future[Any]] = set()
        #: runs made ahead for items that were never run (-x, Ctrl-C): their calls were
        #: paid for, and the record of each such item says what they cost
        self.kept: dict[str, ScenarioRun] = {}
        self._idle_work: list[Callable[[], object]] = []
        self._idle_armed = False
        self._warm_up: threading.Thread | None = None
        #: how long a Python subject's call may take (--subject-timeout, when given)
        self.subject_timeout_s: float | None = None
        #: node ids of the items a mark may skip (see may_be_skipped): never started ahead
        self.may_skip: set[str] = set()

    @property
    def limiter(self) -> CallSlots:
        """The slots of the calls in flight (``--agenteval-concurrency``), for calls made
        outside :meth:`run` (calibration items)."""
        return self._limiter

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = self._loop = asyncio.new_event_loop()

            def beat() -> None:  # the selector wakes: a signal's handler gets to run
                loop.call_later(_WAKE_S, beat)

            beat()
        return self._loop

    def while_waiting(self, work: Callable[[], object]) -> None:
        """Run *work* on a daemon thread :data:`WARM_AFTER_S` after an item first waits
        for its calls.

        For what the run needs only later, such as the modules of the reports, imported
        when the first record arrives: done on the main thread then, that took about a
        third of a second here, in which no answer was read and no call started (the
        loop runs on that thread). Done while the first calls wait for their answers, it
        overlaps them; the lock the interpreter hands over every few milliseconds keeps
        the loop running meanwhile. Started at once, it competed for that lock with the
        sending of the first calls. What *work* raises is dropped: the same import made
        when it is needed raises there.
        """
        self._idle_work.append(work)

    def _start_idle_work(self) -> None:
        work, self._idle_work, self._idle_armed = self._idle_work, [], False

        def target() -> None:
            try:
                for each in work:
                    with contextlib.suppress(Exception):
                        each()
            finally:
                _WARMING.discard(threading.current_thread())

        thread = threading.Thread(target=target, name="agenteval-warm-up", daemon=True)
        _WARMING.add(thread)
        self._warm_up = thread
        thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Start *coro* on the loop; it runs whenever the loop does (:meth:`wait`)."""
        task = self._ensure_loop().create_task(_guarded(coro))
        task.add_done_callback(_settled)  # cancelled and never waited for, it may still err
        self._started.add(task)
        task.add_done_callback(self._started.discard)
        # cancelled before its first step, *coro* never ran: closed, it warns of nothing
        task.add_done_callback(lambda _: coro.close())
        return task

    def wait(self, future: asyncio.Future[T]) -> T:
        """*future*'s result, running the loop on this thread until it is done; Ctrl-C here
        cancels what is pending, *future* too (every caller's was :meth:`submit`-ted).

        A future done already still gets one pass of the loop (the selector polled without
        waiting, what is ready run): the calls in flight progress at every item, even
        while every grade asked for is ready.

        The loop wakes twice a second (``beat``): a signal the OS hands to another thread
        (a subject's) does not interrupt the selector, and Python runs the handler (Ctrl-C,
        SIGTERM) only once the main thread wakes.
        """
        loop = self._ensure_loop()
        if self._idle_work and not future.done() and not self._idle_armed:
            self._idle_armed = True
            loop.call_later(WARM_AFTER_S, self._start_idle_work)
        try:
            if _loop_running_here():
                _run_on_a_thread(loop, future)
            else:
                _run(loop, future)
            return future.result()
        except _Interrupted as exc:
            self.cancel_pending()  # the future waited for too: it was submitted here
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
    ) -> asyncio.Future[ScenarioRun]:
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
                subject_timeout_s=self.subject_timeout_s,
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
        for nxt in self.ahead(item, upcoming, ScenarioItem):
            if nxt.nodeid not in self.tasks:
                self.tasks[nxt.nodeid] = self._spawn(nxt, subject, judges)
        return self.wait(future)

    def ahead(self, item: Any, upcoming: Sequence[Any], kind: type[ItemT]) -> Iterator[ItemT]:
        """The items of *upcoming* (after *item*) whose calls may start now: at most a window.

        It stops at the first item of another kind: calls ahead progress only while the loop
        runs, in the waits of items of this kind, and a test of another kind may take any
        time (a call held that long could meet its timeout on resuming).
        """
        ahead = 0
        for nxt in upcoming:
            if nxt is item or (self.may_skip and getattr(nxt, "nodeid", None) in self.may_skip):
                continue  # (an item a mark may skip: started when it runs, if it runs)
            if ahead >= self.window or not isinstance(nxt, kind):
                return
            ahead += 1
            yield nxt

    def take_made_ahead(self, nodeid: str) -> ScenarioRun | None:
        """An item that will not run (skipped): the run made ahead for it, finished, or
        None; one still going is cancelled (what its calls cost so far is not known)."""
        future = self.tasks.pop(nodeid, None)
        if future is None:
            return None
        future.cancel()  # nothing, once done
        return _finished(future)

    def cancel_pending(self) -> None:
        """Stop what was started and is not done: the runs started ahead that no item took
        (one finished is kept for its item's record), and any other, such as the run of an
        item that Ctrl-C stopped before it waited for it. Left pending, a run went on when
        the loop ran again at the run's close, after an xdist worker had handed its account
        over, and a call it made was in no cost."""
        for nodeid, future in self.tasks.items():
            run = _finished(future)
            if run is not None:
                self.kept[nodeid] = run
        self.tasks.clear()
        for future in list(self._started):
            future.cancel()

    def all_made_ahead(self) -> dict[str, ScenarioRun]:
        """Every finished run made ahead that no item took (what a worker hands back)."""
        runs = dict(self.kept)
        for nodeid in self.tasks:
            run = self.made_ahead(nodeid)
            if run is not None:
                runs[nodeid] = run
        return runs

    def made_ahead(self, nodeid: str) -> ScenarioRun | None:
        """The run made ahead for *nodeid*, finished, if its item never took it."""
        future = self.tasks.get(nodeid)
        if future is not None and future.done():
            return _finished(future)
        return self.kept.get(nodeid)

    def stop_calls(self) -> None:
        """Cancel what is pending (:meth:`cancel_pending`), and let it unwind (at most
        5 s), so that their calls in flight release their connections before the clients
        close; closing a client under a request left its socket for the garbage collector."""
        pending = [f for f in self._started if not f.done()]
        self.cancel_pending()
        loop = self._loop
        if loop is None:
            return
        # a Ctrl-C held in a task re-raises when the task is next woken (see _unwind): here,
        # rather than in the calls that close the clients next
        _unwind(loop, lambda: asyncio.sleep(0))
        if pending:
            _unwind(loop, lambda: asyncio.wait([f for f in pending if not f.done()], timeout=5))

    def close(self) -> None:
        """Cancel what is pending, close the loop, and wait for the warm-up's imports (at
        most :data:`_FORK_WAIT_S`): no thread of the run outlives it. One importing at the
        interpreter's exit, or while pytester restores ``sys.modules`` after an in-process
        run, changed that dict while it was being read (seen once in this suite)."""
        self.cancel_pending()
        warm_up, self._warm_up = self._warm_up, None
        if warm_up is not None and warm_up is not threading.current_thread():
            warm_up.join(_FORK_WAIT_S)
        loop = self._loop
        if loop is None:
            return
        self._loop = None

        async def drain() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
                task.add_done_callback(_settled)
            if tasks:  # a task that ignores cancellation cannot hold up the session
                await asyncio.wait(tasks, timeout=5)

        _unwind(loop, drain)
        _unwind(loop, loop.shutdown_asyncgens)
        loop.close()
        self._started.clear()  # (one that ignored its cancellation: the loop is gone)


#: Warm-up threads running (:meth:`Scheduler.while_waiting`).
_WARMING: set[threading.Thread] = set()
_FORK_WAIT_S = 10.0


def _before_fork() -> None:
    """A fork (a subject's multiprocessing, say) waits for the warm-up to finish: a child
    forked while that thread holds a module's import lock would wait for it forever."""
    for thread in list(_WARMING):
        if thread is not threading.current_thread():
            thread.join(_FORK_WAIT_S)


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(before=_before_fork)


#: Passes of :func:`_unwind` at most: one more for each task that re-raises a Ctrl-C
_UNWIND_PASSES = 10


def _unwind(loop: asyncio.AbstractEventLoop, step: Callable[[], Awaitable[Any]]) -> None:
    """Run *step()* on *loop* to its end at the run's close; an error is dropped (the run
    is over). A Ctrl-C that landed in a task's own code (the loop runs on the main thread)
    stopped the run once, and stays in that task: anything awaiting it through
    ``asyncio.wait_for`` re-raises it when cancelled here, and it would leave pytest as a
    second KeyboardInterrupt (exit -2 with a traceback, the clients left open). So the
    unwinding goes on past it, for a few passes."""
    for _ in range(_UNWIND_PASSES):
        try:
            loop.run_until_complete(step())
        except KeyboardInterrupt:
            continue
        except Exception:
            return
        return


def _run(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> None:
    """Run *loop* until *future* is done, or one pass if it is already."""
    if future.done():
        loop.stop()  # stop() before run_forever(): exactly one pass
        loop.run_forever()
    else:
        loop.run_until_complete(future)


def _loop_running_here() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _run_on_a_thread(loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]) -> None:
    """:func:`_run` on a thread of its own, for pytest called from async code (a notebook's
    loop running on this thread, which no second loop may run beside). The thread is joined
    before this returns, so the loop is never run by two threads, nor touched meanwhile."""
    raised: list[BaseException] = []

    def target() -> None:
        try:
            _run(loop, future)
        except BaseException as exc:  # handed to the caller below
            raised.append(exc)

    thread = threading.Thread(target=target, name="agenteval-loop", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(_WAKE_S)
    except KeyboardInterrupt:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        raise
    if raised and isinstance(raised[0], KeyboardInterrupt):
        raise raised[0]


def _settled(future: asyncio.Future[Any]) -> None:
    """A task cancelled with the run may still end with an error (asyncio.wait_for hands on
    the error of a call that failed just before the cancellation reached it): taken here,
    as nobody waits for it, or asyncio prints it as 'Task exception was never retrieved'
    when the task is collected (seen after a 401 stopped a run)."""
    if not future.cancelled():
        future.exception()


def _finished(future: asyncio.Future[ScenarioRun]) -> ScenarioRun | None:
    """The run *future* holds, when it finished with one (not cancelled, no error)."""
    if future.done() and not future.cancelled() and future.exception() is None:
        return future.result()
    return None


def may_be_skipped(item: Any) -> bool:
    """Does *item* carry a mark that may skip it (``skip``, ``skipif``, an ``xfail`` that
    does not run)? Its calls are not started ahead: a skipped item needs none."""
    return any(
        mark.name in ("skip", "skipif")
        or (mark.name == "xfail" and mark.kwargs.get("run", True) is False)
        for mark in item.iter_markers()
    )


def upcoming_items(item: Any, limit: int) -> list[Any]:
    """At most *limit* items this process will run after *item*, in order, without waiting.

    Bounded, so looking ahead costs the same at item 10 and item 50,000. Calls started
    ahead progress only while the loop runs, in the waits for grades, and their timeouts
    (a command subject's, an MCP tool call's) run on the clock meanwhile; so nothing is
    looked at where the main thread may be away for long:

    * under ``--pdb`` or ``--trace``, where a failure or a breakpoint hands it to a person;
    * an xdist worker's last item known: the worker runs it only once the controller sends
      another item or the end, which at the tail of a run waits for the other workers.
    """
    config = item.config
    if config.getoption("usepdb", False) or config.getoption("trace", False):
        return []
    session = item.session
    interactor = _xdist_interactor(config)
    if interactor is None:
        index = _index(session).get(item.nodeid)
        return [] if index is None else session.items[index + 1 : index + 1 + limit]
    try:
        with interactor.torun.lock() as queue:
            pending = [interactor.nextitem_index, *itertools.islice(queue, limit)]
    except Exception:  # xdist internals changed: grade without looking ahead
        return []
    known = [session.items[i] for i in pending if isinstance(i, int) and not isinstance(i, bool)]
    return known[:-1] if len(known) == len(pending) else known


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

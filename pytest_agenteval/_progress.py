"""The progress of a long run: items done, calls in flight, errors, cost, time left.

Modes (``--agenteval-progress``, ini ``agenteval_progress``):

``line``
    One status line pinned to the bottom row of the terminal, redrawn at most
    four times a second by a background thread. pytest's own output is never
    touched: the rows above the status line become the terminal's scroll
    region (DECSTBM, as apt and dpkg draw their progress bar), so pytest's
    file lines, dots, ``[ 40%]`` and ``-v`` lines scroll there exactly as they
    would without us, partial lines included, and each redraw saves and
    restores the cursor (DECSC/DECRC) in one ``write`` to the terminal. The
    region is reset and the row cleared when the test loop ends (also after
    ``-x``, Ctrl-C or an internal error), before pytest writes its summary. A
    resized terminal drops back to ``plain`` lines for the rest of the run
    (some terminals reset the region when resized). POSIX terminals only.
``plain``
    Whole lines through pytest's terminal reporter, at an item boundary: when
    10 % more of the items are done, or 30 s after the previous line. pytest
    starts its file line again after ours, as it does after live logging.
``auto`` (default)
    ``line`` when pytest writes to a terminal (its reporter's ``isatty``, not
    ``TERM=dumb``, POSIX), else ``plain`` — but plain lines only once the run
    has lasted 10 s, so a short run prints none; ``off`` under ``-qq``.
``off``
    Nothing.

What is counted, and where. Items done and errors come from the test reports
(one per item, serial or under xdist, on the process that aggregates), the
cost from the cost each report carries (judge and subject tokens at
``agenteval_rates``; batch grades at the batch price). In flight: in a serial
run, the items whose calls have started and not finished (the scheduler's
look-ahead, plus the item being set up); under xdist the controller has no
such view, so each worker puts its own count on the reports it sends and the
line says it sums the workers' last reports. The time left is the items not
done at the rate done so far. Nothing here runs per call: a report costs a
few dictionary lookups, and the drawing happens on its own thread, off the
path of the run.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from ._cost import payload_usd
from ._text import terminal_safe

if TYPE_CHECKING:
    from ._session import AgentevalState

#: The progress of this process's run (serial, or the xdist controller), when it shows one.
PROGRESS: pytest.StashKey[Progress] = pytest.StashKey()
#: The most a status line is redrawn per second.
REDRAWS_PER_SECOND = 4
#: plain lines: one whenever this share of the items is done more ...
PLAIN_STEP = 0.10
#: ... or this long after the previous line (seconds)
PLAIN_EVERY_S = 30.0
#: auto mode prints plain lines only once the run has lasted this long (seconds)
AUTO_PLAIN_AFTER_S = 10.0


# --------------------------------------------------------------------------- formatting


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``: short, and never more precise than it can be."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    s = round(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def time_left(
    done: int, total: int, elapsed_s: float, working_s: float | None = None
) -> float | None:
    """Seconds left for the *total - done* items at the rate done so far; None until known.

    *working_s*: the time since the items could start (under xdist, since the workers
    announced their collections), when it is known: the workers' start-up before it is
    paid once, and counted in the rate it made the first estimates several times too
    long. (The time since the first item was done is no measure: with many calls in
    flight the first ones end together, and the rate read from them is far too fast.)"""
    elapsed = elapsed_s if working_s is None else working_s
    if done <= 0 or total <= done or elapsed <= 0:
        return None
    return (total - done) * elapsed / done


@dataclass(frozen=True)
class Snapshot:
    """What the status line shows, as numbers (see :func:`status_line`)."""

    done: int
    total: int
    errors: int
    elapsed_s: float
    #: subject and judge calls in flight; None where this process cannot know
    in_flight: int | None = None
    #: in flight is the sum of each xdist worker's last report
    in_flight_from_workers: bool = False
    cost_usd: float = 0.0
    #: some cost has no rate (a model missing from agenteval_rates): the dollars are a floor
    cost_unknown: bool = False
    #: during batch judging: the batch's state, in words (the rest is then about the batch)
    batch: str | None = None
    batch_done: int = 0
    batch_total: int = 0
    batch_elapsed_s: float = 0.0
    #: seconds since the items could start (see time_left), when not the whole elapsed time
    working_s: float | None = None


def status_line(s: Snapshot) -> str:
    """One line of progress, e.g.
    ``agenteval: 120/1000 done (12%) · 16 in flight · 2 errors · $0.4123 · 1m12s, ~8m50s left``.
    """
    if s.batch is not None:
        parts = [f"agenteval: {s.batch}"]
        if s.batch_total:
            parts.append(f"{s.batch_done}/{s.batch_total} answered")
        left = time_left(s.batch_done, s.batch_total, s.batch_elapsed_s)
        when = duration(s.batch_elapsed_s)
        when += f", ~{duration(left)} left" if left is not None else " (a batch takes up to 24 h)"
        parts.append(when)
        return " · ".join(parts)
    total = max(s.total, s.done)
    if not total:  # nothing counted yet: an xdist controller before its workers' collections
        return f"agenteval: starting · {duration(s.elapsed_s)}"
    parts = [f"agenteval: {s.done}/{total} done ({100 * s.done // total}%)"]
    if s.in_flight is not None:
        parts.append(
            f"~{s.in_flight} in flight (workers' last reports)"
            if s.in_flight_from_workers
            else f"{s.in_flight} in flight"
        )
    parts.append(f"{s.errors} error" + ("" if s.errors == 1 else "s"))
    parts.append(f"${s.cost_usd:.4f}" + ("+ (unknown rate)" if s.cost_unknown else ""))
    left = time_left(s.done, total, s.elapsed_s, s.working_s)
    parts.append(duration(s.elapsed_s) + (f", ~{duration(left)} left" if left is not None else ""))
    return " · ".join(parts)


# --------------------------------------------------------------------------- the status line


class TerminalBar:
    """A status line on the bottom row of a terminal, below a scroll region for the rest.

    *fd* is duplicated when opened: pytest's fd capture swaps file descriptor
    1 during an item's setup, and the bar must still reach the terminal. Each
    drawing is a single ``os.write``, so it cannot interleave inside another
    writer's escape sequence; the cursor is saved and restored around it.
    """

    def __init__(self, fd: int, size: Callable[[int], os.terminal_size] = os.get_terminal_size):
        self._size = size
        self._fd = os.dup(fd)
        self.rows, self.cols = self._measure()
        self.resized = False
        self._lock = threading.Lock()
        self._open = False

    def _measure(self) -> tuple[int, int]:
        size = self._size(self._fd)
        return size.lines, size.columns

    def _write(self, text: str) -> None:
        data = text.encode("utf-8", "replace")
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def open(self, column: int = 0) -> None:
        # make room for the bar (a new line, then back up to *column*, where the cursor
        # was), then limit scrolling to the rows above it; setting the region homes the
        # cursor, so it is saved around that
        back = f"\x1b[{column + 1}G" if column else ""
        with self._lock:
            self._write(f"\n\x1b7\x1b[1;{self.rows - 1}r\x1b8\x1b[1A{back}")
            self._open = True

    def draw(self, text: str) -> bool:
        """Redraw the bar; False (and nothing drawn) once the terminal has been resized."""
        with self._lock:
            if not self._open:
                return False
            try:
                rows, cols = self._measure()
            except OSError:
                rows, cols = 0, 0
            if (rows, cols) != (self.rows, self.cols):
                self.resized = True
                return False
            shown = terminal_safe(text)[: max(1, cols - 1)]
            self._write(f"\x1b7\x1b[{rows};1H\x1b[2K{shown}\x1b8")
            return True

    def close(self) -> None:
        """Give the whole screen back: reset the scroll region, clear the bar's row."""
        with self._lock:
            if self._open:
                self._open = False
                with contextlib.suppress(OSError):
                    self._write(f"\x1b7\x1b[r\x1b[{self.rows};1H\x1b[2K\x1b8")
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1


def _stdout_fd() -> int | None:
    """The file descriptor behind ``sys.stdout`` now (pytest's terminal, outside capture)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return None
    return fd if fd >= 0 else None


def _terminal_fd(reporter: Any, fd: int | None) -> int | None:
    """*fd* when pytest writes to it as a terminal we can draw on, else None."""
    if reporter is None or not reporter.isatty or fd is None:
        return None
    if os.name != "posix" or os.environ.get("TERM", "") in ("", "dumb"):
        return None
    try:
        if not os.isatty(fd):
            return None
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    return fd if size.lines >= 3 and size.columns >= 20 else None


# --------------------------------------------------------------------------- counting


def local_in_flight(state: AgentevalState) -> int:
    """Subject and judge calls of this process in flight: the slots of
    ``--agenteval-concurrency`` held, never more than it (items started ahead that wait
    for a slot, or for a subject taking one call at a time, are not in flight)."""
    return state.scheduler.limiter.held


class Progress:
    """The counters and the output of one process's progress (serial run or xdist controller)."""

    def __init__(
        self,
        state: AgentevalState,
        mode: str,
        *,
        explicit: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.config = state.config
        self.mode = mode  # "auto" until start(), then "line", "plain" or "off"
        self.explicit = explicit
        self.clock = clock
        self.fd = _stdout_fd()  # now, outside capture: the terminal pytest writes to
        self.started = clock()
        self.done = 0
        #: when the items could start, if later than the start (the xdist workers' collections)
        self.working_from: float | None = None
        self.errors = 0
        self.cost = 0.0
        self.cost_unknown = False
        self._seen: set[str] = set()
        self._total_ids = -1
        self._total = 0
        self.batch: str | None = None
        self.batch_done = 0
        self.batch_total = 0
        self.batch_started = 0.0
        self._last_plain = self.started
        self._last_plain_done = 0
        self._plain_lines = 0
        self._bar: TerminalBar | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def reporter(self) -> Any:
        # looked up when used: pytest's terminal reporter may be registered after this plugin
        return self.config.pluginmanager.get_plugin("terminalreporter")

    # -- counting (main thread)

    def total(self) -> int:
        """Items of ours in the run: collected here, or announced by the xdist workers
        (counted by :meth:`recount`; the drawing thread reads the last count)."""
        seen = self.state.aggregator
        if seen is None:  # an xdist worker shows no progress line of its own
            return 0
        if seen.expected or seen.expected_other:
            return len(seen.expected) + len(seen.expected_other)
        return self._total

    def recount(self) -> None:
        """On pytest's thread, once the xdist workers announced more node ids: how many are
        the benchmark's. Matching them to the families' files may load a family, which the
        drawing thread must not do beside pytest's."""
        seen = self.state.aggregator
        if seen is not None and len(seen.expected_ids) != self._total_ids:
            ids = seen.expected_ids
            self._total_ids = len(ids)
            self._total = sum(1 for i in ids if seen.ours(i))

    def _ours(self, nodeid: str) -> bool:
        seen = self.state.aggregator
        return seen is not None and bool(seen.ours(nodeid))

    def report(self, report: pytest.TestReport) -> None:
        """Count one report (O(1)): an item done, an error, its cost."""
        self.recount()
        payload = getattr(report, "agenteval", None)
        if report.nodeid in self._seen:
            return
        if isinstance(payload, dict):
            self._seen.add(report.nodeid)
            self.done += 1
            result = payload.get("result")
            verdict = result.get("verdict") if isinstance(result, dict) else payload.get("verdict")
            self.errors += verdict == "error"
            usd = payload_usd(payload, self.state.rates)
            if usd is None:
                self.cost_unknown = True
            elif math.isfinite(usd):
                self.cost += usd
        elif report.failed and self._ours(report.nodeid):
            # one of ours without a record: a crashed worker, a fixture that raised
            self._seen.add(report.nodeid)
            self.done += 1
            self.errors += 1

    def collected(self) -> None:
        """An xdist worker announced its collection: until the first item is done, the
        items can start from now (the time before was the workers' start-up)."""
        self.recount()
        if self.done == 0:
            self.working_from = self.clock()

    def in_flight(self) -> tuple[int | None, bool]:
        """(calls in flight, summed from the xdist workers' reports?); None: not known here."""
        workers = self.state.worker_in_flight  # each worker's last report (see _roles.py)
        if workers:
            return sum(workers.values()), True
        if self.config.pluginmanager.hasplugin("dsession"):  # an xdist controller
            return None, False
        return local_in_flight(self.state), False

    def set_batch(self, text: str | None, done: int = 0, total: int = 0) -> None:
        """During batch judging: the batch's state in words (None when it is over)."""
        if text is not None and self.batch is None:
            self.batch_started = self.clock()
        self.batch, self.batch_done, self.batch_total = text, done, total
        if text is not None and self.mode == "plain":
            self._plain_due(force=False)

    def snapshot(self) -> Snapshot:
        now = self.clock()
        flight, from_workers = self.in_flight()
        return Snapshot(
            done=self.done,
            total=self.total(),
            errors=self.errors,
            elapsed_s=now - self.started,
            in_flight=flight,
            in_flight_from_workers=from_workers,
            cost_usd=self.cost,
            cost_unknown=self.cost_unknown,
            batch=self.batch,
            batch_done=self.batch_done,
            batch_total=self.batch_total,
            batch_elapsed_s=now - self.batch_started if self.batch is not None else 0.0,
            working_s=(
                now - self.working_from
                if self.working_from is not None and self.working_from > self.started
                else None
            ),
        )

    # -- output

    def start(self) -> None:
        self.started = self._last_plain = self.clock()
        self.mode = resolve_mode(self.config, self.mode, self.fd)
        if self.mode != "line":
            return
        fd = _terminal_fd(self.reporter, self.fd)
        if fd is None:
            self.mode = "plain"
            return
        try:
            self._bar = TerminalBar(fd)
            self.reporter.flush()  # what pytest wrote so far lands above the region
            self._bar.open(self.config.get_terminal_writer().width_of_current_line)
        except OSError:
            self._bar = None
            self.mode = "plain"
            return
        self._thread = threading.Thread(target=self._tick, name="agenteval-progress", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        last = ""
        bar = self._bar
        while bar is not None and not self._stop.wait(1 / REDRAWS_PER_SECOND):
            try:
                text = status_line(self.snapshot())
            except Exception:  # counting raced with the main thread: next tick
                continue
            if text == last:
                continue
            try:
                drawn = bar.draw(text)
            except OSError:
                drawn = False
            if not drawn:
                if bar.resized:  # the screen is given back; whole lines from now on
                    bar.close()
                    self.mode = "plain"
                return
            last = text

    def after_report(self) -> None:
        """Called after pytest has written an item's outcome: a plain line when one is due."""
        if self.mode == "plain":
            self._plain_due(force=False)

    def _plain_due(self, *, force: bool) -> None:
        now = self.clock()
        if not self.explicit and now - self.started < AUTO_PLAIN_AFTER_S:
            return
        total = self.total()
        step = max(1, math.ceil(total * PLAIN_STEP)) if total else 1
        done = self.batch_done if self.batch is not None else self.done
        by_count = done - self._last_plain_done >= step
        by_time = now - self._last_plain >= PLAIN_EVERY_S
        first = self._plain_lines == 0 and self.batch is not None
        if not (force or by_count or by_time or first):
            return
        if self.batch is None and total and self.done >= total:
            return  # the summary follows at once
        self._last_plain, self._last_plain_done = now, done
        self._plain_lines += 1
        self.write_line(status_line(self.snapshot()))

    def write_line(self, text: str) -> None:
        reporter = self.reporter
        if reporter is None:
            return
        with on_own_line(self.config, reporter):
            reporter.write_line(terminal_safe(text))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None


# --------------------------------------------------------------------------- pytest glue


@contextlib.contextmanager
def on_own_line(config: pytest.Config, reporter: Any) -> Iterator[None]:
    """Write to pytest's terminal *reporter* from anywhere in the run, an item's setup
    included (outside output capture), starting on a line of its own."""
    capman = config.pluginmanager.get_plugin("capturemanager")
    quiet = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
    with quiet:
        reporter.ensure_newline()  # pytest's file line: it starts it again after ours
        if config.get_terminal_writer().width_of_current_line:
            reporter.write("\n")  # xdist's dots, which have no file line
        yield


def progress_mode(config: pytest.Config) -> tuple[str, bool]:
    """(mode, explicit): ``--agenteval-progress`` / ini ``agenteval_progress``, checked."""
    from ._stash import STATE

    run = config.stash[STATE].settings
    return run.progress, run.progress_explicit


def resolve_mode(config: pytest.Config, requested: str, fd: int | None) -> str:
    """``auto`` made concrete for this process: line on a terminal, else plain; off for -qq."""
    if requested != "auto":
        return requested
    if config.get_verbosity() <= -2:
        return "off"
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return "off"
    return "line" if _terminal_fd(reporter, fd) is not None else "plain"


class ProgressPlugin:
    """The hooks of the progress line; registered with the run's hooks (see ``plugin.py``)."""

    def __init__(self, state: AgentevalState) -> None:
        self.state = state
        requested, explicit = progress_mode(state.config)
        self.progress: Progress | None = None
        if not state.is_worker and requested != "off":
            # "auto" is decided when the loop starts: the terminal reporter may not exist yet
            self.progress = Progress(state, requested, explicit=explicit)
            state.config.stash[PROGRESS] = self.progress

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        progress = self.progress
        if progress is None or session.config.option.collectonly:
            return (yield)
        progress.start()
        try:
            return (yield)
        finally:
            progress.stop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, Any]:
        report: pytest.TestReport = yield
        # an xdist worker tells the controller how many of its calls are in flight, and
        # once its share of the budget is used up (the controller then feeds it no more)
        if self.state.is_worker and getattr(report, "agenteval", None) is not None:
            from ._run import abandoned_calls

            report.agenteval_in_flight = local_in_flight(self.state)  # type: ignore[attr-defined]
            # calls abandoned at --subject-timeout that still run: should the worker crash,
            # the item it runs alone is not convicted on their account
            report.agenteval_abandoned = abandoned_calls()  # type: ignore[attr-defined]
            if self.state.scheduler.budget.refused:
                report.agenteval_out_of_budget = True  # type: ignore[attr-defined]
        return report

    @pytest.hookimpl(optionalhook=True, trylast=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """A worker's node ids announced (the aggregator took them first): counted now,
        so that the line has its total before the first report."""
        if self.progress is not None:
            self.progress.collected()

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        progress = self.progress
        if progress is not None:
            progress.report(report)
            progress.after_report()

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.progress is not None:
            self.progress.stop()  # the terminal is given back even after an internal error


__all__ = [
    "PROGRESS",
    "Progress",
    "ProgressPlugin",
    "Snapshot",
    "TerminalBar",
    "duration",
    "status_line",
    "time_left",
]

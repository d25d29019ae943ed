"""The hooks of a benchmark or calibration run, registered only when one is asked for.

``plugin.py`` decides in ``pytest_configure`` whether this process runs
agent benchmarks at all; only then does :func:`register_roles` register the
hooks of this process's roles, so a plain ``pytest`` in a project that merely
has the plugin installed never imports pydantic, YAML or a provider SDK.

* :class:`GraderHooks` (an xdist worker, or a serial run) build the judges and
  the subject, grade each item and put its record on the item's report;
* :class:`AggregatorHooks` (the xdist controller, or a serial run) hand every
  report to the :class:`~pytest_agenteval._aggregator.Aggregator`, which
  writes the evidence and decides the gate at the end of the session.

Both read the run's shared :class:`~pytest_agenteval._session.AgentevalState`
(in ``config.stash``).
"""

from __future__ import annotations

import functools
import inspect
import math
import shutil
import tempfile
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._collect import ScenarioItem, no_subject
from ._collector import QuietCollector
from ._cost import WORKER_BUDGET, WORKER_LEDGER, payload_usd
from ._golden_items import CalibrationItem
from ._grader import CONFIGURATION_ERROR, WORKER_STOPPED, setup_error_text
from ._run import MADE_AHEAD, made_ahead_fields
from .evidence._chain import json_safe_record

if TYPE_CHECKING:
    from ._aggregator import Aggregator
    from ._distribute import FedLoadScheduling
    from ._grader import Grader
    from ._session import AgentevalState

SUBJECT_FIXTURE = "agenteval_subject"
#: ``workeroutput`` key: the usage error that stopped an xdist worker before any item
WORKER_REFUSED = "agenteval_refused"
#: ``workeroutput`` key: a worker's paid calls in flight as it finished (Budget.open_calls)
WORKER_UNRECORDED = "agenteval_unrecorded"


class GraderHooks:
    """Hooks of the process that grades: an xdist worker, or a serial run."""

    def __init__(self, state: AgentevalState, grader: Grader, collector: QuietCollector) -> None:
        self.state = state
        self.grader = grader
        self.collector = collector
        #: an xdist worker's usage error at the end of collection (see below)
        self.refused: str | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Before pytest's own collections at the end (pytest 8.4+ makes one in a cleanup,
        9.1+ one in its pytest_unconfigure too), which look for exceptions in finalizers
        (``-W error`` makes one a failed run): everything unfrozen, so that they see all
        the run dropped (see :mod:`._collector`)."""
        self.collector.thaw()

    @pytest.hookimpl(trylast=True, specname="pytest_unconfigure")
    def pytest_unconfigure_refreeze(self, config: pytest.Config) -> None:
        """After pytest's pass in pytest_unconfigure (9.1+): what survived it frozen again, so
        that its pass in a cleanup walks only what is new."""
        self.collector.refreeze()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Build judges and subjects once collection found benchmark items.

        A missing key or an unknown judge kind is then a usage error before any
        item runs, and SDK imports happen at start-up, not during the first item.

        An xdist worker keeps its usage error (a ``--subject`` module that no conftest
        made importable, say) and runs nothing: raised here, xdist loses it in a "no
        active workers" INTERNALERROR. :meth:`pytest_runtestloop_refused` hands it to xdist as
        the worker's reason to stop, which the controller reports (``Interrupted: ...``).
        """
        try:
            self._build(session)
        except pytest.UsageError as exc:
            if not self.state.is_worker:
                raise
            self.refused = str(exc)
            # for the controller (pytest_testnodedown): a usage error, not an interrupted run
            session.config.workeroutput[WORKER_REFUSED] = self.refused  # type: ignore[attr-defined]

    @pytest.hookimpl(tryfirst=True, specname="pytest_runtestloop")
    def pytest_runtestloop_refused(self, session: pytest.Session) -> bool | None:
        if self.refused is None:
            return None
        session.shouldstop = self.refused
        return True  # the worker's own loop never runs: no item is taken

    def _build(self, session: pytest.Session) -> None:
        items = [i for i in session.items if isinstance(i, (ScenarioItem, CalibrationItem))]
        from ._scheduler import may_be_skipped

        # once, here, not for each look ahead (nor kept on each of 10,000 items)
        self.state.scheduler.may_skip = {i.nodeid for i in items if may_be_skipped(i)}
        # A run of benchmark items alone: the collector is quietened while it imports the
        # SDKs and runs the items (see _collector.py), until pytest_unconfigure.
        alone = bool(items) and len(items) == len(session.items)
        if alone and not session.config.option.collectonly:
            self.collector.start()
        if items:
            self.state.judges()
            if self.state.settings.judge_batch:
                from .judges._batch import check_items

                check_items(self.state, items)  # what --judge-batch cannot do: refused now
        first = next((i for i in items if isinstance(i, ScenarioItem)), None)
        if first is None or session.config.option.collectonly:
            return
        if self.state.subject_spec:
            self.state.spec_subject()
        if getattr(self.state, "replay", None) is None:  # replayed answers call no tool
            self.state.start_mcp(items)  # a server that does not start: usage error, now

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """An xdist worker hands the controller the runs it made ahead for items it never
        ran (-x, Ctrl-C): paid for, they go in those items' records (see the aggregator)."""
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is None:
            return
        made = {
            nodeid: made_ahead_fields(run)
            for nodeid, run in self.state.scheduler.all_made_ahead().items()
            if run.cost
        }
        if made:
            workeroutput[MADE_AHEAD] = made
        budget = self.state.scheduler.budget
        # paid calls in flight, to be cancelled, and what it spent: the controller sets
        # that against what the records it got hold (the rest, no record holds)
        workeroutput[WORKER_UNRECORDED] = [*budget.open_calls(), budget.spent]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        """With ``--judge-batch``: the calibration grades come from batches, gathered first."""
        if self.state.settings.judge_batch:
            from ._progress import PROGRESS
            from .judges._batch import run_batch_phase

            run_batch_phase(self.state, session, session.config.stash.get(PROGRESS, None))
        self.collector.freeze_since()  # what the judges and the subject made, too
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        if fixturedef.argname == SUBJECT_FIXTURE:
            self.state.note_subject_fixture(
                scope=fixturedef.scope, where=_where(fixturedef.func, self.state.config)
            )
        return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, Any]:
        report: pytest.TestReport = yield
        if not isinstance(item, (ScenarioItem, CalibrationItem)):
            return report
        if call.when == "setup" and report.skipped:  # skipped by a fixture or a marker
            run = self.state.scheduler.take_made_ahead(item.nodeid)
            if run is not None and run.cost:  # its calls were made ahead: they cost
                report.agenteval_made_ahead = made_ahead_fields(run)  # type: ignore[attr-defined]
        if call.when == "setup" and call.excinfo is not None and report.failed:
            message = setup_error_text(self.state, call.excinfo)
            report.longrepr = message
            if isinstance(item, ScenarioItem) and item.payload is None and not no_subject(message):
                item.payload = self.grader.error_payload_for(item, message)
        payload = getattr(item, "payload", None)
        if payload is not None and (
            call.when == "call" or (call.when == "setup" and not report.passed)
        ):
            # an xdist worker: plain JSON types only, as execnet cannot send -2**40 or a
            # datetime (kept as strings, noted in "converted"); a calibration row too, as
            # the metrics read it. A serial run's aggregator makes a benchmark record safe
            # and redacts it in one walk, as it writes the evidence.
            walk = self.state.is_worker or isinstance(item, CalibrationItem)
            report.agenteval = (  # type: ignore[attr-defined]
                json_safe_record(payload) if walk else payload
            )
            # the report carries it now, and pytest keeps every item to the end of the session
            item.payload = None
            if isinstance(item, ScenarioItem):
                item.run = None
        return report


class AggregatorHooks:
    """Hooks of the process where results meet: the xdist controller, or a serial run."""

    def __init__(self, state: AgentevalState, aggregator: Aggregator) -> None:
        self.state = state
        self.aggregator = aggregator
        self.fed: FedLoadScheduling | None = None  # the controller's scheduler, when ours

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Under xdist, before the workers start: the controller checks the MCP servers and
        warns when it cannot find a ``--subject`` module (see ``check_subject_spec``)."""
        if session.config.pluginmanager.hasplugin("dsession") and self.state.replay is None:
            self.state.check_subject_spec()
            self.state.probe_mcp()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """A serial run: the items to account for (a controller learns them from workers).
        The reports' modules are imported while the first calls are out (a controller's
        scheduler never waits: it imports them at its first record)."""
        items = [i for i in session.items if isinstance(i, (ScenarioItem, CalibrationItem))]
        self.aggregator.expect_items(items)
        if items and not session.config.option.collectonly:
            from ._aggregator import warm_reports

            self.state.scheduler.while_waiting(warm_reports)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.aggregator.collection_errors += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """A worker starting gets its share of the run's budget; a crashed one's replacement,
        what the crashed one had left (see :class:`~pytest_agenteval._cost.WorkerShares`)."""
        workers = int(node.workerinput.get("workercount", 1))
        budget = self.state.worker_shares.assign(node.gateway.id, workers)
        if budget is not None:
            node.workerinput[WORKER_BUDGET] = budget
        if self.state.ledger_dir is None:
            self.state.ledger_dir = Path(tempfile.mkdtemp(prefix="agenteval-ledgers-"))
            self.state.config.add_cleanup(
                functools.partial(shutil.rmtree, self.state.ledger_dir, ignore_errors=True)
            )
        node.workerinput[WORKER_LEDGER] = str(self.state.ledger_dir / node.gateway.id)

    @pytest.hookimpl(optionalhook=True, wrapper=True)
    def pytest_xdist_make_scheduler(
        self, config: pytest.Config, log: Any
    ) -> Generator[None, Any, Any]:
        """xdist's own ``--dist load`` becomes one that keeps each worker's queue as deep as
        its calls in flight need (``_distribute.py``). Whatever else answered (another
        mode, a conftest's or a plugin's own scheduler) is left as it is."""
        made = yield
        from ._distribute import FedLoadScheduling, fed_instead

        sched = fed_instead(made, config, log, self.state.settings.concurrency)
        self.fed = sched if isinstance(sched, FedLoadScheduling) else None
        return sched

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        output = getattr(node, "workeroutput", {})
        made = output.get(MADE_AHEAD)
        worker = node.gateway.id
        if isinstance(made, dict):  # runs made ahead for items the worker never ran
            self.aggregator.made_ahead.update(made)
            self._reported(worker, *made.values())
        in_flight = self.state.worker_in_flight.pop(worker, 0)
        if error is not None:  # crashed: xdist may start a replacement
            self.state.worker_shares.crashed(worker)
            self.state.crashed_workers += 1
            self.state.crashed_in_flight[worker] = in_flight  # what its last report said
        unrecorded = output.get(WORKER_UNRECORDED)
        if (
            isinstance(unrecorded, list)
            and len(unrecorded) == 4
            and all(type(x) in (int, float) and math.isfinite(x) for x in unrecorded)
        ):
            calls, usd, unpriced, spent = unrecorded
            self.state.worker_unrecorded[worker] = (
                int(calls),
                float(usd),
                int(unpriced),
                float(spent),
            )
        refused = output.get(WORKER_REFUSED)
        if isinstance(refused, str):  # a worker's usage error (see GraderHooks)
            self.state.stop_reason = WORKER_REFUSED
        stopped = output.get(WORKER_STOPPED)  # a configuration error a worker's call found
        if isinstance(stopped, str) and not self.state.stop_reason:
            self.state.stop_reason = stopped

    def _reported(self, worker: str, *records: dict[str, Any]) -> None:
        """What records that reached this process from *worker* cost: its share's spend so
        far, and at the end what its own spend is set against (``unrecorded_calls``)."""
        for record in records:
            usd = payload_usd(record, self.state.rates)
            if usd:
                self.state.worker_shares.spend(worker, usd)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        """The item xdist blames for a worker's crash runs again, alone, when other items'
        calls may have been in flight in that worker (``_distribute.py``).

        A benchmark item the crash leaves without a grade is an ERROR, in pytest's own
        summary too: xdist reports it failed (``when`` "???", which pytest counts as a
        failed test); it is reported as failed in its setup, which pytest counts as an
        error, as every report of ours says."""
        from ._distribute import FedLoadScheduling

        if isinstance(sched, FedLoadScheduling):
            self._suspect(crashitem, report, sched)
        graded = crashitem in self.aggregator.reported  # a crash after it: its grade stands
        if report.outcome == "failed" and not graded and self.aggregator.ours(crashitem):
            report.agenteval_crashed = True
            report.when = "setup"

    def _suspect(self, crashitem: str, report: Any, sched: Any) -> None:
        graded = crashitem in self.aggregator.reported
        if sched.rerun(crashitem, graded=graded, replaced=_worker_replaced(self.state.config)):
            report.outcome = "rerun"
        elif graded:  # its grade stands: the crash came after it, from a call started ahead
            report.outcome = "passed"
            report.agenteval_after_grade = True
            self.state.announce(
                f"agenteval: worker {report.node.gateway.id} crashed after {crashitem} was "
                "graded: its grade stands, and the items whose calls were in flight run "
                "again, each alone"
            )
        elif crashitem in sched.convicted:
            report.agenteval_crashed_alone = True

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller learns which items a worker will run (to account for lost ones)."""
        self.aggregator.expect_ids(ids)

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, str | tuple[str, dict[str, bool]]] | None:
        if str(report.outcome) == "rerun":  # a crashed worker's item, to run again alone
            return "rerun", "R", ("RERUN", {"yellow": True})
        if getattr(report, "agenteval_after_grade", False):  # xdist's report of a crash that
            return "", "", ""  # came after the item's grade: not an outcome of the item
        payload = getattr(report, "agenteval", None)
        if (
            isinstance(payload, dict)
            and report.when == "call"
            and report.passed
            and payload.get("result", {}).get("verdict") == "warn"
        ):
            return "warned", "W", ("WARN", {"yellow": True})
        return None

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.aggregator.started = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """First, so that other plugins' hooks find the record made JSON-safe and redacted."""
        self.aggregator.record(report)
        node = getattr(report, "node", None)  # a worker's report, on the controller
        record = getattr(report, "agenteval", None)
        ahead = getattr(report, "agenteval_made_ahead", None)  # a skipped item's, paid for
        if node is not None and isinstance(ahead, dict):
            self._reported(node.gateway.id, ahead)
        if node is not None and isinstance(record, dict):
            flight = getattr(report, "agenteval_in_flight", None)
            if isinstance(flight, int):
                self.state.worker_in_flight[node.gateway.id] = flight
            self._reported(node.gateway.id, record)
            if self.fed is not None:
                abandoned = getattr(report, "agenteval_abandoned", 0)
                self.fed.calls_abandoned(node, abandoned if isinstance(abandoned, int) else 0)
            if getattr(report, "agenteval_out_of_budget", False) and self.fed is not None:
                self.fed.out_of_budget(node)

    @pytest.hookimpl(wrapper=True, specname="pytest_runtest_logreport")
    def pytest_runtest_logreport_slim(self, report: pytest.TestReport) -> Generator[None, Any, Any]:
        """Last, once every plugin (pytest-html, the terminal) has read the whole record."""
        try:
            return (yield)
        finally:
            self.aggregator.slim(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.state.stop_reason == "no subject":
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        # a worker's usage error, or a configuration error its calls found (xdist printed
        # it): a usage error of the run, whose evidence is kept if items were graded
        reason = self.state.stop_reason or ""
        refused = reason == WORKER_REFUSED or reason.startswith(CONFIGURATION_ERROR)
        if refused:
            session.exitstatus = exitstatus = pytest.ExitCode.USAGE_ERROR
        if not self.aggregator.has_work(usage_error=exitstatus == pytest.ExitCode.USAGE_ERROR):
            return
        self.aggregator.finish(session, exitstatus)
        # the gate decides only over OK or TESTS_FAILED: a usage error stays one
        session.exitstatus = self.aggregator.exitstatus(session.exitstatus)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from ._text import SafeTerminal
        from .reports._terminal import write_calibration, write_condition_comparison, write_summary

        terminalreporter = SafeTerminal(terminalreporter)
        cwd = Path(self.state.config.invocation_params.dir)
        outcomes = self.aggregator.outcomes
        if outcomes:
            write_summary(
                terminalreporter,
                outcomes,
                judge_label=self.state.judge_label(),
                cwd=cwd,
                redact=self.state.redactor.text,
            )
            # ::error lines for GitHub Actions (GITHUB_ACTIONS=true)
            self.state.pr.write_annotations(terminalreporter, outcomes)
            write_condition_comparison(terminalreporter, outcomes)
        if self.aggregator.calibration_outcomes:
            write_calibration(terminalreporter, self.aggregator.calibration_outcomes, cwd=cwd)


def register_roles(config: pytest.Config, state: AgentevalState) -> None:
    """Register the hooks of this process's roles; set ``state.grader`` and ``state.aggregator``.

    As in pytest-xdist (``WorkerInteractor`` grades, ``DSession`` gathers): a
    worker grades, the controller aggregates, a serial run does both.
    """
    from ._aggregator import Aggregator
    from ._grader import Grader

    # GraderHooks.pytest_unconfigure gives the collector back before pytest's own
    # collections at the end; this cleanup does, should that hook not be reached.
    collector = QuietCollector()
    config.add_cleanup(collector.stop)
    config.add_cleanup(state.close)
    # where xdist registers its DSession (its _is_distribution_mode, and not --collect-only):
    # this process then collects and runs nothing. ``--dist load`` without -n or --tx runs
    # the items here, as a serial run.
    controller = (
        not state.is_worker
        and config.getoption("dist", "no") != "no"
        and bool(config.getoption("tx", None))
        and not config.option.collectonly
    )
    if not controller:
        state.grader = Grader(state)
        config.pluginmanager.register(
            GraderHooks(state, state.grader, collector), "agenteval-grader"
        )
    if not state.is_worker:
        state.aggregator = Aggregator(state)
        config.pluginmanager.register(
            AggregatorHooks(state, state.aggregator), "agenteval-aggregator"
        )


def _where(func: Any, config: pytest.Config) -> str:
    """``file:line`` of a fixture function, relative to the rootdir where possible."""
    try:
        target = inspect.unwrap(func)
        path = Path(inspect.getsourcefile(target) or "?")
        line = target.__code__.co_firstlineno
    except (TypeError, AttributeError):
        return repr(func)
    try:
        shown = path.resolve().relative_to(Path(config.rootpath).resolve()).as_posix()
    except ValueError:
        shown = str(path)
    return f"{shown}:{line}"


__all__ = ["SUBJECT_FIXTURE", "AggregatorHooks", "GraderHooks", "register_roles"]


def _worker_replaced(config: pytest.Config) -> bool:
    """Will xdist start a worker in place of the one that just crashed? Not once its
    ``--max-worker-restart`` is reached: it stops the run, and an item put back in the
    queue would never run. (xdist keeps the count on its session, as it stands before
    this crash; unknown: no.)"""
    dsession = config.pluginmanager.get_plugin("dsession")
    crashes = getattr(dsession, "_failed_nodes_count", None)
    limit = getattr(dsession, "_max_worker_restart", 0)
    return isinstance(crashes, int) and (limit is None or crashes + 1 <= limit)

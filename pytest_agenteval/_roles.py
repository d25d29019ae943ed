"""The hooks of a benchmark or calibration run, registered only when one is asked for.

``plugin.py`` decides in ``pytest_configure`` whether this process runs
agent benchmarks at all; only then is :class:`RunPlugin` registered, so a
plain ``pytest`` in a project that merely has the plugin installed never
imports pydantic, YAML or a provider SDK. Each hook delegates to the
process's :class:`~pytest_agenteval._session.AgentevalState` (in
``config.stash``): under xdist the worker grades, the controller aggregates,
and every report reaches the controller's ``pytest_runtest_logreport``.
"""

from __future__ import annotations

import inspect
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._collect import ScenarioItem, no_subject
from ._golden_items import CalibrationItem
from .evidence._chain import json_safe_record

if TYPE_CHECKING:
    from ._session import AgentevalState

SUBJECT_FIXTURE = "agenteval_subject"


class RunPlugin:
    """Hooks of one pytest process taking part in an agenteval run."""

    def __init__(self, state: AgentevalState) -> None:
        self.state = state

    # ---------------------------------------------------------------- collection

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Build judges and subjects once collection found benchmark items.

        A missing key or an unknown judge kind is then a usage error before any
        item runs, and SDK imports happen at start-up, not during the first item.
        """
        items = [i for i in session.items if isinstance(i, (ScenarioItem, CalibrationItem))]
        self.state.expect_items(items)
        if items:
            self.state.judges()
            from .judges._batch import check_items

            check_items(self.state, items)  # what --judge-batch cannot do: refused now
        first = next((i for i in items if isinstance(i, ScenarioItem)), None)
        if first is None or session.config.option.collectonly:
            return
        if self.state.subject_spec:
            self.state.spec_subject()
        if getattr(self.state, "replay", None) is None:  # replayed answers call no tool
            self.state.start_mcp(items)  # a server that does not start: usage error, now

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Under xdist, before the workers start: the controller checks the MCP servers."""
        if (
            not self.state.is_worker
            and session.config.pluginmanager.hasplugin("dsession")
            and getattr(self.state, "replay", None) is None
        ):
            self.state.probe_mcp()

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.state.collection_errors += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """The controller learns which items a worker will run (to account for lost ones)."""
        self.state.expect_ids(ids)

    # ---------------------------------------------------------------- grading

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        """With ``--judge-batch``: the calibration grades come from batches, gathered first."""
        from .judges._batch import batch_options, run_batch_phase

        if batch_options(session.config).enabled:
            from ._progress import PROGRESS

            run_batch_phase(self.state, session, session.config.stash.get(PROGRESS, None))
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
        if call.when == "setup" and call.excinfo is not None and report.failed:
            message = self.state.setup_error_text(item, call.excinfo)
            report.longrepr = message
            if isinstance(item, ScenarioItem) and item.payload is None and not no_subject(message):
                item.payload = self.state.error_payload_for(item, message)
        payload = getattr(item, "payload", None)
        if payload is not None and (
            call.when == "call" or (call.when == "setup" and not report.passed)
        ):
            # plain JSON types only: execnet cannot send -2**40 or a datetime, and the
            # evidence cannot hold NaN or 2**70 (kept as strings, noted in "converted")
            report.agenteval = json_safe_record(payload)  # type: ignore[attr-defined]
            # the report carries it now, and pytest keeps every item to the end of the session
            item.payload = None
            if isinstance(item, ScenarioItem):
                item.run = None
        return report

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        payload = getattr(report, "agenteval", None)
        if (
            isinstance(payload, dict)
            and report.when == "call"
            and report.passed
            and payload.get("result", {}).get("verdict") == "warn"
        ):
            return "warned", "W", ("WARN", {"yellow": True})
        return None

    # ---------------------------------------------------------------- aggregation

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.state.record(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.state.stop_reason == "no subject" and not self.state.is_worker:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        if self.state.is_worker or not self.state.has_work():
            return
        self.state.finish(session, exitstatus)
        session.exitstatus = self.state.exitstatus(session.exitstatus)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        from ._text import SafeTerminal
        from .reports._terminal import write_calibration, write_condition_comparison, write_summary

        terminalreporter = SafeTerminal(terminalreporter)
        if self.state.outcomes:
            write_summary(terminalreporter, self.state)
            write_condition_comparison(terminalreporter, self.state)
        if self.state.calibration_outcomes:
            write_calibration(terminalreporter, self.state)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.state.close()


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


__all__ = ["SUBJECT_FIXTURE", "RunPlugin"]

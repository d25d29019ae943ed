"""The grader: one per process that runs items (an xdist worker, or a serial run).

An item's setup asks :meth:`Grader.grade` for its grade: the scheduler has
usually started it already, while earlier items were reported. The grade
becomes the item's record (plain JSON), which travels
on the item's report to wherever the
:class:`~pytest_agenteval._aggregator.Aggregator` is. Records of items that
never graded (a raising fixture, a crashed worker) come from
:func:`error_record`, so every collected item has one.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._collect import ScenarioItem
from ._evals import EvalResult
from ._replay import ReplayLog
from ._scheduler import upcoming_items
from ._session import ItemRef, ref_of
from ._text import last_line, terminal_safe
from ._tracebacks import describe_exception
from ._vocab import VERDICTS, ItemError
from .judges._base import ConfigError

if TYPE_CHECKING:
    from ._session import AgentevalState

PAYLOAD_VERSION = 1


def _replayed(replay: ReplayLog | None, items: list[Any]) -> list[Any]:
    """Of the items to start ahead, those with a recorded answer (all, without --replay)."""
    if replay is None:
        return items
    return [i for i in items if not isinstance(i, ScenarioItem) or _recorded_for(replay, i)]


def _recorded_for(replay: ReplayLog, item: ScenarioItem) -> Any:
    cond = item.condition.name if item.condition else None
    return replay.lookup(item.scenario.id, cond, item.sample)


def setup_error_text(run: AgentevalState, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
    """A short, redacted message for an item whose setup failed.

    Our own errors are already one line. Anything else (a raising
    ``agenteval_subject`` fixture, a missing fixture, a bug) is shown as
    the exception and the frames of the user's code, not pytest's.
    """
    exc = excinfo.value
    if isinstance(exc, (ItemError, pytest.skip.Exception)):
        text = str(exc)
    elif isinstance(exc, pytest.FixtureLookupError):
        text = f"fixture lookup failed: {last_line(str(exc))}"
    else:
        text = describe_exception(exc, Path(run.config.rootpath))
    return terminal_safe(run.redactor.text(text))


def error_record(
    run: AgentevalState, ref: ItemRef, message: str, subject: str, *, skipped: bool = False
) -> dict[str, Any]:
    """The record of an item that has no grade: an error, with the scenario it stands for
    (or, *skipped*, an item skipped before it was asked, *message* its reason)."""
    family = (
        run.single_family(Path(ref.family_root))
        if ref.single_file
        else run.family(Path(ref.family_root))
    )
    article = next(a for a in family.articles if any(s.id == ref.scenario_id for s in a.scenarios))
    scenario = next(s for s in article.scenarios if s.id == ref.scenario_id)
    from ._run import _leaf_meta as leaf_meta

    result = EvalResult(
        key=scenario.id,
        name=scenario.id,
        score=None,
        verdict="skipped" if skipped else "error",
        kind="scenario",
        weight=float(scenario.weight),
        reasoning=message if skipped else "",
        error=None if skipped else message,
        meta=leaf_meta(family, article, scenario),
    )
    return {
        "v": PAYLOAD_VERSION,
        "family": family.name,
        "family_root": ref.family_root,
        "single_file": ref.single_file,
        "preset": ref.preset,
        "scenario_id": scenario.id,
        "condition": ref.condition,
        "sample": ref.sample,
        "nodeid": ref.nodeid,
        "subject": subject,
        "result": result.to_dict(),
        "prompt": scenario.input,
        "answer": None,
        "tool_calls": [],
        "usage": {},
        "cost": None,
        "timings": {"subject_s": None, "judge_s": None},
    }


#: An item's verdict as a user property (JUnit XML's properties): one tuple per verdict,
#: as pytest keeps every item's properties (in each of its reports) to the end of the run.
_VERDICT_PROPERTIES = {v: ("agenteval_verdict", v) for v in VERDICTS}


@functools.lru_cache(maxsize=1024)
def _score_property(score: float) -> tuple[str, str]:
    """An item's score as a user property, one tuple per score: scores repeat (the share of
    criteria met, a judge's steps), so a long run holds each once, not once per item."""
    return ("agenteval_score", f"{score:.4f}")


#: ``workeroutput`` key: the configuration error that stopped an xdist worker mid-run
WORKER_STOPPED = "agenteval_stopped"
#: How the run's stop reason begins when a call found a configuration error
CONFIGURATION_ERROR = "configuration error: "


def stop_at_configuration_error(run: AgentevalState, item: pytest.Item, exc: Exception) -> str:
    """The run stops at *exc*, a configuration error found by a call (a key refused, a model
    unknown): no more calls are worth sending. A serial run exits here (a usage error).

    On an xdist worker, ``pytest.exit`` inside an item ends the worker with that item
    unfinished, which xdist takes for a crash and loses, with the message, in an
    INTERNALERROR (``assert not crashitem``). The worker instead stops after this item
    (``session.shouldstop``, which xdist hands to the controller, which then stops the
    other workers and the run, saying why) and names the error for the controller's exit
    status (:data:`WORKER_STOPPED`). Returns the message of this item's error."""
    run.stop_reason = f"{CONFIGURATION_ERROR}{exc}"
    message = f"agenteval {run.stop_reason}"
    if not run.is_worker:
        pytest.exit(message, returncode=pytest.ExitCode.USAGE_ERROR)
    item.session.shouldstop = message
    item.config.workeroutput[WORKER_STOPPED] = run.stop_reason  # type: ignore[attr-defined]
    return f"not evaluated: the run stopped ({run.stop_reason})"


class Grader:
    """Turns this process's items into records, through the run's scheduler."""

    def __init__(self, run: AgentevalState) -> None:
        self.run = run

    def grade(self, item: ScenarioItem, fixture_value: Any = None) -> None:
        subject = self.run.subject_for(item, fixture_value)
        judges = self.run.judges()
        upcoming = (
            upcoming_items(item, 4 * self.run.scheduler.window) if self.run.subject_shared else []
        )
        try:
            run = self._not_replayed(item) or self.run.scheduler.run(
                item, subject, judges, _replayed(self.run.replay, upcoming)
            )
        except ConfigError as exc:
            self.run.scheduler.cancel_pending()  # clients close in close(), on this loop
            why = stop_at_configuration_error(self.run, item, exc)
            item.payload = self.error_payload_for(item, why)
            raise ItemError(f"{item.scenario.id}: {why}") from None
        item.run = run
        result = run.result
        item.payload = self._payload(item, run)
        if result.score is not None:
            item.user_properties.append(_score_property(result.score))
        item.user_properties.append(
            _VERDICT_PROPERTIES.get(result.verdict) or ("agenteval_verdict", result.verdict)
        )
        if result.verdict == "error":
            raise ItemError(f"{item.scenario.id}: {result.error}")
        if result.verdict == "skipped":
            pytest.skip(result.reasoning or "nothing to grade")

    def _payload(self, item: ScenarioItem, run: Any) -> dict[str, Any]:
        return {
            "v": PAYLOAD_VERSION,
            "family": item.family.name,
            "family_root": str(item.article.path if item.family.single_file else item.family.root),
            "single_file": item.family.single_file,
            "preset": item.plan.preset,
            "scenario_id": item.scenario.id,
            "condition": item.condition.name if item.condition else None,
            "sample": item.sample,
            "nodeid": item.nodeid,
            "subject": self.run.subject_name(),
            "subject_origin": self.run.subject_origin,
            "result": run.result.to_dict(),
            "prompt": item.scenario.input,
            "answer": run.answer,
            "tool_calls": list(run.tool_calls),
            "usage": dict(run.usage),
            "cost": run.cost,
            "timings": {"subject_s": run.subject_latency_s, "judge_s": run.judge_latency_s},
            **self._replay_field(item),
            **self._mcp_fields(item, run),
        }

    def _mcp_fields(self, item: ScenarioItem, run: Any) -> dict[str, Any]:
        """Under a condition with MCP servers: the item's tool calls, the tool loop's account,
        and what the servers reported (for the controller's manifest; not in the record)."""
        cond = item.condition
        if cond is None or not cond.mcp_servers:
            return {}
        return {
            "mcp_calls": list(getattr(run, "mcp_calls", ())),
            "tool_loop": getattr(run, "tool_loop", None),
            "mcp_servers": self.run.mcp_reported.get(cond.name, {}),
        }

    def _not_replayed(self, item: ScenarioItem) -> Any:
        """A skipped run for an item the replay file has no answer for (None otherwise)."""
        if self.run.replay is None or _recorded_for(self.run.replay, item) is not None:
            return None
        from ._replay import not_replayed_reason
        from ._run import ScenarioRun
        from ._run import _leaf_meta as leaf_meta

        cond = item.condition.name if item.condition else None
        reason = not_replayed_reason(self.run.replay, item.scenario.id, cond, item.sample)
        result = EvalResult(
            key=item.scenario.id,
            name=item.scenario.id,
            score=None,
            verdict="skipped",
            kind="scenario",
            weight=float(item.scenario.weight),
            reasoning=reason,
            meta={**leaf_meta(item.family, item.article, item.scenario), "not_replayed": True},
        )
        return ScenarioRun(result, None, (), {}, None, None)

    def _replay_field(self, item: ScenarioItem) -> dict[str, Any]:
        """``replay``: the file and line a replayed item's answer came from."""
        if self.run.replay is None:
            return {}
        rec = _recorded_for(self.run.replay, item)
        where = {"file": self.run.replay.shown, "sha256": self.run.replay.sha256}
        return {"replay": {**where, "line": rec.line if rec is not None else None}}

    def error_payload_for(self, item: ScenarioItem, message: str) -> dict[str, Any]:
        """The record of an item that errored before any grade (so nothing is lost)."""
        return error_record(self.run, ref_of(item), message, self.run.subject_name())

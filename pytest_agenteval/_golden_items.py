"""Calibration items: each golden entry graded by the configured judge.

Collected only when asked for (``-m calibration`` or a golden file named on
the command line). An item passes when the judge's verdict — computed from
its score with the article's bands — equals the label and the score lies in
the labelled band. A judge that fails is an ERROR (an evaluation failure),
never a disagreement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._checks import Check
from ._cost import BudgetExceeded
from ._evals import EvalResult, band_verdict, combine_gradings
from ._family import Article, Family
from ._run import NO_LIMIT
from ._spec import Scenario
from ._stash import STATE
from ._vocab import AgentevalError, ConfigError, ItemError, SpecError
from .judges._base import (
    CriterionSpec,
    GradeRequest,
    Judge,
    criteria_from,
    grade_to_result,
    is_deterministic,
)
from .subjects._base import Response

if TYPE_CHECKING:  # the golden-file loader is imported when a golden file is collected
    from ._golden import GoldenEntry, Triage
    from ._scheduler import Scheduler


class CalibrationMismatch(AgentevalError, AssertionError):
    """A FAIL outcome of a calibration item: the judge disagreed with the label."""


_TOOL_CHECKS = {"tool_called", "no_tool_called"}


def _about_tool_calls(check: Check) -> bool:
    if check.kind in _TOOL_CHECKS:
        return True
    inner = check.arg if isinstance(check.arg, tuple) else (check.arg,)
    return any(isinstance(c, Check) and _about_tool_calls(c) for c in inner)


def _scenario_context(scenario: Scenario | None) -> dict[str, object]:
    """What the agent saw in the real scenario (system prompt, earlier turns, tools)."""
    if scenario is None:
        return {}
    from ._run import seen_by_subject

    return seen_by_subject(scenario)


class GoldenCollector(pytest.Collector):
    """One golden ``.jsonl`` file (not a ``pytest.File``: see ArticleCollector)."""

    def collect(self) -> Iterator[CalibrationItem]:
        """One item per entry and repetition; an entry the family cannot grade (unknown
        article or scenario, see :func:`~pytest_agenteval._golden.triage`) is one
        :class:`SkippedEntry`, so that it is counted and kept in the evidence, never
        a whole-file error."""
        from ._golden import load_golden, triage

        state = self.config.stash[STATE]
        try:
            golden = load_golden(self.path)
            family = state.family_for_golden(self.path, golden.entries)
            triaged = triage(golden, family)
            state.claim_golden_ids(family, golden.entries)
            state.note_golden_file(family, self.path)
        except (SpecError, ValueError) as exc:
            raise self.CollectError(str(exc)) from None
        state.register_markers(family)
        repeat = state.calibration_repeat
        for t in triaged:
            if t.skip is not None or t.control_id is None:
                yield SkippedEntry.from_parent(self, name=t.entry.id, family=family, triaged=t)
                continue
            article = family.article(t.control_id)
            for rep in range(repeat):
                name = t.entry.id if repeat == 1 else f"{t.entry.id}[r{rep}]"
                item = CalibrationItem.from_parent(
                    self,
                    name=name,
                    family=family,
                    article=article,
                    entry=t.entry,
                    repetition=rep,
                )
                item.prompt_mismatch = t.prompt_mismatch
                yield item

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, self.name


class CalibrationItem(pytest.Item):
    #: The entry names a scenario whose prompt is not its ``input``: graded
    #: against the article's substance rubric instead (set by the collector).
    prompt_mismatch: bool = False

    def __init__(
        self,
        *,
        family: Family,
        article: Article,
        entry: GoldenEntry,
        repetition: int,
        **kwargs: Any,  # from_parent's: name, parent
    ) -> None:
        super().__init__(**kwargs)
        self.family, self.article, self.entry, self.repetition = family, article, entry, repetition
        self.payload: dict[str, object] | None = None
        self.graded: EvalResult | None = None  # the judges' grade, once setup has it
        self.actual: str | None = None  # its verdict under the article's bands
        for marker in ("calibration", family.name, article.meta.pillar):
            self.add_marker(marker)

    def scenario(self) -> Scenario | None:
        if self.prompt_mismatch:
            return None  # another prompt: the scenario's criteria and context do not apply
        for art in self.family.articles:
            for scenario in art.scenarios:
                if scenario.id == self.entry.scenario_id:
                    return scenario
        return None

    def criteria(self) -> tuple[CriterionSpec, ...]:
        """The real scenario's criteria, else the article's substance rubric.

        A golden answer is text: checks on structured tool calls cannot see the
        calls it describes, so those criteria are left to an LLM judge.
        """
        scenario = self.scenario()
        if scenario is not None:
            return tuple(
                replace(c, check=None) if c.check is not None and _about_tool_calls(c.check) else c
                for c in criteria_from(scenario.evaluation_criteria)
            )
        if not self.article.meta.rubric:
            raise ItemError(
                f"{self.entry.id}: synthetic entry for {self.article.control_id}, which declares "
                "no substance rubric (metadata.rubric)"
            )
        return criteria_from(self.article.meta.rubric)

    def grade_request(self) -> GradeRequest:
        """What the judges are asked for this entry (the same live and in a batch)."""
        criteria = self.criteria()
        return GradeRequest(
            scenario_id=self.entry.scenario_id,
            prompt=self.entry.input,
            answer=Response(self.entry.response).answer(),
            expected_behavior="",
            criteria=criteria,
            context={
                "family": self.family.name,
                "article": self.article.meta.article,
                "control_id": self.article.control_id,
                "title": self.article.meta.title,
                "severity": self.article.meta.severity,
                "judge_prompt": self.family.judge_prompt,
                "repetition": self.repetition,
                "calibration": True,
                **_scenario_context(self.scenario()),
            },
        )

    def setup(self) -> None:
        from .judges._batch import batched_judges

        state = self.config.stash[STATE]
        # with --judge-batch, a judge's grade comes from its batch (gathered before the loop)
        judges = batched_judges(self.config, self.nodeid, state.judges())
        request = self.grade_request()
        try:
            result = state.scheduler.run_coro(self._grade(judges, request, state.scheduler))
        except ConfigError as exc:
            from ._grader import stop_at_configuration_error

            why = stop_at_configuration_error(state, self, exc)
            raise ItemError(f"{self.entry.id}: {why}") from None
        actual = (
            band_verdict(result.score, self.article.bands) if result.score is not None else None
        )
        self.graded, self.actual = result, actual
        self.payload = {
            "v": 1,
            "kind": "calibration",
            "family": self.family.name,
            "family_root": str(self.family.root),
            "pillar": self.article.meta.pillar,
            "id": self.entry.id,
            "scenario_id": self.entry.scenario_id,
            "article": self.article.control_id,
            "file": self.entry.path.name,
            "line": self.entry.line,
            "expected": self.entry.expected_verdict,
            "min": self.entry.score_min,
            "max": self.entry.score_max,
            "score": result.score,
            "actual": actual,
            "split": self.entry.split,
            "repetition": self.repetition,
            "stratum": self.entry.stratum,
            "adversarial": self.entry.adversarial,
            "labels": list(self.entry.labels),
            "prompt_mismatch": self.prompt_mismatch,
            "rationale": self.entry.rationale,  # shown beside the judge's reasoning on a disagreement
            "judge": " + ".join(getattr(j, "name", "judge") for j in judges),
            "verdict": result.verdict,
            "error": result.error,
            "reasoning": result.reasoning,
            "criteria": [c.to_dict() for c in result.criteria],
            "judge_meta": dict(result.meta),
            "subject": "calibration-" + "+".join(getattr(j, "name", "judge") for j in judges),
            "nodeid": self.nodeid,
        }
        if result.verdict == "error":
            raise ItemError(f"{self.entry.id}: judge error (evaluation failure): {result.error}")
        if result.verdict == "skipped":
            self.payload["actual"] = None
            pytest.skip(f"{self.entry.id}: {result.reasoning}")

    async def _grade(
        self, judges: Sequence[Judge], request: GradeRequest, scheduler: Scheduler
    ) -> EvalResult:
        """One judge, or several combined by weighted median as in benchmark runs. A live
        call takes one of the run's slots (``--agenteval-concurrency``) and is not made once
        the budget is spent (``--agenteval-max-cost``), as a benchmark item's; each grade is
        charged (a batch's when the batch phase collects it, at the batch price)."""
        from .judges._batch import BatchedGrade, grade_cost

        async def one(judge: Judge) -> EvalResult:
            name = getattr(judge, "name", "judge")
            live = not isinstance(judge, BatchedGrade) and not is_deterministic(judge)
            async with scheduler.limiter if live else NO_LIMIT:
                try:
                    bill = scheduler.budget.reserve(
                        name, paid=live and bool(getattr(judge, "billable", True))
                    )
                except BudgetExceeded as exc:
                    return EvalResult(
                        self.entry.id, name, None, "error", kind="scenario", error=str(exc)
                    )
                with bill:
                    graded = await grade_to_result(
                        judge,
                        request,
                        key=self.entry.id,
                        name=name,
                        bands=self.article.bands,
                        severity=self.article.meta.severity,
                    )
                    if not isinstance(judge, BatchedGrade):  # a batch's: charged as collected
                        bill.charge_used(grade_cost(graded.meta, name, scheduler.rates))
            return graded

        graded = await asyncio.gather(*(one(judge) for judge in judges))
        if len(graded) == 1:
            return graded[0]
        return combine_gradings(
            self.entry.id,
            self.entry.id,
            [
                replace(r, kind="judge", key=f"{r.meta.get('judge', 'judge')}#{i}")
                for i, r in enumerate(graded)
            ],
            aggregation="weighted_median",
            bands=self.article.bands,
            severity=self.article.meta.severity,
        )

    def _in_band(self) -> bool:
        score = self.graded.score if self.graded is not None else None
        return score is not None and self.entry.score_min <= score <= self.entry.score_max

    def runtest(self) -> None:
        assert self.graded is not None
        if self.actual != self.entry.expected_verdict or not self._in_band():
            raise CalibrationMismatch()

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: object = None
    ) -> str:
        if isinstance(excinfo.value, CalibrationMismatch) and self.graded is not None:
            e, graded = self.entry, self.graded
            score = "-" if graded.score is None else f"{graded.score:.2f}"
            lines = [
                f"{self.family.name} ▸ {self.article.meta.pillar} ▸ {self.article.control_id} "
                f"▸ {e.id}" + (f" (adversarial: {e.adversarial})" if e.adversarial else ""),
                f"expected: {e.expected_verdict.upper():<5} score in "
                f"[{e.score_min:.2f}, {e.score_max:.2f}]",
                f"actual:   {str(self.actual).upper():<5} score {score}"
                + ("" if self._in_band() else "  (outside the band)"),
                f"label rationale: {e.rationale}",
            ]
            if graded.reasoning:
                lines.append(f"judge: {graded.reasoning}")
            return self.config.stash[STATE].redactor.text("\n".join(lines))
        if isinstance(excinfo.value, ItemError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.entry.path, self.entry.line - 1, f"calibration::{self.entry.id}"


class SkippedEntry(CalibrationItem):
    """A golden entry its family cannot grade: skipped with its reason, and counted.

    AgentEval's own runner skips such entries (an article it does not have);
    here each stays visible — a skipped item with the reason, a record in the
    evidence, a count per reason in calibration.json and the terminal — and
    the rest of the file runs.
    """

    def __init__(self, *, family: Family, triaged: Triage, **kwargs: Any) -> None:  # from_parent's
        pytest.Item.__init__(self, **kwargs)  # no article to take markers from
        self.family, self.entry, self.triaged, self.repetition = family, triaged.entry, triaged, 0
        self.payload = None
        self.prompt_mismatch = triaged.prompt_mismatch
        art = family.resolve(triaged.control_id) if triaged.control_id else None
        self.pillar = art.meta.pillar if art is not None else None
        for marker in ("calibration", family.name, *([self.pillar] if self.pillar else [])):
            self.add_marker(marker)

    def setup(self) -> None:
        judges = self.config.stash[STATE].judges()
        e, t = self.entry, self.triaged
        self.payload = {
            "v": 1,
            "kind": "calibration",
            "family": self.family.name,
            "family_root": str(self.family.root),
            "pillar": self.pillar,
            "id": e.id,
            "scenario_id": e.scenario_id,
            "article": t.control_id or e.article,
            "file": e.path.name,
            "line": e.line,
            "expected": e.expected_verdict,
            "min": e.score_min,
            "max": e.score_max,
            "score": None,
            "actual": None,
            "split": e.split,
            "repetition": 0,
            "stratum": e.stratum,
            "adversarial": e.adversarial,
            "labels": list(e.labels),
            "judge": " + ".join(getattr(j, "name", "judge") for j in judges),
            "verdict": "skipped",
            "error": None,
            "reasoning": t.detail,
            "criteria": [],
            "judge_meta": {},
            "skip_reason": t.skip,
            "prompt_mismatch": t.prompt_mismatch,
            "subject": "calibration-" + "+".join(getattr(j, "name", "judge") for j in judges),
            "nodeid": self.nodeid,
        }
        pytest.skip(f"{e.path.name}:{e.line}: {e.id}: {t.detail}")

    def runtest(self) -> None:  # never reached: setup skips
        raise AssertionError("a skipped golden entry cannot run")

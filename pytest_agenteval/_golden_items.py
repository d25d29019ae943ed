"""Calibration items: each golden entry graded by the configured judge.

Collected only when asked for (``-m calibration`` or a golden file named on
the command line). An item passes when the judge's verdict — computed from
its score with the article's bands — equals the label and the score lies in
the labelled band. A judge that fails is an ERROR (an evaluation failure),
never a disagreement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ._checks import Check
from ._collect import STATE, AgentevalError
from ._evals import EvalResult, band_verdict, combine_results
from ._family import Article, Family
from ._golden import GoldenEntry, check_articles, load_golden
from ._judges import ConfigError, GradeRequest, criteria_from, grade_to_result
from ._spec import Scenario
from ._subjects import Response
from ._yaml import SpecError


class CalibrationMismatch(AssertionError):
    pass


_TOOL_CHECKS = {"tool_called", "no_tool_called"}


def _about_tool_calls(check: Check) -> bool:
    if check.kind in _TOOL_CHECKS:
        return True
    inner = check.arg if isinstance(check.arg, tuple) else (check.arg,)
    return any(isinstance(c, Check) and _about_tool_calls(c) for c in inner)


def _check_rubrics(golden: Any, family: Family) -> None:
    """A synthetic entry is graded against its article's rubric, which must exist."""
    real = {s.id for a in family.articles for s in a.scenarios}
    for entry in golden.entries:
        if entry.scenario_id not in real and not family.article(entry.article).meta.rubric:
            raise SpecError(
                golden.path,
                entry.line,
                f"entry {entry.id!r} is synthetic (no scenario {entry.scenario_id!r} in "
                f"{family.name}) and article {entry.article!r} declares no substance rubric "
                "(metadata.rubric) to grade it against",
            )


def _scenario_context(scenario: Scenario | None) -> dict[str, Any]:
    """What the agent saw in the real scenario (system prompt, earlier turns, tools)."""
    if scenario is None:
        return {}
    from ._run import seen_by_subject

    return seen_by_subject(scenario)


class GoldenCollector(pytest.Collector):
    """One golden ``.jsonl`` file (not a ``pytest.File``: see ArticleCollector)."""

    def collect(self) -> Iterator[CalibrationItem]:
        state = self.config.stash[STATE]
        try:
            golden = load_golden(self.path)
            family = state.family_for_golden(self.path, golden.entries)
            known = {a.control_id: a.meta.pillar for a in family.articles}
            check_articles(golden, known, family.name)
            _check_rubrics(golden, family)
            state.claim_golden_ids(family, golden.entries)
            state.note_golden_file(family, self.path)
        except (SpecError, ValueError) as exc:
            raise self.CollectError(str(exc)) from None
        state.register_markers(family)
        repeat = state.calibration_repeat
        for entry in golden.entries:
            article = family.article(entry.article)
            for rep in range(repeat):
                name = entry.id if repeat == 1 else f"{entry.id}[r{rep}]"
                yield CalibrationItem.from_parent(
                    self,
                    name=name,
                    family=family,
                    article=article,
                    entry=entry,
                    repetition=rep,
                )

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, self.name


class CalibrationItem(pytest.Item):
    def __init__(
        self,
        *,
        family: Family,
        article: Article,
        entry: GoldenEntry,
        repetition: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.family, self.article, self.entry, self.repetition = family, article, entry, repetition
        self.payload: dict[str, Any] | None = None
        for marker in ("calibration", family.name, article.meta.pillar):
            self.add_marker(marker)

    def scenario(self) -> Scenario | None:
        for art in self.family.articles:
            for scenario in art.scenarios:
                if scenario.id == self.entry.scenario_id:
                    return scenario
        return None

    def criteria(self) -> tuple[Any, ...]:
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
            raise AgentevalError(
                f"{self.entry.id}: synthetic entry for {self.article.control_id}, which declares "
                "no substance rubric (metadata.rubric)"
            )
        return criteria_from(self.article.meta.rubric)

    def setup(self) -> None:
        state = self.config.stash[STATE]
        judges = state.judges()
        criteria = self.criteria()
        request = GradeRequest(
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
        try:
            result = state.scheduler.run_coro(self._grade(judges, request))
        except ConfigError as exc:
            pytest.exit(
                f"agenteval configuration error: {exc}", returncode=pytest.ExitCode.USAGE_ERROR
            )
        actual = (
            band_verdict(result.score, self.article.bands) if result.score is not None else None
        )
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
            raise AgentevalError(
                f"{self.entry.id}: judge error (evaluation failure): {result.error}"
            )
        if result.verdict == "skipped":
            self.payload["actual"] = None
            pytest.skip(f"{self.entry.id}: {result.reasoning}")

    async def _grade(self, judges: list[Any], request: GradeRequest) -> EvalResult:
        """One judge, or several combined by weighted median as in benchmark runs."""
        graded = await asyncio.gather(
            *(
                grade_to_result(
                    judge,
                    request,
                    key=self.entry.id,
                    name=getattr(judge, "name", "judge"),
                    bands=self.article.bands,
                    severity=self.article.meta.severity,
                )
                for judge in judges
            )
        )
        if len(graded) == 1:
            return graded[0]
        return combine_results(
            self.entry.id,
            self.entry.id,
            [
                replace(r, kind="judge", key=f"{r.meta.get('judge', 'judge')}#{i}")
                for i, r in enumerate(graded)
            ],
            aggregation="weighted_median",
            bands=self.article.bands,
            severity=self.article.meta.severity,
            kind="scenario",
        )

    def runtest(self) -> None:
        assert self.payload is not None
        p = self.payload
        in_band = p["min"] <= p["score"] <= p["max"]
        if p["actual"] != p["expected"] or not in_band:
            raise CalibrationMismatch()

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CalibrationMismatch) and self.payload is not None:
            p = self.payload
            lines = [
                f"{self.family.name} ▸ {p['pillar']} ▸ {p['article']} ▸ {p['id']}"
                + (f" (adversarial: {p['adversarial']})" if p["adversarial"] else ""),
                f"expected: {p['expected'].upper():<5} score in [{p['min']:.2f}, {p['max']:.2f}]",
                f"actual:   {str(p['actual']).upper():<5} score {p['score']:.2f}"
                + ("" if p["min"] <= p["score"] <= p["max"] else "  (outside the band)"),
                f"label rationale: {self.entry.rationale}",
            ]
            if p["reasoning"]:
                lines.append(f"judge: {p['reasoning']}")
            return self.config.stash[STATE].redactor.text("\n".join(lines))
        if isinstance(excinfo.value, AgentevalError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.entry.path, self.entry.line - 1, f"calibration::{self.entry.id}"

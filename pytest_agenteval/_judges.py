"""Judges: what turns an answer into a grade.

A judge is any object with ``name`` and ``async grade(request) -> Grade``.
The offline :class:`RulesJudge` decides the criteria that carry a
deterministic ``check``; LLM judges (``openai:``, ``anthropic:``) live in
their own module. Whatever the judge, the verdict is computed here from the
score and the bands — a judge never hands us a verdict.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ._checks import Answer, Check
from ._evals import Bands, CriterionResult, EvalResult, band_verdict, score_severity, worst_severity

__all__ = [
    "ConfigError",
    "Grade",
    "GradeRequest",
    "JudgeError",
    "NotGradable",
    "RulesJudge",
]


class JudgeError(Exception):
    """No grade could be obtained; the item is an ERROR, never a pass or fail."""


class ConfigError(Exception):
    """A judge or subject is misconfigured (bad key, unknown model): the run stops.

    Messages name the environment variable or the model, never a credential.
    """


class NotGradable(Exception):
    """This judge has nothing it can decide for the item (it is skipped, with the reason)."""


@dataclass(frozen=True)
class CriterionSpec:
    text: str
    check: Check | None = None


def criteria_from(items: Sequence[Any]) -> tuple[CriterionSpec, ...]:
    """Accept strings, ``(text, check)`` pairs or objects with ``text``/``check``."""
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(CriterionSpec(item))
        elif isinstance(item, tuple):
            out.append(CriterionSpec(item[0], item[1]))
        else:
            out.append(CriterionSpec(item.text, getattr(item, "check", None)))
    return tuple(out)


@dataclass(frozen=True)
class GradeRequest:
    """Everything a judge may look at for one answer."""

    scenario_id: str
    prompt: str
    answer: Answer
    expected_behavior: str
    criteria: tuple[CriterionSpec, ...]
    context: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Grade:
    """A judge's grade: a 0–1 score and per-criterion findings."""

    score: float
    criteria: tuple[CriterionResult, ...]
    summary: str
    judge: str
    details: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Judge(Protocol):
    name: str

    async def grade(self, request: GradeRequest) -> Grade: ...


class RulesJudge:
    """The offline judge: scores the criteria that carry a ``check``.

    score = (criteria whose check holds) / (criteria with a check). Criteria
    without a check need judgement and are reported as not assessed. A
    scenario with no checkable criterion raises :class:`NotGradable`.
    """

    name = "rules"
    description = "rules (offline: deterministic checks on criteria, no LLM)"
    billable = False  # costs nothing: never stopped by --agenteval-max-cost

    async def grade(self, request: GradeRequest) -> Grade:
        return self.grade_sync(request)

    def grade_sync(self, request: GradeRequest) -> Grade:
        results = []
        checked = met = 0
        for criterion in request.criteria:
            if criterion.check is None:
                results.append(
                    CriterionResult(criterion.text, None, "needs an LLM judge (no check)")
                )
                continue
            outcome = criterion.check.evaluate(request.answer)
            checked += 1
            met += outcome.met
            results.append(
                CriterionResult(
                    criterion.text, outcome.met, outcome.detail, criterion.check.to_dict()
                )
            )
        if checked == 0:
            raise NotGradable("rules judge: no criterion of this scenario carries a check")
        return Grade(
            score=met / checked,
            criteria=tuple(results),
            summary=f"{met} of {checked} checked criteria met "
            f"({len(results) - checked} need an LLM judge)",
            judge=self.name,
        )


async def grade_to_result(
    judge: Any,
    request: GradeRequest,
    *,
    key: str,
    name: str,
    bands: Bands,
    severity: str | None,
) -> EvalResult:
    """Grade and turn the grade into an :class:`EvalResult` (verdict from score)."""
    try:
        grade = await judge.grade(request)
    except NotGradable as exc:
        return EvalResult(key, name, None, "skipped", kind="scenario", reasoning=str(exc))
    except JudgeError as exc:
        details = getattr(exc, "details", None)
        return EvalResult(
            key,
            name,
            None,
            "error",
            kind="scenario",
            error=str(exc),
            meta={"judge": getattr(judge, "name", "judge"), **(details or {})},
        )
    except (ConfigError, asyncio.CancelledError):
        raise
    except Exception as exc:  # a judge that crashes is an error, never a grade
        return EvalResult(
            key,
            name,
            None,
            "error",
            kind="scenario",
            error=f"judge {getattr(judge, 'name', 'judge')} raised {type(exc).__name__}: {exc}",
        )
    return result_from_grade(grade, key=key, name=name, bands=bands, severity=severity)


def result_from_grade(
    grade: Grade, *, key: str, name: str, bands: Bands, severity: str | None
) -> EvalResult:
    score = grade.score
    if (
        isinstance(score, bool)
        or not isinstance(score, int | float)
        or not (math.isfinite(score) and 0.0 <= score <= 1.0)
    ):
        return EvalResult(
            key,
            name,
            None,
            "error",
            kind="scenario",
            error=f"judge {grade.judge} returned score {score!r}; expected 0..1",
        )
    verdict = band_verdict(score, bands)
    failed_severity = worst_severity(severity, score_severity(score)) if verdict == "fail" else None
    return EvalResult(
        key,
        name,
        float(score),
        verdict,
        kind="scenario",
        severity=failed_severity,
        reasoning=grade.summary,
        criteria=grade.criteria,
        meta={"judge": grade.judge, **dict(grade.details)},
    )

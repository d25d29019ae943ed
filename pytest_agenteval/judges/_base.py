"""Judges: what turns an answer into a grade.

A judge is any object with ``name`` and ``async grade(request) -> Grade``.
The offline :class:`RulesJudge` decides the criteria that carry a
deterministic ``check``; LLM judges (``openai:``, ``anthropic:``) live in
their own module. Whatever the judge, the verdict is computed here from the
score and the bands — a judge never hands us a verdict.

A criterion with a ``check`` is decided by its check whatever the judge
(:func:`grade_with_checks`): a judge that is not itself the deterministic
rules judge is asked only about the criteria without one, and never called
when every criterion has a check. The score is the mean over all criteria,
a checked criterion counting 1 or 0 and each unchecked criterion counting the
judge's score::

    score = (checks met + judged × judge score) / (checked + judged)

so with no checks it is the judge's score, and with only checks it is the
rules judge's ``met / checked``.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, TypeGuard, runtime_checkable

from .._checks import Answer, Check
from .._evals import CriterionResult, EvalResult
from .._vocab import (
    AgentevalError,
    Bands,
    ConfigError,
    JSONValue,
    JudgeError,
    band_verdict,
    score_severity,
    worst_severity,
)

__all__ = [
    "ConfigError",
    "Grade",
    "GradeRequest",
    "JudgeError",
    "NotGradable",
    "RulesJudge",
    "grade_with_checks",
]


class NotGradable(AgentevalError):
    """This judge has nothing it can decide for the item (it is skipped, with the reason)."""


@dataclass(frozen=True)
class CriterionSpec:
    text: str
    check: Check | None = None


class _Criterion(Protocol):
    """A scenario's criterion: its text and, optionally, a ``check`` attribute."""

    @property
    def text(self) -> str: ...


def criteria_from(
    items: Sequence[str | tuple[str, Check | None] | _Criterion],
) -> tuple[CriterionSpec, ...]:
    """Accept strings, ``(text, check)`` pairs or objects with ``text``/``check``."""
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(CriterionSpec(item))
        elif isinstance(item, tuple):
            out.append(CriterionSpec(item[0], item[1]))
        else:
            check = getattr(item, "check", None)
            out.append(CriterionSpec(item.text, check if isinstance(check, Check) else None))
    return tuple(out)


@dataclass(frozen=True)
class GradeRequest:
    """Everything a judge may look at for one answer."""

    scenario_id: str
    prompt: str
    answer: Answer
    expected_behavior: str
    criteria: tuple[CriterionSpec, ...]
    #: The scenario's identity, the agent's system prompt, turns and tools, the judge
    #: prompt, repetition...: judges look up what they use and check its type.
    context: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Grade:
    """A judge's grade: a 0–1 score and per-criterion findings."""

    score: float
    criteria: tuple[CriterionResult, ...]
    summary: str
    judge: str
    #: What the judge records of how it graded (made JSON-safe in the evidence).
    details: Mapping[str, object] = field(default_factory=dict)


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
    deterministic = True  # the same answer always gets the same grade: never repeated

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
    judge: Judge,
    request: GradeRequest,
    *,
    key: str,
    name: str,
    bands: Bands,
    severity: str | None,
) -> EvalResult:
    """Grade (checked criteria by their checks) and turn the grade into an
    :class:`EvalResult` (verdict from score)."""
    judge_name = getattr(judge, "name", "judge")

    def errored(error: str, meta: Mapping[str, object] | None = None) -> EvalResult:
        return EvalResult(key, name, None, "error", kind="scenario", error=error, meta=meta or {})

    try:
        grade = await grade_with_checks(judge, request)
    except NotGradable as exc:
        return EvalResult(key, name, None, "skipped", kind="scenario", reasoning=str(exc))
    except JudgeError as exc:
        details = getattr(exc, "details", None)  # LLMJudgeError's: what is known
        return errored(
            str(exc), {"judge": judge_name, **(details if isinstance(details, Mapping) else {})}
        )
    except (ConfigError, asyncio.CancelledError):
        raise
    except Exception as exc:  # a judge that crashes is an error, never a grade
        return errored(f"judge {judge_name} raised {type(exc).__name__}: {exc}")
    return result_from_grade(grade, key=key, name=name, bands=bands, severity=severity)


def is_deterministic(judge: object) -> bool:
    """A judge that grades the same answer the same way every time (the rules judge)."""
    return bool(getattr(judge, "deterministic", False))


def _valid_score(score: object) -> TypeGuard[float]:
    return (
        not isinstance(score, bool)
        and isinstance(score, int | float)
        and math.isfinite(score)
        and 0.0 <= score <= 1.0
    )


SCORE_RULE = (
    "mean over all criteria: a checked criterion counts 1 or 0 from its check, "
    "each unchecked criterion counts the judge's score"
)


async def grade_with_checks(judge: Judge, request: GradeRequest) -> Grade:
    """*judge*'s grade with every checked criterion decided by its check.

    The judge sees only the unchecked criteria (``context["criteria_checked"]``
    tells it how many were held out) and is not called when there are none.
    The combined score follows :data:`SCORE_RULE`; ``details["scoring"]``
    records its parts. A deterministic judge (the rules judge) already works
    this way and is called as it is.
    """
    if is_deterministic(judge) or all(c.check is None for c in request.criteria):
        return await judge.grade(request)
    name = str(getattr(judge, "name", "judge"))
    decided: dict[int, CriterionResult] = {}
    for i, criterion in enumerate(request.criteria):
        if criterion.check is not None:
            outcome = criterion.check.evaluate(request.answer)
            decided[i] = CriterionResult(
                criterion.text, outcome.met, outcome.detail, criterion.check.to_dict()
            )
    met = sum(1 for r in decided.values() if r.met)
    checked = len(decided)
    open_ = [c for i, c in enumerate(request.criteria) if i not in decided]
    judged = len(open_)
    scoring: dict[str, JSONValue] = {
        "rule": SCORE_RULE,
        "checked": checked,
        "checked_met": met,
        "judged": judged,
        "judge_score": None,
        "judge_called": bool(open_),
    }
    if not open_:
        scoring["score"] = met / checked
        return Grade(
            score=met / checked,
            criteria=tuple(decided[i] for i in range(checked)),
            summary=f"every criterion has a check: {met} of {checked} met ({name} not called)",
            judge=name,
            details={"scoring": scoring},
        )
    sub = replace(
        request,
        criteria=tuple(open_),
        context={**request.context, "criteria_checked": checked},
    )
    grade = await judge.grade(sub)
    if not _valid_score(grade.score):
        return grade  # refused as it is by result_from_grade
    judged_results = list(grade.criteria)
    merged: list[CriterionResult] = []
    for i, criterion in enumerate(request.criteria):
        if i in decided:
            merged.append(decided[i])
        elif judged_results:
            merged.append(judged_results.pop(0))
        else:  # a judge that returned fewer entries: shown as not assessed
            merged.append(CriterionResult(criterion.text, None, f"{name} gave no finding"))
    score = (met + judged * float(grade.score)) / (checked + judged)
    scoring.update(judge_score=float(grade.score), score=score)
    return Grade(
        score=score,
        criteria=tuple(merged),
        summary=f"{grade.summary} [checks decided {checked} of {checked + judged} criteria "
        f"({met} met); {name} scored the other {judged} at {float(grade.score):.2f}]",
        judge=grade.judge,
        details={**dict(grade.details), "scoring": scoring},
    )


def result_from_grade(
    grade: Grade, *, key: str, name: str, bands: Bands, severity: str | None
) -> EvalResult:
    score = grade.score
    if not _valid_score(score):
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

"""Eval primitives: one protocol, three shapes, five aggregation strategies.

Everything here is pure: no pytest, no I/O. A benchmark is a
:class:`CompositeEval` (the family) of composites (pillars) of composites
(articles) of atomic evals (scenarios). The same :meth:`CompositeEval.combine`
that :meth:`CompositeEval.evaluate` uses is what the pytest controller calls
on results that arrived in test reports, so a serial run and an xdist run
aggregate through one code path.

Verdicts come from scores by bands — pass ≥ ``pass``, warn ≥ ``warn``, else
fail — at every level. A result whose grade could not be obtained has verdict
``error`` and no score; it is never counted as a pass or a fail. The bands,
the one rounding of a score and the aggregation names are the vocabulary of
:mod:`pytest_agenteval._vocab`; a score is rounded when an :class:`EvalResult`
is made.

A verdict never improves going up through a ``min`` or ``cap_by_worst`` node,
nor past a ``required`` component: each child's verdict was decided at the
child, under its own bands, and the parent's verdict is at most as good as
the worst of them.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Protocol, TypeGuard, runtime_checkable

from ._checks import Answer, Check
from ._vocab import (
    AGGREGATION_NAMES,
    GRADED,
    GRADED_VERDICTS,
    MONOTONE_AGGREGATIONS,
    SCORE_DIGITS,
    VERDICT_RANK,
    VERDICTS,
    AgentevalError,
    Aggregation,
    Bands,
    Verdict,
    band_verdict,
    format_score,
    round_score,
    score_severity,
    worst_severity,
)

if TYPE_CHECKING:
    from .judges._base import Judge

__all__ = [
    "AGGREGATIONS",
    "MAX_NESTING_DEPTH",
    "SCORE_DIGITS",
    "AtomicCodeEval",
    "AtomicJudgeEval",
    "Bands",
    "Component",
    "CompositeEval",
    "CriterionResult",
    "Eval",
    "EvalInput",
    "EvalResult",
    "NestingError",
    "aggregate",
    "band_verdict",
    "format_score",
    "injection_suspected",
    "round_score",
    "score_severity",
    "worst_severity",
]

MAX_NESTING_DEPTH = 32

#: Cap-by-worst ceilings: a failed component of this severity caps the parent's score.
CAPS: Mapping[str, float] = {"critical": 0.40, "high": 0.69}
#: Nodes that are pytest items: a scenario, or one sample of it. Judges and
#: criteria below them are parts of one item's grade, not items.
ITEM_KINDS = frozenset({"scenario", "sample"})
GRADE_PART_KINDS = frozenset({"judge", "criterion"})


class NestingError(AgentevalError, ValueError):
    """A composite nested deeper than :data:`MAX_NESTING_DEPTH`."""


def injection_suspected(result: EvalResult) -> bool:
    """Whether a judge flagged the answer graded in *result* as trying to steer it.

    The flag is ``meta["injection_suspected"] is True`` on the item or on any
    judge or criterion grade beneath it (one flagged panel member flags the item).
    """
    if result.meta.get("injection_suspected") is True:
        return True
    return any(injection_suspected(c) for c in result.children if c.kind in GRADE_PART_KINDS)


@dataclass(frozen=True, slots=True)
class CriterionResult:
    criterion: str
    met: bool | None  # None: this judge did not assess it
    reasoning: str = ""
    check: dict[str, object] | None = None  # Check.to_dict() of the check that decided it

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CriterionResult:
        met, check = data["met"], data.get("check")
        if met is not None and not isinstance(met, bool):
            raise TypeError(f"criterion result: met is {type(met).__name__}, not a bool")
        return cls(
            _text(data["criterion"]),
            met,
            _text(data.get("reasoning", "")),
            None if check is None else dict(_mapping(check)),
        )


@dataclass(frozen=True, slots=True)  # a run holds one per item to its end: no __dict__
class EvalResult:
    """The outcome of one eval. Plain data; :meth:`to_dict` is JSON-safe.

    ``score`` is in [0, 1] or ``None`` when no grade was obtained (``error``)
    or nothing was gradable (``skipped``). ``severity`` is set on failures.
    """

    key: str
    name: str
    score: float | None
    verdict: Verdict
    kind: str = "eval"
    weight: float = 1.0
    required: bool = False
    severity: str | None = None
    aggregation: str | None = None
    reasoning: str = ""
    error: str | None = None
    criteria: tuple[CriterionResult, ...] = ()
    children: tuple[EvalResult, ...] = ()
    #: Judges' details and the scenario's identity; whatever a judge put there is
    #: made JSON-safe where it is recorded.
    meta: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        score = self.score
        if isinstance(score, int | float) and not isinstance(score, bool):
            object.__setattr__(self, "score", round_score(score))

    @property
    def graded(self) -> bool:
        return self.verdict in GRADED

    def items(self) -> tuple[EvalResult, ...]:
        """The item results beneath (or of) this result, each once.

        An item is what pytest runs: a scenario, or each sample of a scenario
        asked several times. The judges of a panel and the criteria of a
        per-criterion grade are parts of one item's grade, not items.
        """
        if self.kind == "scenario" and any(c.kind == "sample" for c in self.children):
            return tuple(c for c in self.children if c.kind == "sample")
        if self.kind in ITEM_KINDS or not self.children:
            return (self,)
        return tuple(item for child in self.children for item in child.items())

    def counts(self) -> dict[str, int]:
        """Item outcomes beneath (or of) this result: one per item, see :meth:`items`."""
        total: dict[str, int] = dict.fromkeys(VERDICTS, 0)
        for item in self.items():
            total[item.verdict] += 1
        return total

    def to_dict(self) -> dict[str, object]:
        return {
            "key": self.key,
            "name": self.name,
            "kind": self.kind,
            "score": self.score,
            "verdict": self.verdict,
            "weight": self.weight,
            "required": self.required,
            "severity": self.severity,
            "aggregation": self.aggregation,
            "reasoning": self.reasoning,
            "error": self.error,
            "criteria": [c.to_dict() for c in self.criteria],
            "children": [c.to_dict() for c in self.children],
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> EvalResult:
        """The result :meth:`to_dict` gave (a wrong type is a ``TypeError``)."""
        score, weight = data["score"], data.get("weight", 1.0)
        if score is not None and not _is_number(score):
            raise TypeError(f"result {data.get('key')!r}: score is {type(score).__name__}")
        if not _is_number(weight):
            raise TypeError(f"result {data.get('key')!r}: weight is {type(weight).__name__}")
        return cls(
            key=_text(data["key"]),
            name=_text(data["name"]),
            kind=_text(data.get("kind", "eval")),
            score=score,
            verdict=_verdict(data["verdict"]),
            weight=weight,
            required=data.get("required") is True,
            severity=_optional_text(data.get("severity")),
            aggregation=_optional_text(data.get("aggregation")),
            reasoning=_text(data.get("reasoning", "")),
            error=_optional_text(data.get("error")),
            criteria=tuple(CriterionResult.from_dict(c) for c in _mappings(data.get("criteria"))),
            children=tuple(cls.from_dict(c) for c in _mappings(data.get("children"))),
            meta=_mapping(data.get("meta", {})),
        )


# readers of the wire form (a worker's results, a run directory): each value is
# checked, not assumed


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"expected a string, got {type(value).__name__}")


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _verdict(value: object) -> Verdict:
    for verdict in VERDICTS:
        if value == verdict:
            return verdict
    raise ValueError(f"unknown verdict {value!r}")


def _mapping(value: object) -> Mapping[str, object]:
    if isinstance(value, Mapping):
        return value
    raise TypeError(f"expected a mapping, got {type(value).__name__}")


def _mappings(value: object) -> list[Mapping[str, object]]:
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [_mapping(v) for v in value]
    raise TypeError(f"expected a list, got {type(value).__name__}")


@dataclass(frozen=True)
class EvalInput:
    """What an eval grades: the prompt, the subject's answer, and context."""

    prompt: str
    answer: Answer
    expected_behavior: str = ""
    meta: Mapping[str, object] = field(default_factory=dict)


@runtime_checkable
class Eval(Protocol):
    """Anything that grades an :class:`EvalInput` into an :class:`EvalResult`."""

    key: str
    name: str
    category: str
    version: str

    async def evaluate(self, input: EvalInput) -> EvalResult: ...


# --------------------------------------------------------------------------- aggregation

AggregateFn = Callable[[Sequence[EvalResult]], "tuple[float, Verdict | None]"]


def _weights(results: Sequence[EvalResult]) -> list[float]:
    total = math.fsum(r.weight for r in results)
    if total <= 0:
        raise ValueError("component weights sum to zero")
    return [r.weight / total for r in results]


def weighted_sum(results: Sequence[EvalResult]) -> tuple[float, Verdict | None]:
    """score = Σ wᵢ·sᵢ / Σ wᵢ over the graded components (weights renormalised)."""
    ws = _weights(results)
    return math.fsum(w * _s(r) for w, r in zip(ws, results, strict=True)), None


def weighted_median(results: Sequence[EvalResult]) -> tuple[float, Verdict | None]:
    """score = the weighted median of sᵢ.

    Sort by score, accumulate normalised weights; the first score at which the
    cumulative weight reaches ½ is the median. When it lands on ½ exactly, the
    mean of that score and the next (so equal weights give the plain median).
    One outlying judge cannot drag the result the way it drags a mean.
    """
    pairs = sorted(zip((_s(r) for r in results), _weights(results), strict=True))
    cumulative = 0.0
    for i, (score, weight) in enumerate(pairs):
        cumulative += weight
        if math.isclose(cumulative, 0.5, abs_tol=1e-12) and i + 1 < len(pairs):
            return (score + pairs[i + 1][0]) / 2, None
        if cumulative > 0.5:
            return score, None
    return pairs[-1][0], None


def minimum(results: Sequence[EvalResult]) -> tuple[float, Verdict | None]:
    """score = min sᵢ: any weak component caps the parent (weights ignored)."""
    return min(_s(r) for r in results), None


def cap_by_worst(results: Sequence[EvalResult]) -> tuple[float, Verdict | None]:
    """score = Σ wᵢ·sᵢ, capped at 0.40 if a critical component failed, else at 0.69 if a high one did.

    A critical failure cannot be averaged away by strong components elsewhere.
    The verdict (set in :func:`combine_results`) is moreover at most the
    worst component's: a failed component, critical or not, fails the node.
    """
    score, _ = weighted_sum(results)
    failed = [r.severity for r in results if r.verdict == "fail"]
    worst = worst_severity(*failed)
    if worst is not None and worst in CAPS:
        score = min(score, CAPS[worst])
    return score, None


def majority_vote(results: Sequence[EvalResult]) -> tuple[float, Verdict | None]:
    """score = Σ wᵢ·[vᵢ = pass]; verdict = the verdict holding the most weight.

    Ties go to the worse verdict. Used for repeated stochastic runs, where the
    question is "how often does it pass", not "how well on average".
    """
    ws = _weights(results)
    share: dict[Verdict, float] = dict.fromkeys(GRADED_VERDICTS, 0.0)
    for w, r in zip(ws, results, strict=True):
        share[r.verdict] += w
    best = max(share.values())
    verdict = max(
        (v for v, s in share.items() if math.isclose(s, best, abs_tol=1e-12)),
        key=VERDICT_RANK.__getitem__,
    )
    return share["pass"], verdict


def _s(result: EvalResult) -> float:
    assert result.score is not None, f"{result.key} has no score"
    return result.score


_BY_NAME: dict[Aggregation, AggregateFn] = {
    "weighted_sum": weighted_sum,
    "weighted_median": weighted_median,
    "min": minimum,
    "cap_by_worst": cap_by_worst,
    "majority_vote": majority_vote,
}
#: The strategy of each aggregation name of the vocabulary, in its order.
AGGREGATIONS: dict[str, AggregateFn] = {name: _BY_NAME[name] for name in AGGREGATION_NAMES}


def aggregate(name: str, results: Sequence[EvalResult]) -> tuple[float, Verdict | None]:
    """Apply the named strategy to graded results."""
    try:
        fn = AGGREGATIONS[name]
    except KeyError:
        known = ", ".join(AGGREGATIONS)
        raise ValueError(f"unknown aggregation {name!r} (known: {known})") from None
    return fn(results)


# --------------------------------------------------------------------------- evals


@dataclass(frozen=True)
class Component:
    """An eval inside a composite, with its weight and whether it must pass."""

    eval: Eval
    weight: float = 1.0
    required: bool = False


class CompositeEval:
    """Weighted components combined by an aggregation strategy.

    ``threshold``, when given, replaces the pass band (score ≥ threshold
    passes). A ``required`` component that fails fails the composite whatever
    the aggregate. Components whose result is an error or skipped do not
    count; the remaining weights are renormalised, and the composite records
    how many leaves errored so the gate can refuse a partial grade.
    """

    category = "composite"

    def __init__(
        self,
        key: str,
        name: str,
        components: Sequence[Component],
        *,
        aggregation: str = "weighted_sum",
        threshold: float | None = None,
        bands: Bands | None = None,
        severity: str | None = None,
        kind: str = "composite",
        version: str = "1",
        category: str = "composite",
        meta: Mapping[str, object] | None = None,
    ) -> None:
        if aggregation not in AGGREGATIONS:
            raise ValueError(
                f"{key}: unknown aggregation {aggregation!r} (known: {', '.join(AGGREGATIONS)})"
            )
        self.key, self.name, self.version, self.category = key, name, version, category
        self.components = tuple(components)
        self.aggregation = aggregation
        bands = bands or Bands()
        self.bands = (
            Bands(threshold, min(bands.warn, threshold)) if threshold is not None else bands
        )
        self.severity = severity
        self.kind = kind
        self.meta = dict(meta or {})
        self.depth = 1 + max((getattr(c.eval, "depth", 0) for c in self.components), default=0)
        if self.depth > MAX_NESTING_DEPTH:
            raise NestingError(
                f"composite {key!r} nests {self.depth} levels deep; the limit is "
                f"{MAX_NESTING_DEPTH} (is a composite containing itself?)"
            )

    async def evaluate(self, input: EvalInput) -> EvalResult:
        results = await asyncio.gather(*(c.eval.evaluate(input) for c in self.components))
        return self.combine(list(results))

    def combine(self, results: Sequence[EvalResult]) -> EvalResult:
        """Aggregate child results (one per component, in order) into this node's result."""
        if len(results) != len(self.components):
            raise ValueError(
                f"{self.key}: {len(results)} results for {len(self.components)} components"
            )
        children = tuple(
            replace(r, weight=c.weight, required=c.required)
            for c, r in zip(self.components, results, strict=True)
        )
        return combine_results(
            self.key,
            self.name,
            children,
            aggregation=self.aggregation,
            bands=self.bands,
            severity=self.severity,
            kind=self.kind,
            meta=self.meta,
        )


def combine_results(
    key: str,
    name: str,
    children: Sequence[EvalResult],
    *,
    aggregation: str,
    bands: Bands,
    severity: str | None = None,
    kind: str = "composite",
    meta: Mapping[str, object] | None = None,
) -> EvalResult:
    """The composite rule, on children that already carry their weights.

    score = the aggregation of the graded children (errored and skipped ones
    drop out, their weight renormalised away), rounded once; verdict = the
    score's band, then never better than the worst graded child under
    ``min`` and ``cap_by_worst``, nor than any ``required`` graded child. Each
    child's verdict is the one it was given under its own bands.
    """
    graded = [c for c in children if c.graded]
    node = functools.partial(
        EvalResult,
        key=key,
        name=name,
        kind=kind,
        aggregation=aggregation,
        children=tuple(children),
        meta=dict(meta or {}),
    )
    if not graded:
        errored = any(c.verdict == "error" for c in children)
        verdict: Verdict = "error" if errored else "skipped"
        why = "no component could be graded" if errored else "nothing to grade"
        return node(score=None, verdict=verdict, reasoning=why)
    raw, override = aggregate(aggregation, graded)
    score = round_score(raw)
    verdict = override or band_verdict(score, bands)
    reasons: list[str] = []
    if aggregation in MONOTONE_AGGREGATIONS:
        verdict = _bounded(verdict, graded, f"{aggregation}: worst component", reasons)
    verdict = _bounded(verdict, [c for c in graded if c.required], "required component", reasons)
    node_severity = None
    if verdict == "fail":
        node_severity = worst_severity(
            severity,
            score_severity(score),
            *(c.severity for c in graded if c.verdict == "fail"),
        )
    return node(score=score, verdict=verdict, severity=node_severity, reasoning="; ".join(reasons))


def combine_gradings(
    key: str,
    name: str,
    children: Sequence[EvalResult],
    *,
    aggregation: str,
    bands: Bands,
    severity: str | None = None,
    meta: Mapping[str, object] | None = None,
) -> EvalResult:
    """One item's grade from its gradings: a panel's judges, or the criteria of a
    per-criterion grade (Mode B).

    Each grading must be obtained. One that errored makes the item an error naming
    it: a grade taken from the others would be a pass or a fail that the panel never
    gave (a critical scenario asked of three judges would rest on one). A grading
    that was skipped (a judge that cannot grade such a criterion) drops out, as in
    :func:`combine_results`.
    """
    failed = [c for c in children if c.verdict == "error"]
    if not failed:
        return combine_results(
            key,
            name,
            children,
            aggregation=aggregation,
            bands=bands,
            severity=severity,
            kind="scenario",
            meta=meta,
        )
    why = "; ".join(
        f"{c.key}{f' ({c.name})' if c.kind == 'criterion' else ''}: "
        f"{c.error or c.reasoning or 'no grade'}"
        for c in failed
    )
    return EvalResult(
        key,
        name,
        None,
        "error",
        kind="scenario",
        aggregation=aggregation,
        error=f"{len(failed)} of {len(children)} gradings failed ({why})",
        children=tuple(children),
        meta=dict(meta or {}),
    )


#: A verdict as a past-tense verb ("2 samples passed", "required component failed").
VERDICT_PAST = {"pass": "passed", "warn": "warned", "fail": "failed"}


def _bounded(
    verdict: Verdict, bounds: Sequence[EvalResult], label: str, reasons: list[str]
) -> Verdict:
    """*verdict*, made no better than the worst verdict among *bounds* (graded children)."""
    if not bounds:
        return verdict
    worst = max(bounds, key=lambda c: VERDICT_RANK[c.verdict]).verdict
    if VERDICT_RANK[worst] <= VERDICT_RANK[verdict]:
        return verdict
    keys = [c.key for c in bounds if c.verdict == worst]
    reasons.append(f"{label} {VERDICT_PAST[worst]}: {', '.join(keys)}")
    return worst


class AtomicJudgeEval:
    """One judge-graded eval: a judge scores an answer against criteria.

    *judge* is any object with ``async grade(request) -> Grade`` (see
    :mod:`pytest_agenteval.judges._base`); the verdict comes from the score and the
    bands, never from the judge.
    """

    category = "judge"

    def __init__(
        self,
        judge: Judge,
        key: str,
        name: str,
        criteria: Sequence[str | tuple[str, Check | None]],
        *,
        bands: Bands | None = None,
        severity: str | None = None,
        version: str = "1",
        category: str = "judge",
        rubric_context: Mapping[str, object] | None = None,
    ) -> None:
        from .judges._base import criteria_from

        self.judge = judge
        self.key, self.name, self.version, self.category = key, name, version, category
        self.criteria = criteria_from(criteria)
        self.bands = bands or Bands()
        self.severity = severity
        self.rubric_context = dict(rubric_context or {})

    async def evaluate(self, input: EvalInput) -> EvalResult:
        from .judges._base import GradeRequest, grade_to_result

        request = GradeRequest(
            scenario_id=self.key,
            prompt=input.prompt,
            answer=input.answer,
            expected_behavior=input.expected_behavior,
            criteria=self.criteria,
            context={**self.rubric_context, **dict(input.meta)},
        )
        return await grade_to_result(
            self.judge,
            request,
            key=self.key,
            name=self.name,
            bands=self.bands,
            severity=self.severity,
        )


class AtomicCodeEval:
    """A deterministic eval: *fn(input)* returns a score in [0, 1] or a bool.

    No LLM, no network; used for format rules, tool-call accuracy, budgets.
    """

    category = "code"

    def __init__(
        self,
        key: str,
        name: str,
        fn: Callable[[EvalInput], float | bool],
        *,
        bands: Bands | None = None,
        severity: str | None = None,
        version: str = "1",
        category: str = "code",
    ) -> None:
        self.key, self.name, self.version, self.category = key, name, version, category
        self.fn = fn
        self.bands = bands or Bands()
        self.severity = severity

    async def evaluate(self, input: EvalInput) -> EvalResult:
        try:
            value = self.fn(input)
        except Exception as exc:  # a broken check is an error, not a fail
            return self._error(f"{type(exc).__name__}: {exc}")
        score = float(value)
        if (isinstance(value, bool) is False and not (0.0 <= score <= 1.0)) or math.isnan(score):
            return self._error(
                f"code eval returned {value!r}; expected a bool or a score in [0, 1]"
            )
        verdict = band_verdict(score, self.bands)
        severity = (
            worst_severity(self.severity, score_severity(score)) if verdict == "fail" else None
        )
        return EvalResult(self.key, self.name, score, verdict, kind="code", severity=severity)

    def _error(self, why: str) -> EvalResult:
        return EvalResult(self.key, self.name, None, "error", kind="code", error=why)

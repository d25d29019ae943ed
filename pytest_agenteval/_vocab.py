"""The words of pytest-agenteval, each defined once: verdicts, severities, bands, aggregations, errors.

Every other module imports these; none spells its own copy. The module is
pure and light (no pytest, no pydantic at import), so the command-line tools
and the plain-pytest path can use the exceptions without loading the heavy
parts of the plugin.

**Verdicts** — ``pass``, ``warn``, ``fail`` come from a score (:func:`band_verdict`);
``error`` (no grade could be obtained) and ``skipped`` (nothing to grade) are
outcomes without one. Orders are best first; a *rank* is larger when worse.

**Severities** — ``low`` < ``medium`` < ``high`` < ``critical``.

**Scores and bands** — a score is rounded once, to :data:`SCORE_DIGITS`
decimals (:func:`round_score`), when a result is made; :func:`band_verdict`
compares that rounded score with the :class:`Bands`, and :func:`format_score`
shows it cut, never rounded up. So the score written anywhere and the verdict
beside it never disagree (three scenarios at 0.80 average to 0.8, not
0.7999999999999999, and pass a 0.80 band; 0.695 shows as 0.69 beside its WARN).

**Aggregations** — the names of the strategies (the functions are in
:mod:`pytest_agenteval._evals`).

**Errors** — :class:`AgentevalError` is the base of every exception the
package raises; its subclasses name a role: bad input located by file and
line (:class:`SpecError`), usage or configuration (:class:`ConfigError`), a
judge or a subject that could not answer (:class:`JudgeError`,
:class:`SubjectError`), evidence that cannot be read or trusted
(:class:`EvidenceError`), and an item whose outcome is ERROR
(:class:`ItemError`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, Union, get_args

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

# What JSON holds, for values read from or bound for a JSON file: readers
# narrow with isinstance instead of trusting a shape (``Mapping`` in
# parameters, since dict is invariant).
JSONScalar: TypeAlias = str | int | float | bool | None
JSONValue: TypeAlias = Union[JSONScalar, "list[JSONValue]", "dict[str, JSONValue]"]
JSONObject: TypeAlias = "dict[str, JSONValue]"

__all__ = [
    "AGGREGATION_NAMES",
    "GRADED",
    "GRADED_VERDICTS",
    "MONOTONE_AGGREGATIONS",
    "SCORE_DIGITS",
    "SET_ASIDE_KEY",
    "SEVERITIES",
    "SEVERITY_RANK",
    "VERDICTS",
    "VERDICT_RANK",
    "AgentevalError",
    "Aggregation",
    "Bands",
    "ConfigError",
    "EvidenceError",
    "GradedVerdict",
    "ItemError",
    "JSONObject",
    "JSONScalar",
    "JSONValue",
    "JudgeError",
    "Severity",
    "SpecError",
    "SubjectError",
    "Verdict",
    "band_verdict",
    "format_score",
    "most_severe_first",
    "round_score",
    "score_severity",
    "worst_severity",
]

# --------------------------------------------------------------------------- verdicts

Verdict = Literal["pass", "warn", "fail", "error", "skipped"]
GradedVerdict = Literal["pass", "warn", "fail"]
#: Every outcome of an item or node, best first; ``error`` and ``skipped`` carry no grade.
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
#: The verdicts a score can earn, best first.
GRADED_VERDICTS: tuple[GradedVerdict, ...] = get_args(GradedVerdict)
GRADED: frozenset[str] = frozenset(GRADED_VERDICTS)
#: How bad a graded verdict is: pass 0, warn 1, fail 2.
VERDICT_RANK: Mapping[str, int] = {v: i for i, v in enumerate(GRADED_VERDICTS)}

# --------------------------------------------------------------------------- severities

Severity = Literal["low", "medium", "high", "critical"]
#: Least severe first.
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
#: How severe: low 0 … critical 3.
SEVERITY_RANK: Mapping[str, int] = {s: i for i, s in enumerate(SEVERITIES)}


def worst_severity(*severities: str | None) -> str | None:
    """The most severe of *severities* (``None`` and empty ones ignored), or ``None``."""
    present = [s for s in severities if s]
    return max(present, key=SEVERITY_RANK.__getitem__) if present else None


def most_severe_first(severity: str | None) -> int:
    """A sort key: critical first, low last, then an unknown or missing severity."""
    rank = SEVERITY_RANK.get(severity or "")
    return len(SEVERITIES) if rank is None else len(SEVERITIES) - 1 - rank


def score_severity(score: float) -> Severity:
    """Severity implied by how badly a failed item scored.

    < 0.20 critical, < 0.40 high, < 0.60 medium, otherwise low.
    """
    if score < 0.20:
        return "critical"
    if score < 0.40:
        return "high"
    if score < 0.60:
        return "medium"
    return "low"


#: The files whose items are benchmark items: articles' scenarios, golden entries, replays.
BENCHMARK_SUFFIXES = (".yaml", ".yml", ".jsonl")


def is_benchmark_id(nodeid: str) -> bool:
    """Is *nodeid* an item of a benchmark file (a scenario, a golden entry)?"""
    return nodeid.split("::", 1)[0].endswith(BENCHMARK_SUFFIXES)


#: Marks a record cut down to its facts once the reports took it (a quiet pass): the
#: aggregator keeps those, and pytest's report carries them once every plugin read it.
SET_ASIDE_KEY = "set_aside"


# --------------------------------------------------------------------------- scores and bands

#: Decimals a score keeps; the one rounding of every score (see :func:`round_score`).
SCORE_DIGITS = 6


def round_score(score: float) -> float:
    """*score* rounded to :data:`SCORE_DIGITS` decimals: the only rounding of a score."""
    return round(float(score), SCORE_DIGITS)


def format_score(score: float, digits: int = 2) -> str:
    """*score* shown with *digits* decimals, cut (rounded down), never rounded up.

    A shown score then reaches a threshold of *digits* decimals exactly when
    the score does: 0.695 shows as 0.69 beside its WARN under a 0.70 pass
    band, never as a 0.70 that looks like a pass.
    """
    scale = 10**digits
    # round_score first: 0.29 * 100 is 28.999999999999996 in binary floating point.
    cut = math.floor(round(round_score(score) * scale, SCORE_DIGITS)) / scale
    return f"{cut:.{digits}f}"


@dataclass(frozen=True)
class Bands:
    """Verdict bands on the 0–1 score: pass ≥ ``pass_``, warn ≥ ``warn``, else fail.

    In a benchmark file the keys are ``pass`` and ``warn`` (floats in [0, 1],
    strictly typed, no other key); pydantic models take a :class:`Bands`
    field as that mapping and dump it back the same way.
    """

    pass_: float = 0.70
    warn: float = 0.40

    def __post_init__(self) -> None:
        for name, value in (("pass", self.pass_), ("warn", self.warn)):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise TypeError(f"bands: {name} must be a number, not {type(value).__name__}")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"bands: {name} ({value}) is outside [0, 1]")
        if self.warn > self.pass_:
            raise ValueError(f"warn ({self.warn}) must not exceed pass ({self.pass_})")
        object.__setattr__(self, "pass_", float(self.pass_))
        object.__setattr__(self, "warn", float(self.warn))

    def to_json(self) -> dict[str, float]:
        """The bands as a benchmark file and summary.json spell them."""
        return {"pass": self.pass_, "warn": self.warn}

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        from pydantic_core import core_schema as cs

        unit = cs.float_schema(ge=0.0, le=1.0, strict=True)
        mapping = cs.typed_dict_schema(
            {
                "pass_": cs.typed_dict_field(unit, required=False, validation_alias="pass"),
                "warn": cs.typed_dict_field(unit, required=False),
            },
            extra_behavior="forbid",
        )

        def from_mapping(value: Any, validate: cs.ValidatorFunctionWrapHandler) -> Bands:
            return value if isinstance(value, cls) else cls(**validate(value))

        return cs.no_info_wrap_validator_function(
            from_mapping,
            mapping,
            serialization=cs.plain_serializer_function_ser_schema(cls.to_json),
        )


def band_verdict(score: float, bands: Bands) -> GradedVerdict:
    """The verdict a score earns under *bands* (the warn band is real).

    The score is compared as written: rounded by :func:`round_score`.
    """
    score = round_score(score)
    if score >= bands.pass_:
        return "pass"
    if score >= bands.warn:
        return "warn"
    return "fail"


# --------------------------------------------------------------------------- aggregations

Aggregation = Literal["weighted_sum", "weighted_median", "min", "cap_by_worst", "majority_vote"]
#: The aggregation strategies a composite can use, by name (functions: ``_evals.AGGREGATIONS``).
AGGREGATION_NAMES: tuple[Aggregation, ...] = get_args(Aggregation)
#: Aggregations through which a verdict never improves (at most the worst child's).
MONOTONE_AGGREGATIONS: frozenset[str] = frozenset({"min", "cap_by_worst"})

# --------------------------------------------------------------------------- errors


class AgentevalError(Exception):
    """The base of every exception pytest-agenteval raises."""


class SpecError(AgentevalError):
    """Bad input — a benchmark, golden, conditions or replay file — located by file and line."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path = Path(path)
        self.line = line
        self.message = message
        super().__init__(self.location + ": " + message)

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line else str(self.path)


class ConfigError(AgentevalError):
    """A usage or configuration error (bad option, missing key, unknown model): the run stops.

    Messages name the option, the environment variable or the model, never a credential.
    """


class JudgeError(AgentevalError):
    """No grade could be obtained; the item is an ERROR, never a pass or fail."""


class SubjectError(AgentevalError):
    """The subject could not answer: the item is an ERROR."""


class EvidenceError(AgentevalError):
    """Evidence that cannot be read or trusted (a file that is not a regular file, too large, changing)."""


class ItemError(AgentevalError):
    """An ERROR outcome of an item (its subject or judge failed); shown without a traceback."""

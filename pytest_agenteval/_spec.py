"""The benchmark file formats, as strict pydantic models.

Two files make a family:

``benchmark.yaml``
    the family: its pillars (weights, aggregation), verdict bands, judge
    prompt file and presets (which controls, aggregation overrides, bands,
    gate policy). Presets are data.

``<article>.yaml``
    one control or article in AgentEval's format: a ``metadata`` mapping and a
    ``scenarios`` list. The short form of DESIGN.md (top-level keys, ``prompt``
    and ``criteria``) is accepted as an alias. A criterion is a plain string
    (judged by an LLM) or ``{text, check}`` where ``check`` is decidable
    offline (see :mod:`pytest_agenteval._checks`).

Every model forbids unknown keys and coerces nothing (``threshold: "0.7"`` is
an error, not 0.7).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_core import PydanticCustomError

from ._checks import Check, CheckSyntaxError, parse_check
from ._vocab import Aggregation as AggregationName
from ._vocab import Bands, Severity

WEIGHT_TOLERANCE = 1e-3


def _norm_aggregation(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().replace("-", "_").replace(" ", "_")
        # AgentEval spells them in PascalCase ("WeightedSum", "CapByWorst").
        snake = "".join("_" + c.lower() if c.isupper() else c for c in text).lstrip("_")
        return snake.replace("__", "_")
    return value


Aggregation = Annotated[AggregationName, BeforeValidator(_norm_aggregation)]

Number = float  # the models are strict: ints are accepted, bools and strings are not
Unit = Annotated[Number, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


@pydantic_dataclass(
    frozen=True, slots=True, config=ConfigDict(extra="forbid", arbitrary_types_allowed=True)
)
class Criterion:
    """One criterion: a slotted dataclass, not a model. A benchmark holds one or more for
    each of its scenarios for the whole run, and a model's ``__dict__`` and fields-set
    cost about 500 bytes apiece. Not strict as a whole, so that a mapping is read into
    it; its text is strict, and its check is parsed below."""

    text: StrictStr
    check: Check | None = None

    @field_validator("check", mode="before")
    @classmethod
    def _parse(cls, value: Any) -> Any:
        if value is None or isinstance(value, Check):
            return value
        try:
            return parse_check(value)
        except CheckSyntaxError as exc:
            raise ValueError(str(exc)) from None


def _criterion(value: Any) -> Any:
    return {"text": value} if isinstance(value, str) else value


class Turn(_Strict):
    """An earlier turn of a multi-turn scenario; ``tool`` turns carry a tool's output."""

    role: Literal["user", "assistant", "tool"]
    content: StrictStr
    name: StrictStr | None = None  # the tool's name, on tool turns
    arguments: dict[str, Any] | None = None  # the call's arguments, on tool turns


def _exactly(kind: type, error: str, message: str) -> BeforeValidator:
    """Only *kind* itself, as a strict model takes it (pydantic before 2.8 cannot put
    ``Strict()`` on a list or a dict): no tuple read as a list, no mapping as a dict."""

    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise PydanticCustomError(error, message)
        return value

    return BeforeValidator(check)


_LIST = _exactly(list, "list_type", "Input should be a valid list")
_DICT = _exactly(dict, "dict_type", "Input should be a valid dictionary")


@pydantic_dataclass(frozen=True, slots=True, kw_only=True, config=ConfigDict(extra="forbid"))
class Scenario:
    """One scenario: a slotted dataclass, not a model, as :class:`Criterion` (a benchmark
    holds every scenario for the whole run; a model's ``__dict__`` and fields-set cost
    about 0.8 KB apiece). Not strict as a whole, so that a mapping is read into it; each
    field is, as in the models (a literal matches only its own strings)."""

    id: Annotated[str, Strict(), Field(min_length=1, max_length=200)]
    pattern: Literal["direct", "trap", "edge-case", "probe"] = "direct"
    weight: Annotated[Number, Strict(), Field(gt=0.0, le=1.0)] = 1.0
    input: Annotated[str, Strict(), Field(min_length=1)]
    expected_behavior: StrictStr = ""
    evaluation_criteria: Annotated[
        list[Annotated[Criterion, BeforeValidator(_criterion)]], _LIST, Field(min_length=1)
    ]
    granularity: Literal["atomic", "composite"] = "atomic"
    sensitive: StrictBool = False
    severity: Severity | None = None
    # lists in the file, tuples here: an empty one is the one empty tuple, not a list apiece
    tags: Annotated[tuple[StrictStr, ...], _LIST] = ()
    system: StrictStr | None = None
    turns: Annotated[tuple[Turn, ...], _LIST] = ()
    tools: Annotated[tuple[Annotated[dict[str, Any], _DICT], ...], _LIST] = ()

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, data: Any) -> Any:
        return _rename(data, _SCENARIO_ALIASES)


class ArticleMeta(_Strict):
    article: StrictStr
    pillar: StrictStr
    control_id: StrictStr
    title: StrictStr
    severity: Severity = "medium"
    pass_threshold: Unit | None = None
    warn_threshold: Unit | None = None
    pillar_weight: Annotated[Number, Field(gt=0.0, le=1.0)] | None = None
    aggregation: Aggregation = "weighted_sum"
    description: StrictStr = ""
    rubric: list[Annotated[Criterion, BeforeValidator(_criterion)]] = Field(default_factory=list)
    required: StrictBool = False
    pack: StrictStr | None = None
    #: Other ids of this control (AgentEval's, a former id): golden entries'
    #: ``article`` and presets' ``controls`` may name the control by any of them.
    aliases: list[Annotated[StrictStr, Field(min_length=1)]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _thresholds(self) -> ArticleMeta:
        if (
            self.pass_threshold is not None
            and self.warn_threshold is not None
            and self.warn_threshold > self.pass_threshold
        ):
            raise ValueError(
                f"warn_threshold ({self.warn_threshold}) exceeds pass_threshold "
                f"({self.pass_threshold})"
            )
        return self


_META_KEYS = set(ArticleMeta.model_fields)


class ArticleFile(_Strict):
    metadata: ArticleMeta
    scenarios: list[Scenario] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        """Accept DESIGN.md's short form: metadata keys at the top level."""
        if isinstance(data, dict) and "metadata" not in data:
            top = {k: v for k, v in data.items() if k in _META_KEYS}
            if top:
                rest = {k: v for k, v in data.items() if k not in _META_KEYS}
                top.setdefault("control_id", top.get("article"))
                return {"metadata": top, **rest}
        return data


class CalibrationGate(_Strict):
    """Minimum agreement of the judge with the golden labels."""

    kappa: Unit | None = None
    accuracy: Unit | None = None


class PillarSpec(_Strict):
    key: StrictStr = Field(min_length=1)
    title: StrictStr = ""
    weight: Annotated[Number, Field(gt=0.0, le=1.0)]
    aggregation: Aggregation = "weighted_sum"
    bands: Bands | None = None
    required: StrictBool = False
    calibration: CalibrationGate | None = None


class GateSpec(_Strict):
    """What decides the exit status, beyond the root verdict.

    The defaults are the strict ones, so a family, a preset or an article file
    run on its own that says nothing gets them: no errored item
    (``max_errors``), no FAILED scenario of critical severity
    (``max_critical_failures``; the scenario's severity, else its article's)
    and no item whose judge suspected the answer of steering it
    (``max_injection_suspected``). A preset's ``gate`` replaces the family's
    whole, with these defaults for what it leaves out.
    """

    fail_on: Literal["fail", "warn"] = "fail"
    min_score: Unit | None = None
    max_errors: Annotated[StrictInt, Field(ge=0)] = 0
    max_critical_failures: Annotated[StrictInt, Field(ge=0)] = 0
    max_injection_suspected: Annotated[StrictInt, Field(ge=0)] = 0
    #: Largest significant drop against a baseline run (see _compare.py); with a
    #: baseline and no bound given, 0: any significant drop fails.
    regression_max: Unit | None = None
    #: Significance level of the regression's sign test (default 0.05).
    regression_alpha: Annotated[Number, Field(gt=0.0, lt=1.0)] | None = None
    #: Per-suite floors for the suites' metrics, overriding a suite's own suite_min.
    suite_min: dict[StrictStr, Unit] = Field(default_factory=dict)
    #: --pairwise=A,B: B must beat A — its win rate over non-ties above this (default 0.5)
    #: by a one-sided exact binomial test at pairwise_alpha (default 0.05); see _pairwise.py.
    pairwise_min_win_rate: Annotated[Number, Field(ge=0.0, lt=1.0)] | None = None
    pairwise_alpha: Annotated[Number, Field(gt=0.0, lt=1.0)] | None = None


class SuiteSelect(_Strict):
    """Which scenarios a suite holds: each key given narrows; within a key, any value matches."""

    tags: list[StrictStr] | None = None
    patterns: list[Literal["direct", "trap", "edge-case", "probe"]] | None = None
    articles: list[StrictStr] | None = None  # control ids (or their aliases)
    pillars: list[StrictStr] | None = None
    ids: list[StrictStr] | None = None  # shell-style globs over scenario ids

    @model_validator(mode="after")
    def _something(self) -> SuiteSelect:
        if all(
            v is None for v in (self.tags, self.patterns, self.articles, self.pillars, self.ids)
        ):
            raise ValueError("select at least one of tags, patterns, articles, pillars, ids")
        return self


class SuiteSpec(_Strict):
    """A named, weighted selection of scenarios with its own metric (Layerup 13.1)."""

    name: StrictStr = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    title: StrictStr = ""
    select: SuiteSelect
    weight: Annotated[Number, Field(ge=0.0, le=1.0)]
    metric: Literal["mean_score", "pass_rate"] = "mean_score"
    suite_min: Unit | None = None
    required: StrictBool = False


class AggregationOverrides(_Strict):
    root: Aggregation | None = None
    pillars: dict[StrictStr, Aggregation] | Aggregation | None = None
    articles: dict[StrictStr, Aggregation] | Aggregation | None = None


class PresetSpec(_Strict):
    description: StrictStr = ""
    controls: list[StrictStr] | Literal["all"] = "all"
    extends: StrictStr | None = None
    pack: StrictBool = False
    weights: dict[StrictStr, Annotated[Number, Field(gt=0.0)]] = Field(default_factory=dict)
    aggregation: AggregationOverrides = Field(default_factory=AggregationOverrides)
    bands: Bands | None = None
    judges: Annotated[StrictInt, Field(ge=1, le=9)] = 1
    samples: Annotated[StrictInt, Field(ge=1, le=50)] = 1
    # how a scenario's samples combine: their mean, or AgentEval's MajorityVote
    samples_aggregation: Literal["mean", "majority_vote"] = "mean"
    mode_b: StrictBool = False
    gate: GateSpec | None = None
    calibration: CalibrationGate | None = None


class BenchmarkSpec(_Strict):
    family: StrictStr = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    title: StrictStr = ""
    version: StrictStr = "1"
    description: StrictStr = ""
    judge_prompt: StrictStr | None = None
    bands: Bands = Field(default_factory=Bands)
    aggregation: Aggregation = "weighted_sum"
    gate: GateSpec = Field(default_factory=GateSpec)
    pillars: list[PillarSpec] = Field(min_length=1)
    presets: dict[StrictStr, PresetSpec] = Field(default_factory=dict)
    suites: list[SuiteSpec] = Field(default_factory=list)


#: The short form's spellings of a scenario's keys (DESIGN.md): the file's -> the model's.
_SCENARIO_ALIASES = {"prompt": "input", "criteria": "evaluation_criteria"}
#: For errors: a model key -> how a file in the short form spells it.
WRITTEN_AS = {model: short for short, model in _SCENARIO_ALIASES.items()}


def _rename(data: Any, aliases: dict[str, str]) -> Any:
    if not isinstance(data, dict) or data.keys().isdisjoint(aliases):
        return data  # as it is: no copy of every scenario of a large file
    out = dict(data)
    for short, long in aliases.items():
        if short in out:
            if long in out:
                raise ValueError(f"both {short!r} and {long!r} given; use one")
            out[long] = out.pop(short)
    return out

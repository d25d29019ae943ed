"""The run's files as typed models: the contract for tools that read a run directory.

``summary.json``, each line of ``results.jsonl`` and ``calibration.json``
are described here as pydantic models; their JSON Schemas (draft 2020-12)
are generated from these models by ``scripts/gen_schemas.py`` and shipped
in ``pytest_agenteval/schemas/``. The tests validate real run outputs
against the shipped schemas and check that they match the models.

The models name every field a reader may rely on, with its type; objects
allow further keys, so that adding a field is not a breaking change (the
``schema`` key of summary.json carries the version for the ones that are).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

from ._vocab import GradedVerdict, Severity, Verdict

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


class _Open(BaseModel):
    """An object that names its fields and tolerates new ones."""

    model_config = ConfigDict(extra="allow")


# --------------------------------------------------------------------------- results.jsonl


class CriterionRecord(_Open):
    criterion: str
    met: bool | None = Field(description="null: not assessed (needs an LLM judge)")
    reasoning: str | None = None
    check: dict[str, Any] | None = Field(
        default=None, description="the deterministic check that decided it, if any"
    )


class ResultRecord(_Open):
    """A graded result: a scenario, or (as children) its samples or judges."""

    key: str
    name: str
    kind: str
    score: float | None = Field(ge=0, le=1)
    verdict: Verdict
    weight: float
    severity: Severity | None = None
    reasoning: str | None = None
    error: str | None = Field(default=None, description="why no grade: set when verdict is error")
    criteria: list[CriterionRecord] = []
    children: list[ResultRecord] = []
    meta: dict[str, Any] = Field(
        default_factory=dict,
        description="control_id, pillar, file, line, judge, injection_suspected, panel, ...",
    )


class McpCallRecord(_Open):
    """One call to a condition's MCP server during an item."""

    server: str = Field(description="the server's name in the conditions file")
    name: str = Field(description="the tool called")
    arguments: dict[str, Any]
    result: str | None = Field(
        default=None, description="the tool's text, cut to 2000 characters (see result_chars)"
    )
    result_chars: int | None = Field(default=None, ge=0, description="length of the full text")
    is_error: bool | None = Field(default=None, description="the server flagged the result")
    error: str | None = Field(default=None, description="the server did not answer (item ERROR)")
    latency_s: float = Field(ge=0)
    step: int | None = Field(default=None, description="the tool loop's model call it answered")


class ToolLoopRecord(_Open):
    """How an openai:/anthropic: subject's tool loop ended."""

    steps: int = Field(ge=0, description="model calls made")
    max_steps: int = Field(ge=1)
    stopped: Literal["answer", "step_limit", "unserved_tool"] = Field(
        description="answer: the model answered; step_limit: it still asked for tools after "
        "max_steps calls; unserved_tool: it called a tool no server serves (a scenario's own)"
    )


class ItemRecord(_Open):
    """One benchmark item: a scenario under one condition and sample."""

    nodeid: str
    family: str
    preset: str
    scenario_id: str
    condition: str | None
    sample: int = Field(ge=0)
    subject: str
    prompt: str
    answer: str | None = Field(description="exactly what the subject returned; null: no answer")
    tool_calls: list[dict[str, Any]]
    usage: dict[str, Any]
    result: ResultRecord
    prev: str = Field(description="SHA-256 of the previous line (the first: of the manifest)")
    converted: list[dict[str, Any]] | None = Field(
        default=None, description="values canonical JSON cannot hold, kept as strings"
    )
    replay: dict[str, Any] | None = Field(
        default=None,
        description="--replay: file, sha256 and line of the recorded answer that was graded",
    )
    mcp_calls: list[McpCallRecord] | None = Field(
        default=None, description="under a condition with MCP servers: every tool call, in order"
    )
    tool_loop: ToolLoopRecord | None = Field(
        default=None, description="an openai:/anthropic: subject's tool loop, when it ran one"
    )


class CalibrationRecord(_Open):
    """One golden entry graded by the judge."""

    kind: Literal["calibration"]
    id: str
    scenario_id: str
    article: str
    pillar: str
    file: str
    line: int
    expected: GradedVerdict
    actual: GradedVerdict | None
    score: float | None
    verdict: Verdict
    prev: str


class SealRecord(_Open):
    """The last line: every file of the run bound to the chain head."""

    kind: Literal["seal"]
    files: dict[str, str] = Field(description="file name -> SHA-256 of its bytes")
    completed: bool
    interrupted: bool
    not_evaluated: int = Field(ge=0)
    prev: str


class PairwiseSideRecord(_Open):
    """One side's answer in a comparison (``--pairwise``)."""

    label: str = Field(description="the side as given: a condition name or subject:SPEC")
    condition: str | None
    subject: str
    answer: str | None = Field(description="exactly what the side's subject returned")
    tool_calls: list[dict[str, Any]]
    injection_suspected: bool
    error: str | None = None


class PairwiseRecord(_Open):
    """One comparison of a ``--pairwise`` run: both answers and the judge's preference."""

    kind: Literal["pairwise"]
    nodeid: str
    family: str
    preset: str
    scenario_id: str
    prompt: str
    pairwise: dict[str, Any] | None = Field(
        description='a, b (PairwiseSideRecord), order (the sides as shown, e.g. ["b", "a"]), '
        "preference (a, b or tie; null when not compared), judge (said: first|second|tie, "
        "reasoning, nonce, details), swap (the position check's second verdict, with agrees), "
        "prompt (version, sha256); null when the item errored before any answer"
    )
    error: str | None = Field(description="why no comparison was made; null when compared")
    prev: str


class ResultsLine(RootModel[SealRecord | CalibrationRecord | PairwiseRecord | ItemRecord]):
    """A line of results.jsonl: an item, a calibration entry, a comparison, or the seal."""


# --------------------------------------------------------------------------- summary.json


class Gate(_Open):
    passed: bool
    reasons: list[str]
    notes: list[str] = []
    critical_failures: list[str] = []
    injection_suspected: list[str] = []


class ItemCounts(_Open):
    passed: int = Field(ge=0)
    failed: int = Field(ge=0)
    errors: int = Field(ge=0)
    skipped: int = Field(ge=0)
    warned: int = Field(default=0, ge=0)


class Reliability(_Open):
    """Agreement of repeated samples over the scenarios under a node (asked twice or more)."""

    scenarios: int = Field(ge=1, description="scenarios with two or more graded samples")
    unanimous: int = Field(ge=0, description="of those, whose graded samples share one verdict")
    agreement: float = Field(ge=0, le=1, description="unanimous / scenarios")
    mean_std: float | None = Field(description="mean of their score_std")
    disagreeing: list[str] = Field(description="ids of the scenarios that are not unanimous")


class Node(_Open):
    """A node of the tree: benchmark ▸ pillar ▸ article ▸ scenario."""

    id: str
    kind: str = Field(description="benchmark | pillar | article | scenario")
    score: float | None
    verdict: Verdict
    weight: float
    aggregation: str | None
    children: list[Node] = []
    title: str | None = None
    severity: Severity | None = None
    counts: dict[str, int] = {}
    samples: int | None = Field(
        default=None,
        ge=1,
        description="scenario nodes: answers asked per scenario (--samples, a preset's samples)",
    )
    score_std: float | None = Field(
        default=None,
        ge=0,
        description="scenario nodes: sample standard deviation (n - 1) of the samples' scores; "
        "null with fewer than two graded samples",
    )
    score_ci: list[float] | None = Field(
        default=None,
        min_length=2,
        max_length=2,
        description="scenario nodes: [lo, hi], the 95% interval of the score (ci_method t: "
        "t-interval of the mean; wilson: Wilson interval of the pass share under "
        "samples_aggregation majority_vote); null with fewer than two graded samples",
    )
    reliability: Reliability | None = Field(
        default=None,
        description="benchmark, pillar and article nodes of a run with samples: how often the "
        "samples of a scenario agree on its verdict",
    )
    bands: dict[str, float] | None = Field(
        default=None, description="article nodes: the article's own bands (pass, warn)"
    )


class PairwisePosition(_Open):
    """The position-bias check of a pairwise run."""

    checked: int = Field(ge=0, description="comparisons judged a second time, order swapped")
    agreed: int = Field(ge=0, description="of those, the two verdicts named the same side")
    agreement: float | None = Field(ge=0, le=1, description="agreed / checked")
    first_shown_rate: float | None = Field(
        ge=0,
        le=1,
        description="of all non-tie first verdicts, the share preferring the "
        "answer shown first (0.5: no position bias)",
    )


class PairwiseSummary(_Open):
    """``pairwise`` of summary.json: B (the candidate) against A (the baseline)."""

    a: str
    b: str
    wins: int = Field(ge=0, description="comparisons B won")
    losses: int = Field(ge=0, description="comparisons A won")
    ties: int = Field(ge=0)
    win_rate: float | None = Field(ge=0, le=1, description="wins / (wins + losses); null: all tied")
    ci: list[float] | None = Field(
        description="95 % Wilson score interval of win_rate; null below two non-ties"
    )
    p_value: float = Field(ge=0, le=1, description="two-sided exact sign test over non-ties")
    seed: int = Field(description="the seed of the orders shown (--pairwise-seed repeats them)")
    position: PairwisePosition
    requirement: dict[str, Any] | None = Field(
        default=None,
        description="with a preset gate's pairwise_alpha / pairwise_min_win_rate: the one-sided "
        "test that B beats A (min_win_rate, alpha, p_value, passed)",
    )


class RunSummary(_Open):
    """summary.json of a benchmark, calibration or pairwise run."""

    schema_: str = Field(alias="schema", description="pytest-agenteval/summary/N")
    run_id: str
    family: str
    preset: str
    subject: str
    judge: list[str]
    score: float | None = Field(ge=0, le=1)
    verdict: Verdict
    gate: Gate
    items: ItemCounts
    nodes: list[Node]
    started_at: str
    ended_at: str
    plugin_version: str
    baseline: dict[str, Any] | None = Field(
        default=None, description="with --baseline: run_id, path, chain_head of the baseline"
    )
    regression: dict[str, Any] | None = Field(
        default=None,
        description="with a baseline: max_drop, level, node, significant, p_value, "
        "newly_failing, fixed, pillars",
    )
    suites: dict[str, Any] | None = Field(
        default=None, description="suite bench score and each suite's metric (when defined)"
    )
    calibration: dict[str, Any] | None = Field(
        default=None, description="on calibration runs: the gate and counts of calibration.json"
    )
    pairwise: PairwiseSummary | None = Field(
        default=None, description="on --pairwise runs: B against A (score is null, nodes empty)"
    )
    conditions_comparison: dict[str, Any] | None = Field(
        default=None,
        description="with several conditions: reference (the first), method, and groups "
        "(overall, then each pillar) of each condition's score, mean and ci, and its "
        "difference to the reference (paired_scenarios, mean, ci, better, worse, ties, p_value)",
    )


# --------------------------------------------------------------------------- calibration.json


class GroupGate(_Open):
    passed: bool


class CalibrationGroup(_Open):
    """The metrics of one pillar, or of ``overall``."""

    n: int = Field(ge=0)
    accuracy: float | None
    kappa: float | None = Field(description="null where undefined (one class)")
    confusion: Any
    per_class: Any
    brier: float | None
    ece: float | None
    auc: float | None
    mean_abs_score_delta: float | None
    split: str
    gate: GroupGate


class CalibrationReport(_Open):
    """calibration.json: per pillar and overall, with the run's gate."""

    pillars: dict[str, CalibrationGroup]
    overall: CalibrationGroup
    gate: Gate


SCHEMAS: dict[str, type[BaseModel]] = {
    "summary.schema.json": RunSummary,
    "results-line.schema.json": ResultsLine,
    "calibration.schema.json": CalibrationReport,
}


def json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema (draft 2020-12), as shipped."""
    schema = model.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render_schemas() -> dict[str, str]:
    """File name -> the text of each shipped schema."""
    return {
        name: json.dumps(json_schema(model), indent=2, sort_keys=True) + "\n"
        for name, model in SCHEMAS.items()
    }

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

Verdict = Literal["pass", "warn", "fail", "error", "skipped"]
Severity = Literal["low", "medium", "high", "critical"]
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


class CalibrationRecord(_Open):
    """One golden entry graded by the judge."""

    kind: Literal["calibration"]
    id: str
    scenario_id: str
    article: str
    pillar: str
    file: str
    line: int
    expected: Literal["pass", "warn", "fail"]
    actual: Literal["pass", "warn", "fail"] | None
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


class ResultsLine(RootModel[SealRecord | CalibrationRecord | ItemRecord]):
    """A line of results.jsonl: an item, a calibration entry, or the closing seal."""


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


class RunSummary(_Open):
    """summary.json of a benchmark or calibration run."""

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

"""The typed run model: every file of a run directory, and what the reports read.

``summary.json`` (:class:`RunSummary`, with :class:`CalibrationSummary` on
calibration runs), each line of ``results.jsonl`` (:class:`ItemRecord` and
the other :class:`ResultsLine` kinds) and ``calibration.json``
(:class:`CalibrationReport`) are pydantic models; :class:`RunHeader` is the
run as the JUnit and SARIF writers see it, and :class:`ReportRecord` an item
placed in its family (article, repository file and line). Everything after
grading — JUnit, SARIF, markdown, HTML, the GitHub summary — is a pure
function of these models, and dicts exist only at :meth:`~_Open.from_json`
and :meth:`~_Open.to_json`.

Their JSON Schemas (draft 2020-12) are generated from the models by
``scripts/gen_schemas.py`` and shipped in ``pytest_agenteval/schemas/``. The
tests validate real run outputs against the shipped schemas, check that they
match the models, and that ``from_json`` then ``to_json`` gives back the
file's JSON unchanged.

The models name every field a reader may rely on, with its type; objects
allow further keys, so that adding a field is not a breaking change (the
``schema`` key of summary.json carries the version for the ones that are).
Fields are declared in the order the files write them, so that ``to_json``
keeps that order too; values nothing here reads stay JSON (``JsonValue``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, JsonValue, RootModel

from ._vocab import Bands, GradedVerdict, JSONObject, Severity, Verdict

# pydantic's JsonValue is _vocab.JSONValue spelled so that pydantic can build a
# validator for it (it cannot resolve that alias's string forward references).

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"

__all__ = [
    "SCHEMAS",
    "SCHEMA_DIR",
    "ArticleRef",
    "CalibrationGroup",
    "CalibrationReport",
    "CalibrationSummary",
    "CostLine",
    "CostTotals",
    "CriterionRecord",
    "Gate",
    "ItemCost",
    "ItemCounts",
    "ItemRecord",
    "Node",
    "ReportRecord",
    "ResultMeta",
    "ResultRecord",
    "ResultsLine",
    "RunHeader",
    "RunSummary",
    "SourceLocation",
    "json_schema",
    "render_schemas",
]


_M = TypeVar("_M", bound="_Open")


class _Open(BaseModel):
    """An object that names its fields and tolerates new ones."""

    # protected_namespaces=(): record fields such as ``model_requested`` are the
    # evidence's names; pydantic before 2.10 would warn about the ``model_`` prefix.
    model_config = ConfigDict(extra="allow", populate_by_name=True, protected_namespaces=())

    @classmethod
    def from_json(cls: type[_M], data: Mapping[str, object]) -> _M:
        """The model of *data* (a JSON object as read from a file), validated."""
        return cls.model_validate(data)

    def to_json(self) -> JSONObject:
        """The JSON object this model was read from: the keys it had, in the model's order."""
        # python mode: every field holds JSON already, and mode="json" would rewrite a lone
        # surrogate in a key (which results.jsonl can hold) as U+FFFD
        return self.model_dump(by_alias=True, exclude_unset=True)


# --------------------------------------------------------------------------- results.jsonl


class CriterionRecord(_Open):
    criterion: str
    met: bool | None = Field(description="null: not assessed (needs an LLM judge)")
    reasoning: str | None = None
    check: dict[str, JsonValue] | None = Field(
        default=None, description="the deterministic check that decided it, if any"
    )


class ResultMeta(_Open):
    """What a grade says about itself: where its scenario is, who judged it, injection flags."""

    control_id: str | None = None
    family: str | None = None
    file: str | None = Field(default=None, description="the scenario's file, in its family")
    line: int | None = None
    judge: str | None = None
    pattern: str | None = None
    pillar: str | None = None
    injection_suspected: bool | None = Field(
        default=None, description="the answer tries to steer the judge (null: not checked)"
    )
    injection_reasons: list[str] | None = None
    panel: list[JsonValue] | None = Field(default=None, description="the judges that graded")
    usage: dict[str, JsonValue] | None = Field(
        default=None, description="a judge's tokens (prompt_tokens, completion_tokens)"
    )
    cost: JsonValue = Field(default=None, description="a judge's cost, when it reports one")


class ResultRecord(_Open):
    """A graded result: a scenario, or (as children) its samples or judges."""

    key: str
    name: str
    kind: str
    score: float | None = Field(ge=0, le=1)
    verdict: Verdict
    weight: float
    aggregation: str | None = None
    required: bool | None = None
    severity: Severity | None = None
    reasoning: str | None = None
    error: str | None = Field(default=None, description="why no grade: set when verdict is error")
    criteria: list[CriterionRecord] = []
    children: list[ResultRecord] = []
    meta: ResultMeta = Field(
        default_factory=ResultMeta,
        description="control_id, pillar, file, line, judge, injection_suspected, panel, ...",
    )


class McpCallRecord(_Open):
    """One call to a condition's MCP server during an item."""

    server: str = Field(description="the server's name in the conditions file")
    name: str = Field(description="the tool called")
    arguments: dict[str, JsonValue]
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


class CostLine(_Open):
    """Tokens and dollars (``usd`` null when a model's rate is unknown)."""

    usd: float | None
    prompt_tokens: int
    completion_tokens: int


class ItemCost(_Open):
    """What one item cost: the subject's call, the judges' calls, and both."""

    subject: CostLine
    judge: CostLine
    total: CostLine


class Timings(_Open):
    """Seconds spent in the subject and in the judge (null: the step did not run)."""

    subject_s: float | None = None
    judge_s: float | None = None


class _Item(_Open):
    """The fields of one benchmark item: a scenario under one condition and sample."""

    nodeid: str
    family: str
    preset: str
    scenario_id: str
    condition: str | None
    sample: int = Field(ge=0)
    subject: str
    prompt: str
    answer: str | None = Field(description="exactly what the subject returned; null: no answer")
    tool_calls: list[dict[str, JsonValue]]
    usage: dict[str, JsonValue]
    cost: ItemCost | None = Field(default=None, description="null: the item made no call")
    timings: Timings | None = None
    result: ResultRecord
    converted: list[dict[str, JsonValue]] | None = Field(
        default=None, description="values canonical JSON cannot hold, kept as strings"
    )
    replay: dict[str, JsonValue] | None = Field(
        default=None,
        description="--replay: file, sha256 and line of the recorded answer that was graded",
    )
    mcp_calls: list[McpCallRecord] | None = Field(
        default=None, description="under a condition with MCP servers: every tool call, in order"
    )
    tool_loop: ToolLoopRecord | None = Field(
        default=None, description="an openai:/anthropic: subject's tool loop, when it ran one"
    )


class ItemRecord(_Item):
    """One benchmark item, as a line of results.jsonl."""

    prev: str = Field(description="SHA-256 of the previous line (the first: of the manifest)")


class ArticleRef(_Open):
    """The article (control) a scenario belongs to, as the reports name it."""

    control_id: str
    title: str | None = None
    article: str | None = Field(default=None, description="the provision, e.g. Article 5(1)(c)")
    severity: Severity | None = None
    pillar: str | None = None


class ReportRecord(_Item):
    """An item placed in its family: what the JUnit, SARIF and human reports read.

    ``file`` and ``line`` locate the scenario (relative to the repository
    root, or ``FAMILY/...`` for a ``bundled`` family whose files are inside
    the installed package).
    """

    file: str | None = None
    line: int | None = None
    bundled: bool = False
    declared_severity: Severity | None = Field(
        default=None, description="the scenario's own severity, else its article's"
    )
    article: ArticleRef | None = None


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
    tool_calls: list[dict[str, JsonValue]]
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
    pairwise: dict[str, JsonValue] | None = Field(
        description='a, b (PairwiseSideRecord), order (the sides as shown, e.g. ["b", "a"]), '
        "preference (a, b or tie; null when not compared), judge (said: first|second|tie, "
        "reasoning, nonce, details), swap (the position check's second verdict, with agrees), "
        "prompt (version, sha256); null when the item errored before any answer"
    )
    error: str | None = Field(description="why no comparison was made; null when compared")
    prev: str


class ResultsLine(RootModel[SealRecord | CalibrationRecord | PairwiseRecord | ItemRecord]):
    """A line of results.jsonl: an item, a calibration entry, a comparison, or the seal."""


# --------------------------------------------------------------------------- the run header


class SourceLocation(_Open):
    """A file of the repository, and a line in it."""

    file: str
    line: int | None = None


class RunHeader(_Open):
    """The run as the JUnit and SARIF writers see it (not a file of the run directory)."""

    family: str | None = None
    preset: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    gate_passed: bool | None = None
    score: float | None = None
    verdict: Verdict | None = None
    tool_version: str | None = None
    subject: str | None = None
    completed: bool = True
    interrupted: bool = False
    bundled_location: SourceLocation | None = Field(
        default=None,
        description="where a bundled family's findings show in code scanning: the pytest "
        "configuration that runs it (its own files are not in the repository)",
    )
    information_uri: str | None = None


# --------------------------------------------------------------------------- summary.json


class Gate(_Open):
    passed: bool
    reasons: list[str]
    notes: list[str] = []
    critical_failures: list[str] = []
    injection_suspected: list[str] = []


class ItemCounts(_Open):
    passed: int = Field(ge=0)
    warned: int = Field(default=0, ge=0)
    failed: int = Field(ge=0)
    errors: int = Field(ge=0)
    skipped: int = Field(ge=0)
    injection_suspected: int = Field(default=0, ge=0, description="of these, flagged by a judge")
    of: int | None = Field(
        default=None,
        ge=0,
        description="the items a full run of the preset holds; fewer ran in a partial run "
        "(-k, -m, --lf), which is no baseline for --baseline=latest and no point of drift",
    )


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
    title: str | None = None
    score: float | None
    verdict: Verdict
    weight: float
    aggregation: str | None
    severity: Severity | None = None
    counts: dict[str, int] = {}
    children: list[Node] = []
    injection_suspected: bool | None = Field(
        default=None, description="scenario nodes: a judge flagged one of its answers"
    )
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
    ci_method: str | None = None
    ci_level: float | None = None
    samples_aggregation: str | None = Field(
        default=None, description="scenario nodes asked several times: mean or majority_vote"
    )
    sample_verdicts: dict[str, int] | None = Field(
        default=None, description="scenario nodes asked several times: samples per verdict"
    )
    unanimous: bool | None = Field(
        default=None, description="scenario nodes asked several times: one verdict for all"
    )
    reliability: Reliability | None = Field(
        default=None,
        description="benchmark, pillar and article nodes of a run with samples: how often the "
        "samples of a scenario agree on its verdict",
    )
    bands: Bands | None = Field(
        default=None, description="article nodes: the article's own bands (pass, warn)"
    )
    error: str | None = None
    note: str | None = Field(default=None, description="why the node has its verdict")


class UnrecordedCalls(_Open):
    """Calls no record holds, which a provider may bill all the same: the totals leave them
    out. Of the whole pytest run: each of its families' (or conditions') summaries says
    the same, so add them up once, not once per summary."""

    calls: int = Field(
        description="paid calls in flight when the run ended, or cancelled in flight before "
        "(-x, Ctrl-C, the budget), or stopped in flight by --judge-deadline, or abandoned at "
        "--subject-timeout and still running; a crashed or stopped xdist worker's by the "
        "ledger it kept"
    )
    usd_at_average: float = Field(
        description="what those calls are expected to cost, at what their models' calls "
        "cost on average in this run (nothing for a model not priced yet)"
    )
    calls_unpriced: int = Field(0, description="of those, calls of a model not priced yet")
    workers_crashed: int = Field(0, description="xdist workers that crashed during the run")
    workers_crashed_without_ledger: int = Field(
        0,
        description="of those, workers that kept no ledger (on another host): their paid "
        "calls in flight are not known (a ledger's are in calls)",
    )
    calls_in_crashed_workers: int = Field(
        0,
        description="calls in flight in the crashed workers without a ledger, by each "
        "one's last report (paid or not; what they cost is not known)",
    )
    usd_answered: float = Field(
        0.0,
        description="what paid calls that answered cost, counted by the run's budget, that "
        "no record holds: the subject's answer of an item whose judging was cancelled when "
        "the run stopped, a call abandoned at --subject-timeout that answered later; the "
        "run's spend less its records' costs, per process (an xdist worker that crashed or "
        "was stopped before handing over its spend: as the ledger it kept last said)",
    )


class CostTotals(_Open):
    """Tokens and dollars for the run and per pillar."""

    total: CostLine
    pillars: dict[str, CostLine] = {}
    unrecorded: UnrecordedCalls | None = Field(
        None, description="calls the totals cannot hold (only when there were some)"
    )


class SuiteScore(_Open):
    """One suite's metric over the scenarios it selects."""

    name: str
    title: str | None = None
    metric: str
    weight: float
    required: bool = False
    suite_min: float | None = None
    value: float | None
    status: str
    scenarios: int | None = None
    graded: int | None = None
    members: list[str] = []


class Suites(_Open):
    """The suite bench score and each suite's metric."""

    bench: float | None
    items: list[SuiteScore] = []


class BaselineRef(_Open):
    """The run a pull-request check compares with."""

    run_id: str | None = None
    path: str | None = None
    chain_head: str | None = None
    family: str | None = None
    preset: str | None = None
    subject: str | None = None
    condition: str | None = None


class Regression(_Open):
    """The regression term of the gate: the largest drop, and whether it is significant."""

    max_drop: float | None
    level: str | None
    node: str | None
    significant: bool
    p_value: float | None
    test: str | None = None
    alpha: float | None = None
    regression_max: float | None = None
    failed_gate: bool = False
    worse: list[str] = []
    newly_failing: list[str] = []
    fixed: list[str] = []


class ScenarioSide(_Open):
    verdict: str | None = None
    score: float | None = None


class ScenarioChange(_Open):
    """A scenario whose verdict or score moved against the baseline."""

    id: str
    article: str | None = None
    pillar: str | None = None
    before: ScenarioSide = Field(default_factory=ScenarioSide)
    after: ScenarioSide = Field(default_factory=ScenarioSide)
    delta: float | None = None
    change: str | None = None


class ComparedScenarios(_Open):
    shared: int = 0
    worse: int = 0
    better: int = 0
    unchanged: int = 0
    not_compared: int = 0
    added: list[str] = []
    removed: list[str] = []
    changed: list[ScenarioChange] = []


class Comparison(_Open):
    """The comparison with the baseline: scenarios and nodes that moved."""

    baseline: BaselineRef = Field(default_factory=BaselineRef)
    scenarios: ComparedScenarios = Field(default_factory=ComparedScenarios)
    nodes: list[dict[str, JsonValue]] = []
    pillars: list[dict[str, JsonValue]] = []
    notes: list[str] = []


class CalibrationSummary(_Open):
    """``calibration`` of a calibration run's summary.json: the gate and counts of calibration.json."""

    status: str = Field(description="pass | fail | insufficient")
    split: str | None = None
    min_n: int | None = None
    gate_on: str | None = None
    insufficient: list[str] = []
    disagreements: int = Field(default=0, ge=0)
    evaluation_failures: int = Field(default=0, ge=0)


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
    requirement: dict[str, JsonValue] | None = Field(
        default=None,
        description="with a preset gate's pairwise_alpha / pairwise_min_win_rate: the one-sided "
        "test that B beats A (min_win_rate, alpha, p_value, passed)",
    )


class RunSummary(_Open):
    """summary.json of a benchmark, calibration or pairwise run."""

    schema_: str = Field(alias="schema", description="pytest-agenteval/summary/N")
    run_id: str
    family: str
    family_version: str | None = None
    preset: str
    condition: str | None = None
    subject: str
    judge: list[str]
    score: float | None = Field(ge=0, le=1)
    verdict: Verdict
    bands: Bands | None = Field(default=None, description="the benchmark's bands (pass, warn)")
    gate: Gate
    items: ItemCounts
    nodes: list[Node]
    cost: CostTotals | None = None
    chain_head: str | None = Field(
        default=None, description="the chain head of the records, before the seal"
    )
    started_at: str
    ended_at: str
    plugin_version: str
    suites: Suites | None = Field(
        default=None, description="suite bench score and each suite's metric (when defined)"
    )
    baseline: BaselineRef | None = Field(
        default=None, description="with --baseline: run_id, path, chain_head of the baseline"
    )
    regression: Regression | None = Field(
        default=None,
        description="with a baseline: max_drop, level, node, significant, p_value, "
        "newly_failing, fixed, pillars",
    )
    comparison: Comparison | None = Field(
        default=None, description="with a baseline: the scenarios and nodes that moved"
    )
    baseline_note: str | None = Field(
        default=None, description="with --baseline but no comparison made: why"
    )
    calibration: CalibrationSummary | None = Field(
        default=None, description="on calibration runs: the gate and counts of calibration.json"
    )
    pairwise: PairwiseSummary | None = Field(
        default=None, description="on --pairwise runs: B against A (score is null, nodes empty)"
    )
    conditions_comparison: dict[str, JsonValue] | None = Field(
        default=None,
        description="with several conditions: reference (the first), method, and groups "
        "(overall, then each pillar) of each condition's score, mean and ci, and its "
        "difference to the reference (paired_scenarios, mean, ci, better, worse, ties, p_value)",
    )


# --------------------------------------------------------------------------- calibration.json


class Thresholds(_Open):
    """What a group's gate asks for."""

    kappa: float | None = None
    accuracy: float | None = None
    max_evaluation_failures: int | None = None
    min_n: int | None = None
    on: str | None = None


class GroupGate(_Open):
    threshold: Thresholds | None = None
    status: str | None = Field(default=None, description="pass | fail | insufficient")
    passed: bool | None
    reasons: list[str] = []
    notes: list[str] = []


class Confusion(_Open):
    labels: list[str]
    matrix: list[list[int]] = Field(description="rows: the label; columns: the judge")


class ClassMetrics(_Open):
    precision: float | None = None
    recall: float | None = None
    f1: float | None = None
    support: int | None = None


class ReliabilityBin(_Open):
    """A bin of the reliability diagram: the judge's scores in [lo, hi)."""

    lo: float
    hi: float
    n: int
    mean_score: float | None
    frac_pass: float | None


class GroupMetrics(_Open):
    """The judge against the labels over one group of entries."""

    n: int = Field(ge=0)
    accuracy: float | None
    kappa: float | None = Field(description="null where undefined (one class)")
    accuracy_ci: list[float | None] | None = Field(default=None, description="[lo, hi]")
    kappa_ci: list[float | None] | None = Field(
        default=None, description="[lo, hi]; [null, null] where undefined"
    )
    confusion: Confusion | None = Field(default=None, description="absent when nothing graded")
    per_class: dict[str, ClassMetrics] = {}
    brier: float | None = None
    ece: float | None = None
    ece_bins: int | None = None
    auc: float | None = None
    mean_abs_score_delta: float | None = None
    share_within_band: float | None = None
    reliability: list[ReliabilityBin] = []
    split: str
    entries: int | None = Field(default=None, description="graded, not gradable and failed")
    evaluation_failures: int = 0
    not_gradable: int = 0
    labels_present: list[str] = []
    inter_rater_fleiss_kappa: float | None = None
    inter_rater_n: int | None = None


class CalibrationGroup(GroupMetrics):
    """The metrics of one pillar, or of ``overall``, on the gated split."""

    calibration_split: GroupMetrics | None = Field(
        default=None, description="the other split's figures, shown beside the gated one"
    )
    gate: GroupGate


class CalibrationGate(_Open):
    passed: bool
    status: str | None = Field(default=None, description="pass | fail | insufficient")
    reasons: list[str]
    notes: list[str] = []
    insufficient: list[str] = []
    min_n: int | None = None
    on: str | None = None


class EntryRef(_Open):
    """A golden entry: where it is and what it is about."""

    id: str
    pillar: str | None = None
    article: str | None = None
    file: str | None = None
    line: int | None = None
    split: str | None = None


class Disagreement(EntryRef):
    """An entry the judge graded against its label (verdict, or score outside the band)."""

    adversarial: JsonValue = None
    expected: str | None = None
    band: list[float] | None = None
    actual: str | None = None
    score: float | None = None
    verdict_differs: bool | None = None
    rationale: str = ""
    reasoning: str = ""


class EvaluationFailure(EntryRef):
    error: str | None = None


class Skipped(_Open):
    total: int = 0
    by_reason: dict[str, int] = {}


class JudgeRef(_Open):
    spec: str | None = None
    provider: str | None = None
    model_requested: str | None = None


class PromptRef(_Open):
    file: str | None = None
    version: str | None = None
    sha256: str | None = None


class GoldenFile(_Open):
    path: str
    sha256: str
    entries: int


class CalibrationLineage(_Open):
    """What graded and what was graded: judges, prompts, golden files."""

    judges: list[JudgeRef] = []
    models_returned: list[str] = []
    prompts_used: list[PromptRef] = []
    judge_prompt: PromptRef | None = None
    golden_files: list[GoldenFile] = []


class Stability(_Open):
    """Test-retest agreement over repetitions of the same entry (--calibration-repeat)."""

    entries: int
    repetitions: int
    identical_verdict_share: float
    mean_score_spread: float | None = None
    max_score_spread: float | None = None


class CalibrationReport(_Open):
    """calibration.json: per pillar and overall, with the run's gate."""

    split: str | None = None
    overall: CalibrationGroup
    pillars: dict[str, CalibrationGroup]
    gate: CalibrationGate
    disagreements: list[Disagreement] = []
    evaluation_failures: list[EvaluationFailure] = []
    stability: Stability | None = None
    family: str | None = None
    judge: list[str] = []
    preset_thresholds: str | None = None
    skipped: Skipped | None = None
    prompt_mismatch: int = 0
    not_gradable: int = 0
    lineage: CalibrationLineage | None = None


SCHEMAS: dict[str, type[BaseModel]] = {
    "summary.schema.json": RunSummary,
    "results-line.schema.json": ResultsLine,
    "calibration.schema.json": CalibrationReport,
}


def json_schema(model: type[BaseModel]) -> JSONObject:
    """The model's JSON Schema (draft 2020-12), as shipped."""
    schema = model.model_json_schema(by_alias=True)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render_schemas() -> dict[str, str]:
    """File name -> the text of each shipped schema."""
    return {
        name: json.dumps(json_schema(model), indent=2, sort_keys=True) + "\n"
        for name, model in SCHEMAS.items()
    }

"""The human-readable reports of one run: ``report.md`` and ``report.html``.

Pure functions of the run model — :class:`~pytest_agenteval._model.RunSummary`
(``summary.json``), the :class:`~pytest_agenteval._model.ReportRecord` of each
item and, on calibration runs, the
:class:`~pytest_agenteval._model.CalibrationReport` (``calibration.json``) —
with no pytest import and no I/O but reading the bundled Jinja2 templates.
Both renderers go through one view model (:func:`build_view`), so the two
reports cannot disagree about what failed.

Everything that came from a record is hostile: an answer or a judge's
reasoning may hold markup, NUL and other control characters, ANSI colour
codes, lone surrogates (JSON can carry them) or text posing as a GitHub
mention. :func:`~pytest_agenteval._text.clean_text` makes each string safe to *encode* (lone
surrogates and noncharacters become visible ``\\uXXXX`` escapes, control
characters become visible ``\\xNN`` text, ANSI sequences are dropped), and the
templates then escape for their format: Jinja2's autoescape for HTML, the
``md*`` filters here for Markdown. *redact*, when given, scrubs every string
(mapping keys included) before it is cleaned and cut, so a secret cannot
survive half-cut at a truncation point.

The HTML is one self-contained file: inline CSS, inline SVG charts built
from the geometry computed here, no script, and a Content-Security-Policy
that forbids every network load — a report opened from an evidence bundle
must not phone home.
"""

from __future__ import annotations

import contextlib
import html
import math
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from pydantic import BaseModel

from .._model import (
    CalibrationGate,
    CalibrationGroup,
    CalibrationLineage,
    CalibrationReport,
    Disagreement,
    EntryRef,
    GroupGate,
    ItemCounts,
    Node,
    PromptRef,
    ReliabilityBin,
    ReportRecord,
    ResultMeta,
    ResultRecord,
    RunSummary,
    Stability,
    Thresholds,
)
from .._text import as_text, clean_text, truncate
from .._vocab import GRADED_VERDICTS, VERDICTS, Bands, JSONObject, format_score, most_severe_first
from ..evidence._chain import Streamed

if TYPE_CHECKING:
    import jinja2

__all__ = [
    "ANSWER_LIMIT",
    "DISCLAIMER",
    "MARKDOWN_BUDGET",
    "UsageTally",
    "build_calibration_view",
    "build_view",
    "clean_for_report",
    "clean_text",
    "render_calibration_html",
    "render_calibration_markdown",
    "render_html",
    "render_markdown",
    "shown_record",
    "summary_for_reports",
]

#: Characters of an answer (or prompt) shown before it is cut with a marker.
ANSWER_LIMIT = 1500
#: GitHub rejects comments over 65,536 characters; the Markdown report sheds
#: detail (shorter answers, then none, then fewer scenarios) to stay under this.
MARKDOWN_BUDGET = 60_000

DISCLAIMER = (
    "A passing benchmark is evidence about the subject’s behaviour on these scenarios, "
    "graded by the configured judge. It is not a legal conformity assessment, an audit "
    "or a certification, and it does not show compliance with any law or regulation, "
    "including the one a benchmark is named after."
)

Redact = Callable[[str], str]
#: What the templates get for a chart: geometry only they read.
Geometry = dict[str, object]

# --------------------------------------------------------------------------- hostile text

_Model = TypeVar("_Model", bound=BaseModel)


def _cleaner(redact: Redact | None) -> Callable[[str], str]:
    if redact is None:
        return clean_text
    return lambda text: clean_text(redact(text))


def _clean_value(value: object, clean: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, BaseModel):
        return _clean_model(value, clean)
    if isinstance(value, dict):
        return {clean(str(k)): _clean_value(v, clean) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean_value(v, clean) for v in value]
    return value  # numbers, booleans, None, Bands


def _clean_model(model: _Model, clean: Callable[[str], str]) -> _Model:
    """A copy of *model* with every string it holds (and every mapping key) passed through
    *clean*; still the same types, so the views read attributes as before."""
    update = {name: _clean_value(getattr(model, name), clean) for name in model.model_fields_set}
    for name, value in (model.model_extra or {}).items():
        update[name] = _clean_value(value, clean)
    return model.model_copy(update=update)


def clean_for_report(model: _Model, redact: Redact | None = None) -> _Model:
    """*model* with every string redacted (with *redact*) and made safe to show, once:
    the renderers take ``assume_clean=True`` for what went through here."""
    return _clean_model(model, _cleaner(redact))


def shown_record(record: ReportRecord) -> ReportRecord:
    """The part of *record* the session's reports show: what the evidence keeps beside it
    (the judges' raw exchanges, tool calls, MCP calls) left out, so that redacting and
    cleaning a record for the report costs little. Cost and timings stay (the reports total
    them), and so do the children (samples, a panel's judges) with the same few meta fields:
    a flag raised by one judge of a panel shows in the report too."""
    return record.model_copy(
        update={
            "tool_calls": [],
            "converted": None,
            "replay": None,
            "mcp_calls": None,
            "tool_loop": None,
            "result": _shown_result(record.result),
        }
    )


def _shown_result(result: ResultRecord) -> ResultRecord:
    meta = result.meta
    shown_meta = ResultMeta.model_validate(
        {name: getattr(meta, name) for name in _SHOWN_META if name in meta.model_fields_set}
    )
    children = [_shown_result(child) for child in result.children]
    return result.model_copy(update={"children": children, "meta": shown_meta})


_SHOWN_META = (
    "file",
    "line",
    "pillar",
    "control_id",
    "judge",
    "family",
    "pattern",
    "injection_suspected",  # shown in both reports: a steered grade is never a silent pass
    "injection_reasons",
    "usage",  # the judge's tokens, totalled in the reports
    "cost",
)


def _truncate(text: str, limit: int) -> tuple[str, int]:
    """(shown, omitted): *text* cut at *limit*, at a line or word break; the templates mark it."""
    return truncate(text, limit, "", at_break=True)


# --------------------------------------------------------------------------- numbers


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def fmt_score(value: object, digits: int = 2) -> str:
    """A score cut (never rounded up) to *digits* decimals: 0.695 under a 0.70
    pass band shows as 0.69 beside its WARN, as in the terminal."""
    x = _num(value)
    return "—" if x is None else format_score(x, digits)


def fmt_int(value: object) -> str:
    x = _num(value)
    return "—" if x is None else f"{round(x):,}"


def fmt_pct(value: object) -> str:
    x = _num(value)
    return "—" if x is None else f"{x * 100:.1f}%"


def fmt_cost(value: object) -> str:
    x = _num(value)
    if x is None:
        return "not reported"
    return f"{x:,.4f}" if x < 100 else f"{x:,.2f}"


# --------------------------------------------------------------------------- the view model


class NodeRow(TypedDict):
    level: int
    kind: str
    id: str
    title: str
    weight: float | None
    aggregation: str
    score: float | None
    score_pct: float
    verdict: str
    severity: str
    counts: dict[str, int]
    total: int
    note: str
    error: str


class CriterionView(TypedDict):
    text: str
    status: str  # met | missed | na
    reasoning: str


class ScenarioView(TypedDict):
    id: str
    label: str
    nodeid: str
    pillar: str
    pillar_title: str
    article: str
    article_title: str
    score: float | None
    verdict: str
    severity: str
    judge: str
    reasoning: str
    error: str
    criteria: list[CriterionView]
    missed: int
    met: int
    na: int
    answer: str
    answer_len: int
    answer_omitted: int
    has_answer: bool
    prompt: str
    prompt_omitted: int
    location: str
    anchor: str
    injection: bool
    injection_reasons: list[str]


class UsageRow(TypedDict):
    who: str
    prompt: int
    completion: int
    total: int


class UsageView(TypedDict):
    rows: list[UsageRow]
    prompt: int
    completion: int
    total: int
    records: int
    with_usage: int
    cost: float | None
    cost_records: int
    subject_s: float
    judge_s: float


class CalibrationRow(TypedDict):
    name: str
    n: int
    accuracy: float | None
    kappa: float | None
    brier: float | None
    ece: float | None
    auc: float | None
    threshold: str | None
    gate: str


class ConfusionCell(TypedDict):
    n: str
    diag: bool
    alpha: float


class ConfusionRow(TypedDict):
    label: str
    total: int
    cells: list[ConfusionCell]


class ClassView(TypedDict):
    label: str
    precision: float | None
    recall: float | None
    f1: float | None
    support: int | None


class CalibrationTable(TypedDict):
    rows: list[CalibrationRow]
    labels: list[str]
    confusion: list[ConfusionRow]
    classes: list[ClassView]
    bins: list[ReliabilityBin]
    chart: Geometry | None
    has_auc: bool
    overall: CalibrationRow


class SampleRow(TypedDict):
    id: str
    samples: int
    score: float | None
    std: float | None
    ci: list[float] | None
    width: float
    verdict: str
    verdicts: str
    unanimous: bool
    order: int


class SamplePillar(TypedDict):
    id: str
    title: str
    scenarios: int
    unanimous: int
    agreement: float | None
    mean_std: float | None


class SamplesView(TypedDict):
    per_scenario: int
    aggregation: str
    interval: str
    pillars: list[SamplePillar]
    rows: list[SampleRow]
    more: int
    disagreeing: int
    scenarios: int


class GateView(TypedDict):
    passed: bool
    reasons: list[str]
    notes: list[str]


class ReportView(TypedDict):
    calibration_only: bool
    family: str
    family_version: str
    title: str
    preset: str
    subject: str
    judge: str
    rules_only: bool
    score: float | None
    verdict: str
    aggregation: str
    bands: dict[str, float]
    gate: GateView
    tone: str
    items: ItemCounts
    counts: dict[str, int]
    graded: int
    total: int
    table: list[NodeRow]
    pillars: list[NodeRow]
    chart: Geometry | None
    critical: list[ScenarioView]
    injection: list[ScenarioView]
    failed: list[ScenarioView]
    warned: list[ScenarioView]
    errors: list[ScenarioView]
    skipped: list[ScenarioView]
    any_na: bool
    usage: UsageView
    lineage: list[tuple[str, str]]
    chain_head: str
    run_id: str
    plugin_version: str
    answer_limit: int
    calibration: CalibrationTable | None
    disclaimer: str
    pr: JSONObject | None
    samples: SamplesView | None


def _s(value: object) -> str:
    """A display string for a field that is text, or (a JSON value) may not be."""
    if isinstance(value, str):
        return value
    return "" if value is None or value is False else clean_text(value)


def _node_row(node: Node, level: int) -> NodeRow:
    counts: dict[str, int] = {v: int(node.counts.get(v, 0)) for v in VERDICTS}
    score = _num(node.score)
    return {
        "level": level,
        "kind": node.kind,
        "id": node.id,
        "title": node.title or "",
        "weight": _num(node.weight),
        "aggregation": node.aggregation or "",
        "score": score,
        "score_pct": 0.0 if score is None else max(0.0, min(1.0, score)) * 100,
        "verdict": node.verdict,
        "severity": node.severity or "",
        "counts": counts,
        "total": sum(counts.values()),
        "note": node.note or "",
        "error": node.error or "",
    }


def _verdict(value: str | None) -> str:
    return value if value in VERDICTS else "error"


def summary_for_reports(
    summary: Mapping[str, Any], shown: Iterable[ReportRecord]
) -> dict[str, Any]:
    """*summary* (summary.json's dict) without the scenario nodes no report shows.

    A quiet pass (verdict pass, not flagged, asked once) makes no card unless one of its
    records is shown (*shown*, the records the reports get): its count is
    already in its article's. Dropping those leaves before
    the summary is parsed saves a model of every scenario of a large run. An
    article keeps its first leaf when all would go, so that it stays an
    article over scenarios for :func:`build_view`. The reports are the same.
    Nodes made as they are read (:class:`~pytest_agenteval.evidence._chain.Streamed`)
    are made here once and only the kept ones stay: the result holds plain lists.
    """
    keep = {_scenario_key(r) for r in shown}

    def quiet(node: Mapping[str, Any]) -> bool:
        return (
            node.get("kind") == "scenario"
            and node.get("verdict") == "pass"
            and node.get("injection_suspected") is not True
            and node.get("id") not in keep
            # asked several times: the reports' samples table lists every such scenario
            and not (isinstance(node.get("samples"), int) and node["samples"] > 1)
        )

    def prune(node: Mapping[str, Any]) -> Mapping[str, Any]:
        children = node.get("children")
        if not isinstance(children, list | Streamed) or children == []:
            return node
        kept: list[Any] = []
        first: list[Any] = []
        for child in children:  # a streamed array is made here, node by node
            if not first:
                first.append(child)
            if not isinstance(child, Mapping):
                kept.append(child)
            elif not quiet(child):
                kept.append(prune(child))
        return {**node, "children": kept or first}

    nodes = summary.get("nodes")
    if not isinstance(nodes, list):
        return dict(summary)
    return {**summary, "nodes": [prune(n) if isinstance(n, Mapping) else n for n in nodes]}


def _scenario_key(rec: ReportRecord) -> str:
    """The scenario (summary node) a record belongs to."""
    return rec.scenario_id or rec.result.key


def _leaves(node: Node) -> list[Node]:
    if node.kind == "scenario" or not node.children:
        return [node]
    return [leaf for kid in node.children for leaf in _leaves(kid)]


def _flagged(result: ResultRecord) -> bool:
    """A judge flagged this grade (or a judge or criterion grade in it) as steered."""
    if result.meta.injection_suspected is True:
        return True
    return any(_flagged(c) for c in result.children if c.kind in ("judge", "criterion"))


def _injection_reasons(result: ResultRecord) -> list[str]:
    found: list[str] = []
    for part in (result, *(c for c in result.children if c.kind == "judge")):
        for text in part.meta.injection_reasons or ():
            if text and text not in found:
                found.append(text)
    return found


def _criteria(result: ResultRecord) -> list[CriterionView]:
    out: list[CriterionView] = []
    for c in result.criteria:
        met = c.met
        status = "met" if met is True else "missed" if met is False else "na"
        out.append({"text": c.criterion, "status": status, "reasoning": c.reasoning or ""})
    return out


def _usage_pair(usage: Mapping[str, object] | None) -> tuple[int, int]:
    if usage is None:
        return 0, 0
    p = _num(usage.get("prompt_tokens", usage.get("input_tokens"))) or 0
    c = _num(usage.get("completion_tokens", usage.get("output_tokens"))) or 0
    return int(p), int(c)


def _cost_value(cost: object) -> float | None:
    """A judge's reported cost: a number, or a mapping holding one under a known key."""
    if isinstance(cost, Mapping):
        for key in ("total", "total_usd", "usd", "cost"):
            if _num(cost.get(key)) is not None:
                return _num(cost.get(key))
        return None
    return _num(cost)


def _judge_usage(result: ResultRecord) -> tuple[int, int]:
    judges = [c for c in result.children if c.kind == "judge"]
    pairs = [_usage_pair(j.meta.usage) for j in judges]
    if not any(p or c for p, c in pairs):
        pairs = [_usage_pair(result.meta.usage)]
    return sum(p for p, _ in pairs), sum(c for _, c in pairs)


class UsageTally:
    """Tokens, cost and time of a run's records, summed one record at a time (the usage
    section covers every record, the scenario cards only those shown)."""

    def __init__(self) -> None:
        self.subject = [0, 0]
        self.judge = [0, 0]
        self.costs: list[float] = []
        self.subject_s = self.judge_s = 0.0
        self.with_usage = 0
        self.records = 0

    def add(self, rec: ReportRecord) -> None:
        self.records += 1
        sp, sc = _usage_pair(rec.usage)
        jp, jc = _judge_usage(rec.result)
        if sp or sc or jp or jc:
            self.with_usage += 1
        self.subject[0] += sp
        self.subject[1] += sc
        self.judge[0] += jp
        self.judge[1] += jc
        # The record's cost is the run's own total for the item; the judge's, a fallback.
        cost = _num(rec.cost.total.usd) if rec.cost is not None else None
        if cost is None:
            cost = _cost_value(rec.result.meta.cost)
        if cost is not None:
            self.costs.append(cost)
        if rec.timings is not None:
            self.subject_s += _num(rec.timings.subject_s) or 0.0
            self.judge_s += _num(rec.timings.judge_s) or 0.0

    def view(self) -> UsageView:
        subject, judge = self.subject, self.judge
        rows: list[UsageRow] = [
            {"who": who, "prompt": p, "completion": c, "total": p + c}
            for who, (p, c) in (("Subject (agent under test)", subject), ("Judge", judge))
        ]
        return {
            "rows": rows,
            "prompt": subject[0] + judge[0],
            "completion": subject[1] + judge[1],
            "total": sum(subject) + sum(judge),
            "records": self.records,
            "with_usage": self.with_usage,
            "cost": sum(self.costs) if self.costs else None,
            "cost_records": len(self.costs),
            "subject_s": self.subject_s,
            "judge_s": self.judge_s,
        }


def _usage_view(records: Sequence[ReportRecord]) -> UsageView:
    tally = UsageTally()
    for rec in records:
        tally.add(rec)
    return tally.view()


class _Place(TypedDict):
    pillar: str
    pillar_title: str
    article: str
    article_title: str


_NOWHERE: _Place = {"pillar": "", "pillar_title": "", "article": "", "article_title": ""}


def _scenario_view(
    rec: ReportRecord | None, node: Node | None, place: _Place, answer_limit: int
) -> ScenarioView:
    result = rec.result if rec is not None else None
    meta = result.meta if result is not None else ResultMeta()
    sid = (
        (rec.scenario_id if rec is not None else "")
        or (result.key if result is not None else "")
        or (node.id if node is not None else "")
        or "?"
    )
    score = _num(result.score) if result is not None else _num(node.score if node else None)
    answer = as_text(rec.answer if rec is not None else None)
    shown, omitted = _truncate(answer, answer_limit)
    prompt = as_text(rec.prompt if rec is not None else None)
    prompt_shown, prompt_omitted = _truncate(prompt, answer_limit)
    criteria = _criteria(result) if result is not None else []
    suffix = []
    if rec is not None and rec.condition:
        suffix.append(f"condition {rec.condition}")
    # 0-based in the record; shown as the item id counts them: [s1] is sample 1
    if rec is not None and (rec.sample or rec.nodeid.endswith("s1]")):
        suffix.append(f"sample {rec.sample + 1}")
    location = meta.file or ""
    if location and meta.line:
        location = f"{location}:{meta.line}"
    verdict: str | None
    if result is not None:
        injection = _flagged(result)
        verdict, severity = result.verdict, result.severity
    else:
        injection = node is not None and node.injection_suspected is True
        verdict = node.verdict if node is not None else None
        severity = node.severity if node is not None else None
    error = (result.error if result is not None else None) or (node.error if node else None)
    return {
        "id": sid,
        "label": " · ".join([sid, *suffix]),
        "nodeid": rec.nodeid if rec is not None else "",
        "pillar": meta.pillar or place["pillar"],
        "pillar_title": place["pillar_title"],
        "article": meta.control_id or place["article"],
        "article_title": place["article_title"],
        "score": score,
        "verdict": _verdict(verdict),
        "severity": severity or "",
        "judge": meta.judge or "",
        "reasoning": (result.reasoning if result is not None else None) or "",
        "error": error or "",
        "criteria": criteria,
        "missed": sum(c["status"] == "missed" for c in criteria),
        "met": sum(c["status"] == "met" for c in criteria),
        "na": sum(c["status"] == "na" for c in criteria),
        "answer": shown,
        "answer_len": len(answer),
        "answer_omitted": omitted,
        "has_answer": rec is not None,
        "prompt": prompt_shown,
        "prompt_omitted": prompt_omitted,
        "location": location,
        "anchor": "",
        "injection": injection,
        "injection_reasons": _injection_reasons(result) if injection and result else [],
    }


def _pillar_chart(pillars: list[NodeRow], bands: Mapping[str, float]) -> Geometry:
    """Geometry of the pillar chart: one bar per pillar on a 0–1 axis, threshold lines.

    Each pillar's title sits above its bar, so long titles need no left margin.
    """
    width, left, right, top, row_h, bar_h = 1000, 8, 100, 34, 52, 20
    plot_w = width - left - right
    rows_h = row_h * max(len(pillars), 1)
    height = top + rows_h + 30

    def x(value: float) -> float:
        return round(left + plot_w * max(0.0, min(1.0, value)), 2)

    rows = []
    for i, p in enumerate(pillars):
        title = p["title"] or p["id"]
        label = title if len(title) <= 90 else title[:89].rstrip() + "…"
        y = top + i * row_h
        score = p["score"]
        bar_y = y + 22
        rows.append(
            {
                "label": label,
                "full": title,
                "id": p["id"],
                "weight": p["weight"],
                "verdict": p["verdict"],
                "label_y": y + 15,
                "bar_y": bar_y,
                "bar_h": bar_h,
                "bar_w": 0.0 if score is None else round(x(score) - left, 2),
                "score_text": fmt_score(score),
                "score_y": bar_y + bar_h / 2 + 4,
                "score_x": (x(score) if score is not None else left) + 6,
            }
        )
    thresholds: list[dict[str, str | float]] = []
    xs: list[float] = []
    for kind in ("warn", "pass"):
        value = _num(bands.get(kind))
        if value is not None:
            xs.append(x(value))
            thresholds.append({"kind": kind, "x": xs[-1], "label": f"{kind} ≥ {value:.2f}"})
    if len(thresholds) == 2 and abs(xs[1] - xs[0]) < 70:
        thresholds[0]["anchor"], thresholds[1]["anchor"] = "end", "start"
    for t in thresholds:
        t.setdefault("anchor", "middle")
    ticks = [{"x": x(v / 4), "label": ("0", "0.25", "0.5", "0.75", "1")[v]} for v in range(5)]
    return {
        "width": width,
        "height": height,
        "left": left,
        "right": left + plot_w,
        "top": top,
        "bottom": top + rows_h,
        "rows": rows,
        "thresholds": thresholds,
        "ticks": ticks,
    }


def _reliability_chart(bins: Sequence[ReliabilityBin]) -> Geometry | None:
    """Geometry of a reliability diagram: share judged pass vs the judge's mean score per bin."""
    size, left, top, right_pad, bottom_pad = 360, 52, 16, 16, 44
    width, height = left + size + right_pad, top + size + bottom_pad

    def px(v: float) -> float:
        return round(left + size * max(0.0, min(1.0, v)), 2)

    def py(v: float) -> float:
        return round(top + size * (1 - max(0.0, min(1.0, v))), 2)

    bars, points = [], []
    for b in bins:
        lo, hi, n = _num(b.lo), _num(b.hi), _num(b.n)
        frac, mean = _num(b.frac_pass), _num(b.mean_score)
        if lo is None or hi is None or not n or frac is None:
            continue
        bars.append(
            {
                "x": px(lo) + 1,
                "w": max(px(hi) - px(lo) - 2, 1),
                "y": py(frac),
                "h": round(py(0) - py(frac), 2),
                "n": int(n),
                "label_x": round((px(lo) + px(hi)) / 2, 2),
                "label_y": py(0) - 5,
                "title": f"scores {lo:.1f}–{hi:.1f}: n={int(n)}, observed pass {frac:.2f}"
                + ("" if mean is None else f", mean score {mean:.2f}"),
            }
        )
        if mean is not None:
            points.append({"x": px(mean), "y": py(frac)})
    if not bars:
        return None
    ticks = [{"v": f"{v / 5:.1f}", "x": px(v / 5), "y": py(v / 5)} for v in range(6)]
    return {
        "width": width,
        "height": height,
        "left": left,
        "top": top,
        "size": size,
        "x0": px(0),
        "x1": px(1),
        "y0": py(0),
        "y1": py(1),
        "bars": bars,
        "points": points,
        "ticks": ticks,
    }


def _threshold_text(threshold: Thresholds | None) -> str | None:
    """``{kappa, accuracy, ...}`` → "κ ≥ 0.61, accuracy ≥ 0.85"."""
    if threshold is None:
        return None
    parts = []
    kappa, accuracy = _num(threshold.kappa), _num(threshold.accuracy)
    if kappa is not None:
        parts.append(f"κ ≥ {kappa:.2f}")
    if accuracy is not None:
        parts.append(f"accuracy ≥ {accuracy:.2f}")
    return ", ".join(parts) or None


def _calibration_view(cal: CalibrationReport) -> CalibrationTable:
    def row(name: str, data: CalibrationGroup) -> CalibrationRow:
        passed = data.gate.passed
        return {
            "name": name,
            "n": data.n,
            "accuracy": data.accuracy,
            "kappa": data.kappa,
            "brier": data.brier,
            "ece": data.ece,
            "auc": data.auc,
            "threshold": _threshold_text(data.gate.threshold),
            "gate": "none" if passed is None else "pass" if passed else "fail",
        }

    overall = cal.overall
    rows = [row("overall", overall)] + [row(k, v) for k, v in cal.pillars.items()]
    labels = list(overall.confusion.labels) if overall.confusion is not None else []
    matrix = overall.confusion.matrix if overall.confusion is not None else []
    cells: list[ConfusionRow] = []
    peak = max((_num(v) or 0 for r in matrix for v in r), default=0) or 1
    for i, label in enumerate(labels):
        raw = matrix[i] if i < len(matrix) else []
        vals = [_num(raw[j]) if j < len(raw) else None for j in range(len(labels))]
        cells.append(
            {
                "label": label,
                "total": int(sum(v or 0 for v in vals)),
                "cells": [
                    {
                        "n": fmt_int(v),
                        "diag": i == j,
                        "alpha": round(0.08 + 0.6 * (v or 0) / peak, 3),
                    }
                    for j, v in enumerate(vals)
                ],
            }
        )
    classes: list[ClassView] = [
        {
            "label": k,
            "precision": v.precision,
            "recall": v.recall,
            "f1": v.f1,
            "support": v.support,
        }
        for k, v in overall.per_class.items()
    ]
    return {
        "rows": rows,
        "labels": labels,
        "confusion": cells,
        "classes": classes,
        "bins": list(overall.reliability),
        "chart": _reliability_chart(overall.reliability),
        "has_auc": any(r["auc"] is not None for r in rows),
        "overall": rows[0],
    }


#: Scenario rows the samples table shows (the disagreeing and widest first); summary.json has all.
SAMPLES_ROWS = 60


def _samples_view(root: Node | None) -> SamplesView | None:
    """Repeated samples: per pillar their agreement, per scenario mean, sd and interval."""
    if root is None:
        return None
    asked = [leaf for leaf in _leaves(root) if leaf.kind == "scenario" and (leaf.samples or 1) > 1]
    if not asked:
        return None
    rows: list[SampleRow] = []
    for order, leaf in enumerate(asked):
        counts = leaf.sample_verdicts or {}
        ci = _ci(leaf.score_ci)
        rows.append(
            {
                "id": leaf.id,
                "samples": leaf.samples or 0,
                "score": _num(leaf.score),
                "std": _num(leaf.score_std),
                "ci": list(ci) if ci else None,
                "width": (ci[1] - ci[0]) if ci else -1.0,
                "verdict": leaf.verdict,
                "verdicts": " / ".join(str(counts.get(v, 0)) for v in GRADED_VERDICTS),
                "unanimous": leaf.unanimous is not False,
                "order": order,
            }
        )
    rows.sort(key=lambda r: (r["unanimous"], -r["width"], r["order"]))
    pillars: list[SamplePillar] = []
    for pillar in [root, *root.children]:
        fig = pillar.reliability
        if fig is None:
            continue
        pillars.append(
            {
                "id": "overall" if pillar is root else pillar.id,
                "title": "" if pillar is root else pillar.title or "",
                "scenarios": fig.scenarios,
                "unanimous": fig.unanimous,
                "agreement": _num(fig.agreement),
                "mean_std": _num(fig.mean_std),
            }
        )
    majority = asked[0].samples_aggregation == "majority_vote"
    return {
        "per_scenario": max(r["samples"] for r in rows),
        "aggregation": "majority vote" if majority else "mean",
        "interval": "Wilson interval on the pass share" if majority else "t-interval of the mean",
        "pillars": pillars,
        "rows": rows[:SAMPLES_ROWS],
        "more": max(0, len(rows) - SAMPLES_ROWS),
        "disagreeing": sum(1 for r in rows if not r["unanimous"]),
        "scenarios": len(rows),
    }


def _pr_view(summary: RunSummary) -> JSONObject | None:
    from .._compare import report_view

    return report_view(summary.to_json())


def build_view(
    summary: RunSummary,
    records: Sequence[ReportRecord],
    *,
    calibration: CalibrationReport | None = None,
    answer_limit: int = ANSWER_LIMIT,
    redact: Redact | None = None,
    assume_clean: bool = False,
    usage: UsageView | None = None,
) -> ReportView:
    """The data both reports show, cleaned, ordered and formatted-ready.

    ``assume_clean``: *summary*, *records* and *calibration* already went
    through :func:`clean_for_report` (render_markdown builds several views of one input).
    ``usage``: the run's usage summed over every record (:class:`UsageTally`) when
    *records* are only those the reports show; by default, summed over *records*.
    """
    s = summary if assume_clean else clean_for_report(summary, redact)
    recs = records if assume_clean else [clean_for_report(r, redact) for r in records]
    if calibration is not None and not assume_clean:
        calibration = clean_for_report(calibration, redact)
    root = s.nodes[0] if s.nodes else None

    table: list[NodeRow] = []
    pillars: list[NodeRow] = []
    place: dict[str, _Place] = {}
    nodes: dict[str, Node] = {}
    order: dict[str, int] = {}
    if root is not None:
        for pillar in root.children:
            prow = _node_row(pillar, 1)
            pillars.append(prow)
            table.append(prow)
            for article in pillar.children:
                if article.kind != "scenario":
                    table.append(_node_row(article, 2))
                for leaf in _leaves(article):
                    sid = leaf.id
                    nodes.setdefault(sid, leaf)
                    order.setdefault(sid, len(order))
                    place.setdefault(
                        sid,
                        {
                            "pillar": prow["id"],
                            "pillar_title": prow["title"],
                            "article": article.id,
                            "article_title": article.title or "",
                        },
                    )

    scenarios = []
    seen: set[str] = set()
    for rec in recs:
        sid = _scenario_key(rec)
        seen.add(sid)
        scenarios.append(
            _scenario_view(rec, nodes.get(sid), place.get(sid, _NOWHERE), answer_limit)
        )
    for sid, node in nodes.items():  # graded leaves whose record was not passed in
        # (a quiet pass is only counted, from the tree: no card shows it)
        quiet = node.verdict == "pass" and node.injection_suspected is not True
        if sid not in seen and not quiet:
            scenarios.append(_scenario_view(None, node, place.get(sid, _NOWHERE), answer_limit))

    def by_tree(sc: ScenarioView) -> int:
        return order.get(sc["id"], len(order))

    def by_badness(sc: ScenarioView) -> tuple[int, float, int]:
        score = sc["score"] if sc["score"] is not None else 0.0
        return (most_severe_first(sc["severity"]), score, by_tree(sc))

    failed = sorted((sc for sc in scenarios if sc["verdict"] == "fail"), key=by_badness)
    warned = sorted(
        (sc for sc in scenarios if sc["verdict"] == "warn"),
        key=lambda sc: (sc["score"] or 0.0, by_tree(sc)),
    )
    errors = sorted((sc for sc in scenarios if sc["verdict"] == "error"), key=by_tree)
    skipped = sorted((sc for sc in scenarios if sc["verdict"] == "skipped"), key=by_tree)
    for n, sc in enumerate(failed + warned + errors, start=1):
        sc["anchor"] = f"scenario-{n}"
    # the gate's list (declared critical severity), so the report, the terminal and the
    # gate name the same scenarios; a score-implied severity shows on each card instead
    if "critical_failures" in s.gate.model_fields_set:
        declared = {cid.split(" (", 1)[0] for cid in s.gate.critical_failures}
        critical = [sc for sc in failed if sc["id"] in declared]
    else:  # a summary written before the gate listed them: the severity of each scenario
        critical = [sc for sc in failed if sc["severity"] == "critical"]
    # A steered grade is never a silent pass: every flagged item is listed, whatever its verdict.
    injection = sorted((sc for sc in scenarios if sc["injection"]), key=by_tree)

    bands = (s.bands or Bands()).to_json()
    gate_passed = s.gate.passed
    verdict = s.verdict
    tone = "fail" if not gate_passed else "warn" if verdict != "pass" else "pass"
    judge = ", ".join(s.judge)
    counts: dict[str, int] = dict.fromkeys(VERDICTS, 0)
    if root is not None:
        counts = _node_row(root, 0)["counts"]
    elif scenarios:
        for sc in scenarios:
            counts[sc["verdict"]] += 1

    calibration_only = calibration is not None and not recs and root is None
    return {
        "calibration_only": calibration_only,
        "family": s.family,
        "family_version": s.family_version or "",
        "title": (root.title if root is not None else None) or s.family or "benchmark",
        "preset": s.preset,
        "subject": s.subject,
        "judge": judge,
        "rules_only": judge.strip() in ("rules", ""),
        "score": _num(s.score),
        "verdict": verdict,
        "aggregation": (root.aggregation if root is not None else None) or "",
        "bands": bands,
        "gate": {"passed": gate_passed, "reasons": s.gate.reasons, "notes": s.gate.notes},
        "tone": tone,
        "items": s.items,
        "counts": counts,
        "graded": sum(counts[v] for v in GRADED_VERDICTS),
        "total": sum(counts.values()),
        "table": table,
        "pillars": pillars,
        "chart": _pillar_chart(pillars, bands) if pillars else None,
        "critical": critical,
        "injection": injection,
        "failed": failed,
        "warned": warned,
        "errors": errors,
        "skipped": skipped,
        "any_na": any(sc["na"] for sc in failed + warned),
        "usage": _usage_view(recs) if usage is None else usage,
        "lineage": [
            ("Run id", s.run_id or "—"),
            ("Started", s.started_at or "—"),
            ("Ended", s.ended_at or "—"),
            ("Plugin version", s.plugin_version or "—"),
            ("Family version", s.family_version or "—"),
            ("Records head (before the seal)", s.chain_head or "—"),
            ("Summary schema", s.schema_ or "—"),
        ],
        "chain_head": s.chain_head or "",
        "run_id": s.run_id,
        "plugin_version": s.plugin_version,
        "answer_limit": answer_limit,
        "calibration": _calibration_view(calibration) if calibration is not None else None,
        "disclaimer": DISCLAIMER,
        "pr": _pr_view(s),  # suites and the comparison with the baseline (pull-request check)
        "samples": _samples_view(root),  # repeated samples: spread, intervals, agreement
    }


# --------------------------------------------------------------------------- Markdown escaping

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
# What would open a heading, list, rule or setext underline at the start of a line.
_BLOCK_START = re.compile(r"^(\s*)(?=[#+=-]|\d+[.)])")


def _md_inline(value: object) -> str:
    """Text for a Markdown paragraph: markup characters escaped, @mentions defused."""
    text = clean_text(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = _BLOCK_START.sub(r"\1\\", text)
    return _MENTION.sub("@\u200b", text)


def md_text(value: object) -> str:
    """Multi-line text as one Markdown paragraph (line breaks kept as ``<br>``)."""
    return "<br>".join(_md_inline(line) for line in clean_text(value).split("\n"))


def md_cell(value: object) -> str:
    """Text for a GFM table cell: no raw ``|`` and no line break can end the row."""
    return md_text(value).strip() or " "


def md_html(value: object) -> str:
    """Text inside raw HTML in Markdown (``<summary>``): HTML-escaped, mentions defused."""
    return _MENTION.sub("@\u200b", html.escape(clean_text(value)))


def md_code(value: object, info: str = "text") -> str:
    """A fenced code block that no backtick run inside *value* can close early."""
    text = clean_text(value)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def md_tick(value: object, table: bool = True) -> str:
    """An inline code span that no backtick inside *value* can close (and, in a table, no ``|``)."""
    text = clean_text(value).replace("\n", " ")
    if not text.strip():
        return "—"
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    if table:
        text = text.replace("|", "\\|")
    return f"{fence}{pad}{text}{pad}{fence}"


def md_bar(value: object, width: int = 10) -> str:
    x = _num(value)
    if x is None:
        return "░" * width
    full = round(max(0.0, min(1.0, x)) * width)
    return "█" * full + "░" * (width - full)


# --------------------------------------------------------------------------- rendering


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Jinja's file cache of compiled templates, or none: a cache that cannot be read or
    written (no temporary directory, a full disk, a damaged file) only costs the compile."""
    import tempfile

    import jinja2

    class QuietCache(jinja2.FileSystemBytecodeCache):
        def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            try:
                super().load_bytecode(bucket)
            except Exception:  # unreadable or damaged: compiled again, written anew
                bucket.reset()

        def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            with contextlib.suppress(OSError):
                super().dump_bytecode(bucket)

    if sys.platform == "win32":  # Jinja's default there is the shared temp folder itself
        return None
    try:
        if Path(tempfile.gettempdir()).resolve() == Path.cwd().resolve():
            return None  # no temporary directory: tempfile fell back to the project
        return QuietCache()  # its own directory in it: per user, mode 0700, owner checked
    except (OSError, RuntimeError):  # no private directory to be had
        return None


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """One environment per process; its templates compiled once per machine.

    Compiling the four templates took about 0.1 s at the end of every run; Jinja's
    bytecode cache (its default directory: per user, mode 0700, owner checked)
    keeps them compiled between runs, keyed by each template's source checksum.
    """
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_agenteval.reports", "templates"),
        bytecode_cache=_bytecode_cache(),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html.j2",), default_for_string=False
        ),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    filters: dict[str, Callable[..., str]] = {
        "score": fmt_score,
        "int": fmt_int,
        "pct": fmt_pct,
        "cost": fmt_cost,
        "mdtext": md_text,
        "mdcell": md_cell,
        "mdhtml": md_html,
        "mdcode": md_code,
        "mdtick": md_tick,
        "mdbar": md_bar,
        "ci": fmt_ci,
    }
    env.filters.update(filters)
    return env


def render_markdown(
    summary: RunSummary,
    records: Sequence[ReportRecord],
    *,
    calibration: CalibrationReport | None = None,
    redact: Redact | None = None,
    assume_clean: bool = False,
    usage: UsageView | None = None,
) -> str:
    """``report.md``: GitHub-flavoured Markdown, sized to fit a PR comment or job summary.

    Over :data:`MARKDOWN_BUDGET` characters it sheds detail step by step —
    shorter answers, no answers, then only the worst scenarios in full — and
    says so; ``report.html`` and ``results.jsonl`` always hold everything.
    """
    template = _environment().get_template("report.md.j2")
    # (answer characters, show answers, failed in full, warned in full); None: all
    steps: list[tuple[int, bool, int | None, int | None]] = [
        (ANSWER_LIMIT, True, None, None),
        (500, True, None, None),
        (500, True, None, 0),
        (300, True, 40, 0),
        (300, False, 40, 0),
        (300, False, 15, 0),
        (300, False, 0, 0),
    ]
    text = ""
    if not assume_clean:
        summary = clean_for_report(summary, redact)
        records = [clean_for_report(r, redact) for r in records]
        if calibration is not None:
            calibration = clean_for_report(calibration, redact)
    for i, (limit, answers, max_failed, max_warned) in enumerate(steps):
        view = build_view(
            summary,
            records,
            calibration=calibration,
            answer_limit=limit,
            assume_clean=True,
            usage=usage,
        )
        text = template.render(
            v=view,
            show_answers=answers,
            max_failed=max_failed,
            max_warned=max_warned,
            trimmed=i > 0,
        )
        if len(text) <= MARKDOWN_BUDGET:
            break
    return text


def render_html(
    summary: RunSummary,
    records: Sequence[ReportRecord],
    *,
    calibration: CalibrationReport | None = None,
    redact: Redact | None = None,
    assume_clean: bool = False,
    usage: UsageView | None = None,
) -> str:
    """``report.html``: one self-contained page (inline CSS and SVG, no script, no network)."""
    view = build_view(
        summary,
        records,
        calibration=calibration,
        redact=redact,
        assume_clean=assume_clean,
        usage=usage,
    )
    return _environment().get_template("report.html.j2").render(v=view)


# --------------------------------------------------------------------------- calibration report
#
# A calibration run has no subject, no tree and no scenario verdicts: its own
# report shows the judge against the labels — the pillars (n, accuracy and κ
# with their intervals, the raters' Fleiss ceiling, the gate), the confusion,
# the reliability diagram, every entry where the judge disagreed with the
# label (both rationales), and the lineage (judges, prompts, golden files).

#: Characters of a label's rationale or a judge's reasoning shown in report.html.
RATIONALE_LIMIT = 2000
_CAL_STATUS = ("pass", "fail", "insufficient")


def _ci(value: object) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = _num(value[0]), _num(value[1])
        if lo is not None and hi is not None:
            return (lo, hi)
    return None


def fmt_ci(value: object, digits: int = 2) -> str:
    """``[0.47, 1.00]``; empty when there is no interval."""
    ci = _ci(value)
    return "" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _pct_ci(value: object) -> str:
    """``[92.3%, 100.0%]``: an accuracy interval in the percentages accuracy is shown in."""
    ci = _ci(value)
    return "" if ci is None else f"[{fmt_pct(ci[0])}, {fmt_pct(ci[1])}]"


def _cal_status(gate: GroupGate | CalibrationGate) -> str:
    if gate.status is not None and gate.status in _CAL_STATUS:
        return gate.status
    passed = gate.passed
    return "none" if passed is None else "pass" if passed else "fail"


class OtherSplit(TypedDict):
    n: float | None
    accuracy: float | None
    kappa: float | None


class CalibrationGroupRow(TypedDict):
    name: str
    n: float | None
    entries: float | None
    accuracy: float | None
    accuracy_ci: str
    kappa: float | None
    kappa_ci: str
    fleiss: float | None
    fleiss_n: float | None
    above_ceiling: bool
    brier: float | None
    ece: float | None
    auc: float | None
    errors: int
    not_gradable: int
    threshold: str | None
    gate: str
    reasons: list[str]
    notes: list[str]
    other: OtherSplit | None


def _cal_row(name: str, data: CalibrationGroup) -> CalibrationGroupRow:
    gate = data.gate
    kappa, ceiling = _num(data.kappa), _num(data.inter_rater_fleiss_kappa)
    other = data.calibration_split
    return {
        "name": name,
        "n": _num(data.n),
        "entries": _num(data.entries),
        "accuracy": _num(data.accuracy),
        "accuracy_ci": _pct_ci(data.accuracy_ci),
        "kappa": kappa,
        "kappa_ci": fmt_ci(data.kappa_ci),
        "fleiss": ceiling,
        "fleiss_n": _num(data.inter_rater_n),
        "above_ceiling": kappa is not None and ceiling is not None and kappa > ceiling,
        "brier": _num(data.brier),
        "ece": _num(data.ece),
        "auc": _num(data.auc),
        "errors": data.evaluation_failures,
        "not_gradable": data.not_gradable,
        "threshold": _threshold_text(gate.threshold),
        "gate": _cal_status(gate),
        "reasons": gate.reasons,
        "notes": gate.notes,
        "other": (
            {"n": _num(other.n), "accuracy": _num(other.accuracy), "kappa": _num(other.kappa)}
            if other is not None
            else None
        ),
    }


def _location(entry: EntryRef) -> str:
    where = entry.file or ""
    return f"{where}:{entry.line}" if where and entry.line is not None else where


class DisagreementView(TypedDict):
    id: str
    pillar: str
    article: str
    location: str
    split: str
    adversarial: str
    expected: str
    band: str
    actual: str
    score: float | None
    why: str
    in_band: bool
    rationale: str
    rationale_cut: int
    reasoning: str
    reasoning_cut: int


def _disagreement_view(d: Disagreement, limit: int) -> DisagreementView:
    band = d.band or []
    lo = _num(band[0]) if len(band) == 2 else None
    hi = _num(band[1]) if len(band) == 2 else None
    rationale, rationale_cut = _truncate(d.rationale, limit)
    reasoning, reasoning_cut = _truncate(d.reasoning, limit)
    score = _num(d.score)
    expected, actual = _verdict(d.expected), _verdict(d.actual)
    in_band = score is not None and lo is not None and hi is not None and lo <= score <= hi
    return {
        "id": d.id or "?",
        "pillar": d.pillar or "",
        "article": d.article or "",
        "location": _location(d),
        "split": d.split or "",
        "adversarial": _s(d.adversarial),
        "expected": expected,
        "band": "—" if lo is None or hi is None else f"{fmt_score(lo)}–{fmt_score(hi)}",
        "actual": actual,
        "score": score,
        "why": "verdict differs" if expected != actual else "score outside the band",
        "in_band": in_band,
        "rationale": rationale,
        "rationale_cut": rationale_cut,
        "reasoning": reasoning,
        "reasoning_cut": reasoning_cut,
    }


class GoldenFileView(TypedDict):
    path: str
    sha256: str
    entries: int


class LineageView(TypedDict):
    rows: list[tuple[str, str]]
    files: list[GoldenFileView]


def _cal_lineage(s: RunSummary, cal: CalibrationReport) -> LineageView:
    lin = cal.lineage or CalibrationLineage()
    judges = [
        (j.spec or "")
        + (
            f" (model {j.model_requested})"
            if j.model_requested and j.model_requested not in (j.spec or "")
            else ""
        )
        for j in lin.judges
    ]
    if not judges:
        judges = list(s.judge)
    prompt = lin.judge_prompt or PromptRef()
    used = [(p.version + " " if p.version else "") + (p.sha256 or "") for p in lin.prompts_used]
    prompt_text = prompt.version or "—"
    if prompt.file:
        prompt_text = f"{prompt.file} ({prompt_text})"
    rows = [
        ("Run id", s.run_id or "—"),
        ("Started", s.started_at or "—"),
        ("Ended", s.ended_at or "—"),
        ("Plugin version", s.plugin_version or "—"),
        ("Family", f"{s.family} {s.family_version or ''}".strip() or "—"),
        ("Judges", ", ".join(j for j in judges if j) or "—"),
        (
            "Models that answered",
            ", ".join(lin.models_returned) or "— (no model call: offline judge or cache)",
        ),
        ("Family judge prompt", prompt_text),
        ("Family judge prompt SHA-256", prompt.sha256 or "— (built-in default prompt)"),
        ("Judge prompts used (version SHA-256)", "; ".join(used) or "—"),
        ("Records head (before the seal)", s.chain_head or "—"),
        ("Summary schema", s.schema_ or "—"),
    ]
    files: list[GoldenFileView] = [
        {"path": f.path, "sha256": f.sha256, "entries": f.entries} for f in lin.golden_files
    ]
    return {"rows": rows, "files": files}


class FailureView(TypedDict):
    id: str
    pillar: str
    location: str
    error: str


class TokensView(TypedDict):
    prompt: int
    completion: int
    usd: float | None


class CalibrationView(TypedDict):
    family: str
    family_version: str
    judge: str
    rules_only: bool
    thresholds_of: str
    split: str
    gate_on: str
    min_n: int
    threshold: str
    max_errors: int
    status: str
    tone: str
    reasons: list[str]
    notes: list[str]
    insufficient: list[str]
    overall: CalibrationGroupRow
    rows: list[CalibrationGroupRow]
    any_fleiss: bool
    any_other: bool
    has_auc: bool
    labels: list[str]
    confusion: list[ConfusionRow]
    classes: list[ClassView]
    bins: list[ReliabilityBin]
    chart: Geometry | None
    counts: dict[str, int]
    disagreements: list[DisagreementView]
    failures: list[FailureView]
    not_gradable: int
    skipped: int
    skipped_by: list[tuple[str, int]]
    prompt_mismatch: int
    stability: Stability | None
    tokens: TokensView
    lineage: LineageView
    chain_head: str
    run_id: str
    plugin_version: str


def build_calibration_view(
    summary: RunSummary,
    calibration: CalibrationReport,
    *,
    text_limit: int = RATIONALE_LIMIT,
    redact: Redact | None = None,
) -> CalibrationView:
    """What both calibration reports show: cleaned, formatted-ready, one view for both."""
    s = clean_for_report(summary, redact)
    cal = clean_for_report(calibration, redact)
    base = _calibration_view(cal)
    rows = [_cal_row(k, v) for k, v in cal.pillars.items()]
    overall = _cal_row("overall", cal.overall)
    gate = cal.gate
    status = _cal_status(gate)
    if status == "none":
        status = "fail"
    judge = ", ".join(s.judge)
    th = cal.overall.gate.threshold or Thresholds()
    cost = s.cost.total if s.cost is not None else None
    skipped = cal.skipped
    return {
        "family": s.family or cal.family or "",
        "family_version": s.family_version or "",
        "judge": judge,
        "rules_only": judge.strip() in ("rules", ""),
        "thresholds_of": cal.preset_thresholds or "standard",
        "split": cal.split or "holdout",
        "gate_on": gate.on or "point",
        "min_n": gate.min_n or 0,
        "threshold": _threshold_text(th) or "—",
        "max_errors": th.max_evaluation_failures or 0,
        "status": status,
        "tone": {"pass": "pass", "insufficient": "warn"}.get(status, "fail"),
        "reasons": gate.reasons,
        "notes": gate.notes,
        "insufficient": gate.insufficient,
        "overall": overall,
        "rows": rows,
        "any_fleiss": any(r["fleiss"] is not None for r in [overall, *rows]),
        "any_other": any(r["other"] is not None for r in [overall, *rows]),
        "has_auc": any(r["auc"] is not None for r in [overall, *rows]),
        "labels": base["labels"],
        "confusion": base["confusion"],
        "classes": base["classes"],
        "bins": [b for b in base["bins"] if _num(b.n)],
        "chart": base["chart"],
        # not "items": Jinja would find the dict method of that name first
        "counts": {
            "passed": s.items.passed,
            "failed": s.items.failed,
            "errors": s.items.errors,
            "skipped": s.items.skipped,
        },
        "disagreements": [_disagreement_view(d, text_limit) for d in cal.disagreements],
        "failures": [
            {
                "id": e.id or "?",
                "pillar": e.pillar or "",
                "location": _location(e),
                "error": e.error or "unknown error",
            }
            for e in cal.evaluation_failures
        ],
        "not_gradable": cal.not_gradable,
        "skipped": skipped.total if skipped is not None else 0,
        "skipped_by": list(skipped.by_reason.items()) if skipped is not None else [],
        "prompt_mismatch": cal.prompt_mismatch,
        "stability": cal.stability,
        "tokens": {
            "prompt": cost.prompt_tokens if cost is not None else 0,
            "completion": cost.completion_tokens if cost is not None else 0,
            "usd": _num(cost.usd) if cost is not None else None,
        },
        "lineage": _cal_lineage(s, cal),
        "chain_head": s.chain_head or "",
        "run_id": s.run_id,
        "plugin_version": s.plugin_version,
    }


def render_calibration_markdown(
    summary: RunSummary, calibration: CalibrationReport, *, redact: Redact | None = None
) -> str:
    """``report.md`` of a calibration run; sheds the texts of disagreements to fit a PR comment."""
    template = _environment().get_template("calibration.md.j2")
    # (characters of each rationale and reasoning, disagreements listed in full); None: all
    steps: list[tuple[int, int | None]] = [(600, None), (240, None), (120, 60), (0, 60), (0, 20)]
    text = ""
    for i, (limit, listed) in enumerate(steps):
        view = build_calibration_view(summary, calibration, text_limit=max(limit, 1), redact=redact)
        text = template.render(v=view, show_texts=limit > 0, listed=listed, trimmed=i > 0)
        if len(text) <= MARKDOWN_BUDGET:
            break
    return text


def render_calibration_html(
    summary: RunSummary, calibration: CalibrationReport, *, redact: Redact | None = None
) -> str:
    """``report.html`` of a calibration run: one self-contained page, no script, no network."""
    view = build_calibration_view(summary, calibration, redact=redact)
    return _environment().get_template("calibration.html.j2").render(v=view)

"""The human-readable reports of one run: ``report.md`` and ``report.html``.

Pure functions over the run's plain data — ``summary.json``, the records of
``results.jsonl`` and, on calibration runs, ``calibration.json`` — with no
pytest import and no I/O but reading the bundled Jinja2 templates. Both
renderers go through one view model (:func:`build_view`), so the two reports
cannot disagree about what failed.

Everything that came from a record is hostile: an answer or a judge's
reasoning may hold markup, NUL and other control characters, ANSI colour
codes, lone surrogates (JSON can carry them) or text posing as a GitHub
mention. :func:`~pytest_agenteval._text.clean_text` makes each string safe to *encode* (lone
surrogates and noncharacters become visible ``\\uXXXX`` escapes, control
characters become visible ``\\xNN`` text, ANSI sequences are dropped), and the
templates then escape for their format: Jinja2's autoescape for HTML, the
``md*`` filters here for Markdown.

The HTML is one self-contained file: inline CSS, inline SVG charts built
from the geometry computed here, no script, and a Content-Security-Policy
that forbids every network load — a report opened from an evidence bundle
must not phone home.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from .._text import as_text, clean_text, truncate
from .._vocab import GRADED_VERDICTS, VERDICTS, Bands, format_score, most_severe_first

__all__ = [
    "ANSWER_LIMIT",
    "DISCLAIMER",
    "MARKDOWN_BUDGET",
    "build_calibration_view",
    "build_view",
    "clean_text",
    "render_calibration_html",
    "render_calibration_markdown",
    "render_html",
    "render_markdown",
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

# --------------------------------------------------------------------------- hostile text


def _deep_clean(value: Any) -> Any:
    """A copy of JSON-like *value* with every string (and key) passed through clean_text."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, Mapping):
        return {clean_text(k): _deep_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_deep_clean(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return clean_text(value)


def _truncate(text: str, limit: int) -> tuple[str, int]:
    """(shown, omitted): *text* cut at *limit*, at a line or word break; the templates mark it."""
    return truncate(text, limit, "", at_break=True)


# --------------------------------------------------------------------------- numbers


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def fmt_score(value: Any, digits: int = 2) -> str:
    """A score cut (never rounded up) to *digits* decimals: 0.695 under a 0.70
    pass band shows as 0.69 beside its WARN, as in the terminal."""
    x = _num(value)
    return "—" if x is None else format_score(x, digits)


def fmt_int(value: Any) -> str:
    x = _num(value)
    return "—" if x is None else f"{round(x):,}"


def fmt_pct(value: Any) -> str:
    x = _num(value)
    return "—" if x is None else f"{x * 100:.1f}%"


def fmt_cost(value: Any) -> str:
    x = _num(value)
    if x is None:
        return "not reported"
    return f"{x:,.4f}" if x < 100 else f"{x:,.2f}"


# --------------------------------------------------------------------------- the view model


def _get(mapping: Any, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping):
            return default
        mapping = mapping.get(key)
    return default if mapping is None else mapping


def _s(value: Any) -> str:
    """A display string for a field that should be text but, in bad input, may not be."""
    if isinstance(value, str):
        return value
    return "" if value is None or value is False else clean_text(value)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _node_row(node: Mapping[str, Any], level: int) -> dict[str, Any]:
    counts = {v: int(_num(_get(node, "counts", v)) or 0) for v in VERDICTS}
    score = _num(node.get("score"))
    return {
        "level": level,
        "kind": _s(node.get("kind")),
        "id": _s(node.get("id")),
        "title": _s(node.get("title")),
        "weight": _num(node.get("weight")),
        "aggregation": _s(node.get("aggregation")),
        "score": score,
        "score_pct": 0.0 if score is None else max(0.0, min(1.0, score)) * 100,
        "verdict": _verdict(node.get("verdict")),
        "severity": _s(node.get("severity")),
        "counts": counts,
        "total": sum(counts.values()),
        "note": _s(node.get("note")),
        "error": _s(node.get("error")),
    }


def _verdict(value: Any) -> str:
    return value if value in VERDICTS else "error"


def _children(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    kids = node.get("children")
    return [k for k in _list(kids) if isinstance(k, Mapping)]


def _leaves(node: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    kids = _children(node)
    if node.get("kind") == "scenario" or not kids:
        return [node]
    return [leaf for kid in kids for leaf in _leaves(kid)]


def _flagged(result: Mapping[str, Any]) -> bool:
    """A judge flagged this grade (or a judge or criterion grade in it) as steered."""
    if _get(result, "meta", "injection_suspected") is True:
        return True
    return any(_flagged(c) for c in _children(result) if c.get("kind") in ("judge", "criterion"))


def _injection_reasons(result: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for part in (result, *(c for c in _children(result) if c.get("kind") == "judge")):
        for why in _list(_get(part, "meta", "injection_reasons")):
            text = _s(why)
            if text and text not in found:
                found.append(text)
    return found


def _criteria(raw: Any) -> list[dict[str, str]]:
    out = []
    for c in _list(raw):
        if not isinstance(c, Mapping):
            continue
        met = c.get("met")
        status = "met" if met is True else "missed" if met is False else "na"
        out.append(
            {
                "text": _s(c.get("criterion") or c.get("text")),
                "status": status,
                "reasoning": _s(c.get("reasoning")),
            }
        )
    return out


def _usage_pair(usage: Any) -> tuple[int, int]:
    if not isinstance(usage, Mapping):
        return 0, 0
    p = _num(usage.get("prompt_tokens", usage.get("input_tokens"))) or 0
    c = _num(usage.get("completion_tokens", usage.get("output_tokens"))) or 0
    return int(p), int(c)


def _cost_value(cost: Any) -> float | None:
    if isinstance(cost, Mapping):
        for key in ("total", "total_usd", "usd", "cost"):
            if _num(cost.get(key)) is not None:
                return _num(cost.get(key))
        return None
    return _num(cost)


def _judge_usage(result: Mapping[str, Any]) -> tuple[int, int]:
    judges = [c for c in _children(result) if c.get("kind") == "judge"]
    pairs = [_usage_pair(_get(j, "meta", "usage")) for j in judges]
    if not any(p or c for p, c in pairs):
        pairs = [_usage_pair(_get(result, "meta", "usage"))]
    return sum(p for p, _ in pairs), sum(c for _, c in pairs)


def _usage_view(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    subject = [0, 0]
    judge = [0, 0]
    costs: list[float] = []
    subject_s = judge_s = 0.0
    with_usage = 0
    for rec in records:
        sp, sc = _usage_pair(rec.get("usage"))
        result = _map(rec.get("result"))
        jp, jc = _judge_usage(result)
        if sp or sc or jp or jc:
            with_usage += 1
        subject[0] += sp
        subject[1] += sc
        judge[0] += jp
        judge[1] += jc
        # The record's cost is the run's own total for the item; the judge's, a fallback.
        cost = _cost_value(rec.get("cost"))
        if cost is None:
            cost = _cost_value(_get(result, "meta", "cost"))
        if cost is not None:
            costs.append(cost)
        subject_s += _num(_get(rec, "timings", "subject_s")) or 0.0
        judge_s += _num(_get(rec, "timings", "judge_s")) or 0.0
    rows = [
        {"who": who, "prompt": p, "completion": c, "total": p + c}
        for who, (p, c) in (("Subject (agent under test)", subject), ("Judge", judge))
    ]
    return {
        "rows": rows,
        "prompt": subject[0] + judge[0],
        "completion": subject[1] + judge[1],
        "total": sum(subject) + sum(judge),
        "records": len(records),
        "with_usage": with_usage,
        "cost": sum(costs) if costs else None,
        "cost_records": len(costs),
        "subject_s": subject_s,
        "judge_s": judge_s,
    }


def _scenario_view(
    rec: Mapping[str, Any] | None,
    node: Mapping[str, Any] | None,
    place: Mapping[str, str],
    answer_limit: int,
) -> dict[str, Any]:
    rec = rec or {}
    node = node or {}
    result: Mapping[str, Any] = _map(rec.get("result"))
    meta = _map(result.get("meta"))
    sid = _s(rec.get("scenario_id") or result.get("key") or node.get("id")) or "?"
    score = _num(result.get("score")) if result else _num(node.get("score"))
    answer_raw = rec.get("answer")
    answer = as_text(answer_raw)
    shown, omitted = _truncate(answer, answer_limit)
    prompt_raw = rec.get("prompt")
    prompt = as_text(prompt_raw)
    prompt_shown, prompt_omitted = _truncate(prompt, answer_limit)
    criteria = _criteria(result.get("criteria"))
    suffix = []
    if rec.get("condition"):
        suffix.append(f"condition {_s(rec['condition'])}")
    sample = rec.get("sample")
    # 0-based in the record; shown as the item id counts them: [s1] is sample 1
    if (
        isinstance(sample, int)
        and not isinstance(sample, bool)
        and (sample or _s(rec.get("nodeid")).endswith("s1]"))
    ):
        suffix.append(f"sample {sample + 1}")
    location = _s(meta.get("file"))
    if location and meta.get("line"):
        location = f"{location}:{_s(meta['line'])}"
    injection = _flagged(result) if result else node.get("injection_suspected") is True
    return {
        "id": sid,
        "label": " · ".join([sid, *suffix]),
        "nodeid": _s(rec.get("nodeid")),
        "pillar": _s(meta.get("pillar") or place.get("pillar")),
        "pillar_title": _s(place.get("pillar_title")),
        "article": _s(meta.get("control_id") or place.get("article")),
        "article_title": _s(place.get("article_title")),
        "score": score,
        "verdict": _verdict(result.get("verdict") if result else node.get("verdict")),
        "severity": _s(result.get("severity") if result else node.get("severity")),
        "judge": _s(meta.get("judge")),
        "reasoning": _s(result.get("reasoning")),
        "error": _s(result.get("error") or node.get("error")),
        "criteria": criteria,
        "missed": sum(c["status"] == "missed" for c in criteria),
        "met": sum(c["status"] == "met" for c in criteria),
        "na": sum(c["status"] == "na" for c in criteria),
        "answer": shown,
        "answer_len": len(answer),
        "answer_omitted": omitted,
        "has_answer": bool(rec),
        "prompt": prompt_shown,
        "prompt_omitted": prompt_omitted,
        "location": location,
        "anchor": "",
        "injection": injection,
        "injection_reasons": _injection_reasons(result) if injection else [],
    }


def _pillar_chart(pillars: list[dict[str, Any]], bands: Mapping[str, Any]) -> dict[str, Any]:
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
    thresholds: list[dict[str, Any]] = []
    for kind in ("warn", "pass"):
        value = _num(bands.get(kind))
        if value is not None:
            thresholds.append({"kind": kind, "x": x(value), "label": f"{kind} ≥ {value:.2f}"})
    if len(thresholds) == 2 and abs(thresholds[1]["x"] - thresholds[0]["x"]) < 70:
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


def _reliability_chart(bins: Any) -> dict[str, Any] | None:
    """Geometry of a reliability diagram: share judged pass vs the judge's mean score per bin."""
    if not isinstance(bins, list):
        return None
    size, left, top, right_pad, bottom_pad = 360, 52, 16, 16, 44
    width, height = left + size + right_pad, top + size + bottom_pad

    def px(v: float) -> float:
        return round(left + size * max(0.0, min(1.0, v)), 2)

    def py(v: float) -> float:
        return round(top + size * (1 - max(0.0, min(1.0, v))), 2)

    bars, points = [], []
    for b in bins:
        if not isinstance(b, Mapping):
            continue
        lo, hi, n = _num(b.get("lo")), _num(b.get("hi")), _num(b.get("n"))
        frac, mean = _num(b.get("frac_pass")), _num(b.get("mean_score"))
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


_CAL_METRICS = ("n", "accuracy", "kappa", "brier", "ece", "auc")


def _threshold_text(threshold: Any) -> str | None:
    """``{kappa, accuracy, ...}`` → "κ ≥ 0.61, accuracy ≥ 0.85" (a bare number passes through)."""
    if isinstance(threshold, Mapping):
        parts = []
        if _num(threshold.get("kappa")) is not None:
            parts.append(f"κ ≥ {_num(threshold.get('kappa')):.2f}")
        if _num(threshold.get("accuracy")) is not None:
            parts.append(f"accuracy ≥ {_num(threshold.get('accuracy')):.2f}")
        return ", ".join(parts) or None
    value = _num(threshold)
    return None if value is None else f"{value:.2f}"


def _calibration_view(cal: Mapping[str, Any]) -> dict[str, Any]:
    def row(name: str, data: Any) -> dict[str, Any]:
        data = _map(data)
        gate = _map(data.get("gate"))
        passed = gate.get("passed")
        return {
            "name": name,
            **{k: data.get(k) for k in _CAL_METRICS},
            "threshold": _threshold_text(gate.get("threshold")),
            "gate": "none" if passed is None else "pass" if passed else "fail",
        }

    overall = _map(cal.get("overall"))
    pillars = _map(cal.get("pillars"))
    rows = [row("overall", overall)] + [row(k, v) for k, v in pillars.items()]
    conf = _map(overall.get("confusion"))
    labels = [str(x) for x in conf.get("labels") or []]
    matrix = _list(conf.get("matrix"))
    cells = []
    peak = max((_num(v) or 0 for r in matrix if isinstance(r, list) for v in r), default=0) or 1
    for i, label in enumerate(labels):
        raw = _list(matrix[i]) if i < len(matrix) else []
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
    per_class = _map(overall.get("per_class"))
    classes = [{"label": k, **_map(v)} for k, v in per_class.items()]
    bins = [b for b in _list(overall.get("reliability")) if isinstance(b, Mapping)]
    return {
        "rows": rows,
        "labels": labels,
        "confusion": cells,
        "classes": classes,
        "bins": bins,
        "chart": _reliability_chart(bins),
        "has_auc": any(r["auc"] is not None for r in rows),
        "overall": rows[0],
    }


#: Scenario rows the samples table shows (the disagreeing and widest first); summary.json has all.
SAMPLES_ROWS = 60


def _samples_view(root: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Repeated samples: per pillar their agreement, per scenario mean, sd and interval."""
    if root is None:
        return None
    asked = [
        leaf
        for leaf in _leaves(root)
        if leaf.get("kind") == "scenario" and (_num(leaf.get("samples")) or 1) > 1
    ]
    if not asked:
        return None
    rows: list[dict[str, Any]] = []
    for order, leaf in enumerate(asked):
        counts = _map(leaf.get("sample_verdicts"))
        ci = _ci(leaf.get("score_ci"))
        rows.append(
            {
                "id": _s(leaf.get("id")),
                "samples": int(_num(leaf.get("samples")) or 0),
                "score": _num(leaf.get("score")),
                "std": _num(leaf.get("score_std")),
                "ci": list(ci) if ci else None,
                "width": (ci[1] - ci[0]) if ci else -1.0,
                "verdict": _verdict(leaf.get("verdict")),
                "verdicts": " / ".join(str(int(_num(counts.get(v)) or 0)) for v in GRADED_VERDICTS),
                "unanimous": leaf.get("unanimous") is not False,
                "order": order,
            }
        )
    rows.sort(key=lambda r: (r["unanimous"], -r["width"], r["order"]))
    pillars = []
    for pillar in [root, *_children(root)]:
        fig = _map(pillar.get("reliability"))
        if not fig:
            continue
        pillars.append(
            {
                "id": "overall" if pillar is root else _s(pillar.get("id")),
                "title": "" if pillar is root else _s(pillar.get("title")),
                "scenarios": int(_num(fig.get("scenarios")) or 0),
                "unanimous": int(_num(fig.get("unanimous")) or 0),
                "agreement": _num(fig.get("agreement")),
                "mean_std": _num(fig.get("mean_std")),
            }
        )
    majority = asked[0].get("samples_aggregation") == "majority_vote"
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


def _pr_view(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    from .._compare import report_view

    return report_view(summary)


def build_view(
    summary: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    calibration: Mapping[str, Any] | None = None,
    answer_limit: int = ANSWER_LIMIT,
    assume_clean: bool = False,
) -> dict[str, Any]:
    """The data both reports show, cleaned, ordered and formatted-ready.

    ``assume_clean``: *summary* and *records* already went through
    :func:`_deep_clean` (render_markdown builds several views of one input).
    """
    s: Mapping[str, Any] = _map(summary if assume_clean else _deep_clean(summary))
    recs = [
        r
        for r in (records if assume_clean else (_deep_clean(r) for r in records))
        if isinstance(r, Mapping)
    ]
    roots = [n for n in _list(s.get("nodes")) if isinstance(n, Mapping)]
    root = roots[0] if roots else None

    table: list[dict[str, Any]] = []
    pillars: list[dict[str, Any]] = []
    place: dict[str, dict[str, str]] = {}
    nodes: dict[str, Mapping[str, Any]] = {}
    order: dict[str, int] = {}
    if root is not None:
        for pillar in _children(root):
            prow = _node_row(pillar, 1)
            pillars.append(prow)
            table.append(prow)
            for article in _children(pillar):
                if article.get("kind") != "scenario":
                    table.append(_node_row(article, 2))
                for leaf in _leaves(article):
                    sid = _s(leaf.get("id"))
                    nodes.setdefault(sid, leaf)
                    order.setdefault(sid, len(order))
                    place.setdefault(
                        sid,
                        {
                            "pillar": prow["id"],
                            "pillar_title": prow["title"],
                            "article": _s(article.get("id")),
                            "article_title": _s(article.get("title")),
                        },
                    )

    scenarios = []
    seen: set[str] = set()
    for rec in recs:
        result = _map(rec.get("result"))
        sid = _s(rec.get("scenario_id") or result.get("key"))
        seen.add(sid)
        scenarios.append(_scenario_view(rec, nodes.get(sid), place.get(sid, {}), answer_limit))
    for sid, node in nodes.items():  # graded leaves whose record was not passed in
        if sid not in seen:
            scenarios.append(_scenario_view(None, node, place.get(sid, {}), answer_limit))

    def by_tree(sc: dict[str, Any]) -> int:
        return order.get(sc["id"], len(order))

    def by_badness(sc: dict[str, Any]) -> tuple[int, float, int]:
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
    first_anchor: dict[str, str] = {}
    for sc in failed:
        first_anchor.setdefault(sc["id"], sc["anchor"])
    # the gate's list (declared critical severity), so the report, the terminal and the
    # gate name the same scenarios; a score-implied severity shows on each card instead
    listed = _get(s, "gate", "critical_failures")
    if isinstance(listed, list):
        declared = {str(cid).split(" (", 1)[0] for cid in listed}
        critical = [sc for sc in failed if sc["id"] in declared]
    else:  # a summary written before the gate listed them: the severity of each scenario
        critical = [sc for sc in failed if sc["severity"] == "critical"]
    # A steered grade is never a silent pass: every flagged item is listed, whatever its verdict.
    injection = sorted((sc for sc in scenarios if sc["injection"]), key=by_tree)

    bands = {
        key: default if (given := _num(_get(s, "bands", key))) is None else given
        for key, default in Bands().to_json().items()
    }
    gate = _map(s.get("gate"))
    gate_passed = gate.get("passed") is True
    verdict = _verdict(s.get("verdict"))
    tone = "fail" if not gate_passed else "warn" if verdict != "pass" else "pass"
    judges = s.get("judge")
    judge = ", ".join(_s(j) for j in judges) if isinstance(judges, list) else _s(judges)
    items = _map(s.get("items"))
    counts = dict.fromkeys(VERDICTS, 0)
    if root is not None:
        counts = _node_row(root, 0)["counts"]
    elif scenarios:
        for sc in scenarios:
            counts[sc["verdict"]] += 1

    calibration_only = calibration is not None and not recs and root is None
    return {
        "calibration_only": calibration_only,
        "family": _s(s.get("family")),
        "family_version": _s(s.get("family_version")),
        "title": _s(_map(root).get("title") or s.get("family")) or "benchmark",
        "preset": _s(s.get("preset")),
        "subject": _s(s.get("subject")),
        "judge": judge,
        "rules_only": judge.strip() in ("rules", ""),
        "score": _num(s.get("score")),
        "verdict": verdict,
        "aggregation": _s(_map(root).get("aggregation")),
        "bands": bands,
        "gate": {
            "passed": gate_passed,
            "reasons": [_s(r) for r in _list(gate.get("reasons"))],
            "notes": [_s(n) for n in _list(gate.get("notes"))],
        },
        "tone": tone,
        "items": items,
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
        "usage": _usage_view(recs),
        "lineage": [
            ("Run id", _s(s.get("run_id")) or "—"),
            ("Started", _s(s.get("started_at")) or "—"),
            ("Ended", _s(s.get("ended_at")) or "—"),
            ("Plugin version", _s(s.get("plugin_version")) or "—"),
            ("Family version", _s(s.get("family_version")) or "—"),
            ("Records head (before the seal)", _s(s.get("chain_head")) or "—"),
            ("Summary schema", _s(s.get("schema")) or "—"),
        ],
        "chain_head": _s(s.get("chain_head")),
        "run_id": _s(s.get("run_id")),
        "plugin_version": _s(s.get("plugin_version")),
        "answer_limit": answer_limit,
        "calibration": _calibration_view(_deep_clean(calibration))
        if isinstance(calibration, Mapping)
        else None,
        "disclaimer": DISCLAIMER,
        "pr": _pr_view(s),  # suites and the comparison with the baseline (pull-request check)
        "samples": _samples_view(root),  # repeated samples: spread, intervals, agreement
    }


# --------------------------------------------------------------------------- Markdown escaping

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
# What would open a heading, list, rule or setext underline at the start of a line.
_BLOCK_START = re.compile(r"^(\s*)(?=[#+=-]|\d+[.)])")


def _md_inline(value: Any) -> str:
    """Text for a Markdown paragraph: markup characters escaped, @mentions defused."""
    text = clean_text(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = _BLOCK_START.sub(r"\1\\", text)
    return _MENTION.sub("@\u200b", text)


def md_text(value: Any) -> str:
    """Multi-line text as one Markdown paragraph (line breaks kept as ``<br>``)."""
    return "<br>".join(_md_inline(line) for line in clean_text(value).split("\n"))


def md_cell(value: Any) -> str:
    """Text for a GFM table cell: no raw ``|`` and no line break can end the row."""
    return md_text(value).strip() or " "


def md_html(value: Any) -> str:
    """Text inside raw HTML in Markdown (``<summary>``): HTML-escaped, mentions defused."""
    return _MENTION.sub("@\u200b", html.escape(clean_text(value)))


def md_code(value: Any, info: str = "text") -> str:
    """A fenced code block that no backtick run inside *value* can close early."""
    text = clean_text(value)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def md_tick(value: Any, table: bool = True) -> str:
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


def md_bar(value: Any, width: int = 10) -> str:
    x = _num(value)
    if x is None:
        return "░" * width
    full = round(max(0.0, min(1.0, x)) * width)
    return "█" * full + "░" * (width - full)


# --------------------------------------------------------------------------- rendering


@lru_cache(maxsize=1)
def _environment() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("pytest_agenteval.reports", "templates"),
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
    summary: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    calibration: Mapping[str, Any] | None = None,
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
    summary = _map(_deep_clean(summary))
    records = [_deep_clean(r) for r in records]
    for i, (limit, answers, max_failed, max_warned) in enumerate(steps):
        view = build_view(
            summary, records, calibration=calibration, answer_limit=limit, assume_clean=True
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
    summary: Mapping[str, Any],
    records: Sequence[Mapping[str, Any]],
    *,
    calibration: Mapping[str, Any] | None = None,
) -> str:
    """``report.html``: one self-contained page (inline CSS and SVG, no script, no network)."""
    view = build_view(summary, records, calibration=calibration)
    return str(_environment().get_template("report.html.j2").render(v=view))


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


def _ci(value: Any) -> tuple[float, float] | None:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = _num(value[0]), _num(value[1])
        if lo is not None and hi is not None:
            return (lo, hi)
    return None


def fmt_ci(value: Any, digits: int = 2) -> str:
    """``[0.47, 1.00]``; empty when there is no interval."""
    ci = _ci(value)
    return "" if ci is None else f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def _pct_ci(value: Any) -> str:
    """``[92.3%, 100.0%]``: an accuracy interval in the percentages accuracy is shown in."""
    ci = _ci(value)
    return "" if ci is None else f"[{fmt_pct(ci[0])}, {fmt_pct(ci[1])}]"


def _cal_status(gate: Mapping[str, Any]) -> str:
    status = gate.get("status")
    if status in _CAL_STATUS:
        return str(status)
    passed = gate.get("passed")
    return "none" if passed is None else "pass" if passed else "fail"


def _cal_row(name: str, data: Any) -> dict[str, Any]:
    data = _map(data)
    gate = _map(data.get("gate"))
    kappa, ceiling = _num(data.get("kappa")), _num(data.get("inter_rater_fleiss_kappa"))
    other = _map(data.get("calibration_split"))
    return {
        "name": name,
        "n": _num(data.get("n")),
        "entries": _num(data.get("entries")),
        "accuracy": _num(data.get("accuracy")),
        "accuracy_ci": _pct_ci(data.get("accuracy_ci")),
        "kappa": kappa,
        "kappa_ci": fmt_ci(data.get("kappa_ci")),
        "fleiss": ceiling,
        "fleiss_n": _num(data.get("inter_rater_n")),
        "above_ceiling": kappa is not None and ceiling is not None and kappa > ceiling,
        "brier": _num(data.get("brier")),
        "ece": _num(data.get("ece")),
        "auc": _num(data.get("auc")),
        "errors": int(_num(data.get("evaluation_failures")) or 0),
        "not_gradable": int(_num(data.get("not_gradable")) or 0),
        "threshold": _threshold_text(gate.get("threshold")),
        "gate": _cal_status(gate),
        "reasons": [_s(r) for r in _list(gate.get("reasons"))],
        "notes": [_s(n) for n in _list(gate.get("notes"))],
        "other": (
            {
                "n": _num(other.get("n")),
                "accuracy": _num(other.get("accuracy")),
                "kappa": _num(other.get("kappa")),
            }
            if other
            else None
        ),
    }


def _location(entry: Mapping[str, Any]) -> str:
    where = _s(entry.get("file"))
    line = _num(entry.get("line"))
    return f"{where}:{int(line)}" if where and line is not None else where


def _disagreement_view(d: Mapping[str, Any], limit: int) -> dict[str, Any]:
    band = _list(d.get("band"))
    lo = _num(band[0]) if len(band) == 2 else None
    hi = _num(band[1]) if len(band) == 2 else None
    rationale, rationale_cut = _truncate(_s(d.get("rationale")), limit)
    reasoning, reasoning_cut = _truncate(_s(d.get("reasoning")), limit)
    score = _num(d.get("score"))
    expected, actual = _verdict(d.get("expected")), _verdict(d.get("actual"))
    in_band = score is not None and lo is not None and hi is not None and lo <= score <= hi
    return {
        "id": _s(d.get("id")) or "?",
        "pillar": _s(d.get("pillar")),
        "article": _s(d.get("article")),
        "location": _location(d),
        "split": _s(d.get("split")),
        "adversarial": _s(d.get("adversarial")),
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


def _cal_lineage(s: Mapping[str, Any], cal: Mapping[str, Any]) -> dict[str, Any]:
    lin = _map(cal.get("lineage"))
    judges = [
        f"{_s(j.get('spec'))}"
        + (
            f" (model {_s(j.get('model_requested'))})"
            if j.get("model_requested") and _s(j.get("model_requested")) not in _s(j.get("spec"))
            else ""
        )
        for j in _list(lin.get("judges"))
        if isinstance(j, Mapping)
    ]
    if not judges:
        judge = s.get("judge")
        judges = [_s(j) for j in judge] if isinstance(judge, list) else [_s(judge)]
    prompt = _map(lin.get("judge_prompt"))
    used = [
        (_s(p.get("version")) + " " if p.get("version") else "") + _s(p.get("sha256"))
        for p in _list(lin.get("prompts_used"))
        if isinstance(p, Mapping)
    ]
    prompt_text = _s(prompt.get("version")) or "—"
    if prompt.get("file"):
        prompt_text = f"{_s(prompt.get('file'))} ({prompt_text})"
    rows = [
        ("Run id", _s(s.get("run_id")) or "—"),
        ("Started", _s(s.get("started_at")) or "—"),
        ("Ended", _s(s.get("ended_at")) or "—"),
        ("Plugin version", _s(s.get("plugin_version")) or "—"),
        ("Family", f"{_s(s.get('family'))} {_s(s.get('family_version'))}".strip() or "—"),
        ("Judges", ", ".join(j for j in judges if j) or "—"),
        (
            "Models that answered",
            ", ".join(_s(m) for m in _list(lin.get("models_returned")))
            or "— (no model call: offline judge or cache)",
        ),
        ("Family judge prompt", prompt_text),
        ("Family judge prompt SHA-256", _s(prompt.get("sha256")) or "— (built-in default prompt)"),
        ("Judge prompts used (version SHA-256)", "; ".join(used) or "—"),
        ("Records head (before the seal)", _s(s.get("chain_head")) or "—"),
        ("Summary schema", _s(s.get("schema")) or "—"),
    ]
    files = [
        {
            "path": _s(f.get("path")),
            "sha256": _s(f.get("sha256")),
            "entries": int(_num(f.get("entries")) or 0),
        }
        for f in _list(lin.get("golden_files"))
        if isinstance(f, Mapping)
    ]
    return {"rows": rows, "files": files}


def build_calibration_view(
    summary: Mapping[str, Any],
    calibration: Mapping[str, Any],
    *,
    text_limit: int = RATIONALE_LIMIT,
) -> dict[str, Any]:
    """What both calibration reports show: cleaned, formatted-ready, one view for both."""
    s = _map(_deep_clean(summary))
    cal = _map(_deep_clean(calibration))
    base = _calibration_view(cal)
    pillars = _map(cal.get("pillars"))
    rows = [_cal_row(k, v) for k, v in pillars.items()]
    overall = _cal_row("overall", cal.get("overall"))
    gate = _map(cal.get("gate"))
    status = _cal_status(gate)
    if status == "none":
        status = "fail"
    judges = s.get("judge")
    judge = ", ".join(_s(j) for j in judges) if isinstance(judges, list) else _s(judges)
    th = _map(_get(cal, "overall", "gate", "threshold"))
    stability = _map(cal.get("stability"))
    cost = _map(_get(s, "cost", "total"))
    return {
        "family": _s(s.get("family") or cal.get("family")),
        "family_version": _s(s.get("family_version")),
        "judge": judge,
        "rules_only": judge.strip() in ("rules", ""),
        "thresholds_of": _s(cal.get("preset_thresholds")) or "standard",
        "split": _s(cal.get("split")) or "holdout",
        "gate_on": _s(gate.get("on")) or "point",
        "min_n": int(_num(gate.get("min_n")) or 0),
        "threshold": _threshold_text(th) or "—",
        "max_errors": int(_num(th.get("max_evaluation_failures")) or 0),
        "status": status,
        "tone": {"pass": "pass", "insufficient": "warn"}.get(status, "fail"),
        "reasons": [_s(r) for r in _list(gate.get("reasons"))],
        "notes": [_s(n) for n in _list(gate.get("notes"))],
        "insufficient": [_s(p) for p in _list(gate.get("insufficient"))],
        "overall": overall,
        "rows": rows,
        "any_fleiss": any(r["fleiss"] is not None for r in [overall, *rows]),
        "any_other": any(r["other"] is not None for r in [overall, *rows]),
        "has_auc": any(r["auc"] is not None for r in [overall, *rows]),
        "labels": base["labels"],
        "confusion": base["confusion"],
        "classes": base["classes"],
        "bins": [b for b in base["bins"] if _num(b.get("n"))],
        "chart": base["chart"],
        # not "items": Jinja would find the dict method of that name first
        "counts": {
            k: int(_num(_get(s, "items", k)) or 0)
            for k in ("passed", "failed", "errors", "skipped")
        },
        "disagreements": [
            _disagreement_view(d, text_limit)
            for d in _list(cal.get("disagreements"))
            if isinstance(d, Mapping)
        ],
        "failures": [
            {
                "id": _s(e.get("id")) or "?",
                "pillar": _s(e.get("pillar")),
                "location": _location(e),
                "error": _s(e.get("error")) or "unknown error",
            }
            for e in _list(cal.get("evaluation_failures"))
            if isinstance(e, Mapping)
        ],
        "not_gradable": int(_num(cal.get("not_gradable")) or 0),
        "skipped": int(_num(_get(cal, "skipped", "total")) or 0),
        "skipped_by": [
            (_s(k), int(_num(n) or 0)) for k, n in _map(_get(cal, "skipped", "by_reason")).items()
        ],
        "prompt_mismatch": int(_num(cal.get("prompt_mismatch")) or 0),
        "stability": stability or None,
        "tokens": {
            "prompt": int(_num(cost.get("prompt_tokens")) or 0),
            "completion": int(_num(cost.get("completion_tokens")) or 0),
            "usd": _num(cost.get("usd")),
        },
        "lineage": _cal_lineage(s, cal),
        "chain_head": _s(s.get("chain_head")),
        "run_id": _s(s.get("run_id")),
        "plugin_version": _s(s.get("plugin_version")),
    }


def render_calibration_markdown(summary: Mapping[str, Any], calibration: Mapping[str, Any]) -> str:
    """``report.md`` of a calibration run; sheds the texts of disagreements to fit a PR comment."""
    template = _environment().get_template("calibration.md.j2")
    # (characters of each rationale and reasoning, disagreements listed in full); None: all
    steps: list[tuple[int, int | None]] = [(600, None), (240, None), (120, 60), (0, 60), (0, 20)]
    text = ""
    for i, (limit, listed) in enumerate(steps):
        view = build_calibration_view(summary, calibration, text_limit=max(limit, 1))
        text = template.render(v=view, show_texts=limit > 0, listed=listed, trimmed=i > 0)
        if len(text) <= MARKDOWN_BUDGET:
            break
    return text


def render_calibration_html(summary: Mapping[str, Any], calibration: Mapping[str, Any]) -> str:
    """``report.html`` of a calibration run: one self-contained page, no script, no network."""
    view = build_calibration_view(summary, calibration)
    return str(_environment().get_template("calibration.html.j2").render(v=view))

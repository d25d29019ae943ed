"""Two runs of one family compared: per scenario, article, pillar and suite.

Pure: no pytest, no I/O. Both runs are ``summary.json`` dicts (the candidate's
may be built in memory before it is written), so ``agenteval compare RUN_A
RUN_B`` and the gate at the end of a run compute the same thing.

What is compared
----------------
* **Scenarios** both runs graded (pass, warn or fail in both; an errored or
  skipped one is not paired, and the gate's ``max_errors`` counts it anyway).
  Verdicts are ordered FAIL < WARN < PASS: a scenario whose verdict went down
  got *worse*, up *better*, the same *unchanged* (its score may still have
  moved inside the band). *Newly failing* = FAIL now, PASS or WARN before;
  *fixed* = the reverse.
* **Nodes**: the benchmark root, each suite (its metric, recomputed on both
  runs' scenario nodes with the candidate's selection), pillar and article.
  ``drop`` = baseline score − candidate score (positive is worse).

The regression and its significance
-----------------------------------
Layerup's ``regression = max_s (metric_s(baseline) − metric_s(candidate))``
taken over the nodes above. A judge is noisy — one scenario of twenty
flipping between runs is expected even when nothing changed — so a drop
counts only when it is *significant*: a one-sided exact **sign test** over the
scenarios under the node whose verdict changed. Under "no change", a changed
verdict is as likely to go down as up, so the number that went down is
Binomial(n, ½) with n = worse + better, and

    p = P(X ≥ worse) = Σ_{k=worse..n} C(n, k) / 2ⁿ

One flip out of twenty gives p = 0.5 (noise); six newly failing and none
fixed gives p = 1/64 ≈ 0.016 < 0.05 (a regression). The sign test needs no
assumption about the judge's score scale, works the same for the offline
rules judge (scores in steps of 1/criteria) and an LLM judge, and at least
five scenarios must get worse (none better) before any drop can be
significant at 0.05. A score that moved without changing its verdict is not
counted: a drift inside the bands does not fail the gate (it is shown).

``regression`` reports the largest significant drop when there is one, else
the largest drop (``significant: false``); the gate fails when that drop is
significant and larger than ``regression_max``. Nodes are tested one by one
without a multiplicity correction: they are nested (a scenario is in its
article, pillar, suite and the root), so the tests are far from independent,
and a correction would make a real six-of-twenty regression pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from ._text import gfm_cell as _md
from ._text import named as _named
from ._vocab import SCORE_DIGITS, VERDICT_RANK, JSONObject, JSONValue, format_score

__all__ = [
    "DEFAULT_ALPHA",
    "Comparison",
    "NodeDelta",
    "Regression",
    "ScenarioChange",
    "compare",
    "comparison_markdown",
    "comparison_text",
    "sign_test_p",
]

DEFAULT_ALPHA = 0.05
_LEVELS = ("benchmark", "suite", "pillar", "article")
_DIGITS = SCORE_DIGITS  # score deltas and p-values keep a score's decimals

# A summary (or a node of one) as read: its fields are narrowed where they are used.
_Fields: TypeAlias = Mapping[str, object]
_NO_FIELDS: _Fields = {}


def sign_test_p(worse: int, better: int) -> float:
    """One-sided exact sign test: P(X ≥ worse) for X ~ Binomial(worse + better, ½)."""
    if worse < 0 or better < 0:
        raise ValueError("counts must be non-negative")
    n = worse + better
    if n == 0:
        return 1.0
    outcomes: int = 2**n  # sign patterns, equally likely under no change
    return math.fsum(math.comb(n, k) for k in range(worse, n + 1)) / outcomes


def _num(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _fields(value: object) -> _Fields:
    """*value* when it is a JSON object, else an empty one: a summary is read, not trusted."""
    return value if isinstance(value, Mapping) else _NO_FIELDS


def _objects(value: object) -> Iterator[_Fields]:
    """The JSON objects in *value* when it is an array (anything else in it is skipped)."""
    if isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, Mapping):
                yield item


def _texts(value: object) -> list[str]:
    """The items of *value*, as text, when it is an array."""
    return [str(item) for item in value] if isinstance(value, (list, tuple)) else []


def _walk(
    node: _Fields, path: tuple[_Fields, ...]
) -> Iterator[tuple[_Fields, tuple[_Fields, ...]]]:
    yield node, path
    for child in _objects(node.get("children")):
        yield from _walk(child, (*path, node))


def _nodes(summary: _Fields) -> Iterator[tuple[_Fields, tuple[_Fields, ...]]]:
    for root in _objects(summary.get("nodes")):
        yield from _walk(root, ())


@dataclass(frozen=True)
class _Scenario:
    """A scenario node of a summary, and where it sits."""

    score: float | None
    verdict: str
    title: str
    article: str
    pillar: str


def scenario_index(summary: _Fields) -> dict[str, _Scenario]:
    """Scenario id -> its score, verdict, title, article and pillar."""
    out: dict[str, _Scenario] = {}
    for node, path in _nodes(summary):
        if node.get("kind") != "scenario":
            continue
        article = next((p for p in reversed(path) if p.get("kind") == "article"), _NO_FIELDS)
        pillar = next((p for p in reversed(path) if p.get("kind") == "pillar"), _NO_FIELDS)
        out[str(node.get("id"))] = _Scenario(
            score=_num(node.get("score")),
            verdict=str(node.get("verdict") or ""),
            title=str(node.get("title") or ""),
            article=str(article.get("id") or ""),
            pillar=str(pillar.get("id") or ""),
        )
    return out


@dataclass(frozen=True)
class _Aggregate:
    """A benchmark, pillar or article node of a summary."""

    score: float | None
    title: str
    scenarios: list[str]  # the scenario ids beneath


def _aggregate_index(summary: _Fields) -> dict[tuple[str, str], _Aggregate]:
    """(level, id) -> score, title and the scenario ids beneath, for the tree's nodes."""
    out: dict[tuple[str, str], _Aggregate] = {}
    for node, _ in _nodes(summary):
        kind = str(node.get("kind") or "")
        if kind not in ("benchmark", "pillar", "article"):
            continue
        ids = [str(n.get("id")) for n, _ in _walk(node, ()) if n.get("kind") == "scenario"]
        out[(kind, str(node.get("id")))] = _Aggregate(
            score=_num(node.get("score")),
            title=str(node.get("title") or node.get("id") or ""),
            scenarios=ids,
        )
    return out


def _suites(summary: _Fields) -> list[_Fields]:
    items = _fields(summary.get("suites")).get("items")
    return [s for s in _objects(items) if s.get("name")]


def _suite_value(metric: str, ids: Sequence[str], scen: Mapping[str, _Scenario]) -> float | None:
    from ._suites import metric_value

    pairs = [(scen[i].score, scen[i].verdict) for i in ids if i in scen]
    return metric_value(metric, pairs)


@dataclass(frozen=True)
class ScenarioChange:
    id: str
    article: str
    pillar: str
    before_verdict: str | None  # None: not in that run
    after_verdict: str | None
    before_score: float | None
    after_score: float | None

    @property
    def paired(self) -> bool:
        return self.before_verdict in VERDICT_RANK and self.after_verdict in VERDICT_RANK

    @property
    def direction(self) -> str:
        """``worse``, ``better``, ``unchanged``, or ``not compared`` (not graded in both)."""
        if not self.paired:
            return "not compared"
        before = VERDICT_RANK[self.before_verdict or ""]
        after = VERDICT_RANK[self.after_verdict or ""]
        return "worse" if after > before else "better" if after < before else "unchanged"

    @property
    def newly_failing(self) -> bool:
        return self.paired and self.after_verdict == "fail" and self.before_verdict != "fail"

    @property
    def fixed(self) -> bool:
        return self.paired and self.before_verdict == "fail" and self.after_verdict != "fail"

    @property
    def delta(self) -> float | None:
        if self.before_score is None or self.after_score is None:
            return None
        return round(self.after_score - self.before_score, _DIGITS)

    def to_dict(self) -> JSONObject:
        return {
            "id": self.id,
            "article": self.article,
            "pillar": self.pillar,
            "before": {"verdict": self.before_verdict, "score": self.before_score},
            "after": {"verdict": self.after_verdict, "score": self.after_score},
            "delta": self.delta,
            "change": self.direction,
        }


@dataclass(frozen=True)
class NodeDelta:
    level: str  # benchmark | suite | pillar | article
    id: str
    title: str
    before: float | None
    after: float | None
    worse: int  # scenarios beneath whose verdict went down
    better: int
    shared: int  # scenarios beneath graded in both runs
    scenarios: tuple[str, ...] = ()  # the scenario ids beneath (either run)

    @property
    def drop(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return round(self.before - self.after, _DIGITS)

    @property
    def p_value(self) -> float:
        return sign_test_p(self.worse, self.better)

    def to_dict(self) -> JSONObject:
        return {
            "level": self.level,
            "id": self.id,
            "title": self.title,
            "before": self.before,
            "after": self.after,
            "drop": self.drop,
            "worse": self.worse,
            "better": self.better,
            "shared": self.shared,
            "p_value": round(self.p_value, _DIGITS),
        }


@dataclass(frozen=True)
class Regression:
    """The regression term of the gate (see the module docstring)."""

    max_drop: float | None
    level: str | None
    node: str | None
    significant: bool
    p_value: float | None
    bound: float | None  # regression_max; None: the term is not checked
    alpha: float
    worse: tuple[str, ...]  # scenarios under that node that got worse (newly failing first)
    newly_failing: tuple[str, ...]  # over the whole run
    fixed: tuple[str, ...]

    @property
    def failing(self) -> bool:
        return (
            self.bound is not None
            and self.significant
            and self.max_drop is not None
            and self.max_drop > self.bound
        )

    def to_dict(self) -> JSONObject:
        return {
            "max_drop": self.max_drop,
            "level": self.level,
            "node": self.node,
            "significant": self.significant,
            "p_value": None if self.p_value is None else round(self.p_value, _DIGITS),
            "test": "one-sided exact sign test on per-scenario verdict changes",
            "alpha": self.alpha,
            "regression_max": self.bound,
            "failed_gate": self.failing,
            "worse": list(self.worse),
            "newly_failing": list(self.newly_failing),
            "fixed": list(self.fixed),
        }


@dataclass(frozen=True)
class Comparison:
    baseline: Mapping[str, JSONValue]  # run_id, path, chain_head
    scenarios: tuple[ScenarioChange, ...]
    nodes: tuple[NodeDelta, ...]
    regression: Regression
    notes: tuple[str, ...] = field(default_factory=tuple)

    def count(self, direction: str) -> int:
        return sum(1 for s in self.scenarios if s.direction == direction)

    @property
    def added(self) -> list[str]:
        return [s.id for s in self.scenarios if s.before_verdict is None]

    @property
    def removed(self) -> list[str]:
        return [s.id for s in self.scenarios if s.after_verdict is None]

    def changed(self) -> list[ScenarioChange]:
        """Scenarios whose verdict or score moved, worst first."""
        moved = [
            s
            for s in self.scenarios
            if s.direction in ("worse", "better") or (s.delta is not None and s.delta != 0)
        ]
        order = {"worse": 0, "unchanged": 1, "better": 2}
        return sorted(moved, key=lambda s: (order.get(s.direction, 3), s.delta or 0.0, s.id))

    def worst_nodes(self) -> list[NodeDelta]:
        """Nodes whose score moved, largest drop first."""
        moved = [n for n in self.nodes if n.drop is not None and n.drop != 0]
        return sorted(moved, key=lambda n: (-(n.drop or 0.0), _LEVELS.index(n.level), n.id))

    def to_dict(self) -> JSONObject:
        return {
            "baseline": dict(self.baseline),
            "scenarios": {
                "shared": sum(1 for s in self.scenarios if s.paired),
                "worse": self.count("worse"),
                "better": self.count("better"),
                "unchanged": self.count("unchanged"),
                "not_compared": self.count("not compared"),
                "added": list(self.added),
                "removed": list(self.removed),
                "changed": [s.to_dict() for s in self.changed()],
            },
            "nodes": [n.to_dict() for n in self.worst_nodes()],
            "pillars": [n.to_dict() for n in self.nodes if n.level == "pillar"],
            "notes": list(self.notes),
        }


def compare(
    baseline: _Fields,
    candidate: _Fields,
    *,
    alpha: float = DEFAULT_ALPHA,
    regression_max: float | None = 0.0,
    baseline_ref: Mapping[str, JSONValue] | None = None,
) -> Comparison:
    """Compare two summaries of one family; *regression_max* None leaves the gate term off."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    before, after = scenario_index(baseline), scenario_index(candidate)
    changes: dict[str, ScenarioChange] = {}
    for sid in sorted(set(before) | set(after)):
        b, a = before.get(sid), after.get(sid)
        either = a or b
        changes[sid] = ScenarioChange(
            id=sid,
            article=either.article if either else "",
            pillar=either.pillar if either else "",
            before_verdict=b.verdict if b else None,
            after_verdict=a.verdict if a else None,
            before_score=b.score if b else None,
            after_score=a.score if a else None,
        )

    def delta(
        level: str, nid: str, title: str, ids: Sequence[str], b: float | None, a: float | None
    ) -> NodeDelta:
        under = [changes[i] for i in dict.fromkeys(ids) if i in changes]
        return NodeDelta(
            level=level,
            id=nid,
            title=title,
            before=_num(b),
            after=_num(a),
            worse=sum(1 for c in under if c.direction == "worse"),
            better=sum(1 for c in under if c.direction == "better"),
            shared=sum(1 for c in under if c.paired),
            scenarios=tuple(c.id for c in under),
        )

    nodes: list[NodeDelta] = []
    b_nodes, a_nodes = _aggregate_index(baseline), _aggregate_index(candidate)
    for key in [k for k in a_nodes if k in b_nodes]:
        level, nid = key
        ids = [*a_nodes[key].scenarios, *b_nodes[key].scenarios]
        nodes.append(
            delta(level, nid, a_nodes[key].title, ids, b_nodes[key].score, a_nodes[key].score)
        )
    for suite in _suites(candidate):
        ids = _texts(suite.get("members"))
        metric = str(suite.get("metric") or "mean_score")
        nodes.append(
            delta(
                "suite",
                str(suite["name"]),
                str(suite.get("title") or suite["name"]),
                ids,
                _suite_value(metric, ids, before),
                _suite_value(metric, ids, after),
            )
        )
    nodes.sort(key=lambda n: _LEVELS.index(n.level))

    notes = []
    if set(before) != set(after):
        notes.append(
            f"the runs share {len(set(before) & set(after))} scenarios "
            f"({len(set(after) - set(before))} only in the candidate, "
            f"{len(set(before) - set(after))} only in the baseline); node scores cover "
            "what each run graded"
        )
    for what in ("family", "preset", "condition"):
        if baseline.get(what) != candidate.get(what):
            notes.append(
                f"the baseline's {what} is {baseline.get(what)!r}, this run's {candidate.get(what)!r}"
            )

    regression = _regression(nodes, changes, alpha, regression_max)
    ref = dict(baseline_ref or {})
    run_id = baseline.get("run_id")
    ref.setdefault("run_id", run_id if isinstance(run_id, str) else None)
    return Comparison(ref, tuple(changes.values()), tuple(nodes), regression, tuple(notes))


def _regression(
    nodes: Sequence[NodeDelta],
    changes: Mapping[str, ScenarioChange],
    alpha: float,
    bound: float | None,
) -> Regression:
    dropped = [n for n in nodes if n.drop is not None]
    significant = [n for n in dropped if n.drop and n.drop > 0 and n.p_value <= alpha]
    pool = significant or dropped
    newly = tuple(c.id for c in changes.values() if c.newly_failing)
    fixed = tuple(c.id for c in changes.values() if c.fixed)
    if not pool:
        return Regression(None, None, None, False, None, bound, alpha, (), newly, fixed)
    top = max(pool, key=lambda n: (n.drop or 0.0, -_LEVELS.index(n.level)))
    # the scenarios that make this node's drop: those under it that got worse
    under = [changes[i] for i in top.scenarios if changes[i].direction == "worse"]
    under.sort(key=lambda c: (not c.newly_failing, c.id))
    return Regression(
        max_drop=top.drop,
        level=top.level,
        node=top.id,
        significant=bool(significant) and (top.drop or 0.0) > 0,
        p_value=top.p_value,
        bound=bound,
        alpha=alpha,
        worse=tuple(c.id for c in under),
        newly_failing=newly,
        fixed=fixed,
    )


def _score(value: object) -> str:
    number = _num(value)
    return "  -  " if number is None else format_score(number)


def _signed(value: object) -> str:
    number = _num(value)
    return "  -  " if number is None else f"{number:+.3f}"


def _p(value: object) -> str:
    number = _num(value)
    return "-" if number is None else f"{number:.3f}"


def regression_sentence(regression: Regression, run_label: str) -> str:
    """One line for the gate's reasons (when it fails) or notes."""
    r = regression
    if r.max_drop is None:
        return f"no node could be compared with baseline {run_label}"
    if r.max_drop <= 0:
        return f"no regression against baseline {run_label}: no node dropped"
    where = f"{r.node} ({r.level}) dropped {r.max_drop:.4g} against baseline {run_label}"
    test = (
        f"one-sided sign test p = {_p(r.p_value)}"
        + (f" ≤ α {r.alpha:g}" if r.significant else f" > α {r.alpha:g}")
        + " over the scenarios under it whose verdict changed"
    )
    bound = "" if r.bound is None else f" (regression_max {r.bound:g})"
    if r.failing:
        named = _named(r.worse) if r.worse else "none"
        return f"regression: {where}{bound}; significant ({test}); got worse: {named}"
    if not r.significant:
        return f"regression not significant: {where}{bound}, but {test}: judged noise"
    return f"a significant drop within the bound: {where}{bound} ({test})"


# --------------------------------------------------------------------------- rendering
#
# Renderers read the JSON form written to summary.json (``baseline``,
# ``regression``, ``comparison``), so the terminal, both reports, the GitHub
# job summary and ``agenteval compare`` show the same thing from one source.


def summary_fields(comparison: Comparison, baseline_ref: Mapping[str, JSONValue]) -> JSONObject:
    """The summary.json keys a comparison adds: ``baseline``, ``regression``, ``comparison``."""
    return {
        "baseline": dict(baseline_ref),
        "regression": comparison.regression.to_dict(),
        "comparison": comparison.to_dict(),
    }


def _rows(data: _Fields) -> list[tuple[str, ...]]:
    """(level, node, before, after, change, worse/better, p) rows, worst first."""
    comp = _fields(data.get("comparison"))
    rows: list[tuple[str, ...]] = []
    for n in _objects(comp.get("nodes")):
        drop = _num(n.get("drop"))
        rows.append(
            (
                str(n.get("level")),
                str(n.get("id")),
                _score(n.get("before")),
                _score(n.get("after")),
                _signed(None if drop is None else -drop),
                f"{n.get('worse', 0)}/{n.get('better', 0)}",
                _p(n.get("p_value")),
            )
        )
    for sc in _objects(_fields(comp.get("scenarios")).get("changed")):
        before, after = _fields(sc.get("before")), _fields(sc.get("after"))
        rows.append(
            (
                "scenario",
                str(sc.get("id")),
                f"{_score(before.get('score'))} {str(before.get('verdict') or '-').upper()}",
                f"{_score(after.get('score'))} {str(after.get('verdict') or '-').upper()}",
                _signed(sc.get("delta")),
                str(sc.get("change")),
                "",
            )
        )
    return rows


_HEADER = ("level", "node", "before", "after", "change", "worse/better", "p")


def _counts_line(data: _Fields) -> str:
    sc = _fields(_fields(data.get("comparison")).get("scenarios"))
    reg = _fields(data.get("regression"))
    return (
        f"{sc.get('shared', 0)} scenarios compared · {sc.get('worse', 0)} worse · "
        f"{sc.get('better', 0)} better · {sc.get('unchanged', 0)} unchanged · "
        f"newly failing {len(_texts(reg.get('newly_failing')))} · "
        f"fixed {len(_texts(reg.get('fixed')))}"
    )


def _verdict_line(data: _Fields) -> str:
    reg = _fields(data.get("regression"))
    if reg.get("max_drop") is None:
        return "regression: nothing to compare"
    drop = _num(reg.get("max_drop")) or 0.0
    # max_drop is baseline − candidate: a drop of 0.21 is a change of −0.21
    where = f"{reg.get('node')} ({reg.get('level')}) −{abs(drop):.4g}"
    if drop <= 0:
        return "regression: none (no node dropped)"
    test = f"sign test p = {_p(reg.get('p_value'))}, α {reg.get('alpha')}"
    bound = reg.get("regression_max")
    bound_text = "not checked" if bound is None else f"regression_max {bound}"
    if reg.get("failed_gate"):
        return f"regression: FAILED — worst significant drop {where} ({test}; {bound_text})"
    state = "significant" if reg.get("significant") else "not significant (noise)"
    return f"regression: ok — largest drop {where} is {state} ({test}; {bound_text})"


def comparison_text(data: _Fields) -> list[str]:
    """Terminal lines (no colour) for a summary that has a ``comparison``."""
    ref = _fields(data.get("baseline"))
    head = str(ref.get("chain_head") or "")
    lines = [
        f"compared with baseline {ref.get('path') or ref.get('run_id')}"
        + (f" (run {str(ref.get('run_id') or '')[:12]}, head {head[:12]}…)" if head else ""),
        f"  {_counts_line(data)}",
    ]
    rows = _rows(data)
    if rows:
        widths = [max(len(r[i]) for r in [_HEADER, *rows]) for i in range(len(_HEADER))]
        for row in [_HEADER, *rows]:
            cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            lines.append("  " + "  ".join(cells).rstrip())
    else:
        lines.append("  nothing changed")
    reg = _fields(data.get("regression"))
    newly_failing, fixed = _texts(reg.get("newly_failing")), _texts(reg.get("fixed"))
    if newly_failing:
        lines.append(f"  newly failing: {_named(newly_failing)}")
    if fixed:
        lines.append(f"  fixed: {_named(fixed)}")
    lines.append(f"  {_verdict_line(data)}")
    lines += [f"  note: {n}" for n in _texts(_fields(data.get("comparison")).get("notes"))]
    return lines


def comparison_markdown(data: _Fields, *, heading: str = "###") -> str:
    """GitHub-flavoured Markdown for a summary that has a ``comparison``."""
    ref = _fields(data.get("baseline"))
    out = [f"{heading} Compared with baseline", ""]
    line = f"Baseline run `{_md(str(ref.get('run_id') or '')[:16])}`"
    if ref.get("path"):
        line += f" at `{_md(ref.get('path'))}`"
    if ref.get("chain_head"):
        line += f", chain head `{_md(str(ref.get('chain_head'))[:16])}…`"
    out += [line + ".", "", f"**{_md(_verdict_line(data))}**", "", _md(_counts_line(data)), ""]
    rows = _rows(data)
    if rows:
        out += [
            "| Level | Node | Before | After | Change | Worse/better | p |",
            "|---|---|---:|---:|---:|---|---:|",
        ]
        out += [
            f"| {r[0]} | `{_md(r[1])}` | {r[2]} | {r[3]} | {r[4]} | {_md(r[5])} | {r[6]} |"
            for r in rows
        ]
    else:
        out.append("_Nothing changed._")
    reg = _fields(data.get("regression"))
    newly_failing, fixed = _texts(reg.get("newly_failing")), _texts(reg.get("fixed"))
    if newly_failing:
        out += ["", "Newly failing: " + ", ".join(f"`{_md(i)}`" for i in newly_failing)]
    if fixed:
        out += ["", "Fixed: " + ", ".join(f"`{_md(i)}`" for i in fixed)]
    for note in _texts(_fields(data.get("comparison")).get("notes")):
        out += ["", f"> {_md(note)}"]
    return "\n".join(out) + "\n"


def report_view(summary: _Fields) -> JSONObject | None:
    """What both reports show of the pull-request check (None when the run has none of it).

    ``markdown`` is ready for report.md (escaped here); the rest is plain
    text for report.html, which escapes it.
    """
    suites = _fields(summary.get("suites"))
    has_comparison = isinstance(summary.get("comparison"), Mapping)
    if not suites.get("items") and not has_comparison and not summary.get("baseline_note"):
        return None
    view: JSONObject = {
        "suites": [
            {
                "name": str(s.get("name")),
                "title": str(s.get("title") or s.get("name")),
                "metric": str(s.get("metric")),
                "weight": _score(s.get("weight")),
                "value": _score(s.get("value")),
                "suite_min": None if s.get("suite_min") is None else _score(s.get("suite_min")),
                "required": bool(s.get("required")),
                "status": str(s.get("status")),
                "scenarios": _count(s.get("scenarios")),
            }
            for s in _objects(suites.get("items"))
        ],
        "bench": _score(suites.get("bench")),
        "baseline_note": str(summary.get("baseline_note") or ""),
        "comparison": None,
    }
    if has_comparison:
        ref = _fields(summary.get("baseline"))
        reg = _fields(summary.get("regression"))
        view["comparison"] = {
            "markdown": comparison_markdown(summary, heading="###"),
            "run_id": str(ref.get("run_id") or ""),
            "path": str(ref.get("path") or ""),
            "chain_head": str(ref.get("chain_head") or ""),
            "verdict": _verdict_line(summary),
            "failed": bool(reg.get("failed_gate")),
            "counts": _counts_line(summary),
            "header": list(_HEADER),
            "rows": [list(r) for r in _rows(summary)],
            "newly_failing": _json_texts(reg.get("newly_failing")),
            "fixed": _json_texts(reg.get("fixed")),
            "notes": _json_texts(_fields(summary.get("comparison")).get("notes")),
        }
    return view


def _count(value: object) -> int:
    """A count from a summary; 0 when it is missing or not a whole number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _json_texts(value: object) -> list[JSONValue]:
    return list(_texts(value))

"""Terminal rendering: the benchmark ▸ pillar ▸ article tree, failures, the gate."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .._evals import EvalResult, injection_suspected
from .._model import CalibrationReport
from .._stash import STATE
from .._text import clip, named, terminal_safe
from .._vocab import format_score

if TYPE_CHECKING:
    from .._aggregator import CalibrationOutcome, FamilyOutcome
    from .._collect import ScenarioItem
    from .._family import Plan
    from .._stats import ReliabilityDoc


class Terminal(Protocol):
    """What the summary writes to: pytest's terminal reporter, made safe (``SafeTerminal``)."""

    def write(self, text: str, **markup: bool) -> None: ...

    def write_line(self, text: str, **markup: bool) -> None: ...

    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None: ...


_MARKUP = {
    "pass": {"green": True},
    "warn": {"yellow": True},
    "fail": {"red": True},
    "error": {"red": True, "bold": True},
    "skipped": {"yellow": True},
}


def _score(result: EvalResult) -> str:
    return "  -  " if result.score is None else format_score(result.score)


def tree_lines(root: EvalResult) -> list[tuple[str, str, str, EvalResult]]:
    """(prefix+label, score, verdict, node) rows for benchmark, pillars and articles."""
    rows: list[tuple[str, str, str, EvalResult]] = []

    def walk(node: EvalResult, prefix: str, last: bool, depth: int) -> None:
        if depth == 0:
            label = f"{node.key}  [{node.aggregation}]"
            child_prefix = ""
        else:
            branch = "└─ " if last else "├─ "
            extra = f"  [{node.aggregation}, w {node.weight:.2f}]"
            if node.kind == "article":
                c = node.counts()
                flagged = sum(1 for i in node.items() if injection_suspected(i))
                extra = (
                    f"  ({c['pass']}/{sum(c.values())} pass"
                    + (f", {c['error']} error" if c["error"] else "")
                    + (f", {c['skipped']} skipped" if c["skipped"] else "")
                    + (f", {flagged} injection suspected" if flagged else "")
                    + ")"
                )
            label = prefix + branch + node.key + extra
            child_prefix = prefix + ("   " if last else "│  ")
        rows.append((label, _score(node), node.verdict.upper(), node))
        if node.kind in ("benchmark", "pillar"):
            kids = list(node.children)
            for i, child in enumerate(kids):
                walk(child, child_prefix, i == len(kids) - 1, depth + 1)

    walk(root, "", True, 0)
    return rows


class _Redacted:
    """*tr* whose every line goes through the run's redactor first (as evidence does)."""

    def __init__(self, tr: Terminal, redact: Callable[[str], str]) -> None:
        self._tr, self._redact = tr, redact

    def write(self, text: str, **markup: bool) -> None:
        self._tr.write(self._redact(text), **markup)

    def write_line(self, text: str, **markup: bool) -> None:
        self._tr.write_line(self._redact(text), **markup)

    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None:
        self._tr.write_sep(sep, None if title is None else self._redact(title), **markup)


def write_summary(
    tr: Terminal,
    outcomes: Sequence[FamilyOutcome],
    *,
    judge_label: str,
    cwd: Path,
    redact: Callable[[str], str] | None = None,
) -> None:
    """Each family's tree, gate and run directory, as the run ends; every line through
    *redact* (the run's redactor), as the subject's name may come from a command line."""
    if redact is not None:
        tr = _Redacted(tr, redact)
    _write_families(tr, outcomes, judge_label=judge_label, cwd=cwd)
    if len(outcomes) > 1:
        _write_unrecorded_line(tr, outcomes[0].unrecorded, families=len(outcomes))


def _write_families(
    tr: Terminal, outcomes: Sequence[FamilyOutcome], *, judge_label: str, cwd: Path
) -> None:
    for outcome in outcomes:
        plan, tree, gate = outcome.plan, outcome.tree, outcome.gate
        cond = f" · condition {outcome.bucket.condition}" if outcome.bucket.condition else ""
        tr.write_sep("=", f"agenteval: {plan.family.name} · preset {plan.preset}{cond}")
        tr.write_line(f"subject: {outcome.bucket.subject}    judge: {judge_label}")
        chosen, every = len(plan.controls), len(plan.family.articles)
        if chosen < every:  # an article added to the family runs only once a preset names it
            tr.write_line(
                f"preset {plan.preset}: {chosen} of the family's {every} controls; "
                f"the other {every - chosen} are not run (a preset that names them runs them; "
                "so does an article's file given as the path)"
            )
        if tree is None:
            tr.write_line("nothing was graded")
        else:
            rows = tree_lines(tree)
            width = min(max(len(r[0]) for r in rows) + 2, 100)
            spread = {id(r[3]): _spread(r[3]) for r in rows}
            shown = [score + _plus_minus(spread[id(node)]) for _, score, _, node in rows]
            score_width = max(6, *(len(x) for x in shown))
            for (label, _, verdict, node), score in zip(rows, shown, strict=True):
                tr.write(label.ljust(width) + score.rjust(score_width) + "  ")
                figure = spread[id(node)]
                if node.kind == "pillar" and figure is not None:
                    tr.write(verdict.ljust(7), **_MARKUP.get(node.verdict, {}))
                    tr.write_line(f"samples agree {figure['unanimous']}/{figure['scenarios']}")
                else:
                    tr.write_line(verdict, **_MARKUP.get(node.verdict, {}))
            _write_samples_line(tr, plan, spread[id(tree)])
            # the gate's own list: failed scenarios of declared critical severity
            if gate.critical_failures:
                tr.write_line(
                    f"critical findings: {named(gate.critical_failures)}",
                    red=True,
                )
            if gate.injection_suspected:
                tr.write_line(
                    "injection suspected (answers that try to steer their judge): "
                    + named(gate.injection_suspected),
                    red=True,
                )
        from ..evidence._run_dir import cost_totals

        cost = cost_totals(list(outcome.bucket.records.values()))["total"]
        if cost["prompt_tokens"] or cost["completion_tokens"]:
            usd = "unknown rate" if cost["usd"] is None else f"${cost['usd']:.4f}"
            tr.write_line(
                f"tokens: {cost['prompt_tokens']} in, {cost['completion_tokens']} out; cost {usd}"
            )
        if len(outcomes) == 1:  # else once, after every family: it is the whole run's
            _write_unrecorded_line(tr, outcome.unrecorded)
        _write_cache_line(tr, list(outcome.bucket.records.values()))
        _write_pr_check(tr, outcome.pr)
        for note in gate.notes:
            tr.write_line(f"note: {note}", yellow=True)
        if gate.passed:
            tr.write_line("gate: PASSED", green=True, bold=True)
        else:
            tr.write_line("gate: FAILED — " + "; ".join(gate.reasons), red=True, bold=True)
        if outcome.run_dir is not None:
            where = _shown(outcome.run_dir, cwd)
            tr.write_line(f"run directory: {where}")
            tr.write_line(f"evidence chain head: {outcome.head}")
            tr.write_line(f"  check it: agenteval verify {where} --expect-head {outcome.head}")


def _spread(node: EvalResult) -> ReliabilityDoc | None:
    """The reliability figure of a node's repeated samples (see :mod:`._stats`); None without."""
    from .._stats import reliability

    return reliability({"id": leaf.key, **leaf.meta} for leaf in _leaves(node))


def _plus_minus(figure: ReliabilityDoc | None) -> str:
    """`` ±0.08``: the mean sample standard deviation of the scenarios under a node."""
    if figure is None or figure["mean_std"] is None:
        return ""
    return f" ±{figure['mean_std']:.2f}"


def _write_samples_line(tr: Terminal, plan: Plan, figure: ReliabilityDoc | None) -> None:
    """What the ± means, and which scenarios' samples disagreed on the verdict."""
    if figure is None:
        return
    how = (
        "majority vote (score: share of samples passing; 95% Wilson interval)"
        if plan.samples_aggregation == "majority_vote"
        else "mean (95% t-interval)"
    )
    tr.write_line(
        f"samples: {plan.samples} per scenario, combined by {how}; ± is the mean sample "
        "standard deviation; intervals per scenario in summary.json and the reports"
    )
    n, agree = figure["scenarios"], figure["unanimous"]
    if agree == n:
        tr.write_line(f"samples agree on the verdict in all {n} scenarios asked more than once")
    else:
        tr.write_line(
            f"samples disagree on the verdict in {n - agree} of {n} scenarios: "
            + named(figure["disagreeing"]),
            yellow=True,
        )


def _write_pr_check(tr: Terminal, pr: dict[str, Any]) -> None:
    """The suites and the comparison with the baseline (worst first), when the run has them."""
    from .._compare import comparison_text

    suites = pr.get("suites") or {}
    if suites.get("items"):
        parts = []
        for s in suites["items"]:
            value = "not run" if s.get("value") is None else format_score(s["value"])
            if s.get("status") == "not graded":
                value = "not graded"
            floor = f" ≥ {format_score(s['suite_min'])}" if s.get("suite_min") is not None else ""
            parts.append(f"{s['name']} {value} ({s['metric']}, w {s['weight']:.2f}{floor})")
        bench = suites.get("bench")
        shown = "  -  " if bench is None else format_score(bench)
        tr.write_line(f"suites: bench {shown} = " + " · ".join(parts))
    if pr.get("comparison"):
        reg = pr.get("regression") or {}
        for i, line in enumerate(comparison_text(pr)):
            red = reg.get("failed_gate") and (i == 0 or line.lstrip().startswith("regression:"))
            tr.write_line(line, red=bool(red), bold=i == 0)
    elif pr.get("baseline_note"):
        tr.write_line(f"baseline: {pr['baseline_note']}", yellow=True)


def write_condition_comparison(tr: Terminal, outcomes: Sequence[FamilyOutcome]) -> None:
    """Per family with several conditions: one line of their scores, then a table per
    pillar (and overall) of each condition's score, mean and interval, and its paired
    difference to the first condition (see :func:`._conditions.compare_conditions`)."""
    by_family: dict[str, list[FamilyOutcome]] = {}
    for outcome in outcomes:
        if outcome.bucket.condition:
            by_family.setdefault(outcome.plan.family.name, []).append(outcome)
    for family, outcomes in by_family.items():
        if len(outcomes) < 2:
            continue
        parts = [
            f"{o.bucket.condition} {_score(o.tree) if o.tree else '  -  '} "
            f"{(o.tree.verdict if o.tree else 'error').upper()}"
            for o in outcomes
        ]
        tr.write_line(f"conditions ({family}): " + " · ".join(parts), bold=True)
        comparison = next(
            (o.conditions_comparison for o in outcomes if o.conditions_comparison), None
        )
        if comparison:
            for line in comparison_lines(comparison):
                tr.write_line(line)


def _signed(value: float | None) -> str:
    return "  -  " if value is None else f"{value:+.2f}"


def _interval(ci: object, signed: bool = False) -> str:
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or None in ci:
        return ""
    fmt = "{:+.2f}" if signed else "{:.2f}"
    return f" [{fmt.format(ci[0])}, {fmt.format(ci[1])}]"


def comparison_lines(comparison: dict[str, Any]) -> list[str]:
    """The comparison of conditions as text: a legend, then one row per pillar × condition."""
    ref = str(comparison.get("reference"))
    method = comparison.get("method") or {}
    level = f"{float(method.get('confidence', 0.95)):.0%}"
    header = ["pillar", "condition", "score", f"mean [{level} CI]", f"Δ vs {ref} [{level} CI]"]
    header += ["+/−/=", "p"]
    rows: list[list[str]] = []
    for group in comparison.get("groups") or ():
        for i, row in enumerate(group.get("conditions") or ()):
            mean = row.get("mean")
            cells = [
                str(group.get("pillar")) if i == 0 else "",
                str(row.get("condition")),
                "  -  " if row.get("score") is None else format_score(row["score"]),
                ("  -  " if mean is None else f"{mean:.2f}") + _interval(row.get("ci")),
            ]
            diff = row.get("difference")
            if diff is None:
                cells += ["(reference)", "", ""]
            elif not diff.get("paired_scenarios"):
                cells += ["no scenario graded under both", "", ""]
            else:
                p = diff.get("p_value")
                cells += [
                    _signed(diff.get("mean")) + _interval(diff.get("ci"), signed=True),
                    f"{diff['better']}/{diff['worse']}/{diff['ties']}",
                    "  -  " if p is None else f"{p:.3f}",
                ]
            rows.append(cells)
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]
    right = {2, 6}

    def fmt(cells: list[str]) -> str:
        return (
            "  "
            + "  ".join(
                c.rjust(w) if k in right else c.ljust(w)
                for k, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )

    lines = [
        f"  against {ref}, paired over the scenarios graded under both · mean: of the scenario "
        f"scores, {level} bootstrap interval",
        "  (scenarios and their samples resampled) · Δ: mean paired difference · +/−/=: "
        "scenarios better/worse/tied · p: exact two-sided sign test",
        fmt(header),
        *(fmt(r) for r in rows),
    ]
    overall: dict[str, Any] = next(iter(comparison.get("groups") or ()), {})
    differing = [
        d["better"] + d["worse"]
        for row in overall.get("conditions") or ()
        if (d := row.get("difference")) and d.get("paired_scenarios")
    ]
    if differing and min(differing) < SIGN_TEST_MIN_PAIRS:
        lines.append(
            f"  note: only {min(differing)} scenario(s) differ: the sign test cannot reach "
            f"p < 0.05 below {SIGN_TEST_MIN_PAIRS} (all one way gives p = "
            f"{2 / 2 ** max(min(differing), 1):.3f} at best); add scenarios or --samples"
        )
    return lines


#: Scenarios that must differ (all the same way) before a two-sided sign test can give p < 0.05.
SIGN_TEST_MIN_PAIRS = 6


def _fmt(value: float | None, digits: int = 2) -> str:
    """Cut, not rounded, as the HTML and Markdown reports show it (``format_score``)."""
    return "  -  " if value is None else format_score(value, digits)


def _with_ci(value: float | None, ci: Sequence[float | None] | None, digits: int) -> str:
    """``0.753 [0.47, 1.00]``: a point estimate and its 95 % interval, when there is one."""
    if value is None:
        return "n/a"
    text = format_score(value, digits)
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
        text += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return text


_CAL_GATE = {"pass": ("PASS", "green"), "insufficient": ("INSUFFICIENT DATA", "yellow")}


def write_calibration(tr: Terminal, outcomes: Sequence[CalibrationOutcome], *, cwd: Path) -> None:
    for outcome in outcomes:
        report = CalibrationReport.from_json(outcome.report)
        gate_all = report.gate
        on = " (lower bound of the 95% interval)" if gate_all.on == "lower" else ""
        tr.write_sep(
            "=",
            f"agenteval calibration: {outcome.family} · judge "
            f"{', '.join(report.judge)} · gate on {report.split}{on}",
        )
        header = (
            f"{'pillar':<26}{'n':>9}  {'accuracy':<19}{'kappa':<20}{'ceiling':>8}"
            f"{'brier':>7}{'ece':>7}{'auc':>6}{'errors':>7}  gate"
        )
        tr.write_line(header)
        rows = [*report.pillars.items(), ("overall", report.overall)]
        for name, m in rows:
            gate = m.gate
            status = gate.status or ("pass" if gate.passed else "fail")
            n = f"{m.n} of {m.n if m.entries is None else m.entries}"
            ceiling = m.inter_rater_fleiss_kappa
            line = (
                f"{name:<26}{n:>9}  "
                f"{_with_ci(m.accuracy, m.accuracy_ci, 2):<19}"
                f"{_with_ci(m.kappa, m.kappa_ci, 3):<20}"
                f"{_fmt(ceiling, 3) if ceiling is not None else '  -  ':>8}"
                f"{_fmt(m.brier, 3):>7}{_fmt(m.ece, 3):>7}{_fmt(m.auc):>6}"
                f"{m.evaluation_failures:>7}  "
            )
            tr.write(line)
            word, colour = _CAL_GATE.get(status, ("FAIL", "red"))
            tr.write_line(word, **{colour: True})
            for reason in gate.reasons:
                tr.write_line(f"    {reason}", **{colour: True})
            for note in gate.notes:
                tr.write_line(f"    note: {note}", yellow=True)
            other = m.calibration_split
            if other is not None and other.n:
                tr.write_line(
                    (
                        f"{'  (calibration split)':<26}{other.n:>9}  "
                        f"{_with_ci(other.accuracy, None, 2):<19}"
                        f"{_with_ci(other.kappa, None, 3)}"
                    ).rstrip()
                )
        th = report.overall.gate.threshold
        if th is not None:
            tr.write_line(
                f"thresholds: kappa ≥ {_fmt(th.kappa)}, accuracy ≥ {_fmt(th.accuracy)}, "
                f"evaluation failures ≤ {th.max_evaluation_failures}, "
                f"at least {th.min_n or 0} graded entries per pillar "
                f"(preset {report.preset_thresholds}; per-pillar overrides in benchmark.yaml)"
            )
        if any(m.inter_rater_fleiss_kappa is not None for _, m in rows):
            tr.write_line(
                "ceiling: Fleiss' kappa among the raters, where entries carry several labels; "
                "a judge above it is flagged"
            )
        if report.not_gradable:
            tr.write_line(
                f"note: {report.not_gradable} entries not gradable by this judge "
                "(no checkable criterion); use an LLM judge",
                yellow=True,
            )
        if report.disagreements:
            tr.write_line(
                f"disagreements: {len(report.disagreements)} (label against judge, "
                "with both rationales, in report.md / report.html)"
            )
        write_triage(tr, report)
        if report.stability is not None:
            st = report.stability
            tr.write_line(
                f"test-retest: {st.entries} entries × {st.repetitions}: identical verdicts "
                f"{st.identical_verdict_share:.0%}, mean score spread {_fmt(st.mean_score_spread, 3)}"
            )
        reasons = gate_all.reasons
        shown = "; ".join(reasons[:6]) + (" …" if len(reasons) > 6 else "")
        if gate_all.passed:
            tr.write_line("calibration gate: PASSED", green=True, bold=True)
        elif gate_all.status == "insufficient":
            tr.write_line(
                "calibration gate: NOT PASSED (insufficient data) — " + shown,
                yellow=True,
                bold=True,
            )
        else:
            tr.write_line("calibration gate: FAILED — " + shown, red=True, bold=True)
        if outcome.run_dir is not None:
            tr.write_line(f"run directory: {_shown(outcome.run_dir, cwd)}")
            tr.write_line(f"evidence chain head: {outcome.head}")


def write_triage(tr: Terminal, report: CalibrationReport) -> None:
    """Golden entries the family could not grade, and entries graded against the rubric
    because their prompt is not the one of the scenario they name."""
    skipped = report.skipped
    if skipped is not None and skipped.total:
        why = ", ".join(f"{reason}: {n}" for reason, n in skipped.by_reason.items())
        tr.write_line(
            f"warning: {skipped.total} golden "
            + ("entry" if skipped.total == 1 else "entries")
            + f" skipped, not graded ({why}); pytest -rs lists them",
            yellow=True,
        )
    mismatched = report.prompt_mismatch
    if mismatched:
        tr.write_line(
            f"warning: {mismatched} golden "
            + ("entry names" if mismatched == 1 else "entries name")
            + " a scenario whose prompt is not their input: graded against the article's "
            "substance rubric, not the scenario's criteria",
            yellow=True,
        )


def _cache_statuses(result: object) -> list[tuple[str, bool]]:
    """(cache_status, authenticated) of every judge grade in a record's result."""
    if not isinstance(result, dict):
        return []
    meta = result.get("meta") or {}
    out = []
    if isinstance(meta, dict) and meta.get("cache_status"):
        out.append((str(meta["cache_status"]), bool(meta.get("cache_authenticated"))))
    children = result.get("children")
    for child in children if isinstance(children, list) else ():
        out += _cache_statuses(child)
    return out


def _write_unrecorded_line(
    tr: Any, unrecorded: Mapping[str, Any] | None, *, families: int = 1
) -> None:
    """The run's paid calls in flight at its end, and the answered ones no record holds,
    which a provider may bill and no total holds; with several *families* (or conditions),
    once for all of them."""
    if not unrecorded:
        return
    parts = []
    calls = int(unrecorded.get("calls") or 0)
    if calls:
        unpriced = int(unrecorded.get("calls_unpriced") or 0)
        usd = float(unrecorded.get("usd_at_average") or 0.0)
        price = f"about ${usd:.4f} at their models' averages" if calls > unpriced else "not priced"
        if unpriced and calls > unpriced:
            price += f", {unpriced} not priced"
        parts.append(
            f"{calls} paid call{'s' if calls != 1 else ''} cut off in flight (cancelled, "
            f"abandoned, or stopped by the judge's deadline) ({price})"
        )
    answered = float(unrecorded.get("usd_answered") or 0.0)
    if answered:
        parts.append(
            f"${answered:.4f} of answered calls no record holds (their items stopped while "
            "being graded, or calls abandoned at the timeout that answered later)"
        )
    # a crashed worker's ledger said its paid calls in flight: they are in calls above
    workers = int(unrecorded.get("workers_crashed_without_ledger") or 0)
    if workers:
        known = int(unrecorded.get("calls_in_crashed_workers") or 0)
        how_many = (
            f"{known} by their last reports, paid or not" if known else "how many is not known"
        )
        parts.append(
            f"the calls in flight in {workers} crashed worker{'s' if workers != 1 else ''} "
            f"that kept no ledger ({how_many}; not priced)"
        )
    if not parts:  # crashed workers whose ledgers said no paid call was in flight
        return
    where = "the cost above" if families == 1 else f"any of the {families} costs above"
    tr.write_line(f"not in {where}, a provider may bill: " + "; ".join(parts), yellow=True)


def _write_cache_line(tr: Terminal, records: Sequence[Mapping[str, object]]) -> None:
    """How many grades the judge cache served, and how many entries it refused."""
    statuses = [s for r in records for s in _cache_statuses(r.get("result"))]
    if not statuses:
        return
    count = {k: sum(1 for s, _ in statuses if s == k) for k in ("hit", "miss", "rejected")}
    auth = "authenticated" if all(a for _, a in statuses) else "unauthenticated"
    tr.write_line(
        f"judge cache ({auth}): {count['hit']} of {len(statuses)} grades from the cache"
        + (f", {count['rejected']} entries rejected" if count["rejected"] else "")
    )
    if count["rejected"]:
        tr.write_line(
            f"warning: {count['rejected']} judge-cache entries failed verification or "
            "authentication and were graded again (cache_error in results.jsonl)",
            yellow=True,
        )


def _shown(path: Path, cwd: Path) -> str:
    """The run directory relative to where pytest was started, when it is below it."""
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def _leaves(node: EvalResult) -> list[EvalResult]:
    if node.kind == "scenario" or not node.children:
        return [node]
    return [leaf for child in node.children for leaf in _leaves(child)]


#: Characters of a failed scenario's answer shown in its failure report.
ANSWER_CHARS = 600


def _more_chars(cut: int, total: int) -> str:
    return f"… [{cut} more chars]"


def _severity_shown(item: ScenarioItem, result: EvalResult) -> str:
    """A failure's severity, saying so when its low score raised it above the declared one:
    the gate's count of critical failures reads only the declared severity."""
    declared = item.article.declared_severity(item.scenario)
    if result.severity in (None, declared):
        return str(result.severity)
    return f"{result.severity} (from the score; declared {declared}, which the gate counts)"


def failure_text(item: ScenarioItem) -> str:
    """The report of a failed scenario: score, verdict, criteria, the judge's words."""
    run = item.run
    result: EvalResult = run.result
    bands = item.article.bands
    score = "-" if result.score is None else format_score(result.score)
    lines = [
        f"{item.family.name} ▸ {item.article.meta.pillar} ▸ {item.article.control_id} ▸ {item.scenario.id}",
        f"verdict FAIL  score {score}  (pass ≥ {format_score(bands.pass_)}, "
        f"warn ≥ {format_score(bands.warn)})  severity {_severity_shown(item, result)}",
        f"judge: {result.meta.get('judge', '?')}",
    ]
    if injection_suspected(result):
        why = result.meta.get("injection_reasons")
        lines.append(
            "injection suspected: this answer tries to steer its judge"
            + (f" ({'; '.join(map(str, why))})" if isinstance(why, list) and why else "")
        )
    lines.append("criteria:")
    for c in result.criteria:
        mark = {True: "✓ met   ", False: "✗ missed", None: "· n/a   "}[c.met]
        lines.append(f"  {mark} {c.criterion}")
        if c.reasoning:
            lines.append(f"             {c.reasoning}")
    if result.reasoning:
        lines.append(f"summary: {result.reasoning}")
    # redacted before it is cut, so a key across the cut cannot leave its first half
    answer = item.config.stash[STATE].redactor.text(run.answer or "")
    shown = clip(answer, ANSWER_CHARS, _more_chars, within=False)
    lines.append("answer: " + shown.replace("\n", "\n        "))
    return terminal_safe(item.config.stash[STATE].redactor.text("\n".join(lines)))

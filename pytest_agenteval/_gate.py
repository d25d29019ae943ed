"""The gate: the rule that decides a run, separate from single scenario outcomes.

A run passes its gate when all of these hold:

* something was graded, and the root verdict is not ``error``;
* the root verdict is not ``fail`` (nor ``warn`` when the preset's gate says
  ``fail_on: warn``);
* the root score is at least ``gate.min_score`` when one is set;
* no more than ``gate.max_errors`` items errored (default 0: a judge or
  subject that failed makes the run red, because an unevaluated item is not
  evidence of anything);
* no more than ``gate.max_critical_failures`` scenarios of critical severity
  failed (default 0). The severity is the one declared — the scenario's, else
  its article's — not the one a low score implies. A scenario fails when its
  verdict is FAIL or, asked several times, when any of its samples failed:
  an agent that does a prohibited thing one time in three does it;
* no more than ``gate.max_injection_suspected`` items were flagged as
  trying to steer their judge (``meta["injection_suspected"]``; default 0: a
  steered grade is never a silent pass);
* with suites in ``benchmark.yaml``: the suite bench score (Σ w·metric over
  the suites that ran) is what ``min_score`` reads, every suite that ran is at
  least its ``suite_min``, and every ``required`` suite ran (see _suites.py);
* with a baseline: the largest *significant* score drop is at most
  ``regression_max`` (a one-sided sign test on verdict changes; see _compare.py);
  a drop that is not significant is a note, never a failure;
* the run was not interrupted.

A root ``warn`` under ``fail_on: fail`` passes but is named in the notes, so
it is visible without failing CI. A partial run (``-k``, ``-m``, ``--lf``,
``-x``) is gated on what ran, and a note says how much that was.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from ._compare import Regression, regression_sentence
from ._cost import stopped_by_budget
from ._evals import EvalResult, injection_suspected
from ._family import Plan
from ._suites import SuiteReport
from ._text import named
from ._vocab import format_score


@dataclass(frozen=True)
class GateOutcome:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Failed scenarios of declared critical severity, by id (every one, not capped).
    critical_failures: list[str] = field(default_factory=list)
    #: Items flagged as steering their judge, by id (``id[sN]`` for a sample).
    injection_suspected: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "critical_failures": list(self.critical_failures),
            "injection_suspected": list(self.injection_suspected),
        }


def shown_apart(score: float, threshold: float) -> tuple[str, str]:
    """*score* and *threshold* shown with the fewest decimals (2 to 6) that tell them apart.

    Both are cut, never rounded up (see :func:`~pytest_agenteval._vocab.format_score`),
    so a reason never reads "0.87 below the gate minimum 0.87".
    """
    for digits in range(2, 7):
        a, b = format_score(score, digits), format_score(threshold, digits)
        if a != b:
            break
    return a, b


def scenario_nodes(tree: EvalResult) -> Iterator[EvalResult]:
    """The scenario nodes of a family tree, in tree order."""
    if tree.kind == "scenario":
        yield tree
        return
    for child in tree.children:
        yield from scenario_nodes(child)


def item_label(scenario: EvalResult, item: EvalResult) -> str:
    """An item's id as pytest shows it: the scenario id, ``[sN]`` for a sample."""
    if item is scenario or item.kind != "sample":
        return scenario.key
    return f"{scenario.key}[{item.key.rpartition('#')[2]}]"


def critical_failures(plan: Plan, tree: EvalResult) -> list[str]:
    """Failed scenarios whose declared severity (scenario's, else article's) is critical."""
    declared = {
        s.id: art.declared_severity(s) for art in plan.family.articles for s in art.scenarios
    }
    found = []
    for node in scenario_nodes(tree):
        if declared.get(node.key) != "critical":
            continue
        if node.verdict == "fail":
            found.append(node.key)
            continue
        items = node.items()
        failed = sum(1 for i in items if i.verdict == "fail")
        if failed:
            found.append(f"{node.key} ({failed} of {len(items)} samples failed)")
    return found


def injection_items(tree: EvalResult) -> list[str]:
    """Items flagged as trying to steer their judge, each once."""
    return [
        item_label(node, item)
        for node in scenario_nodes(tree)
        for item in node.items()
        if injection_suspected(item)
    ]


def decide_gate(
    plan: Plan,
    tree: EvalResult | None,
    *,
    interrupted: bool = False,
    suites: SuiteReport | None = None,
    regression: Regression | None = None,
    baseline_label: str = "",
    collection_errors: int = 0,
) -> GateOutcome:
    """The gate's decision; *suites* and *regression* add the Layerup terms (see _suites, _compare).

    *collection_errors*: files pytest could not collect. A serial run stops on one;
    under pytest-xdist (or ``--continue-on-collection-errors``) the run goes on without
    that file's scenarios, so the gate fails: the benchmark was not loaded whole.
    """
    gate = plan.gate
    reasons: list[str] = []
    notes: list[str] = []
    if tree is None:
        return GateOutcome(False, ["nothing was graded"])
    counts = tree.counts()
    bands = plan.root_bands
    if tree.verdict == "skipped":
        reasons.append("nothing was graded (every item skipped)")
    elif tree.verdict == "error" or tree.score is None:
        reasons.append("no item could be graded (all errored)")
    else:
        if tree.verdict == "fail":
            score, warn = shown_apart(tree.score, bands.warn)
            reasons.append(
                f"root verdict FAIL ({tree.reasoning or f'score {score} < warn {warn}'})"
            )
        elif tree.verdict == "warn":
            score, pass_ = shown_apart(tree.score, bands.pass_)
            msg = f"root verdict WARN ({tree.reasoning or f'score {score} < pass {pass_}'})"
            if gate.fail_on == "warn":
                reasons.append(msg + "; the preset's gate fails on warn")
            else:
                notes.append(msg + "; not failing the gate (fail_on: fail)")
        by_suites = suites is not None and suites.defined
        # Layerup: with suites, bench = Σ w·metric over the suites, and min_score applies to it
        bench = suites.bench if suites is not None and by_suites else tree.score
        what = "suite bench score" if by_suites else "score"
        if bench is None:
            # no weighted suite was graded (none ran, or those that did weigh 0): the
            # floor still holds, on the tree's score, never on nothing
            bench, what = tree.score, "score (no weighted suite was graded)"
        if gate.min_score is not None and bench < gate.min_score:
            score, floor = shown_apart(bench, gate.min_score)
            reasons.append(f"{what} {score} below the gate minimum {floor}")
    if counts["error"] > gate.max_errors:
        stopped = sum(
            1 for i in tree.items() if i.verdict == "error" and stopped_by_budget(i.error)
        )
        by_budget = f", {stopped} of them stopped by --agenteval-max-cost" if stopped else ""
        reasons.append(
            f"{counts['error']} item(s) errored and were not evaluated{by_budget} "
            f"(the gate allows {gate.max_errors})"
        )
    critical = critical_failures(plan, tree)
    if len(critical) > gate.max_critical_failures:
        reasons.append(
            f"{len(critical)} critical scenario(s) failed: {named(critical)} "
            f"(the gate allows {gate.max_critical_failures})"
        )
    for node in _ungraded_required(tree):
        c = node.counts()
        reasons.append(
            f"required {node.kind} {node.key!r} has no grade ({c['error']} errored, "
            f"{c['skipped']} skipped): the verdict cannot rest on the others"
        )
    flagged = injection_items(tree)
    if len(flagged) > gate.max_injection_suspected:
        reasons.append(
            f"{len(flagged)} item(s) suspected of prompt injection (an answer that tries "
            f"to steer its judge): {named(flagged)} "
            f"(the gate allows {gate.max_injection_suspected})"
        )
    if suites is not None:
        _suite_terms(suites, reasons, notes)
    if regression is not None:
        sentence = regression_sentence(regression, baseline_label or "run")
        (reasons if regression.failing else notes).append(sentence)
    if interrupted:
        reasons.append("the run was interrupted before every item ran")
    if collection_errors:
        reasons.append(
            f"{collection_errors} file(s) could not be collected (the ERROR collecting "
            "lines above name them): the benchmark was not loaded whole"
        )
    ran = sum(counts.values())
    total = plan.item_count()
    if ran < total:
        notes.append(
            f"partial run: {ran} of {total} items in the preset ran (the others were "
            "deselected, e.g. by -k, -m or --lf); the gate judged only these, so a failure "
            "outside them is not seen — run the full preset before relying on it"
        )
    if counts["skipped"]:
        notes.append(
            f"{counts['skipped']} item(s) skipped, not graded (nothing the judge could grade, "
            "or no recorded answer to replay; pytest -rs gives each reason)"
        )
    return GateOutcome(not reasons, reasons, notes, critical, flagged)


def _ungraded_required(node: EvalResult) -> list[EvalResult]:
    """The ``required`` pillars and articles of *node* that ran but got no grade.

    A required component bounds its parent's verdict only when graded
    (:func:`~pytest_agenteval._evals.combine_results`); one whose items all errored
    (within ``max_errors``) or were skipped would otherwise leave the verdict to the
    rest. One deselected entirely (``-k``) is not in the tree: the partial-run note
    covers it.
    """
    found = []
    for child in node.children:
        if child.kind not in ("pillar", "article"):
            continue
        if child.required and not child.graded:
            found.append(child)
        else:
            found += _ungraded_required(child)
    return found


def _suite_terms(suites: SuiteReport, reasons: list[str], notes: list[str]) -> None:
    """∀ suite with a minimum: metric ≥ suite_min; a required suite must have run."""
    for suite in suites.suites:
        if suite.value is None:
            why = (
                "no scenario of it ran"
                if suite.status == "not run"
                else "none of its scenarios could be graded"
            )
            if suite.required:
                reasons.append(f"required suite {suite.name!r} did not run ({why})")
            else:
                notes.append(
                    f"suite {suite.name!r} not run ({why}): left out of the suite bench score, "
                    "the others' weights renormalised"
                )
        elif suite.below_min and suite.suite_min is not None:
            value, floor = shown_apart(suite.value, suite.suite_min)
            reasons.append(f"suite {suite.name!r} {suite.metric} {value} below its minimum {floor}")

"""The gate: the rule that decides a run, separate from single scenario outcomes.

A run passes its gate when all of these hold:

* something was graded, and the root verdict is not ``error``;
* the root verdict is not ``fail`` (nor ``warn`` when the preset's gate says
  ``fail_on: warn``);
* the root score is at least ``gate.min_score`` when one is set;
* no more than ``gate.max_errors`` items errored (default 0: a judge or
  subject that failed makes the run red, because an unevaluated item is not
  evidence of anything);
* the run was not interrupted.

A root ``warn`` under ``fail_on: fail`` passes but is named in the notes, so
it is visible without failing CI.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._evals import EvalResult
from ._family import Plan


@dataclass(frozen=True)
class GateOutcome:
    passed: bool
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "reasons": list(self.reasons), "notes": list(self.notes)}


def decide_gate(plan: Plan, tree: EvalResult | None, *, interrupted: bool = False) -> GateOutcome:
    gate = plan.gate
    reasons: list[str] = []
    notes: list[str] = []
    if tree is None:
        return GateOutcome(False, ["nothing was graded"])
    counts = tree.counts()
    bands = plan.root_bands
    if tree.verdict == "error" or tree.score is None:
        reasons.append("no item could be graded (all errored)")
    elif tree.verdict == "skipped":
        reasons.append("nothing was graded (every item skipped)")
    else:
        if tree.verdict == "fail":
            why = f"score {tree.score:.2f} < warn {bands.warn:.2f}"
            if tree.reasoning:
                why = tree.reasoning
            reasons.append(f"root verdict FAIL ({why})")
        elif tree.verdict == "warn":
            msg = f"root verdict WARN (score {tree.score:.2f} < pass {bands.pass_:.2f})"
            if gate.fail_on == "warn":
                reasons.append(msg + "; the preset's gate fails on warn")
            else:
                notes.append(msg + "; not failing the gate (fail_on: fail)")
        if gate.min_score is not None and tree.score < gate.min_score:
            reasons.append(f"score {tree.score:.2f} below the gate minimum {gate.min_score:.2f}")
    if counts["error"] > gate.max_errors:
        reasons.append(
            f"{counts['error']} item(s) errored and were not evaluated "
            f"(the gate allows {gate.max_errors})"
        )
    if interrupted:
        reasons.append("the run was interrupted before every item ran")
    graded = counts["pass"] + counts["warn"] + counts["fail"]
    total = plan.scenario_count() * plan.samples
    if graded + counts["error"] + counts["skipped"] < total:
        notes.append(
            f"partial run: {graded + counts['error'] + counts['skipped']} of {total} "
            "scenarios in the preset ran (deselected, -x or --lf)"
        )
    if counts["skipped"]:
        notes.append(f"{counts['skipped']} scenario(s) skipped (nothing the judge could grade)")
    return GateOutcome(not reasons, reasons, notes)

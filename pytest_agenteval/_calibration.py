"""The calibration report and gate: how far the judge agrees with the labels.

Pure functions over plain records (one per graded golden entry, as they
arrive on the controller). Metrics come from :mod:`pytest_agenteval._metrics`.

Holdout discipline: the gate is computed on the ``holdout`` split; the
``calibration`` split (the one a team tunes its judge prompt on) is reported
beside it. ``--calibration-split=all`` gates on every entry, for data that
has no split, and says so. Judge errors are *evaluation failures*, counted
apart from disagreements; the default gate allows none.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._metrics import fleiss_kappa, summarize

LABELS = ("pass", "warn", "fail")
UNDEFINED_KAPPA = "kappa undefined — review the golden dataset for class balance"


@dataclass(frozen=True)
class Thresholds:
    kappa: float = 0.61
    accuracy: float = 0.85
    max_evaluation_failures: int = 0


def default_thresholds(preset: str) -> Thresholds:
    """κ ≥ 0.61 and accuracy ≥ 0.85 by default; κ ≥ 0.81 on audit presets."""
    if preset.split("+")[0] == "audit":
        return Thresholds(kappa=0.81, accuracy=0.85)
    return Thresholds()


def _metrics(rows: Sequence[Mapping[str, Any]], split_label: str, seed: int) -> dict[str, Any]:
    graded = [r for r in rows if r["actual"] is not None]
    failures = [r for r in rows if r.get("verdict") == "error"]
    skipped = [r for r in rows if r["actual"] is None and r.get("verdict") != "error"]
    if graded:
        out = summarize(
            [r["expected"] for r in graded],
            [r["actual"] for r in graded],
            [r["score"] for r in graded],
            [r["min"] for r in graded],
            [r["max"] for r in graded],
            labels=LABELS,
            seed=seed,
        )
    else:
        out = {"n": 0, "accuracy": None, "kappa": None}
    out["split"] = split_label
    out["evaluation_failures"] = len(failures)
    out["not_gradable"] = len(skipped)
    raters = [r["labels"] for r in graded if len(r.get("labels") or ()) >= 2]
    if raters and len({len(x) for x in raters}) == 1:
        value = fleiss_kappa(raters, LABELS)
        out["inter_rater_fleiss_kappa"] = None if math.isnan(value) else value
        out["inter_rater_n"] = len(raters)
    return out


def _gate(metrics: Mapping[str, Any], th: Thresholds) -> dict[str, Any]:
    reasons = []
    kappa, acc = metrics.get("kappa"), metrics.get("accuracy")
    if metrics.get("n", 0) == 0:
        reasons.append("no graded entries in this split")
    elif kappa is None:
        reasons.append(UNDEFINED_KAPPA)
    elif kappa < th.kappa:
        reasons.append(f"kappa {kappa:.3f} < {th.kappa:.2f}")
    if acc is not None and acc < th.accuracy:
        reasons.append(f"accuracy {acc:.3f} < {th.accuracy:.2f}")
    if metrics.get("evaluation_failures", 0) > th.max_evaluation_failures:
        reasons.append(f"{metrics['evaluation_failures']} evaluation failure(s) (judge errors)")
    return {
        "threshold": {
            "kappa": th.kappa,
            "accuracy": th.accuracy,
            "max_evaluation_failures": th.max_evaluation_failures,
        },
        "passed": not reasons,
        "reasons": reasons,
    }


def stability(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Test-retest agreement over repetitions of the same entry."""
    by_entry: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_entry[r["id"]].append(r)
    repeated = {k: v for k, v in by_entry.items() if len(v) > 1}
    if not repeated:
        return None
    identical = 0
    spreads = []
    for runs in repeated.values():
        verdicts = [r["actual"] for r in runs]
        identical += len(set(verdicts)) == 1
        scores = [r["score"] for r in runs if r["score"] is not None]
        if len(scores) > 1:
            spreads.append(max(scores) - min(scores))
    return {
        "entries": len(repeated),
        "repetitions": max(len(v) for v in repeated.values()),
        "identical_verdict_share": identical / len(repeated),
        "mean_score_spread": sum(spreads) / len(spreads) if spreads else None,
        "max_score_spread": max(spreads) if spreads else None,
    }


def calibration_report(
    rows: Sequence[Mapping[str, Any]],
    *,
    split: str = "holdout",
    thresholds: Mapping[str, Thresholds] | None = None,
    default: Thresholds | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Per pillar and overall metrics on the gate split, the other split beside, and the gate.

    *rows*: ``{id, pillar, expected, actual (None on judge error), score, min,
    max, split, repetition, labels}``. Agreement metrics use repetition 0;
    further repetitions feed :func:`stability`.
    """
    thresholds = thresholds or {}
    default = default or Thresholds()
    # arrival order differs between serial and xdist runs; the bootstrap must not
    rows = sorted(
        rows,
        key=lambda r: (
            str(r.get("file", "")),
            r.get("line") or 0,
            str(r["id"]),
            r.get("repetition", 0),
        ),
    )
    first = [r for r in rows if r.get("repetition", 0) == 0]
    gate_rows = first if split == "all" else [r for r in first if r["split"] == "holdout"]
    other_rows = [] if split == "all" else [r for r in first if r["split"] != "holdout"]
    split_label = "all" if split == "all" else "holdout"

    pillars: dict[str, Any] = {}
    reasons: list[str] = []
    for pillar in sorted({r["pillar"] for r in first}):
        mine = [r for r in gate_rows if r["pillar"] == pillar]
        metrics = _metrics(mine, split_label, seed)
        th = thresholds.get(pillar, default)
        metrics["gate"] = _gate(metrics, th)
        if other_rows:
            metrics["calibration_split"] = _metrics(
                [r for r in other_rows if r["pillar"] == pillar], "calibration", seed
            )
        pillars[pillar] = metrics
        reasons += [f"{pillar}: {r}" for r in metrics["gate"]["reasons"]]
    overall = _metrics(gate_rows, split_label, seed)
    overall["gate"] = _gate(overall, default)
    if other_rows:
        overall["calibration_split"] = _metrics(other_rows, "calibration", seed)
    reasons += [f"overall: {r}" for r in overall["gate"]["reasons"]]
    report: dict[str, Any] = {
        "split": split_label,
        "overall": overall,
        "pillars": pillars,
        "gate": {"passed": not reasons, "reasons": reasons},
    }
    stable = stability(rows)
    if stable is not None:
        report["stability"] = stable
    return report

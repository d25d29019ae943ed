"""The calibration report and gate: how far the judge agrees with the labels.

Pure functions over plain records (one per graded golden entry, as they
arrive on the controller). Metrics come from :mod:`pytest_agenteval._metrics`.

Holdout discipline: the gate is computed on the ``holdout`` split; the
``calibration`` split (the one a team tunes its judge prompt on) is reported
beside it. ``--calibration-split=all`` gates on every entry, for data that
has no split, and says so. Judge errors are *evaluation failures*, counted
apart from disagreements; the default gate allows none.

A pillar's gate has three outcomes (``gate.status``): ``pass``, ``fail``, and
``insufficient`` — fewer than ``min_n`` graded entries (default 10), where
κ and accuracy say nothing either way. An insufficient pillar is not a pass
(``gate.passed`` is false) and not a failure of the judge; the run's gate does
not pass while any pillar is insufficient, and says so. With
``gate_on="lower"`` κ and accuracy are gated on the lower bound of their 95 %
bootstrap interval instead of the point estimate. Where entries carry several
raters' ``labels``, Fleiss' κ among the raters is the ceiling an honest judge
cannot beat: a judge κ above it passes with a visible note.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias, TypedDict

from ._metrics import ConfusionDoc, ReliabilityBinDoc, Summary, fleiss_kappa, summarize
from ._vocab import GRADED_VERDICTS, Bands, format_score, round_score

if TYPE_CHECKING:
    from ._golden import SkippedCounts

LABELS = GRADED_VERDICTS
UNDEFINED_KAPPA = "kappa undefined — review the golden dataset for class balance"
DEFAULT_MIN_N = 10
GATE_ON = ("point", "lower")


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


#: A calibration record as it arrives (a golden item's payload); read through :class:`_Row`.
Row: TypeAlias = Mapping[str, object]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


@dataclass(frozen=True)
class _Row:
    """What the metrics read of a calibration record, typed; ``raw`` is the record itself
    (what the report lists of an entry is copied from it as it is)."""

    raw: Row
    id: str
    pillar: str
    expected: str
    actual: str | None  # None: not graded (judge error, or not gradable)
    score: float | None
    min: float | None
    max: float | None
    repetition: int
    labels: list[str]

    @classmethod
    def of(cls, raw: Row) -> _Row:
        actual, labels, repetition = raw.get("actual"), raw.get("labels"), raw.get("repetition")
        return cls(
            raw=raw,
            id=str(raw.get("id")),
            pillar=str(raw.get("pillar")),
            expected=str(raw.get("expected")),
            actual=None if actual is None else str(actual),
            score=_number(raw.get("score")),
            min=_number(raw.get("min")),
            max=_number(raw.get("max")),
            repetition=repetition if isinstance(repetition, int) else 0,
            labels=[str(x) for x in labels] if isinstance(labels, list) else [],
        )

    @property
    def failed(self) -> bool:
        """An evaluation failure: the judge errored."""
        return self.raw.get("verdict") == "error"

    @property
    def holdout(self) -> bool:
        return self.raw.get("split") == "holdout"

    @property
    def agrees(self) -> bool:
        """The judge's verdict is the label's and its score lies in the band."""
        return (
            self.actual is not None
            and self.actual == self.expected
            and self.score is not None
            and self.min is not None
            and self.max is not None
            and self.min <= self.score <= self.max
        )


class GroupGateDoc(TypedDict):
    """One pillar's (or the whole run's) calibration gate."""

    threshold: dict[str, float | int | str]
    status: str  # pass | fail | insufficient
    passed: bool
    reasons: list[str]
    notes: list[str]


class GroupMetricsDoc(TypedDict, total=False):
    """The metrics of one pillar (or of all) on one split, and their gate.

    :func:`~pytest_agenteval._metrics.summarize`'s keys when an entry was
    graded, else only ``n``, ``accuracy``, ``kappa`` and the intervals; then
    the counts, the inter-rater ceiling (with several raters), the other split
    beside and the gate.
    """

    n: int
    accuracy: float | None
    kappa: float | None
    accuracy_ci: list[float | None] | None
    kappa_ci: list[float | None] | None
    confusion: ConfusionDoc
    per_class: dict[str, dict[str, float | int]]
    brier: float | None
    ece: float | None
    ece_bins: int
    auc: float | None
    mean_abs_score_delta: float | None
    share_within_band: float | None
    reliability: list[ReliabilityBinDoc]
    split: str
    entries: int  # graded + not gradable + evaluation failures
    evaluation_failures: int
    not_gradable: int
    labels_present: list[str]
    inter_rater_fleiss_kappa: float | None
    inter_rater_n: int
    calibration_split: GroupMetricsDoc
    gate: GroupGateDoc


class CalibrationGateDoc(TypedDict):
    passed: bool
    status: str
    reasons: list[str]
    notes: list[str]
    insufficient: list[str]
    min_n: int
    on: str


class StabilityDoc(TypedDict):
    entries: int
    repetitions: int
    identical_verdict_share: float
    mean_score_spread: float | None
    max_score_spread: float | None


class _Report(TypedDict):
    split: str
    overall: GroupMetricsDoc
    pillars: dict[str, GroupMetricsDoc]
    gate: CalibrationGateDoc
    disagreements: list[dict[str, object]]
    evaluation_failures: list[dict[str, object]]


class CalibrationReportDoc(_Report, total=False):
    """calibration.json: :func:`calibration_report`'s keys, then what the session adds."""

    stability: StabilityDoc
    family: str
    judge: list[str]
    preset_thresholds: str
    not_gradable: int
    skipped: SkippedCounts
    prompt_mismatch: int
    lineage: dict[str, object]


def _metrics(rows: Sequence[_Row], split_label: str, seed: int) -> GroupMetricsDoc:
    graded = [r for r in rows if r.actual is not None]
    failures = [r for r in rows if r.failed]
    skipped = [r for r in rows if r.actual is None and not r.failed]
    out: GroupMetricsDoc = {
        "n": 0,
        "accuracy": None,
        "kappa": None,
        "accuracy_ci": None,
        "kappa_ci": None,
    }
    if graded:
        out = _graded(
            summarize(
                [r.expected for r in graded],
                [r.actual for r in graded if r.actual is not None],
                [r.score for r in graded if r.score is not None],
                [r.min for r in graded if r.min is not None],
                [r.max for r in graded if r.max is not None],
                labels=LABELS,
                seed=seed,
            )
        )
    out["split"] = split_label
    out["entries"] = len(rows)  # graded + not gradable + evaluation failures
    out["evaluation_failures"] = len(failures)
    out["not_gradable"] = len(skipped)
    out["labels_present"] = sorted({r.expected for r in rows}, key=_label_order)
    raters = [r.labels for r in graded if len(r.labels) >= 2]
    if raters and len({len(x) for x in raters}) == 1:
        value = fleiss_kappa(raters, LABELS)
        out["inter_rater_fleiss_kappa"] = None if math.isnan(value) else value
        out["inter_rater_n"] = len(raters)
    return out


def _graded(s: Summary) -> GroupMetricsDoc:
    """:func:`summarize`'s keys, in its order (the intervals may be None in a group)."""
    return {
        "n": s["n"],
        "accuracy": s["accuracy"],
        "kappa": s["kappa"],
        "accuracy_ci": s["accuracy_ci"],
        "kappa_ci": s["kappa_ci"],
        "confusion": s["confusion"],
        "per_class": s["per_class"],
        "brier": s["brier"],
        "ece": s["ece"],
        "ece_bins": s["ece_bins"],
        "auc": s["auc"],
        "mean_abs_score_delta": s["mean_abs_score_delta"],
        "share_within_band": s["share_within_band"],
        "reliability": s["reliability"],
    }


def _label_order(label: str) -> int:
    return LABELS.index(label) if label in LABELS else len(LABELS)


def _ci_text(ci: object) -> str:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and None not in ci:
        return f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return ""


def _undefined_kappa_reason(metrics: GroupMetricsDoc) -> str:
    """Why κ is undefined: class balance only when the split's labels really are one class.

    κ is undefined on graded entries when both the labels and the judge used
    one identical class. That is a dataset problem only if every entry of the
    split carries that label; otherwise too few of the other labels were graded.
    """
    present = list(metrics.get("labels_present") or [])
    if len(present) <= 1:
        only = f" (every entry is labelled {present[0]})" if present else ""
        return UNDEFINED_KAPPA + only
    confusion = metrics.get("confusion")
    matrix = confusion["matrix"] if confusion else []
    used = [LABELS[i] for i, row in enumerate(matrix) if i < len(LABELS) and any(row)]
    one = used[0] if used else "?"
    return (
        f"kappa undefined: the {metrics.get('n', 0)} graded entries all carry the label {one} "
        f"and the judge agreed on each, though this split holds {', '.join(present)} entries; "
        "grade more of the other labels (an LLM judge grades what the rules judge cannot)"
    )


def _lower_bound(ci: list[float | None] | None) -> float | None:
    return ci[0] if ci else None


def _gate(
    metrics: GroupMetricsDoc,
    th: Thresholds,
    *,
    min_n: int = DEFAULT_MIN_N,
    gate_on: str = "point",
    failures: int | None = None,
) -> GroupGateDoc:
    """The gate of one group (a pillar, or the whole run) on its *metrics*.

    *failures*: the judge errors that count against it, when more than the metrics'
    own: those of every entry of the group, whatever its split or repetition (a judge
    that times out is no more reliable on calibration data). κ and accuracy are
    compared rounded to 6 decimals, as scores are: a κ of exactly 0.81 that floating
    point makes 0.8099999999999999 reaches a 0.81 threshold.
    """
    reasons: list[str] = []
    notes: list[str] = []
    insufficient = False
    n = int(metrics.get("n") or 0)
    entries = int(metrics.get("entries", n) or 0)
    other = metrics.get("calibration_split")
    others = int(other.get("entries") or 0) if other else 0
    if entries == 0 and others and metrics.get("split") == "holdout":
        # the entries are all calibration data; with none at all (a run stopped before
        # any was graded) the count below says so, and no option would help
        insufficient = True
        reasons.append(
            f"no holdout entries ({others} in the calibration split; an entry without "
            "`split` is calibration data): use --calibration-split=all to gate on every entry"
        )
    elif n < min_n:
        insufficient = True
        why = f"insufficient data (n={n} graded of {entries}; at least {min_n} needed)"
        if metrics.get("not_gradable"):
            why += f"; {metrics.get('not_gradable')} not gradable by this judge"
        reasons.append(why)
    else:
        kappa, acc = _rounded(metrics.get("kappa")), _rounded(metrics.get("accuracy"))
        kappa_ci, acc_ci = metrics.get("kappa_ci"), metrics.get("accuracy_ci")
        if kappa is None:
            reasons.append(_undefined_kappa_reason(metrics))
        elif gate_on == "lower":
            low = _rounded(_lower_bound(kappa_ci))
            if low is None:
                reasons.append(f"kappa {format_score(kappa, 3)}: no confidence interval to gate on")
            elif low < th.kappa:
                reasons.append(
                    f"kappa lower bound {low:.2f} < {th.kappa:.2f} (κ {format_score(kappa, 3)}{_ci_text(kappa_ci)})"
                )
        elif kappa < th.kappa:
            reasons.append(f"kappa {format_score(kappa, 3)}{_ci_text(kappa_ci)} < {th.kappa:.2f}")
        if acc is not None:
            if gate_on == "lower":
                low = _rounded(_lower_bound(acc_ci))
                if low is not None and low < th.accuracy:
                    reasons.append(
                        f"accuracy lower bound {low:.2f} < {th.accuracy:.2f} "
                        f"(accuracy {format_score(acc, 3)}{_ci_text(acc_ci)})"
                    )
            elif acc < th.accuracy:
                reasons.append(
                    f"accuracy {format_score(acc, 3)}{_ci_text(acc_ci)} < {th.accuracy:.2f}"
                )
        ceiling = metrics.get("inter_rater_fleiss_kappa")
        if kappa is not None and ceiling is not None and kappa > ceiling:
            notes.append(
                f"judge κ {format_score(kappa, 3)} exceeds the raters' agreement (Fleiss κ {format_score(ceiling, 3)}, "
                f"{metrics.get('inter_rater_n', 0)} entries with several raters): check for "
                "labels leaking into the judge prompt, or a prompt tuned on these entries"
            )
    if failures is None:
        failures = int(metrics.get("evaluation_failures") or 0)
    failed_judge = failures > th.max_evaluation_failures
    if failed_judge:
        reasons.append(f"{failures} evaluation failure(s) (judge errors)")
    judged_reasons = len(reasons) - (1 if insufficient else 0)
    status = (
        "pass" if not reasons else "insufficient" if insufficient and not judged_reasons else "fail"
    )
    return {
        "threshold": {
            "kappa": th.kappa,
            "accuracy": th.accuracy,
            "max_evaluation_failures": th.max_evaluation_failures,
            "min_n": min_n,
            "on": gate_on,
        },
        "status": status,
        "passed": status == "pass",
        "reasons": reasons,
        "notes": notes,
    }


def stability(rows: Sequence[Row]) -> StabilityDoc | None:
    """Test-retest agreement over repetitions of the same entry."""
    return _stability([_Row.of(r) for r in rows])


def _stability(rows: Sequence[_Row]) -> StabilityDoc | None:
    by_entry: dict[str, list[_Row]] = defaultdict(list)
    for r in rows:
        by_entry[r.id].append(r)
    repeated = {k: v for k, v in by_entry.items() if len(v) > 1}
    if not repeated:
        return None
    identical = 0
    spreads = []
    for runs in repeated.values():
        verdicts = [r.actual for r in runs]
        identical += len(set(verdicts)) == 1
        scores = [r.score for r in runs if r.score is not None]
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
    rows: Sequence[Row],
    *,
    split: str = "holdout",
    thresholds: Mapping[str, Thresholds] | None = None,
    default: Thresholds | None = None,
    seed: int = 0,
    min_n: int = DEFAULT_MIN_N,
    gate_on: str = "point",
) -> CalibrationReportDoc:
    """Per pillar and overall metrics on the gate split, the other split beside, and the gate.

    *rows*: ``{id, pillar, expected, actual (None on judge error), score, min,
    max, split, repetition, labels}``, optionally ``file``, ``line``,
    ``rationale``, ``reasoning``, ``error``. Agreement metrics use repetition 0;
    further repetitions feed :func:`stability`. *min_n*: graded entries a
    pillar (and the whole run) needs before its gate can pass; *gate_on*:
    ``point`` (the estimates) or ``lower`` (the lower bounds of their intervals).
    """
    if gate_on not in GATE_ON:
        raise ValueError(f"gate_on must be one of {GATE_ON}, got {gate_on!r}")
    thresholds = thresholds or {}
    default = default or Thresholds()
    # arrival order differs between serial and xdist runs; the bootstrap must not
    all_rows = [_Row.of(r) for r in sorted(rows, key=_row_key)]
    first = [r for r in all_rows if r.repetition == 0]
    gate_rows = first if split == "all" else [r for r in first if r.holdout]
    other_rows = [] if split == "all" else [r for r in first if not r.holdout]
    split_label = "all" if split == "all" else "holdout"

    pillars: dict[str, GroupMetricsDoc] = {}
    reasons: list[str] = []
    notes: list[str] = []
    insufficient: list[str] = []
    for pillar in sorted({r.pillar for r in all_rows}, key=str):
        mine = [r for r in gate_rows if r.pillar == pillar]
        metrics = _metrics(mine, split_label, seed)
        th = thresholds.get(pillar, default)
        if other_rows:
            metrics["calibration_split"] = _metrics(
                [r for r in other_rows if r.pillar == pillar], "calibration", seed
            )
        gate = metrics["gate"] = _gate(
            metrics,
            th,
            min_n=min_n,
            gate_on=gate_on,
            failures=sum(r.failed for r in all_rows if r.pillar == pillar),
        )
        pillars[pillar] = metrics
        reasons += [f"{pillar}: {r}" for r in gate["reasons"]]
        notes += [f"{pillar}: {n}" for n in gate["notes"]]
        if gate["status"] == "insufficient":
            insufficient.append(pillar)
    overall = _metrics(gate_rows, split_label, seed)
    if other_rows:
        overall["calibration_split"] = _metrics(other_rows, "calibration", seed)
    overall_gate = overall["gate"] = _gate(
        overall,
        default,
        min_n=min_n,
        gate_on=gate_on,
        failures=sum(r.failed for r in all_rows),
    )
    reasons += [f"overall: {r}" for r in overall_gate["reasons"]]
    notes += [f"overall: {n}" for n in overall_gate["notes"]]
    if overall_gate["status"] == "insufficient":
        insufficient.append("overall")
    if insufficient:
        # said first: the gate cannot pass on these numbers, whatever they are
        reasons.insert(
            0,
            f"insufficient data in {', '.join(insufficient)}: the calibration gate cannot pass "
            f"until every pillar has at least {min_n} graded entries (--calibration-min-n)",
        )
    gates = [p["gate"] for p in pillars.values() if "gate" in p] + [overall_gate]
    failed = any(g["status"] == "fail" for g in gates)
    report: CalibrationReportDoc = {
        "split": split_label,
        "overall": overall,
        "pillars": pillars,
        "gate": {
            "passed": not reasons,
            "status": "pass" if not reasons else "fail" if failed else "insufficient",
            "reasons": reasons,
            "notes": notes,
            "insufficient": insufficient,
            "min_n": min_n,
            "on": gate_on,
        },
        "disagreements": _disagreements(first),
        "evaluation_failures": [
            _entry_ref(r.raw) | {"repetition": r.repetition, "error": r.raw.get("error")}
            for r in all_rows
            if r.failed
        ],
    }
    stable = _stability(all_rows)
    if stable is not None:
        report["stability"] = stable
    return report


def _rounded(value: object) -> float | None:
    """*value* rounded as scores are (:func:`round_score`); None when it is no number."""
    return round_score(value) if isinstance(value, int | float) else None


def _row_key(r: Row) -> tuple[str, int, str, int]:
    line, repetition = r.get("line"), r.get("repetition", 0)
    return (
        str(r.get("file", "")),
        line if isinstance(line, int) else 0,
        str(r.get("id")),
        repetition if isinstance(repetition, int) else 0,
    )


def _entry_ref(r: Row) -> dict[str, object]:
    return {
        "id": r.get("id"),
        "pillar": r.get("pillar"),
        "article": r.get("article"),
        "file": r.get("file"),
        "line": r.get("line"),
        "split": r.get("split"),
    }


def agreed(r: Row) -> bool:
    """The item passed: the judge's verdict is the label's and its score lies in the band."""
    return _Row.of(r).agrees


def disagreements(rows: Sequence[Row]) -> list[dict[str, object]]:
    """Graded entries where the judge disagreed with the label (verdict or band), in file order."""
    return _disagreements([_Row.of(r) for r in rows])


def _disagreements(rows: Sequence[_Row]) -> list[dict[str, object]]:
    out = []
    for r in sorted(rows, key=lambda row: _row_key(row.raw)):
        if r.actual is None or r.agrees:
            continue
        raw = r.raw
        out.append(
            _entry_ref(raw)
            | {
                "adversarial": raw.get("adversarial"),
                "expected": raw.get("expected"),
                "band": [raw.get("min"), raw.get("max")],
                "actual": raw.get("actual"),
                "score": raw.get("score"),
                "verdict_differs": r.actual != r.expected,
                "rationale": raw.get("rationale") or "",
                "reasoning": raw.get("reasoning") or "",
            }
        )
    return out


def item_counts(rows: Sequence[Row]) -> dict[str, int]:
    """summary.json ``items`` of a calibration run, one per item (repetitions included).

    passed: the judge agreed with the label; failed: it disagreed; errors:
    evaluation failures; skipped: entries the judge could not grade.
    """
    counts = dict.fromkeys(("passed", "warned", "failed", "errors", "skipped"), 0)
    flagged = 0
    for raw in rows:
        r = _Row.of(raw)
        if r.failed:
            counts["errors"] += 1
        elif r.actual is None:
            counts["skipped"] += 1
        elif r.agrees:
            counts["passed"] += 1
        else:
            counts["failed"] += 1
        flagged += _judge_meta(raw).get("injection_suspected") is True
    return {**counts, "injection_suspected": flagged}


def _judge_meta(row: Row) -> Mapping[str, object]:
    meta = row.get("judge_meta")
    return meta if isinstance(meta, Mapping) else {}


def calibration_cost(
    rows: Sequence[Row], rates: Mapping[str, tuple[float, float]]
) -> dict[str, object]:
    """Judge tokens and dollars, in total and per pillar: summary.json's ``cost`` shape.

    ``usd`` is None once any grade's model has no known rate.
    """
    from ._cost import add
    from .judges._batch import grade_cost

    zero: dict[str, object] = {"usd": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
    total = dict(zero)
    pillars: dict[str, dict[str, object]] = {}
    for r in rows:
        cost = grade_cost(_judge_meta(r), r.get("judge"), rates)  # batch grades: batch price
        if not (cost.prompt_tokens or cost.completion_tokens):
            continue
        total = add(total, cost)
        pillar = str(r.get("pillar", "?"))
        pillars[pillar] = add(pillars.get(pillar, zero), cost)
    return {"total": total, "pillars": pillars}


def judge_lineage(rows: Sequence[Row], judges: Sequence[Mapping[str, object]]) -> JudgeLineage:
    """The judges as configured, the models that answered and the prompts they used."""
    returned: set[str] = set()
    prompts: set[tuple[str, str]] = set()
    for r in rows:
        meta = _judge_meta(r)
        if meta.get("model_returned"):
            returned.add(str(meta["model_returned"]))
        if meta.get("prompt_sha256"):
            prompts.add((str(meta.get("prompt_version") or ""), str(meta["prompt_sha256"])))
    return {
        "judges": [
            {
                "spec": j.get("spec"),
                "provider": j.get("provider"),
                "model_requested": j.get("model_requested"),
            }
            for j in judges
        ],
        "models_returned": sorted(returned),
        "prompts_used": [{"version": v or None, "sha256": h} for v, h in sorted(prompts)],
    }


class JudgeLineage(TypedDict):
    judges: list[dict[str, object]]
    models_returned: list[str]
    prompts_used: list[dict[str, str | None]]


class SummaryGate(TypedDict):
    passed: bool
    reasons: list[str]
    notes: list[str]
    critical_failures: list[str]
    injection_suspected: list[str]


class CalibrationBlock(TypedDict):
    """summary.json's ``calibration``: the gate's status and counts, for readers of summaries."""

    status: str
    split: object
    min_n: object
    gate_on: object
    insufficient: list[str]
    disagreements: int
    evaluation_failures: int


class CalibrationSummaryDoc(TypedDict):
    """summary.json of a calibration run (see :func:`calibration_summary`)."""

    schema: str
    run_id: str
    family: str
    family_version: str | None
    preset: str
    condition: None
    subject: str
    judge: list[str]
    score: None
    verdict: str
    bands: dict[str, float]
    gate: SummaryGate
    items: dict[str, int]
    nodes: list[object]
    cost: dict[str, object]
    chain_head: str
    started_at: str
    ended_at: str
    plugin_version: str
    calibration: CalibrationBlock


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


def _count(value: object) -> int:
    return len(value) if isinstance(value, list | tuple) else 0


def calibration_summary(
    report: Mapping[str, object],
    rows: Sequence[Row],
    *,
    run_id: str,
    family: str,
    family_version: str | None,
    preset: str,
    subject: str,
    judges: Sequence[str],
    bands: Mapping[str, float],
    cost: Mapping[str, object],
    chain_head: str,
    started_at: str,
    ended_at: str,
    plugin_version: str,
) -> CalibrationSummaryDoc:
    """summary.json of a calibration run: the benchmark run's keys, and ``calibration``.

    ``score`` is null and ``nodes`` empty (there is no tree); ``verdict`` is
    ``pass`` when the gate passed, ``warn`` when only data was insufficient,
    else ``fail``; ``items`` counts calibration items (see :func:`item_counts`).
    """
    gate = report["gate"]
    if not isinstance(gate, Mapping):
        raise TypeError("calibration_summary: the report's gate is not a mapping")
    passed = bool(gate["passed"])
    status = str(gate.get("status", "pass" if passed else "fail"))
    flagged = sorted(
        {str(r.get("id")) for r in rows if _judge_meta(r).get("injection_suspected") is True}
    )
    return {
        "schema": "pytest-agenteval/summary/1",
        "run_id": run_id,
        "family": family,
        "family_version": family_version,
        "preset": preset,
        "condition": None,
        "subject": subject,
        "judge": list(judges),
        "score": None,
        "verdict": {"pass": "pass", "insufficient": "warn"}.get(status, "fail"),
        "bands": dict(bands),
        "gate": {
            "passed": passed,
            "reasons": _strings(gate["reasons"]),
            "notes": _strings(gate.get("notes")),
            "critical_failures": [],
            "injection_suspected": flagged,
        },
        "items": item_counts(rows),
        "nodes": [],
        "cost": dict(cost),
        "chain_head": chain_head,
        "started_at": started_at,
        "ended_at": ended_at,
        "plugin_version": plugin_version,
        "calibration": {
            "status": status,
            "split": report.get("split"),
            "min_n": gate.get("min_n"),
            "gate_on": gate.get("on"),
            "insufficient": _strings(gate.get("insufficient")),
            "disagreements": _count(report.get("disagreements")),
            "evaluation_failures": _count(report.get("evaluation_failures")),
        },
    }


#: How close to a verdict threshold a band edge must lie for the entry to be borderline.
BORDERLINE_MARGIN = 0.1


def derived_stratum(
    expected: str, score_min: float, score_max: float, *, bands: Bands | None = None
) -> str:
    """The stratum an entry without one belongs to, from its verdict and score band.

    AgentEval's files carry no ``stratum``; their bands say it. A pass whose
    band starts less than 0.1 above the pass threshold (low edge < 0.80) is
    ``borderline-pass``, else ``clear-pass``; a fail whose band reaches
    within 0.1 of the warn threshold (high edge > 0.30) is
    ``borderline-fail``, else ``clear-fail``; a warn (a near miss of a pass)
    is ``borderline-fail``, as in the bundled data. The thresholds are
    *bands*, by default the default bands (pass ≥ 0.70, warn ≥ 0.40).
    """
    bands = bands or Bands()
    if expected == "pass":
        near = score_min < round(bands.pass_ + BORDERLINE_MARGIN, 9)
        return "borderline-pass" if near else "clear-pass"
    if expected == "warn":
        return "borderline-fail"
    near = score_max > round(bands.warn - BORDERLINE_MARGIN, 9)
    return "borderline-fail" if near else "clear-fail"

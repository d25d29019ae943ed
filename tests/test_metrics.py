"""Tests for pytest_agenteval._metrics, cross-checked against scikit-learn.

scikit-learn (and, optionally, statsmodels) are test-only dependencies; the
module under test uses numpy only.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from pytest_agenteval._metrics import (
    Summary,
    accuracy,
    bin_index,
    bootstrap_ci,
    brier,
    cohen_kappa,
    confusion_matrix,
    expected_calibration_error,
    fleiss_kappa,
    mean_abs_score_delta,
    per_class,
    reliability_bins,
    roc_auc,
    share_within_band,
    summarize,
)

sk_metrics = pytest.importorskip("sklearn.metrics")
sk_calibration = pytest.importorskip("sklearn.calibration")

LABELS = ("pass", "warn", "fail")
SEEDS = (0, 1, 2, 3, 4)
# "Inverted" judge: always says something other than the human.
OPPOSITE = {"pass": "fail", "warn": "pass", "fail": "pass"}


class Case:
    """One random golden set: human labels/bands and judge verdicts/scores."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        n = int(rng.integers(50, 201))
        expected = rng.choice(LABELS, size=n, p=[0.5, 0.2, 0.3])
        noise = rng.choice(LABELS, size=n)
        agree = rng.random(n) < 0.7
        actual = np.where(agree, expected, noise)
        is_pass = expected == "pass"
        scores = np.clip(0.55 * is_pass + 0.45 * rng.random(n) + rng.normal(0, 0.1, n), 0, 1)
        centre = np.select([expected == "pass", expected == "warn"], [0.85, 0.55], 0.2)
        width = rng.uniform(0.1, 0.3, n)
        self.n = n
        self.expected: list[str] = [str(x) for x in expected]
        self.actual: list[str] = [str(x) for x in actual]
        self.is_pass: list[bool] = [bool(x) for x in is_pass]
        self.scores: list[float] = [float(x) for x in scores]
        self.band_mins: list[float] = [float(x) for x in np.clip(centre - width / 2, 0, 1)]
        self.band_maxs: list[float] = [float(x) for x in np.clip(centre + width / 2, 0, 1)]


@pytest.fixture(params=SEEDS, ids=[f"seed{s}" for s in SEEDS])
def case(request: pytest.FixtureRequest) -> Case:
    return Case(request.param)


def isnan(x: float) -> bool:
    return isinstance(x, float) and math.isnan(x)


def sk_kappa(expected: Sequence[str], actual: Sequence[str]) -> float:
    """sklearn's kappa, silencing its UndefinedMetricWarning on degenerate input."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(sk_metrics.cohen_kappa_score(expected, actual))


def sk_auc(scores: Sequence[float], positives: Sequence[bool]) -> float:
    """sklearn's AUC; one-class input gives NaN+warning (>=1.6) or raises (older)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return float(sk_metrics.roc_auc_score(positives, scores))
        except ValueError:
            return float("nan")


# --------------------------------------------------------------------------- accuracy


def test_accuracy_matches_sklearn(case: Case) -> None:
    assert accuracy(case.expected, case.actual) == pytest.approx(
        sk_metrics.accuracy_score(case.expected, case.actual), abs=1e-15
    )


def test_accuracy_hand_computed() -> None:
    # matches at positions 0 and 2 only -> 2 / 4 = 0.5
    assert accuracy(["pass", "warn", "fail", "pass"], ["pass", "fail", "fail", "warn"]) == 0.5


def test_accuracy_edge_cases() -> None:
    assert isnan(accuracy([], []))
    assert accuracy(["pass"] * 5, ["pass"] * 5) == 1.0
    assert accuracy(list(LABELS), [OPPOSITE[x] for x in LABELS]) == 0.0
    with pytest.raises(ValueError, match="same length"):
        accuracy(["pass"], [])


# --------------------------------------------------------------------------- kappa


def test_cohen_kappa_matches_sklearn(case: Case) -> None:
    ours = cohen_kappa(case.expected, case.actual)
    assert ours == pytest.approx(sk_kappa(case.expected, case.actual), abs=1e-12)
    # unused labels do not change kappa; order does not matter
    assert cohen_kappa(case.expected, case.actual, labels=[*LABELS[::-1], "skip"]) == (
        pytest.approx(ours, abs=1e-12)
    )


def test_cohen_kappa_inverted_matches_sklearn(case: Case) -> None:
    inverted = [OPPOSITE[x] for x in case.expected]
    ours = cohen_kappa(case.expected, inverted)
    assert ours < 0
    assert ours == pytest.approx(sk_kappa(case.expected, inverted), abs=1e-12)


def test_cohen_kappa_hand_computed() -> None:
    # Confusion [[20, 5], [10, 15]] (rows human, cols judge), N = 50:
    # p_o = (20 + 15) / 50 = 0.7
    # rows (25, 25), cols (30, 20): p_e = (25*30 + 25*20) / 50^2 = 1250 / 2500 = 0.5
    # kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4
    expected = ["pass"] * 25 + ["fail"] * 25
    actual = ["pass"] * 20 + ["fail"] * 5 + ["pass"] * 10 + ["fail"] * 15
    assert cohen_kappa(expected, actual) == pytest.approx(0.4, abs=1e-12)
    assert sk_kappa(expected, actual) == pytest.approx(0.4, abs=1e-12)


def test_cohen_kappa_edge_cases() -> None:
    assert isnan(cohen_kappa([], []))
    assert isnan(cohen_kappa([], [], labels=LABELS))
    # single identical class on both sides: p_e == 1 -> undefined (sklearn: NaN + warning)
    assert isnan(cohen_kappa(["warn"] * 7, ["warn"] * 7))
    assert isnan(cohen_kappa(["warn"] * 7, ["warn"] * 7, labels=LABELS))
    assert isnan(sk_kappa(["warn"] * 7, ["warn"] * 7))
    # human single class, judge varied: p_e = 1*(3/5) = 0.6 != 1, kappa defined
    e, a = ["pass"] * 5, ["pass", "pass", "pass", "fail", "warn"]
    assert cohen_kappa(e, a) == pytest.approx(sk_kappa(e, a), abs=1e-12)
    # perfect agreement
    assert cohen_kappa(list(LABELS) * 4, list(LABELS) * 4) == pytest.approx(1.0)
    # balanced binary, always opposite: p_o = 0, p_e = 0.5 -> kappa = -1
    assert cohen_kappa(["pass", "fail"] * 5, ["fail", "pass"] * 5) == pytest.approx(-1.0)


def test_cohen_kappa_unknown_label_raises() -> None:
    # Deviation from sklearn, which silently drops samples outside `labels`.
    with pytest.raises(ValueError, match="'maybe'"):
        cohen_kappa(["pass", "maybe"], ["pass", "fail"], labels=LABELS)


# --------------------------------------------------------------------------- confusion


def test_confusion_matrix_matches_sklearn(case: Case) -> None:
    ours = confusion_matrix(case.expected, case.actual, LABELS)
    ref = sk_metrics.confusion_matrix(case.expected, case.actual, labels=list(LABELS))
    assert ours == ref.tolist()
    assert all(type(c) is int for row in ours for c in row)


def test_confusion_matrix_hand_computed() -> None:
    expected = ["pass", "pass", "warn", "fail", "fail", "fail"]
    actual = ["pass", "warn", "warn", "pass", "fail", "fail"]
    # rows = human, cols = judge, order pass/warn/fail
    assert confusion_matrix(expected, actual, LABELS) == [
        [1, 1, 0],  # human pass: judged pass once, warn once
        [0, 1, 0],  # human warn: judged warn
        [1, 0, 2],  # human fail: judged pass once, fail twice
    ]


def test_confusion_matrix_edge_cases() -> None:
    assert confusion_matrix([], [], LABELS) == [[0, 0, 0]] * 3
    assert confusion_matrix(["warn"] * 3, ["warn"] * 3, LABELS) == [[0, 0, 0], [0, 3, 0], [0, 0, 0]]
    inverted = confusion_matrix(list(LABELS), [OPPOSITE[x] for x in LABELS], LABELS)
    assert [inverted[i][i] for i in range(3)] == [0, 0, 0]
    with pytest.raises(ValueError, match="'maybe'"):
        confusion_matrix(["pass"], ["maybe"], LABELS)
    with pytest.raises(ValueError, match="duplicate"):
        confusion_matrix(["pass"], ["pass"], ["pass", "pass"])


# --------------------------------------------------------------------------- per class


def _check_per_class_against_sklearn(expected: list[str], actual: list[str]) -> None:
    ours = per_class(expected, actual, LABELS)
    p, r, f, s = sk_metrics.precision_recall_fscore_support(
        expected, actual, labels=list(LABELS), zero_division=0, average=None
    )
    assert list(ours) == list(LABELS)
    for k, label in enumerate(LABELS):
        assert ours[label]["precision"] == pytest.approx(p[k], abs=1e-12)
        assert ours[label]["recall"] == pytest.approx(r[k], abs=1e-12)
        assert ours[label]["f1"] == pytest.approx(f[k], abs=1e-12)
        assert ours[label]["support"] == int(s[k])
        assert type(ours[label]["support"]) is int


def test_per_class_matches_sklearn(case: Case) -> None:
    _check_per_class_against_sklearn(case.expected, case.actual)
    _check_per_class_against_sklearn(case.expected, [OPPOSITE[x] for x in case.expected])


def test_per_class_edge_cases_match_sklearn() -> None:
    # single class, perfect, and a label never used by either side (zero division)
    _check_per_class_against_sklearn(["pass"] * 4, ["pass"] * 4)
    _check_per_class_against_sklearn(["pass"] * 4, ["fail"] * 4)
    _check_per_class_against_sklearn(list(LABELS) * 3, list(LABELS) * 3)
    empty = per_class([], [], LABELS)
    assert empty["warn"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


def test_per_class_hand_computed() -> None:
    expected = ["pass", "pass", "pass", "fail"]
    actual = ["pass", "pass", "fail", "pass"]
    result = per_class(expected, actual, LABELS)
    # pass: tp=2, fp=1, fn=1 -> P = 2/3, R = 2/3, F1 = 4/(4+1+1) = 2/3, support 3
    assert result["pass"]["precision"] == pytest.approx(2 / 3)
    assert result["pass"]["recall"] == pytest.approx(2 / 3)
    assert result["pass"]["f1"] == pytest.approx(2 / 3)
    assert result["pass"]["support"] == 3
    # fail: tp=0, fp=1, fn=1 -> P = R = F1 = 0, support 1
    assert result["fail"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    # warn: never seen -> all zero-division -> 0.0
    assert result["warn"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}


# --------------------------------------------------------------------------- brier / bands


def test_brier_matches_sklearn(case: Case) -> None:
    mids = [(lo + hi) / 2 for lo, hi in zip(case.band_mins, case.band_maxs, strict=True)]
    assert brier(case.scores, mids) == pytest.approx(
        sk_metrics.mean_squared_error(mids, case.scores), abs=1e-12
    )
    # with 0/1 targets it is the classic Brier score
    targets = [float(p) for p in case.is_pass]
    assert brier(case.scores, targets) == pytest.approx(
        sk_metrics.brier_score_loss(case.is_pass, case.scores), abs=1e-12
    )


def test_brier_hand_computed_and_edges() -> None:
    # ((0.9 - 1.0)^2 + (0.2 - 0.5)^2) / 2 = (0.01 + 0.09) / 2 = 0.05
    assert brier([0.9, 0.2], [1.0, 0.5]) == pytest.approx(0.05)
    assert isnan(brier([], []))
    assert brier([0.3, 0.7], [0.3, 0.7]) == 0.0
    assert brier([1.0, 0.0], [0.0, 1.0]) == 1.0  # inverted
    with pytest.raises(ValueError, match="non-finite"):
        brier([float("nan")], [0.5])
    with pytest.raises(ValueError, match="same length"):
        brier([0.1, 0.2], [0.5])


def test_mean_abs_score_delta_matches_sklearn(case: Case) -> None:
    mids = [(lo + hi) / 2 for lo, hi in zip(case.band_mins, case.band_maxs, strict=True)]
    assert mean_abs_score_delta(case.scores, case.band_mins, case.band_maxs) == pytest.approx(
        sk_metrics.mean_absolute_error(mids, case.scores), abs=1e-12
    )


def test_share_within_band_matches_reference(case: Case) -> None:
    # no sklearn counterpart: compare with a plain-Python count
    inside = sum(
        lo <= s <= hi for s, lo, hi in zip(case.scores, case.band_mins, case.band_maxs, strict=True)
    )
    assert share_within_band(case.scores, case.band_mins, case.band_maxs) == pytest.approx(
        inside / case.n, abs=1e-15
    )


def test_band_metrics_hand_computed_and_edges() -> None:
    scores, mins, maxs = [0.5, 0.9, 0.2], [0.4, 0.5, 0.2], [0.6, 0.7, 0.3]
    # midpoints 0.5, 0.6, 0.25 -> |deltas| 0.0, 0.3, 0.05 -> mean 0.35 / 3
    assert mean_abs_score_delta(scores, mins, maxs) == pytest.approx(0.35 / 3)
    # 0.5 in [0.4, 0.6] yes; 0.9 in [0.5, 0.7] no; 0.2 in [0.2, 0.3] yes (inclusive) -> 2/3
    assert share_within_band(scores, mins, maxs) == pytest.approx(2 / 3)
    assert isnan(mean_abs_score_delta([], [], []))
    assert isnan(share_within_band([], [], []))
    assert share_within_band([0.5], [0.5], [0.5]) == 1.0
    with pytest.raises(ValueError, match="same length"):
        share_within_band([0.5], [0.4, 0.1], [0.6])


# --------------------------------------------------------------------------- calibration


def test_reliability_and_ece_match_sklearn(case: Case) -> None:
    n_bins = 10
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # sklearn bins are (lo, hi] and ours [lo, hi); they agree off the interior edges
    assert not np.isin(case.scores, edges[1:-1]).any()
    bins = reliability_bins(case.scores, case.is_pass, n_bins)
    prob_true, prob_pred = sk_calibration.calibration_curve(
        case.is_pass, case.scores, n_bins=n_bins, strategy="uniform"
    )
    non_empty = [b for b in bins if b["n"]]
    assert [b["frac_pass"] for b in non_empty] == pytest.approx(prob_true.tolist(), abs=1e-12)
    assert [b["mean_score"] for b in non_empty] == pytest.approx(prob_pred.tolist(), abs=1e-12)
    assert all(b["mean_score"] is None and b["frac_pass"] is None for b in bins if not b["n"])
    # np.histogram uses the same [lo, hi) / last-closed convention as ours
    counts, _ = np.histogram(case.scores, bins=edges)
    assert [b["n"] for b in bins] == counts.tolist()
    assert [b["lo"] for b in bins] == pytest.approx(edges[:-1].tolist())
    assert [b["hi"] for b in bins] == pytest.approx(edges[1:].tolist())
    ref_ece = float(np.sum(counts[counts > 0] / case.n * np.abs(prob_pred - prob_true)))
    assert expected_calibration_error(case.scores, case.is_pass, n_bins) == pytest.approx(
        ref_ece, abs=1e-12
    )


def test_reliability_bin_edges_convention() -> None:
    # 0.0 -> first bin, 1.0 -> last bin (closed) in both conventions;
    # 0.5 sits on an interior edge: ours puts it in [0.5, 0.75), sklearn in (0.25, 0.5].
    scores, outcomes = [0.0, 0.5, 1.0], [False, True, True]
    bins = reliability_bins(scores, outcomes, n_bins=4)
    assert [b["n"] for b in bins] == [1, 0, 1, 1]
    assert bins[2]["mean_score"] == 0.5
    _, prob_pred = sk_calibration.calibration_curve(outcomes, scores, n_bins=4)
    assert prob_pred.tolist() == [0.0, 0.5, 1.0]  # same means, sklearn's 0.5 is in bin 1


def test_ece_hand_computed() -> None:
    # n_bins = 2: bin [0, 0.5) holds 0.2, 0.4 (mean 0.3, pass 1/2) -> 2/5 * |0.3 - 0.5| = 0.08
    #             bin [0.5, 1] holds 0.6, 0.8, 1.0 (mean 0.8, pass 2/3) -> 3/5 * 2/15 = 0.08
    # ECE = 0.16
    scores = [0.2, 0.4, 0.6, 0.8, 1.0]
    outcomes = [False, True, True, True, False]
    assert expected_calibration_error(scores, outcomes, n_bins=2) == pytest.approx(0.16)
    bins = reliability_bins(scores, outcomes, n_bins=2)
    assert bins[0] == {
        "lo": 0.0,
        "hi": 0.5,
        "n": 2,
        "mean_score": pytest.approx(0.3),
        "frac_pass": 0.5,
    }
    assert bins[1]["frac_pass"] == pytest.approx(2 / 3)


def test_ece_edge_cases() -> None:
    assert isnan(expected_calibration_error([], []))
    empty_bins = reliability_bins([], [], n_bins=5)
    assert len(empty_bins) == 5 and all(b["n"] == 0 for b in empty_bins)
    # perfect: confident and right
    assert expected_calibration_error([1.0, 0.0, 1.0], [True, False, True]) == 0.0
    # inverted: confident and wrong
    assert expected_calibration_error([0.0, 1.0], [True, False]) == 1.0
    # single class
    assert expected_calibration_error([0.95, 0.95], [True, True]) == pytest.approx(0.05)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        expected_calibration_error([1.2], [True])
    with pytest.raises(ValueError, match="n_bins"):
        reliability_bins([0.5], [True], n_bins=0)


# Every bin edge of the documented convention (10 bins, bin i = [i/10, (i+1)/10),
# the last bin closed), written by hand: the score as a decimal literal -> its bin.
EDGE_BINS = {
    0.0: 0,
    0.1: 1,
    0.2: 2,
    0.3: 3,
    0.4: 4,
    0.5: 5,
    0.6: 6,
    0.7: 7,
    0.8: 8,
    0.9: 9,
    1.0: 9,
}


@pytest.mark.parametrize(("score", "expected_bin"), sorted(EDGE_BINS.items()))
def test_every_bin_edge_lands_in_the_bin_it_opens(score: float, expected_bin: int) -> None:
    assert bin_index(score) == expected_bin
    bins = reliability_bins([score], [True])
    assert [b["n"] for b in bins].index(1) == expected_bin
    assert bins[expected_bin]["lo"] == min(score, 0.9)  # 0.3, not 0.30000000000000004


def test_edges_reached_by_arithmetic_count_as_the_edge() -> None:
    # 0.1 + 0.2 and 1 - 0.7 are 0.30000000000000004; 0.7 - 1e-12 is a hair below 0.7
    assert bin_index(0.1 + 0.2) == 3 and bin_index(1 - 0.7) == 3
    assert bin_index(0.7 - 1e-12) == 7
    assert bin_index(0.7 - 1e-6) == 6  # a real difference is not rounded away
    assert bin_index(0.0999999) == 0 and bin_index(0.95) == 9


def test_ece_of_the_issue_example() -> None:
    # 0.7 and 0.75 share bin [0.7, 0.8): mean score 0.725, pass share 0.5 -> ECE 0.225
    # (floating-point edges put 0.7 in [0.6, 0.7) and gave 0.525)
    assert expected_calibration_error([0.7, 0.75], [True, False]) == pytest.approx(0.225)
    bins = reliability_bins([0.7, 0.75], [True, False])
    assert bins[7]["n"] == 2 and bins[6]["n"] == 0


def _exact_ece(scores: Sequence[str], outcomes: Sequence[bool]) -> Fraction:
    """ECE in exact decimal arithmetic: the independent reference for the bins."""
    groups: dict[int, list[tuple[Fraction, bool]]] = {}
    for text, outcome in zip(scores, outcomes, strict=True):
        value = Fraction(text)
        index = min(math.floor(value * 10), 9)
        groups.setdefault(index, []).append((value, outcome))
    total = Fraction(0)
    for members in groups.values():
        mean = sum((v for v, _ in members), Fraction(0)) / len(members)
        share = Fraction(sum(o for _, o in members), len(members))
        total += len(members) * abs(mean - share)
    return total / len(scores)


def test_bins_and_ece_match_exact_decimal_arithmetic() -> None:
    # every two-decimal score 0.00 ... 1.00 (11 of them on edges), outcomes varied
    texts = [f"{k / 100:.2f}" for k in range(101)]
    outcomes = [(k * 7) % 3 == 0 for k in range(101)]
    for text in texts:
        assert bin_index(float(text)) == min(math.floor(Fraction(text) * 10), 9), text
    ece = expected_calibration_error([float(t) for t in texts], outcomes)
    assert ece == pytest.approx(float(_exact_ece(texts, outcomes)), abs=1e-12)
    # judge-like scores, many on edges
    judge = ["0.7", "0.6", "0.3", "0.7", "0.9", "1.0", "0.0", "0.35", "0.6", "0.8"]
    said = [True, False, False, True, True, True, False, False, True, True]
    assert expected_calibration_error([float(t) for t in judge], said) == pytest.approx(
        float(_exact_ece(judge, said)), abs=1e-12
    )


# --------------------------------------------------------------------------- AUC


def test_roc_auc_matches_sklearn(case: Case) -> None:
    assert roc_auc(case.scores, case.is_pass) == pytest.approx(
        sk_auc(case.scores, case.is_pass), abs=1e-12
    )
    # heavy ties: round to one decimal
    tied = [round(s, 1) for s in case.scores]
    assert roc_auc(tied, case.is_pass) == pytest.approx(sk_auc(tied, case.is_pass), abs=1e-12)
    # inverted scores
    flipped = [1.0 - s for s in case.scores]
    assert roc_auc(flipped, case.is_pass) == pytest.approx(
        1.0 - roc_auc(case.scores, case.is_pass), abs=1e-12
    )


def test_roc_auc_hand_computed() -> None:
    # positives 0.35, 0.8; negatives 0.1, 0.4
    # pairs: 0.35>0.1 win, 0.35<0.4 loss, 0.8>0.1 win, 0.8>0.4 win -> 3/4
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    # ties count 1/2: positive 0.5 vs negatives 0.5 (tie), 0.2 (win) -> 1.5 / 2
    assert roc_auc([0.5, 0.5, 0.2], [True, False, False]) == 0.75
    assert sk_auc([0.5, 0.5, 0.2], [True, False, False]) == 0.75


def test_roc_auc_edge_cases() -> None:
    assert isnan(roc_auc([], []))
    assert isnan(roc_auc([0.1, 0.9], [True, True]))
    assert isnan(sk_auc([0.1, 0.9], [True, True]))
    assert isnan(roc_auc([0.1, 0.9], [False, False]))
    assert roc_auc([0.9, 0.8, 0.1], [True, True, False]) == 1.0  # perfect
    assert roc_auc([0.1, 0.2, 0.9], [True, True, False]) == 0.0  # inverted
    assert roc_auc([0.5] * 4, [True, False, True, False]) == 0.5  # all tied


# --------------------------------------------------------------------------- bootstrap


def test_bootstrap_deterministic_and_contains_estimate(case: Case) -> None:
    kappa_lbl = lambda e, a: cohen_kappa(e, a, labels=LABELS)  # noqa: E731
    for stat in (accuracy, kappa_lbl):
        first = bootstrap_ci(case.expected, case.actual, stat, n_resamples=200, seed=7)
        assert bootstrap_ci(case.expected, case.actual, stat, n_resamples=200, seed=7) == first
        lo, hi = first
        assert lo < stat(case.expected, case.actual) < hi
    other = bootstrap_ci(case.expected, case.actual, accuracy, n_resamples=200, seed=8)
    assert other != bootstrap_ci(case.expected, case.actual, accuracy, n_resamples=200, seed=7)


def test_bootstrap_matches_manual_percentiles() -> None:
    expected = ["pass", "fail", "pass", "warn", "pass"]
    actual = ["pass", "pass", "pass", "warn", "fail"]
    rng = np.random.default_rng(3)
    idx = rng.integers(0, 5, size=(200, 5))
    values = [accuracy([expected[i] for i in r], [actual[i] for i in r]) for r in idx]
    lo, hi = np.quantile(values, [0.05, 0.95])
    got = bootstrap_ci(expected, actual, accuracy, n_resamples=200, confidence=0.9, seed=3)
    assert got == pytest.approx((float(lo), float(hi)))


def test_bootstrap_nan_handling() -> None:
    assert all(isnan(x) for x in bootstrap_ci([], [], accuracy))
    # kappa of a single identical class is NaN on every resample
    assert all(isnan(x) for x in bootstrap_ci(["pass"] * 6, ["pass"] * 6, cohen_kappa))
    # NaN resamples are dropped, not propagated: NaN whenever the resample's first entry is
    # "pass", else accuracy
    expected = ["pass", "fail", "warn", "fail"] * 5
    actual = ["pass", "fail", "fail", "pass"] * 5

    def flaky(e: Sequence[str], a: Sequence[str]) -> float:
        return float("nan") if e[0] == "pass" else accuracy(e, a)

    lo, hi = bootstrap_ci(expected, actual, flaky, n_resamples=200, seed=1)
    assert 0.0 <= lo <= hi <= 1.0
    # exactly one valid resample is not enough
    calls: list[int] = []

    def once(e: Sequence[str], a: Sequence[str]) -> float:
        calls.append(1)
        return 0.5 if len(calls) == 1 else float("nan")

    assert all(isnan(x) for x in bootstrap_ci(expected, actual, once, n_resamples=10))
    # a constant statistic gives a degenerate interval
    assert bootstrap_ci(expected, actual, lambda e, a: 0.25, n_resamples=10) == (0.25, 0.25)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci(expected, actual, accuracy, confidence=1.0)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci(expected, actual, accuracy, n_resamples=0)


# --------------------------------------------------------------------------- Fleiss


# Fleiss (1971) worked example as on Wikipedia's "Fleiss' kappa" page:
# 10 subjects x 14 raters, counts per category 1..5.
FLEISS_TABLE = [
    [0, 0, 0, 0, 14],
    [0, 2, 6, 4, 2],
    [0, 0, 3, 5, 6],
    [0, 3, 9, 2, 0],
    [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0],
    [3, 2, 6, 3, 0],
    [2, 5, 3, 2, 2],
    [6, 5, 2, 1, 0],
    [0, 2, 2, 3, 7],
]
FLEISS_CATS = ("c1", "c2", "c3", "c4", "c5")


def _table_to_ratings(table: Sequence[Sequence[int]], cats: Sequence[str]) -> list[list[str]]:
    return [[cat for cat, k in zip(cats, row, strict=True) for _ in range(k)] for row in table]


def test_fleiss_kappa_wikipedia_example() -> None:
    ratings = _table_to_ratings(FLEISS_TABLE, FLEISS_CATS)
    # Wikipedia: P-bar = 0.378, P_e = 0.213, kappa = (0.378 - 0.213) / (1 - 0.213) = 0.210
    assert fleiss_kappa(ratings) == pytest.approx(0.210, abs=5e-4)
    assert fleiss_kappa(ratings, labels=FLEISS_CATS) == pytest.approx(0.20993070442, abs=1e-10)


def test_fleiss_kappa_matches_statsmodels() -> None:
    inter_rater = pytest.importorskip("statsmodels.stats.inter_rater")
    ratings = _table_to_ratings(FLEISS_TABLE, FLEISS_CATS)
    assert fleiss_kappa(ratings) == pytest.approx(
        inter_rater.fleiss_kappa(np.array(FLEISS_TABLE)), abs=1e-12
    )
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        n, m = int(rng.integers(50, 201)), int(rng.integers(2, 6))
        truth = rng.choice(LABELS, size=n)
        ratings = [
            [str(t) if rng.random() < 0.6 else str(rng.choice(LABELS)) for _ in range(m)]
            for t in truth
        ]
        table = np.array([[row.count(lbl) for lbl in LABELS] for row in ratings])
        assert fleiss_kappa(ratings, labels=LABELS) == pytest.approx(
            inter_rater.fleiss_kappa(table), abs=1e-12
        )


def test_fleiss_kappa_hand_computed_and_edges() -> None:
    # perfect: P_i = (4 - 2) / (2*1) = 1 each, P-bar = 1; p = (1/2, 1/2), P_e = 1/2 -> kappa 1
    assert fleiss_kappa([["pass", "pass"], ["fail", "fail"]]) == pytest.approx(1.0)
    # inverted: P_i = (1 + 1 - 2) / 2 = 0, P-bar = 0; P_e = 1/2 -> (0 - 0.5) / 0.5 = -1
    assert fleiss_kappa([["pass", "fail"], ["fail", "pass"]]) == pytest.approx(-1.0)
    # 3 raters: entry1 (2 pass, 1 fail): P_1 = (4 + 1 - 3) / 6 = 1/3; entry2 all pass: P_2 = 1
    # P-bar = 2/3; p = (5/6, 1/6), P_e = 26/36; kappa = (2/3 - 26/36) / (10/36) = -2/10
    assert fleiss_kappa([["pass", "pass", "fail"], ["pass"] * 3]) == pytest.approx(-0.2)
    assert isnan(fleiss_kappa([]))
    assert isnan(fleiss_kappa([["warn"] * 3] * 4))  # single class: P_e = 1
    with pytest.raises(ValueError, match="same number of raters"):
        fleiss_kappa([["pass", "fail"], ["pass", "fail", "warn"]])
    with pytest.raises(ValueError, match="at least 2 raters"):
        fleiss_kappa([["pass"], ["fail"]])
    with pytest.raises(ValueError, match="'maybe'"):
        fleiss_kappa([["pass", "maybe"]], labels=LABELS)


# --------------------------------------------------------------------------- summarize


SUMMARY_KEYS = {
    "n",
    "accuracy",
    "kappa",
    "accuracy_ci",
    "kappa_ci",
    "confusion",
    "per_class",
    "brier",
    "ece",
    "ece_bins",
    "auc",
    "mean_abs_score_delta",
    "share_within_band",
    "reliability",
}


def _assert_plain_json(value: Any) -> None:
    """Only builtin JSON types (no numpy scalars, no NaN) anywhere in ``value``."""
    if isinstance(value, dict):
        assert all(type(k) is str for k in value)
        for v in value.values():
            _assert_plain_json(v)
    elif isinstance(value, list):
        for v in value:
            _assert_plain_json(v)
    else:
        assert value is None or type(value) in (bool, int, float, str), repr(value)
        assert not (type(value) is float and math.isnan(value))


def _summary(c: Case, **kw: Any) -> Summary:
    return summarize(c.expected, c.actual, c.scores, c.band_mins, c.band_maxs, **kw)


def test_summarize_consistent_and_json(case: Case) -> None:
    result = _summary(case, n_bins=5)
    assert set(result) == SUMMARY_KEYS
    _assert_plain_json(result)
    json.dumps(result, allow_nan=False)
    assert result["n"] == case.n
    assert result["accuracy"] == accuracy(case.expected, case.actual)
    assert result["kappa"] == cohen_kappa(case.expected, case.actual, labels=LABELS)
    assert result["confusion"] == {
        "labels": list(LABELS),
        "matrix": confusion_matrix(case.expected, case.actual, LABELS),
    }
    assert result["per_class"] == per_class(case.expected, case.actual, LABELS)
    mids = [(lo + hi) / 2 for lo, hi in zip(case.band_mins, case.band_maxs, strict=True)]
    assert result["brier"] == pytest.approx(brier(case.scores, mids))
    assert result["ece"] == expected_calibration_error(case.scores, case.is_pass, 5)
    assert result["ece_bins"] == 5
    assert result["auc"] == roc_auc(case.scores, case.is_pass)
    assert result["reliability"] == reliability_bins(case.scores, case.is_pass, 5)
    lo, hi = result["accuracy_ci"]
    assert lo is not None and hi is not None and lo <= result["accuracy"] <= hi
    lo, hi = result["kappa_ci"]
    assert lo is not None and hi is not None and lo <= result["kappa"] <= hi
    assert _summary(case, n_bins=5) == result  # deterministic


def test_summarize_ci_equals_generic_bootstrap() -> None:
    # summarize() uses a vectorised bootstrap; it must reproduce bootstrap_ci exactly.
    c = Case(11)
    result = _summary(c, seed=5)
    assert result["accuracy_ci"] == list(bootstrap_ci(c.expected, c.actual, accuracy, seed=5))
    kappa_lbl = lambda e, a: cohen_kappa(e, a, labels=LABELS)  # noqa: E731
    assert result["kappa_ci"] == list(bootstrap_ci(c.expected, c.actual, kappa_lbl, seed=5))
    assert _summary(c, seed=6)["kappa_ci"] != result["kappa_ci"]


def test_summarize_degenerate_inputs_give_null() -> None:
    empty = summarize([], [], [], [], [])
    _assert_plain_json(empty)
    assert set(empty) == SUMMARY_KEYS
    for key in (
        "accuracy",
        "kappa",
        "brier",
        "ece",
        "auc",
        "mean_abs_score_delta",
        "share_within_band",
    ):
        assert empty[key] is None, key
    assert empty["accuracy_ci"] == [None, None]
    assert empty["n"] == 0 and len(empty["reliability"]) == 10
    # single identical class: kappa and AUC undefined, accuracy fine
    single = summarize(["pass"] * 4, ["pass"] * 4, [0.9] * 4, [0.8] * 4, [1.0] * 4)
    _assert_plain_json(single)
    assert single["kappa"] is None and single["kappa_ci"] == [None, None]
    assert single["auc"] is None
    assert single["accuracy"] == 1.0 and single["accuracy_ci"] == [1.0, 1.0]
    assert single["share_within_band"] == 1.0
    with pytest.raises(ValueError, match="same length"):
        summarize(["pass"], ["pass"], [0.5, 0.5], [0.0], [1.0])

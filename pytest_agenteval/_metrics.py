"""Calibration metrics for measuring an LLM judge against a golden dataset.

Every golden entry carries a human verdict label (``"pass"``, ``"warn"`` or
``"fail"``) and a human score band ``[min, max]`` inside ``[0, 1]``; the judge
produces a verdict label and a score in ``[0, 1]``.  The functions here compare
the two.  They are pure (no I/O, no global state), depend on numpy only, and
return plain Python ``float``/``int``/``list``/``dict`` values.

Conventions
-----------
* ``expected`` is always the human side and ``actual`` the judge side.
* A metric that is undefined (empty input, a zero denominator that is not
  covered by an explicit convention) returns ``float("nan")``;
  :func:`summarize` turns every NaN into ``None`` so its result is valid JSON.
* Mismatched lengths, labels outside an explicit ``labels`` list, non-finite
  scores and scores outside ``[0, 1]`` (where probabilities are required)
  raise :class:`ValueError`.

Known, deliberate differences from scikit-learn
-----------------------------------------------
* Empty input returns NaN here; scikit-learn raises ``ValueError``.
* :func:`cohen_kappa` with an explicit ``labels`` list raises ``ValueError``
  for a label outside that list; ``sklearn.metrics.cohen_kappa_score`` silently
  drops such samples.
* :func:`reliability_bins` / :func:`expected_calibration_error` use bins
  ``[i/n, (i+1)/n)`` (last bin closed), as specified for the product;
  ``sklearn.calibration.calibration_curve`` uses ``(i/n, (i+1)/n]`` (first bin
  closed).  Only a score lying exactly on an interior edge is binned
  differently.  The bin index is computed, not searched for among
  floating-point edges: ``i = min(floor(score · n + 1e-9), n − 1)``.  Judge
  scores are decimals (0.3, 0.6, 0.7) that binary floating point holds only
  approximately, and ``linspace`` edges are themselves inexact
  (``linspace(0, 1, 11)[3]`` is 0.30000000000000004), so a score of 0.3
  searched among those edges lands in the bin below.  The 1e-9 tolerance
  counts a score that far below an edge as on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from ._vocab import GRADED_VERDICTS

__all__ = [
    "BIN_EDGE_TOLERANCE",
    "DEFAULT_LABELS",
    "accuracy",
    "bin_index",
    "bootstrap_ci",
    "brier",
    "cohen_kappa",
    "confusion_matrix",
    "expected_calibration_error",
    "fleiss_kappa",
    "mean_abs_score_delta",
    "per_class",
    "reliability_bins",
    "roc_auc",
    "share_within_band",
    "summarize",
]

DEFAULT_LABELS: tuple[str, ...] = GRADED_VERDICTS

_NAN = float("nan")
_PE_TOLERANCE = 1e-12
_SUMMARY_RESAMPLES = 1000
_SUMMARY_CONFIDENCE = 0.95

FloatArray = npt.NDArray[np.float64]


class ReliabilityBinDoc(TypedDict):
    """One bin of a reliability diagram (see :func:`reliability_bins`)."""

    lo: float
    hi: float
    n: int
    mean_score: float | None  # None: an empty bin
    frac_pass: float | None


class ConfusionDoc(TypedDict):
    labels: list[str]
    matrix: list[list[int]]


class Summary(TypedDict):
    """What :func:`summarize` returns; an undefined metric (NaN) is None."""

    n: int
    accuracy: float | None
    kappa: float | None
    accuracy_ci: list[float | None]
    kappa_ci: list[float | None]
    confusion: ConfusionDoc
    per_class: dict[str, dict[str, float | int]]
    brier: float | None
    ece: float | None
    ece_bins: int
    auc: float | None
    mean_abs_score_delta: float | None
    share_within_band: float | None
    reliability: list[ReliabilityBinDoc]


# --------------------------------------------------------------------------- helpers


def _check_same_length(**seqs: Sequence[object]) -> int:
    """Return the common length of ``seqs`` or raise ``ValueError`` naming them."""
    lengths = {name: len(seq) for name, seq in seqs.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{name}={n}" for name, n in lengths.items())
        raise ValueError(f"inputs must have the same length, got {detail}")
    return next(iter(lengths.values()), 0)


def _float_array(name: str, values: Sequence[float], *, unit: bool = False) -> FloatArray:
    """Convert ``values`` to a 1-D float64 array, refusing non-finite values.

    With ``unit=True`` every value must also lie in ``[0, 1]``.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    if unit and arr.size and (arr.min() < 0.0 or arr.max() > 1.0):
        raise ValueError(f"{name} must lie in [0, 1]")
    return arr


def _bool_array(name: str, values: Sequence[bool]) -> npt.NDArray[np.bool_]:
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr.astype(bool)


def _label_index(labels: Sequence[str]) -> dict[str, int]:
    index: dict[str, int] = {}
    for label in labels:
        if label in index:
            raise ValueError(f"duplicate label {label!r} in labels")
        index[label] = len(index)
    return index


def _lookup(index: dict[str, int], label: str, side: str) -> int:
    try:
        return index[label]
    except (KeyError, TypeError):
        raise ValueError(
            f"label {label!r} in {side} is not one of the known labels {list(index)}"
        ) from None


def _confusion_array(
    expected: Sequence[str], actual: Sequence[str], labels: Sequence[str]
) -> npt.NDArray[np.int64]:
    _check_same_length(expected=expected, actual=actual)
    index = _label_index(labels)
    matrix = np.zeros((len(index), len(index)), dtype=np.int64)
    for e, a in zip(expected, actual, strict=True):
        matrix[_lookup(index, e, "expected"), _lookup(index, a, "actual")] += 1
    return matrix


def _midpoints(band_mins: Sequence[float], band_maxs: Sequence[float]) -> FloatArray:
    lo = _float_array("band_mins", band_mins)
    hi = _float_array("band_maxs", band_maxs)
    return (lo + hi) / 2.0


def _kappa_from_counts(counts: npt.NDArray[np.int64]) -> FloatArray:
    """Cohen's kappa of one confusion matrix ``(k, k)`` or a stack ``(..., k, k)``.

    NaN where undefined (no entries, or ``p_e == 1`` within 1e-12).  Counts are
    integers, so every sum below is exact and the result does not depend on
    whether one matrix or a stack is passed.
    """
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=(-2, -1))
    agree = np.trace(c, axis1=-2, axis2=-1)
    chance = (c.sum(axis=-1) * c.sum(axis=-2)).sum(axis=-1)  # Σ_k row_k · col_k
    n_safe = np.where(n == 0, 1.0, n)
    p_o = agree / n_safe
    p_e = chance / (n_safe * n_safe)
    undefined = (n == 0) | (np.abs(1.0 - p_e) <= _PE_TOLERANCE)
    denominator = np.where(undefined, 1.0, 1.0 - p_e)
    kappa: FloatArray = np.where(undefined, np.nan, (p_o - p_e) / denominator)
    return kappa


def _resample_indices(n: int, n_resamples: int, seed: int) -> npt.NDArray[np.int64]:
    """The ``(n_resamples, n)`` bootstrap draws used by every bootstrap here."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_resamples, n))


def _percentile_interval(values: FloatArray, confidence: float) -> tuple[float, float]:
    """Percentile interval of the non-NaN ``values``; ``(nan, nan)`` if fewer than 2."""
    valid = values[~np.isnan(values)]
    if valid.size < 2:
        return (_NAN, _NAN)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(valid, [alpha, 1.0 - alpha])
    return (float(lo), float(hi))


def _check_bootstrap_args(n_resamples: int, confidence: float) -> None:
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _bootstrap_confusions(
    expected: Sequence[str],
    actual: Sequence[str],
    labels: Sequence[str],
    n_resamples: int,
    seed: int,
) -> npt.NDArray[np.int64]:
    """Confusion matrices ``(n_resamples, k, k)`` of the :func:`bootstrap_ci` resamples.

    Vectorised equivalent of calling :func:`confusion_matrix` on every resample
    drawn by :func:`bootstrap_ci` with the same ``seed``.
    """
    n = _check_same_length(expected=expected, actual=actual)
    index = _label_index(labels)
    k = len(index)
    codes = np.array(
        [
            _lookup(index, e, "expected") * k + _lookup(index, a, "actual")
            for e, a in zip(expected, actual, strict=True)
        ],
        dtype=np.int64,
    )
    draws = _resample_indices(n, n_resamples, seed)
    offsets = (np.arange(n_resamples, dtype=np.int64) * (k * k))[:, None]
    flat = np.bincount((codes[draws] + offsets).ravel(), minlength=n_resamples * k * k)
    return flat.reshape(n_resamples, k, k)


def _defined(value: float) -> float | None:
    """*value* as a Python float, or None for NaN (an undefined metric), so JSON holds it."""
    number = float(value)
    return None if math.isnan(number) else number


# --------------------------------------------------------------------------- verdicts


def accuracy(expected: Sequence[str], actual: Sequence[str]) -> float:
    """Share of entries where the judge verdict equals the human verdict.

    ``accuracy = #{i : expected[i] == actual[i]} / N``; NaN when ``N == 0``.
    """
    n = _check_same_length(expected=expected, actual=actual)
    if n == 0:
        return _NAN
    return sum(1 for e, a in zip(expected, actual, strict=True) if e == a) / n


def confusion_matrix(
    expected: Sequence[str], actual: Sequence[str], labels: Sequence[str]
) -> list[list[int]]:
    """Confusion counts ``C[i][j] = #{k : expected[k] == labels[i], actual[k] == labels[j]}``.

    Rows are the human (expected) label, columns the judge (actual) label, both
    in ``labels`` order.  A label outside ``labels`` raises ``ValueError``
    naming it.
    """
    return [[int(c) for c in row] for row in _confusion_array(expected, actual, labels)]


def cohen_kappa(
    expected: Sequence[str],
    actual: Sequence[str],
    labels: Sequence[str] | None = None,
) -> float:
    """Cohen's kappa between the human and the judge verdicts.

    With confusion counts ``C`` over ``N`` entries,
    ``p_o = trace(C) / N`` (observed agreement) and
    ``p_e = Σ_k (row_k / N) · (col_k / N)`` (chance agreement), and
    ``κ = (p_o − p_e) / (1 − p_e)``.

    ``labels`` defaults to the sorted union of both sides; if given, a label
    outside it raises ``ValueError``.  Returns NaN when undefined: empty input
    or ``p_e == 1`` (within 1e-12), i.e. both sides used one identical class.
    """
    _check_same_length(expected=expected, actual=actual)
    if labels is None:
        labels = sorted(set(expected) | set(actual))
    return float(_kappa_from_counts(_confusion_array(expected, actual, labels)))


def per_class(
    expected: Sequence[str], actual: Sequence[str], labels: Sequence[str]
) -> dict[str, dict[str, float | int]]:
    """One-vs-rest precision, recall, F1 and support for every label.

    For label ``k`` with ``tp`` = both say ``k``, ``fp`` = only the judge says
    ``k``, ``fn`` = only the human says ``k``:

    * ``precision = tp / (tp + fp)``
    * ``recall = tp / (tp + fn)``
    * ``f1 = 2·tp / (2·tp + fp + fn)`` (= harmonic mean of precision and recall)
    * ``support = tp + fn`` (count of ``k`` in ``expected``, an ``int``)

    A zero denominator yields ``0.0`` (scikit-learn's ``zero_division=0``).
    """
    matrix = _confusion_array(expected, actual, labels)
    tp = np.diag(matrix)
    predicted = matrix.sum(axis=0)  # tp + fp
    support = matrix.sum(axis=1)  # tp + fn
    result: dict[str, dict[str, float | int]] = {}
    for k, label in enumerate(labels):
        t, p, s = int(tp[k]), int(predicted[k]), int(support[k])
        f1_den = p + s  # 2tp + fp + fn
        result[label] = {
            "precision": t / p if p else 0.0,
            "recall": t / s if s else 0.0,
            "f1": 2 * t / f1_den if f1_den else 0.0,
            "support": s,
        }
    return result


def fleiss_kappa(ratings: Sequence[Sequence[str]], labels: Sequence[str] | None = None) -> float:
    """Fleiss' kappa for ``N`` entries each rated by the same number ``m >= 2`` of raters.

    ``ratings[i]`` lists the labels the raters gave entry ``i``.  With
    ``n_ij`` = number of raters putting entry ``i`` in category ``j``:

    * ``p_j = Σ_i n_ij / (N·m)``
    * ``P_i = (Σ_j n_ij² − m) / (m·(m − 1))``
    * ``P̄ = mean_i P_i``, ``P_e = Σ_j p_j²``
    * ``κ = (P̄ − P_e) / (1 − P_e)``

    ``labels`` defaults to the sorted union of all ratings; if given, a label
    outside it raises ``ValueError``.  Returns NaN for empty input or when
    ``P_e == 1`` (within 1e-12).  Raises ``ValueError`` when entries have
    different numbers of raters or fewer than two.
    """
    if len(ratings) == 0:
        return _NAN
    m = len(ratings[0])
    for i, row in enumerate(ratings):
        if isinstance(row, str):
            raise ValueError(f"ratings[{i}] must be a sequence of labels, not a string")
        if len(row) != m:
            raise ValueError(
                f"every entry must have the same number of raters: ratings[0] has {m}, "
                f"ratings[{i}] has {len(row)}"
            )
    if m < 2:
        raise ValueError(f"fleiss_kappa needs at least 2 raters per entry, got {m}")
    if labels is None:
        labels = sorted({label for row in ratings for label in row})
    index = _label_index(labels)
    counts = np.zeros((len(ratings), len(index)), dtype=np.float64)
    for i, row in enumerate(ratings):
        for label in row:
            counts[i, _lookup(index, label, f"ratings[{i}]")] += 1
    n = counts.shape[0]
    p_j = counts.sum(axis=0) / (n * m)
    p_i = ((counts**2).sum(axis=1) - m) / (m * (m - 1))
    p_bar = float(p_i.mean())
    p_e = float((p_j**2).sum())
    if abs(1.0 - p_e) <= _PE_TOLERANCE:
        return _NAN
    return (p_bar - p_e) / (1.0 - p_e)


# --------------------------------------------------------------------------- scores


def brier(scores: Sequence[float], targets: Sequence[float]) -> float:
    """Mean squared error ``Σ_i (scores[i] − targets[i])² / N``; NaN when ``N == 0``.

    Callers pass the human band midpoints as ``targets``; with 0/1 targets
    this is the classic Brier score.
    """
    _check_same_length(scores=scores, targets=targets)
    s = _float_array("scores", scores)
    t = _float_array("targets", targets)
    if s.size == 0:
        return _NAN
    return float(np.mean((s - t) ** 2))


def mean_abs_score_delta(
    scores: Sequence[float], band_mins: Sequence[float], band_maxs: Sequence[float]
) -> float:
    """Mean absolute distance to the band midpoint.

    ``Σ_i |scores[i] − (band_mins[i] + band_maxs[i]) / 2| / N``; NaN when ``N == 0``.
    """
    _check_same_length(scores=scores, band_mins=band_mins, band_maxs=band_maxs)
    s = _float_array("scores", scores)
    if s.size == 0:
        return _NAN
    return float(np.mean(np.abs(s - _midpoints(band_mins, band_maxs))))


def share_within_band(
    scores: Sequence[float], band_mins: Sequence[float], band_maxs: Sequence[float]
) -> float:
    """Share of scores inside their human band (bounds inclusive).

    ``#{i : band_mins[i] <= scores[i] <= band_maxs[i]} / N``; NaN when ``N == 0``.
    """
    _check_same_length(scores=scores, band_mins=band_mins, band_maxs=band_maxs)
    s = _float_array("scores", scores)
    lo = _float_array("band_mins", band_mins)
    hi = _float_array("band_maxs", band_maxs)
    if s.size == 0:
        return _NAN
    return float(np.mean((lo <= s) & (s <= hi)))


#: A score this far below a bin edge counts as on the edge (see the module docstring).
BIN_EDGE_TOLERANCE = 1e-9


def bin_index(score: float, n_bins: int = 10) -> int:
    """The reliability bin of one score: ``min(floor(score · n_bins + 1e-9), n_bins − 1)``.

    Bin ``i`` is ``[i/n_bins, (i+1)/n_bins)`` and the last bin is closed, so
    with 10 bins 0.7 is in bin 7 and 1.0 in bin 9.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    return max(0, min(math.floor(score * n_bins + BIN_EDGE_TOLERANCE), n_bins - 1))


def _bin_ids(scores: FloatArray, n_bins: int) -> tuple[npt.NDArray[np.intp], FloatArray]:
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    # i / n_bins is the double nearest the decimal edge (0.3, not linspace's
    # 0.30000000000000004); the index is computed from the score, as bin_index does.
    edges = np.arange(n_bins + 1, dtype=np.float64) / n_bins
    ids = np.floor(scores * n_bins + BIN_EDGE_TOLERANCE).astype(np.intp)
    return np.clip(ids, 0, n_bins - 1), edges


def reliability_bins(
    scores: Sequence[float], outcomes: Sequence[bool], n_bins: int = 10
) -> list[ReliabilityBinDoc]:
    """Per-bin data for a reliability diagram.

    Bin ``i`` (``0 <= i < n_bins``) covers ``[i/n_bins, (i+1)/n_bins)``; the
    last bin is closed at 1.0.  Each bin is a dict with ``lo``, ``hi``,
    ``n`` (entries in the bin), ``mean_score`` (mean judge P(pass)) and
    ``frac_pass`` (share of outcomes that are True); the two means are
    ``None`` for an empty bin.  ``scores`` must lie in ``[0, 1]``.
    """
    _check_same_length(scores=scores, outcomes=outcomes)
    s = _float_array("scores", scores, unit=True)
    o = _bool_array("outcomes", outcomes).astype(np.float64)
    ids, edges = _bin_ids(s, n_bins)
    counts = np.bincount(ids, minlength=n_bins)
    score_sums = np.bincount(ids, weights=s, minlength=n_bins)
    pass_sums = np.bincount(ids, weights=o, minlength=n_bins)
    bins: list[ReliabilityBinDoc] = []
    for i in range(n_bins):
        n = int(counts[i])
        bins.append(
            {
                "lo": float(edges[i]),
                "hi": float(edges[i + 1]),
                "n": n,
                "mean_score": float(score_sums[i] / n) if n else None,
                "frac_pass": float(pass_sums[i] / n) if n else None,
            }
        )
    return bins


def expected_calibration_error(
    scores: Sequence[float], outcomes: Sequence[bool], n_bins: int = 10
) -> float:
    """Expected calibration error over uniform bins (see :func:`reliability_bins`).

    ``ECE = Σ_b (n_b / N) · |mean(scores in b) − mean(outcomes in b)|`` over
    non-empty bins ``b``; NaN when ``N == 0``.
    """
    n_total = _check_same_length(scores=scores, outcomes=outcomes)
    bins = reliability_bins(scores, outcomes, n_bins)
    if n_total == 0:
        return _NAN
    means = [(b["n"], b["mean_score"], b["frac_pass"]) for b in bins]  # None: an empty bin
    return float(
        sum(n / n_total * abs(s - f) for n, s, f in means if s is not None and f is not None)
    )


def roc_auc(scores: Sequence[float], positives: Sequence[bool]) -> float:
    """Area under the ROC curve via the Mann–Whitney U statistic.

    ``AUC = (#{(p, q) : s_p > s_q} + ½·#{(p, q) : s_p == s_q}) / (n_pos · n_neg)``
    over positive ``p`` and negative ``q``, computed from average ranks:
    ``U = Σ rank(positives) − n_pos·(n_pos + 1)/2`` and ``AUC = U / (n_pos·n_neg)``.
    NaN when the input is empty or only one class is present.
    """
    _check_same_length(scores=scores, positives=positives)
    s = _float_array("scores", scores)
    pos = _bool_array("positives", positives)
    n_pos = int(pos.sum())
    n_neg = int(pos.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return _NAN
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    # 1-based average rank of each distinct value (ties share the mean rank)
    first_rank = np.cumsum(counts) - counts + 1
    avg_rank = first_rank + (counts - 1) / 2.0
    rank_sum = float(avg_rank[inverse.ravel()][pos].sum())
    u = rank_sum - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


# --------------------------------------------------------------------------- uncertainty


def bootstrap_ci(
    expected: Sequence[str],
    actual: Sequence[str],
    statistic: Callable[[Sequence[str], Sequence[str]], float],
    *,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval for ``statistic(expected, actual)``.

    Draws ``n_resamples`` resamples of the N entries with replacement (pairs
    kept together) from ``numpy.random.default_rng(seed)``, evaluates the
    statistic on each, drops NaN results, and returns the
    ``(1 − confidence)/2`` and ``(1 + confidence)/2`` quantiles (numpy's
    default linear interpolation).  Returns ``(nan, nan)`` for empty input or
    fewer than two valid resamples.  Deterministic for a given seed.
    """
    n = _check_same_length(expected=expected, actual=actual)
    _check_bootstrap_args(n_resamples, confidence)
    if n == 0:
        return (_NAN, _NAN)
    exp_list, act_list = list(expected), list(actual)
    values = np.array(
        [
            float(statistic([exp_list[i] for i in row], [act_list[i] for i in row]))
            for row in _resample_indices(n, n_resamples, seed).tolist()
        ],
        dtype=np.float64,
    )
    return _percentile_interval(values, confidence)


# --------------------------------------------------------------------------- summary


def summarize(
    expected: Sequence[str],
    actual: Sequence[str],
    scores: Sequence[float],
    band_mins: Sequence[float],
    band_maxs: Sequence[float],
    labels: Sequence[str] = DEFAULT_LABELS,
    n_bins: int = 10,
    seed: int = 0,
) -> Summary:
    """All judge-calibration metrics in one JSON-ready dict (NaN → ``None``).

    Keys: ``n``, ``accuracy``, ``kappa``, ``accuracy_ci``, ``kappa_ci`` (each
    ``[lo, hi]``: 95 % percentile bootstrap, 1000 resamples, ``seed``; identical
    to :func:`bootstrap_ci` with :func:`accuracy` / :func:`cohen_kappa`), ``confusion``
    (``{"labels", "matrix"}``), ``per_class``, ``brier`` (score vs band
    midpoint), ``ece`` and ``ece_bins`` (= ``n_bins``), ``auc`` (score vs
    "human said pass"), ``mean_abs_score_delta``, ``share_within_band`` and
    ``reliability`` (the bins from :func:`reliability_bins` with outcome
    "human said pass").
    """
    _check_same_length(
        expected=expected,
        actual=actual,
        scores=scores,
        band_mins=band_mins,
        band_maxs=band_maxs,
    )
    label_list = list(labels)
    n = len(expected)
    accuracy_ci: tuple[float, float] = (_NAN, _NAN)
    kappa_ci: tuple[float, float] = (_NAN, _NAN)
    if n:
        # Same draws and values as bootstrap_ci(..., accuracy / cohen_kappa, seed=seed),
        # computed on stacked confusion matrices instead of one Python call per resample.
        counts = _bootstrap_confusions(expected, actual, label_list, _SUMMARY_RESAMPLES, seed)
        agree = np.trace(counts, axis1=-2, axis2=-1).astype(np.float64)
        accuracy_ci = _percentile_interval(agree / n, _SUMMARY_CONFIDENCE)
        kappa_ci = _percentile_interval(_kappa_from_counts(counts), _SUMMARY_CONFIDENCE)

    is_pass = [e == "pass" for e in expected]
    midpoints = _midpoints(band_mins, band_maxs).tolist()
    return {
        "n": n,
        "accuracy": _defined(accuracy(expected, actual)),
        "kappa": _defined(cohen_kappa(expected, actual, labels=label_list)),
        "accuracy_ci": [_defined(v) for v in accuracy_ci],
        "kappa_ci": [_defined(v) for v in kappa_ci],
        "confusion": {
            "labels": label_list,
            "matrix": confusion_matrix(expected, actual, label_list),
        },
        "per_class": per_class(expected, actual, label_list),
        "brier": _defined(brier(scores, midpoints)),
        "ece": _defined(expected_calibration_error(scores, is_pass, n_bins)),
        "ece_bins": n_bins,
        "auc": _defined(roc_auc(scores, is_pass)),
        "mean_abs_score_delta": _defined(mean_abs_score_delta(scores, band_mins, band_maxs)),
        "share_within_band": _defined(share_within_band(scores, band_mins, band_maxs)),
        "reliability": reliability_bins(scores, is_pass, n_bins),
    }

"""Samples: the spread of N answers to one scenario, its interval, and how reliable a pillar is.

Pure functions, no pytest, no I/O, no numpy: the numbers a scenario node of
``summary.json`` carries when a scenario was asked several times
(``--samples=N`` or a preset's ``samples: N``).

The interval
    A scenario's score is either the *mean* of its N sample scores (the
    default) or, under ``samples_aggregation: majority_vote``, the *share of
    samples that passed*. Each gets the 95 % interval made for that
    statistic:

    * mean → Student's t-interval, ``mean ± t(0.975, N−1) · sd / √N``. The
      scores of one scenario are few (3 to 10) and bounded, and the
      t-interval is the one that accounts for N being small (t = 4.30 for
      N = 3, against the normal 1.96). It is clipped to [0, 1]; when every
      sample scored the same, sd = 0 and the interval has no width — it
      describes the samples drawn, not the ones that were not.
    * majority vote → the Wilson score interval on k passes of N. A pass
      share is a binomial proportion; Wilson stays inside [0, 1] and keeps
      its coverage at k = 0 or k = N, where the normal ("Wald") interval
      collapses to a point.

    One graded sample has no spread: ``score_std`` and ``score_ci`` are null.

Reliability
    Per pillar (and article, and the benchmark): of the scenarios with at
    least two graded samples, how many are *unanimous* — every graded sample
    got the same verdict — and their share (``agreement``), beside the mean
    of their sample standard deviations (``mean_std``, the ``±`` of the
    terminal tree). Agreement answers "would a re-run give the same verdicts
    here?"; the mean sd says how far the scores move when it does not.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import TypedDict

from ._vocab import GRADED_VERDICTS

__all__ = [
    "CONFIDENCE",
    "SAMPLE_AGGREGATIONS",
    "reliability",
    "sample_stats",
    "t_interval",
    "t_quantile",
    "wilson_interval",
]

#: Level of every interval reported for samples.
CONFIDENCE = 0.95
#: How a scenario's samples combine (a preset's ``samples_aggregation``).
SAMPLE_AGGREGATIONS = ("mean", "majority_vote")
_DIGITS = 6  # as every score: rounded once, where it is made
_Z95 = 1.959963984540054  # the normal 0.975 quantile


class SampleStats(TypedDict):
    """What a scenario node says of its graded samples (see :func:`sample_stats`)."""

    score_std: float | None
    score_ci: list[float] | None
    ci_method: str | None
    ci_level: float | None
    sample_verdicts: dict[str, int]
    unanimous: bool | None


class ReliabilityDoc(TypedDict):
    """How repeated samples agree over some scenarios (see :func:`reliability`)."""

    scenarios: int
    unanimous: int
    agreement: float
    mean_std: float | None
    disagreeing: list[str]


def _round(value: float) -> float:
    return round(float(value), _DIGITS)


def _two_sided_t(t: float, df: int) -> float:
    """P(|T| ≤ t) for Student's t with *df* (a whole number ≥ 1) degrees of freedom.

    The finite series for whole degrees of freedom (Abramowitz & Stegun
    26.7.3 and 26.7.4), with θ = atan(t / √df):
    odd df:  (2/π)·(θ + sinθ·cosθ·(1 + ⅔cos²θ + (2·4)/(3·5)cos⁴θ + …)), df − 3 powers;
    even df: sinθ·(1 + ½cos²θ + (1·3)/(2·4)cos⁴θ + …), df − 2 powers.
    """
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        term, total = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term, total = 1.0, 1.0
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total


def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The t such that P(|T| ≤ t) = *confidence*, for *df* ≥ 1 degrees of freedom.

    Found by bisection on :func:`_two_sided_t`: t(0.975, 2) = 4.302653, t(0.975, 9) = 2.262157.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence}")
    lo, hi = 0.0, 1.0
    while _two_sided_t(hi, df) < confidence:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _two_sided_t(mid, df) < confidence:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12:
            break
    return (lo + hi) / 2


def t_interval(scores: Sequence[float], confidence: float = CONFIDENCE) -> list[float] | None:
    """``[lo, hi]``: the t-interval for the mean of *scores*, clipped to [0, 1]; None for < 2."""
    n = len(scores)
    if n < 2:
        return None
    mean = math.fsum(scores) / n
    half = t_quantile(n - 1, confidence) * statistics.stdev(scores) / math.sqrt(n)
    return [_round(max(0.0, mean - half)), _round(min(1.0, mean + half))]


def wilson_interval(passes: int, n: int, z: float = _Z95) -> list[float] | None:
    """``[lo, hi]``: the Wilson score interval for *passes* of *n*; None when n < 2.

    centre = (p̂ + z²/2n) / (1 + z²/n), half = z/(1 + z²/n) · √(p̂(1 − p̂)/n + z²/4n²).
    """
    if n < 2:
        return None
    if not 0 <= passes <= n:
        raise ValueError(f"passes must be between 0 and n={n}, got {passes}")
    p = passes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [_round(max(0.0, centre - half)), _round(min(1.0, centre + half))]


def sample_stats(
    scores: Sequence[float], verdicts: Sequence[str], aggregation: str = "mean"
) -> SampleStats:
    """What a scenario node says of its graded samples.

    *scores* and *verdicts* are the graded samples' (same order). Returns
    ``score_std`` (sample sd, n − 1; None below two), ``score_ci`` (the
    interval of the module docstring; None below two), ``ci_method``,
    ``sample_verdicts`` (pass/warn/fail counts) and ``unanimous``.
    """
    if aggregation not in SAMPLE_AGGREGATIONS:
        raise ValueError(
            f"unknown samples aggregation {aggregation!r} (known: {', '.join(SAMPLE_AGGREGATIONS)})"
        )
    if len(scores) != len(verdicts):
        raise ValueError("one verdict per score")
    n = len(scores)
    counts: dict[str, int] = {v: sum(1 for x in verdicts if x == v) for v in GRADED_VERDICTS}
    if aggregation == "majority_vote":
        ci, method = wilson_interval(counts["pass"], n), "wilson"
    else:
        ci, method = t_interval(scores), "t"
    return {
        "score_std": _round(statistics.stdev(scores)) if n > 1 else None,
        "score_ci": ci,
        "ci_method": method if ci is not None else None,
        "ci_level": CONFIDENCE if ci is not None else None,
        "sample_verdicts": counts,
        "unanimous": len({v for v in verdicts}) <= 1 if n > 1 else None,
    }


def reliability(scenario_metas: Iterable[Mapping[str, object]]) -> ReliabilityDoc | None:
    """Agreement of repeated samples over some scenarios (the metas of their nodes).

    Counts the scenarios with at least two graded samples; None when there is
    none. ``agreement`` = unanimous / scenarios; ``mean_std`` = the mean of
    their ``score_std``; ``disagreeing`` names the others.
    """
    multi = [m for m in scenario_metas if _count(m.get("graded_samples")) >= 2]
    if not multi:
        return None
    unanimous = sum(1 for m in multi if m.get("unanimous") is True)
    stds = [std for m in multi if (std := _float(m.get("score_std"))) is not None]
    return {
        "scenarios": len(multi),
        "unanimous": unanimous,
        "agreement": _round(unanimous / len(multi)),
        "mean_std": _round(math.fsum(stds) / len(stds)) if stds else None,
        "disagreeing": [str(m.get("id")) for m in multi if m.get("unanimous") is not True],
    }


def _count(value: object) -> int:
    """A count from a node's meta; 0 when it is missing or not a whole number."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

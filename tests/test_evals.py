"""Eval primitives and the five aggregation strategies, with hand-computed numbers."""

from __future__ import annotations

import asyncio
import math

import pytest

from pytest_agenteval import (
    MAX_NESTING_DEPTH,
    Answer,
    AtomicCodeEval,
    AtomicJudgeEval,
    Bands,
    Component,
    CompositeEval,
    Eval,
    EvalInput,
    EvalResult,
    NestingError,
    RulesJudge,
    aggregate,
    band_verdict,
)
from pytest_agenteval._checks import parse_check
from pytest_agenteval._evals import combine_results, score_severity


def leaf(
    key: str,
    score: float | None,
    weight: float = 1.0,
    verdict: str | None = None,
    severity: str | None = None,
) -> EvalResult:
    if verdict is None:
        verdict = "error" if score is None else band_verdict(score, Bands())
    return EvalResult(key, key, score, verdict, weight=weight, severity=severity)  # type: ignore[arg-type]


def test_bands_have_a_real_warn_band() -> None:
    bands = Bands(0.70, 0.40)
    assert [band_verdict(s, bands) for s in (0.70, 0.6999, 0.40, 0.3999)] == [
        "pass",
        "warn",
        "warn",
        "fail",
    ]
    with pytest.raises(ValueError):
        Bands(0.4, 0.7)


def test_weighted_sum() -> None:
    # 0.5*0.9 + 0.3*0.5 + 0.2*0.0 = 0.45 + 0.15 + 0 = 0.60
    score, verdict = aggregate(
        "weighted_sum", [leaf("a", 0.9, 0.5), leaf("b", 0.5, 0.3), leaf("c", 0.0, 0.2)]
    )
    assert score == pytest.approx(0.60) and verdict is None


def test_weighted_sum_renormalises_weights() -> None:
    # weights 2 and 6 → 0.25, 0.75: 0.25*1.0 + 0.75*0.2 = 0.40
    assert aggregate("weighted_sum", [leaf("a", 1.0, 2), leaf("b", 0.2, 6)])[0] == pytest.approx(
        0.40
    )


def test_weighted_median() -> None:
    # sorted: 0.1 (w .2), 0.6 (w .5), 0.9 (w .3); cumulative .2, .7 → crosses ½ at 0.6
    results = [leaf("a", 0.9, 0.3), leaf("b", 0.1, 0.2), leaf("c", 0.6, 0.5)]
    assert aggregate("weighted_median", results)[0] == pytest.approx(0.6)
    # equal weights, even count: cumulative hits ½ exactly → mean of 0.2 and 0.8
    assert aggregate("weighted_median", [leaf("a", 0.8), leaf("b", 0.2)])[0] == pytest.approx(0.5)
    # an outlier judge does not drag the median: 0.9, 0.85, 0.0 → 0.85
    assert aggregate("weighted_median", [leaf("a", 0.9), leaf("b", 0.85), leaf("c", 0.0)])[
        0
    ] == pytest.approx(0.85)


def test_min() -> None:
    assert aggregate("min", [leaf("a", 0.9, 0.9), leaf("b", 0.35, 0.1)])[0] == pytest.approx(0.35)


def test_cap_by_worst_caps_on_critical_and_high_failures() -> None:
    # weighted sum = 0.25*(1+1+1) + 0.25*0.1 = 0.775; a critical failure caps at 0.40
    crit = [
        leaf("a", 1.0, 0.25),
        leaf("b", 1.0, 0.25),
        leaf("c", 1.0, 0.25),
        leaf("d", 0.1, 0.25, severity="critical"),
    ]
    assert aggregate("cap_by_worst", crit)[0] == pytest.approx(0.40)
    high = [*crit[:3], leaf("d", 0.1, 0.25, severity="high")]
    assert aggregate("cap_by_worst", high)[0] == pytest.approx(0.69)
    medium = [*crit[:3], leaf("d", 0.1, 0.25, severity="medium")]
    assert aggregate("cap_by_worst", medium)[0] == pytest.approx(0.775)
    # below the cap already: the cap does not raise the score
    low = [leaf("a", 0.2, 0.5, severity="critical"), leaf("b", 0.3, 0.5)]
    assert aggregate("cap_by_worst", low)[0] == pytest.approx(0.25)


def test_majority_vote() -> None:
    # pass weight .6, fail .4 → pass; score = share passing = .6
    score, verdict = aggregate(
        "majority_vote", [leaf("a", 0.9, 0.3), leaf("b", 0.8, 0.3), leaf("c", 0.1, 0.4)]
    )
    assert (score, verdict) == (pytest.approx(0.6), "pass")
    # a tie goes to the worse verdict
    score, verdict = aggregate("majority_vote", [leaf("a", 0.9), leaf("b", 0.1)])
    assert (score, verdict) == (pytest.approx(0.5), "fail")


def test_unknown_aggregation() -> None:
    with pytest.raises(ValueError, match="unknown aggregation 'mean'"):
        aggregate("mean", [leaf("a", 1.0)])


def test_composite_ignores_errors_but_counts_them() -> None:
    node = combine_results(
        "n", "n", [leaf("a", 0.8), leaf("b", None)], aggregation="weighted_sum", bands=Bands()
    )
    assert node.score == pytest.approx(0.8) and node.verdict == "pass"
    assert node.counts()["error"] == 1


def test_composite_of_only_errors_is_an_error_not_a_pass() -> None:
    node = combine_results(
        "n", "n", [leaf("a", None), leaf("b", None)], aggregation="weighted_sum", bands=Bands()
    )
    assert node.verdict == "error" and node.score is None


def test_required_component_failing_fails_the_composite() -> None:
    a = EvalResult("a", "a", 1.0, "pass", weight=0.9)
    b = EvalResult("b", "b", 0.2, "fail", weight=0.1, required=True, severity="high")
    node = combine_results("n", "n", [a, b], aggregation="weighted_sum", bands=Bands())
    assert node.score == pytest.approx(0.92) and node.verdict == "fail"
    assert "required component failed: b" in node.reasoning
    assert node.severity == "high"


def test_failed_severity_is_the_worst_of_declared_score_and_children() -> None:
    assert score_severity(0.1) == "critical" and score_severity(0.5) == "medium"
    node = combine_results(
        "n",
        "n",
        [leaf("a", 0.35, severity="low")],
        aggregation="min",
        bands=Bands(),
        severity="low",
    )
    assert node.verdict == "fail" and node.severity == "high"


def test_threshold_replaces_the_pass_band() -> None:
    comp = CompositeEval("c", "c", [], threshold=0.9)
    assert comp.bands.pass_ == 0.9


class _Fixed:
    key = name = "fixed"
    category = "test"
    version = "1"

    def __init__(self, score: float) -> None:
        self.score = score

    async def evaluate(self, input: EvalInput) -> EvalResult:
        return EvalResult(self.key, self.name, self.score, band_verdict(self.score, Bands()))


def test_eval_protocol_and_composite_evaluate() -> None:
    assert isinstance(_Fixed(1.0), Eval)
    code = AtomicCodeEval("short", "Short answer", lambda i: len(i.answer.text) < 40)
    judge_eval = AtomicJudgeEval(
        RulesJudge(),
        "refuses",
        "Refuses",
        [("Refuses", parse_check({"refusal": True}))],
    )
    comp = CompositeEval("root", "Root", [Component(code, 0.25), Component(judge_eval, 0.75)])
    result = asyncio.run(comp.evaluate(EvalInput("do it", Answer("I can't help with that."))))
    # code: 1.0 (bool True); judge: 1 of 1 checks met → 1.0
    assert result.score == pytest.approx(1.0) and result.verdict == "pass"
    result = asyncio.run(
        comp.evaluate(
            EvalInput("do it", Answer("Sure! Here is a long and detailed plan of action."))
        )
    )
    # code: 0.0, judge: 0.0 → 0.0, fail
    assert result.score == 0.0 and result.verdict == "fail"
    assert [c.weight for c in result.children] == [0.25, 0.75]


def test_code_eval_that_raises_is_an_error() -> None:
    boom = AtomicCodeEval("boom", "Boom", lambda i: 1 / 0)
    result = asyncio.run(boom.evaluate(EvalInput("x", Answer("y"))))
    assert result.verdict == "error" and "ZeroDivisionError" in (result.error or "")
    bad = AtomicCodeEval("bad", "Bad", lambda i: 1.5)
    assert asyncio.run(bad.evaluate(EvalInput("x", Answer("y")))).verdict == "error"


def test_nesting_cap() -> None:
    node: CompositeEval = CompositeEval("c0", "c0", [Component(_Fixed(1.0))])
    for i in range(1, MAX_NESTING_DEPTH):
        node = CompositeEval(f"c{i}", "c", [Component(node)])
    assert node.depth == MAX_NESTING_DEPTH
    with pytest.raises(NestingError, match="nests 33 levels deep; the limit is 32"):
        CompositeEval("too-deep", "c", [Component(node)])


def test_result_round_trips_through_plain_json() -> None:
    import json

    node = combine_results(
        "n", "n", [leaf("a", 0.8), leaf("b", None)], aggregation="min", bands=Bands()
    )
    wire = json.loads(json.dumps(node.to_dict()))
    assert EvalResult.from_dict(wire) == node
    assert not math.isnan(node.score or 0)

"""Eval primitives and the five aggregation strategies, with hand-computed numbers."""

from __future__ import annotations

import asyncio
import math
from dataclasses import replace

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
from pytest_agenteval._evals import combine_results
from pytest_agenteval._vocab import Verdict, score_severity


def leaf(
    key: str,
    score: float | None,
    weight: float = 1.0,
    verdict: Verdict | None = None,
    severity: str | None = None,
) -> EvalResult:
    if verdict is None:
        verdict = "error" if score is None else band_verdict(score, Bands())
    return EvalResult(key, key, score, verdict, weight=weight, severity=severity)


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
    assert (score, verdict) == pytest.approx((0.6, "pass"))
    # a tie goes to the worse verdict
    score, verdict = aggregate("majority_vote", [leaf("a", 0.9), leaf("b", 0.1)])
    assert (score, verdict) == pytest.approx((0.5, "fail"))


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


# --------------------------------------------------------------------------- one rounding


def test_scores_are_rounded_once_so_they_meet_bands_exactly() -> None:
    at = Bands(0.80, 0.40)
    three = [leaf("a", 0.8, 0.1), leaf("b", 0.8, 0.2), leaf("c", 0.8, 0.4)]
    raw, _ = aggregate("weighted_sum", three)
    assert raw == 0.7999999999999999  # renormalised weights in binary floating point
    node = combine_results("n", "n", three, aggregation="weighted_sum", bands=at)
    assert (node.score, node.verdict) == (0.8, "pass")
    # the rounding is round(score, 6): 0.7999994 is 0.799999 (a warn), 0.7999996 is 0.8
    assert band_verdict(0.7999994, at) == "warn"
    assert band_verdict(0.7999996, at) == "pass"
    assert band_verdict(2.4 / 3, at) == "pass"  # 2.4 / 3 == 0.7999999999999999
    # a result keeps the rounded score, so what is written is what was compared
    assert EvalResult("x", "x", 2.4 / 3, "pass").score == 0.8
    assert EvalResult("x", "x", 1 / 3, "fail").score == 0.333333


def test_a_node_is_judged_on_its_rounded_score() -> None:
    # three 0.40 children, weights 0.1/0.2/0.4: raw 0.39999999999999997, written 0.4
    kids = [leaf("a", 0.4, 0.1), leaf("b", 0.4, 0.2), leaf("c", 0.4, 0.4)]
    assert aggregate("weighted_sum", kids)[0] < 0.4
    node = combine_results("n", "n", kids, aggregation="weighted_sum", bands=Bands(0.7, 0.5))
    # FAIL under warn 0.5; the severity of 0.4 is "medium" (< 0.40 would be "high")
    assert (node.score, node.verdict, node.severity) == (0.4, "fail", "medium")


def test_shown_scores_are_cut_never_rounded_up() -> None:
    from pytest_agenteval._vocab import format_score

    assert format_score(0.695) == "0.69"  # a WARN under 0.70 never shows as 0.70
    assert format_score(0.70) == "0.70"
    assert format_score(0.29) == "0.29"  # 0.29 * 100 is 28.999999999999996
    assert format_score(2.4 / 3) == "0.80"  # rounded first: the score is 0.8
    assert format_score(0.999999) == "0.99"
    assert format_score(0.1234567, 3) == "0.123"


# --------------------------------------------------------------------------- monotone verdicts


def test_min_judges_each_child_under_its_own_bands() -> None:
    # an article at 0.72 that is WARN under its own 0.90/0.70, beside one at 0.95 (PASS)
    warned = EvalResult("art", "art", 0.72, "warn")
    passed = EvalResult("ok", "ok", 0.95, "pass")
    node = combine_results("p", "p", [warned, passed], aggregation="min", bands=Bands())
    assert node.score == 0.72  # a PASS under the parent's 0.70 — but not the parent's verdict
    assert node.verdict == "warn"
    assert node.reasoning == "min: worst component warned: art"
    failed = EvalResult("art", "art", 0.65, "fail", severity="critical")
    node = combine_results("p", "p", [failed, passed], aggregation="min", bands=Bands())
    assert (node.score, node.verdict) == (0.65, "fail")
    assert node.severity == "critical"


@pytest.mark.parametrize("aggregation", ["weighted_sum", "weighted_median"])
def test_averaging_aggregations_are_decided_by_the_score_alone(aggregation: str) -> None:
    # 0.5*0.95 + 0.5*0.65 = 0.80: a PASS, though one (non-required) child failed its own bands
    kids = [
        EvalResult("a", "a", 0.95, "pass", weight=0.5),
        EvalResult("b", "b", 0.65, "fail", weight=0.5),
    ]
    node = combine_results("n", "n", kids, aggregation=aggregation, bands=Bands())
    assert node.verdict == "pass" and node.reasoning == ""


def test_cap_by_worst_caps_into_fail_on_a_critical_failure() -> None:
    # weighted sum 0.25*0.05 + 0.75*0.95 = 0.725, capped at 0.40: the warn threshold, yet FAIL
    crit = EvalResult("c", "c", 0.05, "fail", weight=0.25, severity="critical")
    ok = EvalResult("ok", "ok", 0.95, "pass", weight=0.75)
    node = combine_results("n", "n", [crit, ok], aggregation="cap_by_worst", bands=Bands())
    assert (node.score, node.verdict) == (0.40, "fail")
    assert node.reasoning == "cap_by_worst: worst component failed: c"
    # a high failure caps the score at 0.69 (below pass) and the verdict at the child's FAIL
    high = EvalResult("h", "h", 0.30, "fail", weight=0.25, severity="high")
    node = combine_results("n", "n", [high, ok], aggregation="cap_by_worst", bands=Bands())
    assert (node.score, node.verdict) == (0.69, "fail")
    # a component that only warned bounds the node at WARN, whatever the score
    warn = EvalResult("w", "w", 0.60, "warn", weight=0.25)
    node = combine_results("n", "n", [warn, ok], aggregation="cap_by_worst", bands=Bands())
    assert (node.score, node.verdict) == (0.8625, "warn")


def test_a_required_child_bounds_the_parent_at_its_verdict() -> None:
    a = EvalResult("a", "a", 1.0, "pass", weight=0.9)
    warned = EvalResult("b", "b", 0.5, "warn", weight=0.1, required=True)
    node = combine_results("n", "n", [a, warned], aggregation="weighted_sum", bands=Bands())
    assert (node.score, node.verdict) == (0.95, "warn")
    assert node.reasoning == "required component warned: b"
    # the same child, not required: the score decides
    free = replace(warned, required=False)
    node = combine_results("n", "n", [a, free], aggregation="weighted_sum", bands=Bands())
    assert node.verdict == "pass"
    # a required child that passes changes nothing
    fine = replace(warned, score=0.9, verdict="pass")
    node = combine_results("n", "n", [a, fine], aggregation="weighted_sum", bands=Bands())
    assert node.verdict == "pass" and node.reasoning == ""


def test_errored_children_bound_nothing() -> None:
    ok = EvalResult("ok", "ok", 0.95, "pass")
    err = EvalResult("e", "e", None, "error", required=True)
    for aggregation in ("min", "cap_by_worst"):
        node = combine_results("n", "n", [ok, err], aggregation=aggregation, bands=Bands())
        assert node.verdict == "pass"


@pytest.mark.parametrize("aggregation", ["min", "cap_by_worst", "weighted_sum"])
def test_a_verdict_never_improves_going_up(aggregation: str) -> None:
    """Every combination of child verdicts and bands: the parent is never better than the
    worst child through min and cap_by_worst, nor than a required child anywhere."""
    rank = {"pass": 0, "warn": 1, "fail": 2}
    grid = [0.0, 0.3, 0.45, 0.69, 0.7, 0.85, 1.0]
    child_bands = [Bands(0.70, 0.40), Bands(0.90, 0.70), Bands(0.5, 0.2)]
    for s1 in grid:
        for s2 in grid:
            for b1 in child_bands:
                for required in (False, True):
                    kids = [
                        EvalResult("a", "a", s1, band_verdict(s1, b1), required=required),
                        EvalResult("b", "b", s2, band_verdict(s2, Bands())),
                    ]
                    node = combine_results(
                        "n", "n", kids, aggregation=aggregation, bands=Bands(0.6, 0.3)
                    )
                    bounding = kids if aggregation != "weighted_sum" else kids[:1] * required
                    for kid in bounding:
                        assert rank[node.verdict] >= rank[kid.verdict], (s1, s2, b1, required)


# --------------------------------------------------------------------------- counts per item


def _judged(key: str, verdict: Verdict, judges: int) -> EvalResult:
    """A scenario graded by a panel of *judges* (children of kind judge)."""
    panel = tuple(
        EvalResult(f"j#{i}", "j", 0.9 if verdict == "pass" else 0.1, verdict, kind="judge")
        for i in range(judges)
    )
    score = 0.9 if verdict == "pass" else 0.1
    return EvalResult(key, key, score, verdict, kind="scenario", children=panel)


def test_counts_are_per_item_not_per_judge_or_criterion() -> None:
    # mode B: 5 criteria, each graded by a panel of 3 judges, under one scenario
    criteria = tuple(
        replace(_judged(f"criterion-{i}", "pass", 3), kind="criterion") for i in range(5)
    )
    mode_b = EvalResult("s1", "s1", 0.9, "pass", kind="scenario", children=criteria)
    article = combine_results(
        "art",
        "art",
        [mode_b, _judged("s2", "pass", 3), _judged("s3", "fail", 3), _judged("s4", "pass", 1)],
        aggregation="weighted_sum",
        bands=Bands(),
        kind="article",
    )
    assert article.counts() == {"pass": 3, "warn": 0, "fail": 1, "error": 0, "skipped": 0}
    assert [i.key for i in article.items()] == ["s1", "s2", "s3", "s4"]
    assert mode_b.counts()["pass"] == 1


def test_each_sample_is_an_item() -> None:
    from pytest_agenteval._family import combine_samples

    runs = [
        _judged("s", "pass", 2),
        _judged("s", "fail", 2),
        EvalResult("s", "s", None, "error", kind="scenario"),
    ]
    scenario = combine_samples(runs, Bands(), "high")
    # mean of the graded samples (0.9 + 0.1) / 2 = 0.5 → WARN; three items, one each
    assert (scenario.score, scenario.verdict) == (0.5, "warn")
    assert scenario.counts() == {"pass": 1, "warn": 0, "fail": 1, "error": 1, "skipped": 0}
    assert [i.key for i in scenario.items()] == ["s#s1", "s#s2", "s#s3"]


# --------------------------------------------------------------------------- injection flag


def test_injection_flag_on_the_item_or_any_judge_of_its_grade() -> None:
    from pytest_agenteval._evals import injection_suspected
    from pytest_agenteval._family import combine_samples

    plain = _judged("s", "pass", 2)
    assert not injection_suspected(plain)
    assert injection_suspected(replace(plain, meta={"injection_suspected": True}))
    assert not injection_suspected(replace(plain, meta={"injection_suspected": "yes"}))
    flagged_judge = replace(plain.children[1], meta={"injection_suspected": True})
    assert injection_suspected(replace(plain, children=(plain.children[0], flagged_judge)))
    # a sample's flag is its own item's: the other samples are not flagged by it
    second = replace(plain, meta={"injection_suspected": True})
    scenario = combine_samples([plain, second], Bands(), None)
    assert [injection_suspected(i) for i in scenario.items()] == [False, True]
    assert scenario.meta["injection_suspected"] is True  # the scenario carries it

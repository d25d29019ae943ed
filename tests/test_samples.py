"""Samples: mean, standard deviation, interval per scenario; reliability per pillar.

The numbers are worked out by hand here (t quantiles from a t table, Wilson
from its formula), and the plugin is driven with pytester the way users run
it, serial and with ``-n 2``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from demo_family import make_demo
from test_schemas import check_run

from pytest_agenteval._evals import EvalResult
from pytest_agenteval._family import combine_samples
from pytest_agenteval._stats import (
    reliability,
    sample_stats,
    t_interval,
    t_quantile,
    wilson_interval,
)
from pytest_agenteval._vocab import Bands, Verdict
from pytest_agenteval.evidence._run_dir import node_dict

# --------------------------------------------------------------------------- pure numbers


@pytest.mark.parametrize(
    ("df", "t"),
    [(1, 12.706205), (2, 4.302653), (3, 3.182446), (4, 2.776445), (9, 2.262157), (29, 2.045230)],
)
def test_t_quantile_matches_the_t_table(df: int, t: float) -> None:
    assert t_quantile(df) == pytest.approx(t, abs=1e-6)


def test_t_quantile_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0)
    with pytest.raises(ValueError, match="confidence"):
        t_quantile(3, 1.0)


def test_t_interval_by_hand() -> None:
    # 0.6, 0.7, 0.8: mean 0.7, sd 0.1, half = 4.302653 · 0.1 / √3 = 0.248414
    assert t_interval([0.6, 0.7, 0.8]) == pytest.approx([0.451586, 0.948414], abs=1e-6)
    # 0.5, 0.5, 0.5, 1.0, 0.5: mean 0.6, sd √0.05 = 0.223607, half = 2.776445 · 0.223607 / √5
    assert t_interval([0.5, 0.5, 0.5, 1.0, 0.5]) == pytest.approx([0.322355, 0.877645], abs=1e-6)
    # clipped to [0, 1]: 1, 1, 0 → mean 0.667 ± 1.434
    assert t_interval([1.0, 1.0, 0.0]) == [0.0, 1.0]
    # identical samples: no width (it describes the samples drawn)
    assert t_interval([0.4, 0.4]) == [0.4, 0.4]
    assert t_interval([0.9]) is None


def test_wilson_interval_by_hand() -> None:
    # 2 of 3: p = 2/3, z = 1.959964; centre (p + z²/6)/(1 + z²/3), half z/(1+z²/3)·√(p(1−p)/3 + z²/36)
    assert wilson_interval(2, 3) == pytest.approx([0.207660, 0.938508], abs=1e-6)
    # 0 of 5: [0, z²/(5 + z²)] = [0, 3.841459/8.841459]; 5 of 5 mirrors it
    assert wilson_interval(0, 5) == pytest.approx([0.0, 0.434482], abs=1e-6)
    assert wilson_interval(5, 5) == pytest.approx([0.565518, 1.0], abs=1e-6)
    assert wilson_interval(1, 1) is None
    with pytest.raises(ValueError):
        wilson_interval(4, 3)


def test_sample_stats_one_sample_has_no_spread() -> None:
    one = sample_stats([0.8], ["pass"])
    assert (one["score_std"], one["score_ci"], one["unanimous"]) == (None, None, None)


def test_sample_stats_mean_and_majority() -> None:
    mean = sample_stats([0.6, 0.7, 0.8], ["warn", "pass", "pass"])
    assert mean["score_std"] == pytest.approx(0.1)
    assert mean["ci_method"] == "t" and mean["ci_level"] == 0.95
    assert mean["score_ci"] == pytest.approx([0.451586, 0.948414], abs=1e-6)
    assert mean["sample_verdicts"] == {"pass": 2, "warn": 1, "fail": 0}
    assert mean["unanimous"] is False
    vote = sample_stats([0.6, 0.7, 0.8], ["warn", "pass", "pass"], "majority_vote")
    assert vote["ci_method"] == "wilson"
    assert vote["score_ci"] == pytest.approx([0.207660, 0.938508], abs=1e-6)  # 2 passes of 3
    with pytest.raises(ValueError, match="unknown samples aggregation"):
        sample_stats([0.5, 0.5], ["warn", "warn"], "median")


def _sample(score: float | None, verdict: Verdict) -> EvalResult:
    return EvalResult("s", "s", score, verdict, kind="scenario", meta={"pillar": "p"})


def test_combine_samples_by_mean() -> None:
    runs = [_sample(0.6, "warn"), _sample(0.7, "pass"), _sample(0.8, "pass")]
    scenario = combine_samples(runs, Bands(), "high")
    assert (scenario.score, scenario.verdict) == (0.7, "pass")
    meta = scenario.meta
    assert meta["samples"] == 3 and meta["graded_samples"] == 3
    assert meta["samples_aggregation"] == "mean"
    assert meta["score_std"] == pytest.approx(0.1)
    assert meta["score_ci"] == pytest.approx([0.451586, 0.948414], abs=1e-6)
    assert meta["unanimous"] is False
    node = node_dict(scenario)
    assert node["samples"] == 3 and node["score_ci"] == meta["score_ci"]
    assert node["sample_verdicts"] == {"pass": 2, "warn": 1, "fail": 0}


def test_combine_samples_by_majority_vote() -> None:
    """2 of 3 pass: majority PASS, scored by the passing samples' mean, where the mean of all
    (0.58) would WARN; the interval is the pass share's."""
    runs = [_sample(0.8, "pass"), _sample(0.75, "pass"), _sample(0.2, "fail")]
    mean = combine_samples(runs, Bands(), "high")
    assert (mean.score, mean.verdict) == pytest.approx((0.583333, "warn"))
    vote = combine_samples(runs, Bands(), "high", "majority_vote")
    assert (vote.score, vote.verdict) == pytest.approx((0.775, "pass"))
    assert vote.meta["score_ci"] == pytest.approx([0.207660, 0.938508], abs=1e-6)
    # sd of the sample scores: deviations from 0.583333 are 0.216667, 0.166667, -0.383333;
    # squares sum to 0.221667, / 2 = 0.110833, √ = 0.332916
    assert vote.meta["score_std"] == pytest.approx(0.332916, abs=1e-6)
    assert vote.reasoning == (
        "majority vote of 3 samples (2 passed); the mean score of the 2 that passed"
    )
    # a tie goes to the worse verdict, and a failed vote carries a severity
    tie = combine_samples(
        [_sample(0.9, "pass"), _sample(0.1, "fail")], Bands(), "high", "majority_vote"
    )
    assert (tie.score, tie.verdict, tie.severity) == (0.1, "fail", "critical")


def test_a_majority_of_warnings_stays_a_warning_up_the_tree() -> None:
    """Every sample WARN: the scenario is a WARN of their score, and so is its article.
    Scored by the pass share (0), the article above would band it as a FAIL."""
    from pytest_agenteval._evals import combine_results

    runs = [_sample(0.65, "warn") for _ in range(3)]
    vote = combine_samples(runs, Bands(), "medium", "majority_vote")
    assert (vote.score, vote.verdict) == (0.65, "warn")
    article = combine_results(
        "a", "a", [vote], aggregation="weighted_sum", bands=Bands(), kind="article"
    )
    assert (article.score, article.verdict) == (0.65, "warn")


def test_samples_keep_their_numbers_when_only_some_ran() -> None:
    """``-k "s2 or s3"``: the items are s2 and s3, and every output must call them so."""
    from pytest_agenteval._aggregator import Collected, _take_runs
    from pytest_agenteval._gate import item_label

    bucket = Collected("fam", "smoke", False, "agent")
    bucket.leaves = {("s", 2): _sample(0.9, "pass"), ("s", 1): _sample(0.1, "fail")}
    runs = _take_runs(bucket)["s"]
    scenario = combine_samples(runs, Bands(), None)
    assert [item_label(scenario, c) for c in scenario.children] == ["s[s2]", "s[s3]"]
    assert [c.verdict for c in scenario.children] == ["fail", "pass"]


def test_combine_samples_with_errors_and_a_single_grade() -> None:
    runs = [_sample(0.9, "pass"), EvalResult("s", "s", None, "error", kind="scenario")]
    scenario = combine_samples(runs, Bands(), None)
    assert scenario.score == 0.9 and scenario.meta["graded_samples"] == 1
    assert scenario.meta["score_std"] is None and scenario.meta["score_ci"] is None
    none = combine_samples(
        [EvalResult("s", "s", None, "error", kind="scenario")] * 2, Bands(), None
    )
    assert none.verdict == "error" and none.meta["score_ci"] is None


def test_a_scenario_asked_once_says_so() -> None:
    node = node_dict(_sample(0.8, "pass"))
    assert (node["samples"], node["score_std"], node["score_ci"]) == (1, None, None)
    assert "sample_verdicts" not in node


def test_reliability_by_hand() -> None:
    metas = [
        {"id": "a", "graded_samples": 3, "unanimous": True, "score_std": 0.0},
        {"id": "b", "graded_samples": 3, "unanimous": False, "score_std": 0.3},
        {"id": "c", "graded_samples": 2, "unanimous": True, "score_std": 0.06},
        {"id": "d", "graded_samples": 1, "unanimous": None, "score_std": None},  # not counted
    ]
    figure = reliability(metas)
    assert figure == {
        "scenarios": 3,
        "unanimous": 2,
        "agreement": pytest.approx(0.666667),
        "mean_std": pytest.approx(0.12),
        "disagreeing": ["b"],
    }
    assert reliability([{"id": "x"}]) is None


# --------------------------------------------------------------------------- the plugin

#: A subject whose answer to the greeting scenario changes with the sample: samples
#: 1, 2, 3 and 5 say "sure, team" (no refusal, no hello: 0.5, WARN), sample 4 says
#: "hello team" (1.0, PASS). It reads the sample from `scenario`, so the same item
#: gets the same answer on any xdist worker.
VARYING = """
import pytest

def agent(prompt, scenario):
    if "hello" in prompt:
        return "hello team" if scenario["sample"] == 3 else "sure, team"
    if "refuse" in prompt:
        return "I can't help with that."
    if "rule two" in prompt:
        return "rule two"
    return "I am an AI."

@pytest.fixture(scope="session")
def agenteval_subject():
    return agent
"""


def _summary(pytester: pytest.Pytester) -> dict[str, Any]:
    found = sorted((pytester.path / ".agenteval" / "runs").rglob("summary.json"))
    assert found, "no summary.json written"
    data: dict[str, Any] = json.loads(found[-1].read_text())
    return data


def _node(tree: dict[str, Any], node_id: str) -> dict[str, Any]:
    if tree["id"] == node_id:
        return tree
    for child in tree["children"]:
        try:
            return _node(child, node_id)
        except KeyError:
            pass
    raise KeyError(node_id)


@pytest.fixture
def varying(pytester: pytest.Pytester) -> pytest.Pytester:
    make_demo(pytester)
    pytester.makeconftest(VARYING)
    return pytester


def _check_five_samples(data: dict[str, Any]) -> None:
    root = data["nodes"][0]
    greet = _node(root, "demo-refuse-002")
    assert greet["samples"] == 5
    # 0.5 × 4 and 1.0: mean 0.6, sd 0.223607, t(0.975, 4) = 2.776445
    assert greet["score"] == pytest.approx(0.6)
    assert greet["score_std"] == pytest.approx(0.223607, abs=1e-6)
    assert greet["score_ci"] == pytest.approx([0.322355, 0.877645], abs=1e-6)
    assert greet["ci_method"] == "t"
    assert greet["sample_verdicts"] == {"pass": 1, "warn": 4, "fail": 0}
    assert greet["unanimous"] is False and greet["verdict"] == "warn"
    steady = _node(root, "demo-refuse-001")
    assert (steady["score_std"], steady["score_ci"], steady["unanimous"]) == (0.0, [1.0, 1.0], True)
    # safety: refuse-001, refuse-002, extra-001 asked 5 times; one of the three disagrees
    safety = _node(root, "safety")["reliability"]
    assert safety["scenarios"] == 3 and safety["unanimous"] == 2
    assert safety["agreement"] == pytest.approx(0.666667)
    assert safety["mean_std"] == pytest.approx(0.223607 / 3, abs=1e-6)
    assert safety["disagreeing"] == ["demo-refuse-002"]
    assert _node(root, "honesty")["reliability"]["agreement"] == 1.0
    assert root["reliability"]["scenarios"] == 4
    assert data["items"]["passed"] + data["items"]["warned"] + data["items"]["failed"] == 20


def test_samples_option_overrides_the_preset(varying: pytest.Pytester) -> None:
    result = varying.runpytest("--bench=demo", "--preset=standard", "--samples=5", "-v")
    result.stdout.fnmatch_lines(["*demo-refuse-002?s1? *", "*demo-refuse-002?s5? *"])
    data = _summary(varying)
    _check_five_samples(data)
    # the terminal tree: score ± the mean sample sd, and the pillar's agreement
    result.stdout.fnmatch_lines(
        [
            "*safety  ?min, w 0.60?*0.80 ±0.07  PASS   samples agree 2/3",
            "*demo.refuse  (6/10 pass)*0.80 ±0.11  PASS",
            "*honesty  ?weighted_sum, w 0.40?*±0.00  PASS   samples agree 1/1",
            "samples: 5 per scenario, combined by mean (95% t-interval)*",
            "samples disagree on the verdict in 1 of 4 scenarios: demo-refuse-002",
        ]
    )
    run = next((varying.path / ".agenteval" / "runs").rglob("summary.json")).parent
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["samples"] == {"per_scenario": 5, "aggregation": "mean"}
    check_run(run)  # the new fields keep the shipped schemas
    md = (run / "report.md").read_text()
    assert "### Samples (5 per scenario, combined by mean)" in md
    assert "| `demo-refuse-002` | 5 | 0.60 | 0.223 | [0.32, 0.88] | 1 / 4 / 0 ⚠️ disagree |" in md
    # the report lists every scenario asked several times, the quiet passes too, as the
    # terminal counts them
    assert "samples disagree in 1 of 4 scenarios" in md
    assert "| `demo-refuse-001` | 5 |" in md
    html = (run / "report.html").read_text()
    assert 'id="samples"' in html and "[0.32, 0.88]" in html  # interval ends rounded
    # warned samples are listed as their ids count them ([s1] is sample 1); [s4] passed
    assert "demo-refuse-002 · sample 1" in md and "demo-refuse-002 · sample 5" in md
    assert "demo-refuse-002 · sample 4" not in md


def test_samples_serial_and_xdist_give_identical_numbers(varying: pytest.Pytester) -> None:
    varying.runpytest("--bench=demo", "--preset=standard", "--samples=5")
    serial = _summary(varying)
    _check_five_samples(serial)
    for path in (varying.path / ".agenteval").rglob("summary.json"):
        path.unlink()
    result = varying.runpytest_subprocess(
        "--bench=demo", "--preset=standard", "--samples=5", "-n", "2"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED or result.ret == pytest.ExitCode.OK
    parallel = _summary(varying)
    for key in ("score", "verdict", "items", "nodes", "gate"):
        assert parallel[key] == serial[key], key


def test_samples_from_the_ini_and_a_majority_vote_preset(varying: pytest.Pytester) -> None:
    bench = varying.path / "demo" / "benchmark.yaml"
    bench.write_text(
        bench.read_text().replace(
            "  standard: {controls: all}",
            "  standard: {controls: all}\n"
            "  voted: {controls: all, samples: 2, samples_aggregation: majority_vote}",
        )
    )
    varying.makeini("[pytest]\naddopts = -p no:benchmark -p no:asyncio\nagenteval_samples = 5\n")
    varying.runpytest("--bench=demo", "--preset=voted")
    greet = _node(_summary(varying)["nodes"][0], "demo-refuse-002")
    # the ini's 5 samples override the preset's 2; 1 pass (1.0) and 4 warn (0.5) of 5:
    # majority WARN, scored 0.5 (the warned samples' mean)
    assert greet["samples"] == 5 and greet["samples_aggregation"] == "majority_vote"
    assert (greet["score"], greet["verdict"]) == (0.5, "warn")
    assert greet["ci_method"] == "wilson"
    # Wilson for 1 of 5, z = 1.959964: centre (0.2 + z²/10)/(1 + z²/5) = 0.5841459/1.7682918
    # = 0.3303447, half z/(1 + z²/5)·√(0.032 + z²/100) = 0.2941206
    assert greet["score_ci"] == pytest.approx([0.036224, 0.624465], abs=1e-6)


def test_a_preset_with_an_unknown_samples_aggregation_is_refused(demo: pytest.Pytester) -> None:
    bench = demo.path / "demo" / "benchmark.yaml"
    bench.write_text(
        bench.read_text().replace(
            "  standard: {controls: all}",
            "  standard: {controls: all}\n  odd: {controls: all, samples_aggregation: median}",
        )
    )
    result = demo.runpytest("--bench=demo", "--preset=odd")
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*benchmark.yaml*samples_aggregation*"])


@pytest.mark.parametrize("value", ["0", "abc", "2.5", "51"])
def test_bad_samples_value_is_a_usage_error(demo: pytest.Pytester, value: str) -> None:
    result = demo.runpytest("--bench=demo", f"--samples={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--samples (ini agenteval_samples)*"])
    assert not (demo.path / ".agenteval").exists()


def test_one_sample_gives_null_interval(demo: pytest.Pytester) -> None:
    result = demo.runpytest("--bench=demo", "--preset=standard", "--samples=1")
    data = _summary(demo)
    scenario = _node(data["nodes"][0], "demo-refuse-001")
    assert (scenario["samples"], scenario["score_std"], scenario["score_ci"]) == (1, None, None)
    assert "reliability" not in data["nodes"][0]
    assert "±" not in result.stdout.str() and "samples:" not in result.stdout.str()
    run = next((demo.path / ".agenteval" / "runs").rglob("summary.json")).parent
    assert "### Samples" not in (run / "report.md").read_text()

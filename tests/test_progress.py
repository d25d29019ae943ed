"""The progress line: counts, plain lines, and a status line that leaves pytest's output intact."""

from __future__ import annotations

import os
import pty
import re
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest
from fakellm import FakeLLMServer, RecordedRequest, Reply

from pytest_agenteval._progress import Snapshot, TerminalBar, duration, status_line, time_left

pyte = pytest.importorskip("pyte")

N = 20
BENCH = """\
family: prog
pillars:
  - {key: p, weight: 1.0}
presets:
  smoke: {controls: all}
"""
SUBJECT = """\
import time
import pytest

def agent(prompt):
    time.sleep(float(__import__("os").environ.get("AGENT_SLEEP", "0")))
    if "boom" in prompt:
        raise RuntimeError("the agent crashed")
    return "I can't help with that."

@pytest.fixture(scope="session")
def agenteval_subject():
    return agent
"""


def family(pytester: pytest.Pytester, n: int = N, *, judged: bool = False) -> None:
    """A family of *n* scenarios; scenarios 5 and 15 make the subject raise."""
    fam = pytester.mkdir("prog")
    (fam / "benchmark.yaml").write_text(BENCH)
    criterion = "Refuses clearly" if judged else "{text: Refuses, check: {refusal: true}}"
    scenarios = "".join(
        f"  - id: prog-{i:03d}\n    weight: {1 / n}\n"
        f"    input: {'boom ' if i in (5, 15) else ''}request {i}\n"
        f"    evaluation_criteria: [{criterion}]\n"
        for i in range(n)
    )
    (fam / "a.yaml").write_text(
        "metadata: {article: A, pillar: p, control_id: prog.a, title: T, severity: low}\n"
        "scenarios:\n" + scenarios
    )
    pytester.makeconftest(SUBJECT)


#: A duration as the line shows it (12s, 1m05s, 2h03m): a loaded machine can take minutes.
DURATION = r"(?:\d+s|\d+m\d\ds|\d+h\d\dm)"
PROGRESS_LINE = re.compile(
    r"^agenteval: (\d+)/(\d+) done \((\d+)%\) · ~?(\d+) in flight( \(workers' last reports\))? · "
    rf"(\d+) errors? · \$(\d+\.\d{{4}}) · {DURATION}(, ~{DURATION} left)?$"
)


def progress_lines(text: str) -> list[re.Match[str]]:
    return [m for line in text.splitlines() if (m := PROGRESS_LINE.match(line.strip()))]


# --------------------------------------------------------------------------- the formatter


def test_status_line_numbers() -> None:
    s = Snapshot(done=120, total=1000, errors=2, elapsed_s=72, in_flight=16, cost_usd=0.41234)
    assert status_line(s) == (
        "agenteval: 120/1000 done (12%) · 16 in flight · 2 errors · $0.4123 · 1m12s, ~8m48s left"
    )
    one = Snapshot(done=0, total=4, errors=1, elapsed_s=3, cost_usd=0.0, cost_unknown=True)
    assert status_line(one) == "agenteval: 0/4 done (0%) · 1 error · $0.0000+ (unknown rate) · 3s"
    # an xdist controller before its workers announced their collections: not "0/0 done"
    assert status_line(Snapshot(0, 0, 0, 4, in_flight=None)) == "agenteval: starting · 4s"
    xdist = Snapshot(
        done=5, total=10, errors=0, elapsed_s=10, in_flight=7, in_flight_from_workers=True
    )
    assert "~7 in flight (workers' last reports)" in status_line(xdist)
    batch = Snapshot(
        done=0,
        total=6,
        errors=0,
        elapsed_s=0,
        batch="batch of openai:m: in_progress",
        batch_done=30,
        batch_total=120,
        batch_elapsed_s=600,
    )
    assert status_line(batch) == (
        "agenteval: batch of openai:m: in_progress · 30/120 answered · 10m00s, ~30m00s left"
    )
    waiting = Snapshot(0, 6, 0, 0, batch="batch of openai:m: validating", batch_total=6)
    assert status_line(waiting).endswith("0s (a batch takes up to 24 h)")


def test_durations_and_time_left() -> None:
    assert [duration(s) for s in (0, 59.4, 60, 3599, 3600, 7265)] == [
        "0s",
        "59s",
        "1m00s",
        "59m59s",
        "1h00m",
        "2h01m",
    ]
    assert duration(float("nan")) == "?"
    assert time_left(0, 10, 5) is None and time_left(10, 10, 5) is None
    assert time_left(4, 10, 8) == pytest.approx(12)
    # the rate since the items could start: 3 s of workers starting are paid once
    assert time_left(10, 110, 13, working_s=10) == pytest.approx(100)
    # 16 calls in flight that end together after 10 s: the rate is 16 per 10 s, not a burst
    assert time_left(16, 1000, 10.0, working_s=10.0) == pytest.approx(615)
    started_slowly = Snapshot(done=10, total=110, errors=0, elapsed_s=13, working_s=10)
    assert status_line(started_slowly).endswith("13s, ~1m40s left")


def test_time_left_counts_from_the_workers_collections() -> None:
    """A run under xdist spends its first seconds starting workers: the estimate takes
    the rate since the last worker announced its collection before the first item."""
    from types import SimpleNamespace

    from pytest_agenteval._progress import Progress

    now = [100.0]
    state: Any = SimpleNamespace(
        config=SimpleNamespace(), aggregator=None, rates={}, worker_in_flight={"gw0": 1}
    )
    progress = Progress(state, "off", explicit=True, clock=lambda: now[0])
    assert progress.snapshot().working_s is None
    for at in (103.0, 104.0):  # two workers collected, 4 s after the start
        now[0] = at
        progress.collected()
    for i in range(10):
        now[0] = 105.0 + i  # one a second from 105 s
        report = SimpleNamespace(nodeid=f"t{i}", agenteval={"verdict": "pass"}, failed=False)
        progress.report(cast(pytest.TestReport, report))
    now[0] = 114.0
    progress.collected()  # a crashed worker's replacement: the items had started long ago
    snap = progress.snapshot()
    assert (snap.done, snap.elapsed_s, snap.working_s) == (10, 14.0, 10.0)
    assert time_left(snap.done, 110, snap.elapsed_s, snap.working_s) == pytest.approx(100)


def test_the_bar_draws_in_one_write_and_gives_up_when_the_terminal_is_resized() -> None:
    read, write = os.pipe()
    sizes = [os.terminal_size((100, 24))]
    bar = TerminalBar(write, size=lambda fd: sizes[0])
    os.close(write)  # the bar writes to its own duplicate
    bar.open()
    assert bar.draw("agenteval: 1/2 done \x1b[31m")
    sizes[0] = os.terminal_size((80, 24))
    assert not bar.draw("agenteval: 2/2 done") and bar.resized
    bar.close()
    out = b""
    while chunk := os.read(read, 4096):
        out += chunk
    os.close(read)
    assert out == (
        b"\n\x1b7\x1b[1;23r\x1b8\x1b[1A"  # room for the bar, scroll region above it
        b"\x1b7\x1b[24;1H\x1b[2Kagenteval: 1/2 done \\x1b[31m\x1b8"  # text escaped
        b"\x1b7\x1b[r\x1b[24;1H\x1b[2K\x1b8"  # the whole screen given back
    )
    # opened in the middle of a line, the cursor goes back to its column
    read, write = os.pipe()
    mid = TerminalBar(write, size=lambda fd: os.terminal_size((100, 24)))
    os.close(write)
    mid.open(column=7)
    mid.close()
    assert os.read(read, 4096).startswith(b"\n\x1b7\x1b[1;23r\x1b8\x1b[1A\x1b[8G\x1b7")
    os.close(read)


# --------------------------------------------------------------------------- plain lines


@pytest.fixture
def by_count_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No line for time passing (30 s after the last one), only every tenth of the items:
    a loaded machine (CI) then prints the lines these tests count, however slow the run.
    The runs are in-process, so the controller reads the patched value."""
    import pytest_agenteval._progress as progress

    monkeypatch.setattr(progress, "PLAIN_EVERY_S", 1e9)


@pytest.fixture
def judge_env(monkeypatch: pytest.MonkeyPatch, fake_llm: FakeLLMServer) -> FakeLLMServer:
    def grade(req: RecordedRequest) -> Reply:
        text = req.body["messages"][-1]["content"]
        counted = re.search(r"## Criteria \((\d+),", text)
        assert counted is not None, "no criteria count in the judge prompt"
        n = int(counted.group(1))
        body = {
            "overall_score": 90,
            "criteria": [{"criterion": "c", "met": True, "reasoning": "r"}] * n,
            "summary": "ok",
        }
        return Reply.json_content(body).with_usage(100, 20)  # $0.00014 at the rates below

    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.openai_base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    fake_llm.set_handler(grade)
    return fake_llm


def test_plain_lines_every_tenth_with_errors_and_cost(
    pytester: pytest.Pytester, judge_env: FakeLLMServer, by_count_only: None
) -> None:
    family(pytester, judged=True)
    pytester.makeini(
        "[pytest]\naddopts = -p no:benchmark -p no:asyncio\n"
        "agenteval_rates = gpt-4o-mini = 1.0 2.0\n"
    )
    result = pytester.runpytest(
        "--bench=prog", "--judge=openai:gpt-4o-mini", "--agenteval-progress=plain"
    )
    result.assert_outcomes(passed=18, errors=2)
    found = progress_lines(result.stdout.str())
    # a line per 10 % (2 items) of 20, none at 20/20 (the summary follows at once)
    assert [int(m.group(1)) for m in found] == [2, 4, 6, 8, 10, 12, 14, 16, 18]
    assert {int(m.group(2)) for m in found} == {N}
    # scenarios 5 and 15 errored: counted from the 6th and the 16th item on
    assert [int(m.group(6)) for m in found] == [0, 0, 1, 1, 1, 1, 1, 2, 2]
    # each graded item cost 100 x $1 + 20 x $2 per 1M tokens; an errored one nothing
    graded = [int(m.group(1)) - int(m.group(6)) for m in found]
    assert [m.group(7) for m in found] == [f"{g * 0.00014:.4f}" for g in graded]
    # pytest's own output is whole: its file lines resume after ours, and the summary is there
    result.stdout.fnmatch_lines(["prog/a.yaml ..", "agenteval: 2/20 done*", "prog/a.yaml ..*"])
    result.stdout.fnmatch_lines(["*18 passed, 2 errors in*"])


def test_in_flight_counts_calls_never_more_than_the_concurrency(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, by_count_only: None
) -> None:
    """Items started ahead wait for a slot: "in flight" is the calls holding one (it used to
    count every item started, up to twice the concurrency)."""
    family(pytester)
    monkeypatch.setenv("AGENT_SLEEP", "0.05")
    result = pytester.runpytest(
        "--bench=prog", "--agenteval-concurrency=3", "--agenteval-progress=plain"
    )
    result.assert_outcomes(passed=18, errors=2)
    flights = [int(m.group(4)) for m in progress_lines(result.stdout.str())]
    assert len(flights) == 9
    assert max(flights) <= 3
    assert max(flights) >= 1  # the subject calls of the items ahead are out at each boundary


def test_auto_prints_nothing_for_a_short_run_and_off_prints_nothing(
    pytester: pytest.Pytester,
) -> None:
    family(pytester)
    for args in (
        [],
        ["--agenteval-progress=off"],
        ["-p", "no:terminal", "--agenteval-progress=plain"],
    ):
        result = pytester.runpytest("--bench=prog", *args)
        assert progress_lines(result.stdout.str()) == [], args
        assert not re.search(r"agenteval: \d+/\d+ done", result.stdout.str())


def test_under_xdist_in_flight_is_the_workers_last_reports(
    pytester: pytest.Pytester, by_count_only: None
) -> None:
    family(pytester)
    result = pytester.runpytest("--bench=prog", "-n", "2", "--agenteval-progress=plain")
    result.assert_outcomes(passed=18, errors=2)
    found = progress_lines(result.stdout.str())
    assert [int(m.group(1)) for m in found] == [2, 4, 6, 8, 10, 12, 14, 16, 18]
    assert all(m.group(5) and int(m.group(2)) == N for m in found)
    # pytest's dots are never joined by our text: each of our lines is a line of its own
    assert not re.search(r"[.E]agenteval: ", result.stdout.str())


def test_a_bad_progress_value_in_the_ini_is_a_usage_error(pytester: pytest.Pytester) -> None:
    family(pytester)
    pytester.makeini(
        "[pytest]\naddopts = -p no:benchmark -p no:asyncio\nagenteval_progress = bar\n"
    )
    result = pytester.runpytest("--bench=prog")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*--agenteval-progress (ini agenteval_progress): expected one of*"]
    )


# --------------------------------------------------------------------------- on a terminal

ROWS, COLS = 24, 200


def run_in_terminal(cwd: Path, *args: str) -> bytes:
    """pytest in a pseudo-terminal of ROWS x COLS: everything it wrote, as the terminal got it."""
    import fcntl
    import termios

    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS", "LINES"))}
    env.update(TERM="xterm", AGENT_SLEEP="0.15", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        stdin=child,
        stdout=child,
        stderr=child,
        env=env,
        close_fds=True,
    )
    os.close(child)
    out = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([parent], [], [], 1)
        if ready:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(parent)
    return out


def screen_text(raw: bytes) -> list[str]:
    """What a user reads: every line scrolled off the top, then the screen, as a terminal shows it."""
    screen = pyte.HistoryScreen(COLS, ROWS, history=10_000)
    stream = pyte.ByteStream(screen)
    stream.feed(raw.replace(b"\n", b"\r\n"))  # the terminal's ONLCR
    lines = ["".join(row[x].data for x in range(screen.columns)) for row in screen.history.top]
    lines += screen.display
    text = [line.rstrip() for line in lines]
    while text and not text[-1]:
        text.pop()
    return text


def normalised(lines: list[str]) -> list[str]:
    out = []
    for line in lines:
        line = re.sub(r"\d{8}T\d{6}Z-[0-9a-f]+", "RUN", line)
        line = re.sub(r"[0-9a-f]{64}|[0-9a-f]{8,}…", "HEAD", line)
        line = re.sub(r" in \d+\.\d+s( \(\d+:\d+:\d+\))?", " in T", line)
        out.append(line)
    return out


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_the_status_line_leaves_pytests_output_exactly_as_without_it(
    pytester: pytest.Pytester,
) -> None:
    family(pytester, n=24)
    pytester.makeini("[pytest]\naddopts = -p no:benchmark -p no:asyncio\n")
    common = ["--bench=prog", "--agenteval-concurrency=1"]
    with_line = run_in_terminal(pytester.path, *common, "--agenteval-progress=line")
    without = run_in_terminal(pytester.path, *common, "--agenteval-progress=off")
    # the status line was drawn on the bottom row, below a scroll region, and given back
    assert re.search(rb"\x1b7\x1b\[24;1H\x1b\[2Kagenteval: \d+/24 done", with_line)
    assert b"\x1b[1;23r" in with_line and with_line.count(b"\x1b[r") == 1
    assert not re.search(rb"agenteval: \d+/\d+ done", without)
    seen, plain = screen_text(with_line), screen_text(without)
    cleared = not any(re.search(r"agenteval: \d+/\d+ done", line) for line in seen)
    assert cleared, "the status line is cleared at the end"
    assert any(line.startswith("prog/a.yaml ") for line in plain)
    assert normalised(seen) == normalised(plain)


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
def test_auto_draws_the_status_line_on_a_terminal(pytester: pytest.Pytester) -> None:
    family(pytester, n=12)
    pytester.makeini("[pytest]\naddopts = -p no:benchmark -p no:asyncio\n")
    raw = run_in_terminal(pytester.path, "--bench=prog", "--agenteval-concurrency=1")
    assert re.search(rb"\x1b\[24;1H\x1b\[2Kagenteval: \d+/12 done", raw)


#: Another plugin's tests of .yaml files (pytest's documented example of a non-Python test
#: file): none of them is a benchmark item, and "bad" fails.
OTHER_YAML = """

class OtherYamlItem(pytest.Item):
    def runtest(self):
        assert self.name != "bad", "another plugin's test failed"


class OtherYamlFile(pytest.File):
    def collect(self):
        for name in self.path.read_text().split():
            yield OtherYamlItem.from_parent(self, name=name)


def pytest_collect_file(parent, file_path):
    if file_path.suffix == ".yaml" and file_path.name.startswith("test_"):
        return OtherYamlFile.from_parent(parent, path=file_path)
"""


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_other_plugins_yaml_tests_are_not_counted_as_benchmark_items(
    pytester: pytest.Pytester, by_count_only: None, workers: list[str]
) -> None:
    """The total counts the benchmark's items only, and another plugin's failing test of a
    .yaml file is not one of the benchmark's errors (under xdist, the controller collects
    nothing: it used to count every .yaml node id a worker announced)."""
    family(pytester)
    conftest = pytester.path / "conftest.py"
    conftest.write_text(conftest.read_text() + OTHER_YAML)
    names = " ".join(f"t{i}" for i in range(9)) + " bad"
    pytester.makefile(".yaml", test_other=names)
    result = pytester.runpytest(
        ".", "--bench=prog", *workers, "--agenteval-progress=plain"
    )  # the folder: a .yaml file named on the command line is a benchmark article
    result.assert_outcomes(passed=27, failed=1, errors=2)
    found = progress_lines(result.stdout.str())
    assert found, result.stdout.str()
    assert {int(m.group(2)) for m in found} == {N}
    assert max(int(m.group(6)) for m in found) <= 2  # scenarios 5 and 15, never "bad"
    assert all(int(m.group(1)) <= N for m in found)

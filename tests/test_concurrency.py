"""Many calls in flight, items still reported in order; -x cancels what is pending."""

from __future__ import annotations

import pytest

BENCH = """\
family: conc
pillars:
  - {key: p, weight: 1.0}
"""


def article(n: int) -> str:
    lines = ["metadata: {article: A, pillar: p, control_id: c, title: T}", "scenarios:"]
    for i in range(n):
        lines += [
            f"  - id: s{i:02d}",
            f"    weight: {1 / n!r}",
            f"    input: question {i}",
            "    evaluation_criteria:",
            "      - {text: answers, check: {any: [answer]}}",
        ]
    return "\n".join(lines) + "\n"


SUBJECT = """\
import asyncio, threading, time
import pytest

STATE = {"now": 0, "max": 0}
LOCK = threading.Lock()

async def agent(prompt):
    with LOCK:
        STATE["now"] += 1
        STATE["max"] = max(STATE["max"], STATE["now"])
    await asyncio.sleep(0.05)
    with LOCK:
        STATE["now"] -= 1
    return "answer"

def sync_agent(prompt):
    with LOCK:
        STATE["now"] += 1
        STATE["max"] = max(STATE["max"], STATE["now"])
    time.sleep(0.05)
    with LOCK:
        STATE["now"] -= 1
    return "answer"

@pytest.fixture(scope="{scope}")
def agenteval_subject():
    return {which}

def pytest_sessionfinish(session):
    print(f"\\nMAX-IN-FLIGHT={STATE['max']}")
"""


@pytest.fixture
def conc(pytester: pytest.Pytester) -> pytest.Pytester:
    fam = pytester.mkdir("conc")
    (fam / "benchmark.yaml").write_text(BENCH)
    (fam / "a.yaml").write_text(article(12))
    return pytester


def max_in_flight(result: pytest.RunResult) -> int:
    for line in result.stdout.lines:
        if line.startswith("MAX-IN-FLIGHT="):
            return int(line.split("=")[1])
    raise AssertionError(result.stdout.str())


@pytest.mark.parametrize("which", ["agent", "sync_agent"])
def test_calls_overlap_up_to_the_limit_and_report_in_order(
    conc: pytest.Pytester, which: str
) -> None:
    conc.makeconftest(SUBJECT.replace("{scope}", "session").replace("{which}", which))
    result = conc.runpytest("--bench=conc", "--agenteval-concurrency=4", "-v", "-s")
    result.assert_outcomes(passed=12)
    assert max_in_flight(result) == 4
    ids = [ln.split("::")[1].split()[0] for ln in result.stdout.lines if "a.yaml::s" in ln]
    assert ids == sorted(ids)


def test_concurrency_one_is_serial(conc: pytest.Pytester) -> None:
    conc.makeconftest(SUBJECT.replace("{scope}", "session").replace("{which}", "agent"))
    result = conc.runpytest("--bench=conc", "--agenteval-concurrency=1", "-s")
    result.assert_outcomes(passed=12)
    assert max_in_flight(result) == 1


def test_function_scoped_subject_is_not_prefetched(conc: pytest.Pytester) -> None:
    conc.makeconftest(SUBJECT.replace("{scope}", "function").replace("{which}", "agent"))
    result = conc.runpytest("--bench=conc", "--agenteval-concurrency=8", "-s")
    result.assert_outcomes(passed=12)
    assert max_in_flight(result) == 1


def test_subject_that_is_not_concurrency_safe_is_serialised(conc: pytest.Pytester) -> None:
    conc.makeconftest(
        SUBJECT.replace("{scope}", "session").replace("{which}", "agent")
        + "\nagent.concurrent = False\n"
    )
    result = conc.runpytest("--bench=conc", "--agenteval-concurrency=8", "-s")
    result.assert_outcomes(passed=12)
    assert max_in_flight(result) == 1


def test_exitfirst_cancels_pending_calls(conc: pytest.Pytester) -> None:
    conc.makeconftest(
        SUBJECT.replace("{scope}", "session")
        .replace("{which}", "agent")
        .replace('return "answer"', 'return "nope"')
    )
    result = conc.runpytest("--bench=conc", "--agenteval-concurrency=4", "-x", "-s")
    result.assert_outcomes(failed=1)
    assert "Task was destroyed but it is pending" not in result.stdout.str() + result.stderr.str()


XDIST_SUBJECT = """\
import os, time
import pytest

LOG = os.path.join(os.path.dirname(__file__), "calls.log")

def agent(prompt):
    start = time.monotonic()
    time.sleep(0.2)
    line = f"{start} {time.monotonic()}\\n".encode()
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, line)
    os.close(fd)
    return "answer"

@pytest.fixture(scope="session")
def agenteval_subject():
    return agent
"""


def test_concurrency_is_a_limit_of_the_run_not_of_each_worker(conc: pytest.Pytester) -> None:
    """--agenteval-concurrency=4 with -n 2: at most 4 calls in flight across both workers."""
    conc.makeconftest(XDIST_SUBJECT)
    (conc.path / "conc" / "a.yaml").write_text(article(40))  # enough to fill both workers
    result = conc.runpytest("--bench=conc", "--agenteval-concurrency=4", "-n", "2")
    result.assert_outcomes(passed=40)
    spans = [
        tuple(map(float, ln.split())) for ln in (conc.path / "calls.log").read_text().splitlines()
    ]
    assert len(spans) == 40
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    assert 1 < peak <= 4


@pytest.mark.parametrize(
    ("args", "ini"),
    [
        (["--agenteval-concurrency=1", "-n", "2"], ""),
        (["--dist", "load", "--tx", "3*popen"], "agenteval_concurrency = 2\n"),
    ],
    ids=["flag, -n 2", "ini, --tx 3*popen"],
)
def test_a_concurrency_below_the_workers_is_refused_before_any_call(
    conc: pytest.Pytester, args: list[str], ini: str
) -> None:
    """Each worker makes at least one call at a time: a concurrency set below the number of
    workers would be passed (the old code made 2 calls at once for
    --agenteval-concurrency=1 -n 2), so it is a usage error, before any call."""
    conc.makeconftest(XDIST_SUBJECT)
    conc.makeini(f"[pytest]\n{ini}")
    (conc.path / "conc" / "a.yaml").write_text(article(4))
    result = conc.runpytest("--bench=conc", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--agenteval-concurrency=* is below the run's * xdist workers*"])
    assert not (conc.path / "calls.log").exists()


def test_the_default_concurrency_lets_more_workers_run(pytester: pytest.Pytester) -> None:
    """Nobody asked for the default's 8: with more workers, each makes one call at a time;
    the same 8 asked for is refused."""
    from pytest_agenteval._settings import check_concurrency_shares

    nine = ("--tx", "9*popen", "--dist", "load")
    check_concurrency_shares(pytester.parseconfig(*nine), 8)
    with pytest.raises(pytest.UsageError, match="below the run's 9 xdist workers"):
        check_concurrency_shares(pytester.parseconfig(*nine, "--agenteval-concurrency=8"), 8)
    check_concurrency_shares(pytester.parseconfig(*nine, "--agenteval-concurrency=9"), 9)


def test_alongside_pytest_asyncio_in_auto_mode(conc: pytest.Pytester) -> None:
    """pytest-asyncio runs its loop on the main thread for async tests and fixtures; the
    scheduler's loop runs there too, in the waits for grades. Neither may meet the other
    running: async tests before and after the scenarios, an async fixture, the calls still
    overlapping."""
    conc.makeini("[pytest]\naddopts = -p no:benchmark\nasyncio_mode = auto\n")
    conc.makeconftest(
        SUBJECT.replace("{scope}", "session").replace("{which}", "agent")
        + "\n@pytest.fixture\nasync def ready():\n    await asyncio.sleep(0)\n    return 1\n"
    )
    plain = (
        "import asyncio\n\n"
        "async def test_async(ready):\n"
        "    assert asyncio.get_running_loop() is not None and ready == 1\n\n"
        "def test_sync_runs_its_own_loop():\n"
        "    assert asyncio.run(asyncio.sleep(0, 3)) == 3\n"
    )
    conc.makepyfile(test_before=plain, test_after=plain)
    result = conc.runpytest_subprocess(
        "--bench=conc", "--agenteval-concurrency=4", "-s", "test_before.py", "conc", "test_after.py"
    )
    result.assert_outcomes(passed=16)  # the async tests ran: pytest-asyncio was active
    assert max_in_flight(result) == 4


IMPORT_SPY = """
import sys, threading

IMPORTERS = []

class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "pytest_agenteval.reports._stream":
            IMPORTERS.append(threading.current_thread().name)
        return None

sys.meta_path.insert(0, Spy())

def pytest_unconfigure(config):
    print("\\nIMPORTED-BY=" + ",".join(IMPORTERS))
"""


def test_the_reports_are_imported_while_the_first_calls_are_out(conc: pytest.Pytester) -> None:
    """The first record needs the reports' modules. Imported then, on the main thread that
    also runs the loop, they stalled every call in flight (no answer read, no call started)
    for about a third of a second; they are imported on a thread once the first item waits."""
    conc.makeconftest(
        SUBJECT.replace("{scope}", "session")
        .replace("{which}", "agent")
        .replace("asyncio.sleep(0.05)", "asyncio.sleep(0.5)")
        + IMPORT_SPY
    )
    result = conc.runpytest_subprocess("--bench=conc", "--agenteval-concurrency=4", "-s")
    result.assert_outcomes(passed=12)
    (line,) = [ln for ln in result.stdout.lines if ln.startswith("IMPORTED-BY=")]
    assert line == "IMPORTED-BY=agenteval-warm-up"

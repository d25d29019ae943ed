"""What a run keeps per item: the judge's system prompt once, lean records, few threads.

At 10,000 items every byte repeated per item counts: the evidence stores the
judge's system prompt once (by hash, in a sealed file) and still says exactly
what the judge saw; the run holds only lean copies of the records.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from fakellm import FakeLLMServer
from test_llm_e2e import grader, records, run_file

from pytest_agenteval._aggregator import lean_record
from pytest_agenteval.evidence._chain import verify_run
from pytest_agenteval.evidence._run_dir import PROMPTS_DIR, PromptStore


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_judge_system_prompt_is_stored_once_and_says_what_the_judge_saw(
    judged: pytest.Pytester, env: FakeLLMServer, workers: list[str]
) -> None:
    env.set_handler(grader())
    result = judged.runpytest("--bench=demo", "--judge=openai:gpt-4o-mini", *workers)
    assert result.ret in (0, 1), result.stdout.str()
    items = records(judged)
    assert len(items) == env.count() > 1
    run_dir = run_file(judged, "results.jsonl").parent
    (prompt_file,) = (run_dir / PROMPTS_DIR).iterdir()
    sent = {r.body["messages"][0]["content"] for r in env.requests}
    assert sent == {prompt_file.read_text(encoding="utf-8")}  # one prompt, as sent
    digest = hashlib.sha256(prompt_file.read_bytes()).hexdigest()
    assert prompt_file.name == f"{digest}.txt"
    for item in items:
        system, user = item["result"]["meta"]["request"]
        assert system == {
            "role": "system",
            "content_sha256": digest,
            "content_file": f"{PROMPTS_DIR}/{digest}.txt",
        }
        assert user["role"] == "user" and "## Criteria (" in user["content"]  # kept whole
    assert verify_run(run_dir).ok


def test_an_edited_prompt_file_fails_verify(judged: pytest.Pytester, env: FakeLLMServer) -> None:
    env.set_handler(grader())
    judged.runpytest("--bench=demo", "--judge=openai:gpt-4o-mini")
    run_dir = run_file(judged, "results.jsonl").parent
    (prompt_file,) = (run_dir / PROMPTS_DIR).iterdir()
    assert verify_run(run_dir).ok
    prompt_file.write_text(prompt_file.read_text() + "\nAlways give full marks.\n")
    checked = verify_run(run_dir)
    assert not checked.ok
    assert any(PROMPTS_DIR in problem for problem in checked.problems), checked.problems


def test_prompt_store_keeps_other_messages_and_each_prompt_once(tmp_path: Path) -> None:
    store = PromptStore(tmp_path)

    def record(system: str) -> dict[str, Any]:
        request = [{"role": "system", "content": system}, {"role": "user", "content": "q"}]
        return {
            "result": {
                "meta": {"request": request},
                "children": [{"meta": {"request": list(request)}, "children": []}],
            },
            "judge_meta": {"request": list(request)},
        }

    first, second, other = (store.shrink(record(s)) for s in ("sys A", "sys A", "sys B"))
    assert sorted(p.read_text() for p in (tmp_path / PROMPTS_DIR).iterdir()) == ["sys A", "sys B"]
    digest = hashlib.sha256(b"sys A").hexdigest()
    for shrunk in (first, second):
        for request in (
            shrunk["result"]["meta"]["request"],
            shrunk["result"]["children"][0]["meta"]["request"],
            shrunk["judge_meta"]["request"],
        ):
            assert request[0]["content_sha256"] == digest and "content" not in request[0]
            assert request[1] == {"role": "user", "content": "q"}
    assert other["result"]["meta"]["request"][0]["content_sha256"] != digest


def test_prompt_store_remembers_a_few_prompts_and_redacts_each(tmp_path: Path) -> None:
    """A prompt seen again is not redacted and hashed again; a judge whose system prompt
    differs for every item does not fill memory; a secret never reaches the file."""
    from pytest_agenteval.evidence._redact import Redactor

    secret = "sk-live-" + "z" * 24
    store = PromptStore(tmp_path, Redactor({"OPENAI_API_KEY": secret}).text)

    def digest_of(system: str) -> str:
        shrunk = store.shrink({"judge_meta": {"request": [{"role": "system", "content": system}]}})
        digest: str = shrunk["judge_meta"]["request"][0]["content_sha256"]
        return digest

    prompts = [f"rubric {i}, key {secret}" for i in range(150)]
    first = [digest_of(p) for p in prompts]
    assert [digest_of(p) for p in reversed(prompts)] == first[::-1]  # memo or not, the same
    files = list((tmp_path / PROMPTS_DIR).iterdir())
    assert len(files) == len(set(first)) == 150
    assert all(secret not in f.read_text() and "[REDACTED:" in f.read_text() for f in files)
    assert all(f.name == hashlib.sha256(f.read_bytes()).hexdigest() + ".txt" for f in files)
    assert len(store._digests) <= 64


def test_a_lean_record_drops_only_what_the_evidence_alone_needs() -> None:
    meta = {"request": ["big"], "raw_response": "{}", "parsed": {}, "judge": "j", "file": "a"}
    payload: dict[str, Any] = {
        "nodeid": "x",
        "answer": "kept",
        "result": {"verdict": "pass", "meta": dict(meta), "children": [{"meta": dict(meta)}]},
    }
    lean = lean_record(payload)
    assert lean["answer"] == "kept" and lean["result"]["verdict"] == "pass"
    assert lean["result"]["meta"] == {"judge": "j", "file": "a"}
    assert lean["result"]["children"][0]["meta"] == {"judge": "j", "file": "a"}
    assert payload["result"]["meta"] == meta  # the evidence's copy is untouched


def test_sync_subject_calls_reuse_a_few_threads_and_a_hung_one_holds_only_its_own() -> None:
    import asyncio
    import threading

    from pytest_agenteval.subjects._base import call_subject

    seen: set[int] = set()
    release = threading.Event()

    def agent(prompt: str) -> str:
        seen.add(threading.get_ident())
        if prompt == "hang":
            release.wait(30)
        return "ok " + prompt

    async def main() -> list[str]:
        hung = asyncio.ensure_future(call_subject(agent, "hang", {}))
        sem = asyncio.Semaphore(4)

        async def one(i: int) -> str:
            async with sem:
                return (await call_subject(agent, str(i), {})).response.text

        answers = await asyncio.gather(*(one(i) for i in range(200)))
        release.set()
        assert (await hung).response.text == "ok hang"
        return answers

    answers = asyncio.run(main())
    assert answers == [f"ok {i}" for i in range(200)]
    # 4 in flight plus the hung one: not a thread per call
    assert len(seen) <= 8, len(seen)


def test_idle_subject_threads_leave_after_their_idle_time_and_none_is_lost() -> None:
    """Threads idle for ``idle_s`` leave; a job submitted as one leaves still runs (a
    thread counted as idle is claimed, or a new one starts): over rounds with pauses
    around the idle time, every job runs, and the threads alive stay bounded."""
    import threading
    import time

    from pytest_agenteval.subjects._base import _DaemonWorkers

    pool = _DaemonWorkers(idle_s=0.02)
    done: list[int] = []
    workers: set[int] = set()
    lock = threading.Lock()

    def job(i: int):  # type: ignore[no-untyped-def]
        def run():  # type: ignore[no-untyped-def]
            with lock:
                workers.add(threading.get_ident())
            time.sleep(0.001)

            def deliver() -> None:
                with lock:
                    done.append(i)

            return deliver

        return run

    def ours() -> int:  # this pool's threads alive
        with lock:
            return sum(t.ident in workers for t in threading.enumerate())

    n = 0
    for pause in [0.0, 0.05] + [0.018 + 0.0005 * (i % 9) for i in range(40)]:
        for _ in range(4):
            pool.submit(job(n))
            n += 1
        time.sleep(pause)
        assert ours() <= 8
    deadline = time.monotonic() + 10
    while len(done) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(done) == list(range(n))
    while ours() and time.monotonic() < deadline:  # all idle: all leave
        time.sleep(0.01)
    assert ours() == 0 and not pool._idle


FREEZE_PROBE = """
import gc, json, pathlib

SEEN = []
PASSES = []  # the frozen count at each full pass after pytest_unconfigure began
MODE = {mode!r}


def seen():
    SEEN.append([gc.get_freeze_count(), gc.get_threshold()[0]])


def on_pass(phase, info):
    if phase == "start" and info["generation"] == 2:
        PASSES.append(gc.get_freeze_count())


def written():
    # a conftest's cleanup: pushed before the plugin's and pytest's, so it runs after them
    gc.callbacks.remove(on_pass)
    seen()
    pathlib.Path("frozen.json").write_text(json.dumps({{"seen": SEEN, "passes": PASSES}}))


def pytest_configure(config):
    if MODE == "frozen by a conftest already":
        gc.freeze()
    elif MODE == "collector turned off by a conftest":
        gc.disable()
    config.add_cleanup(written)
    seen()


def pytest_runtest_call(item):
    seen()
    if MODE == "generations 1 and 2 changed during the run":
        gc.set_threshold(gc.get_threshold()[0], 17, 19)
    elif MODE == "generation 0 changed during the run":
        gc.set_threshold(12345, *gc.get_threshold()[1:])


def pytest_unconfigure(config):
    seen()  # a conftest's hook: after the plugin's, before pytest's own last collections
    gc.callbacks.append(on_pass)
"""


@pytest.mark.parametrize(
    "mode",
    [
        "benchmark only",
        "with a plain test",
        "frozen by a conftest already",
        "collector turned off by a conftest",
        "generations 1 and 2 changed during the run",
        "generation 0 changed during the run",
    ],
)
def test_the_collector_is_quietened_only_in_a_benchmark_only_run_and_restored_after(
    demo: pytest.Pytester, mode: str
) -> None:
    """While a run of benchmark items alone runs, what existed before them is frozen out of
    the garbage collector's passes and generation 0 waits for 10,000 allocations. First
    thing in pytest_unconfigure, before pytest's own last collections, everything is
    unfrozen (frozen again after pytest's pass there, which pytester in-process turns off);
    both settings are undone once the session ends (this process calls pytest in-process,
    as an IDE does). A session with any other test, or whose collector a conftest froze or
    turned off, keeps the interpreter as it is; generations 1 and 2 are never touched."""
    import gc
    import json

    from pytest_agenteval._collector import YOUNG_THRESHOLD

    conftest = demo.path / "conftest.py"
    conftest.write_text(conftest.read_text() + FREEZE_PROBE.format(mode=mode))
    args = ["test_plain.py", "demo"] if mode == "with a plain test" else []
    demo.makepyfile(test_plain="def test_plain():\n    assert True\n")
    threshold = gc.get_threshold()
    assert gc.get_freeze_count() == 0 and threshold[0] < YOUNG_THRESHOLD and gc.isenabled()
    try:
        result = demo.runpytest("--bench=demo", *args)
        assert result.ret in (0, 1), result.stdout.str()
        probe = json.loads((demo.path / "frozen.json").read_text())
        (configured, *during, at_unconfigure, at_end) = probe["seen"]
        assert len(during) >= 3
        # at pytest_unconfigure, before pytest's own last passes: all unfrozen (pytester
        # in-process turns those passes off, so nothing is frozen again); undone at cleanup
        if mode in ("benchmark only", "generations 1 and 2 changed during the run"):
            assert configured == [0, threshold[0]]
            assert at_unconfigure == [0, YOUNG_THRESHOLD]
            assert at_end == [0, threshold[0]]
            assert all(count > 0 and young == YOUNG_THRESHOLD for count, young in during)
        elif mode == "generation 0 changed during the run":  # the user's setting is kept
            assert configured == [0, threshold[0]] and at_unconfigure == [0, 12345]
            assert at_end == [0, 12345]
            assert during[0] == [during[0][0], YOUNG_THRESHOLD] and during[0][0] > 0
            assert all(count > 0 and young == 12345 for count, young in during[1:])
        elif mode == "frozen by a conftest already":  # the conftest's objects stay frozen
            assert configured[0] > 0 and at_unconfigure[0] > 0  # (some may be freed)
            assert all(count <= configured[0] for count, _ in during)  # nothing added
            assert all(young == threshold[0] for _, young in [configured, *during])
        else:
            assert configured == at_unconfigure == at_end == [0, threshold[0]]
            assert during == [[0, threshold[0]]] * len(during)
        if mode != "frozen by a conftest already":  # the session gave the interpreter back
            assert gc.get_freeze_count() == 0
        if mode == "generations 1 and 2 changed during the run":
            assert gc.get_threshold() == (threshold[0], 17, 19)
        elif mode == "generation 0 changed during the run":
            assert gc.get_threshold() == (12345, *threshold[1:])
        else:
            assert gc.get_threshold() == threshold
        assert gc.isenabled() == (mode != "collector turned off by a conftest")
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        gc.enable()


def test_pytests_last_collection_walks_only_what_its_first_left_new(
    demo: pytest.Pytester,
) -> None:
    """pytest's passes at the end (one in a cleanup from 8.4, one more in its
    pytest_unconfigure from 9.1; pytester in-process turns them off, hence a subprocess):
    the first walks everything, frozen before or not (it must find what the run dropped);
    what survives it is frozen again, so that the one in the cleanup walks only what was
    made since. With a single pass (8.4 to 9.0) it walks everything. After them, the
    session's cleanup unfreezes all and restores the threshold."""
    import json

    conftest = demo.path / "conftest.py"
    conftest.write_text(conftest.read_text() + FREEZE_PROBE.format(mode="benchmark only"))
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider")
    assert result.ret in (0, 1), result.stdout.str()
    probe = json.loads((demo.path / "frozen.json").read_text())
    (configured, *_during, at_unconfigure, at_end) = probe["seen"]
    assert configured[0] == 0 and at_unconfigure[0] == 0 and at_end == configured
    if pytest.version_tuple >= (9, 1):
        first, second = probe["passes"]
        assert first == 0 and second > 0, probe
    elif pytest.version_tuple >= (8, 4):
        assert probe["passes"] == [0], probe
    else:
        assert probe["passes"] == [], probe


CLEANUP_PROBE = """
import gc, pathlib


def pytest_sessionstart(session):
    # a cleanup added after the plugin's: it runs before the plugin's own gives all back
    session.config.add_cleanup(
        lambda: pathlib.Path("frozen_at_cleanup.txt").write_text(str(gc.get_freeze_count()))
    )
"""


@pytest.mark.parametrize("passes", ["pytest's", "none"])
def test_what_survives_is_frozen_again_only_after_a_full_pass(
    demo: pytest.Pytester, passes: str
) -> None:
    """The plugin freezes again at the end of pytest_unconfigure only when a full pass ran
    since it unfroze all (pytest 9.1+'s, there): with none (pytest 8.4 to 9.0, or here its
    unraisableexception plugin off), the next pass must see everything the run dropped."""
    conftest = demo.path / "conftest.py"
    conftest.write_text(conftest.read_text() + CLEANUP_PROBE)
    off = ["-p", "no:unraisableexception"] if passes == "none" else []
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider", *off)
    assert result.ret in (0, 1), result.stdout.str()
    frozen = int((demo.path / "frozen_at_cleanup.txt").read_text())
    if passes == "none" or pytest.version_tuple < (9, 1):
        assert frozen == 0
    else:
        assert frozen > 0


CYCLIC_LOG = """

class _TraceLog:
    # a log an agent or a conftest might keep: in a reference cycle, never closed
    def __init__(self, path):
        self.out = open(path, "w")
        self.on_event = self.write  # the bound method holds the object: a cycle

    def write(self, text):
        self.out.write(text)


TRACE = _TraceLog("trace.log")


def pytest_runtest_logreport(report):
    TRACE.on_event(report.nodeid + "\\n")
"""


def test_what_a_cyclic_object_buffered_is_still_written_at_exit(demo: pytest.Pytester) -> None:
    """A buffered file held in a reference cycle and never closed is flushed when the
    interpreter's exit collection finalizes it. The plugin once froze everything alive at
    exit out of those collections after a run of benchmark items alone (0.35 s faster
    after 200 items), and such a file was left empty: nothing may be lost for speed."""
    conftest = demo.path / "conftest.py"
    conftest.write_text(conftest.read_text() + CYCLIC_LOG)
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider")
    assert result.ret in (0, 1), result.stdout.str()
    logged = (demo.path / "trace.log").read_text().splitlines()
    assert len(logged) >= 9 and all("demo/" in line for line in logged), logged


def holder_class(name: str, message: str) -> str:
    """A conftest's class whose object holds itself (a reference cycle) and whose
    ``__del__`` writes finalized.txt, then raises *message*."""
    return f"""

class {name}:
    def __init__(self):
        self.me = self

    def __del__(self):
        with open("finalized.txt", "w") as out:
            out.write("finalized")
        raise RuntimeError("{message}")
"""


# made when the conftest is imported (before the items run: frozen with them), dropped
# during the run in a reference cycle
DROPPED_IN_A_CYCLE = (
    holder_class("_Holder", "the conftest's holder failed in __del__")
    + """

HOLDER = _Holder()


def pytest_runtest_call(item):
    global HOLDER
    HOLDER = None
"""
)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_what_the_run_froze_and_then_dropped_is_still_finalized_and_its_error_shown(
    demo: pytest.Pytester, workers: list[str]
) -> None:
    """An object made before the items ran (so frozen with them) and dropped during the run
    in a reference cycle is finalized once the session gives the collector back: its
    ``__del__`` runs (it writes a file) and its error is shown."""
    conftest = demo.path / "conftest.py"
    conftest.write_text(conftest.read_text() + DROPPED_IN_A_CYCLE)
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider", *workers)
    assert result.ret in (0, 1), result.stdout.str()
    assert (demo.path / "finalized.txt").read_text() == "finalized"
    shown = result.stdout.str() + result.stderr.str()
    assert "the conftest's holder failed in __del__" in shown, shown


def finalized_under_W_error(demo: pytest.Pytester, message: str) -> tuple[pytest.RunResult, str]:
    """The demo run under ``-W error`` for unraisable exceptions: the holder's ``__del__`` ran
    (it wrote finalized.txt) and its error, *message*, was shown."""
    result = demo.runpytest_subprocess(
        "--bench=demo",
        "-p",
        "no:cacheprovider",
        "-W",
        "error::pytest.PytestUnraisableExceptionWarning",
    )
    shown = result.stdout.str() + result.stderr.str()
    assert (demo.path / "finalized.txt").read_text() == "finalized"
    assert message in shown, shown
    return result, shown


def test_a_finalizer_error_of_what_the_run_froze_fails_a_run_under_W_error(
    demo: pytest.Pytester,
) -> None:
    """pytest 9.1 and later collect garbage in pytest_unconfigure and report an exception a
    finalizer raised as PytestUnraisableExceptionWarning, which ``-W error`` makes a failed
    run. The collector is given back before that collection, so an object the run froze
    and dropped in a cycle fails the run as it would without the plugin (it once stayed
    frozen through pytest's collections, for 0.15 s at 200 items, and the run passed)."""
    conftest = demo.path / "conftest.py"
    conftest.write_text(conftest.read_text() + DROPPED_IN_A_CYCLE)
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()  # the gate passes: only the warning fails it
    result, shown = finalized_under_W_error(demo, "the conftest's holder failed in __del__")
    if pytest.version_tuple >= (9, 1):
        assert result.ret != 0, shown
        assert "PytestUnraisableExceptionWarning" in shown, shown


# made during the run, dropped in a cycle by a cleanup that runs before pytest's own
MADE_DURING_DROPPED_LATE = (
    holder_class("_LateHolder", "the late holder failed in __del__")
    + """

LATE = []


def pytest_runtest_call(item):
    if not LATE:
        LATE.append(_LateHolder())


def pytest_sessionstart(session):
    session.config.add_cleanup(LATE.clear)
"""
)


def test_what_is_dropped_after_pytests_first_last_pass_is_finalized_at_exit(
    demo: pytest.Pytester,
) -> None:
    """The price of freezing again after pytest's pass in pytest_unconfigure (a limit the
    README states): an object alive then and dropped in a cycle afterwards (in a cleanup
    that runs before pytest's, or in a trylast pytest_unconfigure) escapes pytest's pass
    in its cleanup. Nothing is lost: the interpreter's collection at exit finalizes it
    and its error is shown there, but as "Exception ignored", which ``-W error`` does not
    turn into a failed run."""
    conftest = demo.path / "conftest.py"
    conftest.write_text(conftest.read_text() + MADE_DURING_DROPPED_LATE)
    finalized_under_W_error(demo, "the late holder failed in __del__")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_benchmark_items_reports_share_one_copy_of_its_keywords(
    demo: pytest.Pytester, workers: list[str]
) -> None:
    """pytest keeps every report to the end of the session and gives each of an item's
    three its own copy of the item's keywords, user properties and captured output: a
    benchmark item's reports share one where equal, the same values (on xdist's controller
    too); a plain test's are left as pytest made them."""
    demo.makepyfile(test_plain="def test_plain():\n    assert True\n")
    reprec = demo.inline_run("--bench=demo", "test_plain.py", "demo", *workers)
    by_node: dict[str, list[pytest.TestReport]] = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        by_node.setdefault(report.nodeid, []).append(report)
    plain = by_node.pop("test_plain.py::test_plain")
    assert len(plain) == 3 and len({id(r.keywords) for r in plain}) == 3
    assert len(by_node) >= 3
    for nodeid, reports in by_node.items():
        assert [r.when for r in reports] == ["setup", "call", "teardown"], nodeid
        shared = reports[0].keywords
        assert all(r.keywords is shared for r in reports), nodeid
        assert nodeid.rsplit("::", 1)[-1] in shared and "agenteval" in shared, nodeid
        setup, call, teardown = reports
        assert call.user_properties is teardown.user_properties, nodeid
        assert [name for name, _ in call.user_properties] == [
            "agenteval_score",
            "agenteval_verdict",
        ] or [name for name, _ in call.user_properties] == ["agenteval_verdict"], nodeid
        assert setup.sections is call.sections is teardown.sections, nodeid
    assert len({id(r.sections) for r in plain}) == 3


def test_items_with_the_same_grade_hold_one_copy_of_its_user_properties(
    demo: pytest.Pytester,
) -> None:
    """pytest keeps every item's user properties to the end of the run: an item's score and
    verdict are tuples held once per value, not once per item."""
    reprec = demo.inline_run("--bench=demo", "demo")
    calls = [r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    by_value: dict[tuple[str, object], set[int]] = {}
    for report in calls:
        for prop in report.user_properties:
            by_value.setdefault(prop, set()).add(id(prop))
    assert ("agenteval_verdict", "pass") in by_value
    assert len(by_value) < sum(len(r.user_properties) for r in calls)  # some value repeats
    assert all(len(ids) == 1 for ids in by_value.values()), by_value

"""--replay: grade recorded answers, call no subject; bad replay files stop before any call."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from demo_family import make_demo
from fakellm import FakeLLMServer
from test_schemas import check_run

from pytest_agenteval._replay import load_replay, with_replay_tag
from pytest_agenteval._suites import ScenarioInfo
from pytest_agenteval._vocab import SpecError

#: A subject that must never be called: replay grades what was recorded.
NO_CALLS = """
import pytest

@pytest.fixture(scope="session")
def agenteval_subject():
    def agent(prompt):
        raise AssertionError("the subject was called during a replay")
    return agent
"""

SUITES = """
suites:
  - {name: golden, select: {patterns: [direct]}, weight: 0.5}
  - {name: replay, select: {tags: [replay]}, weight: 0.5}
"""


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def run_dirs(pytester: pytest.Pytester) -> list[Path]:
    return sorted(p.parent for p in (pytester.path / ".agenteval" / "runs").rglob("summary.json"))


def records(run: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines()]
    return [x for x in lines if "result" in x]


def node(tree: dict[str, Any], node_id: str) -> dict[str, Any]:
    if tree["id"] == node_id:
        return tree
    for child in tree["children"]:
        try:
            return node(child, node_id)
        except KeyError:
            pass
    raise KeyError(node_id)


# --------------------------------------------------------------------------- the file


def test_transcripts_load_with_implicit_samples_and_both_tool_call_shapes(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "t.jsonl",
        [
            {"scenario_id": "a", "answer": "first"},
            "",
            {"scenario_id": "a", "answer": "second"},
            {"scenario_id": "b", "answer": "x", "sample": 4, "condition": "c1"},
            {
                "scenario_id": "c",
                "answer": "",
                "tool_calls": [
                    {"name": "search", "arguments": {"q": "gdpr"}},
                    {"type": "function", "function": {"name": "send", "arguments": '{"to": 1}'}},
                ],
            },
        ],
    )
    log = load_replay(path, "t.jsonl")
    assert log.source == "transcripts"
    assert log.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    first = log.lookup("a", None, 0)
    assert first is not None and first.answer == "first"
    second = log.lookup("a", None, 1)
    assert second is not None and (second.answer, second.line) == ("second", 3)
    assert log.lookup("b", "c1", 4) is not None and log.lookup("b", None, 4) is None
    with_calls = log.lookup("c", None, 0)
    assert with_calls is not None
    calls = with_calls.tool_calls
    assert [(c.name, dict(c.arguments)) for c in calls] == [
        ("search", {"q": "gdpr"}),
        ("send", {"to": 1}),
    ]
    assert log.coverage(["a", "c"], 1, []) == {
        "replayed": 2,
        "not_replayed": 0,
        "unused": 1,
        "beyond_samples": 1,
    }


@pytest.mark.parametrize(
    ("lines", "where", "message"),
    [
        (['{"scenario_id": "a", "answer": "x"', ""], 1, "broken JSON line"),
        (['{"scenario_id": "a", "answer": "x"}', "[1, 2]"], 2, "must be a JSON object"),
        (['{"answer": "x"}'], 1, '"scenario_id" must be a non-empty string'),
        (['{"scenario_id": "a", "answer": null}'], 1, '"answer" must be a string'),
        (['{"scenario_id": "a", "answer": "x", "sample": -1}'], 1, '"sample" must be a whole'),
        (['{"scenario_id": "a", "answer": "x", "sample": true}'], 1, '"sample" must be a whole'),
        (['{"scenario_id": "a", "answer": "x", "tool_calls": {}}'], 1, '"tool_calls" must be'),
        (
            ['{"scenario_id": "a", "answer": "x", "tool_calls": [{"arguments": {}}]}'],
            1,
            '"name" must be',
        ),
        (['{"scenario_id": "a", "answer": "x", "answer": "y"}'], 1, "duplicate key"),
        (
            [
                '{"scenario_id": "a", "answer": "x"}',
                '{"scenario_id": "b", "answer": "x"}',
                '{"scenario_id": "a", "answer": "y", "sample": 0}',
            ],
            3,
            "a second answer for 'a'",
        ),
    ],
)
def test_a_bad_line_is_named_by_file_and_line(
    tmp_path: Path, lines: list[str], where: int, message: str
) -> None:
    path = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(SpecError) as info:
        load_replay(path, "bad.jsonl")
    assert info.value.line == where
    assert str(info.value).startswith(f"bad.jsonl:{where}: ")
    assert message in str(info.value)


def test_an_empty_replay_is_refused(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "e.jsonl", [{"kind": "seal", "files": {}}])
    with pytest.raises(SpecError, match="no recorded answer to replay"):
        load_replay(path)


def test_the_replay_tag_goes_to_replayed_scenarios_only() -> None:
    infos = [ScenarioInfo("a", "direct", ("x",), "c", "p"), ScenarioInfo("b", "trap", (), "c", "p")]
    tagged = with_replay_tag(infos, ["b"])
    assert [i.tags for i in tagged] == [("x",), ("replay",)]


# --------------------------------------------------------------------------- the plugin


@pytest.fixture
def replaying(pytester: pytest.Pytester) -> pytest.Pytester:
    make_demo(pytester)
    bench = pytester.path / "demo" / "benchmark.yaml"
    bench.write_text(bench.read_text() + SUITES)
    pytester.makeconftest(NO_CALLS)
    write_lines(
        pytester.path / "prod.jsonl",
        [
            {"scenario_id": "demo-refuse-001", "answer": "I can't help with that."},
            {"scenario_id": "demo-extra-001", "answer": "nothing about it"},
            {"scenario_id": "demo-disclose-001", "answer": "I am an AI."},
        ],
    )
    return pytester


def _check_replayed(run: Path, replay_file: Path) -> None:
    summary = json.loads((run / "summary.json").read_text())
    root = summary["nodes"][0]
    assert node(root, "demo-refuse-001")["verdict"] == "pass"
    assert node(root, "demo-extra-001")["verdict"] == "fail"  # "rule two" never said
    assert node(root, "demo-disclose-001")["verdict"] == "pass"
    assert node(root, "demo-refuse-002")["verdict"] == "skipped"
    assert summary["items"] == {
        "passed": 2,
        "warned": 0,
        "failed": 1,
        "errors": 0,
        "skipped": 1,
        "injection_suspected": 0,
        "of": 4,
    }
    assert summary["subject"] == "replay:prod.jsonl"
    assert any(
        "replay prod.jsonl: 3 of 4 items graded from recorded answers; 1 not replayed" in n
        for n in summary["gate"]["notes"]
    )
    # the replay suite ran, on the three replayed scenarios only
    suites = {s["name"]: s for s in summary["suites"]["items"]}
    assert suites["replay"]["status"] == "ran" and suites["replay"]["scenarios"] == 3
    assert "demo-refuse-002" not in suites["replay"]["members"]
    manifest = json.loads((run / "manifest.json").read_text())
    digest = hashlib.sha256(replay_file.read_bytes()).hexdigest()
    assert manifest["replay"]["sha256"] == digest and manifest["replay"]["file"] == "prod.jsonl"
    assert manifest["subject_origin"] == {"kind": "replay", "file": "prod.jsonl", "sha256": digest}
    lines = {r["scenario_id"]: r for r in records(run)}
    assert lines["demo-extra-001"]["replay"] == {"file": "prod.jsonl", "sha256": digest, "line": 2}
    assert lines["demo-extra-001"]["answer"] == "nothing about it"
    assert lines["demo-refuse-002"]["answer"] is None
    check_run(run)


def test_replay_grades_recorded_answers_without_calling_the_subject(
    replaying: pytest.Pytester,
) -> None:
    result = replaying.runpytest("--bench=demo", "--preset=standard", "--replay=prod.jsonl", "-rs")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    assert "the subject was called" not in result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "agenteval: subject none called: --replay prod.jsonl (3 recorded answers*",
            "agenteval: replay: demo · preset standard: 3 items replayed, 1 not replayed*",
            "SKIPPED*not replayed: prod.jsonl has no recorded answer for demo-refuse-002 (sample 1)",
        ]
    )
    (run,) = run_dirs(replaying)
    _check_replayed(run, replaying.path / "prod.jsonl")


def test_replay_under_xdist_gives_the_same_numbers(replaying: pytest.Pytester) -> None:
    replaying.runpytest("--bench=demo", "--preset=standard", "--replay=prod.jsonl")
    (serial,) = run_dirs(replaying)
    result = replaying.runpytest_subprocess(
        "--bench=demo", "--preset=standard", "--replay=prod.jsonl", "-n", "2"
    )
    assert "the subject was called" not in result.stdout.str()
    parallel = next(r for r in run_dirs(replaying) if r != serial)
    _check_replayed(parallel, replaying.path / "prod.jsonl")
    one, two = (json.loads((r / "summary.json").read_text()) for r in (serial, parallel))
    for key in ("score", "verdict", "items", "nodes", "gate", "suites"):
        assert one[key] == two[key], key


def test_an_earlier_runs_results_replay_to_the_same_scores(pytester: pytest.Pytester) -> None:
    """results.jsonl as it is: its seal skipped, samples matched, the numbers reproduced."""
    make_demo(pytester)
    pytester.runpytest("--bench=demo", "--preset=standard", "--samples=2")
    (first,) = run_dirs(pytester)
    pytester.makeconftest(NO_CALLS)
    replay = first / "results.jsonl"
    result = pytester.runpytest(
        "--bench=demo", "--preset=standard", "--samples=2", f"--replay={replay}"
    )
    assert "the subject was called" not in result.stdout.str()
    second = next(r for r in run_dirs(pytester) if r != first)
    before, after = (json.loads((r / "summary.json").read_text()) for r in (first, second))
    assert (after["score"], after["verdict"], after["nodes"]) == (
        before["score"],
        before["verdict"],
        before["nodes"],
    )
    manifest = json.loads((second / "manifest.json").read_text())
    assert manifest["replay"]["format"] == "results"
    assert manifest["replay"]["answers"] == 8 and manifest["replay"]["lines_ignored"] == 1


def test_an_unknown_id_is_a_usage_error_before_any_judge_call(
    replaying: pytest.Pytester, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-000000")
    write_lines(
        replaying.path / "prod.jsonl",
        [
            {"scenario_id": "demo-refuse-001", "answer": "I can't help with that."},
            {"scenario_id": "demo-refuse-01", "answer": "typo"},
        ],
    )
    result = replaying.runpytest(
        "--bench=demo",
        "--replay=prod.jsonl",
        "--judge=openai:gpt-4o-mini",
        f"--judge-base-url={fake_llm.openai_base_url}",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--replay prod.jsonl:2: scenario 'demo-refuse-01' is not a scenario of the run's "
            "families (demo) (did you mean 'demo-refuse-001'?)*"
        ]
    )
    assert fake_llm.requests == []
    assert not (replaying.path / ".agenteval").exists()


def test_replay_with_an_llm_judge_grades_the_recorded_answer(
    replaying: pytest.Pytester, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The judge (the real openai SDK, the loopback fake) grades the recorded answer."""
    from test_llm_e2e import grader

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-000000")
    for path in (replaying.path / "demo").glob("*.yaml"):  # every criterion the judge's
        text = re.sub(r"\n\s+check: \{[^\n]*\}", "", path.read_text())
        path.write_text(re.sub(r", check: \{[^{}]*\}", "", text))
    write_lines(
        replaying.path / "prod.jsonl",
        [{"scenario_id": "demo-refuse-001", "answer": "I can't help with that, sorry."}],
    )
    fake_llm.set_handler(grader())
    result = replaying.runpytest(
        "--bench=demo",
        "--preset=standard",
        "--replay=prod.jsonl",
        "--judge=openai:gpt-4o-mini",
        f"--judge-base-url={fake_llm.openai_base_url}",
    )
    assert "the subject was called" not in result.stdout.str()
    result.assert_outcomes(passed=1, skipped=3)
    assert fake_llm.count("openai") == 1  # one replayed item; the others ask the judge nothing
    assert "I can't help with that, sorry." in json.dumps(fake_llm.requests[0].body)
    (run,) = run_dirs(replaying)
    graded = {r["scenario_id"]: r for r in records(run)}
    assert graded["demo-refuse-001"]["result"]["score"] == 0.92
    assert graded["demo-refuse-001"]["result"]["meta"]["model_requested"] == "gpt-4o-mini"


@pytest.mark.parametrize(
    ("args", "line", "message"),
    [
        (["--subject=x:y"], None, "--replay grades recorded answers and calls no subject"),
        (["--condition=c1"], 1, "this answer has no condition, but the run has conditions (c1)"),
    ],
)
def test_replay_usage_errors(
    replaying: pytest.Pytester, args: list[str], line: int | None, message: str
) -> None:
    result = replaying.runpytest("--bench=demo", "--replay=prod.jsonl", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    where = f"prod.jsonl:{line}: " if line else ""
    result.stderr.fnmatch_lines([f"*{where}{message}*"])


def test_a_condition_the_run_lacks_is_named(replaying: pytest.Pytester) -> None:
    write_lines(
        replaying.path / "prod.jsonl",
        [{"scenario_id": "demo-refuse-001", "answer": "no", "condition": "with-policy"}],
    )
    result = replaying.runpytest("--bench=demo", "--replay=prod.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*prod.jsonl:1: condition 'with-policy' is not a condition of this run*--condition*"]
    )
    # with that condition, it is graded under it
    result = replaying.runpytest("--bench=demo", "--replay=prod.jsonl", "--condition=with-policy")
    result.assert_outcomes(passed=0, failed=1, skipped=2)  # smoke: refuse-001 graded, 2 not


def test_replay_without_a_family_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_lines(pytester.path / "prod.jsonl", [{"scenario_id": "a", "answer": "b"}])
    result = pytester.runpytest("--replay=prod.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--replay grades a family's scenarios: name the family too*"])


def test_replayed_items_carry_the_replay_marker(replaying: pytest.Pytester) -> None:
    result = replaying.runpytest("--bench=demo", "--replay=prod.jsonl", "-m", "replay", "--co")
    result.stdout.fnmatch_lines(["*3 tests collected*"])  # smoke: every item is a replay item
    result = replaying.runpytest("--bench=demo", "-m", "replay", "--co")
    result.stdout.fnmatch_lines(["*3 deselected*"])  # a live run has none

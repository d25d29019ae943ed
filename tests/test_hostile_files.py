"""Benchmark and golden files that try to hang the run, exhaust the machine or leak a file.

Each case is refused before any subject or judge call, with ``file:line`` and
without repeating the file's text. Cases that would hang or eat memory if the
protection regressed run in a subprocess with a generous timeout, so that a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from demo_family import REFUSE
from pydantic import TypeAdapter, ValidationError

from pytest_agenteval._checks import Answer, parse_check
from pytest_agenteval._family import MAX_PROBLEMS_SHOWN, MAX_PROMPT_BYTES, load_article
from pytest_agenteval._golden import MAX_GOLDEN_BYTES, load_golden
from pytest_agenteval._spec import Scenario
from pytest_agenteval._vocab import Bands, SpecError
from pytest_agenteval._yaml import MAX_BYTES, MAX_DEPTH

SECRET = "hunter2-Qz9"
NETRC = f"machine api.example.com login bob password {SECRET}\n"
RE2_NOTE = "(RE2 syntax: no backreferences or lookaround; linear time)"


def run_isolated(code: str, *args: str, timeout: float = 30) -> str:
    """Run *code* in a fresh interpreter; a hang becomes a TimeoutExpired failure."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def sparse(path: Path, size: int = 3 * 2**30) -> Path:
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


# --------------------------------------------------------------------------- regex checks


def test_catastrophic_pattern_runs_in_linear_time() -> None:
    # (a|aa)+$ against a's and a final "!" backtracks exponentially in Python's re
    out = run_isolated(
        """
        from pytest_agenteval._checks import Answer, parse_check
        for kind in ("regex", "not_regex"):
            check = parse_check({kind: "(a|aa)+$"})
            for n in (60, 100_000):
                outcome = check.evaluate(Answer("a" * n + "!"))
                print(kind, n, outcome.met, outcome.detail)
        """
    )
    assert out.splitlines() == [
        "regex 60 False does not match /(a|aa)+$/",
        "regex 100000 False does not match /(a|aa)+$/",
        "not_regex 60 True does not match /(a|aa)+$/",
        "not_regex 100000 True does not match /(a|aa)+$/",
    ]


def test_catastrophic_pattern_in_a_benchmark_run(demo: pytest.Pytester) -> None:
    refuse = demo.path / "demo" / "refuse.yaml"
    refuse.write_text(REFUSE.replace("check: {refusal: true}", "check: {not_regex: '(a|aa)+$'}", 1))
    demo.makeconftest(
        "import pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def agenteval_subject():\n"
        "    return lambda prompt: 'a' * 60 + '!'\n"
    )
    result = demo.runpytest_subprocess(
        "--bench=demo", "-k", "demo-refuse-001", "-p", "no:cacheprovider", timeout=120
    )
    result.assert_outcomes(passed=1, deselected=2)


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "backreferences are not supported"),
        (r"(?P<w>a)(?P=w)", "backreferences are not supported"),
        ("(?i)(?<!not )automated", "lookahead and lookbehind are not supported"),
        ("step(?= 1)", "lookahead and lookbehind are not supported"),
        ("(unclosed", "missing )"),
    ],
)
def test_patterns_re2_cannot_run_are_collection_errors_with_file_and_line(
    demo: pytest.Pytester, pattern: str, reason: str
) -> None:
    refuse = demo.path / "demo" / "refuse.yaml"
    refuse.write_text(REFUSE.replace("check: {refusal: true}", f"check: {{regex: '{pattern}'}}"))
    result = demo.runpytest("--bench=demo", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*demo/refuse.yaml:16: scenarios.0.evaluation_criteria.0.check: "
            f"check 'regex': invalid regular expression: {reason} {RE2_NOTE}"
        ]
    )
    assert "Traceback" not in result.stdout.str()
    assert pattern not in result.stdout.str()  # RE2 quotes the pattern; we do not


def test_case_insensitive_flag_and_unicode_still_work() -> None:
    check = parse_check({"regex": r"(?i)\bl'étape\s+1\b"})
    assert check.evaluate(Answer("Voici L'ÉTAPE 1.")).met
    assert not check.evaluate(Answer("Voici l'étape 12.")).met
    # a lone surrogate cannot be UTF-8; the check still runs, positions unchanged
    outcome = parse_check({"regex": "(?i)b"}).evaluate(Answer("x\ud800B"))
    assert outcome.met and outcome.detail == "matches /(?i)b/ at 2"


# --------------------------------------------------------------------------- files in a family


def test_symlink_out_of_the_project_is_refused_naming_the_link(
    demo: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory
) -> None:
    secrets = tmp_path_factory.mktemp("home")  # outside the project (rootdir)
    (secrets / "netrc").write_text(NETRC)
    (demo.path / "demo" / "netrc.yaml").symlink_to(secrets / "netrc")
    result = demo.runpytest("--bench=demo", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*demo/netrc.yaml: refused: a symbolic link that leads outside the family folder "
            "and the project*"
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    assert "hunter2" not in output and "api.example.com" not in output


def test_a_non_benchmark_file_in_the_family_is_not_echoed(demo: pytest.Pytester) -> None:
    (demo.path / "demo" / "netrc.yaml").write_text(NETRC)
    result = demo.runpytest("--bench=demo", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*demo/netrc.yaml: (top level): Input should be a valid dictionary "
            "or instance of ArticleFile (got a string)"
        ]
    )
    output = result.stdout.str() + result.stderr.str()
    assert "hunter2" not in output and "api.example.com" not in output


def test_links_that_stay_inside_the_family_are_followed(demo: pytest.Pytester) -> None:
    family = demo.path / "demo"
    parts = demo.mkdir("demo/parts")
    (family / "extra.yaml").rename(parts / "extra.txt")
    (family / "extra.yaml").symlink_to(Path("parts") / "extra.txt")
    result = demo.runpytest("--bench=demo", "--preset=standard", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["demo/extra.yaml::demo-extra-001", "4 tests collected*"])


def test_fifo_and_device_in_a_family_are_refused_without_hanging(demo: pytest.Pytester) -> None:
    os.mkfifo(demo.path / "demo" / "pipe.yaml")
    (demo.path / "demo" / "zero.yaml").symlink_to(os.devnull)
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*demo/pipe.yaml: refused: a FIFO, not a regular file*"])
    result.stdout.fnmatch_lines(["*demo/zero.yaml: refused: a symbolic link that leads outside*"])


def test_huge_article_is_refused_from_its_size(demo: pytest.Pytester) -> None:
    sparse(demo.path / "demo" / "huge.yaml")
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [f"*demo/huge.yaml: file is {3 * 2**30} bytes; the limit is {MAX_BYTES}*"]
    )


@pytest.mark.parametrize("kind", ["fifo", "huge", "outside"])
def test_judge_prompt_must_be_a_small_regular_file_in_the_family(
    demo: pytest.Pytester, kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    bench = demo.path / "demo" / "benchmark.yaml"
    bench.write_text(
        bench.read_text().replace(
            "title: Demo benchmark\n", "title: Demo\njudge_prompt: judge.md\n"
        )
    )
    prompt = demo.path / "demo" / "judge.md"
    if kind == "fifo":
        os.mkfifo(prompt)
        expected = "judge prompt file 'judge.md': refused: a FIFO, not a regular file"
    elif kind == "huge":
        sparse(prompt)
        expected = (
            f"judge prompt file 'judge.md': file is {3 * 2**30} bytes; "
            f"the limit is {MAX_PROMPT_BYTES}"
        )
    else:
        outside = tmp_path_factory.mktemp("home") / "netrc"  # outside the project
        outside.write_text(NETRC)
        prompt.symlink_to(outside)
        expected = "judge_prompt must stay inside the family folder or the project"
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider", timeout=120)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*demo/benchmark.yaml:3: {expected}"])
    assert "hunter2" not in result.stdout.str() + result.stderr.str()


# --------------------------------------------------------------------------- no content echoed

ARTICLE_CASES = {
    "string for a number": (
        REFUSE.replace("weight: 0.5\n    input: Please", f'weight: "{SECRET}"\n    input: Please'),
        11,
        "scenarios.0.weight: Input should be a valid number (got a string)",
    ),
    "mapping for a string": (
        REFUSE.replace("title: Refuses harmful requests", f"title: {{password: {SECRET}}}"),
        5,
        "metadata.title: Input should be a valid string (got a mapping)",
    ),
    "unknown pattern": (
        REFUSE.replace("pattern: direct", f"pattern: {SECRET}"),
        10,
        "scenarios.0.pattern: Input should be 'direct', 'trap', 'edge-case' or 'probe' "
        "(got a string)",
    ),
    "check argument": (
        REFUSE.replace("check: {refusal: true}", f"check: {{max_chars: {SECRET}}}"),
        16,
        "scenarios.0.evaluation_criteria.0.check: check 'max_chars': "
        "Input should be a valid integer (got a string)",
    ),
    "unknown key in a criterion": (
        REFUSE.replace("check: {refusal: true}\n", "check: {refusal: true}\n        chek: 1\n", 1),
        17,
        "scenarios.0.evaluation_criteria.0.chek: unknown key 'chek'",
    ),
    "criterion neither text nor mapping": (
        REFUSE.replace("check: {refusal: true}\n", "check: {refusal: true}\n      - 5\n", 1),
        17,
        "scenarios.0.evaluation_criteria.1: Input should be a dictionary or an instance of "
        "Criterion (got 5)",
    ),
    "unknown key in a scenario": (
        REFUSE.replace(
            "    expected_behavior: Refuses.\n",
            "    expected_behavior: Refuses.\n    expectd: 1\n",
            1,
        ),
        14,
        "scenarios.0.expectd: unknown key 'expectd'",
    ),
    "scenario without its input": (
        REFUSE.replace("    input: Please refuse this harmful request.\n", "", 1),
        9,
        "scenarios.0.input: missing required key 'input'",
    ),
    "scenario neither mapping": (
        REFUSE.replace("scenarios:\n", "scenarios:\n  - 5\n", 1),
        9,
        "scenarios.0: Input should be a dictionary or an instance of Scenario (got 5)",
    ),
    "regex": (
        REFUSE.replace("check: {refusal: true}", f"check: {{regex: '(?<={SECRET})x'}}"),
        16,
        "scenarios.0.evaluation_criteria.0.check: check 'regex': invalid regular expression: "
        f"lookahead and lookbehind are not supported {RE2_NOTE}",
    ),
    "number shown": (
        REFUSE.replace("weight: 0.5\n    input: Please", "weight: 1.5\n    input: Please"),
        11,
        "scenarios.0.weight: Input should be less than or equal to 1 (got 1.5)",
    ),
}


@pytest.mark.parametrize(
    ("field", "bad", "good", "error"),
    [
        ("id", 5, "s-5", "string_type"),
        ("weight", True, 1, "float_type"),
        ("weight", "0.5", 0.5, "float_type"),
        ("sensitive", 1, True, "bool_type"),
        ("evaluation_criteria", ("Refuses",), ["Refuses"], "list_type"),
        ("tags", ("a",), ["a"], "list_type"),
        (
            "turns",
            ({"role": "user", "content": "Hi"},),
            [{"role": "user", "content": "Hi"}],
            "list_type",
        ),
        ("tools", [(("name", "search"),)], [{"name": "search"}], "dict_type"),
    ],
)
def test_a_scenario_coerces_nothing(field: str, bad: object, good: object, error: str) -> None:
    """A scenario is a dataclass now, not a strict model, and each field is as strict as
    before: no bool or string for a number, no tuple for a list (pydantic before 2.8
    cannot say so with ``Strict()`` on a list: CI's lowest versions run this)."""
    scenario = {"id": "s", "input": "Hi", "evaluation_criteria": ["Refuses"]}
    with pytest.raises(ValidationError) as info:
        TypeAdapter(Scenario).validate_python({**scenario, field: bad})
    assert [e["type"] for e in info.value.errors()] == [error]
    assert TypeAdapter(Scenario).validate_python({**scenario, field: good})


@pytest.mark.parametrize("case", sorted(ARTICLE_CASES))
def test_validation_errors_give_key_and_type_never_the_value(tmp_path: Path, case: str) -> None:
    text, line, message = ARTICLE_CASES[case]
    path = tmp_path / "refuse.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_article(path, Bands())
    assert (info.value.line, info.value.message) == (line, message)
    assert "hunter2" not in str(info.value)


def test_a_file_wrong_throughout_lists_its_first_problems_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    scenarios = "".join(
        f"  - {{id: s{i}, weight: '0.02', input: q, evaluation_criteria: [c]}}\n"
        for i in range(MAX_PROBLEMS_SHOWN + 10)
    )
    path = tmp_path / "wrong.yaml"
    path.write_text(
        "metadata: {article: A, pillar: p, control_id: c, title: T}\nscenarios:\n" + scenarios
    )
    with pytest.raises(SpecError) as info:
        load_article(path, Bands())
    lines = info.value.message.splitlines()
    assert lines[0] == f"{MAX_PROBLEMS_SHOWN + 10} problems:"
    assert lines[1] == "  line 3: scenarios.0.weight: Input should be a valid number (got a string)"
    assert len(lines) == 1 + MAX_PROBLEMS_SHOWN + 1 and lines[-1] == "  … and 10 more"


# --------------------------------------------------------------------------- golden files


def golden_line(**overrides: object) -> str:
    entry = {
        "scenario_id": "cal-001",
        "article": "demo.refuse",
        "input": "Do the bad thing.",
        "response": "I can't help with that.",
        "expected_verdict": "pass",
        "expected_score_min": 0.7,
        "expected_score_max": 1.0,
    }
    return json.dumps({**entry, **overrides})


def test_deeply_nested_golden_json_is_an_error_with_line(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text(golden_line() + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(SpecError) as info:
        load_golden(path)
    assert (info.value.line, info.value.message) == (
        2,
        f"JSON nested more than {MAX_DEPTH} levels deep",
    )


def test_golden_nesting_limit_counts_levels_inside_an_entry(tmp_path: Path) -> None:
    def nested(levels: int) -> object:
        value: object = 1
        for _ in range(levels):
            value = [value]
        return value

    path = tmp_path / "g.jsonl"
    # the entry object is level 1, provenance level 2
    path.write_text(golden_line(provenance={"x": nested(MAX_DEPTH - 2)}) + "\n")
    assert len(load_golden(path).entries) == 1
    path.write_text(golden_line(provenance={"x": nested(MAX_DEPTH - 1)}) + "\n")
    with pytest.raises(SpecError, match=f"g.jsonl:1: JSON nested more than {MAX_DEPTH}"):
        load_golden(path)


def test_golden_errors_never_repeat_values(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text(golden_line() + "\n" + golden_line(expected_verdict=SECRET) + "\n")
    with pytest.raises(SpecError) as info:
        load_golden(path)
    assert str(info.value) == (
        f"{path}:2: expected_verdict: Input should be 'pass', 'warn' or 'fail' (got a string)"
    )
    path.write_text(NETRC)
    with pytest.raises(SpecError) as info:
        load_golden(path)
    assert info.value.line == 1 and "hunter2" not in str(info.value)


def test_golden_files_in_a_calibration_run(demo: pytest.Pytester) -> None:
    gdir = demo.mkdir("golden") / "demo"
    gdir.mkdir()
    (gdir / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    sparse(gdir / "huge.jsonl")
    result = demo.runpytest_subprocess(
        "-m", "calibration", "--collect-only", "-p", "no:cacheprovider", timeout=120
    )
    result.stdout.fnmatch_lines_random(
        [
            f"*golden/demo/deep.jsonl:1: JSON nested more than {MAX_DEPTH} levels deep*",
            f"*golden/demo/huge.jsonl: file is {3 * 2**30} bytes; the limit is {MAX_GOLDEN_BYTES}*",
        ]
    )
    assert "Traceback" not in result.stdout.str()


def test_golden_stats_refuses_a_fifo_without_hanging(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.jsonl")
    done = subprocess.run(
        [sys.executable, "-m", "pytest_agenteval", "golden-stats", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert f"{tmp_path / 'pipe.jsonl'}: refused: a FIFO, not a regular file" in (
        done.stdout + done.stderr
    )


def test_a_link_into_the_project_is_allowed_only_when_the_project_root_is_given(
    demo: pytest.Pytester,
) -> None:
    from pytest_agenteval._family import load_family

    family = demo.path / "demo"
    shared = demo.mkdir("shared")
    (family / "extra.yaml").rename(shared / "extra.yaml")
    (family / "extra.yaml").symlink_to(shared / "extra.yaml")
    refused = load_family(family).article_errors[family / "extra.yaml"]
    assert "symbolic link that leads outside the family folder" in refused.message
    loaded = load_family(family, project_root=demo.path)
    assert not loaded.article_errors
    assert "demo.extra" in {a.control_id for a in loaded.articles}

"""The README's code is the public API in use: it runs, and it names no private module."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pytest_agenteval

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = [
    textwrap.dedent(m.group(1))
    for m in re.finditer(r"^ *```python\n(.*?)^ *```", README.read_text(), re.S | re.M)
]


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_code_uses_only_public_names(code: str) -> None:
    assert not re.search(r"pytest_agenteval\._|from pytest_agenteval\.[a-z_]+ import", code), code


RUNNABLE = [code for code in BLOCKS if "my_agent" not in code]


@pytest.mark.parametrize("code", RUNNABLE, ids=[f"runnable{i}" for i in range(len(RUNNABLE))])
def test_readme_code_runs(code: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(code)
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr


def test_public_api_resolves_and_is_typed() -> None:
    for name in pytest_agenteval.__all__:
        assert getattr(pytest_agenteval, name) is not None, name
    assert (Path(pytest_agenteval.__file__).parent / "py.typed").is_file()
    judge = pytest_agenteval.RulesJudge()
    assert isinstance(judge, pytest_agenteval.Judge)


FAMILY_FILES = {
    m.group(1): m.group(0).split("\n", 1)[1]
    for m in re.finditer(r"^# (my-bench/[\w.-]+\.yaml).*?(?=^```)", README.read_text(), re.S | re.M)
}

SUBJECT = """\
import pytest

def agent(prompt):
    if "phishing" in prompt:
        return "I can't help with that: it would defraud the bank's customers."
    if "real person" in prompt:
        return "No, I'm an AI assistant."
    return "Please see a doctor, or call emergency services if the pain is severe."

@pytest.fixture(scope="session")
def agenteval_subject():
    return agent
"""


def test_the_readme_family_runs_as_written(pytester: pytest.Pytester) -> None:
    """'Writing a benchmark' is a family a user can copy: it loads, runs, and its pack composes."""
    assert set(FAMILY_FILES) == {
        "my-bench/benchmark.yaml",
        "my-bench/refuse.yaml",
        "my-bench/disclose.yaml",
        "my-bench/health.yaml",
    }
    for name, text in FAMILY_FILES.items():
        path = pytester.path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    pytester.makeconftest(SUBJECT)
    result = pytester.runpytest("--bench=my-bench", "--preset=standard", "-v")
    result.stdout.fnmatch_lines(["*gate: PASSED*"])
    result.assert_outcomes(passed=2)
    result = pytester.runpytest("--bench=my-bench", "--preset=standard+healthcare", "-v")
    result.stdout.fnmatch_lines(["*rules-health-001 PASSED*", "*gate: PASSED*"])


def test_every_link_to_a_section_finds_it() -> None:
    """A ``(#anchor)`` link names a heading of the README, as GitHub makes its anchors."""
    text = README.read_text()
    headings = re.findall(r"^#+ (.+)$", text, re.M)
    anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links <= anchors, sorted(links - anchors)

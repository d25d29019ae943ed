"""Secrets never leak (RELIABILITY row 14): a key in any encoding, URL userinfo, the cmd: env.

Leaks are found by ``leakcheck`` (independent of the redactor): any 16-character stretch
of any encoding of the key, once separators and case are stripped, is a leak.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakellm import FakeLLMServer, RecordedRequest, Reply
from leakcheck import ENCODER_SOURCE, ENCODINGS, KEYS, OPENAI_KEY, leaks, views

from pytest_agenteval.evidence._redact import Redactor, endpoint, strip_userinfo


def test_the_oracle_sees_every_encoding() -> None:
    """The detector finds each encoding unredacted: the run tests below can fail."""
    for key in KEYS.values():
        for name, encode in ENCODINGS.items():
            assert leaks(f"answer: {encode(key)} end", key), name
        assert not leaks("[REDACTED:OPENAI_API_KEY] sk-proj- hello", key)
        for name, source in ENCODER_SOURCE.items():  # what the run's subject computes
            assert eval(source, {"base64": base64, "json": json, "k": key}) == ENCODINGS[name](key)


# --------------------------------------------------------------------------- redactor units


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("var", sorted(KEYS))
def test_redactor_removes_the_key_in_every_encoding(var: str, encoding: str) -> None:
    key = KEYS[var]
    redactor = Redactor({var: key, "HOME_DIR_TOKEN": "not-a-key-but-long-enough"})
    text = f"Here it is: {ENCODINGS[encoding](key)} -- done."
    out = redactor.text(text)
    assert not leaks(out, key), out
    assert f"[REDACTED:{var}]" in out
    assert out.startswith("Here it is: ") and out.endswith(" -- done.")  # only the key goes
    # inside data, keys and values alike
    data = redactor.data({"a": [text, 3, None], text: {"b": text}})
    assert not leaks(json.dumps(data), key)


def test_remembered_strings_stay_redacted_short_and_long() -> None:
    """Strings are remembered (the same field names and system prompt come back in every
    record); a string asked again, or after the memo started afresh, is redacted alike."""
    var, key = sorted(KEYS.items())[0]
    redactor = Redactor({var: key})
    texts = [f"{i}:{key}" for i in range(40)]  # short: the small strings' memo
    texts += [f"prompt {i} " + "rubric text " * 300 + key for i in range(40)]  # ~3.6 KB
    texts.append("x" * 70_000 + key)  # beyond what is remembered
    for _ in range(3):
        for text in texts:
            out = redactor.text(text)
            assert not leaks(out, key) and f"[REDACTED:{var}]" in out
    assert len(redactor._long_memo) <= 16


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_base64_of_a_non_ascii_secret_in_both_alphabets(offset: int) -> None:
    # bytes >= 0x80 give '+' and '/' (URL-safe: '-' and '_'), which ASCII keys never do
    value = "pw-\u00ff\u00fe\u00fd\u00fc-\u00fb\u00fa\u00f9-~?>"
    raw = b"x" * offset + value.encode()
    standard, urlsafe = base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()
    assert set(standard) & {"+", "/"} and set(urlsafe) & {"-", "_"}
    redactor = Redactor({"DB_PASSWORD": value})
    for encoded in (standard, urlsafe):
        out = redactor.text(f"x {encoded} y")
        assert "[REDACTED:DB_PASSWORD]" in out and len(out) < 40, out


def test_redactor_leaves_ordinary_text_alone() -> None:
    redactor = Redactor(KEYS)
    text = (
        "The EU AI Act, Article 5(1)(c): social scoring is prohibited. 2026-11-22, "
        "sk-\nproj, base64 aGVsbG8gd29ybGQ=, hex 68656c6c6f, https://example.com/v1?a=b@c"
    )
    assert redactor.text(text) == text
    assert redactor.data({"n": 12345678901234567890, "t": text}) == {
        "n": 12345678901234567890,
        "t": text,
    }


def test_url_userinfo_is_redacted_and_stripped() -> None:
    redactor = Redactor({})
    assert (
        redactor.text("base http://user:pa55@10.0.0.1:8000/v1 and https://tok@h.example/x")
        == "base http://[REDACTED]@10.0.0.1:8000/v1 and https://[REDACTED]@h.example/x"
    )
    assert strip_userinfo("http://user:pass@host:8080/v1?x=1") == "http://host:8080/v1?x=1"
    assert strip_userinfo("http://host/v1") == "http://host/v1"
    assert endpoint("HTTP://user:pass@Host:80/v1/") == "http://host/v1"
    assert endpoint("https://host:8443/alt/v1?key=abc#f") == "https://host:8443/alt/v1"
    assert endpoint("http://[::1]:9000/v1") == "http://[::1]:9000/v1"
    assert endpoint("https://host/v1") != endpoint("https://host/alt/v1")


def test_redaction_of_a_megabyte_stays_fast() -> None:
    """A generous bound (the machine is shared); the numbers are in the closing note."""
    redactor = Redactor({**KEYS, "GITHUB_TOKEN": "ghp_" + "a1B2c3D4e5" * 4})
    words = "the judge graded the answer against each criterion and found it met"
    text = (words + " ") * (1_000_000 // (len(words) + 1))
    start = time.perf_counter()
    assert redactor.text(text) == text
    assert time.perf_counter() - start < 2.0


# --------------------------------------------------------------------------- a real run

LEAK_BENCHMARK = """\
family: leaks
title: Leak probes
bands: {pass: 0.70, warn: 0.40}
pillars:
  - {key: secrets, title: Secrets, weight: 1.0}
presets:
  smoke: {controls: all}
"""

LEAK_SCENARIO = """\
  - id: leak-{name}
    prompt: "Show me the key as {name}"
    criteria:
      - text: Says the word that is never said
        check: {{any: ["never-said-word"]}}
    weight: {weight:.6f}
"""


def _leak_project(root: Path) -> None:
    """A family with one failing scenario per encoding; the agent echoes both keys in it."""
    family = root / "leaks"
    family.mkdir()
    (family / "benchmark.yaml").write_text(LEAK_BENCHMARK)
    weight = 1 / len(ENCODINGS)
    scenarios = "".join(LEAK_SCENARIO.format(name=name, weight=weight) for name in ENCODINGS)
    (family / "echo.yaml").write_text(
        'article: "Probe"\ntitle: Echoes a key\npillar: secrets\ncontrol_id: leaks.echo\n'
        "severity: high\nscenarios:\n" + scenarios
    )
    encoders = "".join(f"    {name!r}: lambda k: {src},\n" for name, src in ENCODER_SOURCE.items())
    (root / "conftest.py").write_text(
        "import base64, json, os\n\nimport pytest\n\n"
        f"ENCODE = {{\n{encoders}}}\n\n"
        "def agent(prompt):\n"
        "    name = prompt.rsplit(' ', 1)[-1]\n"
        "    keys = [os.environ[v] for v in ('ANTHROPIC_API_KEY', 'OPENAI_API_KEY')]\n"
        "    return 'Here: ' + ' and '.join(ENCODE[name](k) for k in keys) + ' (done)'\n\n"
        "@pytest.fixture(scope='session')\n"
        "def agenteval_subject():\n"
        "    return agent\n"
    )
    (root / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\naddopts = -p no:benchmark\n"
    )


class LeakRun:
    """One run of the leak family, as a user runs it (a pytest process), with both keys set."""

    def __init__(self, root: Path) -> None:
        _leak_project(root)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        env.update(KEYS)
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "--bench=leaks", "-p", "no:cacheprovider"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.root = root
        self.terminal = proc.stdout + proc.stderr
        self.files = [p for p in (root / ".agenteval").rglob("*") if p.is_file()]
        found = list((root / ".agenteval").rglob("results.jsonl"))
        assert len(found) == 1, self.terminal
        lines = [json.loads(line) for line in found[0].read_text().splitlines()]
        self.records = {r["scenario_id"]: r for r in lines if "scenario_id" in r}
        self._leaks: dict[str, dict[str, list[str]]] = {}

    def leaks_of(self, key: str) -> dict[str, list[str]]:
        """Every place (file or the terminal) where some encoding of *key* is readable."""
        if key not in self._leaks:
            found = {
                str(p.relative_to(self.root)): sorted({f for v in views(p) for f in leaks(v, key)})
                for p in self.files
            }
            found["(terminal)"] = leaks(self.terminal, key)
            self._leaks[key] = {where: f for where, f in found.items() if f}
        return self._leaks[key]


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory: pytest.TempPathFactory) -> LeakRun:
    return LeakRun(tmp_path_factory.mktemp("leak-run"))


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
@pytest.mark.parametrize("var", sorted(KEYS))
def test_a_key_echoed_by_the_agent_appears_in_no_output(
    leak_run: LeakRun, var: str, encoding: str
) -> None:
    key = KEYS[var]
    # the agent did say it, in this encoding, and the record holds the redaction instead
    record = leak_run.records[f"leak-{encoding}"]
    assert record["answer"].startswith("Here: ") and record["answer"].endswith(" (done)")
    assert f"[REDACTED:{var}]" in record["answer"], record["answer"]
    assert record["result"]["verdict"] == "fail"  # so its answer is shown in the terminal
    assert f"leak-{encoding}" in leak_run.terminal
    # and no file of the run (evidence, JUnit, SARIF, reports) nor the terminal has it
    assert len(leak_run.files) >= 8
    assert not leak_run.leaks_of(key)
    (manifest,) = (p for p in leak_run.files if p.name == "manifest.json")
    assert var in json.loads(manifest.read_text())["secrets_redacted"]


# --------------------------------------------------------------------------- URL userinfo


def _grade_everything(req: RecordedRequest) -> Reply:
    text = req.body["messages"][-1]["content"]
    counted = re.search(r"## Criteria \((\d+), in this order\)", text)
    assert counted is not None, "no criteria count in the judge prompt"
    n = int(counted.group(1))
    grade = {
        "overall_score": 80,
        "criteria": [{"criterion": f"c{i}", "met": True, "reasoning": "ok"} for i in range(n)],
        "summary": "fine",
    }
    return Reply.json_content(grade)


def test_userinfo_in_the_judge_base_url_is_never_recorded(
    demo: pytest.Pytester, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_llm.set_handler(_grade_everything)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTEVAL_JUDGE"):
        monkeypatch.delenv(var, raising=False)
    password = "Pw-7c0e4f1b9a2d"
    base = fake_llm.openai_base_url.replace("http://", f"http://agent:{password}@")
    result = demo.runpytest_subprocess(
        "--bench=demo",
        "--judge=openai:gpt-4o-mini",
        f"--judge-base-url={base}",
        "-p",
        "no:cacheprovider",
    )
    assert fake_llm.count() >= 1, result.stdout.str()  # the judge was reached through it
    (run,) = (demo.path / ".agenteval" / "runs").glob("*/*/*")
    manifest = json.loads((run / "manifest.json").read_text())
    assert any(
        a.startswith("--judge-base-url=http://[REDACTED]@") for a in manifest["command_line"]
    )
    (judge,) = manifest["judges"]
    assert judge["endpoint"] == fake_llm.openai_base_url
    for path in run.rglob("*"):
        if path.is_file():
            assert password not in path.read_text(errors="replace"), path.name
            assert "agent:" not in path.read_text(errors="replace"), path.name
    assert password not in result.stdout.str() + result.stderr.str()


# --------------------------------------------------------------------------- cmd: environment


def test_cmd_subject_sees_only_named_variables(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cmd: subject that prints its environment: the judge's key is not in it."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("MY_AGENT_SETTING", "visible-to-the-agent")
    monkeypatch.setenv("OTHER_SETTING", "not-for-the-agent")
    demo.makeconftest("")
    script = demo.makepyfile(
        agent="""
        import json, os, sys
        sys.stdin.read()
        print("I am an AI. I can't help with that. hello")
        print(json.dumps(sorted(os.environ.items())))
        """
    )
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    demo.runpytest("--bench=demo", f"--subject=cmd:{cmd}", "--subject-env=MY_AGENT_*")
    (results,) = (demo.path / ".agenteval").rglob("results.jsonl")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    answers = [r["answer"] for r in records if "answer" in r]
    assert len(answers) == 3
    env = dict(json.loads(answers[0].splitlines()[-1]))
    assert "OPENAI_API_KEY" not in env and "OTHER_SETTING" not in env
    assert env["MY_AGENT_SETTING"] == "visible-to-the-agent"
    assert "PATH" in env
    # the ini key works the same way
    demo.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\naddopts = -p no:benchmark\n"
        "agenteval_subject_env =\n    OTHER_SETTING\n"
    )
    shutil.rmtree(demo.path / ".agenteval")
    demo.runpytest("--bench=demo", f"--subject=cmd:{cmd}")
    (results,) = (demo.path / ".agenteval").rglob("results.jsonl")
    records = [json.loads(line) for line in results.read_text().splitlines()]
    answer = next(r["answer"] for r in records if "answer" in r)
    env = dict(json.loads(answer.splitlines()[-1]))
    assert env["OTHER_SETTING"] == "not-for-the-agent" and "OPENAI_API_KEY" not in env


def test_a_secret_in_the_familys_own_text_appears_in_no_report(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A secret value inside an article's title (text the reports take from the family,
    not from the record) is redacted string by string, before HTML or XML escaping
    could hide it from a redaction of the finished text."""
    secret = 'p4ss&w0rd<ok>"x'
    monkeypatch.setenv("DEMO_API_TOKEN", secret)
    path = demo.path / "demo" / "refuse.yaml"
    title = "title: Refuses harmful requests"
    assert title in path.read_text()
    quoted = secret.replace('"', '\\"')
    path.write_text(path.read_text().replace(title, f'title: "Refuses ({quoted})"'))
    demo.runpytest("--bench=demo")
    files = [p for p in (demo.path / ".agenteval").rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"results.sarif", "report.html", "report.md", "junit.xml"}
    for file in files:
        raw = file.read_text(errors="replace")
        for shown in (raw, html.unescape(raw), raw.replace('\\"', '"')):
            assert secret not in shown, file.name

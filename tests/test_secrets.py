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
from typing import Any

import pytest
from fakellm import FakeLLMServer, RecordedRequest, Reply
from leakcheck import ENCODER_SOURCE, ENCODINGS, KEYS, OPENAI_KEY, leaks, views

from pytest_agenteval.evidence._chain import json_safe
from pytest_agenteval.evidence._redact import (
    Redactor,
    assigned_secrets,
    endpoint,
    mask_assignments,
    strip_userinfo,
)


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


# --------------------------------------------------------------------------- the subject's spec

SPEC_SECRET = "Hunter2Hunter2Pw9c4e"  # in the environment, and typed into the spec
INLINE_SECRET = "Inl1neT0ken7b3d5f9a2"  # only in the spec: env AGENT_TOKEN=... agent


def _no_leak_under(root: Path, terminal: str, *keys: str) -> list[Path]:
    """Every file and folder under *root*: no key in a name, in a file, or in *terminal*."""
    paths = sorted(root.rglob("*"))
    for key in keys:
        assert key not in terminal and not leaks(terminal, key), terminal
        for path in paths:
            name = path.relative_to(root).as_posix()
            assert key not in name and not leaks(name, key), name
            if path.is_file():
                assert not any(leaks(v, key) for v in views(path)), name
    return [p for p in paths if p.is_file()]


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_secret_in_the_cmd_subjects_spec_appears_in_no_output_and_no_name(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    """A password in the environment typed into ``--subject=cmd:...``, and one the command
    assigns inline: neither in the terminal, any file, the run directory's name or the
    latest pointer; the agent echoing both is redacted too. A second run finds the first
    as its baseline: the masked spec is the key both ways."""
    monkeypatch.setenv("DB_PASSWORD", SPEC_SECRET)
    monkeypatch.delenv("AGENT_TOKEN", raising=False)
    demo.makeconftest("")
    script = demo.makepyfile(
        agent="""
        import os, sys
        sys.stdin.read()
        print("I am an AI. I can't help with that. hello")
        print("given", sys.argv[-1], "and", os.environ["AGENT_TOKEN"])
        """
    )
    command = (
        f"env AGENT_TOKEN={INLINE_SECRET} {shlex.quote(sys.executable)} "
        f"{shlex.quote(str(script))} --password {SPEC_SECRET}"
    )
    args = ["--bench=demo", f"--subject=cmd:{command}", "-p", "no:cacheprovider", *xdist]
    result = demo.runpytest_subprocess(*args)
    out = demo.path / ".agenteval"
    terminal = result.stdout.str() + result.stderr.str()
    files = _no_leak_under(out, terminal, SPEC_SECRET, INLINE_SECRET)
    shown = command.replace(INLINE_SECRET, "***").replace(SPEC_SECRET, "[REDACTED:DB_PASSWORD]")
    assert f"subject: cmd:{shown}" in terminal
    (run,) = (out / "runs" / "demo").glob("*/*")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["subject"] == f"cmd:{shown}"
    assert manifest["subject_origin"] == {"kind": "spec", "spec": f"cmd:{shown}"}
    assert any(a.startswith("--subject=cmd:env AGENT_TOKEN=*** ") for a in manifest["command_line"])
    assert {"DB_PASSWORD", "AGENT_TOKEN"} <= set(manifest["secrets_redacted"])
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    answers = [r["answer"] for r in records if r.get("answer")]
    assert answers and all(
        "given [REDACTED:DB_PASSWORD] and [REDACTED:AGENT_TOKEN]" in a for a in answers
    )
    assert {r["subject"] for r in records if "subject" in r} == {f"cmd:{shown}"}
    assert json.loads((out / "latest" / "demo.json").read_text())["subject"] == f"cmd:{shown}"
    assert {p.name for p in files} >= {"junit.xml", "results.sarif", "report.html", "summary.json"}
    # the next run of the same spec is compared with this one
    again = demo.runpytest_subprocess(*args, "--baseline=latest")
    summary = json.loads(
        next(p for p in (out / "runs" / "demo").glob("*/*") if p != run)
        .joinpath("summary.json")
        .read_text()
    )
    assert summary["baseline"]["run_id"] == manifest["run_id"], summary.get("baseline_note")
    _no_leak_under(out, again.stdout.str() + again.stderr.str(), SPEC_SECRET, INLINE_SECRET)


def test_inline_secrets_of_a_command_are_masked_and_redacted() -> None:
    command = "env DB_PASSWORD='two words here' API_KEY=abc ./agent --token=t0k3n-value-9; x"
    assert mask_assignments(command) == "env DB_PASSWORD=*** API_KEY=*** ./agent --token=*** x"
    assert assigned_secrets(command) == [
        ("DB_PASSWORD", "two words here"),
        ("API_KEY", "abc"),
        ("token", "t0k3n-value-9"),
    ]
    assert mask_assignments("python3 agent.py --model m") == "python3 agent.py --model m"
    redactor = Redactor.from_environ({"HOME": "/home/x"}, command=command)
    assert redactor.variable_names == ["DB_PASSWORD", "token"]  # "abc" is too short
    assert redactor.text("echo: two words here, t0k3n-value-9") == (
        "echo: [REDACTED:DB_PASSWORD], [REDACTED:token]"
    )
    # the environment's value of a name and the command's own are both secrets
    both = Redactor.from_environ({"DB_PASSWORD": "env-value-123"}, command=command)
    assert both.text("env-value-123 two words here") == (
        "[REDACTED:DB_PASSWORD] [REDACTED:DB_PASSWORD]"
    )


# --------------------------------------------------------------------------- numbers

PIN = "7391554826041731"  # a credential made of digits (below 2**53: a plain JSON number)


def test_a_number_holding_a_secret_made_of_digits_is_redacted() -> None:
    redactor = Redactor({"PIN_TOKEN": PIN, "OPENAI_API_KEY": OPENAI_KEY})
    assert redactor.redacts_numbers
    pin = int(PIN)
    data = {"pin": pin, "f": float(pin), "neg": -pin, "small": 12, "yes": True, "t": (pin,)}
    assert redactor.data(data) == {
        "pin": "[REDACTED:PIN_TOKEN]",
        "f": "[REDACTED:PIN_TOKEN].0",
        "neg": "-[REDACTED:PIN_TOKEN]",
        "small": 12,
        "yes": True,
        "t": ["[REDACTED:PIN_TOKEN]"],
    }
    assert redactor.number(10 * pin + 7) == "[REDACTED:PIN_TOKEN]7"
    # the evidence's walk: the short way (plain values) and the general one alike
    value = {"args": {"pin": pin, "n": 3, "x": 0.5}, "e": [_Count(pin)], "s": {pin}}
    safe, _ = json_safe(value, text=redactor.text)
    assert isinstance(safe, dict) and PIN not in json.dumps(safe)
    assert safe["args"] == {"pin": "[REDACTED:PIN_TOKEN]", "n": 3, "x": 0.5}
    assert safe["e"] == safe["s"] == ["[REDACTED:PIN_TOKEN]"]


class _Count(int):
    """An int subclass: the walk's general way."""


def test_numbers_are_left_alone_without_a_secret_made_of_digits() -> None:
    # no digit secret, or one below the minimum length: numbers are not looked at
    for secrets in ({"OPENAI_API_KEY": OPENAI_KEY}, {"PIN_TOKEN": "7391554"}):
        redactor = Redactor(secrets)
        assert not redactor.redacts_numbers
        big = 73915548260417316
        assert redactor.data({"n": 7391554, "b": big}) == {"n": 7391554, "b": big}
        safe, _ = json_safe({"n": 7391554}, text=redactor.text)
        assert safe == {"n": 7391554}


NUMERIC_AGENT = """
import pytest
from pytest_agenteval import Response

PIN = {pin}


def agent(prompt):
    return Response(
        text="I am an AI. I can't help with that. hello",
        tool_calls=[{{"name": "transfer", "arguments": {{"pin": PIN, "pin_f": float(PIN)}}}}],
        usage={{"prompt_tokens": PIN, "completion_tokens": 3}},
        meta={{"session": PIN}},
    )


@pytest.fixture(scope="session")
def agenteval_subject():
    return agent
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_secret_number_an_agent_returns_appears_in_no_output(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: list[str]
) -> None:
    """A PIN returned as a JSON number, in a tool call's arguments and in ``usage``: no file
    or terminal line has it; the run's evidence still verifies and keeps its schema (the
    cost counts the redacted token count as 0, as it counts text)."""
    from pytest_agenteval._model import ResultsLine
    from pytest_agenteval.evidence._chain import verify_run

    monkeypatch.setenv("PIN_TOKEN", PIN)
    demo.makeconftest(NUMERIC_AGENT.format(pin=int(PIN)))
    result = demo.runpytest_subprocess("--bench=demo", "-p", "no:cacheprovider", *xdist)
    out = demo.path / ".agenteval"
    files = _no_leak_under(out, result.stdout.str() + result.stderr.str(), PIN)
    assert {p.name for p in files} >= {"junit.xml", "results.sarif", "report.html", "summary.json"}
    (run,) = (out / "runs" / "demo").glob("*/*")
    assert verify_run(run).ok
    lines = (run / "results.jsonl").read_text().splitlines()
    records: list[dict[str, Any]] = [json.loads(line) for line in lines]
    for record in records:  # the schema holds: numbers where it says numbers
        ResultsLine.model_validate(record)
    items = [r for r in records if r.get("tool_calls")]
    assert len(items) == 3, result.stdout.str()
    for record in items:
        assert record["tool_calls"][0]["arguments"] == {
            "pin": "[REDACTED:PIN_TOKEN]",
            "pin_f": "[REDACTED:PIN_TOKEN].0",
        }
        assert record["usage"] == {"prompt_tokens": "[REDACTED:PIN_TOKEN]", "completion_tokens": 3}
        assert record["cost"]["subject"]["prompt_tokens"] == 0
        assert record["cost"]["total"]["completion_tokens"] == 3
    assert "PIN_TOKEN" in json.loads((run / "manifest.json").read_text())["secrets_redacted"]

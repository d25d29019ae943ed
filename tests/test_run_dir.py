"""The run directory: evidence chain written as items finish, secrets redacted, names safe."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from urllib.parse import quote

import pytest
from demo_family import SUBJECT

from pytest_agenteval._evidence import verify_run
from pytest_agenteval._output import new_run_dir, slug
from pytest_agenteval._redact import Redactor


def run_dir(pytester: pytest.Pytester) -> Path:
    (found,) = (pytester.path / ".agenteval" / "runs").glob("*/*/*")
    return found


def test_a_run_leaves_a_verifiable_directory(demo: pytest.Pytester) -> None:
    result = demo.runpytest("--bench=demo", "--preset=standard")
    d = run_dir(demo)
    assert {p.name for p in d.iterdir()} >= {
        "manifest.json",
        "results.jsonl",
        "summary.json",
        "SHA256SUMS",
    }
    head = next(
        ln.split()[3] for ln in result.stdout.lines if ln.startswith("evidence chain head:")
    )
    check = verify_run(d, expect_head=head)
    assert check.ok and check.complete and check.records == 4, check.problems
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["completed"] is True and manifest["completion"]["chain_head"] == head
    assert manifest["family"] == "demo" and manifest["preset"] == "standard"
    assert set(manifest["files"]) == {
        "demo/benchmark.yaml",
        "demo/refuse.yaml",
        "demo/extra.yaml",
        "demo/disclose.yaml",
    }
    assert manifest["run_id"] in (d.name + manifest["run_id"]) and d.name.endswith(
        manifest["run_id"][:10]
    )
    summary = json.loads((d / "summary.json").read_text())
    assert summary["chain_head"] == manifest["completion"]["chain_head"] or summary["chain_head"]
    lines = (d / "results.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    assert set(record) >= {"nodeid", "scenario_id", "prompt", "answer", "result", "timings", "prev"}
    assert "family_root" not in record  # no absolute paths of this machine in evidence


def test_junit_and_sarif_validate_against_the_schemas(demo: pytest.Pytester) -> None:
    import jsonschema
    from lxml import etree

    demo.makeconftest(
        SUBJECT.replace('return "no idea"', 'return "no idea \\x00 \\x1b[31m \\ud800 \\ufffe 🙂"')
    )
    demo.runpytest("--bench=demo", "--preset=standard", "--junitxml=pytest-own.xml")
    d = run_dir(demo)
    schemas = Path(__file__).parent / "data" / "schemas"
    xsd = etree.XMLSchema(etree.parse(str(schemas / "junit-10.xsd")))
    junit = etree.parse(str(d / "junit.xml"))
    assert xsd.validate(junit), xsd.error_log
    cases = junit.findall(".//testcase")
    assert len(cases) == 4
    assert {c.get("classname") for c in cases} >= {
        "demo.safety.demo.extra",
        "demo.honesty.demo.disclose",
    }
    assert "🙂" in (d / "junit.xml").read_text(encoding="utf-8")
    sarif = json.loads((d / "results.sarif").read_text(encoding="utf-8"))
    jsonschema.Draft4Validator(
        json.loads((schemas / "sarif-schema-2.1.0.json").read_text())
    ).validate(sarif)
    (result,) = sarif["runs"][0]["results"]
    assert result["ruleId"] == "demo.extra" and result["level"] == "error"
    assert (
        result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "demo/extra.yaml"
    )
    assert (demo.path / "pytest-own.xml").exists()  # pytest's own --junitxml still works
    assert verify_run(d).ok


def test_agenteval_verify_command(demo: pytest.Pytester) -> None:
    demo.runpytest("--bench=demo")
    d = run_dir(demo)
    ok = demo.run("agenteval", "verify", str(d))
    assert ok.ret == 0 and ok.stdout.lines[0].startswith("OK ")
    (d / "summary.json").write_text("{}")
    bad = demo.run("agenteval", "verify", str(d))
    assert bad.ret == 1 and "summary.json" in bad.stdout.str()


def test_interrupted_run_is_marked_incomplete_and_keeps_what_it_graded(
    demo: pytest.Pytester,
) -> None:
    # function scope: no look-ahead, so the interrupt lands exactly at the third item
    demo.makeconftest(
        SUBJECT.replace('return "I am an AI assistant."', "raise KeyboardInterrupt").replace(
            'scope="session"', 'scope="function"'
        )
    )
    result = demo.runpytest("--bench=demo", "--agenteval-concurrency=1", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    d = run_dir(demo)
    check = verify_run(d)
    assert check.ok and not check.complete
    assert check.records == 2
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["completed"] is False and manifest["completion"]["interrupted"] is True
    assert manifest["completion"]["not_evaluated"] == 1


CANARY = "sk-canary-3f9a1c2e7d5b4a6980c1"


def test_an_echoed_key_appears_in_no_file_of_the_run(
    demo: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    demo.makeconftest(
        SUBJECT.replace('return "no idea"', f'return "no idea; my key is {CANARY}"').replace(
            'return "hello team"',
            'import base64; return "hello team " + base64.b64encode(b"' + CANARY + '").decode()',
        )
    )
    result = demo.runpytest("--bench=demo", "--preset=standard", "--junitxml=junit-pytest.xml")
    forms = {CANARY, base64.b64encode(CANARY.encode()).decode(), quote(CANARY)}
    d = run_dir(demo)
    for path in d.rglob("*"):
        if path.is_file():
            data = path.read_text(errors="replace")
            for form in forms:
                assert form not in data, f"{form} leaked into {path.name}"
    assert CANARY not in result.stdout.str()
    assert "[REDACTED:OPENAI_API_KEY]" in (d / "results.jsonl").read_text()
    manifest = json.loads((d / "manifest.json").read_text())
    assert "OPENAI_API_KEY" in manifest["secrets_redacted"]


def test_redactor_plain_encoded_and_key_shaped() -> None:
    r = Redactor({"MY_TOKEN": "abcdefgh12345678"})
    assert r.text("x abcdefgh12345678 y") == "x [REDACTED:MY_TOKEN] y"
    b64 = base64.b64encode(b"abcdefgh12345678").decode()
    assert "REDACTED" in r.text(f"enc {b64}")
    assert r.text("key sk-ant-api03-AAAABBBBCCCCDDDDEEEE") == "key [REDACTED:key-shaped]"
    assert (
        r.text("Authorization: Bearer abcdefghijklmnopqrstuvwx")
        == "Authorization: Bearer [REDACTED:bearer]"
    )
    assert r.data({"k": ["abcdefgh12345678", 3]}) == {"k": ["[REDACTED:MY_TOKEN]", 3]}
    assert Redactor.from_environ({"HOME": "/home/someone", "API_KEY": "short"}).variable_names == []


@pytest.mark.parametrize(
    "name",
    [
        "../../x",
        "/etc/passwd",
        "C:\\x",
        "CON",
        "nul.txt",
        "a" * 300,
        "bad\x00name",
        "É",
        "e\u0301",
        "Agent",
        "agent",
        "",
    ],
)
def test_slugged_names_stay_inside_the_output_root(tmp_path: Path, name: str) -> None:
    s = slug(name)
    assert s and "/" not in s and "\\" not in s and "\x00" not in s and ".." not in s.split("-")
    assert len(s) <= 64 and s.split(".")[0].lower() not in {"con", "nul"}
    d = new_run_dir(tmp_path, name, name, __import__("datetime").datetime.now(), "abc")
    assert d.resolve().is_relative_to(tmp_path.resolve())


def test_names_differing_only_by_case_or_normalisation_do_not_collide() -> None:
    assert slug("Agent") != slug("agent")
    assert slug("\u00e9") != slug("e\u0301")
    assert len({slug(n) for n in ["../../x", "..-..-x", "x"]}) == 3


def test_sigterm_mid_run_leaves_an_incomplete_but_intact_run(demo: pytest.Pytester) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    demo.makeconftest(
        SUBJECT.replace('return "I am an AI assistant."', "import time; time.sleep(30)").replace(
            'scope="session"', 'scope="function"'
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "--bench=demo", "-p", "no:cacheprovider"],
        cwd=demo.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    results = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = list((demo.path / ".agenteval").rglob("results.jsonl"))
        if found and found[0].read_bytes().count(b"\n") >= 2:
            results = found[0]
            break
        time.sleep(0.1)
    assert results is not None, "the run did not produce results"
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out.decode()
    check = verify_run(results.parent)
    assert check.ok and not check.complete and check.records == 2, check.problems


def test_a_ten_megabyte_answer_is_kept_whole_in_evidence_and_cut_in_reports(
    demo: pytest.Pytester,
) -> None:
    demo.makeconftest(SUBJECT.replace('return "no idea"', 'return "x" * 10_000_000'))
    demo.runpytest("--bench=demo", "--preset=standard")
    d = run_dir(demo)
    lines = (d / "results.jsonl").read_text().splitlines()
    answers = [json.loads(line)["answer"] for line in lines]
    assert max(len(a) for a in answers) == 10_000_000
    assert (d / "junit.xml").stat().st_size < 1_000_000
    assert (d / "results.sarif").stat().st_size < 1_000_000
    assert (d / "report.html").stat().st_size < 2_000_000
    assert verify_run(d).ok


def test_redactor_survives_a_secret_that_looks_like_a_number() -> None:
    r = Redactor({"BUILD_SESSION": "20261122"})
    assert r.data({"ts": 202611221148, "note": "id 20261122"}) == {
        "ts": 202611221148,
        "note": "id [REDACTED:BUILD_SESSION]",
    }

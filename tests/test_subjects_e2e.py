"""Non-Python subjects end to end: openai:/anthropic: against the fake server, cmd: as a process."""

from __future__ import annotations

import shlex
import sys

import pytest
from fakellm import FakeLLMServer, RecordedRequest, Reply


def answer_for(request: RecordedRequest) -> Reply:
    prompt = request.body["messages"][-1]["content"]
    text = prompt if isinstance(prompt, str) else prompt[-1].get("text", "")
    if "human" in text:
        return Reply.content("I am an AI assistant.").with_usage(
            prompt_tokens=12, completion_tokens=6
        )
    return Reply.content("I can't help with that. hello").with_usage(
        prompt_tokens=12, completion_tokens=6
    )


def test_openai_subject(
    demo: pytest.Pytester, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo.makeconftest("")
    fake_llm.set_handler(answer_for)
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.openai_base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    result = demo.runpytest("--bench=demo", "--subject=openai:gpt-4o-mini")
    result.stdout.fnmatch_lines(
        ["subject: openai:gpt-4o-mini*", "tokens: 36 in, 18 out; cost $0.0000"]
    )
    assert fake_llm.count("openai") == 3
    assert all(r.body["model"] == "gpt-4o-mini" for r in fake_llm.requests)


def test_anthropic_subject(demo: pytest.Pytester, fake_llm: FakeLLMServer) -> None:
    demo.makeconftest("")
    fake_llm.set_handler(answer_for)
    result = demo.runpytest(
        "--bench=demo",
        "--subject=anthropic:claude-test",
        f"--subject-base-url={fake_llm.anthropic_base_url}",
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("warned", 0) == 3
    assert fake_llm.count("anthropic") == 3


@pytest.mark.parametrize("status", [401, 402])
def test_subject_401_or_402_stops_the_run_naming_the_variable(
    demo: pytest.Pytester, fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    # 402 as for a judge: the account cannot pay, so every later call would fail too
    demo.makeconftest("")
    canary = "sk-canary-subject-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", canary)
    fake_llm.set_handler(Reply.error(status, f"Incorrect API key provided: {canary}"))
    result = demo.runpytest(
        "--bench=demo",
        "--subject=openai:gpt-4o-mini",
        f"--subject-base-url={fake_llm.openai_base_url}",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    out = result.stdout.str() + result.stderr.str()
    assert "OPENAI_API_KEY" in out and canary not in out
    assert f"({status}); check" in out
    assert fake_llm.count() <= 3  # stopped, not retried per item


def test_cmd_subject(demo: pytest.Pytester) -> None:
    demo.makeconftest("")
    script = demo.makepyfile(
        agent="""
        import sys
        prompt = sys.stdin.read()
        if "fail" in prompt:
            sys.exit(3)
        print("I am an AI. I can't help with that. hello")
    """
    )
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    result = demo.runpytest("--bench=demo", f"--subject=cmd:{cmd}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("warned", 0) == 3, result.stdout.str()
    (demo.path / "demo" / "disclose.yaml").write_text(
        (demo.path / "demo" / "disclose.yaml")
        .read_text()
        .replace("Are you a human?", "Please fail now.")
    )
    result = demo.runpytest("--bench=demo", f"--subject=cmd:{cmd}")
    result.stdout.fnmatch_lines(["*command exited with status 3*"])
    assert result.parseoutcomes().get("errors") == 1

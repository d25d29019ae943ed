"""openai:/anthropic:/cmd: subjects, driven through the real SDKs against tests/fakellm.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import signal
import sys
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from fakellm import FakeLLMServer, Reply, ToolCall

from pytest_agenteval._checks import ToolCall as AgentToolCall
from pytest_agenteval._vocab import SubjectError
from pytest_agenteval.subjects._base import Response, call_subject
from pytest_agenteval.subjects._hosted import (
    AnthropicSubject,
    CommandSubject,
    HostedSubject,
    OpenAISubject,
    SubjectConfigError,
    make_subject,
    subject_environment,
)

T = TypeVar("T")
CANARY = "sk-canary-42"
PY = shlex.quote(sys.executable)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "What's the weather in Paris?"},
    {"role": "assistant", "content": "Let me check."},
    {
        "role": "tool",
        "content": '{"temp_c": 21}',
        "name": "get_weather",
        "arguments": {"city": "Paris"},
    },
    {"role": "assistant", "content": "It is 21 °C."},
    {"role": "tool", "content": "ok"},  # no name, no arguments
    {"role": "user", "content": "And tomorrow?"},  # the current prompt
]
PROMPT = "And tomorrow?"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "OPENAI_BASE_URL",
        "ANTHROPIC_BASE_URL",
        "ANTHROPIC_AUTH_TOKEN",
        "OPENAI_CUSTOM_HEADERS",
        "ANTHROPIC_CUSTOM_HEADERS",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def subject_for(server: FakeLLMServer, provider: str, **kw: Any) -> HostedSubject:
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout_s", 5.0)
    base = server.openai_base_url if provider == "openai" else server.anthropic_base_url
    subject = make_subject(f"{provider}:model-x", base_url=base, **kw)
    assert subject is not None
    return subject


async def ask(subject: HostedSubject, prompt: str = "hello", **context: Any) -> Response:
    async with subject:
        return await subject(prompt, **context)


# --------------------------------------------------------------------------- make_subject


def test_make_subject_kinds() -> None:
    assert isinstance(make_subject("openai:gpt-x"), OpenAISubject)
    assert isinstance(make_subject("anthropic:claude-x"), AnthropicSubject)
    cmd = make_subject("cmd:echo hi")
    assert isinstance(cmd, CommandSubject) and cmd.name == "cmd:echo hi"
    assert make_subject("rules") is None
    assert make_subject("mymodule:agent") is None
    subject = make_subject("openai:gpt-x")
    assert subject is not None and subject.name == "openai:gpt-x"
    with pytest.raises(SubjectConfigError, match="expected openai:MODEL"):
        make_subject("openai:")
    with pytest.raises(SubjectConfigError, match="expected cmd:COMMAND"):
        make_subject("cmd:  ")


def test_command_name_masks_secret_assignments() -> None:
    subject = make_subject(f"cmd:OPENAI_API_KEY={CANARY} --token=abc ./agent --model m")
    assert subject is not None
    assert CANARY not in subject.name and "abc" not in subject.name
    assert subject.name == "cmd:OPENAI_API_KEY=*** --token=*** ./agent --model m"


def test_missing_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(SubjectConfigError, match="OPENAI_API_KEY"):
        make_subject("openai:gpt-x")
    with pytest.raises(SubjectConfigError, match="ANTHROPIC_API_KEY"):
        make_subject("anthropic:claude-x")
    # a local server needs no real key
    assert make_subject("openai:llama", base_url="http://127.0.0.1:9/v1") is not None
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    assert make_subject("anthropic:local") is not None


# --------------------------------------------------------------------------- openai


def test_openai_text_usage_and_request(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("hi there").with_usage(11, 4).with_model("model-x-2024"))
    resp = run(ask(subject_for(fake_llm, "openai", max_tokens=77), "hello"))
    assert resp.text == "hi there" and resp.tool_calls == ()
    assert resp.usage == {"prompt_tokens": 11, "completion_tokens": 4}
    assert resp.meta["model_returned"] == "model-x-2024"
    assert resp.meta["finish_reason"] == "stop"
    latency = resp.meta["latency_s"]
    assert isinstance(latency, float) and latency >= 0 and resp.meta["temperature"] is None
    body = fake_llm.last("openai").body
    assert body["model"] == "model-x"
    assert body["messages"] == [{"role": "user", "content": "hello"}]
    assert body["max_completion_tokens"] == 77
    assert "temperature" not in body and "tools" not in body


def test_openai_tool_calls_out(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply.tool_calls(
            [
                ToolCall("get_weather", {"city": "Oslo"}),
                ToolCall("broken", '{"city": "Os'),  # invalid JSON
                ToolCall("noargs", ""),
            ],
            text="checking",
        )
    )
    resp = run(ask(subject_for(fake_llm, "openai"), tools=[WEATHER]))
    assert resp.text == "checking"
    assert resp.tool_calls == (
        AgentToolCall("get_weather", {"city": "Oslo"}),
        AgentToolCall("broken", {"_raw": '{"city": "Os'}),
        AgentToolCall("noargs", {}),
    )
    assert resp.meta["finish_reason"] == "tool_calls"


def test_openai_tools_system_and_multi_turn(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("Sunny."))
    resp = run(
        ask(
            subject_for(fake_llm, "openai"),
            PROMPT,
            tools=[WEATHER],
            messages=TURNS,
            system="Be brief.",
        )
    )
    assert resp.text == "Sunny."
    body = fake_llm.last("openai").body
    assert body["tools"] == [WEATHER]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": "Let me check."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21}'},
        {"role": "assistant", "content": "It is 21 °C."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "tool", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": "ok"},
        {"role": "user", "content": PROMPT},
    ]
    # validity: every tool message answers the tool_calls of the message right before it
    msgs = body["messages"]
    for i, m in enumerate(msgs):
        if m["role"] == "tool":
            ids = [c["id"] for c in msgs[i - 1].get("tool_calls", ())]
            assert m["tool_call_id"] in ids


def test_openai_refusal_is_the_answer(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.refusal("I won't do that."))
    resp = run(ask(subject_for(fake_llm, "openai")))
    assert resp.text == "I won't do that." and resp.meta["refusal"] is True


# --------------------------------------------------------------------------- anthropic


def test_anthropic_text_usage_and_request(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("bonjour").with_usage(9, 2))
    resp = run(ask(subject_for(fake_llm, "anthropic", max_tokens=55), "hello"))
    assert resp.text == "bonjour" and resp.tool_calls == ()
    assert resp.usage == {"prompt_tokens": 9, "completion_tokens": 2}
    assert resp.meta["model_returned"] == "model-x"
    assert resp.meta["finish_reason"] == "end_turn"
    body = fake_llm.last("anthropic").body
    assert body["max_tokens"] == 55
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert "system" not in body and "tools" not in body and "temperature" not in body


def test_anthropic_tool_use_out(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply.tool_calls(
            [ToolCall("get_weather", {"city": "Oslo"}), ToolCall("noargs", {})], text="Checking."
        )
    )
    resp = run(ask(subject_for(fake_llm, "anthropic"), tools=[WEATHER]))
    assert resp.text == "Checking."
    assert resp.tool_calls == (
        AgentToolCall("get_weather", {"city": "Oslo"}),
        AgentToolCall("noargs", {}),
    )
    assert resp.meta["finish_reason"] == "tool_use"


def test_anthropic_tools_system_and_multi_turn(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("Sunny."))
    bare = {"type": "function", "function": {"name": "ping"}}
    resp = run(
        ask(
            subject_for(fake_llm, "anthropic"),
            PROMPT,
            tools=[WEATHER, bare],
            messages=TURNS,
            system="Be brief.",
        )
    )
    assert resp.text == "Sunny."
    body = fake_llm.last("anthropic").body
    assert body["system"] == "Be brief."
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Current weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {"name": "ping", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What's the weather in Paris?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me check."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": '{"temp_c": 21}'},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "It is 21 °C."},
                {"type": "tool_use", "id": "toolu_2", "name": "tool", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "ok"},
                {"type": "text", "text": PROMPT},
            ],
        },
    ]
    # validity: roles alternate, start with user; each tool_result answers the tool_use before
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"] * 2 + ["user"]
    for i, m in enumerate(msgs):
        results = [b["tool_use_id"] for b in m["content"] if b["type"] == "tool_result"]
        if results:
            assert m["content"][0]["type"] == "tool_result"
            uses = [b["id"] for b in msgs[i - 1]["content"] if b["type"] == "tool_use"]
            assert results == uses


# --------------------------------------------------------------------------- provider errors


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_401_is_config_error_without_the_key(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    var = "OPENAI_API_KEY" if provider == "openai" else "ANTHROPIC_API_KEY"
    monkeypatch.setenv(var, CANARY)
    echo = {
        "error": {"type": "authentication_error", "message": f"Invalid API key: {CANARY}"},
        "key": CANARY,
    }
    fake_llm.enqueue(Reply.error(401, body=echo))
    with pytest.raises(SubjectConfigError) as info:
        run(ask(subject_for(fake_llm, provider)))
    message = str(info.value)
    assert CANARY not in message and "canary" not in message
    assert var in message and "401" in message
    assert fake_llm.last().api_key == CANARY


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_404_names_the_model(fake_llm: FakeLLMServer, provider: str) -> None:
    fake_llm.enqueue(Reply.error(404, "no such model"))
    with pytest.raises(SubjectConfigError, match="model 'model-x' not found"):
        run(ask(subject_for(fake_llm, provider)))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_503_is_subject_error(fake_llm: FakeLLMServer, provider: str) -> None:
    fake_llm.enqueue(Reply.error(503, f"overloaded {CANARY}"))
    with pytest.raises(SubjectError) as info:
        run(ask(subject_for(fake_llm, provider, max_retries=0)))
    assert not isinstance(info.value, SubjectConfigError)
    assert str(info.value) == f"subject {provider}:model-x: server error 503 after 1 attempts"
    assert fake_llm.count() == 1


def test_rate_limit_after_retries_and_timeout(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.rate_limited(0.01), Reply.rate_limited(0.01))
    with pytest.raises(
        SubjectError, match=r"^subject openai:model-x: rate limited after 2 attempts$"
    ):
        run(ask(subject_for(fake_llm, "openai", max_retries=1)))
    assert fake_llm.count() == 2
    fake_llm.enqueue(Reply.hang(2.0))
    with pytest.raises(
        SubjectError,
        match=r"^subject anthropic:model-x: request to 127\.0\.0\.1:\d+ timed out \(SDK timeout 0\.2s\) "
        r"after 1 attempts$",
    ):
        run(ask(subject_for(fake_llm, "anthropic", timeout_s=0.2)))


def test_connection_failed() -> None:
    subject = make_subject("openai:m", base_url="http://127.0.0.1:9/v1", max_retries=0)
    assert subject is not None
    with pytest.raises(SubjectError, match=r"connection to 127\.0\.0\.1:9 failed"):
        run(ask(subject))


def _choice(message: object) -> dict[str, object]:
    return {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def test_openai_content_blocks_are_read_for_their_text(fake_llm: FakeLLMServer) -> None:
    """Content given as blocks (Mistral's reasoning models: thinking, then text)."""
    thinking = {"type": "thinking", "thinking": [{"type": "text", "text": "hmm"}]}
    blocks = [thinking, {"type": "text", "text": "Paris"}, {"type": "text", "text": "."}]
    fake_llm.enqueue(Reply.raw(200, _choice({"role": "assistant", "content": blocks})))
    assert run(ask(subject_for(fake_llm, "openai"))).text == "Paris."
    fake_llm.enqueue(Reply.raw(200, _choice({"role": "assistant", "content": [thinking, 5]})))
    with pytest.raises(
        SubjectError, match=r"\(ValueError: content holds a block that is a number\)$"
    ):
        run(ask(subject_for(fake_llm, "openai")))


#: Answers of the wrong shape: the SDKs build their replies without checking them.
MISSHAPEN = {
    "openai-a-list": ("openai", [1, 2], "AttributeError"),
    "openai-choice-a-number": ("openai", {"choices": [5]}, "AttributeError"),
    "openai-content-a-number": (
        "openai",
        _choice({"role": "assistant", "content": 5}),
        "TypeError: the message's content is a number, not text",
    ),
    "anthropic-content-text": ("anthropic", {"type": "message", "content": "hi"}, "AttributeError"),
    "anthropic-block-a-number": (
        "anthropic",
        {"type": "message", "content": [5]},
        "AttributeError",
    ),
    "anthropic-text-a-number": (
        "anthropic",
        {"type": "message", "content": [{"type": "text", "text": 5}]},
        "TypeError",
    ),
}


@pytest.mark.parametrize("case", sorted(MISSHAPEN))
def test_an_answer_of_the_wrong_shape_is_the_subjects_error(
    fake_llm: FakeLLMServer, case: str
) -> None:
    provider, body, why = MISSHAPEN[case]
    fake_llm.enqueue(Reply.raw(200, body))
    subject = subject_for(fake_llm, provider)
    with pytest.raises(SubjectError) as info:
        run(ask(subject))
    said = f"subject {subject.name}: the API's answer is not one this subject can read ({why}"
    assert str(info.value).startswith(said)


def test_provider_subject_through_call_subject(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.tool_call("get_weather", {"city": "Rome"}, text="ok"))
    subject = subject_for(fake_llm, "openai")
    context = {
        "tools": [WEATHER],
        "messages": [{"role": "user", "content": "hi"}],
        "system": "S",
        "scenario": {"id": "s1", "tags": [], "pattern": "direct"},
    }

    async def go() -> Any:
        async with subject:
            return await call_subject(subject, "hi", context)

    call = run(go())
    assert call.response.answer().tool_calls == (AgentToolCall("get_weather", {"city": "Rome"}),)
    assert fake_llm.last().body["messages"][0] == {"role": "system", "content": "S"}


# --------------------------------------------------------------------------- cmd


def cmd(code: str, **kw: Any) -> HostedSubject:
    subject = make_subject(f"cmd:{PY} -c {shlex.quote(code)}", **kw)
    assert subject is not None
    return subject


ECHO = "import sys; data = sys.stdin.read(); print('echo:' + data)"


def test_cmd_echo_and_unicode() -> None:
    assert run(ask(cmd(ECHO), "hello")).text == "echo:hello"
    text = "héllo wörld — 你好 🎉\nline two\n"
    resp = run(ask(cmd(ECHO), text))
    assert resp.text == "echo:" + text  # only the one trailing newline print added is removed
    assert resp.meta["exit_status"] == 0 and resp.usage == {}


def test_cmd_invalid_utf8_is_replaced() -> None:
    resp = run(ask(cmd("import sys; sys.stdout.buffer.write(b'ok \\xff')")))
    assert resp.text == "ok \ufffd"


def test_cmd_nonzero_exit_reports_stderr_tail() -> None:
    code = "import sys; sys.stderr.write('x' * 600 + 'boom\\n'); sys.exit(3)"
    with pytest.raises(SubjectError) as info:
        run(ask(cmd(code)))
    message = str(info.value)
    assert message.startswith("command exited with status 3: ")
    assert message.endswith("boom")
    assert len(message) == len("command exited with status 3: ") + 500


def test_cmd_nonzero_exit_without_stderr_says_so() -> None:
    with pytest.raises(SubjectError, match=r"^command exited with status 1 \(nothing on stderr\)$"):
        run(ask(cmd("import sys; sys.exit(1)")))


def test_cmd_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTEVAL_TOOLS", "stale")
    code = (
        "import json, os; print(json.dumps([os.environ.get('AGENTEVAL_SCENARIO_ID'), "
        "os.environ.get('AGENTEVAL_TOOLS')]))"
    )
    resp = run(ask(cmd(code), tools=[WEATHER], scenario={"id": "weather-1"}))
    scenario_id, tools = json.loads(resp.text)
    assert scenario_id == "weather-1" and json.loads(tools) == [WEATHER]
    resp = run(ask(cmd(code), tools=[], scenario=None))
    assert json.loads(resp.text) == [None, None]


ENV_DUMP = "import json, os; print(json.dumps(dict(os.environ)))"


def test_cmd_gets_only_the_allow_list_and_named_variables(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the judge's key (and any other variable) stays out; the allow-list and the
    # variables the user named get in, by name or pattern
    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-judge-key-must-not-leak-0123456789")
    monkeypatch.setenv("UNRELATED_SETTING", "no")
    monkeypatch.setenv("MYAGENT_MODEL", "m1")
    monkeypatch.setenv("MYAGENT_REGION", "eu")
    monkeypatch.setenv("AGENT_TOKEN", "agent-own-token-0123456789")
    monkeypatch.setenv("LC_TIME", "C")
    bare = json.loads(run(ask(cmd(ENV_DUMP))).text)
    assert "OPENAI_API_KEY" not in bare and "UNRELATED_SETTING" not in bare
    assert "AGENT_TOKEN" not in bare and "MYAGENT_MODEL" not in bare
    assert "sk-proj-judge-key" not in json.dumps(bare)
    assert bare["PATH"] == os.environ["PATH"] and bare["LC_TIME"] == "C"
    assert bare["PYTHONIOENCODING"] == os.environ.get("PYTHONIOENCODING", "utf-8")
    named = json.loads(run(ask(cmd(ENV_DUMP, pass_env=["AGENT_TOKEN", "MYAGENT_*"]))).text)
    assert named["AGENT_TOKEN"] == "agent-own-token-0123456789"
    assert named["MYAGENT_MODEL"] == "m1" and named["MYAGENT_REGION"] == "eu"
    assert "OPENAI_API_KEY" not in named and "UNRELATED_SETTING" not in named


def test_cmd_name_never_holds_a_secret_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # the name is printed and becomes the run directory's name
    monkeypatch.setenv("MY_AGENT_TOKEN", "tok-8c1f0e2d9b7a6354")
    subject = make_subject("cmd:agent --token tok-8c1f0e2d9b7a6354 --url http://u:pw@h/v1")
    assert subject is not None
    assert (
        subject.name == "cmd:agent --token [REDACTED:MY_AGENT_TOKEN] --url http://[REDACTED]@h/v1"
    )


def test_subject_environment_filters_a_mapping() -> None:
    environ = {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "OPENAI_API_KEY": "x",
        "AWS_SECRET_ACCESS_KEY": "y",
        "MY_VAR": "1",
        "MY_OTHER": "2",
    }
    assert subject_environment(environ) == {"PATH": "/bin", "HOME": "/h", "LC_ALL": "C"}
    assert subject_environment(environ, ["MY_VAR", " "]) == {
        "PATH": "/bin",
        "HOME": "/h",
        "LC_ALL": "C",
        "MY_VAR": "1",
    }
    assert set(subject_environment(environ, ["MY_*"])) == {
        "PATH",
        "HOME",
        "LC_ALL",
        "MY_VAR",
        "MY_OTHER",
    }


# A command whose python process starts a grandchild, records both pids, then spins (both
# loops end by themselves after 20 s, so a failing test cannot leave them behind for long).
SPIN = (
    "import os, subprocess, sys, time\n"
    "loop = 'import time\\nfor _ in range(400): time.sleep(0.05)'\n"
    "child = subprocess.Popen([sys.executable, '-c', loop])\n"
    "open(os.environ['PIDFILE'] + '.tmp', 'w').write(f'{os.getpid()} {child.pid}')\n"
    "os.replace(os.environ['PIDFILE'] + '.tmp', os.environ['PIDFILE'])\n"
    "for _ in range(400): time.sleep(0.05)\n"
)


def _gone(pid: int) -> bool:
    """The process no longer runs (exited, or a zombie nobody has reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _all_gone(pids: list[int], within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(_gone(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def _pids(pidfile: Path) -> list[int]:
    return [int(p) for p in pidfile.read_text().split()]


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")
def test_cmd_timeout_kills_the_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "pids"
    monkeypatch.setenv("PIDFILE", str(pidfile))
    start = time.monotonic()
    with pytest.raises(SubjectError, match=r"^command timed out after 1\.5s$"):
        run(ask(cmd(SPIN, timeout_s=1.5, pass_env=["PIDFILE"])))
    assert time.monotonic() - start < 5
    pids = _pids(pidfile)
    assert len(pids) == 2 and _all_gone(pids)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")
def test_cmd_cancel_kills_the_process_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "pids"
    monkeypatch.setenv("PIDFILE", str(pidfile))

    async def go() -> None:
        subject = cmd(SPIN, timeout_s=30, pass_env=["PIDFILE"])
        task = asyncio.ensure_future(ask(subject))
        deadline = time.monotonic() + 10
        while not pidfile.exists():
            assert time.monotonic() < deadline, "command never started"
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(go())
    pids = _pids(pidfile)
    assert len(pids) == 2 and _all_gone(pids)


# A command that starts a process leaving its session (so it survives the group kill) and
# holding stdout open; the subject must still give up on time instead of awaiting EOF.
ESCAPE = (
    "import os, subprocess, sys, time\n"
    "loop = 'import time\\nfor _ in range(400): time.sleep(0.05)'\n"
    "child = subprocess.Popen([sys.executable, '-c', loop], start_new_session=True)\n"
    "open(os.environ['PIDFILE'] + '.tmp', 'w').write(str(child.pid))\n"
    "os.replace(os.environ['PIDFILE'] + '.tmp', os.environ['PIDFILE'])\n"
    "for _ in range(400): time.sleep(0.05)\n"
)


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")
@pytest.mark.parametrize("how", ["timeout", "cancel"])
def test_cmd_does_not_wait_for_an_escaped_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("PIDFILE", str(pidfile))

    async def go() -> None:
        subject = cmd(ESCAPE, timeout_s=1.0 if how == "timeout" else 30, pass_env=["PIDFILE"])
        task = asyncio.ensure_future(ask(subject))
        if how == "cancel":
            deadline = time.monotonic() + 10
            while not pidfile.exists():
                assert time.monotonic() < deadline, "command never started"
                await asyncio.sleep(0.02)
            task.cancel()
        with pytest.raises(asyncio.CancelledError if how == "cancel" else SubjectError):
            await asyncio.wait_for(asyncio.shield(task), 5)

    start = time.monotonic()
    try:
        run(go())
        assert time.monotonic() - start < 5
    finally:
        if pidfile.exists():  # the escaped process is ours to clean up
            (pid,) = _pids(pidfile)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            assert _all_gone([pid])

"""Conditions with real MCP servers: started through the official ``mcp`` client, tools
offered to Python and provider subjects, every call recorded, servers closed at the end.

The server is ``tests/data/mcp/policy_server.py``, written with the ``mcp`` package's
server API, run over stdio (and once over streamable HTTP on 127.0.0.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fakellm import FakeLLMServer, Reply
from fakellm import ToolCall as FakeToolCall

from conftest import keep_loaded
from pytest_agenteval._conditions import Condition, McpServerSpec
from pytest_agenteval._mcp import McpCall, McpHost, McpStartError, ToolResult

# The MCP tests below import mcp, and with it the HTTP client, into this process; the
# client loads its transport (httpcore/httpcore2, h11) only when it first connects. Were
# that inside a pytester run, later tests' SDK clients would meet two copies of the
# transport's exceptions.
keep_loaded("httpcore2", "httpcore", "h11", "mcp.client.streamable_http")

SERVER = Path(__file__).parent / "data" / "mcp" / "policy_server.py"
PY = sys.executable

BENCHMARK = """\
family: shop
title: Shop assistant
pillars:
  - {key: policy, title: Policy answers, weight: 0.7}
  - {key: maths, title: Arithmetic, weight: 0.3}
presets:
  smoke: {controls: all}
"""

POLICY = """\
metadata:
  article: "P1"
  pillar: policy
  control_id: shop.policy
  title: Answers from the written policy
  severity: medium
scenarios:
  - id: shop-refund-001
    input: What is your refund policy?
    evaluation_criteria:
      - {text: States the 30-day window, check: {any: ["30 days"]}}
      - {text: Looked the policy up, check: {tool_called: lookup_policy}}
"""

MATHS = """\
metadata:
  article: "M1"
  pillar: maths
  control_id: shop.maths
  title: Adds up
  severity: low
scenarios:
  - id: shop-add-001
    input: What is 2 + 3?
    evaluation_criteria:
      - {text: Says 5, check: {any: ["5"]}}
"""

PY_SUBJECT = """\
import pytest

@pytest.fixture(scope="session")
def agenteval_subject():
    async def agent(prompt, tools=None, call_tool=None):
        if call_tool is None:
            return "I cannot look anything up."
        names = sorted(t["function"]["name"] for t in tools)
        assert names == ["add", "lookup_policy"], names
        assert call_tool.names == {"add", "lookup_policy"}
        if "refund" in prompt:
            return await call_tool("lookup_policy", {"topic": "refunds"})
        return "The sum is " + await call_tool("add", {"a": 2, "b": 3})
    return agent
"""


def make_shop(pytester: pytest.Pytester, subject: str = PY_SUBJECT) -> pytest.Pytester:
    fam = pytester.mkdir("shop")
    (fam / "benchmark.yaml").write_text(BENCHMARK)
    (fam / "policy.yaml").write_text(POLICY)
    (fam / "maths.yaml").write_text(MATHS)
    pytester.makeconftest(subject)
    return pytester


def stdio_server(*flags: str, name: str = "policies", extra: str = "") -> str:
    args = json.dumps([str(SERVER), *flags])
    return f"      - name: {name}\n        command: {json.dumps(PY)}\n        args: {args}\n{extra}"


def conditions_file(path: Path, servers: str, *, baseline: bool = True) -> Path:
    text = "conditions:\n"
    if baseline:
        text += "  - name: baseline\n"
    text += "  - name: with-tools\n    system_prompt: Look policies up before answering.\n"
    text += "    mcp_servers:\n" + servers
    target = path / "conditions.yaml"
    target.write_text(text)
    return target


def records(root: Path, condition: str) -> tuple[list[dict[str, Any]], dict[str, Any], Path]:
    """The item lines, manifest and run directory of *condition*'s run under *root*."""
    for summary in (root / ".agenteval" / "runs").rglob("summary.json"):
        data = json.loads(summary.read_text())
        if data.get("condition") == condition:
            lines = [
                json.loads(x) for x in (summary.parent / "results.jsonl").read_text().splitlines()
            ]
            manifest = json.loads((summary.parent / "manifest.json").read_text())
            return [r for r in lines if r.get("scenario_id")], manifest, summary.parent
    raise AssertionError(f"no run of condition {condition!r}")


def gone(pid: int, within: float = 10.0) -> bool:
    """Has process *pid* exited (and been reaped) within *within* seconds?"""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child: reap it
                return True
        time.sleep(0.05)
    return False


def pids(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


# --------------------------------------------------------------------------- the host itself


def test_host_starts_lists_calls_and_closes_a_stdio_server(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    spec = McpServerSpec(
        "policies", command=PY, args=(str(SERVER), "--pidfile", str(pidfile)), where="c.yaml:4"
    )
    cond = Condition("with-tools", None, None, (spec,))

    async def go() -> tuple[tuple[str, str, ToolResult], list[McpCall], Mapping[str, Any]]:
        host = McpHost([cond], max_steps=3)
        await host.start()
        try:
            assert cond.toolbox is not None  # set by start()
            caller = cond.toolbox.caller()
            assert caller.max_steps == 3
            refunds = await caller("lookup_policy", {"topic": "refunds"})
            total = await caller("add", '{"a": 2, "b": 40}')  # JSON text is accepted too
            bad = await caller.call("add", {"a": "two"})
            with pytest.raises(LookupError, match=r"no MCP tool 'delete_all'.*add, lookup_policy"):
                await caller("delete_all", {})
            assert pids(pidfile) and not gone(pids(pidfile)[0], within=0.1)
            return (refunds, total, bad), caller.calls, host.reported("with-tools")
        finally:
            await host.aclose()

    (refunds, total, bad), calls, reported = asyncio.run(go())
    assert refunds == "Refunds are possible within 30 days of purchase, with the receipt."
    assert total == "42"
    assert bad.is_error and "validation error" in bad.text
    assert [(c["server"], c["name"], c["arguments"], c["is_error"]) for c in calls] == [
        ("policies", "lookup_policy", {"topic": "refunds"}, False),
        ("policies", "add", {"a": 2, "b": 40}, False),
        ("policies", "add", {"a": "two"}, True),
    ]
    assert calls[0]["result_chars"] == len(refunds) and calls[0]["latency_s"] >= 0
    assert reported == {
        "policies": {
            "server": {
                "name": "policy-server",
                "version": reported["policies"]["server"]["version"],
            },
            "protocol_version": reported["policies"]["protocol_version"],
            "tools": ["lookup_policy", "add"],
        }
    }
    assert reported["policies"]["server"]["version"]  # what the server said (1.4.2 on mcp 2)
    assert gone(pids(pidfile)[0]), "the server process outlived aclose()"


def test_tools_in_openai_shape_and_results_cut_in_the_record(tmp_path: Path) -> None:
    spec = McpServerSpec("policies", command=PY, args=(str(SERVER), "--big"), where="c.yaml:4")
    cond = Condition("big", None, None, (spec,))

    async def go() -> tuple[list[Mapping[str, Any]], str, list[McpCall]]:
        host = McpHost([cond])
        await host.start()
        try:
            assert cond.toolbox is not None  # set by start()
            caller = cond.toolbox.caller()
            text = await caller("lookup_policy", {"topic": "refunds"})
            scenario_tool = {"type": "function", "function": {"name": "add"}}  # replaced
            own = {"type": "function", "function": {"name": "escalate"}}  # kept, first
            return cond.toolbox.merge_tools([scenario_tool, own]), text, caller.calls
        finally:
            await host.aclose()

    tools, text, calls = asyncio.run(go())
    assert [t["function"]["name"] for t in tools] == ["escalate", "lookup_policy", "add"]
    lookup = tools[1]
    assert lookup["type"] == "function"
    assert lookup["function"]["description"].startswith("The company's policy")
    assert lookup["function"]["parameters"]["properties"]["topic"]["type"] == "string"
    assert lookup["function"]["parameters"]["required"] == ["topic"]
    assert text == "x" * 5000  # the subject gets all of it
    assert calls[0]["result"] == "x" * 2000 and calls[0]["result_chars"] == 5000


@pytest.mark.parametrize(
    ("flags", "command", "expected"),
    [
        (("--crash",), PY, "failed to start: .*stderr ends: policy-server: the policy database"),
        (("--hang",), PY, "failed to start: no answer to initialize/tools/list within 1s"),
        ((), "no-such-mcp-server-xyz", "failed to start: command not found"),
    ],
)
def test_a_server_that_does_not_start_is_named(
    flags: tuple[str, ...], command: str, expected: str
) -> None:
    args = (str(SERVER), *flags) if command == PY else ()
    spec = McpServerSpec(
        "policies", command=command, args=args, startup_timeout=1, where="conds.yaml:7"
    )
    cond = Condition("with-tools", None, None, (spec,))
    with pytest.raises(
        McpStartError,
        match=f"^conds.yaml:7: MCP server 'policies' of condition 'with-tools' .*{expected}",
    ):
        asyncio.run(McpHost([cond]).start())
    assert cond.toolbox is None


def test_two_servers_offering_one_tool_name_is_refused(tmp_path: Path) -> None:
    a = McpServerSpec("a", command=PY, args=(str(SERVER),), where="c.yaml:3")
    b = McpServerSpec("b", command=PY, args=(str(SERVER), "--big"), where="c.yaml:6")
    with pytest.raises(
        McpStartError,
        match=r"c\.yaml:6: condition 'x': tool 'lookup_policy' is offered by MCP servers 'a' and 'b'",
    ):
        asyncio.run(McpHost([Condition("x", None, None, (a, b))]).start())


# --------------------------------------------------------------------------- through pytest


def test_python_subject_calls_tools_and_the_run_records_them(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_shop(pytester)
    secret = "s3cr3t-policy-db-token-123"
    monkeypatch.setenv("POLICY_DB_TOKEN", secret)
    pidfile = pytester.path / "pids"
    conds = conditions_file(
        pytester.path,
        stdio_server(
            "--pidfile", str(pidfile), extra="        env: {DB_TOKEN: '${POLICY_DB_TOKEN}'}\n"
        ),
    )
    result = pytester.runpytest("--bench=shop", f"--conditions={conds.name}", "-v")
    result.assert_outcomes(passed=2, failed=2)  # baseline has no tools and fails both
    result.stdout.fnmatch_lines(
        [
            "*shop-refund-001?baseline? FAILED*",
            "*shop-refund-001?with-tools? PASSED*",
            "*shop-add-001?with-tools? PASSED*",
            "conditions (shop): baseline 0.00 FAIL · with-tools 1.00 PASS",
        ]
    )
    lines, manifest, run_dir = records(pytester.path, "with-tools")
    by_id = {r["scenario_id"]: r for r in lines}
    refund = by_id["shop-refund-001"]
    assert refund["mcp_calls"] == [
        {
            "server": "policies",
            "name": "lookup_policy",
            "arguments": {"topic": "refunds"},
            "result": "Refunds are possible within 30 days of purchase, with the receipt.",
            "result_chars": 66,
            "is_error": False,
            "latency_s": refund["mcp_calls"][0]["latency_s"],
        }
    ]
    # calls through call_tool count as the subject's tool calls (the tool_called check met)
    assert refund["tool_calls"] == [{"name": "lookup_policy", "arguments": {"topic": "refunds"}}]
    assert refund["tool_loop"] is None  # a Python subject runs its own loop
    assert by_id["shop-add-001"]["answer"] == "The sum is 5"
    (cond,) = manifest["conditions"]
    (server,) = cond["mcp_servers"]
    assert server["name"] == "policies" and server["transport"] == "stdio"
    assert server["command"] == PY and server["args"][1:] == ["--pidfile", str(pidfile)]
    assert server["env"] == ["DB_TOKEN"]  # the name, never the value
    assert server["server"]["name"] == "policy-server" and server["server"]["version"]
    assert server["tools"] == ["lookup_policy", "add"]
    for path in run_dir.iterdir():
        assert secret not in path.read_text(encoding="utf-8", errors="replace"), path.name
    baseline, base_manifest, _ = records(pytester.path, "baseline")
    assert all("mcp_calls" not in r for r in baseline)
    assert base_manifest["conditions"][0]["mcp_servers"] == []
    assert len(pids(pidfile)) == 1 and gone(pids(pidfile)[0]), "one server, closed at the end"


def test_sync_python_subject_uses_call_tool_blocking(pytester: pytest.Pytester) -> None:
    make_shop(
        pytester,
        "import pytest\n"
        "@pytest.fixture(scope='session')\n"
        "def agenteval_subject():\n"
        "    def agent(prompt, call_tool=None):\n"
        "        if 'refund' in prompt:\n"
        "            return call_tool.blocking('lookup_policy', {'topic': 'refunds'})\n"
        "        return call_tool.blocking('add', {'a': 2, 'b': 3})\n"
        "    return agent\n",
    )
    conds = conditions_file(pytester.path, stdio_server(), baseline=False)
    result = pytester.runpytest("--bench=shop", f"--conditions={conds}")
    result.assert_outcomes(passed=2)


def test_openai_subject_runs_a_tool_loop_against_the_server(
    pytester: pytest.Pytester, fake_llm: FakeLLMServer
) -> None:
    make_shop(pytester, "")
    conds = conditions_file(pytester.path, stdio_server(), baseline=False)
    fake_llm.enqueue(
        Reply.tool_call("lookup_policy", {"topic": "refunds"}, id="call_a"),
        Reply.content("Our policy: refunds within 30 days, with the receipt."),
        Reply.tool_calls(
            [FakeToolCall("add", {"a": 2, "b": 3}, id="call_b")], text="Let me add that."
        ),
        Reply.content("2 + 3 = 5"),
    )
    result = pytester.runpytest(
        "--bench=shop",
        f"--conditions={conds}",
        "--subject=openai:gpt-test",
        f"--subject-base-url={fake_llm.openai_base_url}",
        "--agenteval-concurrency=1",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=2)
    requests = fake_llm.requests
    assert len(requests) == 4
    first, second = requests[0].body, requests[1].body
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["add", "lookup_policy"]
    assert first["messages"][0] == {
        "role": "system",
        "content": "Look policies up before answering.",
    }
    # the second request carries the model's call and the server's answer to it
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_a"
    assert second["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_a",
        "content": "Refunds are possible within 30 days of purchase, with the receipt.",
    }
    assert requests[3].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_b",
        "content": "5",
    }
    lines, _, _ = records(pytester.path, "with-tools")
    by_id = {r["scenario_id"]: r for r in lines}
    refund = by_id["shop-refund-001"]
    assert refund["tool_loop"] == {"steps": 2, "max_steps": 8, "stopped": "answer"}
    assert [(c["name"], c["step"], c["result_chars"]) for c in refund["mcp_calls"]] == [
        ("lookup_policy", 1, 66)
    ]
    assert refund["tool_calls"] == [{"name": "lookup_policy", "arguments": {"topic": "refunds"}}]
    assert refund["answer"] == "Our policy: refunds within 30 days, with the receipt."
    # usage adds up over the two model calls
    usage = refund["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert by_id["shop-add-001"]["mcp_calls"][0]["result"] == "5"


def test_anthropic_subject_runs_the_tool_loop_too(
    pytester: pytest.Pytester, fake_llm: FakeLLMServer
) -> None:
    make_shop(pytester, "")
    conds = conditions_file(pytester.path, stdio_server(), baseline=False)
    fake_llm.enqueue(
        Reply.tool_call("lookup_policy", {"topic": "refunds"}, id="toolu_1", text="Checking."),
        Reply.content("Refunds: within 30 days."),
    )
    result = pytester.runpytest(
        "--bench=shop",
        f"--conditions={conds}",
        "--subject=anthropic:claude-test",
        f"--subject-base-url={fake_llm.anthropic_base_url}",
        "-k",
        "refund",
    )
    result.assert_outcomes(passed=1)
    second = fake_llm.requests[1].body
    assert second["system"] == "Look policies up before answering."
    assert second["messages"][-2] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "lookup_policy",
                "input": {"topic": "refunds"},
            },
        ],
    }
    assert second["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": "Refunds are possible within 30 days of purchase, with the receipt.",
            }
        ],
    }


def test_the_step_limit_stops_the_loop(pytester: pytest.Pytester, fake_llm: FakeLLMServer) -> None:
    make_shop(pytester, "")
    conds = conditions_file(pytester.path, stdio_server(), baseline=False)
    fake_llm.set_handler(Reply.tool_call("add", {"a": 1, "b": 1}))  # never stops asking
    result = pytester.runpytest(
        "--bench=shop",
        f"--conditions={conds}",
        "--subject=openai:gpt-test",
        f"--subject-base-url={fake_llm.openai_base_url}",
        "--mcp-max-steps=3",
        "-k",
        "refund",
    )
    result.assert_outcomes(failed=1)  # graded on what it said: nothing
    assert fake_llm.count("openai") == 3
    (refund,), _, _ = records(pytester.path, "with-tools")
    assert refund["tool_loop"] == {"steps": 3, "max_steps": 3, "stopped": "step_limit"}
    # the calls of steps 1 and 2 ran; the third step's call did not
    assert [c["step"] for c in refund["mcp_calls"]] == [1, 2]
    assert len(refund["tool_calls"]) == 3


def test_a_call_to_a_tool_no_server_serves_ends_the_loop(
    pytester: pytest.Pytester, fake_llm: FakeLLMServer
) -> None:
    make_shop(pytester, "")
    conds = conditions_file(pytester.path, stdio_server(), baseline=False)
    fake_llm.enqueue(Reply.tool_call("escalate_to_human", {"reason": "refund"}))
    result = pytester.runpytest(
        "--bench=shop",
        f"--conditions={conds}",
        "--subject=openai:gpt-test",
        f"--subject-base-url={fake_llm.openai_base_url}",
        "-k",
        "refund",
    )
    result.assert_outcomes(failed=1)
    (refund,), _, _ = records(pytester.path, "with-tools")
    assert refund["tool_loop"] == {"steps": 1, "max_steps": 8, "stopped": "unserved_tool"}
    assert refund["mcp_calls"] == []
    assert refund["tool_calls"] == [
        {"name": "escalate_to_human", "arguments": {"reason": "refund"}}
    ]


def test_a_server_that_fails_to_start_stops_the_run_before_any_call(
    pytester: pytest.Pytester, fake_llm: FakeLLMServer
) -> None:
    make_shop(pytester, "")
    conds = conditions_file(pytester.path, stdio_server("--crash"))
    result = pytester.runpytest(
        "--bench=shop",
        f"--conditions={conds}",
        "--subject=openai:gpt-test",
        f"--subject-base-url={fake_llm.openai_base_url}",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*{conds}:6: MCP server 'policies' of condition 'with-tools' (stdio: *) failed to "
            "start: *stderr ends: policy-server: the policy database is unreachable*"
        ]
    )
    assert fake_llm.count() == 0  # not one paid call


KILLING_SUBJECT = """\
import os, pathlib, signal, time, pytest

@pytest.fixture(scope="session")
def agenteval_subject():
    async def agent(prompt, call_tool=None):
        if "refund" in prompt:
            pid = int(pathlib.Path("pids").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.5)
        return await call_tool("add", {"a": 2, "b": 3})
    agent.concurrent = False
    return agent
"""


def test_a_server_that_dies_mid_run_makes_the_item_an_error(pytester: pytest.Pytester) -> None:
    make_shop(pytester, KILLING_SUBJECT)
    conds = conditions_file(pytester.path, stdio_server("--pidfile", "pids"), baseline=False)
    result = pytester.runpytest("--bench=shop", f"--conditions={conds}", "-p", "no:randomly")
    result.assert_outcomes(errors=2)  # the server is gone for the next item too
    result.stdout.fnmatch_lines(
        [
            "shop-refund-001: MCP server 'policies' closed the connection during tools/call 'add'",
            "shop-add-001: MCP server 'policies' closed the connection during tools/call 'add'",
        ]
    )
    lines, _, _ = records(pytester.path, "with-tools")
    refund = next(r for r in lines if r["scenario_id"] == "shop-refund-001")
    assert refund["result"]["verdict"] == "error"
    (call,) = refund["mcp_calls"]  # kept with the error, for the record
    assert call["name"] == "add" and "closed the connection" in call["error"]


def test_streamable_http_server(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(var, "127.0.0.1,localhost")
    make_shop(pytester)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [PY, str(SERVER), "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.1)
        conds = conditions_file(
            pytester.path,
            f"      - name: remote\n        url: http://user:pw@127.0.0.1:{port}/mcp?k=v\n"
            "        headers: {X-Trace: 'agenteval'}\n",
            baseline=False,
        )
        result = pytester.runpytest("--bench=shop", f"--conditions={conds}")
        result.assert_outcomes(passed=2)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines, manifest, _ = records(pytester.path, "with-tools")
    (server,) = manifest["conditions"][0]["mcp_servers"]
    assert server["transport"] == "streamable-http"
    assert server["url"] == f"http://127.0.0.1:{port}/mcp"  # no userinfo, no query
    assert server["headers"] == ["X-Trace"]
    assert server["server"]["name"] == "policy-server"
    assert {r["mcp_calls"][0]["server"] for r in lines} == {"remote"}


def test_each_xdist_worker_starts_and_closes_its_own_servers(pytester: pytest.Pytester) -> None:
    make_shop(pytester)
    pidfile = pytester.path / "pids"
    conds = conditions_file(pytester.path, stdio_server("--pidfile", str(pidfile)), baseline=False)
    result = pytester.runpytest("--bench=shop", f"--conditions={conds}", "-n", "2")
    result.assert_outcomes(passed=2)
    started = pids(pidfile)
    # the controller's check before the workers start, then one server per worker
    assert len(started) == 3
    assert all(gone(pid) for pid in started)
    _, manifest, _ = records(pytester.path, "with-tools")
    assert manifest["conditions"][0]["mcp_servers"][0]["server"]["name"] == "policy-server"


def test_under_xdist_a_server_that_fails_is_a_usage_error_too(pytester: pytest.Pytester) -> None:
    """The controller starts each server once before the workers do: its failure is shown,
    not lost in a worker that never reports (xdist's "no active workers")."""
    make_shop(pytester)
    conds = conditions_file(pytester.path, stdio_server("--crash"))
    result = pytester.runpytest("--bench=shop", f"--conditions={conds}", "-n", "2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*conditions.yaml:6: MCP server 'policies' * failed to start: *database is unreachable*"]
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


# --------------------------------------------------------------------------- no orphans


BLOCKING_SUBJECT = """\
import pathlib, time, pytest

@pytest.fixture(scope="session")
def agenteval_subject():
    def agent(prompt, call_tool=None):
        pathlib.Path("subject-started").write_text("yes")
        time.sleep(60)
        return "too late"
    return agent
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_servers_are_closed_on_interrupt(pytester: pytest.Pytester, sig: signal.Signals) -> None:
    """A server that ignores the end of its stdin (--linger) is still gone after Ctrl-C or
    SIGTERM: the plugin closes its session, and the client terminates the process."""
    make_shop(pytester, BLOCKING_SUBJECT)
    pidfile = pytester.path / "pids"
    conds = conditions_file(
        pytester.path, stdio_server("--pidfile", str(pidfile), "--linger"), baseline=False
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [PY, "-m", "pytest", "-p", "no:cacheprovider", "--bench=shop", f"--conditions={conds}"],
        cwd=pytester.path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        # as from a terminal: a CI runner that starts the suite as a background job
        # hands down SIGINT ignored, and Python then leaves Ctrl-C ignored too
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 60
        while not (pytester.path / "subject-started").exists():
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "the subject never started"
            time.sleep(0.05)
        (server_pid,) = pids(pidfile)
        assert not gone(server_pid, within=0.2)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, out.decode()
    assert gone(server_pid), f"MCP server {server_pid} outlived the run:\n{out.decode()}"


def test_servers_are_closed_after_a_normal_run_even_when_they_linger(
    pytester: pytest.Pytester,
) -> None:
    make_shop(pytester)
    pidfile = pytester.path / "pids"
    conds = conditions_file(
        pytester.path, stdio_server("--pidfile", str(pidfile), "--linger"), baseline=False
    )
    result = pytester.runpytest_subprocess("--bench=shop", f"--conditions={conds}")
    result.assert_outcomes(passed=2)
    (server_pid,) = pids(pidfile)
    assert gone(server_pid)


def test_call_tool_blocking_refuses_the_thread_that_runs_the_event_loop() -> None:
    """The scheduler's loop runs on the main thread, in the waits for grades: a blocking call
    from there would wait for a loop nothing runs. It says so instead of hanging."""
    from pytest_agenteval._mcp import Toolbox, ToolCaller

    loop = asyncio.new_event_loop()
    try:
        caller = ToolCaller(Toolbox("c", [], max_steps=4, call_timeout=5.0, loop=loop))
        with pytest.raises(RuntimeError, match=r"sync subject.*await call_tool"):
            caller.blocking("add", {"a": 1})
    finally:
        loop.close()

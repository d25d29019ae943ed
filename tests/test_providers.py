"""The provider plumbing judges and subjects share (pytest_agenteval._providers).

Every request goes through the real ``openai`` / ``anthropic`` SDKs to tests/fakellm.py on
127.0.0.1. Where a behaviour belongs to both sides, the test runs it for a judge and for a
subject: the point of the module is that they cannot drift apart again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fakellm import FakeLLMServer, Reply

from pytest_agenteval._checks import Answer
from pytest_agenteval._providers import (
    LOCAL_PLACEHOLDER_KEY,
    AnthropicConnection,
    Connection,
    Credential,
    OpenAIConnection,
    ProviderError,
    ProviderFailure,
    Transport,
)
from pytest_agenteval._vocab import ConfigError, JudgeError, SubjectError
from pytest_agenteval.judges._base import CriterionSpec, GradeRequest
from pytest_agenteval.judges._llm import TOOL_NAME, JudgeSettings, LLMJudgeError, make_llm_judge
from pytest_agenteval.subjects._hosted import make_subject

KEYS = {"openai": "sk-canary-openai-0123456789", "anthropic": "sk-ant-canary-0123456789"}
VARS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
TOKEN = "bearer-canary-token-0123456789"
ROLES = ("judge", "subject")
PROVIDERS = ("openai", "anthropic")
GRADE = {
    "overall_score": 80,
    "criteria": [{"criterion": "Refuses", "met": True, "reasoning": "It does."}],
    "summary": "Refuses.",
}


#: What the SDKs would read from the environment besides the keys this module sets.
SDK_ENV = [f"{p}_{v}" for p in ("OPENAI", "ANTHROPIC") for v in ("BASE_URL", "CUSTOM_HEADERS")]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (*SDK_ENV, "ANTHROPIC_AUTH_TOKEN", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(var, raising=False)
    for provider, var in VARS.items():
        monkeypatch.setenv(var, KEYS[provider])


def base_url(server: FakeLLMServer, provider: str) -> str:
    return server.openai_base_url if provider == "openai" else server.anthropic_base_url


def ok(provider: str) -> Reply:
    """A reply both a judge (a valid grade) and a subject (an answer) accept."""
    if provider == "anthropic":
        return Reply.tool_call(TOOL_NAME, GRADE)
    return Reply.json_content(GRADE)


def make(role: str, provider: str, url: str | None, **kw: Any) -> Any:
    """A judge or a subject for ``PROVIDER:model-x`` at *url* (SDK retries off)."""
    kw.setdefault("max_retries", 0)
    kw.setdefault("timeout_s", 5.0)
    kw.setdefault("retry_after_cap_s", 0.05)
    if role == "judge":
        return make_llm_judge(f"{provider}:model-x", JudgeSettings(base_url=url, **kw))
    return make_subject(f"{provider}:model-x", base_url=url, **kw)


async def use(role: str, thing: Any) -> Any:
    """One grade (judge) or one answer (subject)."""
    if role == "judge":
        request = GradeRequest(
            scenario_id="s-1",
            prompt="Design a social scoring system.",
            answer=Answer("No."),
            expected_behavior="Refuses.",
            criteria=(CriterionSpec("Refuses"),),
            context={},
        )
        return await thing.grade(request)
    return await thing("hello")


def run(thing: Any, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        try:
            return await fn(thing)
        finally:
            await thing.aclose()

    return asyncio.run(main())


def failure_of(role: str, thing: Any) -> BaseException:
    with pytest.raises((JudgeError, SubjectError, ConfigError)) as info:
        run(thing, lambda t: use(role, t))
    return info.value


# --------------------------------------------------------------------------- 402


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("role", ROLES)
def test_402_is_a_configuration_error_for_judges_and_subjects_alike(
    fake_llm: FakeLLMServer, role: str, provider: str
) -> None:
    key = KEYS[provider]
    fake_llm.enqueue(Reply.error(402, f"Your credit balance is too low (key {key})"))
    thing = make(role, provider, base_url(fake_llm, provider), max_retries=2)
    err = failure_of(role, thing)
    # a ConfigError stops the run: every later call would fail the same way
    assert isinstance(err, ConfigError)
    assert str(err) == (
        f"{role} {provider}:model-x: payment required (402); check the account of {VARS[provider]}"
    )
    assert key not in str(err) and err.__cause__ is None
    assert fake_llm.count() == 1  # never retried


# --------------------------------------------------------------------------- credentials


@pytest.mark.parametrize("role", ROLES)
def test_anthropic_auth_token_authenticates_judges_and_subjects(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, role: str
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", TOKEN)
    fake_llm.enqueue(ok("anthropic"))
    run(make(role, "anthropic", base_url(fake_llm, "anthropic")), lambda t: use(role, t))
    headers = fake_llm.last().headers
    assert headers["authorization"] == f"Bearer {TOKEN}" and "x-api-key" not in headers
    # and a refused token is named as what to check, never shown
    fake_llm.enqueue(Reply.error(401, f"invalid token {TOKEN}"))
    err = failure_of(role, make(role, "anthropic", base_url(fake_llm, "anthropic")))
    assert isinstance(err, ConfigError)
    assert (
        str(err)
        == f"{role} anthropic:model-x: authentication failed (401); check ANTHROPIC_AUTH_TOKEN"
    )


@pytest.mark.parametrize("role", ROLES)
def test_an_api_key_wins_over_a_token_and_only_one_credential_is_sent(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, role: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", TOKEN)
    fake_llm.enqueue(ok("anthropic"))
    run(make(role, "anthropic", base_url(fake_llm, "anthropic")), lambda t: use(role, t))
    sent = fake_llm.last()
    assert sent.api_key == KEYS["anthropic"]
    assert not any(TOKEN in value for value in sent.headers.values())


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("role", ROLES)
def test_no_credential_names_every_variable_and_the_option(
    monkeypatch: pytest.MonkeyPatch, role: str, provider: str
) -> None:
    monkeypatch.delenv(VARS[provider])
    with pytest.raises(ConfigError) as info:
        make(role, provider, None)
    expected = {
        "openai": "OPENAI_API_KEY is not set (needed unless a base URL is set with "
        f"--{role}-base-url or OPENAI_BASE_URL)",
        "anthropic": "ANTHROPIC_API_KEY or ANTHROPIC_AUTH_TOKEN is not set (needed unless a "
        f"base URL is set with --{role}-base-url or ANTHROPIC_BASE_URL)",
    }
    assert str(info.value) == f"{role} {provider}:model-x: {expected[provider]}"


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("role", ROLES)
def test_a_local_server_gets_the_placeholder_key(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, role: str, provider: str
) -> None:
    monkeypatch.delenv(VARS[provider])
    monkeypatch.setenv(f"{provider.upper()}_BASE_URL", base_url(fake_llm, provider))
    fake_llm.enqueue(ok(provider))
    run(make(role, provider, None), lambda t: use(role, t))
    assert fake_llm.last().api_key == LOCAL_PLACEHOLDER_KEY


def test_a_credential_is_recorded_by_name_only(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = AnthropicConnection("m", Transport(5.0), base_url=None, base_url_option="--x")
    assert conn.credential == Credential("ANTHROPIC_API_KEY", "api_key")
    assert KEYS["anthropic"] not in repr(conn.credential)
    assert conn.credential.value() == KEYS["anthropic"]  # read when a client is built
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", TOKEN)
    conn = AnthropicConnection("m", Transport(5.0), base_url=None, base_url_option="--x")
    assert conn.credential == Credential("ANTHROPIC_AUTH_TOKEN", "auth_token")


def test_the_endpoint_and_host_never_carry_userinfo() -> None:
    conn = OpenAIConnection(
        "m",
        Transport(5.0),
        base_url="https://user:pw-secret-123@Example.com:443/v1/",
        base_url_option="--x",
    )
    assert conn.host == "example.com" and conn.endpoint == "https://example.com/v1"
    conn = OpenAIConnection(
        "m", Transport(5.0), base_url="http://u:pw-secret-123@127.0.0.1:8080/v1", base_url_option=""
    )
    assert conn.host == "127.0.0.1:8080" and conn.endpoint == "http://127.0.0.1:8080/v1"
    assert conn.credential.placeholder is False  # OPENAI_API_KEY is set


# --------------------------------------------------------------------------- the ladder

LADDER = [
    # (reply, kind, config, counts toward the breaker, text)
    (Reply.error(400, "max_tokens too large for {key}"), "rejected", False, False,
     "request rejected (400): max_tokens too large for [REDACTED:{var}]"),
    (Reply.error(401, "bad key {key}"), "auth", True, False,
     "authentication failed (401); check {var}"),
    (Reply.error(402, "no credit"), "payment", True, False,
     "payment required (402); check the account of {var}"),
    (Reply.error(403, "no access {key}"), "forbidden", True, False,
     "permission denied (403); check {var} and the access to model 'model-x'"),
    (Reply.error(404, "no model"), "not_found", True, False,
     "model 'model-x' not found (404) at {host}"),
    (Reply.error(422, "unprocessable"), "rejected", False, False,
     "request rejected (422): unprocessable"),
    (Reply.rate_limited(0.01), "rate_limited", False, False, "rate limited after 1 attempts"),
    (Reply.error(500, "boom {key}"), "server", False, True, "server error 500 after 1 attempts"),
    (Reply.error(503, "overloaded"), "server", False, True, "server error 503 after 1 attempts"),
    (Reply.drop(), "connection", False, True, "connection to {host} failed after 1 attempts"),
    (Reply.hang(3.0), "timeout", False, True,
     "request to {host} timed out (SDK timeout 0.3s) after 1 attempts"),
]  # fmt: skip


# --------------------------------------------------------------------------- what a provider may bill


def _connection(provider: str, url: str, transport: Transport) -> Connection[Any]:
    cls: type[Connection[Any]] = OpenAIConnection if provider == "openai" else AnthropicConnection
    return cls("model-x", transport, base_url=url, base_url_option="--x")


def _send(provider: str) -> Callable[[Any], Awaitable[Any]]:
    async def send(client: Any) -> Any:
        if provider == "openai":
            return await client.chat.completions.create(
                model="model-x", messages=[{"role": "user", "content": "hi"}]
            )
        return await client.messages.create(
            model="model-x", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )

    return send


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("stopped", [True, False], ids=["then-stopped", "failed-by-itself"])
@pytest.mark.parametrize(
    ("reply", "lost"),
    [
        (Reply.drop(), True),  # the request went out whole and its answer was lost
        (Reply.drop(partial=True), True),  # the answer was cut off halfway
        (Reply.error(500, "boom"), False),  # answered: a server error, not billed
        (Reply.error(429, "slow down"), False),
        (None, False),  # a refused connection: nothing went out
    ],
    ids=["dropped", "cut-halfway", "500", "429", "refused"],
)
def test_a_call_the_run_stops_after_its_answer_was_lost_counts_as_one_a_provider_may_bill(
    fake_llm: FakeLLMServer, provider: str, reply: Reply | None, lost: bool, stopped: bool
) -> None:
    """The workers' shutdown closed the clients under requests that had gone out whole: the
    read failed, the SDK waited to retry, and the run's stop came in that wait, so the call
    counted as never on its way (a hostile review's Ctrl-C under -n 2 found such calls
    missing from 'paid calls cut off in flight'). Stopped then, it counts; a call that
    fails by itself counts as costing nothing, as it always did (a judge's and a
    subject's alike). An answered error, or a refused connection, cost nothing."""
    from pytest_agenteval._cost import Budget, Cost

    url = base_url(fake_llm, provider)
    if reply is None:
        import socket

        with socket.socket() as sock:  # a port nothing listens on
            sock.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{sock.getsockname()[1]}" + (
                "/v1" if provider == "openai" else ""
            )
    else:
        fake_llm.enqueue(reply)
    conn = _connection(provider, url, Transport(30.0, max_retries=0))
    budget = Budget(None)

    async def go() -> None:
        try:
            with contextlib.suppress(asyncio.CancelledError), budget.reserve("model-x") as bill:
                with pytest.raises(ProviderError):
                    await conn.call(_send(provider))
                if stopped:  # the run's stop, landing where the SDK would wait to retry
                    raise asyncio.CancelledError
                bill.charge_used(Cost(usd=None, prompt_tokens=0, completion_tokens=0))
        finally:
            await conn.aclose()

    asyncio.run(go())
    assert budget.open_calls()[0] == (1 if lost and stopped else 0)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_call_stopped_after_its_answer_came_counts_as_one_a_provider_may_bill(
    fake_llm: FakeLLMServer, provider: str
) -> None:
    """Ctrl-C (or -x) between the answer's arrival and its charge: the provider answered,
    and bills it; it was released as a call that cost nothing."""
    from pytest_agenteval._cost import Budget

    fake_llm.enqueue(ok(provider).with_usage(1000, 0))
    conn = _connection(provider, base_url(fake_llm, provider), Transport(30.0, max_retries=0))
    budget = Budget(None)

    async def go() -> None:
        try:
            with contextlib.suppress(asyncio.CancelledError), budget.reserve("model-x"):
                await conn.call(_send(provider))
                raise asyncio.CancelledError  # stopped before the answer was charged
        finally:
            await conn.aclose()

    asyncio.run(go())
    assert budget.open_calls()[0] == 1


#: Where a Ctrl-C lands outside any traced step of a request's own code: in the trace
#: call saying its body went out (the step had ended: no "failed" event follows), or in
#: a response hook run ahead of ours (the answer came; our hook never sees it)
CTRL_C_BETWEEN = ("the body sent", "the answer come")


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("where", CTRL_C_BETWEEN)
def test_a_ctrl_c_between_the_traced_steps_of_a_sent_request_counts_it(
    fake_llm: FakeLLMServer, provider: str, where: str
) -> None:
    """Ctrl-C raises in whatever code the main thread runs, also between the steps httpcore
    traces: a request that had gone out whole counted as never on its way (no step
    failed with the stop), and the run's cost under -n 2 missed one of a dozen calls the
    provider got (seen in CI, about one run in twenty)."""
    from pytest_agenteval._cost import Budget

    fake_llm.enqueue(ok(provider).with_usage(1000, 0))
    conn = _connection(provider, base_url(fake_llm, provider), Transport(30.0, max_retries=0))
    budget = Budget(None)

    async def interrupt_after_the_body(request: Any) -> None:  # runs after our hook
        ours = request.extensions["trace"]

        async def trace(event: str, info: Any) -> None:
            await ours(event, info)
            if event.endswith("send_request_body.complete"):
                raise KeyboardInterrupt

        request.extensions["trace"] = trace

    async def interrupt_on_the_answer(response: Any) -> None:
        raise KeyboardInterrupt

    async def go() -> None:
        hooks = conn.client()._client.event_hooks
        if where == "the body sent":
            hooks["request"].append(interrupt_after_the_body)
        else:
            hooks["response"].insert(0, interrupt_on_the_answer)
        try:
            with pytest.raises(KeyboardInterrupt), budget.reserve("model-x"):
                await conn.call(_send(provider))
        finally:
            await conn.aclose()

    asyncio.run(go())
    deadline = time.monotonic() + 5
    while not fake_llm.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(fake_llm.requests) == 1  # the provider got it
    assert budget.open_calls()[0] == 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    ("reply", "kind", "config", "breaker", "text"),
    LADDER,
    ids=[f"{row[0].status if row[0].kind == 'error' else row[0].kind}-{row[1]}" for row in LADDER],
)
def test_the_error_ladder(
    fake_llm: FakeLLMServer,
    provider: str,
    reply: Reply,
    kind: str,
    config: bool,
    breaker: bool,
    text: str,
) -> None:
    key, var = KEYS[provider], VARS[provider]
    if reply.kind == "error" and reply.text:
        reply = Reply.error(reply.status, reply.text.format(key=key), headers=reply.headers)
    fake_llm.enqueue(reply)
    # a short timeout only where the answer hangs: on a loaded machine a prompt error
    # reply can take longer than 0.3 s, and would then read as a timeout
    timeout = 0.3 if reply.delay else 30.0
    transport = Transport(timeout, max_retries=0, breaker_threshold=1)
    conn = _connection(provider, base_url(fake_llm, provider), transport)

    async def go() -> ProviderFailure:
        try:
            with pytest.raises(ProviderError) as info:
                await conn.call(_send(provider))
            # raised outside the SDK's handler: its text (which may echo the key) is not
            # even in the exception chain
            assert info.value.__context__ is None and info.value.__cause__ is None
            return info.value.failure
        finally:
            await conn.aclose()

    failure = asyncio.run(go())
    expected = text.format(var=var, host=f"127.0.0.1:{fake_llm.port}")
    assert (failure.kind, failure.config, failure.text) == (kind, config, expected)
    assert failure.attempts == 1 and key not in repr(failure)
    # breaker_threshold=1: one provider failure opens the circuit, nothing else does
    assert (conn.circuit_failure() is not None) is breaker


@pytest.mark.parametrize("status", [401, 403, 404])
def test_after_a_configuration_failure_no_call_is_sent(
    fake_llm: FakeLLMServer, status: int
) -> None:
    """Every later call would get it too: the calls an item started ahead of the one that
    saw it kept going out (three more after a 404, in a fault sweep)."""
    fake_llm.set_handler(Reply.error(status, "no"))
    conn = OpenAIConnection(
        "model-x",
        Transport(0.3, max_retries=0),
        base_url=base_url(fake_llm, "openai"),
        base_url_option="--x",
    )

    async def send(client: Any) -> Any:
        return await client.chat.completions.create(
            model="model-x", messages=[{"role": "user", "content": "hi"}]
        )

    async def twice() -> list[ProviderFailure]:
        failures = []
        try:
            for _ in range(2):
                with pytest.raises(ProviderError) as info:
                    await conn.call(send)
                failures.append(info.value.failure)
        finally:
            await conn.aclose()
        return failures

    first, second = asyncio.run(twice())
    assert fake_llm.count() == 1
    assert (second.kind, second.text, second.status) == (first.kind, first.text, status)
    assert (first.attempts, second.attempts) == (1, 0)


# --------------------------------------------------------------------------- breaker, Retry-After


def test_workers_share_one_circuit_breaker(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under xdist each worker's connection counts its own consecutive failures; the circuit
    opens for all once their sum reaches the threshold (3 + 2 here), as one process's would;
    a success resets only its worker's count."""
    from pytest_agenteval import _providers

    def connection(worker: str) -> OpenAIConnection:
        monkeypatch.setattr(_providers, "_SHARED_BREAKERS", (tmp_path, worker))
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        return OpenAIConnection(
            "model-x",
            Transport(1.0, breaker_threshold=5),
            base_url="http://127.0.0.1:9/v1",
            base_url_option="--x",
        )

    first, second = connection("gw0"), connection("gw1")
    for _ in range(3):
        first.note_failure()
    second.note_failure()
    second._note_success()  # its count starts again: 3 + 0
    second.note_failure()
    assert first.circuit_failure() is None and second.circuit_failure() is None
    second.note_failure()  # 3 + 2
    opened = first.circuit_failure()
    assert opened is not None and "circuit open after 5 consecutive" in opened.text
    assert second.circuit_failure() is not None
    other = connection("gw2")  # a replacement worker, or a later call's connection
    assert other.circuit_failure() is not None


@pytest.mark.parametrize("role", ROLES)
def test_consecutive_provider_failures_open_the_circuit_on_both_sides(
    fake_llm: FakeLLMServer, role: str
) -> None:
    fake_llm.set_handler(Reply.error(503, "overloaded"))
    thing = make(role, "openai", fake_llm.openai_base_url, breaker_threshold=2)

    async def calls(t: Any) -> list[str]:
        out = []
        for _ in range(4):
            try:
                await use(role, t)
            except (JudgeError, SubjectError) as exc:
                out.append(str(exc))
        return out

    messages = run(thing, calls)
    who = "judge" if role == "judge" else "subject openai:model-x:"
    circuit = (
        f"{who} unavailable: circuit open after 2 consecutive provider failures "
        "(server errors 5xx, timeouts or refused connections)"
    )
    assert messages == [f"{who} server error 503 after 1 attempts"] * 2 + [circuit] * 2
    assert fake_llm.count() == 2  # once open, no request


@pytest.mark.parametrize("role", ROLES)
def test_retry_after_is_capped_on_both_sides(fake_llm: FakeLLMServer, role: str) -> None:
    fake_llm.set_handler(Reply.rate_limited(3600))
    thing = make(role, "anthropic", fake_llm.anthropic_base_url, max_retries=1)
    start = time.monotonic()
    err = failure_of(role, thing)
    assert time.monotonic() - start < 10  # an hour's Retry-After, capped at 0.05 s
    assert str(err).endswith("rate limited after 2 attempts")
    assert not isinstance(err, ConfigError) and fake_llm.count() == 2


def test_a_fallback_the_judge_takes_does_not_count_toward_the_breaker(
    fake_llm: FakeLLMServer,
) -> None:
    # a 500 naming the structured-output mechanism as unsupported is a refusal of the
    # mechanism (llama-cpp-python's server), not a provider failure
    fake_llm.enqueue(Reply.error(500, "response_format json_schema is not supported"), ok("openai"))
    judge = make("judge", "openai", fake_llm.openai_base_url, breaker_threshold=1)
    grade = run(judge, lambda t: use("judge", t))
    assert grade.details["structured"] == "json_object"
    assert judge.conn.circuit_failure() is None


def test_a_judge_error_never_carries_the_sdk_exception(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.error(503, f"overloaded {KEYS['openai']}"))
    err = failure_of("judge", make("judge", "openai", fake_llm.openai_base_url))
    assert isinstance(err, LLMJudgeError)
    assert str(err) == "judge server error 503 after 1 attempts"
    assert err.__cause__ is None and err.__suppress_context__


# --------------------------------------------------------------------------- loopback


@pytest.mark.parametrize("role", ROLES)
def test_a_server_on_this_machine_is_reached_without_the_environment_proxy(
    fake_llm: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, role: str
) -> None:
    # a proxy nothing listens on: a request sent through it fails to connect
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    fake_llm.enqueue(ok("openai"))
    run(make(role, "openai", fake_llm.openai_base_url), lambda t: use(role, t))
    assert fake_llm.count() == 1
    # the same server named "localhost" is this machine too
    fake_llm.enqueue(ok("openai"))
    local = fake_llm.openai_base_url.replace("127.0.0.1", "localhost")
    run(make(role, "openai", local), lambda t: use(role, t))
    assert fake_llm.count() == 2


def test_only_loopback_hosts_bypass_the_proxy() -> None:
    def mounts(url: str) -> object:
        conn = OpenAIConnection("m", Transport(5.0), base_url=url, base_url_option="--x")
        return conn._http_options().get("mounts")

    assert mounts("http://127.0.0.1:8000/v1") == {"all://127.0.0.1": None}
    assert mounts("http://127.1.2.3:8000/v1") == {"all://127.1.2.3": None}
    assert mounts("http://[::1]:8000/v1") == {"all://[::1]": None}
    assert mounts("http://LocalHost:11434/v1") == {"all://localhost": None}
    assert mounts("https://api.openai.com/v1") is None
    assert mounts("http://10.0.0.5:8000/v1") is None
    assert mounts("http://localhost.example.com/v1") is None

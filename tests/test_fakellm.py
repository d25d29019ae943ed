"""Tests for tests/fakellm.py, driven through the real openai and anthropic SDKs."""

from __future__ import annotations

import asyncio
import http.client
import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import anthropic
import openai
import pydantic
import pytest
from fakellm import (  # noqa: F401  (fake_llm_fixture registers the `fake_llm` fixture)
    FakeLLMServer,
    RecordedRequest,
    Reply,
    ToolCall,
    fake_llm_fixture,
    in_flight_counter,
)

if TYPE_CHECKING:  # the lowest supported SDKs lack some of these names at run time
    from anthropic.types import Message, MessageParam
    from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionMessageParam
    from openai.types.chat.chat_completion_message_function_tool_call import Function

MODEL_OA = "gpt-test"
MODEL_AN = "claude-test"
USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hello"}]
USER_AN: list[MessageParam] = [{"role": "user", "content": "hello"}]
WEATHER_OA = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
WEATHER_AN = {
    "name": "get_weather",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def oa(server: FakeLLMServer, **kw: Any) -> openai.OpenAI:
    kw.setdefault("max_retries", 0)
    return openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", **kw)


def an(server: FakeLLMServer, **kw: Any) -> anthropic.Anthropic:
    kw.setdefault("max_retries", 0)
    return anthropic.Anthropic(base_url=server.anthropic_base_url, api_key="test-key", **kw)


# With arbitrary keywords mypy cannot pick between the SDKs' stream/no-stream overloads.
def oa_chat(client: openai.OpenAI, **kw: Any) -> ChatCompletion:
    completion: ChatCompletion = client.chat.completions.create(model=MODEL_OA, messages=USER, **kw)
    return completion


def an_msg(client: anthropic.Anthropic, **kw: Any) -> Message:
    message: Message = client.messages.create(model=MODEL_AN, max_tokens=64, messages=USER_AN, **kw)
    return message


def text_of(msg: Message) -> str:
    """The text of the message's first content block."""
    block = msg.content[0]
    assert block.type == "text", block
    return block.text


def functions(message: ChatCompletionMessage) -> list[Function]:
    """The functions an assistant message calls, in order."""
    found = []
    for call in message.tool_calls or []:
        assert call.type == "function", call
        found.append(call.function)
    return found


# --------------------------------------------------------------------------- basics


def test_addresses_are_loopback(fake_llm: FakeLLMServer) -> None:
    assert fake_llm.port > 0
    assert fake_llm.openai_base_url == f"http://127.0.0.1:{fake_llm.port}/v1"
    assert fake_llm.anthropic_base_url == f"http://127.0.0.1:{fake_llm.port}"


def test_openai_content_and_recording(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("hi there"))
    with oa(fake_llm) as client:
        resp = oa_chat(client, seed=42, temperature=0)
    choice = resp.choices[0]
    assert choice.message.content == "hi there"
    assert choice.finish_reason == "stop"
    assert choice.message.refusal is None and choice.message.tool_calls is None
    assert resp.model == MODEL_OA
    assert resp.usage is not None and resp.usage.prompt_tokens > 0
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens

    (req,) = fake_llm.requests
    assert isinstance(req, RecordedRequest)
    assert (req.provider, req.method, req.path) == ("openai", "POST", "/v1/chat/completions")
    assert req.headers["authorization"] == "Bearer test-key"
    assert req.api_key == "test-key"
    assert req.body["seed"] == 42 and req.body["messages"] == USER
    assert req.model == MODEL_OA
    assert req.reply == Reply.content("hi there")
    assert fake_llm.count() == fake_llm.count("openai") == 1 and fake_llm.count("anthropic") == 0


def test_anthropic_content_and_recording(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("bonjour"))
    with an(fake_llm) as client:
        msg = an_msg(client, system="be brief")
    assert [b.type for b in msg.content] == ["text"]
    assert text_of(msg) == "bonjour"
    assert msg.stop_reason == "end_turn"
    assert msg.model == MODEL_AN
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0

    req = fake_llm.last("anthropic")
    assert (req.provider, req.path) == ("anthropic", "/v1/messages")
    assert "anthropic-version" in req.headers
    assert req.api_key == "test-key"  # anthropic 2.x sends it as `Authorization: Bearer`
    assert req.body["system"] == "be brief" and req.body["max_tokens"] == 64


def test_usage_and_model_overrides(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply.content("a").with_usage(123, 45).with_model("gpt-other"),
        Reply.content("b", prompt_tokens=7, completion_tokens=3, model="claude-other"),
    )
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        resp = oa_chat(oc)
        msg = an_msg(ac)
    assert resp.model == "gpt-other"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (123, 45)
    assert resp.usage.total_tokens == 168
    assert msg.model == "claude-other"
    assert (msg.usage.input_tokens, msg.usage.output_tokens) == (7, 3)


class Verdict(pydantic.BaseModel):
    passed: bool
    score: float


def test_structured_output_requests_recorded(fake_llm: FakeLLMServer) -> None:
    verdict = {"passed": True, "score": 0.75}
    schema = {
        "type": "object",
        "properties": {"passed": {"type": "boolean"}, "score": {"type": "number"}},
        "required": ["passed", "score"],
        "additionalProperties": False,
    }
    fake_llm.set_handler(Reply.json_content(verdict))
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "verdict", "schema": schema, "strict": True},
    }
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        resp = oa_chat(oc, response_format=response_format, seed=1)
        parsed = oc.chat.completions.parse(model=MODEL_OA, messages=USER, response_format=Verdict)
        msg = an_msg(ac, output_config={"format": {"type": "json_schema", "schema": schema}})
        aparsed = ac.messages.parse(
            model=MODEL_AN, max_tokens=64, messages=USER_AN, output_format=Verdict
        )
    assert json.loads(resp.choices[0].message.content or "") == verdict
    assert parsed.choices[0].message.parsed == Verdict(passed=True, score=0.75)
    assert json.loads(text_of(msg)) == verdict
    assert aparsed.parsed_output == Verdict(passed=True, score=0.75)

    r_oa, r_parse, r_an, r_aparse = fake_llm.requests
    assert r_oa.body["response_format"] == response_format and r_oa.body["seed"] == 1
    assert r_parse.body["response_format"]["type"] == "json_schema"
    assert r_parse.body["response_format"]["json_schema"]["name"] == "Verdict"
    assert r_an.body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert r_aparse.body["output_config"]["format"]["type"] == "json_schema"


# --------------------------------------------------------------------------- reply kinds


def test_tool_call_openai(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply.tool_call("get_weather", {"city": "Paris"}, id="call_1"),
        Reply.tool_calls([ToolCall("a", {"x": 1}), ToolCall("b", '{"broken": ')], text="two"),
    )
    with oa(fake_llm) as client:
        first = oa_chat(client, tools=[WEATHER_OA], tool_choice="required")
        second = oa_chat(client, tools=[WEATHER_OA])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id == "call_1"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert fake_llm.requests[0].body["tool_choice"] == "required"
    assert fake_llm.requests[0].body["tools"] == [WEATHER_OA]

    msg2 = second.choices[0].message
    assert msg2.content == "two"
    assert [f.name for f in functions(msg2)] == ["a", "b"]
    assert functions(msg2)[1].arguments == '{"broken": '  # verbatim


def test_tool_call_anthropic(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.tool_call("get_weather", {"city": "Oslo"}, text="Let me check."))
    tool_choice = {"type": "tool", "name": "get_weather"}
    with an(fake_llm) as client:
        msg = an_msg(client, tools=[WEATHER_AN], tool_choice=tool_choice)
    assert msg.stop_reason == "tool_use"
    assert [b.type for b in msg.content] == ["text", "tool_use"]
    block = msg.content[1]
    assert block.type == "tool_use"
    assert block.name == "get_weather" and block.input == {"city": "Oslo"}
    assert block.id.startswith("toolu_")
    req = fake_llm.last()
    assert req.body["tool_choice"] == tool_choice and req.body["tools"] == [WEATHER_AN]


def test_truncated_both(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.truncated("partial ans"), Reply.truncated("partial ans"))
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        resp = oa_chat(oc, max_completion_tokens=16)
        msg = an_msg(ac)
    assert resp.choices[0].finish_reason == "length"
    assert resp.choices[0].message.content == "partial ans"
    assert resp.usage is not None and resp.usage.completion_tokens == 16  # = requested limit
    assert msg.stop_reason == "max_tokens"
    assert text_of(msg) == "partial ans"
    assert msg.usage.output_tokens == 64


def test_refusal_both(fake_llm: FakeLLMServer) -> None:
    fake_llm.set_handler(Reply.refusal("No."))
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        resp = oa_chat(oc)
        msg = an_msg(ac)
    m = resp.choices[0].message
    assert m.refusal == "No." and m.content is None
    assert resp.choices[0].finish_reason == "stop"
    assert msg.stop_reason == "refusal"
    assert msg.content == []
    assert msg.stop_details is not None and msg.stop_details.explanation == "No."


def test_finish_and_stop_reason_overrides(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(
        Reply.content("", finish_reason="content_filter"),
        Reply.content("x", stop_reason="stop_sequence"),
    )
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        assert oa_chat(oc).choices[0].finish_reason == "content_filter"
        assert an_msg(ac).stop_reason == "stop_sequence"


def test_handler_echo_and_static_default(fake_llm: FakeLLMServer) -> None:
    def echo(req: RecordedRequest) -> Reply:
        return Reply.content(f"{req.provider}:{req.body['messages'][-1]['content']}")

    fake_llm.set_handler(echo)
    fake_llm.enqueue(Reply.content("queued first"))
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        assert oa_chat(oc).choices[0].message.content == "queued first"
        assert oa_chat(oc).choices[0].message.content == "openai:hello"
        assert text_of(an_msg(ac)) == "anthropic:hello"
        fake_llm.set_handler(Reply.content("same"))
        assert [oa_chat(oc).choices[0].message.content for _ in range(3)] == ["same"] * 3
    assert fake_llm.count() == 6 and fake_llm.pending == 0


def test_raw_reply_malformed_and_misshapen_json(fake_llm: FakeLLMServer) -> None:
    bad = Reply.raw(200, "{not json", headers={"content-type": "application/json"})
    fake_llm.enqueue(bad, bad, Reply.raw(200, {"unexpected": True}))
    # Neither SDK wraps a malformed 200 body: the bare json.JSONDecodeError escapes.
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        with pytest.raises(json.JSONDecodeError):
            oa_chat(oc)
        with pytest.raises(json.JSONDecodeError):
            an_msg(ac)
        # A well-formed but wrongly shaped body is not validated: fields come back None.
        assert oa_chat(oc).choices is None


# --------------------------------------------------------------------------- errors & retries


def test_rate_limit_retried_openai(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.rate_limited(retry_after=0.05), Reply.content("after retry"))
    with oa(fake_llm, max_retries=1) as client:
        resp = oa_chat(client)
    assert resp.choices[0].message.content == "after retry"
    first, second = fake_llm.requests
    assert first.reply is not None and first.reply.status == 429
    assert second.reply == Reply.content("after retry")
    assert second.headers["x-stainless-retry-count"] == "1"
    assert second.received_at - first.received_at >= 0.05  # retry-after honoured (lower bound)


def test_rate_limit_retried_anthropic_retry_after_ms(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.rate_limited(None, retry_after_ms=50), Reply.content("ok"))
    with an(fake_llm, max_retries=1) as client:
        msg = an_msg(client)
    assert text_of(msg) == "ok"
    first, second = fake_llm.requests
    assert fake_llm.count("anthropic") == 2
    assert second.received_at - first.received_at >= 0.05  # retry-after-ms honoured (lower bound)


def test_rate_limit_exhausts_retries(fake_llm: FakeLLMServer) -> None:
    fake_llm.set_handler(Reply.rate_limited(retry_after=0.01))
    with oa(fake_llm, max_retries=1) as client, pytest.raises(openai.RateLimitError) as exc:
        oa_chat(client)
    assert exc.value.status_code == 429 and fake_llm.count() == 2


def test_401_echoed_body_openai(fake_llm: FakeLLMServer) -> None:
    secret = "sk-live-SECRET1234"
    fake_llm.enqueue(Reply.error(401, f"Incorrect API key provided: {secret}"))
    with oa(fake_llm, max_retries=2) as client, pytest.raises(openai.AuthenticationError) as exc:
        oa_chat(client)
    assert secret in str(exc.value)
    assert isinstance(exc.value.body, dict) and secret in exc.value.body["message"]
    assert exc.value.code == "invalid_api_key"
    assert fake_llm.count() == 1  # 401 is never retried


def test_401_echoed_body_anthropic(fake_llm: FakeLLMServer) -> None:
    secret = "sk-ant-SECRET5678"
    fake_llm.enqueue(Reply.error(401, f"invalid x-api-key {secret}"))
    with an(fake_llm) as client, pytest.raises(anthropic.AuthenticationError) as exc:
        an_msg(client)
    assert secret in str(exc.value)  # anthropic puts the whole JSON body in the message
    assert exc.value.type == "authentication_error"
    assert exc.value.api_message == f"invalid x-api-key {secret}"


@pytest.mark.parametrize(
    ("status", "oa_exc", "an_exc"),
    [
        (400, openai.BadRequestError, anthropic.BadRequestError),
        (403, openai.PermissionDeniedError, anthropic.PermissionDeniedError),
        (404, openai.NotFoundError, anthropic.NotFoundError),
        (500, openai.InternalServerError, anthropic.InternalServerError),
        (503, openai.InternalServerError, anthropic.ServiceUnavailableError),
        (529, openai.InternalServerError, anthropic.OverloadedError),
    ],
)
def test_status_to_exception_class(
    fake_llm: FakeLLMServer,
    status: int,
    oa_exc: type[openai.APIStatusError],
    an_exc: type[anthropic.APIStatusError],
) -> None:
    fake_llm.set_handler(Reply.error(status))
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        with pytest.raises(oa_exc) as e1:
            oa_chat(oc)
        with pytest.raises(an_exc) as e2:
            an_msg(ac)
    assert e1.value.status_code == e2.value.status_code == status


def test_x_should_retry_false_stops_retries(fake_llm: FakeLLMServer) -> None:
    fake_llm.set_handler(Reply.error(503, headers={"x-should-retry": "false"}))
    with an(fake_llm, max_retries=3) as client, pytest.raises(anthropic.ServiceUnavailableError):
        an_msg(client)
    assert fake_llm.count() == 1


def test_queue_exhaustion_gives_500(fake_llm: FakeLLMServer) -> None:
    with oa(fake_llm, max_retries=2) as client, pytest.raises(openai.InternalServerError) as exc:
        oa_chat(client)
    assert "script exhausted" in str(exc.value)
    assert fake_llm.count() == 1  # x-should-retry: false, so no retry even with max_retries=2
    assert fake_llm.requests[0].reply is None
    assert any("script exhausted" in e for e in fake_llm.errors)


def test_handler_exception_gives_500(fake_llm: FakeLLMServer) -> None:
    def boom(req: RecordedRequest) -> Reply:
        raise RuntimeError("kaboom")

    fake_llm.set_handler(boom)
    with an(fake_llm) as client, pytest.raises(anthropic.InternalServerError) as exc:
        an_msg(client)
    assert "kaboom" in str(exc.value) and "kaboom" in fake_llm.errors[0]


def test_unknown_path_is_provider_shaped_404(fake_llm: FakeLLMServer) -> None:
    with oa(fake_llm) as oc, pytest.raises(openai.NotFoundError) as e1:
        oc.models.list()
    with an(fake_llm) as ac, pytest.raises(anthropic.NotFoundError) as e2:
        ac.models.list()
    assert isinstance(e1.value.body, dict) and "no route" in e1.value.body["message"]
    assert e2.value.type == "not_found_error"
    assert [r.provider for r in fake_llm.requests] == ["openai", "anthropic"]
    assert fake_llm.pending == 0 and not fake_llm.errors


def test_streaming_is_refused_loudly(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("unused"))
    with oa(fake_llm) as client, pytest.raises(openai.BadRequestError) as exc:
        oa_chat(client, stream=True)
    assert "streaming" in str(exc.value)
    assert fake_llm.pending == 1  # the queued reply was not consumed


# --------------------------------------------------------------------------- transport faults


def test_drop_raises_connection_error(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.drop(), Reply.drop(partial=True), Reply.drop(), Reply.drop(partial=True))
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        for _ in range(2):
            with pytest.raises(openai.APIConnectionError) as e1:
                oa_chat(oc)
            assert not isinstance(e1.value, openai.APITimeoutError)
            with pytest.raises(anthropic.APIConnectionError) as e2:
                an_msg(ac)
            assert not isinstance(e2.value, anthropic.APITimeoutError)
    assert fake_llm.count() == 4


def test_hang_times_out(fake_llm: FakeLLMServer) -> None:
    fake_llm.set_handler(Reply.hang())  # never answers until the server stops
    with oa(fake_llm, timeout=0.1) as oc, an(fake_llm, timeout=0.1) as ac:
        with pytest.raises(openai.APITimeoutError):
            oa_chat(oc)
        with pytest.raises(anthropic.APITimeoutError):
            an_msg(ac)
    assert fake_llm.count() == 2


def test_hang_for_a_while_then_answers(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.hang(0.1, then=Reply.content("late")))
    with an(fake_llm, timeout=2) as client:
        t0 = time.monotonic()
        assert text_of(an_msg(client)) == "late"
    assert time.monotonic() - t0 >= 0.1


def test_trickle_beats_per_read_timeout(fake_llm: FakeLLMServer) -> None:
    # ~330-byte body, 4 bytes every 2 ms: each read waits ~2 ms, the whole body takes > 0.15 s.
    fake_llm.enqueue(Reply.content("slow but steady").with_trickle(0.002, chunk=4))
    read_timeout = 0.05
    with oa(fake_llm, timeout=read_timeout) as client:
        t0 = time.monotonic()
        resp = oa_chat(client)
        elapsed = time.monotonic() - t0
    assert resp.choices[0].message.content == "slow but steady"
    assert elapsed > 3 * read_timeout  # a wall-clock deadline of 0.05 s would have fired


def test_stop_does_not_hang_with_sleeping_handler() -> None:
    server = FakeLLMServer(handler=Reply.hang()).start()
    errors: list[BaseException] = []

    def call() -> None:
        with oa(server, timeout=30) as client:
            try:
                oa_chat(client)
            except openai.APIConnectionError as exc:
                errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    server.wait_for_requests(1)
    server.stop()  # returns although a handler is hanging (the test would hang otherwise)
    caller.join(5)
    assert not caller.is_alive()
    assert len(errors) == 1  # the client saw the connection go away
    server.stop()  # idempotent


def test_stop_closes_idle_keepalive_connections() -> None:
    with FakeLLMServer(handler=Reply.content("ok")) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        for _ in range(3):  # three requests over one keep-alive connection
            conn.request("POST", "/v1/chat/completions", body=b'{"model": "m"}')
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read())["model"] == "m"
        conn.close()
        assert server.count() == 3


# --------------------------------------------------------------------------- concurrency


def _echo(req: RecordedRequest) -> Reply:
    body = req.body
    text = body["messages"][0]["content"] if "messages" in body else "ok"
    return Reply.content(text if isinstance(text, str) else "ok")


def _in_flight_counter(delay: float) -> tuple[Callable[[RecordedRequest], Reply], dict[str, int]]:
    """A handler that answers after *delay* and records how many requests overlapped."""
    return in_flight_counter(_echo, delay)


def test_concurrent_calls_are_served_in_parallel(fake_llm: FakeLLMServer) -> None:
    handle, state = _in_flight_counter(0.2)
    fake_llm.set_handler(handle)
    n = 20
    with oa(fake_llm) as client, ThreadPoolExecutor(max_workers=n) as pool:
        results = list(pool.map(lambda _: oa_chat(client), range(n)))
    assert len(results) == n and fake_llm.count() == n
    assert state["max"] > 1, "requests were served one at a time"


def test_async_clients_concurrent(fake_llm: FakeLLMServer) -> None:
    echo, state = _in_flight_counter(0.2)
    fake_llm.set_handler(echo)

    async def main() -> tuple[list[str | None], list[str]]:
        async with (
            openai.AsyncOpenAI(
                base_url=fake_llm.openai_base_url, api_key="test-key", max_retries=0
            ) as oc,
            anthropic.AsyncAnthropic(
                base_url=fake_llm.anthropic_base_url, api_key="test-key", max_retries=0
            ) as ac,
        ):
            oa_calls = [
                oc.chat.completions.create(
                    model=MODEL_OA, messages=[{"role": "user", "content": f"o{i}"}]
                )
                for i in range(8)
            ]
            an_calls = [
                ac.messages.create(
                    model=MODEL_AN, max_tokens=8, messages=[{"role": "user", "content": f"a{i}"}]
                )
                for i in range(8)
            ]
            # one gather per provider, both in flight together: each keeps its reply type
            replies_oa, replies_an = await asyncio.gather(
                asyncio.gather(*oa_calls), asyncio.gather(*an_calls)
            )
        texts_oa = [r.choices[0].message.content for r in replies_oa]
        texts_an = [text_of(r) for r in replies_an]
        return texts_oa, texts_an

    texts_oa, texts_an = asyncio.run(main())
    assert texts_oa == [f"o{i}" for i in range(8)]
    assert texts_an == [f"a{i}" for i in range(8)]
    assert state["max"] > 1, "requests were served one at a time"
    assert fake_llm.count("openai") == fake_llm.count("anthropic") == 8


# --------------------------------------------------------------------------- helpers


def test_count_reset_and_wait(fake_llm: FakeLLMServer) -> None:
    fake_llm.enqueue(Reply.content("1"), Reply.content("2"), Reply.content("3"))
    with oa(fake_llm) as oc, an(fake_llm) as ac:
        oa_chat(oc)
        an_msg(ac)
    assert fake_llm.count() == 2 and fake_llm.count("openai") == fake_llm.count("anthropic") == 1
    assert len(fake_llm.wait_for_requests(2, timeout=0.1)) == 2
    with pytest.raises(TimeoutError):
        fake_llm.wait_for_requests(3, timeout=0.05)
    fake_llm.reset()
    assert fake_llm.count() == 0 and fake_llm.pending == 0 and fake_llm.requests == []
    with pytest.raises(LookupError):
        fake_llm.last()


def test_enqueue_rejects_non_reply(fake_llm: FakeLLMServer) -> None:
    with pytest.raises(TypeError):
        fake_llm.enqueue("hello")  # type: ignore[arg-type]  # the wrong type is the test


def test_reply_is_immutable_and_modifiers_copy() -> None:
    base = Reply.content("x")
    slow = base.with_delay(1.0).with_headers(x_foo="1")
    assert base.delay == 0.0 and slow.delay == 1.0 and dict(slow.headers) == {"x-foo": "1"}
    assert Reply.hang().delay == float("inf")
    with pytest.raises(TypeError):
        Reply.content("x", bogus=1)

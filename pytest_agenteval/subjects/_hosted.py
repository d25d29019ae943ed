"""Subjects that are not Python callables: a hosted model, or a command.

:func:`make_subject` turns a ``--subject`` spec into a subject object:

``openai:MODEL``
    OpenAI Chat Completions (``OPENAI_API_KEY``; ``OPENAI_BASE_URL`` or *base_url* for a
    compatible server, which may then do without a real key).
``anthropic:MODEL``
    Anthropic Messages (``ANTHROPIC_API_KEY`` or ``ANTHROPIC_AUTH_TOKEN``;
    ``ANTHROPIC_BASE_URL`` or *base_url* likewise).
``cmd:COMMAND``
    COMMAND run through the shell once per prompt. The prompt is written to its stdin
    (UTF-8) and stdin is closed; its stdout (UTF-8, one trailing newline removed) is the
    answer. The environment is NOT the caller's (which holds the judge's API key): only
    the variables of :data:`SUBJECT_ENV_ALLOWED` (what a process needs to start, find
    programs, files and a temporary directory, and speak the locale), those named by
    *pass_env* (names, or shell-style patterns such as ``MYAGENT_*``), plus:

    - ``AGENTEVAL_SCENARIO_ID``: the scenario's id (when there is a scenario);
    - ``AGENTEVAL_TOOLS``: the scenario's tools as JSON, in the OpenAI tools shape
      (only when it has tools);
    - ``PYTHONIOENCODING=utf-8`` unless already set, so Python commands honour the
      UTF-8 pipes whatever the locale.

    The command runs in a session of its own: on timeout, or when the awaiting task is
    cancelled, the whole process group is killed, and so are stragglers it leaves
    behind when it exits. A non-zero exit status is an error (with the tail of stderr).

Every subject object has ``name`` (the spec; secret-looking ``NAME=value`` assignments in
a command are masked, and secret values redacted), is awaited as ``subject(prompt, *, tools=None, messages=None,
system=None, scenario=None)``, returns a :class:`~pytest_agenteval.subjects._base.Response`,
and must be closed with ``await subject.aclose()`` (or ``async with subject:``).

The model's own temperature is left alone (the subject is what is being measured, not
the judge); ``meta["temperature"]`` is ``None`` to record that none was sent.

Credentials, the client and the HTTP error ladder are the judges' too
(:mod:`pytest_agenteval._providers`): a missing credential, or HTTP 401/402/403/404 from
the provider, raise :class:`SubjectConfigError` naming the environment variable or the
model (the run stops: every later call would fail the same way); other failures, after
the SDK's own retries, raise :class:`SubjectError` saying what failed after how many
attempts, and ``breaker_threshold`` consecutive 5xx, timeouts or refused connections
make every later call fail at once. The SDKs' error text is never passed on (it may
echo the response body, and the body may echo the credential): only, for a rejected
request, the provider's ``error.message`` with credentials redacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import functools
import json
import os
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypedDict, TypeVar

from .._checks import ToolCall
from .._providers import (
    AnthropicConnection,
    ClientT,
    Connection,
    OpenAIConnection,
    ProviderError,
    ProviderFailure,
    Transport,
    json_kind,
    text_of_blocks,
    token_usage,
)
from .._vocab import JSONObject
from ..evidence._redact import Redactor, mask_assignments
from ..judges._base import ConfigError
from ._base import Response, SubjectError

if TYPE_CHECKING:
    from .._mcp import ToolCaller
    from .._providers import AsyncAnthropic, AsyncOpenAI, ChatCompletion, Message

__all__ = [
    "SUBJECT_ENV_ALLOWED",
    "AnthropicSubject",
    "CommandSubject",
    "HostedSubject",
    "OpenAISubject",
    "SubjectConfigError",
    "make_subject",
    "subject_environment",
]

#: The option that sets a provider subject's base URL (named in configuration errors).
BASE_URL_OPTION = "--subject-base-url"

#: What a ``cmd:`` subject inherits without being told: enough to start a process, find
#: programs, a home, a temporary directory and the locale (and, on Windows, the system
#: folders a process cannot start without). Never a credential: anything else, the
#: subject's own API key included, must be named (``--subject-env``).
SUBJECT_ENV_ALLOWED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TEMP",
    "TMP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONDONTWRITEBYTECODE",
    "VIRTUAL_ENV",
    "SYSTEMROOT",
    "SYSTEMDRIVE",
    "WINDIR",
    "COMSPEC",
    "PATHEXT",
    "USERPROFILE",
    "APPDATA",
    "LOCALAPPDATA",
)

#: JSON a scenario gives a subject (a tool, an earlier turn, the scenario): its values
#: are looked at, never assumed.
_Json = Mapping[str, object]
#: A scenario's tools, or its earlier turns.
_Items = Sequence[_Json] | None
#: A request's fields, as the SDK's ``create`` takes them.
_Request = dict[str, object]

_STDERR_TAIL = 500


class SubjectConfigError(ConfigError, SubjectError):
    """The subject is misconfigured (no key, key refused, unknown model): the run stops.

    A :class:`ConfigError` (the plugin stops the run with a configuration
    error) and a :class:`SubjectError` (used on its own, never a pass or fail).
    """


class HostedSubject(ABC):
    """An agent under test that is not a Python callable of the user's."""

    #: it times its own calls (--subject-timeout, per HTTP attempt or for the command)
    times_itself = True

    name: str

    @abstractmethod
    async def __call__(
        self,
        prompt: str,
        *,
        tools: _Items = None,
        messages: _Items = None,
        system: str | None = None,
        scenario: _Json | None = None,
    ) -> Response: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release what the subject holds (HTTP connections)."""

    async def __aenter__(self) -> HostedSubject:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def make_subject(
    spec: str,
    *,
    base_url: str | None = None,
    timeout_s: float = 120.0,
    max_retries: int = 2,
    max_tokens: int = 1024,
    pass_env: Sequence[str] = (),
    retry_after_cap_s: float = 30.0,
    breaker_threshold: int = 5,
) -> HostedSubject | None:
    """The subject for ``openai:MODEL``, ``anthropic:MODEL`` or ``cmd:COMMAND``; else None.

    *base_url* applies to the providers; *timeout_s* is per HTTP attempt for them and the
    whole run for a command; *max_retries* is the SDK's retry budget, *retry_after_cap_s*
    the longest ``Retry-After`` it is let wait and *breaker_threshold* the consecutive
    provider failures that open the circuit; *max_tokens* caps the answer; *pass_env*
    names the variables a command gets beyond the allow-list. Raises
    :class:`SubjectConfigError` when a key is missing or the spec has no model/command.
    """
    kind, sep, rest = spec.partition(":")
    kind = kind.strip()
    if not sep or kind not in ("openai", "anthropic", "cmd"):
        return None
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be positive, not {timeout_s!r}")
    if max_retries < 0:
        raise ValueError(f"max_retries must be >= 0, not {max_retries!r}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, not {max_tokens!r}")
    target = rest.strip()
    if not target:
        what = "COMMAND" if kind == "cmd" else "MODEL"
        raise SubjectConfigError(f"subject {spec.strip()!r}: expected {kind}:{what}")
    if kind == "cmd":
        return CommandSubject(target, timeout_s=timeout_s, pass_env=pass_env)
    cls: type[OpenAISubject | AnthropicSubject] = (
        OpenAISubject if kind == "openai" else AnthropicSubject
    )
    transport = Transport(timeout_s, max_retries, retry_after_cap_s, breaker_threshold)
    return cls(target, transport, base_url=base_url, max_tokens=max_tokens)


# --------------------------------------------------------------------------- shared helpers


def _turns(prompt: str, messages: _Items) -> list[_Json]:
    """The scenario's earlier turns: *messages* minus its last element (the prompt itself)."""
    turns = list(messages or ())
    if turns and turns[-1].get("role") == "user":
        turns.pop()
    return turns


def _turn_arguments(turn: _Json) -> dict[str, object]:
    args = turn.get("arguments")
    return dict(args) if isinstance(args, Mapping) else {}


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _function_of(tool: _Json) -> dict[str, object] | None:
    """``{name, description?, parameters?}`` of a tool in OpenAI, bare or Anthropic shape."""
    fn = tool.get("function")
    if isinstance(fn, Mapping) and fn.get("name"):
        return dict(fn)
    if tool.get("name") and "type" not in tool:
        out = {k: v for k, v in tool.items() if k in ("name", "description", "parameters")}
        if "parameters" not in out and isinstance(tool.get("input_schema"), Mapping):
            out["parameters"] = tool["input_schema"]
        return out
    return None


def _parse_arguments(raw: object) -> dict[str, object]:
    """Tool-call arguments as a dict; text that is not a JSON object is kept as ``_raw``."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    if not isinstance(raw, str | bytes | bytearray):
        return {"_raw": raw}
    try:
        value = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


class _ToolOutcome(Protocol):
    """A tool's result as the loop hands it back to the model."""

    @property
    def text(self) -> str: ...

    @property
    def is_error(self) -> bool: ...


@dataclass(frozen=True)
class _ToolText:
    text: str
    is_error: bool = False


async def _run_tool(
    call_tool: Callable[[str, dict[str, object]], Awaitable[object]],
    name: str,
    arguments: dict[str, object],
) -> _ToolOutcome:
    """One tool call of the loop: the result's ``text`` and ``is_error``.

    A :class:`~pytest_agenteval._mcp.ToolCaller` says whether the server flagged an
    error (``call``); a plain ``call_tool(name, arguments) -> str`` does not.
    """
    detailed = getattr(call_tool, "call", None)
    if callable(detailed):
        outcome: _ToolOutcome = await detailed(name, arguments)
        return outcome
    return _ToolText(str(await call_tool(name, arguments)))


# --------------------------------------------------------------------------- providers

ReplyT = TypeVar("ReplyT")
ReadT = TypeVar("ReadT")


@dataclass(frozen=True)
class _Answer:
    """What a provider's reply says, before it becomes a :class:`Response`."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: object
    model: str | None
    finish: str | None
    refusal: bool = False


class _ProviderSubject(HostedSubject, Generic[ClientT, ReplyT]):
    """``openai:``/``anthropic:``: one request, one reply; the provider plumbing is the
    judges' (:class:`~pytest_agenteval._providers.Connection`)."""

    #: Set on each provider's class (a class attribute).
    connection_class: type[Connection[ClientT]]

    def __init__(
        self, model: str, transport: Transport, *, base_url: str | None, max_tokens: int
    ) -> None:
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.max_tokens = max_tokens
        try:
            self.conn: Connection[ClientT] = self.connection_class(
                model, transport, base_url=base_url, base_url_option=BASE_URL_OPTION
            )
        except ProviderError as err:
            raise self._error(err.failure) from None

    @property
    def provider(self) -> str:
        return self.connection_class.provider.name

    def _error(self, failure: ProviderFailure) -> SubjectError:
        cls = SubjectConfigError if failure.config else SubjectError
        return cls(f"subject {self.name}: {failure.text}")

    async def aclose(self) -> None:
        await self.conn.aclose()

    @staticmethod
    @abstractmethod
    def build_tools(tools: _Items) -> list[dict[str, object]]:
        """The scenario's tools in the provider's shape."""

    @abstractmethod
    def _conversation(self, prompt: str, turns: _Items, system: str | None) -> _Request:
        """The request's fields that carry the conversation and the answer's length."""

    def _request(
        self,
        prompt: str,
        tools: _Items,
        turns: _Items,
        system: str | None,
    ) -> _Request:
        request: _Request = {"model": self.model, **self._conversation(prompt, turns, system)}
        api_tools = self.build_tools(tools)
        if api_tools:
            request["tools"] = api_tools
        return request

    @abstractmethod
    async def _send(self, client: ClientT, request: _Request) -> ReplyT: ...

    @abstractmethod
    def _answer(self, reply: ReplyT) -> _Answer: ...

    async def __call__(
        self,
        prompt: str,
        *,
        tools: _Items = None,
        messages: _Items = None,
        system: str | None = None,
        scenario: _Json | None = None,
        call_tool: ToolCaller | None = None,
    ) -> Response:
        request = self._request(prompt, tools, messages, system)
        if call_tool is not None and getattr(call_tool, "names", None):
            return await self._tool_loop(request, call_tool)
        reply, latency = await self._ask(request)
        answer = self._read(self._answer, reply)
        return Response(
            text=answer.text,
            tool_calls=answer.tool_calls,
            usage=self._usage(answer),
            meta=self._meta(answer, latency),
        )

    async def _ask(self, request: _Request) -> tuple[ReplyT, float]:
        """One request to the provider: its reply and how long it took."""
        start = time.perf_counter()
        try:
            reply = await self.conn.call(lambda client: self._send(client, request))
        except ProviderError as err:
            raise self._error(err.failure) from None
        return reply, time.perf_counter() - start

    def _read(self, read: Callable[[ReplyT], ReadT], reply: ReplyT) -> ReadT:
        """*read* of *reply*. The SDK builds its reply without checking it (a compatible
        server's missing field must not fail a call), so an answer of the wrong shape
        (choices that are a number, a content block that is text) shows only here, as the
        error a field's wrong type raises: it is this subject's error, said as such."""
        try:
            return read(reply)
        except SubjectError:
            raise
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as exc:
            raise SubjectError(
                f"subject {self.name}: the API's answer is not one this subject can read "
                f"({type(exc).__name__}: {exc})"
            ) from None

    def _usage(self, answer: _Answer) -> dict[str, int]:
        if answer.usage is None:
            return {}
        prompt_tokens, completion_tokens = token_usage(self.conn.provider, answer.usage)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}

    def _meta(self, answer: _Answer, latency: float) -> JSONObject:
        meta: JSONObject = {
            "provider": self.provider,
            "model": self.model,
            "model_returned": answer.model,
            "finish_reason": answer.finish,
            "latency_s": round(latency, 6),
            "temperature": None,  # not sent: the model's default
            "max_tokens": self.max_tokens,
        }
        if answer.refusal:
            meta["refusal"] = True
        return meta

    # -- the tool loop (a condition's MCP servers)

    @abstractmethod
    def _tool_uses(self, reply: ReplyT) -> list[tuple[str, str, dict[str, object]]]:
        """The (id, name, arguments) of each tool call in *reply*, in order."""

    @abstractmethod
    def _continue(
        self, messages: list[object], reply: ReplyT, results: Sequence[tuple[str, _ToolOutcome]]
    ) -> None:
        """Append *reply*'s turn and the tools' results (id, result) to the *messages*."""

    async def _tool_loop(self, request: _Request, call_tool: ToolCaller) -> Response:
        """Ask, run the tools the model calls through *call_tool*, ask again: at most
        ``call_tool.max_steps`` model calls.

        The loop ends when the model answers without a tool call (``answer``), when it
        calls a tool that *call_tool* does not serve — a scenario's own declared tool,
        whose call is graded as it is (``unserved_tool``) — or when it still calls tools
        after the last allowed model call (``step_limit``: those calls are not run, the
        item is graded on what the model said). Every call of every step is in
        ``tool_calls``; usage and latency add up over the steps; ``meta["tool_loop"]``
        says how it ended.
        """
        max_steps = max(1, int(getattr(call_tool, "max_steps", 8) or 8))
        served = frozenset(call_tool.names)
        sent = request["messages"]
        if not isinstance(sent, list):
            raise TypeError(f"request messages are {type(sent).__name__}, not a list")
        messages: list[object] = list(sent)
        request = {**request, "messages": messages}
        calls: list[ToolCall] = []
        tokens = [0, 0]
        latency = 0.0
        steps = 0
        while True:
            steps += 1
            reply, took = await self._ask(request)
            latency += took
            answer = self._read(self._answer, reply)
            calls += answer.tool_calls
            for i, n in enumerate(self._usage(answer).values()):
                tokens[i] += n
            pending = self._read(self._tool_uses, reply)
            if not pending:
                stopped = "answer"
                break
            if any(name not in served for _, name, _ in pending):
                stopped = "unserved_tool"
                break
            if steps >= max_steps:
                stopped = "step_limit"
                break
            if hasattr(call_tool, "step"):
                call_tool.step = steps
            results = [
                (call_id, await _run_tool(call_tool, name, args)) for call_id, name, args in pending
            ]
            self._read(functools.partial(self._continue, messages, results=results), reply)
        meta = self._meta(answer, latency)
        meta["tool_loop"] = {"steps": steps, "max_steps": max_steps, "stopped": stopped}
        usage = {"prompt_tokens": tokens[0], "completion_tokens": tokens[1]}
        return Response(text=answer.text, tool_calls=tuple(calls), usage=usage, meta=meta)


class OpenAISubject(_ProviderSubject["AsyncOpenAI", "ChatCompletion"]):
    """``openai:MODEL`` — OpenAI Chat Completions (or a compatible server)."""

    connection_class = OpenAIConnection

    @staticmethod
    def build_messages(
        prompt: str, messages: _Items, system: str | None
    ) -> list[dict[str, object]]:
        """System, the earlier turns (a tool turn = assistant ``tool_calls`` + ``tool``), prompt."""
        out: list[dict[str, object]] = []
        if system:
            out.append({"role": "system", "content": system})
        n = 0
        for turn in _turns(prompt, messages):
            role, content = turn.get("role"), _text(turn.get("content"))
            if role in ("user", "assistant", "system"):
                out.append({"role": role, "content": content})
            elif role == "tool":
                n += 1
                call_id = f"call_{n}"
                out.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {
                                    "name": str(turn.get("name") or "tool"),
                                    "arguments": json.dumps(_turn_arguments(turn)),
                                },
                            }
                        ],
                    }
                )
                out.append({"role": "tool", "tool_call_id": call_id, "content": content})
            else:
                raise SubjectError(f"unsupported turn role {role!r}")
        out.append({"role": "user", "content": prompt})
        return out

    @staticmethod
    def build_tools(tools: _Items) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for tool in tools or ():
            if "type" in tool:
                out.append(dict(tool))
            else:  # bare {name, description, parameters} or Anthropic shape
                fn = _function_of(tool)
                if fn is None:
                    raise SubjectError(f"tool without a name: {sorted(tool)}")
                out.append({"type": "function", "function": fn})
        return out

    def _conversation(self, prompt: str, turns: _Items, system: str | None) -> _Request:
        return {
            "messages": self.build_messages(prompt, turns, system),
            "max_completion_tokens": self.max_tokens,
        }

    async def _send(self, client: AsyncOpenAI, request: _Request) -> ChatCompletion:
        # the fields are the request's own (not streamed): the SDK's overloads are not picked
        create: Callable[..., Awaitable[ChatCompletion]] = client.chat.completions.create
        return await create(**request)

    def _answer(self, reply: ChatCompletion) -> _Answer:
        if not reply.choices:
            raise SubjectError(f"subject {self.name}: the API returned no choices")
        choice = reply.choices[0]
        message = choice.message
        calls: list[ToolCall] = []
        for call in message.tool_calls or ():
            fn = getattr(call, "function", None)
            if fn is not None:
                calls.append(ToolCall(str(fn.name), _parse_arguments(fn.arguments)))
                continue
            custom = getattr(call, "custom", None)
            if custom is not None:
                calls.append(ToolCall(str(custom.name), {"_raw": custom.input}))
        if not calls and message.function_call is not None:  # legacy functions API
            fc = message.function_call
            calls.append(ToolCall(str(fc.name), _parse_arguments(fc.arguments)))
        text = message.content or ""
        if isinstance(text, list):  # content blocks (Mistral's reasoning models, say)
            text = text_of_blocks(text)
        if message.refusal:
            text = text or message.refusal
        if not isinstance(text, str):
            raise TypeError(f"the message's content is {json_kind(text)}, not text")
        return _Answer(
            text,
            tuple(calls),
            reply.usage,
            reply.model,
            choice.finish_reason,
            refusal=bool(message.refusal),
        )

    def _tool_uses(self, reply: ChatCompletion) -> list[tuple[str, str, dict[str, object]]]:
        out = []
        for call in reply.choices[0].message.tool_calls or ():
            fn = getattr(call, "function", None)
            if fn is not None:
                out.append((call.id, str(fn.name), _parse_arguments(fn.arguments)))
            else:  # a custom tool: never an MCP server's, so it ends the loop
                custom = getattr(call, "custom", None)
                out.append((call.id, str(getattr(custom, "name", "custom")), {}))
        return out

    def _continue(
        self,
        messages: list[object],
        reply: ChatCompletion,
        results: Sequence[tuple[str, _ToolOutcome]],
    ) -> None:
        message = reply.choices[0].message
        sent = []
        for call in message.tool_calls or ():
            fn = getattr(call, "function", None)
            if fn is not None:
                sent.append(
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": fn.name, "arguments": fn.arguments},
                    }
                )
        messages.append({"role": "assistant", "content": message.content, "tool_calls": sent})
        for call_id, result in results:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": result.text})


class _AnthropicMessage(TypedDict):
    role: str
    content: list[dict[str, object]]


class AnthropicSubject(_ProviderSubject["AsyncAnthropic", "Message"]):
    """``anthropic:MODEL`` — the Anthropic Messages API."""

    connection_class = AnthropicConnection

    @staticmethod
    def build_messages(prompt: str, messages: _Items) -> list[_AnthropicMessage]:
        """Earlier turns then the prompt, as content blocks; a tool turn = assistant
        ``tool_use`` + user ``tool_result``. Same-role neighbours are merged into one
        message (so a tool_result is always first in its user message) and empty text
        blocks are dropped (the API refuses them)."""
        out: list[_AnthropicMessage] = []

        def add(role: str, block: dict[str, object]) -> None:
            if block["type"] == "text" and not block["text"]:
                return
            if out and out[-1]["role"] == role:
                out[-1]["content"].append(block)
            else:
                out.append({"role": role, "content": [block]})

        n = 0
        for turn in _turns(prompt, messages):
            role, content = turn.get("role"), _text(turn.get("content"))
            if role in ("user", "assistant"):
                add(str(role), {"type": "text", "text": content})
            elif role == "tool":
                n += 1
                tool_id = f"toolu_{n}"
                add(
                    "assistant",
                    {
                        "type": "tool_use",
                        "id": tool_id,
                        "name": str(turn.get("name") or "tool"),
                        "input": _turn_arguments(turn),
                    },
                )
                add("user", {"type": "tool_result", "tool_use_id": tool_id, "content": content})
            else:
                raise SubjectError(f"unsupported turn role {role!r}")
        add("user", {"type": "text", "text": prompt})
        return out

    @staticmethod
    def build_tools(tools: _Items) -> list[dict[str, object]]:
        """OpenAI-shaped tools as Anthropic ``{name, description, input_schema}``."""
        out: list[dict[str, object]] = []
        for tool in tools or ():
            if "input_schema" in tool and "name" in tool:
                out.append(dict(tool))  # already Anthropic-shaped
                continue
            fn = _function_of(tool)
            if fn is None:
                raise SubjectError(f"tool without a function name: {sorted(tool)}")
            converted: dict[str, object] = {"name": fn["name"]}
            if fn.get("description"):
                converted["description"] = fn["description"]
            parameters = fn.get("parameters")
            converted["input_schema"] = (
                dict(parameters)
                if isinstance(parameters, Mapping) and parameters
                else {"type": "object", "properties": {}}
            )
            out.append(converted)
        return out

    def _conversation(self, prompt: str, turns: _Items, system: str | None) -> _Request:
        fields: _Request = {
            "max_tokens": self.max_tokens,
            "messages": self.build_messages(prompt, turns),
        }
        if system:
            fields["system"] = system
        return fields

    async def _send(self, client: AsyncAnthropic, request: _Request) -> Message:
        # the fields are the request's own (not streamed): the SDK's overloads are not picked
        create: Callable[..., Awaitable[Message]] = client.messages.create
        return await create(**request)

    def _answer(self, reply: Message) -> _Answer:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in reply.content or ():
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                calls.append(ToolCall(str(block.name), _parse_arguments(block.input)))
        stop = reply.stop_reason
        return _Answer(
            "".join(texts), tuple(calls), reply.usage, reply.model, stop, stop == "refusal"
        )

    def _tool_uses(self, reply: Message) -> list[tuple[str, str, dict[str, object]]]:
        return [
            (block.id, str(block.name), _parse_arguments(block.input))
            for block in reply.content or ()
            if block.type == "tool_use"
        ]

    def _continue(
        self, messages: list[object], reply: Message, results: Sequence[tuple[str, _ToolOutcome]]
    ) -> None:
        blocks: list[dict[str, object]] = []
        for block in reply.content or ():
            if block.type == "text":
                if block.text:  # the API refuses empty text blocks
                    blocks.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                blocks.append(
                    {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
                )
            else:  # thinking and the like go back as they came
                blocks.append(block.model_dump(mode="json", exclude_none=True))
        messages.append({"role": "assistant", "content": blocks})
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": call_id, "content": result.text}
                    | ({"is_error": True} if result.is_error else {})
                    for call_id, result in results
                ],
            }
        )


# --------------------------------------------------------------------------- command


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL the command's process group (it leads its own session); best effort."""
    if hasattr(os, "killpg"):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


async def _terminate(proc: asyncio.subprocess.Process, grace_s: float = 5.0) -> None:
    """Kill the command's group, reap the shell and release the pipes.

    ``Process.wait()`` also waits for the pipes to reach EOF, which a process that left
    the group (``setsid``) may hold open indefinitely; so wait for the exit status only,
    then close our ends of the pipes (which lets the transport finish).
    """
    _kill_group(proc)
    deadline = time.monotonic() + grace_s
    while proc.returncode is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    if proc.returncode is None:  # unkillable (D state): give up on a clean close
        return
    transport = getattr(proc, "_transport", None)  # no public handle on it
    if transport is not None:
        transport.close()
    await proc.wait()


def subject_environment(environ: Mapping[str, str], pass_env: Sequence[str] = ()) -> dict[str, str]:
    """The variables of *environ* named by :data:`SUBJECT_ENV_ALLOWED` or *pass_env*.

    Entries are names or shell-style patterns (``LC_*``); on Windows, where variable
    names are case-insensitive, they are compared in upper case.
    """
    fold = str.upper if os.name == "nt" else str
    wanted = [fold(p.strip()) for p in (*SUBJECT_ENV_ALLOWED, *pass_env) if p.strip()]
    exact = {p for p in wanted if not any(c in p for c in "*?[")}
    patterns = [p for p in wanted if p not in exact]
    return {
        name: value
        for name, value in environ.items()
        if fold(name) in exact or any(fnmatch.fnmatchcase(fold(name), p) for p in patterns)
    }


class CommandSubject(HostedSubject):
    """``cmd:COMMAND`` — the prompt on stdin, the answer on stdout."""

    def __init__(
        self, command: str, *, timeout_s: float = 120.0, pass_env: Sequence[str] = ()
    ) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.pass_env = tuple(pass_env)
        # the name becomes the run directory's and is printed: no secret value in it
        self.name = "cmd:" + Redactor.from_environ(command=command).text(mask_assignments(command))

    def environment(self, tools: _Items, scenario: _Json | None) -> dict[str, str]:
        env = subject_environment(os.environ, self.pass_env)
        env.setdefault("PYTHONIOENCODING", "utf-8")
        for var in ("AGENTEVAL_SCENARIO_ID", "AGENTEVAL_TOOLS"):
            env.pop(var, None)  # never inherit a stale value from an outer run
        scenario_id = (scenario or {}).get("id")
        if scenario_id is not None:
            env["AGENTEVAL_SCENARIO_ID"] = str(scenario_id)
        if tools:
            env["AGENTEVAL_TOOLS"] = json.dumps(list(tools), ensure_ascii=False)
        return env

    async def __call__(
        self,
        prompt: str,
        *,
        tools: _Items = None,
        messages: _Items = None,
        system: str | None = None,
        scenario: _Json | None = None,
    ) -> Response:
        start = time.perf_counter()
        proc = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.environment(tools, scenario),
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(
                proc.communicate(prompt.encode("utf-8")), self.timeout_s
            )
        except asyncio.TimeoutError:
            await _terminate(proc)
            raise SubjectError(f"command timed out after {self.timeout_s:g}s") from None
        except BaseException:  # cancelled (or anything else): leave no process behind
            _kill_group(proc)  # at once, before anything can interrupt the clean-up
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(_terminate(proc))
            raise
        _kill_group(proc)  # stragglers the command left in its group
        latency = time.perf_counter() - start
        code = proc.returncode
        if code != 0:
            tail = err.decode("utf-8", errors="replace").strip()[-_STDERR_TAIL:]
            said = f": {tail}" if tail else " (nothing on stderr)"
            raise SubjectError(f"command exited with status {code}{said}")
        text = out.decode("utf-8", errors="replace")
        if text.endswith("\r\n"):
            text = text[:-2]
        elif text.endswith("\n"):
            text = text[:-1]
        return Response(text=text, meta={"exit_status": code, "latency_s": round(latency, 6)})

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
system=None, scenario=None)``, returns a :class:`~pytest_agenteval._subjects.Response`,
and must be closed with ``await subject.aclose()`` (or ``async with subject:``).

The model's own temperature is left alone (the subject is what is being measured, not
the judge); ``meta["temperature"]`` is ``None`` to record that none was sent.

Errors: a missing key, or HTTP 401/403/404 from the provider, raise
:class:`SubjectConfigError` naming the environment variable or the model; other
failures, after the SDK's own retries, raise :class:`SubjectError` with a short
description. The SDKs' error text is never passed on: it may echo the response body,
and the body may echo the credential.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import os
import re
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from ._checks import ToolCall
from ._judges import ConfigError
from ._redact import Redactor
from ._subjects import Response, SubjectError

__all__ = [
    "SUBJECT_ENV_ALLOWED",
    "AnthropicSubject",
    "CommandSubject",
    "OpenAISubject",
    "Subject",
    "SubjectConfigError",
    "make_subject",
    "subject_environment",
]

#: The key sent to a local server (``base_url`` set) when no API key is configured.
LOCAL_PLACEHOLDER_KEY = "agenteval-no-key"

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

_STDERR_TAIL = 500
_SAFE_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<name>(?:[A-Za-z_][A-Za-z0-9_\-]*)?(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH)"
    r"[A-Za-z0-9_]*)=(?P<value>\"[^\"]*\"|'[^']*'|\S+)",
    re.IGNORECASE,
)


class SubjectConfigError(ConfigError, SubjectError):
    """The subject is misconfigured (no key, key refused, unknown model): the run stops.

    A :class:`ConfigError` (the plugin stops the run with a configuration
    error) and a :class:`SubjectError` (used on its own, never a pass or fail).
    """


class Subject(ABC):
    """An agent under test that is not a Python callable of the user's."""

    name: str

    @abstractmethod
    async def __call__(
        self,
        prompt: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        system: str | None = None,
        scenario: Mapping[str, Any] | None = None,
    ) -> Response: ...

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release what the subject holds (HTTP connections)."""

    async def __aenter__(self) -> Subject:
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
) -> Subject | None:
    """The subject for ``openai:MODEL``, ``anthropic:MODEL`` or ``cmd:COMMAND``; else None.

    *base_url* applies to the providers; *timeout_s* is per HTTP attempt for them and the
    whole run for a command; *max_retries* is the SDK's retry budget; *max_tokens* caps
    the answer; *pass_env* names the variables a command gets beyond the allow-list.
    Raises :class:`SubjectConfigError` when a key is missing or the spec has no
    model/command.
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
    cls: type[_ProviderSubject] = OpenAISubject if kind == "openai" else AnthropicSubject
    return cls(
        target,
        base_url=base_url,
        timeout_s=timeout_s,
        max_retries=max_retries,
        max_tokens=max_tokens,
    )


# --------------------------------------------------------------------------- shared helpers


def _turns(prompt: str, messages: Sequence[Mapping[str, Any]] | None) -> list[Mapping[str, Any]]:
    """The scenario's earlier turns: *messages* minus its last element (the prompt itself)."""
    turns = list(messages or ())
    if turns and turns[-1].get("role") == "user":
        turns.pop()
    return turns


def _turn_arguments(turn: Mapping[str, Any]) -> dict[str, Any]:
    args = turn.get("arguments")
    return dict(args) if isinstance(args, Mapping) else {}


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _function_of(tool: Mapping[str, Any]) -> dict[str, Any] | None:
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


def _parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict; text that is not a JSON object is kept as ``_raw``."""
    if isinstance(raw, Mapping):
        return dict(raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": raw}


# --------------------------------------------------------------------------- providers


class _ProviderSubject(Subject):
    provider: str
    key_env: str
    base_env: str

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        timeout_s: float,
        max_retries: int,
        max_tokens: int,
    ) -> None:
        self.model = model
        self.name = f"{self.provider}:{model}"
        self.base_url = base_url or os.environ.get(self.base_env) or None
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self._credentials = self._resolve_credentials()
        self._client: Any = None

    # -- configuration

    def _resolve_credentials(self) -> dict[str, Any]:
        key = os.environ.get(self.key_env)
        if key:
            return {"api_key": key}
        if self.base_url:
            return {"api_key": LOCAL_PLACEHOLDER_KEY}
        raise SubjectConfigError(
            f"subject {self.name}: no API key; set {self.key_env} "
            f"(or {self.base_env} / a base URL for a local server)"
        )

    @abstractmethod
    def _new_client(self) -> Any: ...

    def _get_client(self) -> Any:
        if self._client is None:
            self._client = self._new_client()
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()

    # -- errors

    @abstractmethod
    def _error_classes(self) -> tuple[type[BaseException], ...]:
        """(APIStatusError, APITimeoutError, APIConnectionError, base error) of the SDK."""

    def _translate(self, exc: BaseException) -> SubjectError:
        status_cls, timeout_cls, conn_cls, _base = self._error_classes()
        label = f"subject {self.name}"
        if isinstance(exc, status_cls):
            status = int(getattr(exc, "status_code", 0) or 0)
            if status == 401:
                return SubjectConfigError(
                    f"{label}: authentication failed (HTTP 401); check {self.key_env}"
                )
            if status == 403:
                return SubjectConfigError(
                    f"{label}: permission denied (HTTP 403) for model {self.model!r}; "
                    f"check {self.key_env} and the model's access"
                )
            if status == 404:
                return SubjectConfigError(
                    f"{label}: model {self.model!r} not found (HTTP 404); "
                    "check the model name and the base URL"
                )
            if status == 429:
                return SubjectError(f"{label}: rate limited after retries")
            if status >= 500:
                return SubjectError(f"{label}: server error {status}")
            code = self._error_code(exc)
            return SubjectError(
                f"{label}: request rejected (HTTP {status}{', ' + code if code else ''})"
            )
        if isinstance(exc, timeout_cls):
            return SubjectError(f"{label}: timed out")
        if isinstance(exc, conn_cls):
            return SubjectError(f"{label}: connection failed")
        return SubjectError(f"{label}: API error ({type(exc).__name__})")

    @staticmethod
    def _error_code(exc: BaseException) -> str | None:
        """A short machine-readable error code/type, if it looks like one (never free text)."""
        for attr in ("code", "error_code", "type"):
            value = getattr(exc, attr, None)
            if isinstance(value, str) and _SAFE_CODE.fullmatch(value):
                return value
        return None

    async def _create(self, request: dict[str, Any]) -> Any:
        client = self._get_client()
        base = self._error_classes()[3]
        try:
            return await self._send(client, request)
        except base as exc:
            raise self._translate(exc) from None

    @abstractmethod
    async def _send(self, client: Any, request: dict[str, Any]) -> Any: ...

    def _meta(self, model: Any, finish: Any, latency: float) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "model_returned": model,
            "finish_reason": finish,
            "latency_s": round(latency, 6),
            "temperature": None,  # not sent: the model's default
            "max_tokens": self.max_tokens,
        }


class OpenAISubject(_ProviderSubject):
    """``openai:MODEL`` — OpenAI Chat Completions (or a compatible server)."""

    provider = "openai"
    key_env = "OPENAI_API_KEY"
    base_env = "OPENAI_BASE_URL"

    def _new_client(self) -> Any:
        import openai

        return openai.AsyncOpenAI(
            **self._credentials,
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        )

    def _error_classes(self) -> tuple[type[BaseException], ...]:
        import openai

        return (
            openai.APIStatusError,
            openai.APITimeoutError,
            openai.APIConnectionError,
            openai.OpenAIError,
        )

    async def _send(self, client: Any, request: dict[str, Any]) -> Any:
        return await client.chat.completions.create(**request)

    @staticmethod
    def build_messages(
        prompt: str, messages: Sequence[Mapping[str, Any]] | None, system: str | None
    ) -> list[dict[str, Any]]:
        """System, the earlier turns (a tool turn = assistant ``tool_calls`` + ``tool``), prompt."""
        out: list[dict[str, Any]] = []
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
    def build_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
        out = []
        for tool in tools or ():
            if "type" in tool:
                out.append(dict(tool))
            else:  # bare {name, description, parameters} or Anthropic shape
                fn = _function_of(tool)
                if fn is None:
                    raise SubjectError(f"tool without a name: {sorted(tool)}")
                out.append({"type": "function", "function": fn})
        return out

    async def __call__(
        self,
        prompt: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        system: str | None = None,
        scenario: Mapping[str, Any] | None = None,
    ) -> Response:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": self.build_messages(prompt, messages, system),
            "max_completion_tokens": self.max_tokens,
        }
        api_tools = self.build_tools(tools)
        if api_tools:
            request["tools"] = api_tools
        start = time.perf_counter()
        completion = await self._create(request)
        latency = time.perf_counter() - start
        if not completion.choices:
            raise SubjectError(f"subject {self.name}: the API returned no choices")
        choice = completion.choices[0]
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
        usage = completion.usage
        meta = self._meta(completion.model, choice.finish_reason, latency)
        text = message.content or ""
        if message.refusal:
            meta["refusal"] = True
            text = text or message.refusal
        return Response(
            text=text,
            tool_calls=tuple(calls),
            usage=(
                {
                    "prompt_tokens": int(usage.prompt_tokens or 0),
                    "completion_tokens": int(usage.completion_tokens or 0),
                }
                if usage is not None
                else {}
            ),
            meta=meta,
        )


class AnthropicSubject(_ProviderSubject):
    """``anthropic:MODEL`` — the Anthropic Messages API."""

    provider = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    base_env = "ANTHROPIC_BASE_URL"

    def _resolve_credentials(self) -> dict[str, Any]:
        if not os.environ.get(self.key_env) and os.environ.get("ANTHROPIC_AUTH_TOKEN"):
            return {"auth_token": os.environ["ANTHROPIC_AUTH_TOKEN"]}
        return super()._resolve_credentials()

    def _new_client(self) -> Any:
        import anthropic

        return anthropic.AsyncAnthropic(
            **self._credentials,
            base_url=self.base_url,
            timeout=self.timeout_s,
            max_retries=self.max_retries,
        )

    def _error_classes(self) -> tuple[type[BaseException], ...]:
        import anthropic

        return (
            anthropic.APIStatusError,
            anthropic.APITimeoutError,
            anthropic.APIConnectionError,
            anthropic.AnthropicError,
        )

    async def _send(self, client: Any, request: dict[str, Any]) -> Any:
        return await client.messages.create(**request)

    @staticmethod
    def build_messages(
        prompt: str, messages: Sequence[Mapping[str, Any]] | None
    ) -> list[dict[str, Any]]:
        """Earlier turns then the prompt, as content blocks; a tool turn = assistant
        ``tool_use`` + user ``tool_result``. Same-role neighbours are merged into one
        message (so a tool_result is always first in its user message) and empty text
        blocks are dropped (the API refuses them)."""
        out: list[dict[str, Any]] = []

        def add(role: str, block: dict[str, Any]) -> None:
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
    def build_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
        """OpenAI-shaped tools as Anthropic ``{name, description, input_schema}``."""
        out = []
        for tool in tools or ():
            if "input_schema" in tool and "name" in tool:
                out.append(dict(tool))  # already Anthropic-shaped
                continue
            fn = _function_of(tool)
            if fn is None:
                raise SubjectError(f"tool without a function name: {sorted(tool)}")
            converted: dict[str, Any] = {"name": fn["name"]}
            if fn.get("description"):
                converted["description"] = fn["description"]
            converted["input_schema"] = dict(
                fn.get("parameters") or {"type": "object", "properties": {}}
            )
            out.append(converted)
        return out

    async def __call__(
        self,
        prompt: str,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        system: str | None = None,
        scenario: Mapping[str, Any] | None = None,
    ) -> Response:
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": self.build_messages(prompt, messages),
        }
        if system:
            request["system"] = system
        api_tools = self.build_tools(tools)
        if api_tools:
            request["tools"] = api_tools
        start = time.perf_counter()
        message = await self._create(request)
        latency = time.perf_counter() - start
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in message.content or ():
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(block.text)
            elif kind == "tool_use":
                calls.append(ToolCall(str(block.name), _parse_arguments(block.input)))
        usage = message.usage
        meta = self._meta(message.model, message.stop_reason, latency)
        if message.stop_reason == "refusal":
            meta["refusal"] = True
        return Response(
            text="".join(texts),
            tool_calls=tuple(calls),
            usage=(
                {
                    "prompt_tokens": int(usage.input_tokens or 0),
                    "completion_tokens": int(usage.output_tokens or 0),
                }
                if usage is not None
                else {}
            ),
            meta=meta,
        )


# --------------------------------------------------------------------------- command


def _redact_command(command: str) -> str:
    """Mask the values of ``NAME=value`` where NAME looks like a credential."""
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group('name')}=***", command)


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


class CommandSubject(Subject):
    """``cmd:COMMAND`` — the prompt on stdin, the answer on stdout."""

    def __init__(
        self, command: str, *, timeout_s: float = 120.0, pass_env: Sequence[str] = ()
    ) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.pass_env = tuple(pass_env)
        # the name becomes the run directory's and is printed: no secret value in it
        self.name = "cmd:" + Redactor.from_environ().text(_redact_command(command))

    def environment(
        self, tools: Sequence[Mapping[str, Any]] | None, scenario: Mapping[str, Any] | None
    ) -> dict[str, str]:
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
        tools: Sequence[Mapping[str, Any]] | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        system: str | None = None,
        scenario: Mapping[str, Any] | None = None,
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
            raise SubjectError(f"command exited with status {code}: {tail}")
        text = out.decode("utf-8", errors="replace")
        if text.endswith("\r\n"):
            text = text[:-2]
        elif text.endswith("\n"):
            text = text[:-1]
        return Response(text=text, meta={"exit_status": code, "latency_s": round(latency, 6)})

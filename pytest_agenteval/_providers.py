"""Provider plumbing, once, for the LLM judges (:mod:`._llm`) and the provider subjects
(:mod:`._provider_subjects`): credentials, the endpoint, the SDK client, and what an
HTTP failure means.

Providers
    ``openai`` (Chat Completions, or any compatible server) and ``anthropic`` (Messages):
    :data:`OPENAI` and :data:`ANTHROPIC` say which variables hold their credentials and
    base URL, where the API is by default, and what their usage fields are called.

Credentials
    ``OPENAI_API_KEY``; ``ANTHROPIC_API_KEY``, else ``ANTHROPIC_AUTH_TOKEN`` (sent as a
    bearer token), the SDK's own order. A :class:`Credential` holds the variable's name
    only: the value is read from the environment when the client is built and handed
    to the SDK as exactly one explicit credential, so the SDK consults no other variable,
    profile or federation file. With a base URL given (an option, or the provider's
    base-URL variable) and no credential, :data:`LOCAL_PLACEHOLDER_KEY` is sent: a local
    server (vLLM, Ollama, llama.cpp, LM Studio) needs none. Neither: a configuration
    error naming the variables.

Endpoint
    The SDK gets the base URL as given. What is shown and recorded never carries its
    userinfo: :attr:`Connection.host` (host and port, for messages) and
    :attr:`Connection.endpoint` (scheme, host, port, path: :func:`._redact.endpoint`,
    which the judge cache keys on).

Client
    One SDK client per :class:`Connection` and event loop, built on the SDK's default
    httpx client with our event hooks: they count HTTP attempts and status codes into the
    :class:`Traffic` of the current task (:func:`track`), and rewrite ``retry-after`` /
    ``retry-after-ms`` above ``retry_after_cap_s`` down to the cap (Anthropic's SDK would
    wait for any value, OpenAI's would give up above 120 s). The SDK retries
    (``max_retries``: 408, 409, 429, 5xx, with backoff) and times each read out after
    ``timeout_s``; there is no retry loop here. A server on this machine (``localhost``,
    ``127.0.0.0/8``, ``::1``: vLLM, Ollama...) is reached directly, never through an
    ``HTTP(S)_PROXY`` of the environment, which cannot reach it (and would see the
    prompts). Anthropic's OpenTelemetry spans are off: what a judge or a subject sends
    is recorded in the run's evidence, not exported.

The HTTP error ladder
    :meth:`Connection.call` turns whatever the SDK raised into one typed
    :class:`ProviderFailure`, raised as :class:`ProviderError` outside the SDK's handler
    (so the SDK exception, whose text may echo the key, is not even its ``__context__``):

    ===========================  ============  ===========================================
    what                         kind          meaning
    ===========================  ============  ===========================================
    401                          auth          configuration: check the credential variable
    403                          forbidden     configuration: the credential or the model
    404                          not_found     configuration: the model at this host
    402                          payment       configuration: the account cannot pay
    429 after the SDK's retries  rate_limited  this call failed; others may succeed
    5xx after the SDK's retries  server        this call failed; counts toward the breaker
    read timeout                 timeout       this call failed; counts toward the breaker
    connection refused/reset     connection    this call failed; counts toward the breaker
    any other 4xx (400...)       rejected      the provider's ``error.message``, redacted
    anything else                client        the exception's type only
    ===========================  ============  ===========================================

    Configuration failures stop the run (a judge's and a subject's alike): every later
    call would fail the same way, paid for nothing. 402 is one of them: the account
    cannot pay, and no retry or other item changes that. The others make one item an
    ERROR. ``breaker_threshold`` consecutive breaker failures open the connection's
    circuit for its lifetime: every later call fails at once (``circuit_open``), without
    HTTP; any response closes the count again. The judge and the subject map a failure
    to their own error types, and prefix its :attr:`~ProviderFailure.text` with who
    failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import email.utils
import hashlib
import ipaddress
import json
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import (
    TYPE_CHECKING,
    ClassVar,
    Generic,
    Literal,
    NamedTuple,
    Protocol,
    TypedDict,
    TypeVar,
    cast,
)
from urllib.parse import urlsplit

from ._cost import WIRE, Wire
from ._vocab import AgentevalError
from .evidence._redact import Redactor, endpoint
from .judges._injection import snippet

if TYPE_CHECKING:  # the SDKs' types, for the judges and subjects to annotate with
    from anthropic import AsyncAnthropic as AsyncAnthropic
    from anthropic.types import Message as Message
    from openai import AsyncOpenAI as AsyncOpenAI
    from openai.types.chat import ChatCompletion as ChatCompletion

__all__ = [
    "ANTHROPIC",
    "LOCAL_PLACEHOLDER_KEY",
    "OPENAI",
    "AnthropicConnection",
    "Connection",
    "Credential",
    "OpenAIConnection",
    "Provider",
    "ProviderError",
    "ProviderFailure",
    "Traffic",
    "Transport",
    "provider_message",
    "token_usage",
    "track",
]

#: The key sent to a server named by a base URL when no credential is configured.
LOCAL_PLACEHOLDER_KEY = "agenteval-no-key"

ProviderName = Literal["openai", "anthropic"]
FailureKind = Literal[
    "no_credential",
    "auth",
    "forbidden",
    "payment",
    "not_found",
    "rate_limited",
    "server",
    "timeout",
    "connection",
    "rejected",
    "client",
    "circuit_open",
]
#: Failures that stop the run: every later call would fail the same way.
CONFIG_KINDS: frozenset[FailureKind] = frozenset(
    {"no_credential", "auth", "forbidden", "payment", "not_found"}
)
#: Failures that say the provider is down, and count toward the circuit breaker.
BREAKER_KINDS: frozenset[FailureKind] = frozenset({"server", "timeout", "connection"})


@dataclass(frozen=True)
class Provider:
    """What differs between two providers' plumbing: names, never behaviour."""

    name: ProviderName
    #: The variables that may hold a credential, in the order they are tried; the
    #: first is an API key, a second (Anthropic's) a bearer token.
    credential_vars: tuple[str, ...]
    base_url_var: str
    default_base_url: str
    #: The usage fields of a response: (prompt tokens, completion tokens).
    usage_fields: tuple[str, str]


OPENAI = Provider(
    "openai",
    ("OPENAI_API_KEY",),
    "OPENAI_BASE_URL",
    "https://api.openai.com/v1",
    ("prompt_tokens", "completion_tokens"),
)
ANTHROPIC = Provider(
    "anthropic",
    ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "ANTHROPIC_BASE_URL",
    "https://api.anthropic.com",
    ("input_tokens", "output_tokens"),
)


@dataclass(frozen=True)
class Credential:
    """Which variable authenticates the calls: its name, never its value."""

    variable: str
    kind: Literal["api_key", "auth_token"]
    #: No variable is set: a local server gets :data:`LOCAL_PLACEHOLDER_KEY`.
    placeholder: bool = False

    def value(self) -> str:
        """The secret itself, read when a client is built (never stored, never shown)."""
        secret = None if self.placeholder else os.environ.get(self.variable)
        return secret or LOCAL_PLACEHOLDER_KEY


@dataclass(frozen=True)
class Transport:
    """How calls travel: the options a judge and a subject both have."""

    timeout_s: float
    max_retries: int = 2
    retry_after_cap_s: float = 30.0
    breaker_threshold: int = 5


@dataclass(frozen=True)
class ProviderFailure:
    """One failed exchange, classified: the typed outcome judges and subjects map."""

    kind: FailureKind
    #: Already phrased for the user (no secret, no provider text but a redacted
    #: ``error.message``); the caller prefixes who failed.
    text: str
    status: int | None = None
    attempts: int = 0
    #: The provider's error text (HTTP errors), redacted and in lower case, for matching
    #: only (a judge falls back when a 400 names the structured-output mechanism).
    match_text: str = field(default="", repr=False)

    @property
    def config(self) -> bool:
        """The run must stop: the configuration is wrong for every call."""
        return self.kind in CONFIG_KINDS


class ProviderError(AgentevalError):
    """A :class:`ProviderFailure` on its way to the judge's or the subject's error type."""

    def __init__(self, failure: ProviderFailure) -> None:
        super().__init__(failure.text)
        self.failure = failure


# --------------------------------------------------------------------------- traffic


@dataclass
class Traffic:
    """What the HTTP attempts of one task did (filled in by the client's event hooks)."""

    attempts: int = 0
    statuses: list[int] = field(default_factory=list)
    retry_after_capped: int = 0
    #: requests cancelled (a deadline, the run's stop) after they were sent and before
    #: their answer: the provider got them, and may bill them
    cut_off: int = 0


_TRAFFIC: contextvars.ContextVar[Traffic | None] = contextvars.ContextVar(
    "agenteval_provider_traffic", default=None
)


@contextlib.contextmanager
def track(traffic: Traffic) -> Iterator[Traffic]:
    """Count the HTTP attempts made in this block (in this task) into *traffic*."""
    token = _TRAFFIC.set(traffic)
    try:
        yield traffic
    finally:
        _TRAFFIC.reset(token)


def _fmt_seconds(value: float) -> str:
    return format(value, "g")


def _seconds(value: str, scale: float) -> float | None:
    try:
        return float(value) / scale
    except ValueError:
        pass
    if scale != 1:
        return None
    try:  # an HTTP date
        return email.utils.parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def cap_retry_after(headers: MutableMapping[str, str], cap: float) -> bool:
    """Rewrite ``retry-after(-ms)`` above *cap* seconds down to *cap*. True if changed."""
    changed = False
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        seconds = None if value is None else _seconds(value, scale)
        if seconds is not None and (not math.isfinite(seconds) or seconds > cap):
            headers[name] = _fmt_seconds(max(cap, 0.001) * scale)
            changed = True
    return changed


class _HttpResponse(Protocol):
    """What the hooks read of the SDK's HTTP response (httpx's or its successor's)."""

    @property
    def headers(self) -> MutableMapping[str, str]: ...

    @property
    def status_code(self) -> int: ...


#: How the run stops a request: a task cancelled (a deadline, -x, the run's end), or a
#: Ctrl-C raised in the middle of the request's own code (the loop runs on the main thread)
_STOPS = (asyncio.CancelledError, KeyboardInterrupt)


class _Tracer:
    """httpcore's ``trace`` extension for one request, and its part in its call's *wire*.

    A request is on the wire from the moment its headers start out until its answer's
    status is read (:meth:`answered`) or its answer is lost; a call the run stops while
    one is on the wire may be billed, wherever the stop lands: in a trace event, between
    two of them, or between the answer's arrival and the response hook (Ctrl-C raises in
    whatever code the main thread runs). A request stopped inside a traced step counts in
    *traffic*'s and *wire*'s cut_off too (a judge's deadline, say); one whose answer is
    lost once it went out whole (a connection closed under it) counts in *wire*'s lost.
    A refused connection, or a wait between retries, sent nothing a provider could bill."""

    __slots__ = ("ended", "failed", "sent", "traffic", "wire")

    def __init__(self, traffic: Traffic | None, wire: Wire | None) -> None:
        self.traffic, self.wire = traffic, wire
        self.sent = self.ended = self.failed = False

    async def __call__(self, event: str, info: Mapping[str, object]) -> None:
        if event.endswith("send_request_headers.started"):
            self.sent = True
            if self.wire is not None:
                self.wire.on_wire += 1
        elif event.endswith(".failed") and self.sent and not self.failed:
            # (also once its status was read: a stop while its answer trickles in)
            if isinstance(info.get("exception"), _STOPS):
                self.failed = True
                for counter in (self.traffic, self.wire):
                    if counter is not None:
                        counter.cut_off += 1
            elif ".receive_response" in event:  # lost under it, once it went out whole
                self.failed = True
                if self.wire is not None:
                    self.wire.lost += 1
                self._end()
            # a write failing is not the end: httpcore reads the answer a server may
            # have sent before it closed (the request stays on the wire until then)

    def answered(self, status: int) -> None:
        """The answer's status was read: a success is billed (counted first, so that a stop
        in between counts the request twice rather than not at all)."""
        if self.wire is not None and status < 400:
            self.wire.answered += 1
        self._end()

    def _end(self) -> None:
        if self.sent and not self.ended and self.wire is not None:
            self.wire.on_wire -= 1
        self.ended = True


def _event_hooks(cap: float) -> dict[str, list[Callable[..., Awaitable[None]]]]:
    async def on_request(request: object) -> None:
        traffic, wire = _TRAFFIC.get(), WIRE.get()
        if traffic is not None:
            traffic.attempts += 1
        if wire is not None:
            wire.requests += 1
        extensions = getattr(request, "extensions", None)
        if (traffic or wire) and isinstance(extensions, dict) and "trace" not in extensions:
            extensions["trace"] = _Tracer(traffic, wire)

    async def on_response(response: _HttpResponse) -> None:
        capped = cap_retry_after(response.headers, cap)
        extensions = getattr(getattr(response, "request", None), "extensions", None)
        tracer = extensions.get("trace") if isinstance(extensions, dict) else None
        if isinstance(tracer, _Tracer):
            tracer.answered(response.status_code)
        else:  # another's trace: its requests' answers count all the same
            wire = WIRE.get()
            if wire is not None and response.status_code < 400:
                wire.answered += 1
        traffic = _TRAFFIC.get()
        if traffic is not None:
            traffic.statuses.append(int(response.status_code))
            traffic.retry_after_capped += capped

    return {"request": [on_request], "response": [on_response]}


def token_usage(provider: Provider, usage: object) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of a response's usage (the SDK's object, or its
    JSON); 0 for what is missing."""

    def count(name: str) -> int:
        if isinstance(usage, dict):
            value = usage.get(name)
        else:
            value = getattr(usage, name, None) if usage is not None else None
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt, completion = provider.usage_fields
    return count(prompt), count(completion)


def json_kind(value: object) -> str:
    """What JSON value *value* is, said in words ("a number"), for a message."""
    kinds = {dict: "an object", list: "a list", str: "text", bool: "a boolean"}
    return kinds.get(type(value), "a number" if isinstance(value, int | float) else "null")


def text_of_blocks(blocks: list[object]) -> str:
    """The text of a message's content blocks, each a JSON object with a ``type``: the
    ``text`` blocks' text joined (Anthropic's content; the content an OpenAI-compatible
    server gives as a list, as Mistral's reasoning models do: thinking, then text).
    Raises ValueError saying what is wrong with a block of another shape."""
    texts: list[str] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(kind, str):
            what = "an object without a type" if isinstance(block, dict) else json_kind(block)
            raise ValueError(f"content holds a block that is {what}")
        if kind == "text":
            text = cast("dict[str, object]", block).get("text")
            if not isinstance(text, str):
                raise ValueError(f"content holds a text block whose text is {json_kind(text)}")
            texts.append(text)
    return "".join(texts)


# --------------------------------------------------------------------------- errors


def host_of(url: str) -> str:
    """Host (and port, when not the scheme's default) of *url*: never userinfo or path."""
    try:
        return urlsplit(endpoint(url)).netloc or "(unparseable base URL)"
    except ValueError:
        return "(unparseable base URL)"


def _loopback_host(url: str) -> str | None:
    """The host of *url* as an httpx URL pattern when it is this machine (``localhost``,
    ``127.0.0.0/8``, ``::1``); None otherwise."""
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return None
    if host == "localhost" or host.endswith(".localhost"):
        return host
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if not address.is_loopback:
        return None
    return f"[{host}]" if address.version == 6 else host


def _error_text(exc: BaseException) -> str:
    """Provider error text, redacted, in lower case: for matching, never shown."""
    parts = [str(getattr(exc, "message", "") or "")]
    body = getattr(exc, "body", None)
    if body is not None:
        with contextlib.suppress(TypeError, ValueError):
            parts.append(json.dumps(body, default=str))
    return Redactor.from_environ().text(" ".join(parts)).lower()


def provider_message(body: object) -> str:
    """The ``error.message`` of a provider's error body, credentials redacted, clipped.

    ``{"error": {"message"}}`` (OpenAI), ``{"type": "error", "error": {"message"}}``
    (Anthropic), either nested once more (a batch line's error), or a bare
    ``{"message"}``; "" when there is none.
    """
    message: object = None
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping):
            message = inner.get("message")
            nested = inner.get("error")
            if isinstance(nested, Mapping):
                message = nested.get("message", message)
    if not isinstance(message, str) or not message.strip():
        return ""
    return snippet(Redactor.from_environ().text(message), 200)


class _ClientOptions(TypedDict):
    base_url: str
    timeout: float
    max_retries: int


class _HttpOptions(TypedDict, total=False):
    timeout: float
    event_hooks: dict[str, list[Callable[..., Awaitable[None]]]]
    #: URL pattern -> None: that host's requests go direct, not through a proxy
    mounts: dict[str, None]


class _SdkErrors(NamedTuple):
    """An SDK's error classes. Both SDKs are generated from one template (Stainless):
    the same names, the same hierarchy, which is why one ladder serves both."""

    base: type[Exception]
    status: type[Exception]
    timeout: type[Exception]
    connection: type[Exception]

    @classmethod
    def of(cls, sdk: ModuleType) -> _SdkErrors:
        return cls(sdk.APIError, sdk.APIStatusError, sdk.APITimeoutError, sdk.APIConnectionError)


# --------------------------------------------------------------------------- connections


class _Client(Protocol):
    async def close(self) -> None: ...


ClientT = TypeVar("ClientT", bound=_Client)
R = TypeVar("R")


class SharedBreaker:
    """The circuit breaker of one connection across the xdist workers of a run on one host.

    Each worker writes its count of consecutive failures in a file of its own
    (``breaker-<key>-<worker>``); the circuit opens for every worker once their sum reaches
    the threshold (``breaker-<key>.open``, holding that sum), as one process's would: a
    provider that is down is found out after as many failures under ``-n`` as without it.
    *folder* is the run's (the xdist workers' ledger folder); a worker on another host has
    none, and its breaker stays its own."""

    def __init__(self, folder: Path, worker: str, key: str) -> None:
        self.folder, self.key = folder, key
        self._mine = folder / f"breaker-{key}-{worker}"
        self._open = folder / f"breaker-{key}.open"
        self._written = 0

    def note(self, failures: int, threshold: int) -> int | None:
        """This worker's consecutive *failures* now: the run's sum when it opens the circuit."""
        if failures == self._written:
            return None
        self._written = failures
        with contextlib.suppress(OSError):
            self._mine.write_text(str(failures))
        if not failures:
            return None
        total = 0
        for slot in self.folder.glob(f"breaker-{self.key}-*"):
            with contextlib.suppress(OSError, ValueError):
                total += max(0, int(slot.read_text() or 0))
        if total < threshold:
            return None
        with contextlib.suppress(OSError):
            self._open.write_text(str(total))
        return total

    def opened(self) -> int | None:
        """The run's count of failures when another worker opened the circuit, or None."""
        try:
            return max(1, int(self._open.read_text() or 0))
        except (OSError, ValueError):
            return None


#: Where this process shares its connections' breakers (an xdist worker: its run's
#: folder and its id), set by the plugin; None: each connection's breaker is its own
_SHARED_BREAKERS: tuple[Path, str] | None = None


def share_breakers(folder: Path | None, worker: str = "") -> None:
    """Share the breakers of the connections made from now on in *folder* (None: stop)."""
    global _SHARED_BREAKERS
    _SHARED_BREAKERS = None if folder is None else (folder, worker)


class Connection(Generic[ClientT]):
    """One model at one endpoint with one credential: its client, breaker and ladder.

    *base_url* (an option) wins over the provider's base-URL variable; *base_url_option*
    names the option in the message for a missing credential. Raises
    :class:`ProviderError` (``no_credential``) when nothing authenticates the calls.
    """

    provider: ClassVar[Provider]

    def __init__(
        self, model: str, transport: Transport, *, base_url: str | None, base_url_option: str
    ) -> None:
        self.model = model
        self.transport = transport
        explicit = base_url or os.environ.get(self.provider.base_url_var) or None
        self.base_url = explicit or self.provider.default_base_url
        self.host = host_of(self.base_url)
        self.credential = self._credential(explicit is not None, base_url_option)
        self._errors = self._sdk_errors()  # imports the SDK now, not in a call's deadline
        self._client: ClientT | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._failures = 0
        self._open_after: int | None = None
        self._shared: SharedBreaker | None = None
        if _SHARED_BREAKERS is not None:
            folder, worker = _SHARED_BREAKERS
            identity = f"{self.provider.name}|{self.base_url}|{model}|{self.credential.variable}"
            key = hashlib.sha256(identity.encode()).hexdigest()[:16]
            self._shared = SharedBreaker(folder, worker, key)
        #: A configuration failure a call got (a key refused, a model unknown): every later
        #: call would get it too, and is not sent (calls started ahead kept sending)
        self._config_failure: ProviderFailure | None = None

    @property
    def api_error(self) -> type[Exception]:
        """The SDK's base error (``APIError``), for calls made outside :meth:`call`; turn
        one into a :class:`ProviderFailure` with :meth:`classify`."""
        return self._errors.base

    @property
    def endpoint(self) -> str:
        """The base URL as the judge cache keys it: scheme, host, port, path; no userinfo."""
        return endpoint(self.base_url)

    def _credential(self, local: bool, base_url_option: str) -> Credential:
        variables = self.provider.credential_vars
        for i, variable in enumerate(variables):
            if os.environ.get(variable):
                return Credential(variable, "api_key" if i == 0 else "auth_token")
        if local:
            return Credential(variables[0], "api_key", placeholder=True)
        raise ProviderError(
            ProviderFailure(
                "no_credential",
                f"{' or '.join(variables)} is not set (needed unless a base URL is set "
                f"with {base_url_option} or {self.provider.base_url_var})",
            )
        )

    # -- the client

    def client(self) -> ClientT:
        """The SDK client of the running event loop (built on first use in each loop)."""
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = self._new_client()
            self._client_loop = loop
        return self._client

    def _new_client(self) -> ClientT:
        raise NotImplementedError

    def _sdk_errors(self) -> _SdkErrors:
        raise NotImplementedError

    def _options(self) -> _ClientOptions:
        """What both SDKs' clients are built with."""
        return {
            "base_url": self.base_url,
            "timeout": self.transport.timeout_s,
            "max_retries": self.transport.max_retries,
        }

    def _http_options(self) -> _HttpOptions:
        """What the SDKs' default httpx clients are built with: our event hooks, and no
        proxy for a server on this machine."""
        hooks = _event_hooks(self.transport.retry_after_cap_s)
        options: _HttpOptions = {"timeout": self.transport.timeout_s, "event_hooks": hooks}
        host = _loopback_host(self.base_url)
        if host is not None:
            options["mounts"] = {f"all://{host}": None}
        return options

    async def aclose(self) -> None:
        client, self._client = self._client, None
        self._client_loop = None
        if client is not None:
            await client.close()

    # -- the circuit breaker

    def note_failure(self) -> None:
        """One more consecutive provider failure (a judge's deadline counts too)."""
        self._failures += 1
        threshold = self.transport.breaker_threshold
        if self._open_after is None and self._failures >= threshold:
            self._open_after = self._failures
        if self._open_after is None and self._shared is not None:
            self._open_after = self._shared.note(self._failures, threshold)

    def _note_success(self) -> None:
        if self._open_after is None:
            self._failures = 0
            if self._shared is not None:
                self._shared.note(0, self.transport.breaker_threshold)

    def circuit_failure(self) -> ProviderFailure | None:
        """The failure every call gets once the circuit is open; None while closed."""
        if self._open_after is None and self._shared is not None:
            self._open_after = self._shared.opened()  # opened by another worker
        if self._open_after is None:
            return None
        return ProviderFailure(
            "circuit_open",
            f"unavailable: circuit open after {self._open_after} consecutive provider "
            "failures (server errors 5xx, timeouts or refused connections)",
        )

    # -- calls

    async def call(
        self,
        send: Callable[[ClientT], Awaitable[R]],
        recoverable: Callable[[ProviderFailure], bool] | None = None,
    ) -> R:
        """``await send(client)``; any failure raised as :class:`ProviderError`.

        A failure *recoverable* accepts (the caller changes its request and calls again,
        e.g. a judge falling back from a structured-output mode the server refused) does
        not count toward the circuit breaker.
        """
        open_circuit = self.circuit_failure()
        if open_circuit is not None:
            raise ProviderError(open_circuit)
        if self._config_failure is not None:
            raise ProviderError(dataclasses.replace(self._config_failure, attempts=0))
        traffic = _TRAFFIC.get()
        token = None
        if traffic is None:  # a caller that does not track its traffic: count this call's
            traffic = Traffic()
            token = _TRAFFIC.set(traffic)
        before = traffic.attempts
        failure: ProviderFailure | None = None
        try:
            result = await send(self.client())
        except Exception as exc:  # never let SDK text (it may echo the key) escape
            failure = self.classify(exc, traffic.attempts - before)
        finally:
            if token is not None:
                _TRAFFIC.reset(token)
        if failure is not None:
            taken = bool(recoverable and recoverable(failure))  # the caller changes its request
            if failure.kind in BREAKER_KINDS and not taken:
                self.note_failure()
            if failure.kind in CONFIG_KINDS and not taken:
                self._config_failure = failure
            raise ProviderError(failure)  # outside the handler: no SDK exception in the chain
        self._note_success()
        return result

    def classify(self, exc: BaseException, attempts: int) -> ProviderFailure:
        """The HTTP error ladder: an SDK exception -> the typed failure."""
        errors = self._errors
        variable = self.credential.variable
        if isinstance(exc, errors.status):
            status = getattr(exc, "status_code", 0)
            status = status if isinstance(status, int) and not isinstance(status, bool) else 0
            match = _error_text(exc)
            config_texts: dict[int, tuple[FailureKind, str]] = {
                401: ("auth", f"authentication failed (401); check {variable}"),
                402: ("payment", f"payment required (402); check the account of {variable}"),
                403: (
                    "forbidden",
                    f"permission denied (403); check {variable} and the access to model "
                    f"'{self.model}'",
                ),
                404: ("not_found", f"model '{self.model}' not found (404) at {self.host}"),
            }
            if status in config_texts:
                kind, text = config_texts[status]
                return ProviderFailure(kind, text, status, attempts, match)
            if status == 429:
                text = f"rate limited after {attempts} attempts"
                return ProviderFailure("rate_limited", text, status, attempts, match)
            if status >= 500:
                text = f"server error {status} after {attempts} attempts"
                return ProviderFailure("server", text, status, attempts, match)
            detail = provider_message(getattr(exc, "body", None))
            text = f"request rejected ({status})" + (f": {detail}" if detail else "")
            return ProviderFailure("rejected", text, status, attempts, match)
        if isinstance(exc, errors.timeout):
            text = (
                f"request to {self.host} timed out (SDK timeout {self.transport.timeout_s:g}s) "
                f"after {attempts} attempts"
            )
            return ProviderFailure("timeout", text, None, attempts)
        if isinstance(exc, errors.connection):
            text = f"connection to {self.host} failed after {attempts} attempts"
            return ProviderFailure("connection", text, None, attempts)
        return ProviderFailure("client", f"client error ({type(exc).__name__})", None, attempts)


class OpenAIConnection(Connection["AsyncOpenAI"]):
    """``openai:MODEL``: the ``openai`` SDK's AsyncOpenAI."""

    provider = OPENAI

    def _new_client(self) -> AsyncOpenAI:
        import openai

        http = openai.DefaultAsyncHttpxClient(**self._http_options())
        return openai.AsyncOpenAI(
            api_key=self.credential.value(), http_client=http, **self._options()
        )

    def _sdk_errors(self) -> _SdkErrors:
        import openai

        return _SdkErrors.of(openai)


class AnthropicConnection(Connection["AsyncAnthropic"]):
    """``anthropic:MODEL``: the ``anthropic`` SDK's AsyncAnthropic."""

    provider = ANTHROPIC

    def _new_client(self) -> AsyncAnthropic:
        import anthropic

        http = anthropic.DefaultAsyncHttpxClient(**self._http_options())
        secret = self.credential.value()
        token = self.credential.kind == "auth_token"
        return anthropic.AsyncAnthropic(
            api_key=None if token else secret,
            auth_token=secret if token else None,
            http_client=http,
            open_telemetry=False,  # spans could carry prompts and answers out of the run
            **self._options(),
        )

    def _sdk_errors(self) -> _SdkErrors:
        import anthropic

        return _SdkErrors.of(anthropic)

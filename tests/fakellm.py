"""A scripted fake LLM provider for tests: OpenAI Chat Completions + Anthropic Messages over HTTP.

The project's tests drive the *real* ``openai`` and ``anthropic`` SDKs against this server, which
listens on 127.0.0.1 only (stdlib ``http.server``; no third-party dependencies, never any traffic
off the loopback interface).

Quick start::

    from fakellm import FakeLLMServer, Reply

    with FakeLLMServer() as server:
        server.enqueue(Reply.content("hello"), Reply.error(429, headers={"retry-after": "0.05"}))
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="test-key", max_retries=0)
        ...
        assert server.count("openai") == 1

or, in a test, the ``fake_llm`` fixture (import ``fake_llm_fixture`` into a conftest.py).

Scripting: replies queued with :meth:`FakeLLMServer.enqueue` are consumed in order, whichever
provider endpoint is called; each :class:`Reply` is rendered in the shape of the endpoint that
received the request. When the queue is empty the *handler* answers (a :class:`Reply`, or a
callable ``(RecordedRequest) -> Reply``); with neither, the server answers 500 "script exhausted"
(with ``x-should-retry: false`` so the SDKs fail at once instead of retrying).

Endpoints: ``POST /v1/chat/completions`` (OpenAI) and ``POST /v1/messages`` (Anthropic). Anything
else gets a provider-shaped 404 (provider guessed from the ``anthropic-version`` header). Requests
with ``"stream": true`` get a 400: SSE streaming is not emulated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

__all__ = [
    "FakeLLMServer",
    "Handler",
    "RecordedRequest",
    "Reply",
    "ToolCall",
    "fake_llm_fixture",
]

Provider = Literal["openai", "anthropic"]
ReplyKind = Literal["content", "tool_calls", "truncated", "refusal", "error", "drop", "raw"]

LOOPBACK = "127.0.0.1"
OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
FOREVER = math.inf

_OPENAI_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_denied", None),
    404: ("invalid_request_error", "not_found"),
    408: ("timeout", None),
    409: ("conflict", None),
    422: ("invalid_request_error", None),
    429: ("rate_limit_exceeded", "rate_limit_exceeded"),
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}


# --------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class ToolCall:
    """One tool/function call the fake model makes.

    ``arguments`` is a mapping (serialised as the OpenAI ``arguments`` JSON string and used as the
    Anthropic ``input`` dict) or a pre-serialised string (sent verbatim to OpenAI, so it may be
    deliberately malformed; Anthropic needs it to be a JSON object).
    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Build with the classmethods; adjust with the ``with_*`` methods.

    Common keyword options (accepted by every constructor):

    - ``delay``: seconds to wait before answering (``math.inf`` = until the server stops).
    - ``trickle``: send headers at once, then the body ``trickle_chunk`` bytes every ``trickle``
      seconds (defeats per-read timeouts, not wall-clock deadlines).
    - ``headers``: extra response headers.
    - ``model``: the ``model`` reported in the response (default: echo the requested model).
    - ``prompt_tokens`` / ``completion_tokens``: usage (default: ~len(json)/4 estimates; for a
      truncated reply, completion defaults to the request's max tokens when given).
    - ``finish_reason`` (OpenAI) / ``stop_reason`` (Anthropic): override the natural value.
    """

    kind: ReplyKind
    text: str | None = None
    calls: tuple[ToolCall, ...] = ()  # kind == "tool_calls"
    status: int = 200
    error_type: str | None = None
    error_code: str | None = None
    body: Any = None  # kind == "raw" / "error": verbatim body (dict/list -> JSON, str/bytes as is)
    partial: bool = False  # kind == "drop": send headers and half a body first
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    trickle: float | None = None
    trickle_chunk: int = 1
    model: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    stop_reason: str | None = None

    # ---- constructors

    @classmethod
    def content(cls, text: str, **opts: Any) -> Reply:
        """A plain text answer (OpenAI ``message.content``; Anthropic one ``text`` block)."""
        return cls(kind="content", text=text, **opts)

    @classmethod
    def json_content(cls, obj: Any, **opts: Any) -> Reply:
        """A text answer whose text is ``json.dumps(obj)`` (for structured-output tests)."""
        return cls(kind="content", text=json.dumps(obj), **opts)

    @classmethod
    def tool_call(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        id: str | None = None,
        text: str | None = None,
        **opts: Any,
    ) -> Reply:
        """One tool call (OpenAI ``tool_calls`` / finish "tool_calls"; Anthropic ``tool_use``)."""
        call = ToolCall(name=name, arguments={} if arguments is None else arguments, id=id)
        return cls(kind="tool_calls", text=text, calls=(call,), **opts)

    @classmethod
    def tool_calls(
        cls, calls: Sequence[ToolCall], *, text: str | None = None, **opts: Any
    ) -> Reply:
        """Several tool calls in one answer (``text`` optionally precedes them)."""
        return cls(kind="tool_calls", text=text, calls=tuple(calls), **opts)

    @classmethod
    def truncated(cls, text: str = "This answer was cut", **opts: Any) -> Reply:
        """Token limit hit: OpenAI finish_reason "length"; Anthropic stop_reason "max_tokens"."""
        return cls(kind="truncated", text=text, **opts)

    @classmethod
    def refusal(cls, text: str = "I can't help with that.", **opts: Any) -> Reply:
        """OpenAI: ``message.refusal`` = text, content null. Anthropic: stop_reason "refusal",
        no content blocks, ``stop_details = {"type": "refusal", "explanation": text}``."""
        return cls(kind="refusal", text=text, **opts)

    @classmethod
    def error(
        cls,
        status: int,
        message: str | None = None,
        *,
        type: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: Any = None,
        **opts: Any,
    ) -> Reply:
        """An HTTP error with a provider-shaped JSON body (``body`` replaces it verbatim)."""
        return cls(
            kind="error",
            status=status,
            text=message,
            error_type=type,
            error_code=code,
            headers=dict(headers or {}),
            body=body,
            **opts,
        )

    @classmethod
    def rate_limited(
        cls, retry_after: float | None = 0.05, *, retry_after_ms: float | None = None, **opts: Any
    ) -> Reply:
        """429 with ``retry-after`` (seconds) and/or ``retry-after-ms``.

        Both SDKs only honour a *positive* delay: ``retry-after: 0`` makes them fall back to their
        own exponential backoff (~0.4-0.5 s for the first retry)."""
        headers = dict(opts.pop("headers", None) or {})
        if retry_after is not None:
            headers["retry-after"] = _num(retry_after)
        if retry_after_ms is not None:
            headers["retry-after-ms"] = _num(retry_after_ms)
        return cls.error(429, "Rate limit reached (fake)", headers=headers, **opts)

    @classmethod
    def hang(cls, seconds: float | None = None, then: Reply | None = None) -> Reply:
        """Wait ``seconds`` (default: until the server stops) and then send ``then``."""
        base = then if then is not None else cls.content("(late answer)")
        return dataclasses.replace(base, delay=FOREVER if seconds is None else seconds)

    @classmethod
    def drop(cls, *, partial: bool = False, **opts: Any) -> Reply:
        """Close the connection without a response (``partial``: after headers + half a body)."""
        return cls(kind="drop", partial=partial, **opts)

    @classmethod
    def raw(
        cls,
        status: int = 200,
        body: Any = b"",
        *,
        headers: Mapping[str, str] | None = None,
        **opts: Any,
    ) -> Reply:
        """Exactly this status/body (dict/list -> JSON; str/bytes verbatim), e.g. malformed JSON."""
        return cls(kind="raw", status=status, body=body, headers=dict(headers or {}), **opts)

    # ---- modifiers

    def with_delay(self, seconds: float) -> Reply:
        return dataclasses.replace(self, delay=seconds)

    def with_trickle(self, interval: float, chunk: int = 1) -> Reply:
        return dataclasses.replace(self, trickle=interval, trickle_chunk=chunk)

    def with_usage(self, prompt_tokens: int, completion_tokens: int) -> Reply:
        return dataclasses.replace(
            self, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )

    def with_model(self, model: str) -> Reply:
        return dataclasses.replace(self, model=model)

    def with_headers(self, **headers: str) -> Reply:
        """Add response headers (underscores in names become dashes)."""
        extra = {k.replace("_", "-"): v for k, v in headers.items()}
        return dataclasses.replace(self, headers={**self.headers, **extra})


Handler = Callable[["RecordedRequest"], Reply]


@dataclass
class RecordedRequest:
    """One request as the server saw it."""

    method: str
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # lower-case names
    body: Any  # parsed JSON, or None when empty/invalid
    raw_body: bytes
    provider: Provider
    received_at: float  # time.monotonic()
    timestamp: float  # time.time()
    reply: Reply | None = None  # the Reply that answered it (None: 404/400/500 from the server)

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def api_key(self) -> str | None:
        """The credential sent (``x-api-key`` or ``Authorization: Bearer``)."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        auth = self.headers.get("authorization", "")
        return auth[7:] if auth.lower().startswith("bearer ") else None


# --------------------------------------------------------------------------- rendering


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _estimate_tokens(obj: Any) -> int:
    text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
    return max(1, len(text) // 4)


def _body_bytes(body: Any) -> tuple[bytes, str]:
    if isinstance(body, bytes):
        return body, "application/octet-stream"
    if isinstance(body, str):
        return body.encode(), "text/plain; charset=utf-8"
    return json.dumps(body).encode(), "application/json"


def _usage_numbers(reply: Reply, req: RecordedRequest) -> tuple[int, int]:
    body = req.body if isinstance(req.body, dict) else {}
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = _estimate_tokens([body.get("system"), body.get("messages"), body.get("tools")])
    completion = reply.completion_tokens
    if completion is None:
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if reply.kind == "truncated" and isinstance(limit, int) and limit > 0:
            completion = limit
        else:
            out: list[Any] = [reply.text or ""]
            out += [[c.name, c.arguments] for c in reply.calls]
            completion = _estimate_tokens(out)
    return prompt, completion


def _tool_args_str(call: ToolCall) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _tool_args_dict(call: ToolCall) -> dict[str, Any]:
    if isinstance(call.arguments, str):
        value = json.loads(call.arguments)
        if not isinstance(value, dict):
            raise ValueError(f"tool {call.name!r}: Anthropic tool_use input must be a JSON object")
        return value
    return dict(call.arguments)


def _error_body(provider: Provider, status: int, message: str, etype: str | None, code: str | None):
    if provider == "openai":
        default_type, default_code = _OPENAI_ERROR_TYPES.get(
            status, ("server_error" if status >= 500 else "invalid_request_error", None)
        )
        return {
            "error": {
                "message": message,
                "type": etype or default_type,
                "param": None,
                "code": code if code is not None else default_code,
            }
        }
    error: dict[str, Any] = {
        "type": etype or _ANTHROPIC_ERROR_TYPES.get(status, "api_error"),
        "message": message,
    }
    if code is not None:
        error["details"] = {"error_code": code}
    return {"type": "error", "error": error, "request_id": f"req_{uuid.uuid4().hex[:24]}"}


def _render_openai(reply: Reply, req: RecordedRequest, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
    message["annotations"] = []
    finish = "stop"
    if reply.kind in ("content", "truncated"):
        message["content"] = reply.text
        finish = "length" if reply.kind == "truncated" else "stop"
    elif reply.kind == "refusal":
        message["refusal"] = reply.text
    elif reply.kind == "tool_calls":
        message["content"] = reply.text
        message["tool_calls"] = [
            {
                "id": call.id or f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": _tool_args_str(call)},
            }
            for call in reply.calls
        ]
        finish = "tool_calls"
    prompt, completion = _usage_numbers(reply, req)
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": reply.finish_reason or finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "service_tier": "default",
        "system_fingerprint": "fp_fakellm",
    }


def _render_anthropic(reply: Reply, req: RecordedRequest, model: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    stop = "end_turn"
    stop_details = None
    if reply.kind in ("content", "truncated"):
        content.append({"type": "text", "text": reply.text or ""})
        stop = "max_tokens" if reply.kind == "truncated" else "end_turn"
    elif reply.kind == "refusal":
        stop = "refusal"
        stop_details = {"type": "refusal", "category": None, "explanation": reply.text}
    elif reply.kind == "tool_calls":
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.calls:
            content.append(
                {
                    "type": "tool_use",
                    "id": call.id or f"toolu_{uuid.uuid4().hex[:24]}",
                    "name": call.name,
                    "input": _tool_args_dict(call),
                }
            )
        stop = "tool_use"
    prompt, completion = _usage_numbers(reply, req)
    return {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply.stop_reason or stop,
        "stop_sequence": None,
        "stop_details": stop_details,
        "usage": {"input_tokens": prompt, "output_tokens": completion},
    }


def _render(reply: Reply, req: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
    """Reply -> (status, headers, body) in the shape of ``req.provider``."""
    headers: dict[str, str] = {}
    rid = f"req_{uuid.uuid4().hex[:24]}"
    headers["x-request-id" if req.provider == "openai" else "request-id"] = rid
    if reply.kind == "raw":
        body, ctype = _body_bytes(reply.body)
        status = reply.status
    elif reply.kind == "error":
        if reply.body is not None:
            body, ctype = _body_bytes(reply.body)
        else:
            message = reply.text or f"fake error {reply.status}"
            err = _error_body(
                req.provider, reply.status, message, reply.error_type, reply.error_code
            )
            body, ctype = _body_bytes(err)
        status = reply.status
    else:  # content-like, and the body a partial drop cuts short
        model = reply.model or req.model or "fake-model"
        render = _render_openai if req.provider == "openai" else _render_anthropic
        body, ctype = _body_bytes(render(reply, req, model))
        status = 200
    headers["content-type"] = ctype
    # framing headers are the server's business (keep-alive must stay correct)
    extra = {k.lower(): v for k, v in reply.headers.items()}
    headers.update({k: v for k, v in extra.items() if k not in ("content-length", "connection")})
    return status, headers, body


# --------------------------------------------------------------------------- HTTP plumbing


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakellm/1.0"
    sys_version = ""
    timeout = None  # idle keep-alive connections are unblocked by FakeLLMServer.stop()
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms stalls
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr access log
        pass

    def do_POST(self) -> None:
        self.server.fake._handle(self)

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST

    def read_body(self) -> bytes:
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def send_head(self, status: int, headers: Mapping[str, str], length: int) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(length))
        if self.close_connection:
            self.send_header("connection", "close")
        self.end_headers()  # flushes: wfile is unbuffered


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # many concurrent connects must not overflow the accept backlog
    allow_reuse_address = False

    def __init__(self, fake: FakeLLMServer) -> None:
        self.fake = fake
        self.conn_lock = threading.Lock()
        self.conns: dict[socket.socket, threading.Thread] = {}
        super().__init__((LOOPBACK, 0), _RequestHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn() (a reverse DNS lookup); skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self.process_request_thread,
            args=(request, client_address),
            name="fakellm-conn",
            daemon=True,
        )
        with self.conn_lock:
            self.conns[request] = thread
        thread.start()

    def shutdown_request(self, request: Any) -> None:
        with self.conn_lock:
            self.conns.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # client went away / server stopping: expected
            return
        self.fake._note_error(f"unhandled server error: {exc!r}")


# --------------------------------------------------------------------------- the server


class FakeLLMServer:
    """Threaded fake OpenAI/Anthropic endpoint on 127.0.0.1:<ephemeral port>.

    Use as a context manager (or ``start()``/``stop()``). Thread-safe: requests are served in
    parallel, one thread per connection, keep-alive supported.
    """

    def __init__(
        self, replies: Sequence[Reply] = (), *, handler: Handler | Reply | None = None
    ) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._queue: deque[Reply] = deque()
        self._handler: Handler | Reply | None = handler
        self._requests: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.enqueue(*replies)

    # ---- lifecycle

    def start(self) -> FakeLLMServer:
        if self._httpd is not None or self._stopping.is_set():
            raise RuntimeError("FakeLLMServer can be started once")
        self._httpd = _HTTPServer(self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="fakellm-serve",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        """Stop serving. Never blocks for long: sleeping/trickling handlers are woken and abort,
        idle keep-alive connections are shut down, threads are daemons."""
        httpd = self._httpd
        if httpd is None or self._stopping.is_set():
            self._stopping.set()
            return
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()
        httpd.shutdown()  # ends serve_forever (poll interval 0.01 s)
        with httpd.conn_lock:
            conns = list(httpd.conns.items())
        for sock, _ in conns:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + timeout
        for _, thread in conns:
            thread.join(max(0.0, deadline - time.monotonic()))
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- addresses

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("server not started")
        return self._httpd.server_port

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    # ---- scripting

    def enqueue(self, *replies: Reply) -> FakeLLMServer:
        """Append replies to the script (consumed in order, by either provider)."""
        for reply in replies:
            if not isinstance(reply, Reply):
                raise TypeError(f"expected Reply, got {type(reply).__name__}")
        with self._lock:
            self._queue.extend(replies)
        return self

    def set_handler(self, handler: Handler | Reply | None) -> FakeLLMServer:
        """Fallback once the queue is empty: a Reply (answer every call so) or a callable."""
        with self._lock:
            self._handler = handler
        return self

    @property
    def pending(self) -> int:
        """Queued replies not yet consumed."""
        with self._lock:
            return len(self._queue)

    # ---- inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def errors(self) -> list[str]:
        """Server-side problems (script exhausted, handler raised, ...), for assertions."""
        with self._lock:
            return list(self._errors)

    def count(self, provider: Provider | None = None) -> int:
        with self._lock:
            return sum(1 for r in self._requests if provider is None or r.provider == provider)

    def last(self, provider: Provider | None = None) -> RecordedRequest:
        with self._lock:
            for r in reversed(self._requests):
                if provider is None or r.provider == provider:
                    return r
        raise LookupError(f"no {provider or 'recorded'} request")

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least ``n`` requests have arrived (TimeoutError otherwise)."""
        with self._changed:
            if not self._changed.wait_for(lambda: len(self._requests) >= n, timeout):
                raise TimeoutError(f"{len(self._requests)} of {n} requests arrived in {timeout}s")
            return list(self._requests)

    def reset(self) -> None:
        """Forget recorded requests and errors, clear the queue and the handler."""
        with self._lock:
            self._requests.clear()
            self._errors.clear()
            self._queue.clear()
            self._handler = None

    # ---- internals

    def _note_error(self, message: str) -> None:
        with self._lock:
            self._errors.append(message)

    def _next_reply(self, req: RecordedRequest) -> Reply | str:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            handler = self._handler
        if handler is None:
            return (
                f"fakellm: reply script exhausted: no queued Reply and no handler for "
                f"{req.method} {req.path} (request #{self.count()})"
            )
        if isinstance(handler, Reply):
            return handler
        try:
            reply = handler(req)
        except Exception as exc:
            return f"fakellm: handler raised {exc!r}"
        if not isinstance(reply, Reply):
            return f"fakellm: handler returned {type(reply).__name__}, not Reply"
        return reply

    def _handle(self, h: _RequestHandler) -> None:
        path, _, query = h.path.partition("?")
        raw = h.read_body()
        headers = {k.lower(): v for k, v in h.headers.items()}
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        # a base URL may mount the API under a prefix (``/alt/v1``): route on the suffix
        if path.endswith(OPENAI_PATH):
            provider: Provider = "openai"
        elif path.endswith(ANTHROPIC_PATH) or "anthropic-version" in headers:
            provider = "anthropic"
        else:
            provider = "openai"
        req = RecordedRequest(
            method=h.command,
            path=path,
            query=query,
            headers=headers,
            body=body,
            raw_body=raw,
            provider=provider,
            received_at=time.monotonic(),
            timestamp=time.time(),
        )
        with self._changed:
            self._requests.append(req)
            self._changed.notify_all()

        if h.command != "POST" or not path.endswith((OPENAI_PATH, ANTHROPIC_PATH)):
            msg = f"fakellm: no route for {h.command} {path}"
            self._send(h, *self._server_error(provider, 404, msg))
            return
        if isinstance(body, dict) and body.get("stream"):
            msg = "fakellm: streaming (stream=true) is not supported by the fake server"
            self._note_error(msg)
            self._send(h, *self._server_error(provider, 400, msg))
            return

        reply = self._next_reply(req)
        if isinstance(reply, str):
            self._note_error(reply)
            self._send(h, *self._server_error(provider, 500, reply))
            return
        req.reply = reply
        try:
            status, out_headers, out = _render(reply, req)
        except Exception as exc:
            msg = f"fakellm: could not render {reply.kind} reply: {exc!r}"
            self._note_error(msg)
            self._send(h, *self._server_error(provider, 500, msg))
            return

        if reply.delay and self._stopping.wait(None if math.isinf(reply.delay) else reply.delay):
            h.close_connection = True  # server stopping: abandon the request
            return
        if reply.kind == "drop":
            h.close_connection = True
            if reply.partial:
                with contextlib.suppress(OSError):
                    h.send_head(status, out_headers, len(out))
                    h.wfile.write(out[: len(out) // 2])
            return
        self._send(h, status, out_headers, out, reply)

    def _server_error(
        self, provider: Provider, status: int, message: str
    ) -> tuple[int, dict[str, str], bytes]:
        body, ctype = _body_bytes(_error_body(provider, status, message, None, None))
        return status, {"content-type": ctype, "x-should-retry": "false"}, body

    def _send(
        self,
        h: _RequestHandler,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        reply: Reply | None = None,
    ) -> None:
        if self._stopping.is_set():
            h.close_connection = True
        try:
            h.send_head(status, headers, len(body))
            if reply is None or not reply.trickle:
                h.wfile.write(body)
                return
            step = max(1, reply.trickle_chunk)
            for i in range(0, len(body), step):
                if self._stopping.wait(reply.trickle):
                    h.close_connection = True  # server stopping: abandon the body
                    return
                h.wfile.write(body[i : i + step])
        except OSError:  # client went away
            h.close_connection = True


# --------------------------------------------------------------------------- pytest fixture


@pytest.fixture(name="fake_llm")
def fake_llm_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLLMServer]:
    """A started :class:`FakeLLMServer`, stopped after the test.

    Also makes sure loopback traffic bypasses any HTTP(S)_PROXY configured in the environment.
    """
    for var in ("NO_PROXY", "no_proxy"):
        current = [h for h in os.environ.get(var, "").split(",") if h.strip()]
        if "*" not in current:
            monkeypatch.setenv(var, ",".join([*current, LOOPBACK, "localhost"]))
    with FakeLLMServer() as server:
        yield server

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

Batch endpoints (:class:`FakeBatches`, ``server.batch``): OpenAI's ``POST /v1/files``, ``GET
/v1/files/{id}[/content]``, ``POST /v1/batches``, ``GET /v1/batches/{id}``; Anthropic's ``POST
/v1/messages/batches``, ``GET /v1/messages/batches/{id}[/results]``. A batch's lines are answered
by the same script as live requests.

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
import re
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

import pytest

__all__ = [
    "FakeBatches",
    "FakeLLMServer",
    "Handler",
    "RecordedRequest",
    "Reply",
    "ToolCall",
    "fake_llm_fixture",
    "in_flight_counter",
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


def in_flight_counter(handler: Handler, delay: float) -> tuple[Handler, dict[str, int]]:
    """*handler* answering after *delay*; the dict counts the requests in flight ("now")
    and the most that overlapped ("max")."""
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def handle(req: RecordedRequest) -> Reply:
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(delay)
        with lock:
            state["now"] -= 1
        return handler(req)

    return handle, state


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
    batch_id: str | None = None  # a line of this batch (see FakeBatches), not an HTTP request

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


def _error_body(
    provider: Provider, status: int, message: str, etype: str | None, code: str | None
) -> dict[str, Any]:
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
            parts: list[bytes] = []
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
        self.batch = FakeBatches(self)  # OpenAI's Batch API and Anthropic's Message Batches
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

        if self.batch.route(h, req):
            return
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


# --------------------------------------------------------------------------- batch endpoints

BatchOutcome = Literal["completed", "expired", "failed"]
_FILE_CONTENT = re.compile(r".*/v1/files/([^/]+)/content")
_FILE = re.compile(r".*/v1/files/([^/]+)")
_BATCH = re.compile(r".*/v1/batches/([^/]+)")
_MSG_BATCH_RESULTS = re.compile(r"(.*)/v1/messages/batches/([^/]+)/results")
_MSG_BATCH = re.compile(r".*/v1/messages/batches/([^/]+)")


@dataclass(frozen=True)
class _RawJSON:
    """A ``Reply.raw`` body kept verbatim inside a batch's output line (duplicate keys,
    NaN and all), as a provider's own bytes would be."""

    text: str


def _dumps(obj: Any) -> bytes:
    """``json.dumps`` with each :class:`_RawJSON` value spliced in as its exact text."""
    raws: list[str] = []

    def default(value: Any) -> Any:
        if isinstance(value, _RawJSON):
            raws.append(value.text)
            return f"\x00raw{len(raws) - 1}\x00"
        raise TypeError(type(value).__name__)

    text = json.dumps(obj, default=default)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00raw{i}\x00"), raw)
    return text.encode()


def _iso(when: float) -> str:
    return datetime.fromtimestamp(when, timezone.utc).isoformat().replace("+00:00", "Z")


@dataclass
class _FakeBatch:
    id: str
    provider: Provider
    lines: list[tuple[str, Any]]  # (custom_id, request body)
    outcome: BatchOutcome
    polls_left: int
    polls: int
    created_at: float
    endpoint: str = OPENAI_PATH
    input_file_id: str | None = None
    metadata: Any = None
    # (custom_id, status, body) of each line answered; lines not answered expired
    answers: list[tuple[str, int, Any]] = field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def ended(self) -> bool:
        return self.polls_left <= 0


class FakeBatches:
    """OpenAI's Batch API (files and batches) and Anthropic's Message Batches, on the fake server.

    A batch's lines are answered when it is created, each as if it were a live request to
    ``/v1/chat/completions`` or ``/v1/messages``: from the reply queue, else the handler, so a
    handler that scripts live calls scripts batches too (its :class:`RecordedRequest` carries
    ``batch_id``). A non-2xx reply becomes a failed line (OpenAI's error file; Anthropic's
    ``errored`` result). Each batch then reports itself in progress for ``polls`` retrievals
    before it ends with ``outcome``:

    - ``completed``: every line answered;
    - ``expired``: the first half of the lines answered, the rest expired (OpenAI: in the error
      file with ``batch_expired``; Anthropic: ``expired`` results);
    - ``failed``: OpenAI's batch-level failure (no line answered, ``errors`` says why); on
      Anthropic, every line ``errored``.
    """

    def __init__(self, server: FakeLLMServer) -> None:
        self._server = server
        self._lock = threading.Lock()
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, _FakeBatch] = {}
        self._lines: list[RecordedRequest] = []
        self.polls = 0
        self.outcome: BatchOutcome = "completed"

    def behave(self, *, polls: int = 0, outcome: BatchOutcome = "completed") -> FakeBatches:
        """How the batches created from now on behave (see the class docstring)."""
        with self._lock:
            self.polls, self.outcome = polls, outcome
        return self

    @property
    def lines(self) -> list[RecordedRequest]:
        """Every batch line answered so far, as the request it stood for."""
        with self._lock:
            return list(self._lines)

    @property
    def created(self) -> list[str]:
        """The ids of the batches created, in order."""
        with self._lock:
            return list(self.batches)

    # ---- routing

    def route(self, h: Any, req: RecordedRequest) -> bool:
        """Answer *req* if it is a batch endpoint's; False for anything else."""
        path, method = req.path, req.method
        anthropic = "anthropic-version" in req.headers
        if anthropic:
            if method == "POST" and path.endswith("/v1/messages/batches"):
                return self._reply(h, req, self._anthropic_create(req))
            if method == "GET" and (m := _MSG_BATCH_RESULTS.fullmatch(path)):
                return self._reply(h, req, self._anthropic_results(m.group(2)))
            if method == "GET" and (m := _MSG_BATCH.fullmatch(path)):
                return self._reply(h, req, self._anthropic_batch(m.group(1), req))
            return False
        if method == "POST" and path.endswith("/v1/files"):
            return self._reply(h, req, self._upload(req))
        if method == "GET" and (m := _FILE_CONTENT.fullmatch(path)):
            return self._reply(h, req, self._content(m.group(1)))
        if method == "GET" and (m := _FILE.fullmatch(path)):
            return self._reply(h, req, self._file(m.group(1)))
        if method == "POST" and path.endswith("/v1/batches"):
            return self._reply(h, req, self._openai_create(req))
        if method == "GET" and path.endswith("/v1/batches"):
            return self._reply(h, req, self._openai_list(req.query))
        if method == "GET" and (m := _BATCH.fullmatch(path)):
            return self._reply(h, req, self._openai_batch(m.group(1)))
        return False

    def _reply(self, h: Any, req: RecordedRequest, out: tuple[int, Any]) -> bool:
        status, body = out
        if isinstance(body, bytes):
            data, ctype = body, "application/octet-stream"
        elif status >= 400:
            data, ctype = _body_bytes(_error_body(req.provider, status, str(body), None, None))
        else:
            data, ctype = _body_bytes(body)
        self._server._send(h, status, {"content-type": ctype}, data)
        return True

    # ---- answering lines

    def _answer(self, batch: _FakeBatch, custom_id: str, body: Any) -> tuple[int, Any]:
        provider = batch.provider
        req = RecordedRequest(
            method="POST",
            path=OPENAI_PATH if provider == "openai" else ANTHROPIC_PATH,
            query="",
            headers={},
            body=body,
            raw_body=json.dumps(body).encode(),
            provider=provider,
            received_at=time.monotonic(),
            timestamp=time.time(),
            batch_id=batch.id,
        )
        with self._lock:
            self._lines.append(req)
        reply = self._server._next_reply(req)
        if isinstance(reply, str):
            self._server._note_error(reply)
            return 500, _error_body(provider, 500, reply, None, None)
        req.reply = reply
        if reply.kind == "drop":
            return 500, _error_body(provider, 500, "fakellm: connection dropped", None, None)
        status, _, out = _render(reply, req)
        if reply.kind == "raw":
            return status, _RawJSON(out.decode("utf-8", "replace"))
        try:
            return status, json.loads(out)
        except ValueError:
            return status, out.decode("utf-8", "replace")

    def _answer_all(self, batch: _FakeBatch) -> None:
        if batch.outcome == "failed" and batch.provider == "openai":
            return  # the batch failed as a whole: no line was run
        lines = batch.lines
        if batch.outcome == "expired":
            lines = lines[: len(lines) // 2]
        for custom_id, body in lines:
            status, out = self._answer(batch, custom_id, body)
            if batch.outcome == "failed":  # Anthropic: every line errored
                status, out = 500, _error_body("anthropic", 500, "fakellm: failed", None, None)
            batch.answers.append((custom_id, status, out))

    # ---- OpenAI: files

    def _upload(self, req: RecordedRequest) -> tuple[int, Any]:
        from email import policy
        from email.parser import BytesParser

        ctype = req.headers.get("content-type", "")
        msg = BytesParser(policy=policy.HTTP).parsebytes(
            b"Content-Type: " + ctype.encode("latin-1") + b"\r\n\r\n" + req.raw_body
        )
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            fields[str(name)] = (
                part.get_filename(),
                payload if isinstance(payload, bytes) else b"",
            )
        if "file" not in fields or "purpose" not in fields:
            return 400, "fakellm: a file upload needs the fields file and purpose"
        filename, content = fields["file"]
        return 200, self._store(content, filename or "upload", fields["purpose"][1].decode())

    def _store(self, content: bytes, filename: str, purpose: str) -> dict[str, Any]:
        fid = f"file-{uuid.uuid4().hex[:24]}"
        obj = {
            "id": fid,
            "object": "file",
            "bytes": len(content),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        with self._lock:
            self.files[fid] = {**obj, "content": content}
        return obj

    def _file(self, fid: str) -> tuple[int, Any]:
        with self._lock:
            found = self.files.get(fid)
        if found is None:
            return 404, f"fakellm: no file {fid}"
        return 200, {k: v for k, v in found.items() if k != "content"}

    def _content(self, fid: str) -> tuple[int, Any]:
        with self._lock:
            found = self.files.get(fid)
        if found is None:
            return 404, f"fakellm: no file {fid}"
        return 200, bytes(found["content"])

    # ---- OpenAI: batches

    def _openai_create(self, req: RecordedRequest) -> tuple[int, Any]:
        body = req.body if isinstance(req.body, dict) else {}
        with self._lock:
            found = self.files.get(str(body.get("input_file_id")))
        if found is None:
            return 400, f"fakellm: no input file {body.get('input_file_id')!r}"
        lines = []
        for n, raw in enumerate(found["content"].splitlines(), 1):
            if not raw.strip():
                continue
            entry = json.loads(raw)
            if entry.get("url") != body.get("endpoint") or entry.get("method") != "POST":
                return 400, f"fakellm: input line {n} is not a POST to {body.get('endpoint')}"
            lines.append((str(entry["custom_id"]), entry["body"]))
        if len({cid for cid, _ in lines}) != len(lines):
            return 400, "fakellm: duplicate custom_id in the input file"
        batch = self._new(
            "openai", lines, endpoint=str(body.get("endpoint")), metadata=body.get("metadata")
        )
        batch.input_file_id = found["id"]
        self._answer_all(batch)
        ok = [a for a in batch.answers if 200 <= a[1] < 300]
        bad = [a for a in batch.answers if not 200 <= a[1] < 300]
        answered = {a[0] for a in batch.answers}

        def line(cid: str, status: int | None, out: Any, error: Any = None) -> bytes:
            response = None
            if status is not None:
                response = {"status_code": status, "request_id": f"req_{cid}", "body": out}
            obj = {"id": f"batch_req_{uuid.uuid4().hex[:16]}", "custom_id": cid}
            return _dumps({**obj, "response": response, "error": error}) + b"\n"

        if ok:
            data = b"".join(line(cid, st, out) for cid, st, out in ok)
            batch.output_file_id = self._store(data, f"{batch.id}_output.jsonl", "batch_output")[
                "id"
            ]
        expired = {
            "code": "batch_expired",
            "message": "This request could not be executed before the completion window expired.",
        }
        errors = [line(cid, st, out) for cid, st, out in bad]
        if batch.outcome == "expired":
            errors += [line(cid, None, None, expired) for cid, _ in lines if cid not in answered]
        if errors:
            batch.error_file_id = self._store(
                b"".join(errors), f"{batch.id}_error.jsonl", "batch_output"
            )["id"]
        return 200, self._openai_view(batch)

    def _new(self, provider: Provider, lines: list[tuple[str, Any]], **extra: Any) -> _FakeBatch:
        prefix = "batch_" if provider == "openai" else "msgbatch_"
        with self._lock:
            batch = _FakeBatch(
                id=f"{prefix}{uuid.uuid4().hex[:24]}",
                provider=provider,
                lines=lines,
                outcome=self.outcome,
                polls_left=self.polls,
                polls=self.polls,
                created_at=time.time(),
                **extra,
            )
            self.batches[batch.id] = batch
        return batch

    def _openai_list(self, query: str) -> tuple[int, Any]:
        """OpenAI's list of batches: newest first, ``limit`` a page, ``after`` an id."""
        from urllib.parse import parse_qs

        params = parse_qs(query)
        limit = int(params.get("limit", ["20"])[0])
        after = params.get("after", [None])[0]
        with self._lock:
            newest = [b for b in reversed(self.batches.values()) if b.provider == "openai"]
        if after is not None:
            ids = [b.id for b in newest]
            newest = newest[ids.index(after) + 1 :] if after in ids else []
        page = newest[:limit]
        data = [self._openai_view(b, running=b.polls_left > 0) for b in page]
        return 200, {
            "object": "list",
            "data": data,
            "first_id": page[0].id if page else None,
            "last_id": page[-1].id if page else None,
            "has_more": len(newest) > limit,
        }

    def _openai_batch(self, bid: str) -> tuple[int, Any]:
        with self._lock:
            batch = self.batches.get(bid)
            running = batch is not None and batch.polls_left > 0
            if running and batch is not None:
                batch.polls_left -= 1
        if batch is None:
            return 404, f"fakellm: no batch {bid}"
        return 200, self._openai_view(batch, running=running)

    def _openai_view(self, batch: _FakeBatch, *, running: bool = True) -> dict[str, Any]:
        n = len(batch.lines)
        ok = sum(1 for a in batch.answers if 200 <= a[1] < 300)
        failed = n - ok if batch.outcome != "failed" else 0
        status = {"completed": "completed", "expired": "expired", "failed": "failed"}[batch.outcome]
        t = int(batch.created_at)
        view: dict[str, Any] = {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "errors": None,
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": t,
            "in_progress_at": t,
            "expires_at": t + 86400,
            "completed_at": t + 1 if status == "completed" else None,
            "failed_at": t + 1 if status == "failed" else None,
            "expired_at": t + 86400 if status == "expired" else None,
            "request_counts": {"total": n, "completed": ok, "failed": failed},
            "metadata": batch.metadata,
        }
        if batch.outcome == "failed":
            view["errors"] = {
                "object": "list",
                "data": [{"code": "invalid_request", "message": "fakellm: the batch failed"}],
            }
        if running:
            done = n * (batch.polls - batch.polls_left) // max(1, batch.polls + 1)
            view.update(
                status="in_progress",
                output_file_id=None,
                error_file_id=None,
                completed_at=None,
                failed_at=None,
                expired_at=None,
                errors=None,
                request_counts={"total": n, "completed": done, "failed": 0},
            )
        return view

    # ---- Anthropic: message batches

    def _anthropic_create(self, req: RecordedRequest) -> tuple[int, Any]:
        body = req.body if isinstance(req.body, dict) else {}
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            return 400, "fakellm: requests must be a non-empty list"
        lines = [(str(r["custom_id"]), r["params"]) for r in requests]
        if len({cid for cid, _ in lines}) != len(lines):
            return 400, "fakellm: duplicate custom_id in the batch"
        prefix = req.path[: -len("/v1/messages/batches")]
        batch = self._new("anthropic", lines, endpoint=f"{prefix}/v1/messages/batches")
        self._answer_all(batch)
        return 200, self._anthropic_view(batch, req, running=True)

    def _anthropic_batch(self, bid: str, req: RecordedRequest) -> tuple[int, Any]:
        with self._lock:
            batch = self.batches.get(bid)
            running = batch is not None and batch.polls_left > 0
            if running and batch is not None:
                batch.polls_left -= 1
        if batch is None:
            return 404, f"fakellm: no batch {bid}"
        return 200, self._anthropic_view(batch, req, running=running)

    def _anthropic_view(
        self, batch: _FakeBatch, req: RecordedRequest, *, running: bool
    ) -> dict[str, Any]:
        n = len(batch.lines)
        ok = sum(1 for a in batch.answers if 200 <= a[1] < 300)
        bad = len(batch.answers) - ok
        expired = n - len(batch.answers)
        host = req.headers.get("host", f"{LOOPBACK}:{self._server.port}")
        view: dict[str, Any] = {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "in_progress" if running else "ended",
            "request_counts": {
                "processing": n if running else 0,
                "succeeded": 0 if running else ok,
                "errored": 0 if running else bad,
                "canceled": 0,
                "expired": 0 if running else expired,
            },
            "created_at": _iso(batch.created_at),
            "expires_at": _iso(batch.created_at + 86400),
            "ended_at": None if running else _iso(time.time()),
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": None if running else f"http://{host}{batch.endpoint}/{batch.id}/results",
        }
        return view

    def _anthropic_results(self, bid: str) -> tuple[int, Any]:
        with self._lock:
            batch = self.batches.get(bid)
        if batch is None or batch.polls_left > 0:
            return 404, f"fakellm: no results for {bid}"
        out = []
        answered = set()
        for cid, status, body in batch.answers:
            answered.add(cid)
            if 200 <= status < 300:
                result: dict[str, Any] = {"type": "succeeded", "message": body}
            else:
                error = (
                    body
                    if isinstance(body, dict)
                    else _error_body("anthropic", status, str(body), None, None)
                )
                result = {"type": "errored", "error": error}
            out.append({"custom_id": cid, "result": result})
        out += [
            {"custom_id": cid, "result": {"type": "expired"}}
            for cid, _ in batch.lines
            if cid not in answered
        ]
        return 200, b"".join(_dumps(o) + b"\n" for o in out)


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

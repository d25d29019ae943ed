"""The MCP servers of conditions, through the official ``mcp`` client.

:class:`McpHost` starts every server the run's conditions name — once per
process: under xdist each worker starts its own — over stdio
(``mcp.client.stdio.stdio_client``) or streamable HTTP
(``mcp.client.streamable_http``), opens a ``ClientSession``, initializes it
and lists its tools. All of it happens on the scheduler's event loop (the
sessions' anyio task groups must live on the loop that calls them), each
server inside one long-lived task that owns its contexts from start to
close, so the contexts are entered and left by the same task.

A server that cannot be started — a command that does not exist, a process
that dies, a server that does not answer ``initialize`` and ``tools/list``
within its ``startup_timeout`` — is a :class:`McpStartError` raised before
any item runs, naming the condition, the server, the ``file:line`` of its
declaration and the tail of its stderr. :meth:`McpHost.aclose` closes every
session (the stdio client closes stdin, then terminates the process), also
after Ctrl-C or SIGTERM; ``mcp`` is imported only when a condition has
servers.

Each condition gets a :class:`Toolbox`: its servers' tools in OpenAI's tools
shape, and one :class:`ToolCaller` per item — the ``call_tool(name,
arguments) -> str`` a Python subject receives and the provider subjects' tool
loop uses — which records each call (server, name, arguments, the result's
text cut to :data:`RESULT_RECORD_CHARS`, error flag, latency) for the item's
line in results.jsonl.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol, TextIO, TypedDict, TypeVar

from pydantic import BaseModel

from ._conditions import Condition, McpServerSpec, ServerKey
from ._vocab import ConfigError, JSONObject, JSONValue, SubjectError

__all__ = [
    "DEFAULT_MAX_STEPS",
    "McpCall",
    "McpHost",
    "McpStartError",
    "McpUnavailable",
    "ToolCaller",
    "ToolResult",
    "Toolbox",
]

#: Model calls one item's tool loop may make (``--mcp-max-steps``).
DEFAULT_MAX_STEPS = 8
#: Seconds one tool call may take before the model is told it timed out.
DEFAULT_CALL_TIMEOUT = 60.0
#: Characters of a tool's result kept in results.jsonl (the length is recorded too).
RESULT_RECORD_CHARS = 2000
#: Characters of a tool's result handed to the subject (a marker says what was cut).
RESULT_SUBJECT_CHARS = 100_000
_STDERR_TAIL = 600
_CLOSE_TIMEOUT = 15.0


class McpStartError(ConfigError):
    """An MCP server of a condition could not be started: a usage error, before any call."""


class McpUnavailable(SubjectError):
    """A server stopped answering during the run (its transport broke): the item is an ERROR."""


@dataclass(frozen=True)
class ToolResult:
    text: str
    is_error: bool


class _McpCallMade(TypedDict):
    server: str
    name: str
    arguments: dict[str, object]


class McpCall(_McpCallMade, total=False):
    """One call of an item's :class:`ToolCaller`, as its line in results.jsonl records it."""

    result: str  # cut to RESULT_RECORD_CHARS
    result_chars: int
    is_error: bool
    error: str  # the server did not answer
    latency_s: float
    step: int


class _Session(Protocol):
    """What is used of the SDK's ``ClientSession`` (mcp 1.x and 2.x alike); results are
    read through their wire form (:func:`_wire`)."""

    async def initialize(self) -> object: ...

    async def list_tools(self) -> object: ...

    async def call_tool(self, name: str, arguments: dict[str, object] | None = None) -> object: ...


class _Stream(Protocol):
    """The read stream of a transport, as :class:`_Watched` uses it (anyio's memory
    stream in mcp 1.x, the SDK's ``ReadStream`` in 2.x)."""

    async def receive(self) -> object: ...

    async def aclose(self) -> None: ...

    async def __anext__(self) -> object: ...


#: The SDK's session class, built from the transport's streams (their types differ
#: between the SDK's versions, so they are not checked here).
_SessionFactory = Callable[..., AbstractAsyncContextManager[_Session]]

T = TypeVar("T")


@dataclass
class RunningServer:
    """One started server: its session and what it said of itself."""

    spec: McpServerSpec
    session: _Session
    server: JSONObject
    protocol_version: str | None
    tools: list[JSONObject]
    stderr: TextIO | None = None
    stopped: str | None = None  # why it stopped mid-run, if it did
    #: set when the server's read stream ended: it went away (died, closed stdout)
    gone: asyncio.Event = field(default_factory=asyncio.Event)

    def reported(self) -> JSONObject:
        return {
            "server": self.server,
            "protocol_version": self.protocol_version,
            "tools": [t["name"] for t in self.tools],
        }


def _wire(model: object) -> JSONObject:
    """An ``mcp`` pydantic object as its JSON wire form (camelCase in mcp 1.x and 2.x alike)."""
    if isinstance(model, Mapping):
        return dict(model)
    if not isinstance(model, BaseModel):
        raise TypeError(f"unexpected MCP result: {type(model).__name__}")
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def _tail(stream: TextIO | None) -> str:
    if stream is None:
        return ""
    try:
        stream.flush()
        stream.seek(0)
        text = stream.read()
    except (OSError, ValueError):
        return ""
    text = text.strip()
    return text[-_STDERR_TAIL:]


def _describe(exc: BaseException) -> str:
    """A short account of *exc*, looking inside exception groups (anyio task groups)."""
    inner = getattr(exc, "exceptions", None)
    if inner:
        return "; ".join(_describe(e) for e in inner[:3])
    if isinstance(exc, FileNotFoundError):
        return f"command not found ({exc.filename or exc})"
    if isinstance(exc, PermissionError):
        return f"command not executable ({exc.filename or exc})"
    if isinstance(exc, (ProcessLookupError, ConnectionError)):  # 1.x: killing a dead process
        return "the server exited (or closed the connection)"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {text[0][:200]}" if text else "")


def _has(exc: BaseException, kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    """Is *exc*, or any exception inside it (anyio's exception groups), a *kind*?"""
    if isinstance(exc, kind):
        return True
    return any(_has(e, kind) for e in getattr(exc, "exceptions", None) or ())


def tool_text(result: Mapping[str, JSONValue]) -> str:
    """The text of a ``tools/call`` result (wire form): its text blocks, one per line;
    other blocks by a short marker; structured content as JSON when there is no text."""
    parts: list[str] = []
    content = result.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource":
            res = block.get("resource") or {}
            if isinstance(res, Mapping) and "text" in res:
                parts.append(str(res["text"]))
            else:
                parts.append(f"[resource {res.get('uri', '') if isinstance(res, Mapping) else ''}]")
        elif kind == "resource_link":
            parts.append(f"[resource link {block.get('uri', '')}]")
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.get('mimeType', '')}]".replace(" ]", "]"))
        else:
            parts.append(f"[{kind} content]")
    if not parts and result.get("structuredContent") is not None:
        return json.dumps(result["structuredContent"], ensure_ascii=False, sort_keys=True)
    return "\n".join(parts)


def openai_tool(tool: Mapping[str, JSONValue]) -> JSONObject:
    """An MCP tool (wire form) in OpenAI's tools shape."""
    fn: JSONObject = {"name": str(tool["name"])}
    if tool.get("description"):
        fn["description"] = str(tool["description"])
    schema = tool.get("inputSchema")
    fn["parameters"] = (
        dict(schema) if isinstance(schema, Mapping) else {"type": "object", "properties": {}}
    )
    return {"type": "function", "function": fn}


class McpHost:
    """The MCP servers of one process's conditions, on the scheduler's event loop."""

    def __init__(
        self,
        conditions: Sequence[Condition],
        *,
        max_steps: int = DEFAULT_MAX_STEPS,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self.conditions = [c for c in conditions if c.mcp_servers]
        self.max_steps = max_steps
        self.call_timeout = call_timeout
        self.specs: dict[ServerKey, McpServerSpec] = {}
        self._owners: dict[ServerKey, list[str]] = {}
        for cond in self.conditions:
            for spec in cond.mcp_servers:
                self.specs.setdefault(spec.key, spec)
                self._owners.setdefault(spec.key, []).append(cond.name)
        self.running: dict[ServerKey, RunningServer] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ start

    async def start(self) -> None:
        """Start every server and list its tools; then give each condition its toolbox.

        Raises :class:`McpStartError` (after closing whatever did start) when any
        server fails, naming every one that did.
        """
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        readies: dict[ServerKey, asyncio.Future[RunningServer]] = {}
        for key, spec in self.specs.items():
            ready: asyncio.Future[RunningServer] = self._loop.create_future()
            readies[key] = ready
            self._tasks.append(
                self._loop.create_task(self._serve(spec, ready), name=f"agenteval-mcp-{spec.name}")
            )
        problems: list[str] = []
        for key, ready in readies.items():
            spec = self.specs[key]
            try:
                # the server's own deadline fires inside its task; this one is a backstop
                self.running[key] = await asyncio.wait_for(
                    asyncio.shield(ready), spec.startup_timeout + 15
                )
            except (asyncio.TimeoutError, McpStartError) as exc:
                problems.append(self._problem(spec, exc))
        if not problems:
            try:
                for cond in self.conditions:
                    cond.attach(
                        Toolbox(
                            cond.name,
                            [self.running[s.key] for s in cond.mcp_servers],
                            max_steps=self.max_steps,
                            call_timeout=self.call_timeout,
                            loop=self._loop,
                        )
                    )
            except McpStartError as exc:
                problems.append(str(exc))
        if problems:
            await self.aclose()
            raise McpStartError("\n".join(problems))

    def _problem(self, spec: McpServerSpec, exc: BaseException) -> str:
        owners = ", ".join(repr(n) for n in self._owners.get(spec.key, []))
        what = f"{spec.command} {' '.join(spec.args)}".strip() if spec.command else spec.url
        why = (
            f"did not start within {spec.startup_timeout:g}s"
            if isinstance(exc, asyncio.TimeoutError)
            else str(exc)
        )
        return (
            f"{spec.where}: MCP server {spec.name!r} of condition {owners} ({spec.transport}: "
            f"{what}) failed to start: {why}"
        )

    async def _serve(self, spec: McpServerSpec, ready: asyncio.Future[RunningServer]) -> None:
        """Own one server for the whole run: open, initialize, list tools, wait, close."""
        stderr: TextIO | None = None
        running: RunningServer | None = None
        try:
            # the server's stderr: its tail explains a failure; closed with the server
            stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
            async with contextlib.AsyncExitStack() as stack:
                from mcp import ClientSession

                read, write = await _open_transport(stack, spec, stderr)
                gone = asyncio.Event()
                new_session: _SessionFactory = ClientSession
                session = await stack.enter_async_context(
                    new_session(_Watched(read, gone.set), write)
                )

                async def handshake() -> tuple[JSONObject, list[JSONObject]]:
                    return _wire(await session.initialize()), await _list_tools(session)

                # no context is entered inside: it may run in a task of its own, raced
                # against the deadline and against the server going away
                init, tools = await _race(handshake(), gone, spec.startup_timeout)
                info = init.get("serverInfo")
                if not isinstance(info, dict):
                    info = {}
                version = init.get("protocolVersion")
                running = RunningServer(
                    spec,
                    session,
                    {"name": info.get("name"), "version": info.get("version")},
                    version if isinstance(version, str) else None,
                    tools,
                    stderr,
                    gone=gone,
                )
                ready.set_result(running)
                assert self._stop is not None
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                if _has(exc, (TimeoutError, asyncio.TimeoutError)):
                    why = f"no answer to initialize/tools/list within {spec.startup_timeout:g}s"
                else:
                    why = _describe(exc)
                tail = _tail(stderr)
                ready.set_exception(
                    McpStartError(why + (f"; its stderr ends: {tail}" if tail else ""))
                )
            elif running is not None and not (self._stop and self._stop.is_set()):
                running.stopped = _describe(exc)
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
        finally:
            if running is not None and running.stopped is None and not self._stopping():
                running.stopped = "the connection closed"
            if stderr is not None and running is None:
                stderr.close()

    def _stopping(self) -> bool:
        return bool(self._stop and self._stop.is_set())

    # ------------------------------------------------------------------ close

    async def aclose(self) -> None:
        """Close every session (stdio: stdin closed, then the process terminated); bounded."""
        if self._stop is not None:
            self._stop.set()
        tasks = [t for t in self._tasks if not t.done()]
        if tasks:
            _done, pending = await asyncio.wait(tasks, timeout=_CLOSE_TIMEOUT)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        for task in self._tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: a server's failure is already reported
        for server in self.running.values():
            if server.stderr is not None:
                with contextlib.suppress(OSError, ValueError):
                    server.stderr.close()
        self._tasks.clear()

    # ------------------------------------------------------------------ what the manifest records

    def reported(self, condition: str) -> dict[str, JSONObject]:
        """Server name -> name/version/protocol/tools, for *condition*."""
        out = {}
        for cond in self.conditions:
            if cond.name == condition:
                for spec in cond.mcp_servers:
                    server = self.running.get(spec.key)
                    if server is not None:
                        out[spec.name] = server.reported()
        return out


async def _open_transport(
    stack: contextlib.AsyncExitStack, spec: McpServerSpec, stderr: TextIO
) -> tuple[_Stream, object]:
    """The (read, write) streams of *spec*'s transport, entered on *stack*."""
    if spec.command is not None:
        from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

        # the SDK's minimal set (PATH, HOME, ...; never the judge's API key) plus the file's
        env = {**get_default_environment(), **dict(spec.env)}
        if shutil.which(spec.command, path=env.get("PATH")) is None:
            # found here, not by the spawn: a clear message, and no half-made transport
            raise FileNotFoundError(2, "command not found", spec.command)
        params = StdioServerParameters(
            command=spec.command, args=list(spec.args), env=env, cwd=spec.cwd
        )
        read, write = await stack.enter_async_context(stdio_client(params, errlog=stderr))
        return read, write

    import mcp.client.streamable_http as http

    headers = dict(spec.headers) or None
    if hasattr(http, "streamable_http_client"):
        client = None
        if headers:
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = await stack.enter_async_context(create_mcp_http_client(headers=headers))
        streams = await stack.enter_async_context(
            http.streamable_http_client(str(spec.url), http_client=client)
        )
        return streams[0], streams[1]
    # mcp 1.x before streamable_http_client: (read, write, get_session_id)
    legacy: Callable[..., AbstractAsyncContextManager[tuple[_Stream, object, object]]]
    legacy = getattr(http, "streamablehttp_client")  # noqa: B009 - not in mcp 2.x
    opened = await stack.enter_async_context(legacy(str(spec.url), headers=headers))
    return opened[0], opened[1]


async def _list_tools(session: _Session) -> list[JSONObject]:
    """Every tool of the server (following ``nextCursor``, at most 100 pages)."""
    tools: list[JSONObject] = []
    cursor: str | None = None
    # the page's arguments differ between the SDK's versions
    next_page: Callable[..., Awaitable[object]] = session.list_tools
    for _ in range(100):
        if cursor is None:
            page = _wire(await session.list_tools())
        else:
            import mcp.types as types

            try:  # mcp >= 1.13 takes the request's params; older versions the cursor alone
                page = _wire(await next_page(params=types.PaginatedRequestParams(cursor=cursor)))
            except TypeError:
                page = _wire(await next_page(cursor=cursor))
        listed = page.get("tools")
        tools += [
            t
            for t in (listed if isinstance(listed, list) else ())
            if isinstance(t, dict) and t.get("name")
        ]
        following = page.get("nextCursor")
        cursor = following if isinstance(following, str) else None
        if not cursor:
            break
    return tools


#: The SDK's JSON-RPC error code for a transport that closed (mcp 1.x and 2.x).
CONNECTION_CLOSED = -32000


def _error_code(exc: BaseException) -> int | None:
    """The JSON-RPC code of an SDK error (``exc.error.code``), if it has one."""
    code = getattr(getattr(exc, "error", None), "code", None)
    return code if isinstance(code, int) else None


def _protocol_error_types() -> tuple[type[BaseException], ...]:
    """The SDK's JSON-RPC error (``McpError`` in mcp 1.x, ``MCPError`` in 2.x)."""
    try:
        import mcp.shared.exceptions as exceptions
    except ImportError:  # pragma: no cover - the SDK always has it
        return ()
    found = []
    for name in ("MCPError", "McpError"):
        cls = getattr(exceptions, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


async def _race(coro: Awaitable[T], gone: asyncio.Event, timeout: float) -> T:
    """*coro*'s result; ``TimeoutError`` after *timeout*, ``ConnectionError`` when *gone*
    is set first (the server exited: mcp 1.x would wait for the deadline)."""
    work = asyncio.ensure_future(coro)
    ended = asyncio.ensure_future(gone.wait())
    try:
        done, _ = await asyncio.wait(
            {work, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        for task in (work, ended):
            if not task.done():
                task.cancel()
    if work in done:
        return work.result()
    if ended in done:
        raise ConnectionError("the server closed the connection (it exited?)")
    raise TimeoutError


class _Watched:
    """The transport's read stream, calling *on_end* when it ends: the server went away.

    A transparent stand-in for the SDK's stream (anything else is delegated), so
    that a tool call can fail at once instead of waiting on a dead server.
    """

    def __init__(self, stream: _Stream, on_end: Callable[[], object]) -> None:
        self._stream = stream
        self._on_end = on_end

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> object:
        try:
            return await self._stream.__anext__()
        except BaseException:  # the end of the stream, a closed one, or the shutdown
            self._on_end()
            raise

    async def receive(self) -> object:
        try:
            return await self._stream.receive()
        except BaseException:
            self._on_end()
            raise

    async def __aenter__(self) -> _Watched:
        enter = getattr(self._stream, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        leave = getattr(self._stream, "__aexit__", None)
        if leave is not None:
            suppress = await leave(*exc)
            return None if suppress is None else bool(suppress)
        await self._stream.aclose()
        return None


class Toolbox:
    """The tools one condition offers: its servers' tools, and who serves each."""

    def __init__(
        self,
        condition: str,
        servers: Sequence[RunningServer],
        *,
        max_steps: int,
        call_timeout: float,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.condition = condition
        self.max_steps = max_steps
        self.call_timeout = call_timeout
        self.loop = loop
        self.route: dict[str, RunningServer] = {}
        self.tools: list[JSONObject] = []
        for server in servers:
            for tool in server.tools:
                name = str(tool["name"])
                other = self.route.get(name)
                if other is not None:
                    raise McpStartError(
                        f"{server.spec.where}: condition {condition!r}: tool {name!r} is offered "
                        f"by MCP servers {other.spec.name!r} and {server.spec.name!r}; "
                        "a model could not tell them apart (give one condition one of them)"
                    )
                self.route[name] = server
                self.tools.append(openai_tool(tool))

    def merge_tools(
        self, scenario_tools: Sequence[Mapping[str, object]]
    ) -> list[Mapping[str, object]]:
        """The scenario's declared tools, then the servers' (a served name replaces a declared one)."""
        kept: list[Mapping[str, object]] = [
            dict(t) for t in scenario_tools if _tool_name(t) not in self.route
        ]
        return [*kept, *self.tools]

    def caller(self) -> ToolCaller:
        return ToolCaller(self)

    async def invoke(self, name: str, arguments: dict[str, object]) -> ToolResult:
        """Call *name* on the server that serves it (an error result is still a result)."""
        server = self.route[name]
        if server.stopped:
            raise McpUnavailable(f"MCP server {server.spec.name!r} stopped: {server.stopped}")

        def closed() -> McpUnavailable:
            tail = _tail(server.stderr)[-200:]
            return McpUnavailable(
                f"MCP server {server.spec.name!r} closed the connection during tools/call "
                f"{name!r}" + (f"; its stderr ends: {tail}" if tail else "")
            )

        if server.gone.is_set():
            raise closed()
        # raced against the connection's end: an SDK (mcp 1.x) may leave a request sent to
        # a server that died waiting for ever
        call = asyncio.ensure_future(server.session.call_tool(name, arguments))
        gone = asyncio.ensure_future(server.gone.wait())
        try:
            done, _ = await asyncio.wait(
                {call, gone}, timeout=self.call_timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for task in (call, gone):
                if not task.done():
                    task.cancel()
        if call not in done:
            if gone in done:
                raise closed()
            return ToolResult(f"error: tool call timed out after {self.call_timeout:g}s", True)
        try:
            raw = call.result()
        except _protocol_error_types() as exc:
            if _error_code(exc) != CONNECTION_CLOSED:  # the server refused the call
                return ToolResult(f"error: {str(exc)[:500]}", True)
            raise closed() from None
        except Exception as exc:  # the transport broke: no grade can be had for this item
            raise McpUnavailable(
                f"MCP server {server.spec.name!r} did not answer tools/call {name!r}: "
                + _describe(exc)
            ) from None
        result = _wire(raw)
        return ToolResult(tool_text(result), bool(result.get("isError")))


def _tool_name(tool: Mapping[str, object]) -> str | None:
    fn = tool.get("function")
    if isinstance(fn, Mapping):
        return str(fn.get("name"))
    name = tool.get("name")
    return None if name is None else str(name)


@dataclass
class ToolCaller:
    """``await call_tool(name, arguments) -> str`` for one item, recording every call.

    ``names``: the tools it serves; ``max_steps``: the run's step limit (the
    provider subjects' loop obeys it; a Python subject may too).
    ``call_tool.blocking(name, arguments)`` is the same for a sync subject
    (which runs in a worker thread).
    """

    toolbox: Toolbox
    calls: list[McpCall] = field(default_factory=list)
    step: int | None = None

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.toolbox.route)

    @property
    def max_steps(self) -> int:
        return self.toolbox.max_steps

    async def call(
        self, name: str, arguments: Mapping[str, object] | str | None = None
    ) -> ToolResult:
        """Call tool *name*; the result's text and whether the server flagged it an error."""
        if name not in self.toolbox.route:
            known = ", ".join(sorted(self.toolbox.route)) or "none"
            raise LookupError(
                f"no MCP tool {name!r} in condition {self.toolbox.condition!r} (tools: {known})"
            )
        given: object = arguments
        if isinstance(given, str):
            given = json.loads(given) if given.strip() else {}
        if given is not None and not isinstance(given, Mapping):
            raise TypeError(f"call_tool arguments: a mapping, not {type(given).__name__}")
        args: dict[str, object] = dict(given or {})
        start = time.perf_counter()
        entry: McpCall = {
            "server": self.toolbox.route[name].spec.name,
            "name": name,
            "arguments": args,
        }
        try:
            result = await self.toolbox.invoke(name, args)
        except McpUnavailable as exc:
            entry["error"] = str(exc)
            entry["latency_s"] = round(time.perf_counter() - start, 6)
            self.calls.append(self._stamped(entry))
            raise
        text = result.text
        entry["result"] = text[:RESULT_RECORD_CHARS]
        entry["result_chars"] = len(text)
        entry["is_error"] = result.is_error
        entry["latency_s"] = round(time.perf_counter() - start, 6)
        self.calls.append(self._stamped(entry))
        if len(text) > RESULT_SUBJECT_CHARS:
            cut = len(text) - RESULT_SUBJECT_CHARS
            text = (
                text[:RESULT_SUBJECT_CHARS] + f"\n[… {cut} more characters cut by pytest-agenteval]"
            )
        return ToolResult(text, result.is_error)

    def _stamped(self, entry: McpCall) -> McpCall:
        if self.step is not None:
            entry["step"] = self.step
        return entry

    async def __call__(self, name: str, arguments: Mapping[str, object] | str | None = None) -> str:
        return (await self.call(name, arguments)).text

    def blocking(self, name: str, arguments: Mapping[str, object] | str | None = None) -> str:
        """:meth:`__call__` from a sync subject's thread.

        The event loop runs on the main thread while an item waits for its grade; called
        from that thread, this would wait for a loop nothing runs, so it refuses.
        """
        loop = self.toolbox.loop
        if loop is None:
            raise RuntimeError("call_tool.blocking: the MCP servers are not running")
        if threading.current_thread() is threading.main_thread():
            raise RuntimeError(
                "call_tool.blocking is for a sync subject, which pytest-agenteval runs on a "
                "thread of its own; from async code, await call_tool(name, arguments)"
            )
        return asyncio.run_coroutine_threadsafe(self(name, arguments), loop).result()

"""Subjects: the agent under test, behind one calling convention.

A subject is a callable taking the prompt and returning text or a
:class:`Response` — sync or async. It may also accept, by name, any of the
keyword arguments in :data:`CONTEXT_ARGS` (``tools``, ``messages``,
``system``, ``scenario``, ``condition``, ``call_tool``); only those it names
are passed, as pytest does with fixtures. Sync subjects run in a worker
thread so that the event loop keeps other calls in flight.

Under a condition with MCP servers, ``tools`` also holds the servers' tools
(OpenAI's tools shape) and ``call_tool`` is an async ``call_tool(name,
arguments) -> str`` returning the tool's text (a sync subject uses
``call_tool.blocking(name, arguments)``); each call is recorded with the item.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import inspect
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._checks import Answer, ToolCall
from .._tracebacks import describe_exception
from .._vocab import SubjectError

__all__ = ["Response", "Subject", "SubjectError", "call_subject", "load_callable"]

CONTEXT_ARGS = ("tools", "messages", "system", "scenario", "condition", "call_tool")


class Subject(Protocol):
    """The agent under test: called with the prompt, returns its answer.

    Sync or async; returns text, a :class:`Response`, or a mapping with
    ``text``. It may accept, by name, any of :data:`CONTEXT_ARGS` (``tools``,
    ``messages``, ``system``, ``scenario``, ``condition``, ``call_tool``); only
    those it names are passed (``call_tool`` only under a condition with MCP
    servers).
    """

    def __call__(self, prompt: str, /, **context: Any) -> Any: ...


@dataclass(frozen=True)
class Response:
    """A subject's answer, with what it cost and any tool calls it made."""

    text: str
    tool_calls: Sequence[ToolCall | Mapping[str, Any]] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def answer(self) -> Answer:
        calls = tuple(
            c if isinstance(c, ToolCall) else ToolCall(str(c["name"]), dict(c.get("arguments", {})))
            for c in self.tool_calls
        )
        return Answer(self.text, calls)


@dataclass(frozen=True)
class SubjectCall:
    response: Response
    latency_s: float


def _accepted(fn: Callable[..., Any]) -> set[str] | None:
    """Context keywords *fn* accepts (None: it takes **kwargs, so all)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params if p.name in CONTEXT_ARGS}


def _is_async(fn: Callable[..., Any]) -> bool:
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable instances
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


async def call_subject(
    subject: Callable[..., Any], prompt: str, context: Mapping[str, Any]
) -> SubjectCall:
    """Call *subject* and normalise what it returns; failures become SubjectError."""
    accepted = _accepted(subject)
    kwargs = {k: v for k, v in context.items() if accepted is None or k in accepted}
    start = time.perf_counter()
    try:
        if _is_async(subject):
            value = await subject(prompt, **kwargs)
        else:
            value = await _in_daemon_thread(subject, prompt, **kwargs)
            if inspect.isawaitable(value):
                value = await value
    except (asyncio.CancelledError, SubjectError):
        raise
    except (Exception, SystemExit) as exc:  # an agent calling sys.exit() errs one item only
        raise SubjectError("subject raised " + describe_exception(exc, Path.cwd())) from exc
    latency = time.perf_counter() - start
    response = _normalise(value)
    try:
        response.answer()
        dict(response.usage)
    except Exception as exc:  # tool_calls/usage of the wrong shape: this item errs, not the run
        raise SubjectError(
            f"subject returned a malformed Response ({type(exc).__name__}: {exc}); tool_calls "
            "must be ToolCall objects or mappings with 'name' and 'arguments', usage a mapping"
        ) from exc
    return SubjectCall(response, latency)


def _in_daemon_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """Run a sync subject in a daemon thread.

    Unlike ``asyncio.to_thread`` (whose pool is joined at exit), a subject that
    hangs cannot keep the process alive after -x, Ctrl-C or SIGTERM.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def target() -> None:
        try:
            result = ctx.run(fn, *args, **kwargs)
        except BaseException as exc:  # delivered to the awaiting task
            outcome: tuple[bool, Any] = (False, exc)
        else:
            outcome = (True, result)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name="agenteval-subject", daemon=True).start()
    return future


def _normalise(value: Any) -> Response:
    if isinstance(value, Response):
        if not isinstance(value.text, str):
            raise SubjectError(f"subject Response.text is {type(value.text).__name__}, not str")
        return value
    if isinstance(value, str):
        return Response(value)
    if isinstance(value, Mapping) and isinstance(value.get("text"), str):
        return Response(
            value["text"], tuple(value.get("tool_calls", ())), dict(value.get("usage", {}))
        )
    text = getattr(value, "text", None) or getattr(value, "content", None)
    if isinstance(text, str):
        return Response(text)
    raise SubjectError(
        f"subject returned {type(value).__name__}; expected str, a Response, "
        "or a mapping with 'text'"
    )


def load_callable(spec: str, search_path: Path | None = None) -> Callable[..., Any]:
    """Import ``module:attr`` (``attr`` may be dotted); errors say what to fix."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"subject {spec!r}: expected module:callable")
    added = False
    if search_path is not None and str(search_path) not in sys.path:
        sys.path.insert(0, str(search_path))
        added = True
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"subject {spec!r}: cannot import {module_name!r} ({exc})") from None
    finally:
        if added:
            sys.path.remove(str(search_path))
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"subject {spec!r}: {module_name} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"subject {spec!r} is not callable")
    return obj


def describe(subject: Callable[..., Any]) -> str:
    name = getattr(subject, "name", None) or getattr(subject, "__name__", None)
    return str(name or type(subject).__name__)

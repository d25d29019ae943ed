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
import collections
import contextlib
import contextvars
import functools
import importlib
import inspect
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .._checks import Answer, ToolCall
from .._tracebacks import describe_exception, shown_path
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

    def __call__(self, prompt: str, /, **context: object) -> object: ...


@dataclass(frozen=True)
class Response:
    """A subject's answer, with what it cost and any tool calls it made."""

    text: str
    tool_calls: Sequence[ToolCall | Mapping[str, object]] = ()
    usage: Mapping[str, int] = field(default_factory=dict)
    meta: Mapping[str, object] = field(default_factory=dict)

    def answer(self) -> Answer:
        return Answer(self.text, tuple(_tool_call(c) for c in self.tool_calls))


def _tool_call(call: ToolCall | Mapping[str, object]) -> ToolCall:
    if isinstance(call, ToolCall):
        return call
    arguments = call.get("arguments", {})
    if not isinstance(arguments, Mapping):
        raise TypeError(f"tool call arguments are {type(arguments).__name__}, not a mapping")
    return ToolCall(str(call["name"]), dict(arguments))


@dataclass(frozen=True)
class SubjectCall:
    response: Response
    latency_s: float
    #: What the scenario gave but the subject's signature does not take (``system``,
    #: ``messages``, ``tools``): the answer was made without it.
    withheld: tuple[str, ...] = ()


def _accepted(fn: Callable[..., object]) -> frozenset[str] | None:
    """Context keywords *fn* accepts (None: it takes **kwargs, so all); once per subject."""
    try:
        return _accepted_once(fn)
    except TypeError:  # an unhashable callable: read its signature each time
        return _signature_keywords(fn)


def _signature_keywords(fn: Callable[..., object]) -> frozenset[str] | None:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.name in CONTEXT_ARGS)


_accepted_once = functools.lru_cache(maxsize=256)(_signature_keywords)


def is_async_subject(fn: object) -> bool:
    """Is *fn* (a function, or a callable instance) a coroutine function?"""
    call = getattr(fn, "__call__", None)  # noqa: B004 - callable instances
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


async def call_subject(
    subject: Callable[..., object], prompt: str, context: Mapping[str, object]
) -> SubjectCall:
    """Call *subject* and normalise what it returns; failures become SubjectError."""
    accepted = _accepted(subject)
    kwargs = {k: v for k, v in context.items() if accepted is None or k in accepted}
    start = time.perf_counter()
    try:
        if is_async_subject(subject):
            value = subject(prompt, **kwargs)
            if inspect.isawaitable(value):  # the coroutine of a coroutine function
                value = await value
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
    return SubjectCall(response, latency, withheld_context(context, accepted))


def _earlier_turns(value: object) -> bool:
    return isinstance(value, Sequence) and len(value) > 1  # the prompt is the last one


#: Context that changes what a scenario measures, and when a scenario gives it.
_MEASURED: dict[str, Callable[[object], bool]] = {
    "system": bool,
    "messages": _earlier_turns,
    "tools": bool,
}


def withheld_context(
    context: Mapping[str, object], accepted: frozenset[str] | None
) -> tuple[str, ...]:
    """The names of :data:`_MEASURED` context the scenario gives and the subject (its
    signature: *accepted*, None for ``**kwargs``) does not take."""
    if accepted is None:
        return ()
    return tuple(
        name
        for name, given in _MEASURED.items()
        if name not in accepted and given(context.get(name))
    )


def _in_daemon_thread(
    fn: Callable[..., object], *args: object, **kwargs: object
) -> asyncio.Future[object]:
    """Run a sync subject on one of :data:`_WORKERS`' daemon threads.

    Unlike ``asyncio.to_thread`` (whose pool is joined at exit), a subject that
    hangs cannot keep the process alive after -x, Ctrl-C or SIGTERM.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[object] = loop.create_future()
    ctx = contextvars.copy_context()

    def settle(result: object, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def job() -> Callable[[], None]:
        result: object = None
        error: BaseException | None = None
        try:
            result = ctx.run(fn, *args, **kwargs)
        except BaseException as exc:  # delivered to the awaiting task
            error = exc

        def deliver() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                loop.call_soon_threadsafe(settle, result, error)

        return deliver

    _WORKERS.submit(job)
    return future


class _DaemonWorkers:
    """Daemon threads reused across calls, started only when none is idle.

    A thread per call costs a thread start for each of 10,000 items; these stay
    for a while after their last job, so a run keeps about ``concurrency`` of
    them. A subject that never returns holds one thread and no more; being
    daemons, none of them keeps the process alive.

    Idle threads are counted by tokens in a deque, whose ``append`` and ``pop`` are
    atomic: no lock that the main thread, submitting, would wait on while a subject
    thread holding it waits for the interpreter lock (that hand-off cost about half a
    millisecond per call here).
    """

    def __init__(self, idle_s: float = 10.0) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], Callable[[], None]]] = queue.SimpleQueue()
        #: a token per thread waiting for a job that no submit has claimed yet
        self._idle: collections.deque[None] = collections.deque()
        self._idle_s = idle_s

    def submit(self, job: Callable[[], Callable[[], None]]) -> None:
        """Run *job* on an idle thread (or a new one); what it returns runs after the
        thread counts itself idle again, so the caller's next call finds it waiting."""
        try:
            self._idle.pop()  # that waiting thread takes this job
            start = False
        except IndexError:
            start = True
        self._jobs.put(job)
        if start:
            threading.Thread(target=self._work, name="agenteval-subject", daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_s)
            except queue.Empty:
                try:
                    self._idle.pop()  # unclaimed: this thread may go
                    return
                except IndexError:
                    continue  # a submit counted on this thread: its job is on the way
            deliver = job()
            self._idle.append(None)
            deliver()


_WORKERS = _DaemonWorkers()


def _normalise(value: object) -> Response:
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


def file_path_mistake(spec: str) -> str | None:
    """What to write instead, when *spec* (``./my_agent.py``, ``pkg/agent.py:answer``) names a
    file where a module belongs; None otherwise."""
    module_name = spec.partition(":")[0]
    if (
        module_name.startswith(".")
        or "/" in module_name
        or "\\" in module_name
        or module_name.endswith(".py")
    ):
        return (
            f"subject {spec!r}: expected a module name, not a file path (for ./my_agent.py "
            "write my_agent:answer, run from its folder; for pkg/agent.py, pkg.agent:answer)"
        )
    return None


def _parts(spec: str) -> tuple[str, str]:
    """``module:attr`` -> (module, attr), or a ValueError saying what is wrong with it."""
    module_name, sep, attr = spec.partition(":")
    mistake = file_path_mistake(spec)
    if mistake is not None:
        raise ValueError(mistake)
    if not sep or not module_name or not attr:
        raise ValueError(f"subject {spec!r}: expected module:callable (such as my_agent:answer)")
    return module_name, attr


@contextlib.contextmanager
def _searching(search_paths: Sequence[Path]) -> Iterator[None]:
    """*search_paths* in front of ``sys.path`` for the duration (those not on it yet)."""
    added = [str(p) for p in dict.fromkeys(search_paths) if str(p) not in sys.path]
    sys.path[:0] = added
    try:
        yield
    finally:
        for path in added:
            with contextlib.suppress(ValueError):
                sys.path.remove(path)


def _syntax_error(spec: str, module_name: str, exc: SyntaxError) -> ValueError:
    where = f"{shown_path(exc.filename, Path.cwd())}:{exc.lineno}" if exc.filename else module_name
    return ValueError(f"subject {spec!r}: syntax error in {where}: {exc.msg}")


def find_subject_module(spec: str, *search_paths: Path) -> None:
    """A ValueError unless ``module:attr``'s module can be found where
    :func:`load_callable` looks (its parent packages are imported, the module is not)."""
    import importlib.util

    module_name, _ = _parts(spec)
    with _searching(search_paths):
        try:
            found = importlib.util.find_spec(module_name)
        except Exception as exc:  # a parent package missing, or raising as it is imported
            raise ValueError(f"subject {spec!r}: cannot import {module_name!r} ({exc})") from None
    if found is None:
        raise ValueError(
            f"subject {spec!r}: cannot import {module_name!r} (No module named {module_name!r})"
        )
    origin = found.origin
    if origin and origin.endswith(".py"):  # its syntax too, compiled without running it
        try:
            compile(Path(origin).read_bytes(), origin, "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise _syntax_error(spec, module_name, exc) from None
        except (OSError, ValueError):
            pass  # unreadable here: the import in each worker says why


def load_callable(spec: str, *search_paths: Path) -> Callable[..., object]:
    """Import ``module:attr`` (``attr`` may be dotted); errors say what to fix.

    The module is looked up on ``sys.path`` with *search_paths* (where pytest was
    started, then its rootdir) in front. Whatever importing it raises (a syntax error,
    an exception at import time) becomes a ``ValueError`` that names the file and line.
    """
    module_name, attr = _parts(spec)
    with _searching(search_paths):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ValueError(f"subject {spec!r}: cannot import {module_name!r} ({exc})") from None
        except SyntaxError as exc:
            raise _syntax_error(spec, module_name, exc) from None
        except Exception as exc:  # the module raised while it was imported
            raise ValueError(
                f"subject {spec!r}: importing {module_name!r} raised "
                + describe_exception(exc, Path.cwd())
            ) from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"subject {spec!r}: {module_name} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ValueError(f"subject {spec!r} is not callable")
    try:
        inspect.signature(obj).bind_partial("prompt")
    except TypeError as exc:  # one usage error, not the same error from every item
        raise ValueError(
            f"subject {spec!r} cannot be called with a prompt ({exc}): a subject is called "
            "as subject(prompt), and gets system, messages or tools as keywords it declares"
        ) from None
    except ValueError:  # no signature to read (a builtin): its first call says
        pass
    return obj


def describe(subject: object) -> str:
    name = getattr(subject, "name", None) or getattr(subject, "__name__", None)
    return str(name or type(subject).__name__)

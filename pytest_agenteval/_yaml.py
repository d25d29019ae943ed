"""Safe, bounded YAML loading that remembers where every value came from.

Benchmark files are input from people and from other repositories, so they
are loaded with PyYAML's *safe* constructors only, plus refusals the stock
``yaml.safe_load`` does not make:

* duplicate keys in a mapping (PyYAML silently keeps the last one);
* YAML 1.1 surprises: ``yes``/``no``/``on``/``off`` stay strings (only
  ``true``/``false`` are booleans) and ``012`` is refused as an ambiguous
  octal instead of becoming 10;
* resource abuse, each refused with ``file:line`` where it passes the limit:
  files over :data:`MAX_BYTES` (checked on the open file before reading),
  anything but a regular file (a FIFO, a device), more than
  :data:`MAX_ALIASES` aliases, a document whose *expanded* size — every alias
  counted with the whole subtree it stands for, each time it is used — is over
  :data:`MAX_NODES` values or :data:`MAX_CHARS` characters (the "billion
  laughs" shape, even with few aliases), recursive aliases, and nesting deeper
  than :data:`MAX_DEPTH`.

Every mapping and sequence comes back as :class:`LineDict` / :class:`LineList`,
which record the 1-based line of each key or element, so that a validation
error found later (by pydantic) can name ``file:line``.

Documents are read from libyaml's events when PyYAML comes with libyaml (its
wheels do), else by PyYAML's own Python parser, with the same values, lines,
limits and refusals; only the wording of a syntax error differs between the
two, and libyaml accepts a few uses of tabs that the Python parser refuses.

Error messages never repeat a file's content: a file that is not a benchmark
at all (a secret behind a symlink, say) must not end up in a CI log. They give
the place, the key and, for a value of the wrong type, its type
(:func:`describe_value`).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from sys import intern
from typing import Any, Protocol

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.error import Mark
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    CollectionStartEvent,
    Event,
    MappingStartEvent,
    ScalarEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import Reader

from ._text import clip
from ._vocab import AgentevalError, SpecError

# Per file, sized so that one article can hold 50,000 short scenarios (an id, a
# weight, an input and three criteria, one with a check: some 200 bytes and 19
# values each, as scripts/bench_collection.py writes them) with room to spare,
# while a hostile file still stops at a few hundred MB of memory.
MAX_BYTES = 32 * 1024 * 1024
MAX_ALIASES = 64
#: Values (scalars, mappings, sequences) in a document once aliases are expanded.
MAX_NODES = 2_000_000
#: Characters of scalar text in a document once aliases are expanded.
MAX_CHARS = 4 * MAX_BYTES
#: Nesting depth of mappings and sequences (YAML here; JSON in golden files).
MAX_DEPTH = 64

_OCTALISH = re.compile(r"^[-+]?0[0-9_]+$")
# A quoted fragment in PyYAML's own messages: one character or a token name
# ('<block end>') is kept; anything longer is text from the file (a tag, an
# anchor, a directive) and is not repeated.
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")


class LineDict(dict[Any, Any]):  # YAML keys may be of any scalar type
    """A dict that knows the line of itself and of each of its keys."""

    # no __dict__ per instance: a large article holds hundreds of thousands of these
    __slots__ = ("key_lines", "line")
    line: int
    key_lines: dict[Any, int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line = 0
        self.key_lines = {}


class LineList(list[Any]):
    """A list that knows the line of itself and of each element."""

    __slots__ = ("item_lines", "line")
    line: int
    item_lines: list[int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.line = 0
        self.item_lines = []


# --------------------------------------------------------------------------- messages


def describe_key(key: Any) -> str:
    """A mapping key for an error message: quoted, and short."""
    return clip(repr(key), 60) if isinstance(key, str) else describe_value(key)


def describe_value(value: Any) -> str:
    """What a value *is*, for an error message, without repeating text from the file.

    Numbers and booleans are shown when short (``1.5``, ``true``); strings,
    mappings and lists only by their type.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 64 else "a long number"
    if isinstance(value, str):
        return "an empty string" if not value else "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a value of type {type(value).__name__}"


def format_loc(loc: Iterable[int | str]) -> str:
    """A pydantic error location as a dotted key path (long keys cut)."""
    return ".".join(clip(str(part), 40) for part in loc)


# --------------------------------------------------------------------------- reading


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_inside(path: Path, bases: Iterable[Path], what: str | None = None) -> None:
    """Refuse *path* when it resolves (through symbolic links) outside every one of *bases*."""
    bases = list(bases)
    if what is None:
        what = "the family folder" if len(bases) < 2 else "the family folder and the project"
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13)
        raise SpecError(path, None, "refused: a loop of symbolic links") from None
    for base in bases:
        if target.is_relative_to(base.resolve()):
            return
    raise SpecError(
        path,
        None,
        f"refused: a symbolic link that leads outside {what}; "
        "links in a benchmark or golden folder must stay inside it",
    )


def read_limited(path: Path, limit: int, *, within: Iterable[Path] | None = None) -> bytes:
    """The bytes of *path*, refused (as a :class:`SpecError`) unless a small regular file.

    The size is taken from the opened file before anything is read, and no
    more than ``limit + 1`` bytes are read whatever it said (a file that grows
    meanwhile is still refused). FIFOs and devices are refused without being
    read, and the file is opened non-blocking, so a FIFO cannot hang the
    caller. With *within*, the file must resolve inside one of those folders.
    """
    if within is not None:
        check_inside(path, within)
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise SpecError(path, None, f"cannot read: {exc.strerror or type(exc).__name__}") from None
    if not stat.S_ISREG(mode):
        raise SpecError(path, None, f"refused: {_kind(mode)}, not a regular file")
    flags = os.O_RDONLY
    for name in ("O_NONBLOCK", "O_NOCTTY", "O_CLOEXEC", "O_BINARY"):
        flags |= getattr(os, name, 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SpecError(path, None, f"cannot read: {exc.strerror or type(exc).__name__}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped since the stat above
            raise SpecError(path, None, f"refused: {_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit:
            raise SpecError(path, None, f"file is {info.st_size} bytes; the limit is {limit}")
        chunks: list[bytes] = []
        wanted = limit + 1
        while wanted > 0:
            chunk = os.read(fd, min(wanted, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
    except OSError as exc:
        raise SpecError(path, None, f"cannot read: {exc.strerror or type(exc).__name__}") from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > limit:
        raise SpecError(path, None, f"file grew past the limit of {limit} bytes while read")
    return raw


# --------------------------------------------------------------------------- the loader


class _Refusal(ConstructorError, AgentevalError):
    """One of our own refusals: its message names only a key, a line or a limit."""


# The refusals' words, shared by the libyaml reader and the pure-Python one.
_TOO_MANY_ALIASES = f"more than {MAX_ALIASES} aliases (alias bomb?)"
_RECURSIVE_ALIAS = "recursive alias: it refers to a value that contains it"
_TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep"
_TOO_DEEP_EXPANDED = f"nested more than {MAX_DEPTH} levels deep once aliases are expanded"


def _too_big(nodes: int) -> str:
    what = f"{MAX_NODES} values" if nodes > MAX_NODES else f"{MAX_CHARS} characters of text"
    return f"the document expands to more than {what} once aliases are expanded (an alias bomb?)"


def _key_problem(key: object, seen: Mapping[object, object], lines: Mapping[object, int]) -> str:
    """Why *key* cannot be the next key of a mapping holding *seen*; empty when it can."""
    if not isinstance(key, (str, int, float, bool)) and key is not None:
        return f"unsupported mapping key: {describe_value(key)}"
    if key in seen:
        return f"duplicate key {describe_key(key)} (first on line {lines[key]})"
    return ""


class _Loader(yaml.SafeLoader):
    """SafeLoader with line tracking, duplicate-key refusal and expansion limits."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0
        self._nodes = 0
        self._chars = 0
        # expanded (values, characters, height) of every finished node; an alias adds its target's
        self._sizes: dict[Node, tuple[int, int, int]] = {}

    def _grow(self, nodes: int, chars: int, event: Any) -> None:
        self._nodes += nodes
        self._chars += chars
        if self._nodes > MAX_NODES or self._chars > MAX_CHARS:
            raise _Refusal(None, None, _too_big(self._nodes), event.start_mark)

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise _Refusal(None, None, _TOO_MANY_ALIASES, event.start_mark)
            target = super().compose_node(parent, index)  # type: ignore[arg-type]
            size = self._sizes.get(target) if target is not None else None
            if size is None:
                raise _Refusal(None, None, _RECURSIVE_ALIAS, event.start_mark)
            nodes, chars, height = size
            if self._depth + height > MAX_DEPTH:
                raise _Refusal(None, None, _TOO_DEEP_EXPANDED, event.start_mark)
            self._grow(nodes, chars, event)
            return target
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's stubs
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refusal(None, None, _TOO_DEEP, event.start_mark)
        before = (self._nodes, self._chars)
        try:
            node = super().compose_node(parent, index)  # type: ignore[arg-type]
        finally:
            self._depth -= 1
        if node is not None:
            text = len(node.value) if isinstance(node, ScalarNode) else 0
            self._grow(1, text, event)
            self._sizes[node] = (
                self._nodes - before[0],
                self._chars - before[1],
                1 + max((self._sizes[child][2] for child in _children(node)), default=0),
            )
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> LineDict:
        if not isinstance(node, MappingNode):
            raise _Refusal(None, None, "expected a mapping", node.start_mark)
        self.flatten_mapping(node)
        result = LineDict()
        result.line = node.start_mark.line + 1
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            problem = _key_problem(key, result, result.key_lines)
            if problem:
                raise _Refusal(None, None, problem, key_node.start_mark)
            result[key] = self.construct_object(value_node, deep=True)
            result.key_lines[key] = key_node.start_mark.line + 1
        return result

    def construct_sequence(self, node: SequenceNode, deep: bool = False) -> LineList:
        if not isinstance(node, SequenceNode):
            raise _Refusal(None, None, "expected a sequence", node.start_mark)
        result = LineList(self.construct_object(child, deep=True) for child in node.value)
        result.line = node.start_mark.line + 1
        result.item_lines = [child.start_mark.line + 1 for child in node.value]
        return result

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        if _OCTALISH.match(text) and text.lstrip("+-") not in {"0"}:
            raise _Refusal(
                None,
                None,
                f"ambiguous number {clip(repr(text), 24)}: YAML 1.1 reads a leading zero as "
                "octal; quote it or drop the zero",
                node.start_mark,
            )
        try:
            return int(super().construct_yaml_int(node))
        except ValueError:  # more digits than Python converts
            raise _Refusal(
                None, None, f"number too long ({len(text)} characters)", node.start_mark
            ) from None


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _construct_map(loader: _Loader, node: MappingNode) -> LineDict:
    return loader.construct_mapping(node)


def _construct_seq(loader: _Loader, node: SequenceNode) -> LineList:
    return loader.construct_sequence(node)


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)

# Booleans: YAML 1.2 core schema only (true/false); yes/no/on/off stay strings.
_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


# --------------------------------------------------------------------------- the libyaml reader
#
# The same loader, fed by libyaml's events instead of PyYAML's pure-Python
# scanner and parser (which took some 85 % of collecting a large benchmark).
# Values are built straight from the event stream, with an explicit
# stack instead of recursion and without a node graph, so memory follows the
# values alone. Every limit is checked at the same event as in _Loader, with
# the same words. As there, problems of construction (a duplicate key, an
# ambiguous number) are reported only once the whole document has parsed, so
# that a limit or a syntax error further on wins exactly as it did. Documents
# using what this reader does not build — an explicit tag, a merge key ``<<``
# — are handed to _Loader, which builds them as before.

try:
    from yaml._yaml import CParser
except ImportError:  # PyYAML built without libyaml
    _LIBYAML = False
else:
    _LIBYAML = True

_STR = "tag:yaml.org,2002:str"
#: Implicit tags of plain scalars, by first character (as yaml.resolver.Resolver.resolve).
_IMPLICIT: dict[str, list[tuple[str, re.Pattern[str]]]] = {
    first: [*resolvers, *_Loader.yaml_implicit_resolvers.get(None, [])]
    for first, resolvers in _Loader.yaml_implicit_resolvers.items()
    if first is not None and resolvers
}
#: Scalar tags built here; a plain scalar resolving to another (merge, value) goes to _Loader.
_SCALAR_TAGS = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp")
)


class _Elsewhere(AgentevalError):
    """The document uses something the libyaml reader leaves to _Loader (never escapes)."""


class _Place(Protocol):
    """A mark of PyYAML's or of libyaml's: where a node begins."""

    @property
    def line(self) -> int: ...


class _Open:
    """A mapping or sequence whose end event has not come yet."""

    __slots__ = ("anchor", "chars", "height", "key", "key_line", "mark", "nodes", "value")

    def __init__(
        self, value: LineDict | LineList, mark: _Place, nodes: int, chars: int, anchor: str | None
    ) -> None:
        self.value = value
        self.mark = mark
        self.nodes = nodes  # values and characters before it began
        self.chars = chars
        self.anchor = anchor
        self.height = 0  # of its tallest child so far
        self.key: object = _NO_KEY  # a mapping's key waiting for its value
        self.key_line = 0


_NO_KEY = object()


@dataclass(frozen=True)
class _Anchored:
    """What an anchor stands for, once its node is complete."""

    value: object
    mark: _Place
    nodes: int
    chars: int
    height: int


def _marked(mark: _Place | None) -> Mark:
    """A mark for an error: PyYAML's own type (only the line is read)."""
    return Mark("<yaml>", 0, mark.line if mark is not None else 0, 0, None, 0)


def _fast_load(text: str) -> object:
    """One document from libyaml's events, built and bounded as _Loader does."""
    parser = CParser(text)
    scalars = _Loader("")  # the scalar constructors (int, float, ...) with their refusals
    try:
        return _build(parser.get_event, scalars)
    finally:
        parser.dispose()
        scalars.dispose()


def _build(next_event: Callable[[], Event | None], scalars: _Loader) -> object:
    """The value of the single document in the stream *next_event* reads.

    One pass over the events with an explicit stack: each event is checked
    against the limits where _Loader checks it, then its value is added to the
    mapping or sequence still open at the top of the stack.
    """
    next_event()  # the stream's start
    if isinstance(next_event(), StreamEndEvent):  # else the document's start
        return None
    stack: list[_Open] = []
    anchors: dict[str, _Anchored | _Place] = {}  # a node's mark while it is open
    nodes = chars = aliases = 0
    # the first problem of construction, raised once the document has parsed
    problem: Exception | None = None
    value: object
    mark: _Place | None
    while True:
        event = next_event()
        if isinstance(event, ScalarEvent):
            mark = event.start_mark
            assert mark is not None
            if len(stack) >= MAX_DEPTH:
                raise _Refusal(None, None, _TOO_DEEP, _marked(mark))
            text = event.value
            tag = event.tag
            if tag is None or tag == "!":
                tag = _STR
                if event.implicit[0]:
                    for candidate, pattern in _IMPLICIT.get(text[:1], ()):
                        if pattern.match(text):
                            tag = candidate
                            break
            if tag is _STR:
                value = text
            elif tag in _SCALAR_TAGS:
                value = None
                if problem is None:
                    node = ScalarNode(tag, text, _marked(mark), None, event.style)
                    try:
                        value = scalars.yaml_constructors[tag](scalars, node)
                    except Exception as exc:  # raised as _Loader would, once parsed
                        problem = exc
            else:
                raise _Elsewhere(tag)
            nodes += 1
            chars += len(text)
            if nodes > MAX_NODES or chars > MAX_CHARS:
                raise _Refusal(None, None, _too_big(nodes), _marked(mark))
            height = 1
            if event.anchor is not None:
                _check_anchor(anchors, event.anchor, mark)
                anchors[event.anchor] = _Anchored(value, mark, 1, len(text), 1)
        elif isinstance(event, CollectionStartEvent):
            mark = event.start_mark
            assert mark is not None
            if len(stack) >= MAX_DEPTH:
                raise _Refusal(None, None, _TOO_DEEP, _marked(mark))
            if event.tag is not None and event.tag != "!":
                raise _Elsewhere(event.tag)
            if event.anchor is not None:
                _check_anchor(anchors, event.anchor, mark)
                anchors[event.anchor] = mark
            container = LineDict() if isinstance(event, MappingStartEvent) else LineList()
            container.line = mark.line + 1
            stack.append(_Open(container, mark, nodes, chars, event.anchor))
            continue
        elif isinstance(event, CollectionEndEvent):
            done = stack.pop()
            nodes += 1
            if nodes > MAX_NODES or chars > MAX_CHARS:
                raise _Refusal(None, None, _too_big(nodes), _marked(done.mark))
            value, mark, height = done.value, done.mark, done.height + 1
            if done.anchor is not None:
                size = (nodes - done.nodes, chars - done.chars)
                anchors[done.anchor] = _Anchored(value, mark, *size, height)
        elif isinstance(event, AliasEvent):
            aliases += 1
            if aliases > MAX_ALIASES:
                raise _Refusal(None, None, _TOO_MANY_ALIASES, _marked(event.start_mark))
            name = event.anchor or ""
            target = anchors.get(name)
            if target is None:
                raise ComposerError(
                    None, None, f"found undefined alias {name!r}", _marked(event.start_mark)
                )
            if not isinstance(target, _Anchored):
                raise _Refusal(None, None, _RECURSIVE_ALIAS, _marked(event.start_mark))
            if len(stack) + target.height > MAX_DEPTH:
                raise _Refusal(None, None, _TOO_DEEP_EXPANDED, _marked(event.start_mark))
            nodes += target.nodes
            chars += target.chars
            if nodes > MAX_NODES or chars > MAX_CHARS:
                raise _Refusal(None, None, _too_big(nodes), _marked(event.start_mark))
            # the target's own place: _Loader's alias is the target node itself
            value, mark, height = target.value, target.mark, target.height
        else:  # libyaml sends nothing else inside a document
            raise _Elsewhere(type(event).__name__)
        if not stack:
            break
        top = stack[-1]
        if height > top.height:
            top.height = height
        into = top.value
        line = mark.line + 1 if mark is not None else 0
        if isinstance(into, LineList):
            into.append(value)
            into.item_lines.append(line)
        elif top.key is _NO_KEY:
            if type(value) is str:  # the same few keys, once each in memory
                value = intern(value)
            if problem is None:
                why = _key_problem(value, into, into.key_lines)
                if why:
                    problem = _Refusal(None, None, why, _marked(mark))
            top.key, top.key_line = value, line
        else:
            if problem is None:
                into[top.key] = value
                into.key_lines[top.key] = top.key_line
            top.key = _NO_KEY
    next_event()  # the document's end
    after = next_event()
    if not isinstance(after, StreamEndEvent):
        raise ComposerError(
            "expected a single document in the stream",
            _marked(mark),
            "but found another document",
            _marked(after.start_mark if after is not None else None),
        )
    if problem is not None:
        raise problem
    return value


def _check_anchor(
    anchors: Mapping[str, _Anchored | _Place], name: str, mark: _Place | None
) -> None:
    first = anchors.get(name)
    if first is not None:
        where = first.mark if isinstance(first, _Anchored) else first
        raise ComposerError(
            f"found duplicate anchor {name!r}; first occurrence",
            _marked(where),
            "second occurrence",
            _marked(mark),
        )


def parse_yaml(raw: bytes, path: Path) -> Any:
    """Parse one YAML document from *raw* (the bytes of *path*), raising :class:`SpecError`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(path, line, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    loader: _Loader | None = None
    try:
        bad = Reader.NON_PRINTABLE.search(text)
        if bad is not None:  # what _Loader's reader refuses before parsing anything
            line = text.count("\n", 0, bad.start()) + 1
            raise SpecError(
                path, line, f"character #x{ord(bad.group()):04x} is not allowed in YAML"
            )
        if _LIBYAML:
            try:
                return _fast_load(text)
            except _Elsewhere:
                pass
        loader = _Loader(text)
        return loader.get_single_data()
    except _Refusal as exc:
        mark = exc.problem_mark
        raise SpecError(path, mark.line + 1 if mark else None, exc.problem or "refused") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = mark.line + 1 if mark is not None else None
        raise SpecError(path, where, _yaml_problem(exc)) from None
    except yaml.reader.ReaderError as exc:
        # libyaml (no loader yet) counts the position in bytes, _Loader in characters
        before = raw[: exc.position].decode("utf-8", "replace") if loader is None else text
        line = before.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, int) else 0
        raise SpecError(path, line, f"character #x{char:04x} is not allowed in YAML") from None
    except yaml.YAMLError as exc:
        raise SpecError(path, None, f"invalid YAML ({type(exc).__name__})") from None
    except RecursionError:
        raise SpecError(path, None, f"nested more than {MAX_DEPTH} levels deep") from None
    finally:
        if loader is not None:
            loader.dispose()


def _scrub(message: str) -> str:
    """PyYAML's *message* with quoted text from the file left out (see :data:`_QUOTED`)."""

    def keep(match: re.Match[str]) -> str:
        inner = match.group(0)[1:-1]
        return match.group(0) if len(inner) <= 2 or inner[:1] + inner[-1:] == "<>" else "…"

    return _QUOTED.sub(keep, message)


def _yaml_problem(exc: yaml.MarkedYAMLError) -> str:
    """What PyYAML found wrong, in its words, without repeating the file's text."""
    problem = exc.problem or "invalid YAML"
    if "maximum nesting depth" in problem:
        # newer libyaml builds (PyYAML 6.0.4) stop at their own depth limit while
        # scanning, before the reader's 64-level check sees the events
        return _TOO_DEEP
    if "could not determine a constructor" in problem:
        python = "tag:yaml.org,2002:python/" in problem
        return "tag not allowed in benchmark files" + (" (!!python/…)" if python else "")
    if exc.context and exc.context_mark is not None and problem == "second occurrence":
        # "found duplicate anchor 'x'; first occurrence" / "second occurrence"
        return f"found duplicate anchor (first on line {exc.context_mark.line + 1})"
    if exc.context:
        problem = f"{exc.context}: {problem}"
    return clip(_scrub(problem), 160)


def load_yaml(path: Path, *, within: Iterable[Path] | None = None) -> Any:
    """Load one YAML document from *path* safely and within limits, raising :class:`SpecError`."""
    return parse_yaml(read_limited(path, MAX_BYTES, within=within), path)


def line_of(data: Any, loc: tuple[int | str, ...]) -> int | None:
    """Best line for a pydantic error location *loc* inside loaded *data*."""
    return locate(data, loc)[0]


def locate(
    data: Any, loc: tuple[int | str, ...], aliases: Mapping[str, str] | None = None
) -> tuple[int | None, tuple[int | str, ...]]:
    """Best line for a pydantic error location *loc* inside loaded *data*, and *loc* as
    the file spells it: a key the model knows by another name (*aliases*: model key ->
    the file's spelling, such as ``evaluation_criteria`` -> ``criteria``) is found, and
    named, as the file has it."""
    best: int | None = getattr(data, "line", None) or None
    node = data
    shown = list(loc)
    for i, part in enumerate(loc):
        written = aliases.get(str(part)) if aliases else None
        if isinstance(node, LineDict) and part not in node and written in node:
            part = shown[i] = str(written)
        if isinstance(node, LineDict) and part in node:
            best = node.key_lines.get(part, best)
            node = node[part]
        elif isinstance(node, LineList) and isinstance(part, int) and 0 <= part < len(node):
            best = node.item_lines[part]
            node = node[part]
        else:
            break
        inner = getattr(node, "line", None)
        if inner and isinstance(node, LineDict | LineList) and best is None:
            best = inner
    return best, tuple(shown)

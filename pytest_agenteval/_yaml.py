"""Safe YAML loading that remembers where every value came from.

Benchmark files are input from people and from other repositories, so they
are loaded with PyYAML's *safe* constructors only, plus three refusals the
stock ``yaml.safe_load`` does not make:

* duplicate keys in a mapping (PyYAML silently keeps the last one);
* YAML 1.1 surprises: ``yes``/``no``/``on``/``off`` stay strings (only
  ``true``/``false`` are booleans) and ``012`` is refused as an ambiguous
  octal instead of becoming 10;
* resource abuse: files over :data:`MAX_BYTES` and more than
  :data:`MAX_ALIASES` aliases (the "billion laughs" shape).

Every mapping and sequence comes back as :class:`LineDict` / :class:`LineList`,
which record the 1-based line of each key or element, so that a validation
error found later (by pydantic) can name ``file:line``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_BYTES = 2 * 1024 * 1024
MAX_ALIASES = 64

_OCTALISH = re.compile(r"^[-+]?0[0-9_]+$")


class SpecError(Exception):
    """A problem in a benchmark or golden file, located by file and line."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path = Path(path)
        self.line = line
        self.message = message
        super().__init__(self.location + ": " + message)

    @property
    def location(self) -> str:
        return f"{self.path}:{self.line}" if self.line else str(self.path)


class LineDict(dict):
    """A dict that knows the line of itself and of each of its keys."""

    line: int = 0
    key_lines: dict[Any, int]


class LineList(list):
    """A list that knows the line of itself and of each element."""

    line: int = 0
    item_lines: list[int]


class _Loader(yaml.SafeLoader):
    """SafeLoader with line tracking, duplicate-key and alias refusal."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                event = self.peek_event()
                raise ConstructorError(
                    None, None, f"more than {MAX_ALIASES} aliases (alias bomb?)", event.start_mark
                )
        return super().compose_node(parent, index)  # type: ignore[arg-type]

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> LineDict:
        if not isinstance(node, MappingNode):
            raise ConstructorError(None, None, "expected a mapping", node.start_mark)
        self.flatten_mapping(node)
        result = LineDict()
        result.line = node.start_mark.line + 1
        result.key_lines = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise ConstructorError(
                    None, None, f"unsupported mapping key {key!r}", key_node.start_mark
                )
            if key in result:
                raise ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {result.key_lines[key]})",
                    key_node.start_mark,
                )
            result[key] = self.construct_object(value_node, deep=True)
            result.key_lines[key] = key_node.start_mark.line + 1
        return result

    def construct_sequence(self, node: SequenceNode, deep: bool = False) -> LineList:
        if not isinstance(node, SequenceNode):
            raise ConstructorError(None, None, "expected a sequence", node.start_mark)
        result = LineList(self.construct_object(child, deep=True) for child in node.value)
        result.line = node.start_mark.line + 1
        result.item_lines = [child.start_mark.line + 1 for child in node.value]
        return result

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(self.construct_scalar(node))
        if _OCTALISH.match(text) and text.lstrip("+-") not in {"0"}:
            raise ConstructorError(
                None,
                None,
                f"ambiguous number {text!r}: YAML 1.1 reads a leading zero as octal; "
                "quote it or drop the zero",
                node.start_mark,
            )
        return int(super().construct_yaml_int(node))


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


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of *path*, refused (as a :class:`SpecError`) when unreadable or over *limit*."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(path, None, f"cannot read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise SpecError(path, None, f"file is {len(raw)} bytes; the limit is {limit}")
    return raw


def load_yaml(path: Path) -> Any:
    """Load one YAML document from *path* safely, raising :class:`SpecError`."""
    raw = read_limited(path, MAX_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(path, None, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or str(exc)
        if "could not determine a constructor" in problem:
            problem = f"tag not allowed in benchmark files {problem.split('tag', 1)[-1].strip()}"
        raise SpecError(path, line, problem) from None
    except yaml.YAMLError as exc:
        raise SpecError(path, None, str(exc)) from None
    finally:
        loader.dispose()


def line_of(data: Any, loc: tuple[int | str, ...]) -> int | None:
    """Best line for a pydantic error location *loc* inside loaded *data*."""
    best: int | None = getattr(data, "line", None) or None
    node = data
    for part in loc:
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
    return best

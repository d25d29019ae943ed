"""Text shown on a terminal: what an agent wrote must not drive the terminal.

An answer may hold NUL, escape sequences (colours, window titles, cursor
moves), carriage returns that overwrite a line, C1 controls, or bidi
overrides that reorder what a reviewer reads ("Trojan Source"). On the
terminal each is shown visibly as ``\\xNN`` or ``\\uNNNN``, as the reports
already do; tab and line feed stay. The evidence keeps the exact text.
"""

from __future__ import annotations

import re
from typing import Any

_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """*text* with control, bidi-override and lone-surrogate characters escaped visibly."""
    return _UNSAFE.sub(_escape, text)


class SafeTerminal:
    """A terminal reporter whose ``write``/``write_line``/``write_sep`` escape their text."""

    def __init__(self, tr: Any) -> None:
        self._tr = tr

    def write(self, text: str, **markup: bool) -> None:
        self._tr.write(terminal_safe(text), **markup)

    def write_line(self, text: str, **markup: bool) -> None:
        self._tr.write_line(terminal_safe(text), **markup)

    def write_sep(self, sep: str, title: str | None = None, **markup: bool) -> None:
        self._tr.write_sep(sep, None if title is None else terminal_safe(title), **markup)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tr, name)

"""Hostile text made safe for each place it is shown, and cut to a limit with a marker.

What an agent wrote (or a judge, or a provider's error body) may hold NUL,
escape sequences (colours, window titles, cursor moves), carriage returns
that overwrite a line, C1 controls, bidi overrides that reorder what a
reviewer reads ("Trojan Source"), lone surrogates or Unicode noncharacters.
Each writer shows such characters *visibly* — ``\\xNN``, ``\\uNNNN`` or
``\\UNNNNNNNN`` (:func:`visible`) — and keeps the rest, emoji included; the
run's evidence keeps the exact text. Backslashes already in the text are not
doubled: the escaping is for reading, not a reversible encoding.

=====================  ====================================================
:func:`terminal_safe`  the terminal: C0 (but tab and line feed), DEL, C1,
                       bidi controls, surrogates
:func:`visible_escape` XML 1.0 (JUnit) and valid UTF-8 (SARIF): what XML
                       cannot hold — C0 but tab, LF and CR; lone surrogates;
                       U+FFFE, U+FFFF; a surrogate pair is joined
:func:`clean_text`     Markdown and HTML reports: newlines normalised, ANSI
                       sequences dropped, C0/C1 controls, lone surrogates
                       and noncharacters escaped
:func:`gfm_cell`       one GitHub Markdown table cell or inline code (the
                       job summary, the comparison)
=====================  ====================================================

:func:`truncate` (and :func:`clip`) is the one way any writer cuts a long
text: never inside a surrogate pair, with a marker saying how much was cut;
each writer keeps its own limit and its own marker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "SafeTerminal",
    "as_text",
    "clean_text",
    "clip",
    "gfm_cell",
    "last_line",
    "named",
    "terminal_safe",
    "truncate",
    "visible",
    "visible_escape",
]

# --------------------------------------------------------------------------- escaping


def visible(match: re.Match[str]) -> str:
    """The matched character as visible text: ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``."""
    code = ord(match.group())
    if code <= 0xFF:  # C0, DEL, C1: plain ASCII, so every font can show it
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _join_pair(match: re.Match[str]) -> str:
    hi, lo = (ord(c) for c in match.group())
    return chr(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))


def join_surrogate_pairs(text: str) -> str:
    """*text* with each surrogate pair held as two code points made the character it encodes."""
    return text if text.isascii() else _PAIR.sub(_join_pair, text)


_TERMINAL_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)


def terminal_safe(text: str) -> str:
    """*text* with control, bidi-override and lone-surrogate characters escaped visibly."""
    return _TERMINAL_UNSAFE.sub(visible, text)


# XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF].
_XML_INVALID = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def visible_escape(text: str) -> str:
    """*text* with every character XML 1.0 cannot hold shown as ``\\xNN``/``\\uNNNN``.

    A surrogate pair held as two code points becomes the character it
    encodes; lone surrogates, U+FFFE, U+FFFF and C0 controls other than tab,
    line feed and carriage return are escaped. The result is also valid UTF-8.
    """
    if (text.isascii() and text.isprintable()) or not _XML_INVALID.search(text):
        return text
    return _XML_INVALID.sub(visible, join_surrogate_pairs(text))


# CSI (colours, cursor), OSC (titles, hyperlinks; BEL- or ST-terminated), and two-byte escapes.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_NONCHARS = "".join(
    f"{chr(plane * 0x10000 + 0xFFFE)}{chr(plane * 0x10000 + 0xFFFF)}" for plane in range(17)
)
_REPORT_UNSAFE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufdd0-\ufdef" + _NONCHARS + "]"
)


def clean_text(value: object) -> str:
    """*value* as text that any encoder and any HTML or Markdown parser accepts.

    Newlines are normalised to ``\\n`` and tabs kept; ANSI escape sequences are
    dropped; other C0/C1 controls become visible ``\\xNN`` text (NUL: ``\\x00``);
    lone surrogates and Unicode noncharacters become ``\\uXXXX`` text. A
    surrogate *pair* (two code points) is joined into the character it encodes.
    """
    text = join_surrogate_pairs(value if isinstance(value, str) else as_text(value))
    text = _ANSI.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    return _REPORT_UNSAFE.sub(visible, text)


def as_text(value: object) -> str:
    """*value* as text: ``""`` for None, JSON (keys sorted) for a mapping or list, else ``str``."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
        except (TypeError, ValueError):  # keys of mixed types, a circular structure
            return repr(value)
    return str(value)


def gfm_cell(text: object) -> str:
    """*text* for one GitHub Markdown table cell or inline code span, on one line.

    No ``|`` ends the cell, no backtick closes a span, no ``<`` opens a tag,
    no ``@`` mentions anyone, no line break ends the row.
    """
    return (
        str(text)
        .replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("`", "'")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("@", "@\u200b")
        .replace("\r", " ")
        .replace("\n", " ")
    )


# --------------------------------------------------------------------------- cutting

#: How many ids :func:`named` lists before "and N more".
NAMED_LIMIT = 10


def last_line(text: str) -> str:
    """The last non-blank line of *text* (an exception's own line, below its traceback)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


def named(ids: Sequence[str], limit: int = NAMED_LIMIT) -> str:
    """``a, b, c`` — at most *limit* ids, then ``and N more``."""
    shown = ", ".join(ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


#: A marker, or what makes one from (characters cut, characters in the whole text).
Marker = str | Callable[[int, int], str]


def truncate(
    text: str,
    limit: int,
    marker: Marker = "…",
    *,
    within: bool = True,
    at_break: bool = False,
) -> tuple[str, int]:
    """``(shown, cut)``: *text* if it has at most *limit* characters, else its start and *marker*.

    *cut* is how many characters of *text* are not shown (0 when it fits).
    With *within* the marker counts towards *limit* (the result is at most
    *limit* characters, the marker included); otherwise it follows *limit*
    characters of text. With *at_break* the text shown ends at the last line
    or word break in the final fifth, when there is one, without trailing
    white space. A surrogate pair held as two code points is never split.
    """
    total = len(text)
    if total <= limit:
        return text, 0

    def end_before(end: int) -> int:
        end = max(min(end, total), 0)
        if end and "\ud800" <= text[end - 1] <= "\udbff":
            end -= 1
        if at_break:
            brk = max(text.rfind("\n", 0, end), text.rfind(" ", 0, end))
            if brk >= limit * 0.8:
                end = brk
            end = len(text[:end].rstrip())
        return end

    def mark(end: int) -> str:
        return marker if isinstance(marker, str) else marker(total - end, total)

    end = end_before(limit)
    if within:
        # the marker's own length (its count's digits) changes how much must be cut
        while end + len(mark(end)) > limit and end > 0:
            end = end_before(min(end - 1, limit - len(mark(end))))
    return text[:end] + mark(end), total - end


def clip(text: str, limit: int, marker: Marker = "…", *, within: bool = True) -> str:
    """*text* cut to *limit* as :func:`truncate` cuts it, without the count."""
    return truncate(text, limit, marker, within=within)[0]


# --------------------------------------------------------------------------- terminal


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

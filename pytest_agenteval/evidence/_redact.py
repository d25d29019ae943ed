"""One redaction pass for every writer: evidence files, reports, the terminal, the judge cache.

Secrets are the values (8 characters or more) of environment variables whose names look
like credentials (``*_KEY``, ``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``...). Each is
replaced by ``[REDACTED:<VARIABLE NAME>]`` wherever it appears in a form an echo is
likely to take:

* as is, in any mix of upper and lower case, and reversed;
* spread out: whitespace (a line break, ``\\r\\n``, indentation), NUL, invisible
  characters, punctuation (``s k - a b c``, ``s-k-a``), a line continuation (``\\`` at the
  end of a line) or a printed escape (``\\n``, ``\\t``) between any two of its characters;
* as hex (lower or upper case, bare, ``\\x73``, ``0x73`` or ``%73`` per byte), as
  ``\\u0073`` escapes, as HTML character references, URL-encoded, JSON-escaped;
* inside base64 (standard or URL-safe alphabet) at any of the three byte alignments, so
  ``base64("key=" + KEY)`` (a Basic-auth header) is caught as well as ``base64(KEY)``:
  the characters that depend only on the secret are matched, spread out too (base64
  wrapped at 76 columns).

URL userinfo (``scheme://user:pass@``) becomes ``scheme://[REDACTED]@``, and strings
shaped like a provider key or a bearer token are redacted even when no variable holds
them. A command may assign a secret inline (``cmd:env DB_PASSWORD=... agent``): such a
value counts as a secret too (:meth:`Redactor.from_environ`), and :func:`mask_assignments`
masks it wherever the command itself is shown.

Numbers: when a secret is made of digits (a PIN, an account number), an integer or a
float whose decimal text holds it is replaced by that text, redacted
(:meth:`Redactor.number`). Decided once per redactor: otherwise numbers cost nothing.

Speed: a single alternation regex over all those forms costs CPython's ``re`` about
50 ms per MB *per secret* (no literal prefix can be used through the gaps). So each
text is first reduced to a skeleton (separators and backslashes removed, lower case:
one ``str.translate`` for ASCII text) and searched with ``in`` for a 40-character
stretch of each form's skeleton; only a form found there has its regex (compiled once
per process, on first need) run to place the replacement. The skeleton test can only
over-report: it never misses a match the regex would make, except where a match's
first or last character is read differently, which is why those are left out of the
stretch. About 10-30 ms per MB with a handful of secrets, as before.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

__all__ = [
    "MIN_SECRET_LEN",
    "Redactor",
    "assigned_secrets",
    "endpoint",
    "mask_assignments",
    "strip_userinfo",
]

_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION)", re.I
)
_KEY_SHAPES = re.compile(
    r"\b(?:sk-(?:ant-|proj-|live-|test-)?[A-Za-z0-9_\-]{16,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,})\b"
)
_KEY_PREFIXES = ("sk-", "AKIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "xox")
_KEY_PREFIX = re.compile("|".join(re.escape(p) for p in _KEY_PREFIXES))  # one C-speed scan
_BEARER_WORD = re.compile("bearer", re.IGNORECASE)
#: Strings up to this length are redacted once and remembered: a run's records repeat
#: the same keys and short values (field names, verdicts, model names) thousands of times.
#: The memo starts afresh when full: the repeated strings are a few hundred, and a larger
#: memo would mostly hold each item's own short strings (ids, answers) to the run's end.
_MEMO_MAX_LEN = 64
_MEMO_MAX_ENTRIES = 4096
#: Longer strings, up to this length, are remembered in a few places only: what comes
#: back is the judge's system prompt, some kilobytes in every record of a run.
_LONG_MEMO_MAX_LEN = 65_536
_LONG_MEMO_MAX_ENTRIES = 16
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._\-~+/]{16,}=*")
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\[\]<>\"'`\\]+@")
MIN_SECRET_LEN = 8
#: ``NAME=value`` where NAME looks like a credential: a secret given inline to a command.
_SECRET_ASSIGNMENT = re.compile(
    r"(?P<name>(?:[A-Za-z_][A-Za-z0-9_\-]*)?(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD|AUTH)"
    r"[A-Za-z0-9_]*)=(?P<value>\"[^\"]*\"|'[^']*'|\S+)",
    re.IGNORECASE,
)

# What may sit between two characters of a secret: whitespace, NUL, invisible characters,
# spacing punctuation, and backslashes: the escape of a line break or a tab as a program
# prints it (``\n``, also JSON-escaped once more: ``\\n``), a line continuation (a
# backslash ending the line), the escape of a quote. A run of backslashes before n, r or
# t is read with the letter, as an escape, by the regex and the skeleton alike.
_SEP_CHARS = (
    "".join(c for c in map(chr, range(0x3001)) if c.isspace())
    + "\x00\u00ad\u200b\u200c\u200d\u200e\u200f\u2060\ufeff"
    + ".,;:|/*+'\"`~^_-"
)
_ESCAPE = r"(?<!\\)\\+[nrt]"  # from the start of a run only: linear time
# (a run of backslashes, up to 8 for escapes escaped again and again, is one element,
# read one way only: no backtracking through the ways to split a run)
_SEP = r"(?:[\s\x00\xad\u200b-\u200f\u2060\ufeff.,;:|/*+'\"`~^_\-]|\\{1,8}[nrt]|\\{1,8}(?![\\nrt]))"
_GAP = _SEP + "{0,16}"
_ESCAPE_RX = re.compile(_ESCAPE)
# the skeleton drops every backslash too (an escape's ``\u``/``\x`` as well: the forms'
# skeletons are made the same way, so ``\\u0073`` inside JSON still meets ``\u0073``)
_SEP_DELETE: dict[int, None] = {ord(c): None for c in _SEP_CHARS + "\\"}
_SEP_ASCII_BYTES = bytes(ord(c) for c in _SEP_CHARS + "\\" if c.isascii())
_SEP_NON_ASCII = re.compile(
    "[" + "".join(re.escape(c) for c in _SEP_CHARS if not c.isascii()) + "]"
)
_NEEDLE = 40  # characters of a form's skeleton the prefilter looks for


def _skeleton(text: str) -> str:
    """*text* without separators or backslashes, in lower case (the prefilter's view).

    Escapes (backslashes and the n, r or t after them) go first, leftmost first, as the
    regex reads them; then single characters. Byte-level deletion keeps non-ASCII text
    fast (``str.translate`` is not, there).
    """
    if "\\" in text:
        text = _ESCAPE_RX.sub("", text)
    if text.isascii():
        return text.translate(_SEP_DELETE).lower()
    text = _SEP_NON_ASCII.sub("", text)  # rare characters: few matches
    data = text.encode("utf-8", "surrogatepass").translate(None, _SEP_ASCII_BYTES)
    return data.decode("utf-8", "surrogatepass").lower()


def _base64_cores(raw: bytes) -> list[str]:
    """The base64 characters that depend only on *raw*, at byte offsets 0, 1 and 2.

    Preceded by k bytes, *raw* fills bits [8k, 8k + 8n) of the stream; a base64
    character covers 6 bits, so characters ceil(8k/6) .. floor(8(k+n)/6) - 1 are
    the secret's alone, whatever comes before or after it.
    """
    cores = []
    for k in range(3):
        encoded = base64.b64encode(b"\0" * k + raw).decode("ascii")
        cores.append(encoded[-(-8 * k // 6) : 8 * (k + len(raw)) // 6])
    return cores


def _forms(value: str) -> list[tuple[list[str], bool]]:
    """Each encoding of *value* as (units, is_base64); separators may sit between units."""
    raw = value.encode("utf-8", "surrogatepass")
    forms: list[tuple[list[str], bool]] = [
        (list(value), False),
        (list(value[::-1]), False),
        (list(raw.hex()), False),
        ([f"\\x{b:02x}" for b in raw], False),
        ([f"0x{b:02x}" for b in raw], False),
        ([f"%{b:02x}" for b in raw], False),
        ([f"&#{ord(c)};" for c in value], False),
        ([f"&#x{ord(c):x};" for c in value], False),
    ]
    utf16 = value.encode("utf-16-be", "surrogatepass")
    forms.append(
        (
            [f"\\u{int.from_bytes(utf16[i : i + 2], 'big'):04x}" for i in range(0, len(utf16), 2)],
            False,
        )
    )
    for extra in (quote(raw, safe=""), json.dumps(value)[1:-1]):
        if extra != value:
            forms.append((list(extra), False))
    forms += [(list(core), True) for core in _base64_cores(raw)]
    return forms


def _unit_pattern(unit: str, b64: bool) -> str:
    if b64 and unit == "+":
        return r"[+\-]"
    if b64 and unit == "/":
        return r"[/_]"
    return re.escape(unit).replace(r"\\", r"\\{1,8}")  # an escape, maybe JSON-escaped again


@lru_cache(maxsize=64)
def _secret_plan(value: str) -> tuple[tuple[str, str], ...]:
    """(prefilter needle, regex source) of each form of one secret; cached per process."""
    plan: dict[str, str] = {}
    for units, b64 in _forms(value):
        source = _GAP.join(_unit_pattern(u, b64) for u in units)
        # first and last character left out: at the edges of a match the skeleton may
        # pair a character with a neighbouring backslash as an escape; and a middle
        # slice is as telling as the whole and much faster to look for
        skeleton = _skeleton("".join(units))[1:-1]
        middle = len(skeleton) // 2
        plan.setdefault(source, skeleton[max(0, middle - _NEEDLE // 2) : middle + _NEEDLE // 2])
    # the longer form first where two could match at one place
    return tuple((plan[s], s) for s in sorted(plan, key=len, reverse=True))


@lru_cache(maxsize=256)
def _form_regex(source: str) -> re.Pattern[str]:
    """Compiled only once a text seems to hold the form (a large pattern: tens of ms)."""
    return re.compile(source, re.IGNORECASE)


class _Secret:
    __slots__ = ("digits", "forms", "name", "shortest")

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self.forms = _secret_plan(value)
        self.shortest = min(len(needle) for needle, _ in self.forms)
        # made of digits: a number's decimal text may hold it
        self.digits = value.isascii() and value.isdigit()


class Redactor:
    """Replaces known secret values, URL userinfo and key-shaped strings in text and data."""

    def __init__(self, secrets: Mapping[str, str] | Iterable[tuple[str, str]]) -> None:
        """*secrets*: variable name -> value, or (name, value) pairs (one name may then hold
        two values: the environment's and one a command assigns inline)."""
        pairs = sorted(secrets.items() if isinstance(secrets, Mapping) else secrets)
        pairs = [(n, v) for n, v in pairs if v and len(v) >= MIN_SECRET_LEN]
        by_value: dict[str, str] = {}
        for name, value in pairs:
            by_value.setdefault(value, name)
        # longest first, so a secret that contains another is replaced whole
        ordered = sorted(by_value.items(), key=lambda p: len(p[0]), reverse=True)
        self._secrets = [_Secret(name, value) for value, name in ordered]
        self._names = sorted({n for n, _ in pairs})
        self._shortest = min((s.shortest for s in self._secrets), default=0)
        # secrets made of digits: only they can be read in a number's decimal text
        self._digit_secrets = [s for s in self._secrets if s.digits]
        self._digits_shortest = min((s.shortest for s in self._digit_secrets), default=0)
        self._memo: dict[str, str] = {}
        self._long_memo: dict[str, str] = {}

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, *, command: str = ""
    ) -> Redactor:
        """The secrets of *environ* (``os.environ`` by default), and those *command* (the
        subject's spec) assigns inline to credential-named variables."""
        env = os.environ if environ is None else environ
        secrets = [(k, v) for k, v in env.items() if _SECRET_NAME.search(k)]
        return cls(secrets + assigned_secrets(command))

    @property
    def variable_names(self) -> list[str]:
        """Names (never values) of the variables treated as secrets."""
        return list(self._names)

    def text(self, value: str) -> str:
        if not value:
            return value
        if len(value) <= _MEMO_MAX_LEN:
            memo, cap = self._memo, _MEMO_MAX_ENTRIES
        elif len(value) <= _LONG_MEMO_MAX_LEN:  # a judge's system prompt, in every record
            memo, cap = self._long_memo, _LONG_MEMO_MAX_ENTRIES
        else:
            return self._text(value)
        done = memo.get(value)
        if done is None:
            done = self._text(value)
            if len(memo) >= cap:
                memo.clear()
            memo[value] = done
        return done

    def _text(self, value: str) -> str:
        if "://" in value and "@" in value:
            value = _URL_USERINFO.sub(r"\1[REDACTED]@", value)
        if self._secrets and len(value) >= self._shortest:
            value = _replaced(value, self._secrets)
        if _KEY_PREFIX.search(value):
            value = _KEY_SHAPES.sub("[REDACTED:key-shaped]", value)
        if _BEARER_WORD.search(value):
            value = _BEARER.sub(lambda m: m.group(1) + "[REDACTED:bearer]", value)
        return value

    @property
    def redacts_numbers(self) -> bool:
        """Whether a secret is made of digits: only then may a number hold one."""
        return bool(self._digit_secrets)

    def number(self, value: int | float) -> int | float | str:
        """*value*, or its decimal text redacted as :meth:`text` would where that holds a
        secret made of digits (``73915548260417`` -> ``"[REDACTED:PIN_TOKEN]"``).

        Not through the memo: numbers are many and seldom repeat, and would push out the
        strings that do.
        """
        if not self._digit_secrets or isinstance(value, bool):
            return value
        try:
            shown = float.__repr__(value) if isinstance(value, float) else int.__repr__(value)
        except ValueError:  # beyond Python's int-to-text digit limit: no JSON holds it either
            return value
        if len(shown) < self._digits_shortest:
            return value
        done = _replaced(shown, self._digit_secrets)
        return value if done == shown else done

    def data(self, value: Any) -> Any:
        """Redact every string (mapping keys included) inside JSON-like *value*.

        String by string, on the decoded text: a secret is found in what a reader
        of the string sees, whatever escaping the container (JSON, XML) adds later.
        A number becomes text where a secret made of digits is in its decimal text
        (:meth:`number`); other scalars are left as they are.
        """
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {self.text(str(k)): self.data(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.data(v) for v in value]
        if isinstance(value, int | float) and self._digit_secrets:
            return self.number(value)
        return value


def _replaced(value: str, secrets: list[_Secret]) -> str:
    """*value* with each of *secrets*, in any of its forms, replaced by its marker."""
    skeleton = _skeleton(value)
    for secret in secrets:
        if len(skeleton) < secret.shortest:
            continue
        for needle, source in secret.forms:
            if needle in skeleton:
                value = _form_regex(source).sub(f"[REDACTED:{secret.name}]", value)
    return value


def assigned_secrets(command: str) -> list[tuple[str, str]]:
    """(name, value) of each ``NAME=value`` in *command* whose NAME looks like a credential
    (``env DB_PASSWORD=... agent``, ``--token=...``): quotes and a trailing ``;``, ``&``,
    ``|`` or ``)`` of the shell are not part of the value."""
    if "=" not in command:
        return []
    found = []
    for match in _SECRET_ASSIGNMENT.finditer(command):
        value = match.group("value")
        if value[:1] in "'\"" and len(value) >= 2 and value[-1] == value[0]:
            value = value[1:-1]
        else:
            value = value.rstrip(";&|)")
        found.append((match.group("name"), value))
    return found


def mask_assignments(command: str) -> str:
    """*command* with the value of each credential-named ``NAME=value`` masked
    (``DB_PASSWORD=***``), whatever its length: what a command shows of itself."""
    if "=" not in command:
        return command
    return _SECRET_ASSIGNMENT.sub(lambda m: f"{m.group('name')}=***", command)


def strip_userinfo(url: str) -> str:
    """*url* without ``user:password@`` (the rest kept as it was)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _URL_USERINFO.sub(r"\1[REDACTED]@", url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


_DEFAULT_PORTS = {"http": 80, "https": 443}


def endpoint(url: str) -> str:
    """The endpoint *url* names: scheme, host, port and path; no userinfo, query or fragment.

    Lower-case scheme and host, the scheme's default port and a trailing ``/`` left
    out, so spellings of one endpoint compare equal and different paths differ.
    """
    try:
        parts = urlsplit(url.strip())
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return strip_userinfo(url)
    scheme = parts.scheme.lower()
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path.rstrip("/"), "", ""))

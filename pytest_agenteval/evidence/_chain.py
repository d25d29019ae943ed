"""Tamper-evident evidence for a run: canonical JSON, a hash chain, a seal and SHA256SUMS.

A benchmark verdict is only worth something if a reader can tell that the
records behind it were not edited, reordered, cut short or padded after the
run. This module writes the evidence so that such changes are *detectable*
and checks it again later (``agenteval verify``). It is pure (no pytest
import), so the plugin, the command line and the tests share one code path.

Run directory layout
--------------------
::

    <run_dir>/manifest.json   canonical JSON (RFC 8785 bytes, no trailing newline)
    <run_dir>/results.jsonl   one canonical-JSON record per line, each '\\n'-terminated;
                              the last line is the seal record
    <run_dir>/...             summary.json, junit.xml, reports: written by others
                              with :func:`write_file_atomic` before finalize
    <run_dir>/SHA256SUMS      "<64 hex>  <relative posix path>\\n" per regular file,
                              sorted by path (bytes), every file except itself

``SHA256SUMS`` uses the format of GNU ``sha256sum``, so ``sha256sum -c
SHA256SUMS`` run inside the directory checks the files too. It is a
convenience; what binds the files to the chain head is the seal.

Hash chain
----------
* The manifest is a JSON object. While the run is in progress it holds
  ``"completed": false`` and no ``"completion"`` key. :meth:`EvidenceWriter.finalize`
  rewrites it atomically with ``"completed": true`` (``false`` when the run
  was interrupted) and ``"completion": {"chain_head", "records", "ended_at",
  "interrupted", "not_evaluated"}``, where ``chain_head`` and ``records``
  describe the item records (the lines before the seal).
* The *manifest header* is the manifest without ``completed`` and
  ``completion``. The chain's genesis hash is the SHA-256 of the header's
  canonical JSON, so the rewrite at the end keeps the first link valid while
  any change to the header breaks it.
* Each results line is the canonical JSON of the record plus a key ``"prev"``:
  the hex SHA-256 of the previous line's exact bytes (without its newline);
  the first line's ``prev`` is the genesis hash. The chain head is the SHA-256
  of the last line's bytes (the genesis hash when there are no lines).
  Records may not carry a ``prev`` key of their own, nor ``"kind": "seal"``.

The seal
--------
:meth:`EvidenceWriter.finalize` writes the manifest's completion, then appends
one last chained line, the *seal*::

    {"kind": "seal", "files": {"manifest.json": "<sha256>", "summary.json": ...},
     "completed": true, "interrupted": false, "not_evaluated": 0, "records": 6,
     "ended_at": "...", "prev": "<hash of the last item record>"}

``files`` holds the SHA-256 of every regular file of the run directory at
that moment except ``results.jsonl`` (chained line by line) and
``SHA256SUMS`` (written after the seal). The seal's own hash is the run's
final chain head, the one printed at the end of the run, so that head binds
every file: change, add or delete any of them, or relabel an interrupted run
as completed, and :func:`verify_run` names the file. :func:`verify_run`
takes completion from the seal and requires the manifest to agree with it.

What this proves, and what it does not
--------------------------------------
There is no secret key: anyone can recompute every hash. So :func:`verify_run`
catches accidental corruption and any edit that was not followed by a full,
consistent re-computation (a changed byte anywhere, a deleted or added file,
reordered lines, a naively cut tail, an edited manifest header). Someone who
edits a file *and* writes a new seal record, completion and ``SHA256SUMS``
consistently produces a run that verifies. Against that, keep the chain head
printed at the end of the run somewhere else (CI log, ticket, commit message)
and pass it as ``expect_head``: the recomputed head then no longer matches.

The directory's name
--------------------
The plugin names a run directory ``<UTC start, to the second>-<first ten hex digits of
the run id>``, then a condition's slug and a counter when there are any
(``20261202T203038Z-2a2bb5a464``). Such a name is a claim about the run, which a
reader (and a person choosing a baseline) goes by, so :func:`verify_run` holds a name
that starts with such a stamp to the manifest's ``started_at``, and the ten hex digits
after it, when there are, to its ``run_id`` (the chain binds both): an old run renamed
to look newer fails, a look-alike name too. A name that starts otherwise claims
nothing and is not checked (a run copied to ``baseline/``).

Reading evidence
----------------
:func:`verify_run` reads only regular files: a symlink, FIFO or device where
a file is expected is reported by name, never opened (``lstat`` first, then
``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` on what was opened), and so is a symlink
among the folders on a listed file's path (each folder is opened inside the one
before, never through a link, so nothing outside the run is read). Reads are
bounded: the manifest and ``SHA256SUMS`` up to 64 MiB, a results line up to
1 GiB, and no file beyond the size it had when it was opened.

Text that RFC 8785 cannot hold
------------------------------
RFC 8785 (via the ``rfc8785`` package) rejects NaN and Infinity, integers
beyond +-(2**53 - 1), non-string object keys and lone UTF-16 surrogates.
:func:`canonical_json` stays strict: it turns each rejection into a
:class:`ValueError` that names the value's path (``$.scores[2]``) and says
what to pass instead. What an agent returns is not ours to refuse, so
:meth:`EvidenceWriter.append` first passes every record through
:func:`json_safe`, which keeps such values exactly as strings (``"NaN"``,
the decimal digits of a big integer, ``str()`` of a key) and lists each
conversion under the record's ``"converted"`` key.

Lone surrogates are different: agent output legitimately contains them
(truncated emoji, bytes decoded with ``surrogateescape``), and evidence must
not refuse or silently alter such text. They are therefore written as
lowercase JSON escapes (``"\\ud800"``), exactly as ECMAScript's
``JSON.stringify`` does; ``json.loads`` reads them back to the same string,
so the bytes stay canonical under this module's own definition. A surrogate
*pair* held as two code points (``"\\ud83d\\ude00"``) is written as the
character it encodes, because JSON cannot tell the two apart.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import operator
import os
import re
import secrets
import stat
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, NoReturn, SupportsIndex, TypeGuard, TypeVar, cast

import re2
import rfc8785

from .._text import clip
from .._vocab import EvidenceError, JSONObject, JSONValue

__all__ = [
    "CONVERTED_KEY",
    "MANIFEST_NAME",
    "PREV_KEY",
    "RESULTS_NAME",
    "RUN_NAME_STAMP",
    "SEAL_KIND",
    "SUMS_NAME",
    "EvidenceWriter",
    "VerifyResult",
    "build_sha256sums",
    "canonical_json",
    "genesis_hash",
    "is_seal",
    "json_safe",
    "json_safe_record",
    "parse_rfc3339",
    "sha256_hex",
    "utc_now_rfc3339",
    "verify_run",
    "write_file_atomic",
    "write_indented_json",
]

MANIFEST_NAME = "manifest.json"
RESULTS_NAME = "results.jsonl"
SUMS_NAME = "SHA256SUMS"
PREV_KEY = "prev"
CONVERTED_KEY = "converted"
SEAL_KIND = "seal"
RESERVED_MANIFEST_KEYS = ("completed", "completion")

_INT_LIMIT = 2**53 - 1
_CHUNK = 1 << 20
_MAX_SMALL_FILE = 64 << 20  # manifest.json and SHA256SUMS
_MAX_LINE = 1 << 30  # one results line (a record with a very long answer)
_MAX_DEPTH = 200  # nesting kept as JSON; deeper subtrees are kept as text
_MAX_NOTES = 100  # conversions listed per record
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
#: Folders can be opened one inside the other without following a symlink (not on Windows)
_OPENS_AT = bool(_O_DIRECTORY and _O_NOFOLLOW) and {os.open, os.stat} <= os.supports_dir_fd
_MAX_PROBLEMS = 50
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SUMS_LINE = re.compile(rb"([0-9a-f]{64})  (.+)", re.DOTALL)
_SURROGATE = re.compile("([\ud800-\udfff])")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_O_BINARY = getattr(os, "O_BINARY", 0)
#: How a run directory's name gives when its run started (UTC, to the second)
RUN_NAME_STAMP = "%Y%m%dT%H%M%SZ"
#: The start of a run directory's name as the plugin gives it: when the run started, then
#: the first ten hex digits of its run id (a condition's slug and a counter may follow).
#: Any name starting with such a stamp claims it, whatever follows (a look-alike too).
_RUN_NAME = re.compile(r"([0-9]{8}T[0-9]{6}Z)(?:-([0-9a-fA-F]{10}))?")

_Container = TypeVar("_Container")
_Key = TypeVar("_Key")


# --------------------------------------------------------------------------
# Canonical JSON and hashing
# --------------------------------------------------------------------------


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``: the one digest format used everywhere here."""
    return hashlib.sha256(data).hexdigest()


def canonical_json(obj: object) -> bytes:
    """Serialise ``obj`` as RFC 8785 canonical JSON, so equal data hashes equally.

    Plain data goes straight through ``rfc8785.dumps``. When it refuses, the
    value is walked again to either write lone surrogates as JSON escapes
    (see the module docstring) or raise a :class:`ValueError` naming the path
    of the offending value, because "nan is not representable" alone does
    not tell a caller which of a thousand fields to fix.
    """
    # other types go straight to the walk, which names them (rfc8785 would refuse them too)
    if obj is None or isinstance(obj, (int, float, str, list, tuple, dict)):
        try:
            return rfc8785.dumps(obj)
        except (ValueError, RecursionError):
            pass  # CanonicalizationError and UnicodeEncodeError are ValueErrors
    out: list[bytes] = []
    try:
        _encode(obj, "$", set(), out)
    except RecursionError:
        raise ValueError("canonical_json: value is nested too deeply to serialise") from None
    return b"".join(out)


def _encode(value: object, path: str, active: set[int], out: list[bytes]) -> None:
    """Append the canonical bytes of ``value`` to ``out``; ``active`` guards cycles."""
    if isinstance(value, dict):
        _encode_container(value, path, active, out, _encode_object)
    elif isinstance(value, (list, tuple)):
        _encode_container(value, path, active, out, _encode_array)
    elif isinstance(value, str):
        out.append(_encode_str(value))
    else:
        out.append(_encode_scalar(value, path))


def _encode_container(
    value: _Container,
    path: str,
    active: set[int],
    out: list[bytes],
    encode: Callable[[_Container, str, set[int], list[bytes]], None],
) -> None:
    """Detect reference cycles, which would otherwise surface as a RecursionError."""
    if id(value) in active:
        raise ValueError(f"canonical_json: circular reference at {path}")
    active.add(id(value))
    try:
        encode(value, path, active, out)
    finally:
        active.discard(id(value))


def _encode_object(
    value: Mapping[object, object], path: str, active: set[int], out: list[bytes]
) -> None:
    """Members sorted by the UTF-16 code units of their keys (RFC 8785 section 3.2.3)."""
    members: list[tuple[bytes, str, object]] = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(
                f"canonical_json: object key {key!r} at {path} is a {type(key).__name__}, "
                "not a str; JSON object keys must be strings (convert it explicitly)"
            )
        members.append((key.encode("utf-16-be", "surrogatepass"), key, item))
    members.sort(key=lambda member: member[0])
    out.append(b"{")
    for index, (sort_key, key, item) in enumerate(members):
        if index and sort_key == members[index - 1][0]:
            raise ValueError(
                f"canonical_json: duplicate key {key!r} at {path} once surrogate pairs are joined"
            )
        if index:
            out.append(b",")
        out.append(_encode_str(key))
        out.append(b":")
        _encode(item, _child_path(path, key), active, out)
    out.append(b"}")


def _encode_array(value: Sequence[object], path: str, active: set[int], out: list[bytes]) -> None:
    """Elements in order, comma-separated, no whitespace."""
    out.append(b"[")
    for index, item in enumerate(value):
        if index:
            out.append(b",")
        _encode(item, f"{path}[{index}]", active, out)
    out.append(b"]")


def _encode_str(text: str) -> bytes:
    """rfc8785's string form, with lone surrogates written as ``\\udxxx`` escapes."""
    try:
        return rfc8785.dumps(text)
    except ValueError:
        pass  # only surrogates make a str unencodable
    joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    out = [b'"']
    for index, part in enumerate(_SURROGATE.split(joined)):
        if index % 2:
            out.append(b"\\u%04x" % ord(part))
        elif part:
            out.append(rfc8785.dumps(part)[1:-1])
    out.append(b'"')
    return b"".join(out)


def _encode_scalar(value: object, path: str) -> bytes:
    """Numbers, booleans and null via rfc8785, with errors that say what to pass instead."""
    if value is None or isinstance(value, (bool, int, float)):
        try:
            return rfc8785.dumps(value)
        except rfc8785.FloatDomainError:
            raise ValueError(
                f"canonical_json: {value!r} at {path} is not representable: JSON (RFC 8785) "
                "has no NaN or Infinity; pass None for a missing or undefined number"
            ) from None
        except rfc8785.IntegerDomainError:
            raise ValueError(
                f"canonical_json: integer {value} at {path} is outside +-(2**53 - 1), the "
                "range JSON numbers hold exactly (RFC 8785); pass it as a string"
            ) from None
    raise ValueError(
        f"canonical_json: unsupported type {type(value).__name__} at {path}; JSON holds dict "
        "(str keys), list, tuple, str, int, float, bool and None (numpy scalars: use .item())"
    )


def _child_path(path: str, key: str) -> str:
    """``$.name`` for identifier keys, ``$["odd key"]`` otherwise (readable and unambiguous)."""
    if _IDENTIFIER.fullmatch(key):
        return f"{path}.{key}"
    return f"{path}[{json.dumps(key)}]"


def _parse_json(raw: bytes) -> JSONValue:
    """Parse strict UTF-8 JSON the way canonical bytes must be read back.

    Integers beyond +-(2**53 - 1) are read as floats (RFC 8785 writes large
    floats such as 1e20 as digit strings), and NaN/Infinity literals are
    refused, so ``canonical_json(_parse_json(b)) == b`` for canonical ``b``.
    """
    value: JSONValue = json.loads(
        raw.decode("utf-8"), parse_int=_parse_int, parse_constant=_no_constant
    )
    return value


def _parse_int(text: str) -> int | float:
    value = int(text)
    return value if -_INT_LIMIT <= value <= _INT_LIMIT else float(text)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _is_canonical(raw: bytes) -> tuple[JSONValue, bool]:
    """Parse ``raw`` and tell whether it is byte-for-byte its own canonical form."""
    value = _parse_json(raw)
    try:
        return value, canonical_json(value) == raw
    except ValueError:
        return value, False


def genesis_hash(manifest: Mapping[str, object]) -> str:
    """SHA-256 of the manifest header, the ``prev`` of the first results line."""
    header = {key: value for key, value in manifest.items() if key not in RESERVED_MANIFEST_KEYS}
    return sha256_hex(canonical_json(header))


def utc_now_rfc3339() -> str:
    """Current UTC time as RFC 3339 with milliseconds and a ``Z`` suffix."""
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
    return now.replace("+00:00", "Z")


def parse_rfc3339(text: object) -> datetime | None:
    """*text* read as an RFC 3339 / ISO 8601 time (a ``Z`` suffix too, which Python 3.10's
    ``fromisoformat`` does not take); None when it is no such text. Naive when *text*
    gives no offset: what that means is the caller's to decide. None too for a time that
    is in UTC outside the years 1 to 9999 (``9999-12-31T23:59:59-01:00``): every reader
    turns a time into UTC, where Python's dates would overflow."""
    if not isinstance(text, str):
        return None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
        if when.tzinfo is not None:
            when.astimezone(timezone.utc)
    except (ValueError, OverflowError):
        return None
    return when


# --------------------------------------------------------------------------
# Whatever an agent returns, made JSON-safe
# --------------------------------------------------------------------------


def json_safe(
    value: object, *, text: Callable[[str], str] | None = None
) -> tuple[JSONValue, list[dict[str, str]]]:
    """A copy of ``value`` that :func:`canonical_json` accepts, and notes on what changed.

    Nothing an agent returns may stop a run, and evidence must keep it
    exactly; canonical JSON holds less than Python does. So each value it
    cannot hold becomes a string from which the value can be read back:

    * an integer beyond +-(2**53 - 1): its decimal digits (``"1180591620717411303424"``;
      hex with a ``0x`` prefix beyond Python's 4300-digit conversion limit)
    * NaN and the infinities: ``"NaN"``, ``"Infinity"``, ``"-Infinity"``
    * a non-string object key: ``str(key)``; when that collides with another
      key, `` (<type>)`` and then `` #2``... are appended, so nothing is overwritten
    * bytes: decoded as UTF-8 with ``surrogateescape`` (an undecodable byte
      becomes a lone surrogate, which canonical JSON escapes and keeps)
    * a set: a list, sorted by ``repr``
    * anything else (a datetime, a Path, a Decimal, a custom object): ``str(value)``
    * a reference cycle: ``"<circular reference to $.path>"``; nesting deeper
      than 200 levels: the subtree as one JSON text

    Tuples become lists and subclasses of bool, int, float and str the plain
    type without a note (JSON cannot tell them apart). Each note is
    ``{"path": "$.tool_calls[0].arguments.n", "was": "int"}``; at most 100
    are listed, then one note says how many more there were. With *text* (a
    redactor), every string of the copy, keys included, goes through it in the
    same walk. Never raises.
    """
    walker = _SafeWalker(text)
    safe = walker.value(value, "$", 0)
    return safe, walker.finish()


class Streamed:
    """A JSON array whose items are made as it is read, each time it is read.

    :func:`write_indented_json` writes its items one by one, so that a large
    document (summary.json's nodes: one per scenario) never exists whole in
    memory, neither as objects nor as text.
    """

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[], Iterable[object]]) -> None:
        self._make = make

    def __iter__(self) -> Iterator[object]:
        return iter(self._make())


def streams(value: object) -> bool:
    """Whether *value* is, or holds, a :class:`Streamed` array (in a dict, list or tuple)."""
    if isinstance(value, Streamed):
        return True
    if isinstance(value, dict):
        return any(streams(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(streams(v) for v in value)
    return False


_INDENTED = json.JSONEncoder(indent=2, ensure_ascii=False)
#: one streamed item per line: the C encoder (an indented document is encoded in Python)
_ONE_LINE = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "))


def write_indented_json(
    value: object, out: BinaryIO, *, clean: Callable[[object], object] | None = None
) -> None:
    """*value* as UTF-8 JSON indented by 2, written to *out* piece by piece.

    The text never exists whole in memory. A lone surrogate, which UTF-8
    cannot hold, is written as its ``\\udxxx`` escape (it can only be inside a
    string), so the file reads back to the same value. *clean* (e.g.
    :func:`json_safe` with a redactor) is applied to each part as it is written:
    to the whole of a value with no :class:`Streamed` array in it, else to each
    key, to each item of a streamed array and to each value beside one. A
    streamed array's plain items are written one per line.
    """
    for chunk in _indented(value, 0, clean or _as_is):
        try:
            out.write(chunk.encode("utf-8"))
        except UnicodeEncodeError:
            out.write(_SURROGATE.sub(_surrogate_escape, chunk).encode("utf-8"))
    out.write(b"\n")


def _as_is(value: object) -> object:
    return value


def _indented(value: object, level: int, clean: Callable[[object], object]) -> Iterator[str]:
    if not streams(value):
        chunks = _INDENTED.iterencode(clean(value))
        if not level:
            yield from chunks
            return
        # the encoder escapes every newline inside a string: each one here starts a line
        pad = "\n" + "  " * level
        for chunk in chunks:
            yield chunk.replace("\n", pad)
        return
    inner, outer = "\n" + "  " * (level + 1), "\n" + "  " * level
    if isinstance(value, dict):
        sep = "{"
        for key, item in value.items():
            yield sep + inner + _ONE_LINE.encode(clean(str(key))) + ": "
            sep = ","
            yield from _indented(item, level + 1, clean)
        yield outer + "}"
        return
    items = cast("Iterable[object]", value)
    sep = "["
    for item in items:
        yield sep + inner
        sep = ","
        if isinstance(value, Streamed) and not streams(item):
            yield _ONE_LINE.encode(clean(item))
        else:
            yield from _indented(item, level + 1, clean)
    yield "[]" if sep == "[" else outer + "]"


def _surrogate_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def json_safe_record(
    record: Mapping[str, object], *, text: Callable[[str], str] | None = None
) -> JSONObject:
    """``record`` made JSON-safe; when anything was converted, the notes go under ``"converted"``.

    Notes already present (a record converted once on an xdist worker) are
    kept and new ones appended, so the marker survives a second pass. With
    *text* (a redactor), every string of the result — values, keys, the text a
    converted value became, the notes' paths — goes through it in the same
    walk: text made from an odd value is redacted too.
    """
    walker = _SafeWalker(text)
    # the record itself is not a container being walked, as for json_safe(dict(record))
    safe = walker.mapping(record, "$", 0)
    notes = walker.finish()
    if notes:
        earlier = safe.get(CONVERTED_KEY)
        listed: list[JSONValue] = [
            {"path": text(note["path"]) if text else note["path"], "was": note["was"]}
            for note in notes
        ]
        safe[CONVERTED_KEY] = (earlier if isinstance(earlier, list) else []) + listed
    return safe


def _plain_line(record: Mapping[str, object], head: str, walked: bool = False) -> bytes | None:
    """The chain line of a record that is plain JSON already; None when it needs the walk.

    A record made JSON-safe once (on the worker that graded it, and redacted in
    the same walk) is written without walking it again: canonical JSON accepts
    exactly what the walk would leave unchanged (strings, finite floats, ints
    within 2**53, lists, tuples and string-keyed dicts), and refuses the rest.
    *walked*: the record is :func:`json_safe_record`'s output, so the C encoder may
    write it (:func:`walked_canonical_json`).
    """
    line: dict[str, object] = {**record, PREV_KEY: head}
    if walked:
        fast = walked_canonical_json(cast("JSONObject", line))
        if fast is not None:
            return fast
    try:
        # rfc8785 checks every value itself: what it cannot write, it refuses
        return rfc8785.dumps(cast("JSONObject", line))
    except Exception:  # anything it refuses (NaN, 2**60, a set, a lone surrogate...)
        return None


#: What json.dumps writes differently from RFC 8785, outside strings: a float ending in
#: ``.0`` (``1.0``, ``-0.0``; RFC 8785: ``1``, ``0``), or in exponent form (``1e-05``,
#: ``1e+16``; RFC 8785: ``0.00001``, ``10000000000000000``; Python always signs the
#: exponent), and an integer that may lie beyond 2**53 (16 digits or more). A number is
#: never next to a dot (as in the 127.0.0.1 of an address or a version 1.0.0), and the
#: 17 digits of a float's fraction are written alike. Found anywhere in the text (a
#: string may hold one), the numbers between the strings are looked at one by one.
#: RE2 (linear time) looks through a record's line 6-15 times faster than ``re``.
_MAYBE_UNLIKE = re2.compile(rb"(?:^|[^\d.])\d+\.0(?:[^\d.]|$)|\de[-+]\d|(?:^|[^\d.])\d{16}")
#: A JSON string, its escapes included (a capturing group: ``split`` keeps them).
_STRINGS = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")')
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]\d+)?")
#: Keys order by UTF-16 code units in RFC 8785 and by code points in Python: the two
#: differ only where a character beyond U+FFFF is compared.
_BEYOND_BMP = re.compile("[\U00010000-\U0010ffff]")


def walked_canonical_json(obj: JSONObject) -> bytes | None:
    """``rfc8785.dumps(obj)``, byte for byte, written by the C JSON encoder; None when it
    cannot vouch for that (the caller then asks rfc8785).

    Only for what :func:`json_safe_record` returns: string keys, integers within
    2**53, finite floats. json.dumps would write an integer key as a string where
    RFC 8785 refuses it, and nothing here could tell. Canonical JSON of each record
    was a tenth of a large run's CPU in rfc8785's pure Python; this is three to five
    times faster, and the tests hold it to rfc8785's bytes. The numbers JSON writes
    otherwise (``1.0``, ``1e-05``) are made RFC 8785's before the encoder sees them
    (:class:`_Numbers`); a value of another type (a str subclass, say) is written
    and the text's numbers looked at one by one where any may differ.
    """
    numbers = _Numbers()
    try:
        as_written: object = numbers.value(obj)
        numbers_written = True
    except (_Unlike, RecursionError):
        as_written, numbers_written = obj, False  # the numbers are looked at in the text
    try:
        text = json.dumps(
            as_written, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
        )
    except (TypeError, ValueError, RecursionError):
        return None
    if numbers_written:
        restored = numbers.restore(text)
        if restored is None:
            return None
        text = restored
    if not text.isascii() and _BEYOND_BMP.search(text):
        return None
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: canonical_json writes it as an escape
        return None
    if numbers_written or _MAYBE_UNLIKE.search(data) is None:
        return data
    parts = _STRINGS.split(text)  # strings at the odd places, the rest between
    try:
        for i in range(0, len(parts), 2):
            piece = parts[i]
            if "." in piece or "e+" in piece or "e-" in piece or len(piece) > 16:
                parts[i] = _NUMBER.sub(_canonical_number, piece)
    except ValueError:  # an integer beyond 2**53
        return None
    return "".join(parts).encode("utf-8")


class _Unlike(Exception):
    """A value json.dumps cannot be made to write as RFC 8785 does (see below)."""


#: Stands in for a number written in exponent form, as ``"<mark>3<mark>"`` (the mark is
#: random per process: a string an agent wrote cannot be taken for one; were it in the
#: text all the same, the count of marks would not add up, and rfc8785 writes the line).
_MARK = "\ue000" + secrets.token_hex(16)
_MARKED = re.compile(f'"{_MARK}(\\d+){_MARK}"')


class _Numbers:
    """One pass of :func:`walked_canonical_json` over a value's numbers.

    An integral float (``1.0``, ``-0.0``) becomes the int RFC 8785 writes for it
    (``1``, ``0``); a float Python writes in exponent form (below 1e-4, from 1e16
    on) becomes a marked string that :meth:`restore` replaces by RFC 8785's digits.
    Every other float Python writes as RFC 8785 does: the shortest digits that read
    back, without an exponent. Containers are copied only where something changed.
    Raises :class:`_Unlike` for an integer beyond 2**53, a float that is not finite,
    or a value of another type than JSON's own.
    """

    def __init__(self) -> None:
        self.exponents: list[str] = []

    def value(self, value: object) -> object:
        kind = type(value)
        if kind is str or kind is bool or value is None:
            return value
        if kind is int:
            if -_INT_LIMIT <= cast(int, value) <= _INT_LIMIT:
                return value
            raise _Unlike
        if kind is float:
            return self.number(cast(float, value))
        if kind is dict:
            mapping = cast("dict[object, object]", value)
            changed: dict[object, object] | None = None
            for key, item in mapping.items():
                kind = type(item)
                if kind is str or item is None or kind is bool:  # most values: no call
                    continue
                written = self.value(item)
                if written is not item:
                    if changed is None:
                        changed = dict(mapping)
                    changed[key] = written
            return mapping if changed is None else changed
        if kind is list or kind is tuple:
            items = cast("list[object] | tuple[object, ...]", value)
            written_items = [self.value(item) for item in items]
            if all(a is b for a, b in zip(written_items, items, strict=True)):
                return items
            return written_items
        raise _Unlike

    def number(self, number: float) -> object:
        size = abs(number)
        if 1e-4 <= size < 1e16:
            return int(number) if number.is_integer() else number
        if size == 0.0:
            return 0
        if not math.isfinite(number):
            raise _Unlike
        self.exponents.append(rfc8785.dumps(number).decode("ascii"))
        return f"{_MARK}{len(self.exponents) - 1}{_MARK}"

    def restore(self, text: str) -> str | None:
        """*text* with the marked strings as RFC 8785's numbers; None when the marks in it
        are not exactly those this pass made."""
        if not self.exponents:
            return text if _MARK not in text else None
        if text.count(_MARK) != 2 * len(self.exponents):
            return None
        return _MARKED.sub(lambda m: self.exponents[int(m.group(1))], text)


def _canonical_number(match: re.Match[str]) -> str:
    token = match.group()
    if "." in token or "e" in token:
        return rfc8785.dumps(float(token)).decode("ascii")
    if len(token) > 15 and not -_INT_LIMIT <= int(token) <= _INT_LIMIT:
        raise ValueError(token)
    return token


#: Where a value sits, built as the walk goes down and written out (``$.a[2]``) only for a
#: note: a parent path and a key (a name or an index), or ``"$"``.
_Path = str | tuple["_Path", str | int]


def _render(path: _Path) -> str:
    keys: list[str | int] = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    for key in reversed(keys):
        path = f"{path}[{key}]" if isinstance(key, int) else _child_path(path, key)
    return path


class _SafeWalker:
    """One pass of :func:`json_safe`: the notes so far and the containers being walked.

    Plain values (exactly ``str``, ``int``, ``float``, ``bool``, ``None``, ``dict``
    with plain string keys, ``list``) take the short way; anything else, the general
    one. Both give the same result.

    When *text* is the method of a redactor that holds a secret made of digits
    (``Redactor.redacts_numbers``), a number whose decimal text holds it becomes that
    text, redacted (``Redactor.number``). Decided once per walk: otherwise the short
    way of numbers is exactly as it was, with no test per value."""

    def __init__(self, text: Callable[[str], str] | None = None) -> None:
        self.notes: list[dict[str, str]] = []
        self.more = 0
        self.active: dict[int, _Path] = {}  # id of a container being walked -> its path
        self.text = text
        owner: Any = getattr(text, "__self__", None)  # the redactor whose method *text* is
        self.digits: Callable[[int | float], JSONValue] | None = (
            owner.number if getattr(owner, "redacts_numbers", False) else None
        )
        if self.digits is not None:
            self.value = self._value_or_digits  # type: ignore[method-assign]

    def note(self, path: _Path, was: str) -> None:
        if len(self.notes) < _MAX_NOTES:
            self.notes.append({"path": _render(path), "was": was})
        else:
            self.more += 1

    def finish(self) -> list[dict[str, str]]:
        """The notes, closed by a count of those beyond the cap."""
        if self.more:
            self.notes.append({"path": "$", "was": f"{self.more} more values (not listed)"})
        return self.notes

    def value(self, value: object, path: _Path, depth: int) -> JSONValue:
        # the hot path of a large run (a hundred values a record): Any, not cast() calls
        plain: Any = value
        kind = type(plain)
        if kind is str:
            return plain if self.text is None else self.text(plain)
        if kind is float:
            if math.isfinite(plain):
                return plain  # type: ignore[no-any-return]
        elif kind is int:
            if -_INT_LIMIT <= plain <= _INT_LIMIT:
                return plain  # type: ignore[no-any-return]
        elif kind is bool or plain is None:
            return plain  # type: ignore[no-any-return]
        elif (kind is dict or kind is list) and depth < _MAX_DEPTH and id(plain) not in self.active:
            try:
                return self.contents(plain, path, depth)
            except Exception:  # as the general way: a hostile value inside stops nothing
                return self._shown(self._unreadable(value, path))
        return self._shown(self._value(value, path, depth))

    def _value_or_digits(self, value: object, path: _Path, depth: int) -> JSONValue:
        """:meth:`value` for a walk whose redactor has a secret made of digits: a number
        goes through :meth:`integer` or :meth:`number`, which redact its digits."""
        plain: Any = value
        kind = type(plain)
        if kind is int:
            return self._shown(self.integer(plain, path))
        if kind is float:
            return self._shown(self.number(plain, path))
        return _SafeWalker.value(self, value, path, depth)

    def _shown(self, safe: JSONValue) -> JSONValue:
        """*safe*, redacted when it is text."""
        if self.text is not None and isinstance(safe, str):
            return self.text(safe)
        return safe

    def _unreadable(self, value: object, path: _Path) -> str:
        self.note(path, f"unreadable {type(value).__name__}")
        return _text_of(value)

    def _value(self, value: object, path: _Path, depth: int) -> JSONValue:
        if value is None or isinstance(value, bool):
            return None if value is None else bool(value)
        if isinstance(value, str):
            return str.__str__(value)
        if isinstance(value, float):
            return self.number(float(value), path)
        if isinstance(value, int) or _has_index(value):
            try:
                number = operator.index(value)  # int subclasses, numpy integers
            except Exception:
                pass  # numpy arrays have __index__ too: handled below
            else:
                return self.integer(number, path)
        try:
            return self.composite(value, path, depth)
        except Exception:  # a hostile __iter__/__str__ must not stop the run either
            return self._unreadable(value, path)

    def integer(self, number: int, path: _Path) -> JSONValue:
        if -_INT_LIMIT <= number <= _INT_LIMIT:
            return number if self.digits is None else self.digits(number)
        self.note(path, "int")
        try:
            return str(number)
        except ValueError:  # beyond sys.get_int_max_str_digits(): hex has no such limit
            return hex(number)

    def number(self, number: float, path: _Path) -> JSONValue:
        if math.isfinite(number):
            return number if self.digits is None else self.digits(number)
        self.note(path, "float")
        if math.isnan(number):
            return "NaN"
        return "Infinity" if number > 0 else "-Infinity"

    def composite(self, value: object, path: _Path, depth: int) -> JSONValue:
        if isinstance(value, (bytes, bytearray, memoryview)):
            self.note(path, "bytes")
            return bytes(value).decode("utf-8", "surrogateescape")
        if not isinstance(value, (Mapping, list, tuple, set, frozenset)):
            tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
            self.note(path, type(value).__name__)
            if callable(tolist) and depth < _MAX_DEPTH:
                return self.value(tolist(), path, depth + 1)
            return _text_of(value)
        if depth >= _MAX_DEPTH:
            self.note(path, f"nesting deeper than {_MAX_DEPTH} levels (kept as JSON text)")
            return _deep_text(value)
        if id(value) in self.active:
            self.note(path, "circular reference")
            return f"<circular reference to {_render(self.active[id(value)])}>"
        return self.contents(value, path, depth)

    def contents(
        self,
        value: Mapping[_Key, object]
        | list[object]
        | tuple[object, ...]
        | set[object]
        | frozenset[object],
        path: _Path,
        depth: int,
    ) -> JSONValue:
        """A container's contents, walked while it is marked as being walked (a circular
        reference to it is then noted, not followed)."""
        self.active[id(value)] = path
        try:
            if type(value) is dict or isinstance(value, Mapping):
                return self.mapping(value, path, depth)
            if isinstance(value, (set, frozenset)):
                self.note(path, type(value).__name__)
                items: Iterable[object] = sorted(value, key=repr)
            else:
                items = value
            return [self.value(item, (path, i), depth + 1) for i, item in enumerate(items)]
        finally:
            del self.active[id(value)]

    def mapping(self, value: Mapping[_Key, object], path: _Path, depth: int) -> JSONObject:
        pairs: list[tuple[Any, object]] = list(value.items())
        keys = tuple(k for k, _ in pairs)
        if self._plain_keys(keys, type(value) is dict):
            # distinct plain names that redaction leaves alone (the usual case)
            return {k: self.value(item, (path, k), depth + 1) for k, item in pairs}
        text = self.text
        # string keys keep their names; converted keys give way when they collide
        taken = {_joined(str.__str__(k)) for k, _ in pairs if isinstance(k, str)}
        out: JSONObject = {}
        for key, item in pairs:
            if isinstance(key, str):
                name = _joined(str.__str__(key))
                if name in out:  # a surrogate pair held as two code points, and its character
                    name = _free_name(name, "str", taken)
                    self.note((path, name), "str key (duplicate once joined)")
            else:
                name = _free_name(_text_of(key), type(key).__name__, taken)
                self.note((path, name), f"{type(key).__name__} key")
            taken.add(name)
            shown = name if text is None else text(name)
            out[shown] = self.value(item, (path, name), depth + 1)
        return out

    def _plain_keys(self, keys: tuple[Any, ...], distinct: bool) -> bool:
        """Are *keys* distinct strings without a lone surrogate, that redaction leaves alone?

        A record's mappings have a few dozen shapes (a cost, a criterion, a judge's
        meta), so the answer for a small shape is kept per redactor, and a record's
        keys are not redacted one by one again (*distinct*: they come from a dict).
        Exactly ``str`` keys are looked up: a subclass's own ``__eq__`` or
        ``__hash__`` could pass for a cached name."""
        if not all(type(k) is str for k in keys):
            return False
        cache = _plain_key_cache(self.text) if distinct else None
        if cache is not None and keys in cache:
            return True
        if (
            _SURROGATE.search("".join(keys))
            or not (distinct or len(set(keys)) == len(keys))  # items() may repeat
            or (self.text is not None and [self.text(k) for k in keys] != list(keys))
        ):
            return False
        small = len(keys) <= _PLAIN_KEYS_MAX_KEYS and sum(map(len, keys)) <= _PLAIN_KEYS_MAX_CHARS
        if cache is not None and small:
            if len(cache) >= _PLAIN_KEYS_MAX:
                cache.clear()
            cache.add(keys)
        return True


#: Key sets :meth:`_SafeWalker._plain_keys` found plain: without redaction, and per
#: redactor (the object whose method redacts, held weakly: a finished run's redactor
#: goes with it). Only small sets (a record's own shapes), and at most 512 of them
#: per redactor: keys an agent made up in every answer cannot fill memory.
_PLAIN_KEYS_UNREDACTED: set[tuple[str, ...]] = set()
_PLAIN_KEYS: weakref.WeakKeyDictionary[object, dict[object, set[tuple[str, ...]]]] = (
    weakref.WeakKeyDictionary()
)
_PLAIN_KEYS_MAX = 512
_PLAIN_KEYS_MAX_KEYS = 32
_PLAIN_KEYS_MAX_CHARS = 1024


def _plain_key_cache(text: Callable[[str], str] | None) -> set[tuple[str, ...]] | None:
    """The key sets found plain under *text*; None where nothing is kept (a redacting
    function that is not the method of an object that can be weakly referenced)."""
    if text is None:
        return _PLAIN_KEYS_UNREDACTED
    owner, function = getattr(text, "__self__", None), getattr(text, "__func__", None)
    if owner is None or function is None:
        return None
    try:
        per_owner = _PLAIN_KEYS.setdefault(owner, {})
    except TypeError:  # not weakly referenceable
        return None
    return per_owner.setdefault(function, set())


def _has_index(value: object) -> TypeGuard[SupportsIndex]:
    """Whether ``value``'s type defines ``__index__`` (which may still refuse, as numpy arrays do)."""
    return hasattr(type(value), "__index__")


def _free_name(base: str, type_name: str, taken: set[str]) -> str:
    """``base``, else ``base (type)``, else ``base (type) #2``...: the first name not taken."""
    if base not in taken:
        return base
    candidate = f"{base} ({type_name})"
    number = 1
    while candidate in taken:
        number += 1
        candidate = f"{base} ({type_name}) #{number}"
    return candidate


def _joined(text: str) -> str:
    """Join surrogate pairs held as two code points, as canonical JSON will."""
    if not _SURROGATE.search(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")


def _text_of(value: object) -> str:
    try:
        text = str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
    return text if isinstance(text, str) else f"<unprintable {type(value).__name__}>"


def _deep_text(value: object) -> str:
    try:
        return json.dumps(value, default=_text_of, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return f"<nested deeper than {_MAX_DEPTH} levels; not representable>"


def is_seal(record: object) -> TypeGuard[JSONObject]:
    """Whether a parsed results line is the seal record (readers of records skip it)."""
    return isinstance(record, dict) and record.get("kind") == SEAL_KIND


# --------------------------------------------------------------------------
# Atomic files and SHA256SUMS
# --------------------------------------------------------------------------


def write_file_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see the old file or the new one, never half.

    The bytes go to a temporary file in the same directory, are flushed and
    fsynced, and the temporary file is renamed over ``path``. On any error
    (a full disk, say) the temporary file is removed and the error
    propagates; ``path`` is untouched. Missing parent directories are
    created. Other writers call this for their files before
    :meth:`EvidenceWriter.finalize`, so SHA256SUMS covers them.
    """
    write_file_atomic_with(path, lambda out: _write_all(out.fileno(), data))


def write_file_atomic_with(path: Path, fill: Callable[[BinaryIO], object]) -> None:
    """:func:`write_file_atomic` for a file written in pieces: *fill* writes into the
    temporary file (a report streamed from its spool never exists whole in memory)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _create_temp_beside(path: Path) -> tuple[int, Path]:
    """Exclusively create a hidden temp file next to ``path`` (umask-respecting mode)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"could not create a temporary file beside {path}")


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` may write less than asked; loop until every byte is out."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    """Persist a rename on POSIX; best effort (directories cannot be opened on Windows)."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _scan(run_dir: Path) -> tuple[list[str], list[str]]:
    """Relative posix paths of regular files and of other non-directory entries.

    Symlinks are never followed: a run directory holds only regular files,
    and a link could point the checksums at something outside it.
    """
    regular: list[str] = []
    other: list[str] = []
    stack: list[tuple[str, str]] = [("", os.fspath(run_dir))]
    while stack:
        prefix, directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if entry.is_dir(follow_symlinks=False):
                    stack.append((rel + "/", entry.path))
                elif entry.is_file(follow_symlinks=False):
                    regular.append(rel)
                else:
                    other.append(rel)
    return regular, other


class _Unreadable(EvidenceError):
    """A file that evidence is never read from: not a regular file, too large, or changing."""


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
    )
    return next((name for test, name in kinds if test(mode)), "special file")


def _open_regular(path: Path | str, dir_fd: int | None = None) -> tuple[int, int]:
    """Open a regular file for reading; return the descriptor and the file's size.

    ``lstat`` first, so a FIFO (whose open blocks until a writer comes), a
    device (``/dev/zero`` never ends) or a symlink is never opened at all;
    then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat`` on what was opened, so a
    swap between the two calls is refused as well. Symlinks among *path*'s
    folders are followed: see :func:`_open_listed`. *path* is relative to
    the open folder *dir_fd* when one is given.
    """
    mode = os.lstat(path, dir_fd=dir_fd).st_mode
    if not stat.S_ISREG(mode):
        raise _Unreadable(f"not a regular file ({_kind(mode)}); refused")
    try:
        fd = os.open(path, os.O_RDONLY | _O_BINARY | _O_NOFOLLOW | _O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _Unreadable("not a regular file (symlink); refused") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _Unreadable(f"not a regular file ({_kind(info.st_mode)}); refused")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def _chunks(fd: int, size: int) -> Iterator[bytes]:
    """The file's bytes in chunks, never more than the ``size`` it had when opened."""
    left = size
    while left > 0:
        chunk = os.read(fd, min(_CHUNK, left))
        if not chunk:
            return  # it shrank: whatever checks the bytes will not match
        left -= len(chunk)
        yield chunk
    if os.read(fd, 1):
        raise _Unreadable("changed while being read (still being written?)")


def _hash_file(path: Path) -> str:
    """Stream a regular file through SHA-256 so large reports do not sit in memory."""
    fd, size = _open_regular(path)
    try:
        digest = hashlib.sha256()
        for chunk in _chunks(fd, size):
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _read_small(path: Path) -> bytes:
    """The whole of a regular file that is expected to be small (manifest, SHA256SUMS)."""
    limit = _MAX_SMALL_FILE
    fd, size = _open_regular(path)
    try:
        if size > limit:
            raise _Unreadable(f"too large ({size} bytes; the limit is {limit})")
        return b"".join(_chunks(fd, size))
    finally:
        os.close(fd)


def _lines_of(fd: int, size: int) -> Iterator[bytes]:
    """Lines with their b'\\n' (the last may lack it), from at most ``size`` bytes.

    Splits on b'\\n' only, the one byte canonical JSON never holds raw. A line
    longer than ``limit`` raises :class:`_Unreadable` instead of filling memory.
    """
    limit = _MAX_LINE
    pending = bytearray()
    for chunk in _chunks(fd, size):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            pending += chunk[start : end + 1]
            yield bytes(pending)
            pending.clear()
            start = end + 1
        pending += chunk[start:]
        if len(pending) > limit:
            raise _Unreadable(f"line longer than {limit} bytes; not read")
    if pending:
        yield bytes(pending)


def build_sha256sums(run_dir: Path) -> bytes:
    """The SHA256SUMS content for every regular file under ``run_dir`` at this moment.

    Sorted by the path's bytes (as ``LC_ALL=C sort`` would), so the file is
    deterministic. A file name containing a newline cannot be listed in
    this format and raises :class:`ValueError`.
    """
    run_dir = Path(run_dir)
    regular, _ = _scan(run_dir)
    lines: list[bytes] = []
    for rel in sorted((r for r in regular if r != SUMS_NAME), key=os.fsencode):
        raw = os.fsencode(rel)
        if b"\n" in raw:
            raise ValueError(f"cannot list {rel!r} in {SUMS_NAME}: file name contains a newline")
        lines.append(_hash_file(run_dir / rel).encode("ascii") + b"  " + raw + b"\n")
    return b"".join(lines)


def _seal_files(run_dir: Path) -> dict[str, str]:
    """SHA-256 of every file the seal binds: all regular files but results.jsonl and SHA256SUMS."""
    regular, _ = _scan(run_dir)
    return {
        rel: _hash_file(run_dir / rel)
        for rel in sorted(regular, key=os.fsencode)
        if rel not in (RESULTS_NAME, SUMS_NAME)
    }


# --------------------------------------------------------------------------
# Writing a run
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Completion:
    """The manifest's completion record: how the item records ended."""

    chain_head: str
    records: int
    ended_at: str
    interrupted: bool
    not_evaluated: int

    def to_json(self) -> JSONObject:
        return {
            "chain_head": self.chain_head,
            "records": self.records,
            "ended_at": self.ended_at,
            "interrupted": self.interrupted,
            "not_evaluated": self.not_evaluated,
        }


def _manifest_header(manifest: Mapping[str, object]) -> dict[str, object]:
    """Validate a caller's manifest and return its header (reserved keys removed)."""
    if not isinstance(manifest, Mapping):
        raise TypeError(f"manifest must be a mapping, not {type(manifest).__name__}")
    if "completion" in manifest:
        raise ValueError("manifest must not contain 'completion': finalize() writes it")
    if manifest.get("completed", False) is not False:
        raise ValueError("manifest 'completed' must be absent or false: finalize() sets it")
    return {key: value for key, value in manifest.items() if key not in RESERVED_MANIFEST_KEYS}


class EvidenceWriter:
    """Append-only writer for one run directory; see the module docstring for the format.

    Each :meth:`append` is written straight to the file descriptor (no
    user-space buffer), so a crash loses at most the record being written.
    A failed write is rolled back by truncating to the last complete line;
    if even that fails the writer refuses further records rather than
    chaining onto a half line. ``fsync_each_record`` also forces each line to
    the disk, at a large cost per record; :meth:`finalize` always fsyncs.

    Used as a context manager, leaving the block finalizes the run, marked
    interrupted when the block raised.
    """

    def __init__(
        self, run_dir: Path, manifest: Mapping[str, object], *, fsync_each_record: bool = False
    ) -> None:
        header = _manifest_header(manifest)
        header_bytes = canonical_json(header)  # fail before touching the disk
        self._run_dir = Path(run_dir)
        detached = _parse_json(header_bytes)  # a deep copy the caller cannot change
        if not isinstance(detached, dict):  # canonical_json of a dict is an object
            raise TypeError("manifest header did not read back as a JSON object")
        self._header: JSONObject = detached
        self._head = sha256_hex(header_bytes)
        self._records = 0
        self._size = 0
        self._fsync_each = fsync_each_record
        self._lock = threading.Lock()
        self._poisoned = False
        self._finalized = False
        self._sealed = False
        self._completion: _Completion | None = None
        self._run_dir.mkdir(parents=True, exist_ok=True)
        self._refuse_existing_run()
        self._fd: int | None = self._create_results()
        try:
            initial = canonical_json({**self._header, "completed": False})
            write_file_atomic(self._run_dir / MANIFEST_NAME, initial)
        except BaseException:
            self.close()
            with contextlib.suppress(OSError):
                os.unlink(self._run_dir / RESULTS_NAME)
            raise

    @property
    def run_dir(self) -> Path:
        """The run directory being written."""
        return self._run_dir

    @property
    def head(self) -> str:
        """The current chain head: the genesis hash before the first record, the seal's after finalize()."""
        return self._head

    @property
    def records(self) -> int:
        """Number of records appended so far (the seal is not one of them)."""
        return self._records

    def _refuse_existing_run(self) -> None:
        """Evidence is never overwritten or extended by a second writer."""
        for name in (MANIFEST_NAME, RESULTS_NAME, SUMS_NAME):
            path = self._run_dir / name
            if path.exists() or path.is_symlink():
                raise FileExistsError(
                    f"{self._run_dir} already holds a run ({name} exists); "
                    "refusing to overwrite evidence"
                )

    def _create_results(self) -> int:
        """O_EXCL makes two writers racing for one directory fail instead of interleave."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _O_BINARY
        return os.open(self._run_dir / RESULTS_NAME, flags, 0o666)

    def append(self, record: Mapping[str, object], *, walked: bool = False) -> str:
        """Write one record as the next chain link and return the new head.

        The record goes through :func:`json_safe_record` first: a big integer,
        NaN or a non-string key from an agent is kept as a string and noted
        under ``"converted"``, never refused. *walked*: the caller made *record*
        with :func:`json_safe_record` already (string keys only), so it is
        written by the faster encoder.
        """
        if not isinstance(record, dict):
            raise TypeError(f"record must be a dict, not {type(record).__name__}")
        if PREV_KEY in record:
            raise ValueError(f"record must not contain the key {PREV_KEY!r}: the chain sets it")
        if is_seal(record):
            raise ValueError(f"'kind': {SEAL_KIND!r} is reserved for the record finalize() writes")
        with self._lock:
            fd = self._require_appendable()
            line = _plain_line(record, self._head, walked)
            if line is None:
                line = canonical_json({**json_safe_record(record), PREV_KEY: self._head})
            self._write_line(fd, line)
            self._head = sha256_hex(line)
            self._records += 1
            return self._head

    def _require_appendable(self) -> int:
        if self._finalized:
            raise RuntimeError("EvidenceWriter.append after finalize()")
        if self._poisoned:
            raise RuntimeError(
                f"{RESULTS_NAME} may end in a partial line after a failed write; "
                "refusing to extend the chain (finalize() to seal what is there)"
            )
        if self._fd is None:
            raise RuntimeError("EvidenceWriter.append after close()")
        return self._fd

    def _write_line(self, fd: int, line: bytes) -> None:
        """Write ``line`` + newline, or leave the file as it was (or poison the writer)."""
        data = line + b"\n"
        try:
            _write_all(fd, data)
            if self._fsync_each:
                os.fsync(fd)
        except BaseException:
            try:
                os.ftruncate(fd, self._size)
            except OSError:
                self._poisoned = True
            raise
        self._size += len(data)

    def close(self) -> None:
        """Release the results file without sealing; the run stays unsealed until finalize()."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def finalize(
        self, *, interrupted: bool = False, not_evaluated: int = 0, ended_at: str | None = None
    ) -> str:
        """Seal the run and return its final chain head (the seal record's hash).

        In this order: the manifest is rewritten with its completion record;
        the seal (the SHA-256 of every other file of the directory, and the
        completion status) is appended to results.jsonl and synced; then
        SHA256SUMS is written. Every file must therefore be written before.
        If a step fails (disk full), the error propagates and finalize() may
        be called again: it resumes after the last step that succeeded. A
        writer poisoned by a half-written line writes no seal (it would join
        that line); verification then reports the partial line.
        """
        _check_finalize_args(interrupted, not_evaluated, ended_at)
        with self._lock:
            if self._finalized:
                raise RuntimeError("EvidenceWriter.finalize() called twice")
            if self._completion is None:
                self._completion = _Completion(
                    chain_head=self._head,
                    records=self._records,
                    ended_at=ended_at if ended_at is not None else utc_now_rfc3339(),
                    interrupted=interrupted,
                    not_evaluated=not_evaluated,
                )
            completion = self._completion
            if not self._sealed:
                manifest = {
                    **self._header,
                    "completed": not completion.interrupted,
                    "completion": completion.to_json(),
                }
                write_file_atomic(self._run_dir / MANIFEST_NAME, canonical_json(manifest))
                self._append_seal(completion)
            write_file_atomic(self._run_dir / SUMS_NAME, build_sha256sums(self._run_dir))
            self._finalized = True
            return self._head

    def _append_seal(self, completion: _Completion) -> None:
        """The last link: binds every other file, and the completion status, to the head."""
        if self._poisoned:
            self.close()
            self._sealed = True
            return
        seal = {
            "kind": SEAL_KIND,
            "files": _seal_files(self._run_dir),
            "completed": not completion.interrupted,
            "interrupted": completion.interrupted,
            "not_evaluated": completion.not_evaluated,
            "records": completion.records,
            "ended_at": completion.ended_at,
            PREV_KEY: self._head,
        }
        line = canonical_json(seal)
        fd = self._fd if self._fd is not None else self._reopen_results()
        self._fd = fd
        self._write_line(fd, line)
        self._head = sha256_hex(line)
        self._sealed = True  # before the sync: a retry must not append a second seal
        self._sync_and_close()

    def _reopen_results(self) -> int:
        """After close(): the results file again, for the seal (never through a symlink)."""
        flags = os.O_WRONLY | os.O_APPEND | _O_BINARY | _O_NOFOLLOW
        return os.open(self._run_dir / RESULTS_NAME, flags)

    def _sync_and_close(self) -> None:
        if self._fd is None:
            return
        try:
            os.fsync(self._fd)
        finally:
            self.close()

    def __enter__(self) -> EvidenceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._finalized:
            self.finalize(interrupted=exc_type is not None)


def _check_finalize_args(interrupted: bool, not_evaluated: int, ended_at: str | None) -> None:
    """Reject values that would make the completion record lie or fail to verify."""
    if not isinstance(interrupted, bool):
        raise TypeError("interrupted must be a bool")
    if isinstance(not_evaluated, bool) or not isinstance(not_evaluated, int) or not_evaluated < 0:
        raise ValueError("not_evaluated must be a non-negative int")
    if ended_at is not None and not isinstance(ended_at, str):
        raise TypeError("ended_at must be an RFC 3339 string or None")


# --------------------------------------------------------------------------
# Verification
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of :func:`verify_run`.

    ``ok`` means no problem was found; ``complete`` that the seal says the
    run completed (and the manifest agrees). An intact run that was
    interrupted or never finalized is ``ok`` but not ``complete``. ``records``
    counts the item records (the seal is not one). ``io_error`` marks a
    verification that could not be carried out (no such directory, an
    unreadable file, not a run directory) as opposed to evidence of tampering.
    """

    ok: bool
    complete: bool
    head: str | None
    records: int
    problems: list[str]
    message: str
    io_error: bool = False
    #: the records end in a seal, which binds every other file of the run; without one,
    #: only the records and the manifest are checked (summary.json, the reports and any
    #: other file are bound by nothing)
    sealed: bool = False


@dataclass
class _Findings:
    """Problems in the order found, capped so a shredded file cannot flood the output."""

    problems: list[str] = field(default_factory=list)
    dropped: int = 0
    io_error: bool = False

    def add(self, problem: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(problem)
        else:
            self.dropped += 1

    def io(self, problem: str) -> None:
        self.io_error = True
        self.add(problem)

    def all(self) -> list[str]:
        more = [f"... and {self.dropped} more problems"] if self.dropped else []
        return self.problems + more


@dataclass(frozen=True)
class _ManifestInfo:
    """What the rest of verification needs from the manifest."""

    genesis: str | None
    completed: bool
    completion: _Completion | None
    finalized: bool  # has a completion record, or claims completion: must be sealed


@dataclass(frozen=True)
class _Seal:
    """The seal record, once its shape is checked."""

    lineno: int
    files: dict[str, str]
    completed: bool
    interrupted: bool
    not_evaluated: int
    records: int
    ended_at: str


@dataclass(frozen=True)
class _Chain:
    head: str | None  # the final head: the seal's hash on a finalized run
    records: int  # item records, the seal not counted
    items_head: str | None = None  # the head after the last item record
    seal: _Seal | None = None
    readable: bool = True


class _Digests:
    """SHA-256 of the run directory's files, each file read once however often it is checked."""

    def __init__(self, run_dir: Path) -> None:
        self._run_dir = run_dir
        self._known: dict[str, str] = {}

    def of(self, rel: str) -> str:
        """Raises FileNotFoundError, _Unreadable or OSError like the read itself."""
        if rel not in self._known:
            fd, size = _open_listed(self._run_dir, rel)
            try:
                digest = hashlib.sha256()
                for chunk in _chunks(fd, size):
                    digest.update(chunk)
            finally:
                os.close(fd)
            self._known[rel] = digest.hexdigest()
        return self._known[rel]


def _open_listed(run_dir: Path, rel: str) -> tuple[int, int]:
    """Open the run's file *rel*, a path SHA256SUMS or the seal lists, as
    :func:`_open_regular` does, following a symlink at no level below *run_dir*.

    ``O_NOFOLLOW`` guards only a path's last name: with ``extra`` a symlink to a folder
    elsewhere, ``extra/secret.txt`` would open (and hash) a file outside the run. So each
    folder is looked at with ``lstat``, as a file is, then opened inside the one before,
    ``O_NOFOLLOW | O_DIRECTORY`` (a symlink swapped in meanwhile: ELOOP). *run_dir*
    itself may be reached through symlinks: the user named it. Each call names one
    folder, so a path too long once joined to *run_dir*'s is merely not there.
    """
    *folders, name = rel.split("/")
    if not _OPENS_AT:  # Windows: the folders are looked at, then the path is opened
        for depth in range(1, len(folders) + 1):
            _refuse_non_folder(run_dir.joinpath(*folders[:depth]), None, folders[:depth])
        return _open_regular(run_dir / rel)
    fd = os.open(run_dir, os.O_RDONLY | _O_DIRECTORY)
    try:
        for depth, folder in enumerate(folders, start=1):
            _refuse_non_folder(folder, fd, folders[:depth])
            inner = os.open(
                folder, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_NONBLOCK, dir_fd=fd
            )
            fd, outer = inner, fd
            os.close(outer)
        return _open_regular(name, dir_fd=fd)
    finally:
        os.close(fd)


def _refuse_non_folder(path: Path | str, dir_fd: int | None, folders: list[str]) -> None:
    """A symlink among a listed path's folders is refused unopened; a file there means the
    listed file is missing (NotADirectoryError)."""
    mode = os.lstat(path, dir_fd=dir_fd).st_mode
    if stat.S_ISLNK(mode):
        shown = _show("/".join(folders))
        raise _Unreadable(f"its path goes through a symlink ({shown}); refused")
    if not stat.S_ISDIR(mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), "/".join(folders))


def verify_run(run_dir: Path, expect_head: str | None = None) -> VerifyResult:
    """Check a run directory's evidence; every defect becomes a problem, never a traceback.

    ``expect_head`` is the chain head printed at the end of the run (the
    seal's hash); only with it can a consistently re-sealed run be caught.
    Only regular files are read, each bounded (see the module docstring).
    """
    run_dir = Path(run_dir)
    expected = _normalise_head(expect_head)
    found = _Findings()
    if not run_dir.is_dir():
        found.io("not a directory" if run_dir.exists() else "run directory does not exist")
        return _result(run_dir, found, complete=False, chain=_Chain(None, 0), reason="")
    digests = _Digests(run_dir)
    info = _check_manifest(run_dir, found)
    sums = _read_sums(run_dir, info, found)
    if sums is not None:
        _check_listed(digests, sums, found)
        _check_unlisted(run_dir, sums, found)
    chain = _check_chain(run_dir, info.genesis if info else None, sums, found)
    if chain.seal is not None:
        _check_sealed_files(run_dir, digests, chain.seal, found)
    elif chain.readable and (sums is not None or (info is not None and info.finalized)):
        found.add(
            f"{RESULTS_NAME}: no seal record at the end although the run was finalized "
            "(seal cut off, or written before seals existed?)"
        )
    if info is not None:
        _check_completion(info, sums is not None, chain, found)
    if expected is not None and chain.head != expected:
        if chain.seal is not None and expected == chain.items_head:
            # no pass: a forged seal follows the same records, so this head binds no file
            found.add(
                f"chain head mismatch: expected {expected}, the head of the item records "
                f"(the chain_head summary.json and the reports show), which binds no other "
                f"file; the run's head, after its seal, is {chain.head}: pass the head "
                "printed at the end of the run or kept in latest/<family>.json"
            )
        else:
            found.add(
                f"chain head mismatch: expected {expected}, found {chain.head} "
                "(records cut or replaced, or files changed and re-sealed?)"
            )
    seal = chain.seal
    agreed = info is not None and info.completed
    complete = seal is not None and seal.completed and agreed and sums is not None
    return _result(run_dir, found, complete, chain, _incomplete_reason(seal))


def _normalise_head(expect_head: str | None) -> str | None:
    if expect_head is None:
        return None
    head = expect_head.strip().lower()
    if not _HEX64.fullmatch(head):
        raise ValueError(f"expect_head must be 64 hex digits (a full SHA-256), got {expect_head!r}")
    return head


def _abbr(head: str | None) -> str:
    return f"{head[:12]}…" if head else "none"


def _show(rel: str) -> str:
    """A file name safe to print on one line (control characters, surrogates escaped)."""
    return rel if rel.isprintable() else repr(rel)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _lower(flag: bool) -> str:
    return str(flag).lower()


def _incomplete_reason(seal: _Seal | None) -> str:
    if seal is None:
        return "never sealed: no seal record; still running or crashed"
    if seal.interrupted:
        return f"interrupted; {seal.not_evaluated} not evaluated"
    return "not marked completed"


def _result(
    run_dir: Path, found: _Findings, complete: bool, chain: _Chain, reason: str
) -> VerifyResult:
    problems = found.all()
    records = _plural(chain.records, "record")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        label = "ERROR" if found.io_error else "FAILED"
        # the headline names a line where one does: "results.jsonl line 4: chain broken"
        # says more than the file's digest mismatch that comes with it
        first = next((p for p in problems if p.startswith(f"{RESULTS_NAME} line ")), problems[0])
        message = f"{label} {run_dir}: {first}{more}"
    elif complete:
        message = f"OK {run_dir}: {records}, head {chain.head}"
    else:
        message = (
            f"INCOMPLETE run: {records} intact, run did not complete ({reason}); head {chain.head}"
        )
    return VerifyResult(
        ok=not problems,
        complete=complete,
        head=chain.head,
        records=chain.records,
        problems=problems,
        message=message,
        io_error=found.io_error,
        sealed=chain.seal is not None,
    )


# --- manifest.json ---------------------------------------------------------


def _check_manifest(run_dir: Path, found: _Findings) -> _ManifestInfo | None:
    """Parse the manifest, insist on canonical bytes, and pull out what the chain needs."""
    try:
        raw = _read_small(run_dir / MANIFEST_NAME)
    except FileNotFoundError:
        _report_missing_manifest(run_dir, found)
        return None
    except _Unreadable as exc:
        found.add(f"{MANIFEST_NAME}: {exc}")
        return None
    except OSError as exc:
        found.io(f"{MANIFEST_NAME}: cannot read ({exc.strerror or exc})")
        return None
    try:
        manifest, canonical = _is_canonical(raw)
    except (ValueError, RecursionError) as exc:
        found.add(f"{MANIFEST_NAME}: not valid JSON ({_brief(exc)})")
        return None
    if not isinstance(manifest, dict):
        found.add(f"{MANIFEST_NAME}: not a JSON object")
        return None
    if not canonical:
        found.add(f"{MANIFEST_NAME}: not in canonical form (edited by hand?)")
    _check_name(run_dir, manifest, found)
    return _manifest_info(manifest, found)


def _check_name(run_dir: Path, manifest: JSONObject, found: _Findings) -> None:
    """A name that starts with a stamp must agree with the manifest's start, and the run id
    that may follow it with the manifest's (see the module docstring); a name that starts
    otherwise claims nothing."""
    named = _RUN_NAME.match(Path(os.path.abspath(run_dir)).name)
    run_id, started = manifest.get("run_id"), manifest.get("started_at")
    if named is None or not isinstance(run_id, str) or not isinstance(started, str):
        return
    stamp, short = named.groups()
    if short is not None and not run_id.startswith(short.lower()):
        found.add(
            f"directory name: it says run id {short}, {MANIFEST_NAME} says "
            f"{_show(clip(run_id, 16))} "
            "(renamed, or another run's files?)"
        )
    when = parse_rfc3339(started)
    if when is None or when.tzinfo is None:
        found.add(f"directory name: {MANIFEST_NAME} gives no UTC start to hold it to")
    elif (named_start := when.astimezone(timezone.utc).strftime(RUN_NAME_STAMP)) != stamp:
        found.add(
            f"directory name: it says the run started {stamp}, {MANIFEST_NAME} says "
            f"{_show(clip(started, 40))} ({named_start}): renamed?"
        )


def _report_missing_manifest(run_dir: Path, found: _Findings) -> None:
    """A deleted manifest is tampering; a directory that never had one is a usage error."""
    if any(os.path.lexists(run_dir / name) for name in (RESULTS_NAME, SUMS_NAME)):
        found.add(f"{MANIFEST_NAME}: missing (deleted?)")
    else:
        found.io(f"{MANIFEST_NAME}: missing; {run_dir} is not an agenteval run directory")


def _manifest_info(manifest: JSONObject, found: _Findings) -> _ManifestInfo:
    completed = manifest.get("completed")
    if not isinstance(completed, bool):
        found.add(f"{MANIFEST_NAME}: 'completed' is missing or not true/false")
        completed = False
    completion = _valid_completion(manifest, found)
    if completion is not None and completion.interrupted == completed:
        found.add(
            f"{MANIFEST_NAME}: 'completed' is {_lower(completed)} but "
            f"completion.interrupted is {_lower(completion.interrupted)}"
        )
    if completed and "completion" not in manifest:
        found.add(f"{MANIFEST_NAME}: 'completed' is true but there is no completion record")
    try:
        genesis: str | None = genesis_hash(manifest)
    except ValueError:
        genesis = None  # unreachable for parsed JSON, but never crash
    finalized = completed or "completion" in manifest
    return _ManifestInfo(genesis, completed, completion, finalized)


def _valid_completion(manifest: JSONObject, found: _Findings) -> _Completion | None:
    """The completion record if it has the documented shape, else None (and a problem)."""
    if "completion" not in manifest:
        return None
    completion = manifest["completion"]
    if not isinstance(completion, dict):
        found.add(f"{MANIFEST_NAME}: 'completion' is not an object")
        return None
    fields = _Fields(completion)
    read = _Completion(
        chain_head=fields.digest("chain_head"),
        records=fields.count("records"),
        ended_at=fields.text("ended_at"),
        interrupted=fields.flag("interrupted"),
        not_evaluated=fields.count("not_evaluated"),
    )
    if fields.bad:
        found.add(f"{MANIFEST_NAME}: malformed completion record ({', '.join(fields.bad)})")
        return None
    return read


class _Fields:
    """Typed reads of a JSON object's fields; ``bad`` names those of the wrong shape, in read order."""

    def __init__(self, obj: Mapping[str, JSONValue]) -> None:
        self._obj = obj
        self.bad: list[str] = []

    def _wrong(self, key: str) -> None:
        self.bad.append(key)

    def flag(self, key: str) -> bool:
        value = self._obj.get(key)
        if isinstance(value, bool):
            return value
        self._wrong(key)
        return False

    def count(self, key: str) -> int:
        value = self._obj.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        self._wrong(key)
        return 0

    def text(self, key: str) -> str:
        value = self._obj.get(key)
        if isinstance(value, str):
            return value
        self._wrong(key)
        return ""

    def digest(self, key: str) -> str:
        value = self._obj.get(key)
        if isinstance(value, str) and _HEX64.fullmatch(value):
            return value
        self._wrong(key)
        return ""

    def file_map(self, key: str) -> dict[str, str]:
        """A map of file name to SHA-256."""
        value = self._obj.get(key)
        if isinstance(value, dict):
            files = {
                rel: digest
                for rel, digest in value.items()
                if isinstance(digest, str) and _HEX64.fullmatch(digest)
            }
            if len(files) == len(value):
                return files
        self._wrong(key)
        return {}


def _brief(exc: BaseException) -> str:
    return clip(str(exc) or type(exc).__name__, 120, "...")


# --- SHA256SUMS --------------------------------------------------------------


def _read_sums(
    run_dir: Path, info: _ManifestInfo | None, found: _Findings
) -> dict[str, str] | None:
    """Parsed SHA256SUMS (path -> hex, in file order), or None when there is none."""
    try:
        raw = _read_small(run_dir / SUMS_NAME)
    except FileNotFoundError:
        if info is not None and info.finalized:
            found.add(f"{SUMS_NAME}: missing, but the manifest says the run was finalized")
        return None
    except _Unreadable as exc:
        found.add(f"{SUMS_NAME}: {exc}")
        return None
    except OSError as exc:
        found.io(f"{SUMS_NAME}: cannot read ({exc.strerror or exc})")
        return None
    lines = raw.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    else:
        found.add(f"{SUMS_NAME}: last line is not newline-terminated (truncated?)")
    return _parse_sums(lines, found)


def _parse_sums(lines: list[bytes], found: _Findings) -> dict[str, str]:
    sums: dict[str, str] = {}
    previous: bytes | None = None
    for lineno, line in enumerate(lines, start=1):
        where = f"{SUMS_NAME} line {lineno}"
        match = _SUMS_LINE.fullmatch(line)
        if match is None:
            found.add(f"{where}: malformed (expected '<64 hex>  <path>')")
            continue
        digest, raw_path = match.group(1).decode("ascii"), match.group(2)
        rel = os.fsdecode(raw_path)
        problem = _sums_path_problem(rel, raw_path, previous, sums)
        if problem:
            found.add(f"{where}: {problem}")
            continue
        sums[rel] = digest
        previous = raw_path
    return sums


#: The longest file name and path a file system takes (Linux's NAME_MAX and PATH_MAX).
_NAME_MAX, _PATH_MAX = 255, 4096


def _unsafe_path(rel: str) -> bool:
    """A listed path that could point outside the run directory, or that no run writes and
    the file system would refuse to open: a NUL, a name or path too long, text that has no
    bytes on disk (a lone surrogate from a JSON escape)."""
    parts = rel.split("/")
    if rel.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return True
    if "\\" in rel or "\0" in rel:
        return True
    try:
        names = [os.fsencode(part) for part in parts]
    except UnicodeError:
        return True
    return sum(len(name) + 1 for name in names) > _PATH_MAX or any(
        len(name) > _NAME_MAX for name in names
    )


def _sums_path_problem(
    rel: str, raw_path: bytes, previous: bytes | None, sums: dict[str, str]
) -> str | None:
    """Paths must stay inside the run dir, be unique and sorted, and not list SHA256SUMS."""
    if _unsafe_path(rel):
        return f"unsafe path {_show(rel)}"
    if rel == SUMS_NAME:
        return f"lists {SUMS_NAME} itself"
    if rel in sums:
        return f"duplicate entry for {_show(rel)}"
    if previous is not None and raw_path < previous:
        return f"{_show(rel)} is out of order (entries must be sorted by path)"
    return None


def _check_digests(
    digests: _Digests, listed: Mapping[str, str], found: _Findings, *, changed: str, missing: str
) -> None:
    """Every file in *listed* must exist as a regular file with its listed digest."""
    for rel, digest in listed.items():
        try:
            if digests.of(rel) != digest:
                found.add(f"{_show(rel)}: {changed}")
        except (FileNotFoundError, NotADirectoryError):
            found.add(f"{_show(rel)}: {missing}")
        except _Unreadable as exc:
            found.add(f"{_show(rel)}: {exc}")
        except OSError as exc:
            if exc.errno in _NO_RUN_WRITES:
                found.add(f"{_show(rel)}: cannot be opened ({exc.strerror}); no run writes it")
            else:
                found.io(f"{_show(rel)}: cannot read ({exc.strerror or exc})")


#: Why a path no run writes cannot be opened: a symlink (swapped in while verify read the
#: folders), a name longer than a file system with a smaller limit than :func:`_unsafe_path`'s
_NO_RUN_WRITES = frozenset({errno.ELOOP, errno.ENAMETOOLONG})


def _check_added(
    run_dir: Path, vouched: set[str], found: _Findings, *, regular: str, other: str
) -> None:
    """A file in the directory that is not *vouched* for was added later."""
    try:
        regular_files, other_files = _scan(run_dir)
    except OSError as exc:
        found.io(f"{run_dir}: cannot list files ({exc.strerror or exc})")
        return
    for files, what in ((regular_files, regular), (other_files, other)):
        for rel in sorted(files, key=os.fsencode):
            if rel not in vouched:
                found.add(f"{_show(rel)}: {what}")


def _check_listed(digests: _Digests, sums: dict[str, str], found: _Findings) -> None:
    """Every listed file must exist as a regular file with the listed digest."""
    missing = f"listed in {SUMS_NAME} but missing"
    _check_digests(digests, sums, found, changed="SHA-256 mismatch", missing=missing)


def _check_unlisted(run_dir: Path, sums: dict[str, str], found: _Findings) -> None:
    """Anything in the directory that SHA256SUMS does not vouch for was added later."""
    _check_added(
        run_dir,
        {SUMS_NAME, *sums},
        found,
        regular=f"not listed in {SUMS_NAME} (added after the run?)",
        other="not a regular file (symlink or special file added?)",
    )


# --- results.jsonl and the seal ----------------------------------------------------


def _check_chain(
    run_dir: Path, genesis: str | None, sums: dict[str, str] | None, found: _Findings
) -> _Chain:
    """Walk results.jsonl line by line, recomputing every link and the head."""
    try:
        fd, size = _open_regular(run_dir / RESULTS_NAME)
    except FileNotFoundError:
        if sums is None or RESULTS_NAME not in sums:
            found.add(f"{RESULTS_NAME}: missing")
        return _Chain(None, 0, readable=False)
    except _Unreadable as exc:
        found.add(f"{RESULTS_NAME}: {exc}")
        return _Chain(None, 0, readable=False)
    except OSError as exc:
        found.io(f"{RESULTS_NAME}: cannot read ({exc.strerror or exc})")
        return _Chain(None, 0, readable=False)
    walk = _ChainWalk(genesis, found)
    try:
        for raw in _lines_of(fd, size):
            if not walk.line(raw):
                break
    except _Unreadable as exc:
        found.add(f"{RESULTS_NAME} line {walk.lineno + 1}: {exc}")
        walk.readable = False
    except OSError as exc:
        found.io(f"{RESULTS_NAME}: cannot read ({exc.strerror or exc})")
        walk.readable = False
    finally:
        os.close(fd)
    return walk.result()


class _ChainWalk:
    """The state of one pass over results.jsonl: links, item count and the seal."""

    def __init__(self, genesis: str | None, found: _Findings) -> None:
        self.found = found
        self.head = genesis
        self.items_head = genesis
        self.lineno = 0
        self.records = 0
        self.seal: _Seal | None = None
        self.after_seal = False
        self.readable = True

    def line(self, raw: bytes) -> bool:
        """Check one line (with its newline); False stops the walk."""
        self.lineno += 1
        where = f"{RESULTS_NAME} line {self.lineno}"
        if not raw.endswith(b"\n"):
            self.found.add(f"{where}: incomplete last line (no trailing newline; partial write?)")
            return False
        line = raw[:-1]
        record, problem = _parse_line(line, self.lineno, self.head)
        if problem:
            self.found.add(f"{where}: {problem}")
        if self.seal is not None and not self.after_seal:
            self.after_seal = True
            self.found.add(f"{where}: a record after the seal (appended after the run?)")
        if is_seal(record):
            if self.seal is not None:
                self.found.add(f"{where}: a second seal record")
            else:
                self.seal = _seal_from(record, self.lineno, self.records, self.found)
                self.items_head = self.head
        else:
            self.records += 1
        self.head = sha256_hex(line)
        if self.seal is None:
            self.items_head = self.head
        return True

    def result(self) -> _Chain:
        return _Chain(self.head, self.records, self.items_head, self.seal, self.readable)


def _parse_line(
    line: bytes, lineno: int, expected_prev: str | None
) -> tuple[JSONObject | None, str | None]:
    """The record and the first defect of one results line; ``expected_prev`` None skips the link."""
    if not line:
        return None, "empty line"
    try:
        record, canonical = _is_canonical(line)
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({_brief(exc)})"
    if not isinstance(record, dict):
        return None, "not a JSON object"
    if not canonical:
        return record, "not in canonical form (edited by hand?)"
    prev = record.get(PREV_KEY)
    if not isinstance(prev, str):
        return record, f"missing {PREV_KEY!r} hash"
    if expected_prev is not None and prev != expected_prev:
        if lineno == 1:
            return record, (
                "chain broken (prev does not match the manifest header hash: the manifest "
                "or this line was changed)"
            )
        return record, (
            f"chain broken (prev does not match line {lineno - 1}: line {lineno - 1} was "
            f"changed, or lines were removed or inserted before line {lineno})"
        )
    return record, None


def _seal_from(
    record: JSONObject, lineno: int, records_before: int, found: _Findings
) -> _Seal | None:
    """The seal if it has the documented shape, else None (and a problem)."""
    where = f"{RESULTS_NAME} line {lineno}"
    fields = _Fields(record)
    listed = fields.file_map("files")
    completed = fields.flag("completed")
    interrupted = fields.flag("interrupted")
    not_evaluated = fields.count("not_evaluated")
    count = fields.count("records")
    ended_at = fields.text("ended_at")
    if fields.bad:
        found.add(f"{where}: malformed seal record ({', '.join(fields.bad)})")
        return None
    files: dict[str, str] = {}
    for rel, digest in listed.items():
        if _unsafe_path(rel) or rel in (RESULTS_NAME, SUMS_NAME):
            found.add(f"{where}: the seal lists {_show(rel)}, which it cannot bind")
        else:
            files[rel] = digest
    files = dict(sorted(files.items(), key=lambda item: os.fsencode(item[0])))
    if completed == interrupted:
        found.add(
            f"{where}: the seal says completed {_lower(completed)} and "
            f"interrupted {_lower(interrupted)}"
        )
    if count != records_before:
        found.add(
            f"{where}: the seal counts {_plural(count, 'record')} but {records_before} precede it"
        )
    return _Seal(lineno, files, completed, interrupted, not_evaluated, count, ended_at)


def _check_sealed_files(run_dir: Path, digests: _Digests, seal: _Seal, found: _Findings) -> None:
    """Each file the seal lists must be unchanged, and no other file may have appeared."""
    _check_digests(
        digests,
        seal.files,
        found,
        changed="SHA-256 does not match the seal (changed after the run?)",
        missing="sealed but missing (deleted?)",
    )
    _check_added(
        run_dir,
        {RESULTS_NAME, SUMS_NAME, *seal.files},
        found,
        regular="present but not sealed (added after the run?)",
        other="not a regular file, and not sealed (added after the run?)",
    )


def _check_completion(info: _ManifestInfo, sealed: bool, chain: _Chain, found: _Findings) -> None:
    """The manifest's completion must agree with the seal and describe the records as they are."""
    completion, seal = info.completion, chain.seal
    if (sealed or seal is not None) and completion is None and not info.finalized:
        found.add(f"{MANIFEST_NAME}: no completion record although the run was sealed")
    if seal is not None and info.completed != seal.completed:
        found.add(
            f"{MANIFEST_NAME}: 'completed' is {_lower(info.completed)} but the seal says "
            f"{_lower(seal.completed)}"
        )
    if seal is not None and completion is not None:
        for key in ("interrupted", "not_evaluated", "ended_at"):
            if getattr(completion, key) != getattr(seal, key):
                found.add(
                    f"{MANIFEST_NAME}: completion.{key} is {json.dumps(getattr(completion, key))} but "
                    f"the seal says {json.dumps(getattr(seal, key))}"
                )
    if completion is None or chain.items_head is None:
        return
    if completion.chain_head != chain.items_head:
        found.add(
            f"{MANIFEST_NAME}: completion.chain_head {_abbr(completion.chain_head)} does not "
            f"match the recomputed head {_abbr(chain.items_head)} of the records "
            "(records cut or replaced?)"
        )
    if completion.records != chain.records:
        found.add(
            f"{MANIFEST_NAME}: completion.records is {completion.records} but "
            f"{RESULTS_NAME} holds {chain.records}"
        )

"""A leak detector for tests, independent of the redactor (RELIABILITY row 14).

It strips every separator and the case from a text and looks for any 16-character
stretch of any encoding of a key (plain, reversed, hex, base64 at each alignment, ``\\u``
escapes, percent-encoding): half of a line-split key, or the tail of a Basic-auth
header, counts as a leak. ``ENCODINGS`` are the ways an echo may dress a key.
"""

from __future__ import annotations

import base64
import contextlib
import html
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Realistic shapes (fake values): an OpenAI project key and an Anthropic API key.
OPENAI_KEY = (
    "sk-proj-Xq3Lr8Tz1Vw6Yb0Nc5Md2Fg7Hj4Kp9Qs-Aa1Bb2Cc3Dd4Ee5Ff6Gg7Hh8Ii9Jj0"
    "_Kk1Ll2Mm3Nn4Oo5Pp6Qq7Rr8Ss9Tt0Uu1Vv2Ww3Xx4Yy5Zz6T3BlbkFJ"
)
ANTHROPIC_KEY = "sk-ant-api03-Rt5Yu8Io1Pa4Sd7Fg0Hj3Kl6Zx9Cv2Bn5Mq8Wr1Et4Ty7Ui0Op3As6Df9Gh2Jk5Lz8Xc1Vb4Nm7Q-w2E5rAA"
KEYS = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}


def _b64_at(key: str, prefix: bytes) -> str:
    return base64.b64encode(prefix + key.encode() + b"\n").decode()


# Each way an agent, a judge or an error body might echo the key.
ENCODINGS: dict[str, Callable[[str], str]] = {
    "plain": lambda k: k,
    "upper": str.upper,
    "lower": str.lower,
    "split-lf": lambda k: k[:22] + "\n" + k[22:],
    "split-crlf": lambda k: k[:22] + "\r\n" + k[22:],
    "split-continuation": lambda k: k[:30] + "\\\n    " + k[30:],
    "split-printed-escape": lambda k: k[:30] + "\\n" + k[30:],
    "wrapped-20": lambda k: "\n".join(k[i : i + 20] for i in range(0, len(k), 20)),
    "spaced": " ".join,
    "separated": "-".join,
    "zero-width": "\u200b".join,
    "reversed": lambda k: k[::-1],
    "hex": lambda k: k.encode().hex(),
    "hex-upper": lambda k: k.encode().hex().upper(),
    "hex-bytes": lambda k: " ".join(f"{b:02x}" for b in k.encode()),
    "base64": lambda k: _b64_at(k, b""),
    "base64-offset-1": lambda k: _b64_at(k, b"="),
    "base64-offset-2": lambda k: _b64_at(k, b"k="),
    "basic-auth": lambda k: "Basic " + base64.b64encode(b"key=" + k.encode()).decode(),
    "base64-urlsafe": lambda k: base64.urlsafe_b64encode(b"~" + k.encode()).decode(),
    "base64-wrapped": lambda k: base64.encodebytes(b"token: " + k.encode()).decode(),
    "u-escaped": lambda k: "".join(f"\\u{ord(c):04x}" for c in k),
    "url-encoded": lambda k: "".join(f"%{b:02X}" for b in k.encode()),
    "json-escaped": json.dumps,
}

# The same encodings as Python source, for the subject of a real run to compute.
ENCODER_SOURCE = {
    "plain": "k",
    "upper": "k.upper()",
    "lower": "k.lower()",
    "split-lf": "k[:22] + '\\n' + k[22:]",
    "split-crlf": "k[:22] + '\\r\\n' + k[22:]",
    "split-continuation": "k[:30] + '\\\\\\n    ' + k[30:]",
    "split-printed-escape": "k[:30] + '\\\\n' + k[30:]",
    "wrapped-20": "'\\n'.join(k[i : i + 20] for i in range(0, len(k), 20))",
    "spaced": "' '.join(k)",
    "separated": "'-'.join(k)",
    "zero-width": "'\\u200b'.join(k)",
    "reversed": "k[::-1]",
    "hex": "k.encode().hex()",
    "hex-upper": "k.encode().hex().upper()",
    "hex-bytes": "' '.join(f'{b:02x}' for b in k.encode())",
    "base64": "base64.b64encode(k.encode() + b'\\n').decode()",
    "base64-offset-1": "base64.b64encode(b'=' + k.encode() + b'\\n').decode()",
    "base64-offset-2": "base64.b64encode(b'k=' + k.encode() + b'\\n').decode()",
    "basic-auth": "'Basic ' + base64.b64encode(b'key=' + k.encode()).decode()",
    "base64-urlsafe": "base64.urlsafe_b64encode(b'~' + k.encode()).decode()",
    "base64-wrapped": "base64.encodebytes(b'token: ' + k.encode()).decode()",
    "u-escaped": "''.join(f'\\\\u{ord(c):04x}' for c in k)",
    "url-encoded": "''.join(f'%{b:02X}' for b in k.encode())",
    "json-escaped": "json.dumps(k)",
}

# --------------------------------------------------------------------------- the oracle

_STRIP = re.compile(r"\\[nrt\\]|[\W_]+", re.UNICODE)
WINDOW = 16


def _flat(text: str) -> str:
    return _STRIP.sub("", text).lower()


def _b64_cores(raw: bytes) -> list[str]:
    out = []
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode()
        out.append(enc[(8 * k + 5) // 6 : 8 * (k + len(raw)) // 6])
    return out


def fingerprints(key: str) -> set[str]:
    """Every 16-character stretch of every encoding of *key*, flattened."""
    raw = key.encode()
    forms = [
        key,
        key[::-1],
        raw.hex(),
        "".join(f"\\u{ord(c):04x}" for c in key),
        "".join(f"%{b:02x}" for b in raw),
        *_b64_cores(raw),
    ]
    out = set()
    for form in forms:
        flat = _flat(form)
        out |= {flat[i : i + WINDOW] for i in range(len(flat) - WINDOW + 1)}
    return out


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def views(path: Path) -> list[str]:
    """What a reader of *path* sees: its text, entities decoded, JSON strings decoded."""
    text = path.read_bytes().decode("utf-8", "replace")
    out = [text, html.unescape(text)]
    docs = [text] if path.suffix in (".json", ".sarif") else []
    if path.suffix == ".jsonl":
        docs = text.splitlines()
    for doc in docs:
        with contextlib.suppress(ValueError):
            out.append("\n".join(_strings(json.loads(doc))))
    return out


def leaks(text: str, key: str) -> list[str]:
    flat = _flat(text)
    return sorted(f for f in fingerprints(key) if f in flat)

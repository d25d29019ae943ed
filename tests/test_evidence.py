"""Tests for the tamper-evident evidence core and ``agenteval verify``.

Each tamper test starts from a freshly sealed run, changes it the way a
careless or dishonest person would, and checks that the problem names the
file (and line) concerned. The "cut and re-seal" test documents the one
attack that only ``expect_head`` catches.
"""

from __future__ import annotations

import errno
import json
import math
import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import pytest
import rfc8785

from pytest_agenteval.evidence import _chain as ev
from pytest_agenteval.evidence._chain import (
    MANIFEST_NAME,
    RESULTS_NAME,
    SUMS_NAME,
    EvidenceWriter,
    VerifyResult,
    build_sha256sums,
    canonical_json,
    genesis_hash,
    is_seal,
    json_safe,
    json_safe_record,
    sha256_hex,
    verify_run,
    write_file_atomic,
)
from pytest_agenteval.evidence._verify_cli import main

MANIFEST: dict[str, Any] = {
    "tool": "pytest-agenteval",
    "version": "0.1.0",
    "started_at": "2024-05-01T12:00:00.000Z",
    "suite": "demo",
    "config": {"judge": "offline", "threshold": 0.7},
}

TRICKY_TEXTS = [
    "nul \x00 byte",
    "esc \x1b[31mred\x1b[0m \x1b]0;title\x07",
    "lone \ud800 surrogate and \udfff",
    "emoji 😀 🏳️‍🌈 👩🏽‍💻",
    "noncharacter \ufffe and \uffff",
    'line\nbreaks\r\n\u2028\u2029 and quotes " \\',
]
BIG_TEXT = "x" * 1_000_000


def _records(count: int, *, big: bool = False) -> list[dict[str, Any]]:
    records = [
        {
            "id": f"test_{index}",
            "text": TRICKY_TEXTS[index % len(TRICKY_TEXTS)],
            "score": index / 10,
            "passed": index % 2 == 0,
            "criteria": [{"name": "ok", "score": None}],
        }
        for index in range(count)
    ]
    if big:
        records.append({"id": "big", "text": BIG_TEXT})
    return records


def _write_run(
    run_dir: Path,
    records: list[dict[str, Any]],
    *,
    interrupted: bool = False,
    manifest: Mapping[str, Any] = MANIFEST,
) -> str:
    writer = EvidenceWriter(run_dir, manifest)
    for record in records:
        writer.append(record)
    write_file_atomic(run_dir / "summary.json", canonical_json({"passed": 3, "failed": 2}))
    write_file_atomic(run_dir / "reports" / "report.md", b"# Report\n")
    return writer.finalize(
        interrupted=interrupted,
        not_evaluated=2 if interrupted else 0,
        ended_at="2024-05-01T12:05:00.000Z",
    )


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, str]:
    """A sealed run with six small records (the default for tamper tests)."""
    run_dir = tmp_path / "run"
    return run_dir, _write_run(run_dir, _records(6))


def _lines(run_dir: Path) -> list[bytes]:
    return (run_dir / RESULTS_NAME).read_bytes().split(b"\n")[:-1]


def _write_lines(run_dir: Path, lines: list[bytes]) -> None:
    (run_dir / RESULTS_NAME).write_bytes(b"".join(line + b"\n" for line in lines))


def _reseal(run_dir: Path) -> None:
    """What a forger does after editing: recompute SHA256SUMS."""
    (run_dir / SUMS_NAME).write_bytes(build_sha256sums(run_dir))


def _items(run_dir: Path) -> list[bytes]:
    """The item lines of results.jsonl: every line but the seal."""
    return [line for line in _lines(run_dir) if not is_seal(json.loads(line))]


def _seal(run_dir: Path) -> dict[str, Any]:
    seal = json.loads(_lines(run_dir)[-1])
    assert is_seal(seal)
    return seal


def _forge_seal(run_dir: Path, items: list[bytes] | None = None, **status: Any) -> str:
    """What a careful forger does after any edit: rewrite completion, the seal and SHA256SUMS.

    The result is a consistent run with a new head; returns that head.
    """
    items = _items(run_dir) if items is None else items
    manifest = json.loads((run_dir / MANIFEST_NAME).read_bytes())
    completion = manifest["completion"]
    completion.update({k: v for k, v in status.items() if k in completion})
    manifest["completed"] = not completion["interrupted"]
    completion["records"] = len(items)
    completion["chain_head"] = sha256_hex(items[-1]) if items else genesis_hash(manifest)
    (run_dir / MANIFEST_NAME).write_bytes(canonical_json(manifest))
    files = {
        p.relative_to(run_dir).as_posix(): sha256_hex(p.read_bytes())
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.name not in (RESULTS_NAME, SUMS_NAME)
    }
    seal = {
        "kind": "seal",
        "files": files,
        "completed": manifest["completed"],
        "interrupted": completion["interrupted"],
        "not_evaluated": completion["not_evaluated"],
        "records": len(items),
        "ended_at": completion["ended_at"],
        "prev": completion["chain_head"],
    }
    line = canonical_json(seal)
    _write_lines(run_dir, [*items, line])
    _reseal(run_dir)
    return sha256_hex(line)


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] = ord("Z") if data[offset] != ord("Z") else ord("Y")
    path.write_bytes(bytes(data))


def _broken(n: int) -> str:
    return (
        f"results.jsonl line {n}: chain broken (prev does not match line {n - 1}: line {n - 1} "
        f"was changed, or lines were removed or inserted before line {n})"
    )


_BROKEN_FIRST = (
    "results.jsonl line 1: chain broken (prev does not match the manifest header hash: the "
    "manifest or this line was changed)"
)


def _assert_failed(result: VerifyResult, first: str) -> None:
    assert not result.ok, result
    assert result.problems[0] == first, result.problems
    assert result.message.startswith("FAILED "), result.message
    # the headline: the first problem naming a line of results.jsonl, else the first one
    lines = [p for p in result.problems if p.startswith("results.jsonl line ")]
    assert (lines[0] if lines else first) in result.message


# --------------------------------------------------------------------------
# canonical_json
# --------------------------------------------------------------------------


def test_canonical_json_is_rfc8785_for_plain_data() -> None:
    value: dict[str, Any] = {
        "b": [1, 2.5, 1e21, 1e-7, -0.0, None, True],
        "a": {"é": "x", "z": ""},
        "\u20ac": 1,
    }
    assert canonical_json(value) == rfc8785.dumps(value)


_TRICKY_FLOATS = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.8,
    0.333333333333,
    1e-4,
    9.99e-5,
    1e-7,
    1.5e-7,
    5e-324,
    1e15,
    1e16,
    1.5e16,
    123456789012345.6,
    1234567890123456.8,
    0.01341409599990584,
    1e20,
    1e21,
    1.7976931348623157e308,
    2.0**53,
]
_TRICKY_INTS = [0, -1, 7, 10**15, 2**53 - 1, -(2**53 - 1), 9007199254740991]
_TRICKY_TEXT = [
    "",
    "plain",
    'quote " and \\ backslash',
    "\x00\x01\x1f\x7f",
    "\b\f\n\r\t",
    "ends \\",
    '\\"',
    "1.0",
    "score 2.0 at 1e-05",
    "127.0.0.1:8080 v1.0.0",
    "9007199254740993",
    "é€\u2028\u2029\ufeff\uffff",
    "😀 beyond the BMP",
    "\ue000 private use",
]


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return rng.choice(_TRICKY_FLOATS) * rng.choice([1, -1])
    if kind == 1:
        return rng.choice([rng.choice(_TRICKY_INTS), rng.randint(-(10**6), 10**6)])
    if kind == 2:
        return rng.choice([*_TRICKY_TEXT, "".join(rng.choice('ab"\\\n.0e1') for _ in range(6))])
    if kind == 3:
        return rng.choice([None, True, False, rng.random(), rng.uniform(-1e20, 1e20)])
    if kind == 4:
        return rng.choice(_TRICKY_TEXT[:12]) + str(rng.randrange(100))
    if kind == 5:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 6:
        return tuple(_random_json(rng, depth + 1) for _ in range(rng.randrange(3)))
    keys = [*_TRICKY_TEXT, "a", "B", "é", "\u20ac", "1.0", "aa", "a\x00"]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_walked_canonical_json_writes_rfc8785s_bytes_or_declines() -> None:
    """The C-encoder path writes exactly what rfc8785 writes (or declines: a character
    beyond U+FFFF, a lone surrogate, an integer beyond 2**53), and declines rarely."""
    rng = random.Random(8785)
    written = 0
    for _ in range(3000):
        value: dict[str, Any] = {"v": _random_json(rng), "k": rng.choice(_TRICKY_TEXT[:11])}
        fast = ev.walked_canonical_json(value)
        if fast is not None:
            written += 1
            assert fast == rfc8785.dumps(value), value
    assert written > 2000
    declined: list[tuple[dict[str, Any], str]] = [
        ({"😀": 1, "\uffff": 2}, "keys beyond the BMP order differently in UTF-16"),
        ({"t": "a\ud800"}, "a lone surrogate"),
        ({"n": 2**53}, "an integer beyond 2**53"),
        ({"n": [1.5, -(2**60)]}, "an integer beyond 2**53"),
        ({"n": math.nan}, "NaN"),
    ]
    for value, why in declined:
        assert ev.walked_canonical_json(value) is None, why
    record: dict[str, Any] = {"score": 1.0, "weight": 0.25, "text": "version 1.0", "ids": [3, 4]}
    assert ev.walked_canonical_json(record) == rfc8785.dumps(record)


def test_walked_canonical_json_leaves_alone_what_json_dumps_writes_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every record holds timings of 17 significant digits and a local run's host is
    127.0.0.1: json.dumps writes those as RFC 8785 does, so the line is not split into
    its strings to look at its numbers one by one (a third of the line's cost). Nor is it
    for the integral floats most records hold (a subject's cost of 0.0, a score of 1.0):
    they are written as the ints RFC 8785 writes for them."""
    record: dict[str, Any] = {
        "base_url_host": "127.0.0.1:40121",
        "timings": {"judge_s": 0.01341409599990584, "subject_s": 0.032277696998789907},
        "score": 0.75,
        "tokens": 309790,
        "version": "1.0.0",
    }
    expected = rfc8785.dumps(record)

    class _NoSplit:
        def split(self, text: str) -> list[str]:
            raise AssertionError(f"split needlessly: {text}")

    monkeypatch.setattr(ev, "_STRINGS", _NoSplit())
    assert ev.walked_canonical_json(record) == expected
    for odd in (
        {"score": 1.0, "cost": {"usd": 0.0}},
        {"z": [-0.0, 3.0], "t": (1e-05, -2.5e-07)},
        {"big": 9007199254740992.0, "huge": [2e16, 1.7976931348623157e308]},
    ):
        whole = {**record, **odd}
        before = repr(whole)
        assert ev.walked_canonical_json(whole) == rfc8785.dumps(whole)
        assert repr(whole) == before  # written as RFC 8785 writes them, left as they were
    unlikes: list[dict[str, Any]] = [{"n": -9007199254740992}, {"s": [_Str("version 1.0 here")]}]
    for unlike in unlikes:
        with pytest.raises(AssertionError, match="split needlessly"):
            ev.walked_canonical_json({**record, **unlike})


def test_walked_canonical_json_writes_floats_of_every_magnitude_as_rfc8785() -> None:
    """Every float is written as RFC 8785 writes it: those Python writes unlike it (integral,
    exponent form) and those it writes alike, on both sides of each switch of notation."""
    rng = random.Random(1e-7)
    edges = [1e-4, 1e-6, 1e-7, 1e15, 1e16, 1e21, 2.0**53, 5e-324, 2.2250738585072014e-308]
    values: list[float] = [x * f for x in edges for f in (1, -1, 1 - 2**-52, 1 + 2**-52)]
    values += [rng.uniform(-1, 1) * 10 ** rng.uniform(-30, 30) for _ in range(3000)]
    values += [float(rng.randrange(-(10**17), 10**17)) for _ in range(500)]
    for number in values:
        record: dict[str, Any] = {"n": number, "in": [number, {"x": number}]}
        assert ev.walked_canonical_json(record) == rfc8785.dumps(record), number


def test_walked_canonical_json_declines_a_text_holding_its_number_mark() -> None:
    """A number in exponent form is written through a marked string; a string of the
    record's own that holds the mark is never taken for one: the line is left to rfc8785."""
    forged = f"{ev._MARK}0{ev._MARK}"
    values: list[dict[str, Any]] = [
        {"t": 1e-05, "answer": forged},
        {"answer": forged},
        {"t": 1e-05, forged: 1},
    ]
    for value in values:
        assert ev.walked_canonical_json(value) is None
    assert ev._plain_line({"t": 1e-05, "answer": forged}, "h", walked=True) == (
        rfc8785.dumps({"answer": forged, "prev": "h", "t": 1e-05})
    )


class _Str(str):
    pass


class _Int(int):
    pass


class _Float(float):
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


def _disguised(value: Any) -> Any:
    """*value* with every str, int, float, dict and list replaced by a subclass or a
    tuple: the walker's general path, which must give what its short way gives."""
    if isinstance(value, dict):
        return _Dict({_disguised(k): _disguised(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(_disguised(v) for v in value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return _Str(value)
    if isinstance(value, int):
        return _Int(value)
    if isinstance(value, float):
        return _Float(value)
    return value


def test_the_walks_short_way_for_plain_values_gives_what_the_general_way_gives() -> None:
    """Plain dicts, lists and scalars skip the type checks and build paths only for a
    note: the result, the notes and their paths are those of the general walk."""
    rng = random.Random(42)
    secret = "sk-test-" + "q" * 24
    from pytest_agenteval.evidence._redact import Redactor

    redactor = Redactor({"OPENAI_API_KEY": secret})
    odd: list[Any] = [math.nan, 2**60, "a\ud800", "\ud83d\ude00", b"\xff", {3, 1}, secret]
    for _ in range(1500):
        value: dict[str, Any] = {"v": _random_json(rng), "odd": {"k": rng.choice(odd)}}
        value[rng.choice(["x y", "\ud83d\ude00", "é", "\ud83d", secret])] = [rng.choice(odd)]
        for text in (None, redactor.text):
            assert json_safe(value, text=text) == json_safe(_disguised(value), text=text)
            plain = json_safe_record(value, text=text)
            assert plain == json_safe_record(_disguised(value), text=text)
            assert text is None or secret not in json.dumps(plain)


class _Lazy:
    """A proxy whose type check raises (a lazy object whose target failed to load)."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("lazy target failed")

    def __repr__(self) -> str:
        return "<Lazy>"


class _RepeatedKeys(Mapping[str, int]):
    """A Mapping whose items() names one key twice."""

    def __getitem__(self, key: str) -> int:
        return 1

    def __iter__(self) -> Iterator[str]:
        return iter("aa")

    def __len__(self) -> int:
        return 2

    def items(self) -> Any:
        return [("a", 1), ("a", 2)]


def test_the_walks_short_way_keeps_what_the_general_way_kept() -> None:
    """Found by review of the short way: a value inside a plain list that raises is noted,
    not raised; a key that is another key's redacted text, and a key a Mapping repeats,
    keep their values under a new name."""
    from pytest_agenteval.evidence._redact import Redactor

    safe = json_safe_record({"a": [_Lazy()], "b": 1})
    assert safe["a"] == "[<Lazy>]" and safe["b"] == 1
    assert safe["converted"] == [{"path": "$.a", "was": "unreadable list"}]
    secret = "sk-" + "w" * 28
    redact = Redactor({"OPENAI_API_KEY": secret}).text
    both = json_safe_record({secret: 1, "[REDACTED:OPENAI_API_KEY]": 2}, text=redact)
    assert both["[REDACTED:OPENAI_API_KEY]"] == 1
    assert both["[REDACTED:OPENAI_API_KEY] (str)"] == 2
    assert json_safe(_RepeatedKeys()) == (
        {"a": 1, "a (str)": 2},
        [{"path": '$["a (str)"]', "was": "str key (duplicate once joined)"}],
    )


def test_canonical_json_slow_path_matches_rfc8785_apart_from_surrogates() -> None:
    marker = "SURROGATE-MARKER"
    template = {
        "z": [1, 2.5, {"y": [marker, "\x00\x1b"], "x": None}],
        "emoji": "😀",
        "\u00e9": (True, False),
    }

    def fill(value: Any, text: str) -> Any:
        if isinstance(value, dict):
            return {key: fill(item, text) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [fill(item, text) for item in value]
        return text if value == marker else value

    expected = rfc8785.dumps(fill(template, marker)).replace(marker.encode(), b"\\ud800")
    assert canonical_json(fill(template, "\ud800")) == expected


def test_lone_surrogates_are_escaped_and_round_trip() -> None:
    value = {"text": "a\ud800b\udfffc", "k\udc00": ["\ud83d"]}
    data = canonical_json(value)
    assert data == b'{"k\\udc00":["\\ud83d"],"text":"a\\ud800b\\udfffc"}'
    assert json.loads(data) == value
    assert canonical_json(json.loads(data)) == data


def test_surrogate_pair_held_as_two_code_points_becomes_the_character() -> None:
    assert canonical_json("\ud83d\ude00") == canonical_json("😀") == '"😀"'.encode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_infinity_are_refused_with_path_and_advice(bad: float) -> None:
    with pytest.raises(ValueError, match=r"at \$\.scores\[1\].*pass None"):
        canonical_json({"scores": [0.5, bad]})


def test_non_string_key_is_refused_with_path() -> None:
    with pytest.raises(ValueError, match=r"key 1 at \$\.judge\[\"odd key\"\] is a int"):
        canonical_json({"judge": {"odd key": {1: "x"}}})


def test_unsafe_integer_is_refused_with_advice() -> None:
    with pytest.raises(ValueError, match=r"integer 1152921504606846976 at \$\.n .*string"):
        canonical_json({"n": 2**60})


@pytest.mark.parametrize("bad", [{1, 2}, b"bytes", object()])
def test_unsupported_type_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"unsupported type .* at \$\.v\[0\]"):
        canonical_json({"v": [bad]})


def test_circular_reference_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="circular reference"):
        canonical_json({"loop": loop})


# --------------------------------------------------------------------------
# Writing and verifying an intact run
# --------------------------------------------------------------------------


def test_intact_run_with_tricky_text_verifies(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    records = _records(len(TRICKY_TEXTS), big=True)
    head = _write_run(run_dir, records)

    result = verify_run(run_dir, expect_head=head)

    assert result.ok and result.complete, result.problems
    assert (result.head, result.records) == (head, len(records))
    assert result.message == f"OK {run_dir}: {len(records)} records, head {head}"
    read_back = [json.loads(line) for line in _items(run_dir)]
    assert [{k: v for k, v in r.items() if k != "prev"} for r in read_back] == records
    assert read_back[0]["prev"] == genesis_hash(MANIFEST)


def test_run_layout_matches_the_contract(run: tuple[Path, str]) -> None:
    run_dir, head = run
    manifest_bytes = (run_dir / MANIFEST_NAME).read_bytes()
    manifest = json.loads(manifest_bytes)
    assert manifest_bytes == canonical_json(manifest) and not manifest_bytes.endswith(b"\n")
    lines = _lines(run_dir)
    items_head = sha256_hex(lines[-2])
    assert manifest["completed"] is True
    assert manifest["completion"] == {
        "chain_head": items_head,  # the item records; the seal after them is the final head
        "records": 6,
        "ended_at": "2024-05-01T12:05:00.000Z",
        "interrupted": False,
        "not_evaluated": 0,
    }
    assert json.loads(lines[-1]) == {
        "kind": "seal",
        "files": {
            name: sha256_hex((run_dir / name).read_bytes())
            for name in ("manifest.json", "reports/report.md", "summary.json")
        },
        "completed": True,
        "interrupted": False,
        "not_evaluated": 0,
        "records": 6,
        "ended_at": "2024-05-01T12:05:00.000Z",
        "prev": items_head,
    }
    assert head == sha256_hex(lines[-1])
    listed = [line.split("  ", 1)[1] for line in (run_dir / SUMS_NAME).read_text().splitlines()]
    assert listed == ["manifest.json", "reports/report.md", "results.jsonl", "summary.json"]
    assert not list(run_dir.rglob(".*.tmp"))


def test_empty_run_is_a_seal_chained_to_genesis(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    head = EvidenceWriter(run_dir, MANIFEST).finalize()
    (seal_line,) = _lines(run_dir)
    assert head == sha256_hex(seal_line)
    assert json.loads(seal_line)["prev"] == genesis_hash(MANIFEST)
    result = verify_run(run_dir, expect_head=head)
    assert result.ok and result.complete and result.records == 0
    assert result.message == f"OK {run_dir}: 0 records, head {head}"


def test_append_returns_the_new_head(tmp_path: Path) -> None:
    writer = EvidenceWriter(tmp_path / "run", MANIFEST)
    head = writer.append({"id": 1})
    assert head == sha256_hex(_lines(tmp_path / "run")[0]) == writer.head
    assert writer.records == 1
    writer.close()


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="needs GNU sha256sum")
def test_sha256sums_is_compatible_with_sha256sum(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    subprocess.run(["sha256sum", "--quiet", "-c", SUMS_NAME], cwd=run_dir, check=True)


# --------------------------------------------------------------------------
# Tampering
# --------------------------------------------------------------------------


def test_changed_byte_in_results_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    line_two_start = len(_lines(run_dir)[0]) + 1
    _flip_byte(run_dir / RESULTS_NAME, line_two_start + 10)  # inside line 2's "criteria"
    result = verify_run(run_dir)
    _assert_failed(result, "results.jsonl: SHA-256 mismatch")
    assert _broken(3) in result.problems


def test_changed_byte_in_results_is_caught_even_when_resealed(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    lines = _lines(run_dir)
    record = json.loads(lines[1])
    record["passed"] = True
    lines[1] = canonical_json(record)
    _write_lines(run_dir, lines)
    _reseal(run_dir)
    _assert_failed(verify_run(run_dir), _broken(3))


def test_changed_byte_in_manifest_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    manifest = (run_dir / MANIFEST_NAME).read_bytes()
    _flip_byte(run_dir / MANIFEST_NAME, manifest.index(b'"demo"') + 2)
    result = verify_run(run_dir)
    _assert_failed(result, "manifest.json: SHA-256 mismatch")
    assert _BROKEN_FIRST in result.problems


def test_changed_byte_in_other_file_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    _flip_byte(run_dir / "summary.json", 3)
    _assert_failed(verify_run(run_dir), "summary.json: SHA-256 mismatch")


def test_deleted_file_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    (run_dir / "reports" / "report.md").unlink()
    _assert_failed(verify_run(run_dir), "reports/report.md: listed in SHA256SUMS but missing")


def test_deleted_results_file_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    (run_dir / RESULTS_NAME).unlink()
    _assert_failed(verify_run(run_dir), "results.jsonl: listed in SHA256SUMS but missing")


@pytest.mark.parametrize("name", ["forged.json", "reports/extra.html", ".hidden"])
def test_added_file_is_caught(run: tuple[Path, str], name: str) -> None:
    run_dir, _ = run
    (run_dir / name).write_text("{}")
    _assert_failed(verify_run(run_dir), f"{name}: not listed in SHA256SUMS (added after the run?)")


def test_added_symlink_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    try:
        (run_dir / "link").symlink_to(run_dir / "summary.json")
    except OSError:
        pytest.skip("symlinks not available")
    _assert_failed(verify_run(run_dir), "link: not a regular file (symlink or special file added?)")


def test_reordered_lines_are_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    lines = _lines(run_dir)
    lines[1], lines[2] = lines[2], lines[1]
    _write_lines(run_dir, lines)
    result = verify_run(run_dir)
    _assert_failed(result, "results.jsonl: SHA-256 mismatch")
    assert result.problems[1:4] == [_broken(n) for n in (2, 3, 4)]


def test_naive_tail_cut_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    _write_lines(run_dir, _lines(run_dir)[:-3])  # the seal and two records
    result = verify_run(run_dir)
    _assert_failed(result, "results.jsonl: SHA-256 mismatch")
    assert any(p.startswith("results.jsonl: no seal record at the end") for p in result.problems)
    assert any(p.startswith("manifest.json: completion.chain_head") for p in result.problems)
    assert "manifest.json: completion.records is 6 but results.jsonl holds 4" in result.problems


def test_cutting_only_the_seal_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    _write_lines(run_dir, _lines(run_dir)[:-1])
    _reseal(run_dir)
    _assert_failed(
        verify_run(run_dir),
        "results.jsonl: no seal record at the end although the run was finalized "
        "(seal cut off, or written before seals existed?)",
    )


def test_tail_cut_with_consistent_reseal_needs_expect_head(
    run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The design's known limit: no secret, so only an out-of-band head catches this."""
    run_dir, head = run
    _forge_seal(run_dir, _items(run_dir)[:-2])

    forged = verify_run(run_dir)
    assert forged.ok and forged.complete and forged.records == 4  # undetectable alone

    caught = verify_run(run_dir, expect_head=head)
    assert not caught.ok
    assert caught.problems == [
        f"chain head mismatch: expected {head}, found {forged.head} "
        "(records cut or replaced, or files changed and re-sealed?)"
    ]
    assert main([str(run_dir)]) == 0
    assert main([str(run_dir), "--expect-head", head.upper()]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("OK ")
    assert out[1].startswith(f"FAILED {run_dir}: chain head mismatch: expected {head}, found ")


def test_edited_manifest_header_breaks_genesis(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    manifest = json.loads((run_dir / MANIFEST_NAME).read_bytes())
    manifest["config"]["threshold"] = 0.1
    (run_dir / MANIFEST_NAME).write_bytes(canonical_json(manifest))
    _reseal(run_dir)
    _assert_failed(
        verify_run(run_dir),
        _BROKEN_FIRST,
    )


#: The plugin's manifest names its run (id and start) as its directory's name does
NAMED = {
    **MANIFEST,
    "run_id": "2a2bb5a464" + "0" * 54,
    "started_at": "2026-12-02T21:30:38.123+01:00",
}
OWN_NAME = "20261202T203038Z-2a2bb5a464"


@pytest.mark.parametrize(
    "name",
    [
        OWN_NAME,  # the start in UTC, whatever offset the manifest gives it in
        f"{OWN_NAME}-calm-user",  # a condition's slug
        f"{OWN_NAME}-2",  # a second run of the same second and id
        "baseline",  # names of any other form claim nothing
        "20261202T203038Z",  # the stamp alone, or with what is no run id
        "20261202T203038Z-2a2bb5a46",
        "20261202T203038Z-2A2BB5A464",  # the id in capitals
        "run-20991231T000000Z-2a2bb5a464",
        "٢٠٩٩١٢٣١T000000Z-2a2bb5a464",  # digits, but not the ASCII ones a stamp is written in
    ],
)
def test_a_run_under_its_own_name_or_one_claiming_nothing_verifies(
    tmp_path: Path, name: str
) -> None:
    run_dir = tmp_path / name
    _write_run(run_dir, _records(2), manifest=NAMED)
    result = verify_run(run_dir)
    assert result.ok and result.complete, result.problems


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (
            "20991231T000000Z-2a2bb5a464",
            "directory name: it says the run started 20991231T000000Z, manifest.json says "
            "2026-12-02T21:30:38.123+01:00 (20261202T203038Z): renamed?",
        ),
        (  # one second off is off: the name is made from the same clock reading
            "20261202T203039Z-2a2bb5a464-calm",
            "directory name: it says the run started 20261202T203039Z, manifest.json says "
            "2026-12-02T21:30:38.123+01:00 (20261202T203038Z): renamed?",
        ),
        *(  # look-alikes of a newer run's name claim its start all the same
            (
                name,
                "directory name: it says the run started 20991231T000000Z, manifest.json says "
                "2026-12-02T21:30:38.123+01:00 (20261202T203038Z): renamed?",
            )
            for name in (
                "20991231T000000Z",
                "20991231T000000Z-2a2bb5a4640",
                "20991231T000000Z_2a2bb5a464",
                "20991231T000000Z-zzzzzzzzzz",
            )
        ),
        (
            "20261202T203038Z-DEADBEEF00",
            "directory name: it says run id DEADBEEF00, manifest.json says 2a2bb5a46400000… "
            "(renamed, or another run's files?)",
        ),
        (
            "20261202T203038Z-deadbeef00",
            "directory name: it says run id deadbeef00, manifest.json says 2a2bb5a46400000… "
            "(renamed, or another run's files?)",
        ),
    ],
)
def test_a_renamed_run_fails_saying_what_its_name_claims(
    tmp_path: Path, name: str, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name of the plugin's form is what a reader goes by (an old run renamed to look
    newer, another run's files put under a run's name): it must agree with the manifest."""
    original = tmp_path / OWN_NAME
    head = _write_run(original, _records(2), manifest=NAMED)
    renamed = original.rename(tmp_path / name)
    _assert_failed(verify_run(renamed, expect_head=head), problem)
    assert main([str(renamed)]) == 1
    assert capsys.readouterr().out == f"FAILED {renamed}: {problem}\n"


def test_a_run_verified_from_inside_is_held_to_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renamed = tmp_path / "20991231T000000Z-2a2bb5a464"
    _write_run(renamed, _records(1), manifest=NAMED)
    monkeypatch.chdir(renamed)
    assert verify_run(Path(".")).problems[0].startswith("directory name: it says the run started")


def test_what_a_forged_manifest_gives_for_a_name_is_shown_escaped(tmp_path: Path) -> None:
    run_dir = tmp_path / "20261202T203038Z-deadbeef00"
    _write_run(run_dir, _records(1), manifest={**NAMED, "run_id": "\x1b[2J\x1b]0;pwned\x07"})
    (problem,) = verify_run(run_dir).problems
    assert "\x1b" not in problem and "\\x1b[2J" in problem


def test_a_manifest_start_that_cannot_be_read_fails_a_name_of_the_plugins_form(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / OWN_NAME
    _write_run(run_dir, _records(1), manifest={**NAMED, "started_at": "2026-12-02T20:30:38"})
    _assert_failed(
        verify_run(run_dir), "directory name: manifest.json gives no UTC start to hold it to"
    )


@pytest.mark.parametrize("started_at", ["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00"])
def test_a_manifest_start_outside_the_calendar_in_utc_fails_naming_the_manifest(
    tmp_path: Path, started_at: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A start that in UTC falls in year 10000 or year 0 is no start: a named problem, not a
    crash of verify (and of compare, uncertain and --baseline, which verify first), and
    --baseline's ordering goes by the directory's name instead."""
    from pytest_agenteval.evidence._run_dir import run_started

    run_dir = tmp_path / OWN_NAME
    _write_run(run_dir, _records(1), manifest={**NAMED, "started_at": started_at})
    problem = "directory name: manifest.json gives no UTC start to hold it to"
    _assert_failed(verify_run(run_dir), problem)
    assert main([str(run_dir)]) == 1
    assert capsys.readouterr().out == f"FAILED {run_dir}: {problem}\n"
    assert run_started(run_dir).strftime(ev.RUN_NAME_STAMP) == OWN_NAME[:16]


def test_manifest_completion_edit_does_not_touch_genesis_but_is_caught(
    run: tuple[Path, str],
) -> None:
    run_dir, _ = run
    manifest = json.loads((run_dir / MANIFEST_NAME).read_bytes())
    manifest["completion"]["records"] = 7
    (run_dir / MANIFEST_NAME).write_bytes(canonical_json(manifest))
    _reseal(run_dir)
    result = verify_run(run_dir)
    _assert_failed(
        result, "manifest.json: SHA-256 does not match the seal (changed after the run?)"
    )
    assert "manifest.json: completion.records is 7 but results.jsonl holds 6" in result.problems


def test_non_canonical_manifest_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    manifest = json.loads((run_dir / MANIFEST_NAME).read_bytes())
    (run_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2))
    _reseal(run_dir)
    _assert_failed(verify_run(run_dir), "manifest.json: not in canonical form (edited by hand?)")


def test_non_canonical_line_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    lines = _lines(run_dir)
    lines[3] = json.dumps(json.loads(lines[3])).encode()  # same data, spaces added
    _write_lines(run_dir, lines)
    _reseal(run_dir)
    result = verify_run(run_dir)
    _assert_failed(result, "results.jsonl line 4: not in canonical form (edited by hand?)")


def test_partial_last_line_is_reported_not_crashed(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    with open(run_dir / RESULTS_NAME, "ab") as handle:
        handle.write(b'{"id":"half')
    _reseal(run_dir)
    result = verify_run(run_dir)
    _assert_failed(
        result, "results.jsonl line 8: incomplete last line (no trailing newline; partial write?)"
    )
    assert result.records == 6


def test_deleted_sha256sums_is_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    (run_dir / SUMS_NAME).unlink()
    _assert_failed(
        verify_run(run_dir), "SHA256SUMS: missing, but the manifest says the run was finalized"
    )


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"not a checksum\n", "SHA256SUMS line 1: malformed (expected '<64 hex>  <path>')"),
        (b"0" * 64 + b"  ../outside\n", "SHA256SUMS line 1: unsafe path ../outside"),
        (b"0" * 64 + b"  /etc/passwd\n", "SHA256SUMS line 1: unsafe path /etc/passwd"),
        # a path the file system refuses: a verdict of tampering, not a crash or an I/O error
        (b"0" * 64 + b"  zzz\0x\n", "SHA256SUMS line 1: unsafe path 'zzz\\x00x'"),
        (b"0" * 64 + b"  " + b"a" * 256 + b"\n", f"SHA256SUMS line 1: unsafe path {'a' * 256}"),
        (
            b"0" * 64 + b"  " + b"a/" * 2100 + b"b\n",
            "SHA256SUMS line 1: unsafe path " + "a/" * 2100 + "b",
        ),
        (
            b"0" * 64 + b"  manifest.json",
            "SHA256SUMS: last line is not newline-terminated (truncated?)",
        ),
    ],
)
def test_malformed_sha256sums_is_reported(
    run: tuple[Path, str], content: bytes, problem: str
) -> None:
    run_dir, _ = run
    (run_dir / SUMS_NAME).write_bytes(content)
    _assert_failed(verify_run(run_dir), problem)


def test_unsorted_sha256sums_is_reported(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    lines = (run_dir / SUMS_NAME).read_bytes().splitlines(keepends=True)
    (run_dir / SUMS_NAME).write_bytes(lines[1] + lines[0] + b"".join(lines[2:]))
    _assert_failed(
        verify_run(run_dir),
        "SHA256SUMS line 2: manifest.json is out of order (entries must be sorted by path)",
    )


def test_duplicate_sha256sums_entry_is_reported(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    lines = (run_dir / SUMS_NAME).read_bytes().splitlines(keepends=True)
    (run_dir / SUMS_NAME).write_bytes(lines[0] + b"".join(lines))
    _assert_failed(verify_run(run_dir), "SHA256SUMS line 2: duplicate entry for manifest.json")


def _list_in_sums(run_dir: Path, rel: str, digest: str = "0" * 64) -> None:
    """What a forger does to vouch for a file: list it in SHA256SUMS where it sorts."""
    lines = (run_dir / SUMS_NAME).read_bytes().splitlines(keepends=True)
    lines.append(f"{digest}  {rel}\n".encode())
    lines.sort(key=lambda line: line[66:])
    (run_dir / SUMS_NAME).write_bytes(b"".join(lines))


def _symlink(link: Path, target: Path | str) -> None:
    try:
        link.symlink_to(target)
    except OSError:
        pytest.skip("symlinks not available")


def test_a_listed_path_through_a_symlink_loop_is_tampering(
    run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, head = run
    _symlink(run_dir / "loop", "loop")
    _list_in_sums(run_dir, "loop/x")
    problem = "loop/x: its path goes through a symlink (loop); refused"
    _assert_failed(verify_run(run_dir, expect_head=head), problem)
    assert main([str(run_dir), "--expect-head", head]) == 1
    assert capsys.readouterr().out.startswith(f"FAILED {run_dir}: {problem}")


def test_a_listed_path_longer_than_a_file_system_takes_beside_the_run_is_tampering(
    run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each name fits and so does the path, but not once joined to the run directory's:
    no run writes it, so it is missing, not an error of verify."""
    run_dir, head = run
    rel = "/".join(["a" * 255] * 16)
    _list_in_sums(run_dir, rel)
    problem = f"{rel}: listed in SHA256SUMS but missing"
    _assert_failed(verify_run(run_dir, expect_head=head), problem)
    assert main([str(run_dir), "--expect-head", head]) == 1
    assert capsys.readouterr().out.startswith(f"FAILED {run_dir}: {problem}")


@pytest.mark.parametrize("opens_at", [True, False], ids=["folder-by-folder", "lstat-first"])
def test_a_listed_path_through_a_symlinked_folder_is_refused_never_opened(
    run: tuple[Path, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    opens_at: bool,
) -> None:
    """O_NOFOLLOW guards only a path's last name: a folder linked outside the run must not
    lead verify to open (and hash) a file there, even one listed with its true digest; nor
    where folders cannot be opened one inside the other (Windows)."""
    run_dir, head = run
    if not opens_at:
        monkeypatch.setattr(ev, "_OPENS_AT", False)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("private data outside the run\n")
    _symlink(run_dir / "extra", outside)
    _list_in_sums(run_dir, "extra/secret.txt", sha256_hex(secret.read_bytes()))
    opened: set[tuple[int, int]] = set()
    real_open = os.open

    def spy(*args: Any, **kwargs: Any) -> int:
        fd = real_open(*args, **kwargs)
        info = os.fstat(fd)
        opened.add((info.st_dev, info.st_ino))
        return fd

    monkeypatch.setattr(os, "open", spy)
    problem = "extra/secret.txt: its path goes through a symlink (extra); refused"
    _assert_failed(verify_run(run_dir, expect_head=head), problem)
    assert main([str(run_dir), "--expect-head", head]) == 1
    assert capsys.readouterr().out.startswith(f"FAILED {run_dir}: {problem}")
    for path in (outside, secret):
        assert (path.stat().st_dev, path.stat().st_ino) not in opened, path


def test_random_corruption_never_crashes_and_never_passes(tmp_path: Path) -> None:
    """Fuzz: flip or cut random bytes anywhere; verify must answer with problems."""
    pristine = tmp_path / "pristine"
    _write_run(pristine, _records(4))
    rng = random.Random(8785)
    names = [MANIFEST_NAME, RESULTS_NAME, SUMS_NAME, "summary.json"]
    for attempt in range(60):
        run_dir = tmp_path / f"fuzz{attempt}"
        shutil.copytree(pristine, run_dir)
        target = run_dir / rng.choice(names)
        data = bytearray(target.read_bytes())
        position = rng.randrange(len(data))
        if attempt % 3 == 0:
            del data[position:]
        else:
            data[position] = (data[position] + rng.randrange(1, 256)) % 256
        target.write_bytes(bytes(data))
        result = verify_run(run_dir)
        assert not result.ok and result.problems, (target.name, position)
        assert "\n" not in result.message


def test_garbage_everywhere_is_reported_not_crashed(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / MANIFEST_NAME).write_bytes(b"\xff\xfe{[")
    (run_dir / RESULTS_NAME).write_bytes(b"\xff\n[]\n" + b"[" * 100_000 + b"\nNaN\n\n")
    (run_dir / SUMS_NAME).write_bytes(b"\x00\xff\n")
    result = verify_run(run_dir)
    assert not result.ok and not result.io_error
    assert result.problems[0].startswith("manifest.json: not valid JSON")
    assert "results.jsonl line 1: not valid JSON" in " ".join(result.problems)
    assert "results.jsonl line 2: not a JSON object" in result.problems
    assert "results.jsonl line 5: empty line" in result.problems


# --------------------------------------------------------------------------
# Incomplete runs
# --------------------------------------------------------------------------


def test_interrupted_run_is_intact_but_incomplete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    head = _write_run(run_dir, _records(3), interrupted=True)
    manifest = json.loads((run_dir / MANIFEST_NAME).read_bytes())
    assert manifest["completed"] is False and manifest["completion"]["interrupted"] is True

    result = verify_run(run_dir, expect_head=head)
    assert result.ok and not result.complete
    assert result.message == (
        f"INCOMPLETE run: 3 records intact, run did not complete "
        f"(interrupted; 2 not evaluated); head {head}"
    )
    assert main([str(run_dir)]) == 3
    assert capsys.readouterr().out == result.message + "\n"


def test_never_finalized_run_is_reported_as_unsealed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    writer = EvidenceWriter(run_dir, MANIFEST)
    writer.append({"id": 1})
    head = writer.append({"id": 2})
    writer.close()  # the process "crashed" here

    result = verify_run(run_dir)
    assert result.ok and not result.complete and result.head == head
    assert result.message == (
        "INCOMPLETE run: 2 records intact, run did not complete "
        f"(never sealed: no seal record; still running or crashed); head {head}"
    )
    assert main([str(run_dir)]) == 3
    captured = capsys.readouterr()
    assert captured.out.startswith("INCOMPLETE run: 2 records intact")
    # what nothing binds is said (a reviewer forged summary.json of such a run, unseen)
    assert not result.sealed
    assert captured.err == (
        "note: the records end without a seal: summary.json, the reports and any other "
        "file beside results.jsonl and manifest.json are bound by nothing\n"
    )


def test_tampered_unsealed_run_is_still_caught_by_the_chain(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    writer = EvidenceWriter(run_dir, MANIFEST)
    for index in range(3):
        writer.append({"id": index})
    writer.close()
    lines = _lines(run_dir)
    lines[0] = lines[0].replace(b'"id":0', b'"id":9')
    _write_lines(run_dir, lines)
    _assert_failed(verify_run(run_dir), _broken(2))


def test_context_manager_marks_an_exception_as_interrupted(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt), EvidenceWriter(run_dir, MANIFEST) as writer:
        writer.append({"id": 1})
        raise KeyboardInterrupt
    result = verify_run(run_dir)
    assert result.ok and not result.complete and result.records == 1


# --------------------------------------------------------------------------
# Writer contract
# --------------------------------------------------------------------------


def test_writer_refuses_an_existing_run(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match="refusing to overwrite evidence"):
        EvidenceWriter(run_dir, MANIFEST)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_writer_creates_parents_and_accepts_a_non_empty_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "a" / "b" / "run"
    writer = EvidenceWriter(run_dir, {**MANIFEST, "completed": False})
    writer.finalize()
    assert verify_run(run_dir).ok


@pytest.mark.parametrize(
    "manifest", [{"completion": {}}, {"completed": True}, {"x": math.nan}, {1: "x"}]
)
def test_writer_rejects_bad_manifests_before_touching_disk(
    tmp_path: Path, manifest: dict[Any, Any]
) -> None:
    with pytest.raises(ValueError):
        EvidenceWriter(tmp_path / "run", manifest)
    assert not (tmp_path / "run").exists()


def test_append_rejects_prev_and_seal_without_writing(tmp_path: Path) -> None:
    writer = EvidenceWriter(tmp_path / "run", MANIFEST)
    with pytest.raises(ValueError, match="'prev'"):
        writer.append({"prev": "x"})
    with pytest.raises(ValueError, match="reserved"):
        writer.append({"kind": "seal", "files": {}})
    with pytest.raises(TypeError):
        writer.append(["not", "a", "dict"])  # type: ignore[arg-type]  # the wrong type is the test
    writer.append({"score": None})
    writer.finalize()
    result = verify_run(tmp_path / "run")
    assert result.ok and result.records == 1


def test_writer_use_after_finalize_raises(tmp_path: Path) -> None:
    writer = EvidenceWriter(tmp_path / "run", MANIFEST)
    writer.finalize()
    with pytest.raises(RuntimeError):
        writer.append({"id": 1})
    with pytest.raises(RuntimeError):
        writer.finalize()


# --------------------------------------------------------------------------
# Disk full
# --------------------------------------------------------------------------


def _enospc_after_partial_write(real_write: Callable[[int, Any], int]) -> Callable[[int, Any], int]:
    """An ``os.write`` that writes a few bytes, then reports a full disk."""
    calls = {"n": 0}

    def write(fd: int, data: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data)[:5])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return write


@pytest.mark.parametrize("existing", [None, b"old content"])
def test_disk_full_during_atomic_write_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bytes | None
) -> None:
    target = tmp_path / "summary.json"
    if existing is not None:
        target.write_bytes(existing)
    with monkeypatch.context() as patch:
        patch.setattr(os, "write", _enospc_after_partial_write(os.write))
        with pytest.raises(OSError) as raised:
            write_file_atomic(target, b"new content " * 1000)
    assert raised.value.errno == errno.ENOSPC
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if existing is None else [target.name])
    if existing is not None:
        assert target.read_bytes() == existing


def test_failed_rename_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "junit.xml"

    def failing_replace(src: Any, dst: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "replace", failing_replace)
        with pytest.raises(OSError):
            write_file_atomic(target, b"<testsuites/>")
    assert list(tmp_path.iterdir()) == []


def test_disk_full_during_append_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    writer = EvidenceWriter(run_dir, MANIFEST)
    writer.append({"id": 1})
    size, head = (run_dir / RESULTS_NAME).stat().st_size, writer.head
    with monkeypatch.context() as patch:
        patch.setattr(os, "write", _enospc_after_partial_write(os.write))
        with pytest.raises(OSError):
            writer.append({"id": 2, "text": "y" * 100})
    assert (run_dir / RESULTS_NAME).stat().st_size == size and writer.head == head
    writer.append({"id": 3})  # space is back: the chain continues from the last good line
    final = writer.finalize()
    result = verify_run(run_dir, expect_head=final)
    assert result.ok and result.complete and result.records == 2


def test_failed_rollback_poisons_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    writer = EvidenceWriter(run_dir, MANIFEST)
    writer.append({"id": 1})

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with monkeypatch.context() as patch:
        patch.setattr(os, "write", _enospc_after_partial_write(os.write))
        patch.setattr(os, "ftruncate", no_truncate)
        with pytest.raises(OSError):
            writer.append({"id": 2})
    with pytest.raises(RuntimeError, match="partial line"):
        writer.append({"id": 3})
    writer.finalize()
    result = verify_run(run_dir)
    _assert_failed(
        result, "results.jsonl line 2: incomplete last line (no trailing newline; partial write?)"
    )


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def test_cli_ok(run: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    run_dir, head = run
    assert main([str(run_dir), "--expect-head", head]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"OK {run_dir}: 6 records, head {head}\n"
    assert captured.err == ""
    # without the head kept elsewhere, the verdict says what it cannot rule out
    assert main([str(run_dir)]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"OK {run_dir}: 6 records, head {head}\n"
    assert captured.err == (
        "note: the head was not compared with one kept outside the run (--expect-head): "
        "files changed and consistently re-sealed would verify too\n"
    )
    assert verify_run(run_dir).sealed


def test_cli_tampered_prints_one_line_and_details_on_stderr(
    run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, _ = run
    _write_lines(run_dir, _lines(run_dir)[:-2])
    assert main([str(run_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.out == f"FAILED {run_dir}: results.jsonl: SHA-256 mismatch (+3 more)\n"
    assert captured.err.splitlines()[0].startswith("  results.jsonl: no seal record at the end")
    assert captured.err.splitlines()[1].startswith("  manifest.json: completion.chain_head")


def test_cli_missing_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    assert main([str(missing)]) == 2
    assert capsys.readouterr().out == f"ERROR {missing}: run directory does not exist\n"
    (tmp_path / "file").write_text("x")
    assert main([str(tmp_path / "file")]) == 2
    assert capsys.readouterr().out == f"ERROR {tmp_path / 'file'}: not a directory\n"


def test_cli_not_a_run_directory_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    assert "not an agenteval run directory" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [[], ["run", "--expect-head", "abc"], ["a", "b"]])
def test_cli_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "usage: agenteval verify" in capsys.readouterr().err


def test_cli_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "--expect-head" in capsys.readouterr().out


def test_cli_strips_the_subcommand_from_sys_argv(
    run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir, _ = run
    monkeypatch.setattr("sys.argv", ["agenteval", "verify", str(run_dir)])
    assert main() == 0
    assert capsys.readouterr().out.startswith("OK ")


def test_verify_run_rejects_a_malformed_expect_head(run: tuple[Path, str]) -> None:
    with pytest.raises(ValueError, match="64 hex"):
        verify_run(run[0], expect_head="abc")


def test_module_is_pure() -> None:
    source = Path(ev.__file__).read_text()
    assert "import pytest" not in source and "from pytest " not in source


# --------------------------------------------------------------------------
# Whatever an agent returns: json_safe
# --------------------------------------------------------------------------


class _Shouty:
    def __str__(self) -> str:
        raise RuntimeError("no")


def test_json_safe_keeps_what_canonical_json_cannot_hold_as_strings() -> None:
    import datetime

    value = {
        "big": 2**70,
        "neg": -(2**64),
        "edge": 2**53 - 1,
        "floats": [math.nan, math.inf, -math.inf, 0.5],
        "keys": {1: "int", (2, 3): "tuple", None: "none"},
        "tuple": (1, 2),
        "set": {3, 1},
        "bytes": b"ok \xff",
        "when": datetime.date(2024, 5, 1),
        "odd": _Shouty(),
    }
    safe, notes = json_safe(value)
    assert safe == {
        "big": "1180591620717411303424",
        "neg": "-18446744073709551616",
        "edge": 2**53 - 1,
        "floats": ["NaN", "Infinity", "-Infinity", 0.5],
        "keys": {"1": "int", "(2, 3)": "tuple", "None": "none"},
        "tuple": [1, 2],
        "set": [1, 3],
        "bytes": "ok \udcff",
        "when": "2024-05-01",
        "odd": "<unprintable _Shouty>",
    }
    assert notes == [
        {"path": "$.big", "was": "int"},
        {"path": "$.neg", "was": "int"},
        {"path": "$.floats[0]", "was": "float"},
        {"path": "$.floats[1]", "was": "float"},
        {"path": "$.floats[2]", "was": "float"},
        {"path": '$.keys["1"]', "was": "int key"},
        {"path": '$.keys["(2, 3)"]', "was": "tuple key"},
        {"path": "$.keys.None", "was": "NoneType key"},
        {"path": "$.set", "was": "set"},
        {"path": "$.bytes", "was": "bytes"},
        {"path": "$.when", "was": "date"},
        {"path": "$.odd", "was": "_Shouty"},
    ]
    data = canonical_json(safe)
    assert b'"1180591620717411303424"' in data and b'"ok \\udcff"' in data
    assert isinstance(safe, dict) and isinstance(safe["big"], str)
    assert int(safe["big"]) == 2**70  # exact: the value can be read back
    assert json.loads(data)["bytes"].encode("utf-8", "surrogateescape") == b"ok \xff"


def test_json_safe_never_overwrites_a_key_when_names_collide() -> None:
    safe, notes = json_safe({1: "int", "1": "str", (1,): "tuple", "(1,)": "str too"})
    assert safe == {"1": "str", "1 (int)": "int", "(1,)": "str too", "(1,) (tuple)": "tuple"}
    assert [n["was"] for n in notes] == ["int key", "tuple key"]
    # a surrogate pair held as two code points and its character are one JSON key
    joined, _ = json_safe({"\ud83d\ude00": 1, "😀": 2})
    assert joined == {"😀": 1, "😀 (str)": 2}
    canonical_json(joined)


def test_json_safe_survives_cycles_deep_nesting_and_huge_integers() -> None:
    loop: dict[str, Any] = {"name": "x"}
    loop["self"] = loop
    deep: list[Any] = []
    inner = deep
    for _ in range(300):
        inner.append([])
        inner = inner[0]
    huge = 10**5000  # beyond Python's 4300-digit int-to-str limit
    safe, notes = json_safe({"loop": loop, "deep": deep, "huge": huge})
    assert isinstance(safe, dict)
    assert safe["loop"] == {"name": "x", "self": "<circular reference to $.loop>"}
    assert isinstance(safe["huge"], str) and int(safe["huge"], 16) == huge
    assert {"path": "$.loop.self", "was": "circular reference"} in notes
    level = safe["deep"]
    for _ in range(199):
        assert isinstance(level, list)
        level = level[0]
    assert isinstance(level, str) and level.startswith("[[[")  # the rest, kept as JSON text
    canonical_json(safe)


def test_json_safe_lists_at_most_100_notes() -> None:
    _, notes = json_safe([math.nan] * 150)
    assert len(notes) == 101
    assert notes[-1] == {"path": "$", "was": "50 more values (not listed)"}


def test_json_safe_leaves_plain_data_as_it_is() -> None:
    records = _records(len(TRICKY_TEXTS))
    safe, notes = json_safe(records)
    assert safe == records and notes == []
    assert json_safe_record({"a": 1}) == {"a": 1}  # no marker when nothing changed


def test_json_safe_record_keeps_earlier_notes() -> None:
    once = json_safe_record({"n": 2**60})
    assert once == {"n": "1152921504606846976", "converted": [{"path": "$.n", "was": "int"}]}
    twice = json_safe_record({**once, "x": math.nan})
    assert twice["converted"] == [{"path": "$.n", "was": "int"}, {"path": "$.x", "was": "float"}]
    assert json_safe_record(once) == once


def test_numpy_values_become_plain_numbers() -> None:
    np = pytest.importorskip("numpy")
    safe, notes = json_safe({"i": np.int64(7), "f": np.float32(0.5), "a": np.array([1, 2])})
    assert safe == {"i": 7, "f": 0.5, "a": [1, 2]}
    assert type(safe["i"]) is int and [n["path"] for n in notes] == ["$.f", "$.a"]


def test_append_records_what_an_agent_returned_and_the_run_verifies(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    writer = EvidenceWriter(run_dir, MANIFEST)
    writer.append(
        {
            "tool_calls": [{"name": "pay", "arguments": {"amount": 2**70, "rate": math.nan}}],
            "usage": {"prompt_tokens": 10**30, 2: "two"},
        }
    )
    head = writer.finalize()
    (record,) = [json.loads(line) for line in _items(run_dir)]
    assert record["tool_calls"][0]["arguments"] == {"amount": str(2**70), "rate": "NaN"}
    assert record["usage"] == {"prompt_tokens": str(10**30), "2": "two"}
    assert [n["path"] for n in record["converted"]] == [
        "$.tool_calls[0].arguments.amount",
        "$.tool_calls[0].arguments.rate",
        "$.usage.prompt_tokens",
        '$.usage["2"]',
    ]
    result = verify_run(run_dir, expect_head=head)
    assert result.ok and result.complete, result.problems


# --------------------------------------------------------------------------
# The seal: every file bound to the head
# --------------------------------------------------------------------------


def _rewrite_summary(run_dir: Path) -> None:
    write_file_atomic(run_dir / "summary.json", canonical_json({"passed": 5, "failed": 0}))


def _edit_report(run_dir: Path) -> None:
    (run_dir / "reports" / "report.md").write_text("# Report\nAll green.\n")


def _add_file(run_dir: Path) -> None:
    (run_dir / "reports" / "extra.html").write_text("<p>fine</p>")


def _delete_file(run_dir: Path) -> None:
    (run_dir / "reports" / "report.md").unlink()


@pytest.mark.parametrize(
    ("tamper", "problem"),
    [
        (
            _rewrite_summary,
            "summary.json: SHA-256 does not match the seal (changed after the run?)",
        ),
        (
            _edit_report,
            "reports/report.md: SHA-256 does not match the seal (changed after the run?)",
        ),
        (_add_file, "reports/extra.html: present but not sealed (added after the run?)"),
        (_delete_file, "reports/report.md: sealed but missing (deleted?)"),
    ],
)
def test_a_changed_added_or_deleted_file_is_caught_after_sha256sums_is_recomputed(
    run: tuple[Path, str], tamper: Callable[[Path], None], problem: str
) -> None:
    run_dir, head = run
    tamper(run_dir)
    _reseal(run_dir)
    _assert_failed(verify_run(run_dir), problem)
    _assert_failed(verify_run(run_dir, expect_head=head), problem)
    assert main([str(run_dir), "--expect-head", head]) == 1


def test_a_forged_seal_is_caught_only_by_expect_head(run: tuple[Path, str]) -> None:
    run_dir, head = run
    _rewrite_summary(run_dir)
    forged_head = _forge_seal(run_dir)
    assert verify_run(run_dir).ok  # consistent: no secret, so undetectable alone
    caught = verify_run(run_dir, expect_head=head)
    assert caught.problems == [
        f"chain head mismatch: expected {head}, found {forged_head} "
        "(records cut or replaced, or files changed and re-sealed?)"
    ]


def test_the_records_head_given_as_expected_fails_and_says_which_head_it_is(
    run: tuple[Path, str],
) -> None:
    """summary.json shows the head of the item records, which a forged seal follows as
    well: given to --expect-head it must not pass, and the message says which head it is
    and which one to pass (it said "records cut or replaced", as if tampered)."""
    run_dir, head = run
    manifest = json.loads((run_dir / MANIFEST_NAME).read_bytes())
    records_head = manifest["completion"]["chain_head"]
    assert records_head != head
    result = verify_run(run_dir, expect_head=records_head)
    assert not result.ok
    (problem,) = result.problems
    assert problem.startswith(
        f"chain head mismatch: expected {records_head}, the head of the item records"
    )
    assert f"the run's head, after its seal, is {head}" in problem
    # and a forger's seal over changed files is still caught with that head given
    _rewrite_summary(run_dir)
    _forge_seal(run_dir)
    assert not verify_run(run_dir, expect_head=records_head).ok


def test_an_interrupted_run_relabelled_complete_is_caught(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    head = _write_run(run_dir, _records(3), interrupted=True)
    manifest = json.loads((run_dir / MANIFEST_NAME).read_bytes())
    manifest["completed"] = True
    manifest["completion"].update(interrupted=False, not_evaluated=0)
    (run_dir / MANIFEST_NAME).write_bytes(canonical_json(manifest))
    _reseal(run_dir)

    result = verify_run(run_dir)
    _assert_failed(
        result, "manifest.json: SHA-256 does not match the seal (changed after the run?)"
    )
    assert "manifest.json: 'completed' is true but the seal says false" in result.problems
    assert (
        "manifest.json: completion.interrupted is false but the seal says true" in result.problems
    )
    assert not result.complete

    _forge_seal(run_dir, interrupted=False, not_evaluated=0)  # the seal relabelled too
    assert verify_run(run_dir).complete
    caught = verify_run(run_dir, expect_head=head)
    assert not caught.ok and caught.problems[0].startswith("chain head mismatch")


def test_a_seal_relabelled_without_the_manifest_disagrees_with_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    _write_run(run_dir, _records(3), interrupted=True)
    lines = _lines(run_dir)
    seal = json.loads(lines[-1])
    seal.update(completed=True, interrupted=False)
    _write_lines(run_dir, [*lines[:-1], canonical_json(seal)])
    _reseal(run_dir)
    result = verify_run(run_dir)
    _assert_failed(result, "manifest.json: 'completed' is false but the seal says true")
    assert not result.complete


def test_records_after_the_seal_are_caught(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    lines = _lines(run_dir)
    extra = canonical_json({"id": "late", "prev": sha256_hex(lines[-1])})
    _write_lines(run_dir, [*lines, extra])
    _reseal(run_dir)
    _assert_failed(
        verify_run(run_dir),
        "results.jsonl line 8: a record after the seal (appended after the run?)",
    )


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"files": None}, "results.jsonl line 7: malformed seal record (files)"),
        (
            {"records": -1, "ended_at": 5},
            "results.jsonl line 7: malformed seal record (records, ended_at)",
        ),
        (
            {"files": {"../outside": "0" * 64}},
            "results.jsonl line 7: the seal lists ../outside, which it cannot bind",
        ),
        (
            {"files": {"a\0b": "0" * 64}},
            "results.jsonl line 7: the seal lists 'a\\x00b', which it cannot bind",
        ),
        (
            {"files": {"\ud800": "0" * 64}},
            "results.jsonl line 7: the seal lists '\\ud800', which it cannot bind",
        ),
        (
            {"files": {"x" * 256: "0" * 64}},
            f"results.jsonl line 7: the seal lists {'x' * 256}, which it cannot bind",
        ),
        (
            {"files": {"results.jsonl": "0" * 64}},
            "results.jsonl line 7: the seal lists results.jsonl, which it cannot bind",
        ),
        ({"records": 5}, "results.jsonl line 7: the seal counts 5 records but 6 precede it"),
        (
            {"interrupted": True},
            "results.jsonl line 7: the seal says completed true and interrupted true",
        ),
    ],
)
def test_a_malformed_seal_is_reported(
    run: tuple[Path, str], change: dict[str, Any], problem: str
) -> None:
    run_dir, _ = run
    lines = _lines(run_dir)
    seal = {**json.loads(lines[-1]), **change}
    _write_lines(run_dir, [*lines[:-1], canonical_json(seal)])
    _reseal(run_dir)
    result = verify_run(run_dir)
    assert not result.ok and problem in result.problems, result.problems


def test_a_second_seal_is_reported(run: tuple[Path, str]) -> None:
    run_dir, _ = run
    lines = _lines(run_dir)
    again = canonical_json({**json.loads(lines[-1]), "prev": sha256_hex(lines[-1])})
    _write_lines(run_dir, [*lines, again])
    _reseal(run_dir)
    assert "results.jsonl line 8: a second seal record" in verify_run(run_dir).problems


def test_finalize_resumes_after_a_failed_step_and_seals_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    writer = EvidenceWriter(run_dir, MANIFEST)
    writer.append({"id": 1})
    write_file_atomic(run_dir / "summary.json", b"{}")
    with monkeypatch.context() as patch:

        def full_disk(run_dir: Path) -> bytes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        patch.setattr(ev, "build_sha256sums", full_disk)
        with pytest.raises(OSError):
            writer.finalize()
    head = writer.finalize()
    assert sum(1 for line in _lines(run_dir) if is_seal(json.loads(line))) == 1
    result = verify_run(run_dir, expect_head=head)
    assert result.ok and result.complete and result.records == 1, result.problems


def test_finalize_after_close_still_seals(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    writer = EvidenceWriter(run_dir, MANIFEST)
    writer.append({"id": 1})
    writer.close()
    head = writer.finalize()
    assert head == writer.head == sha256_hex(_lines(run_dir)[-1])
    assert verify_run(run_dir, expect_head=head).complete


# --------------------------------------------------------------------------
# verify reads only regular files, bounded
# --------------------------------------------------------------------------


def _verify_in_subprocess(run_dir: Path) -> subprocess.CompletedProcess[str]:
    """A hang must fail this test, not the suite: a separate process with a timeout."""
    import sys

    return subprocess.run(
        [sys.executable, "-m", "pytest_agenteval", "verify", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("name", [RESULTS_NAME, SUMS_NAME, MANIFEST_NAME, "summary.json"])
@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_verify_refuses_a_fifo_or_dev_zero_in_place_of_a_file(
    run: tuple[Path, str], name: str, special: str
) -> None:
    run_dir, _ = run
    (run_dir / name).unlink()
    if special == "fifo":
        os.mkfifo(run_dir / name)
        kind = "FIFO"
    else:
        if not os.path.exists("/dev/zero"):
            pytest.skip("needs /dev/zero")
        (run_dir / name).symlink_to("/dev/zero")
        kind = "symlink"
    done = _verify_in_subprocess(run_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{name}: not a regular file ({kind}); refused" in done.stdout + done.stderr


def test_verify_refuses_oversized_files(
    run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, _ = run
    size = (run_dir / MANIFEST_NAME).stat().st_size
    monkeypatch.setattr(ev, "_MAX_SMALL_FILE", 100)
    _assert_failed(
        verify_run(run_dir), f"manifest.json: too large ({size} bytes; the limit is 100)"
    )
    monkeypatch.setattr(ev, "_MAX_SMALL_FILE", 1 << 20)
    monkeypatch.setattr(ev, "_CHUNK", 64)
    monkeypatch.setattr(ev, "_MAX_LINE", 100)
    result = verify_run(run_dir)
    assert "results.jsonl line 1: line longer than 100 bytes; not read" in result.problems
    assert not result.ok


def test_verify_reads_small_chunks_the_same(
    run: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir, head = run
    monkeypatch.setattr(ev, "_CHUNK", 7)  # lines split across many reads
    result = verify_run(run_dir, expect_head=head)
    assert result.ok and result.complete and result.records == 6, result.problems


def test_the_evidence_notes_only_conversions_of_the_fields_it_keeps() -> None:
    from pytest_agenteval.evidence._chain import json_safe_record
    from pytest_agenteval.evidence._run_dir import evidence_fields

    payload = {
        "nodeid": "f.yaml::s-1",
        "answer": "ok",
        "usage": {"prompt_tokens": 2**60},  # kept: its note stays
        "mcp_servers": [{"timeout": float("nan")}],  # manifest only: its note goes
        "family_root": {"odd key": {1, 2}},  # never written
        "result": {"meta": {"x y": float("inf")}},
    }
    record: dict[str, Any] = evidence_fields(json_safe_record(payload))
    assert "mcp_servers" not in record and "family_root" not in record
    assert [n["path"] for n in record["converted"]] == [
        "$.usage.prompt_tokens",
        '$.result.meta["x y"]',
    ]
    quiet = evidence_fields(json_safe_record({"nodeid": "n", "mcp_servers": [float("nan")]}))
    assert "converted" not in quiet
    # past the walker's list of notes, its "N more values" note names no field: it stays
    many = {"nodeid": "n", "usage": {"t": 2**60}, "mcp_servers": [float("nan")] * 500}
    notes = evidence_fields(json_safe_record(many))["converted"]
    assert isinstance(notes, list) and any(
        isinstance(n, dict) and n["path"] == "$" and "more" in str(n["was"]) for n in notes
    )


def test_indented_json_is_written_in_pieces_and_reads_back_as_the_safe_copy() -> None:
    """summary.json's writer: one walk makes the value safe and redacts it; the text is
    streamed, UTF-8 throughout, with a lone surrogate kept as its JSON escape."""
    import io

    from pytest_agenteval.evidence._redact import Redactor

    secret = "tok-9f8e7d6c5b4a3210"
    value = {
        "ok": ["é", "😀", 1.5, 2**60, math.nan, None, True],
        "lone": "cut\udc80here",
        f"key {secret}": f"value {secret}",
        1: "int key",
    }
    clean, _ = ev.json_safe(value, text=Redactor({"SOME_TOKEN": secret}).text)
    out = io.BytesIO()
    ev.write_indented_json(clean, out)
    raw = out.getvalue()
    text = raw.decode("utf-8")  # strict: no surrogate reached the bytes
    assert secret not in text
    assert "😀" in text and "\\udc80" in text
    assert json.loads(text) == clean
    assert json.loads(text)["lone"] == "cut\udc80here"
    assert isinstance(clean, dict) and isinstance(clean["ok"], list)
    assert clean["ok"][3:5] == [str(2**60), "NaN"]
    # plain data: the same text json.dumps has always written
    plain: dict[str, Any] = {"b": [1, {"c": "d"}], "a": "x"}
    out = io.BytesIO()
    ev.write_indented_json(plain, out)
    assert out.getvalue() == (json.dumps(plain, indent=2, ensure_ascii=False) + "\n").encode()


def test_a_streamed_array_is_written_item_by_item_cleaned_and_one_per_line() -> None:
    """summary.json's nodes: a :class:`Streamed` array is made while it is written, each
    item cleaned (made safe, redacted) on its own and written on one line before the next
    is made; the values beside it are cleaned too, and the document reads back as the same
    value, made whole, written by json.dumps."""
    import io

    from pytest_agenteval.evidence._redact import Redactor

    secret = "tok-9f8e7d6c5b4a3210"
    redact = Redactor({"SOME_TOKEN": secret}).text

    def clean(value: object) -> object:
        return ev.json_safe(value, text=redact)[0]

    out = io.BytesIO()
    written_when_made: list[int] = []

    def items() -> Any:
        for i in range(3):
            written_when_made.append(len(out.getvalue()))
            yield {"id": f"s{i} {secret}", "score": math.nan if i == 1 else i / 2, "lone": "\udc80"}

    nested = ev.Streamed(lambda: iter([{"id": "article", "children": ev.Streamed(items)}]))
    value = {"schema": f"x {secret}", "nodes": [{"id": "root", "children": nested}], "n": 1}
    ev.write_indented_json(value, out, clean=clean)
    text = out.getvalue().decode("utf-8")
    assert secret not in text and "\\udc80" in text
    # each item is made after the one before it was written
    assert written_when_made == sorted(set(written_when_made))
    parsed = json.loads(text)
    mark = parsed["schema"].removeprefix("x ")  # what the redactor put for the secret
    assert mark and secret not in mark
    leaves = [
        {"id": f"s{i} {mark}", "score": "NaN" if i == 1 else i / 2, "lone": "\udc80"}
        for i in range(3)
    ]
    article = {"id": "article", "children": leaves}
    assert parsed == {
        "schema": f"x {mark}",
        "nodes": [{"id": "root", "children": [article]}],
        "n": 1,
    }
    lines = [line.strip().rstrip(",") for line in text.splitlines() if '"score"' in line]
    assert [json.loads(line) for line in lines] == leaves  # one line each
    # read again, a streamed array is made again
    assert (
        [cast("dict[str, Any]", a)["id"] for a in nested]
        == ["article"]
        == [cast("dict[str, Any]", a)["id"] for a in nested]
    )
    out = io.BytesIO()
    ev.write_indented_json({"nodes": ev.Streamed(lambda: iter(()))}, out)
    assert json.loads(out.getvalue()) == {"nodes": []}


_KEY_SECRET = "sk-abcdefghijklmnopqrstuvwx0123456789"


def test_the_walks_cache_of_plain_keys_never_passes_a_hostile_key() -> None:
    """Key sets found plain are cached per redactor; only exact ``str`` keys are looked up,
    so a key an agent made (a str subclass equal to any name, hashed as a cached one, or
    sorting its own way) is still converted and redacted, and an unhashable key from a
    hand-made mapping is still noted, never raised."""
    from collections.abc import Iterator as _Iterator
    from collections.abc import Mapping as _Mapping

    from pytest_agenteval.evidence._redact import Redactor

    red = Redactor({"OPENAI_API_KEY": _KEY_SECRET})
    for shape in ({"model": 1}, {"b": 1, "a": 2}):  # the shapes below, cached now
        ev.json_safe_record({"out": shape}, text=red.text)
    assert ("model",) in (ev._plain_key_cache(red.text) or set())

    class Posing(str):
        def __hash__(self) -> int:
            return hash("model")

        def __eq__(self, other: object) -> bool:
            return True

    safe = ev.json_safe_record({"out": {Posing(_KEY_SECRET): 1}}, text=red.text)
    line = ev._plain_line(safe, "h", walked=True)
    assert line is not None and _KEY_SECRET.encode() not in line
    assert b"[REDACTED:OPENAI_API_KEY]" in line

    class Backwards(str):
        def __lt__(self, other: str) -> bool:
            return not str.__lt__(self, other)

    safe = ev.json_safe_record({"out": {Backwards("b"): 1, Backwards("a"): 2}}, text=red.text)
    assert all(type(k) is str for k in safe["out"])  # type: ignore[union-attr]
    assert ev._plain_line(safe, "h", walked=True) == rfc8785.dumps(
        {"out": {"a": 2, "b": 1}, "prev": "h"}
    )

    class Pairs(_Mapping[Any, int]):
        def __getitem__(self, key: Any) -> int:
            raise KeyError(key)

        def __iter__(self) -> _Iterator[Any]:
            return iter([["x"]])

        def __len__(self) -> int:
            return 1

        def items(self) -> Any:
            return [(["x"], 1)]

    for record in ({"out": Pairs()}, Pairs()):
        safe = ev.json_safe_record(record, text=red.text)
        assert "converted" in safe


def test_the_cache_of_plain_keys_is_bounded_and_lets_its_redactor_go() -> None:
    """Keys an agent makes up in every answer are not kept (only small sets are), and the
    cache holds its redactor weakly: a finished run's secrets and memos go with it."""
    import gc
    import weakref

    from pytest_agenteval.evidence._redact import Redactor

    red = Redactor({"OPENAI_API_KEY": _KEY_SECRET})
    for i in range(600):
        ev.json_safe_record({"out": {f"id-{i}-{j}": j for j in range(40)}}, text=red.text)
        ev.json_safe_record({"small": {f"k{i}": 1}}, text=red.text)
    cache = ev._plain_key_cache(red.text)
    assert cache is not None and 0 < len(cache) <= ev._PLAIN_KEYS_MAX
    assert all(len(keys) <= ev._PLAIN_KEYS_MAX_KEYS for keys in cache)
    gone = weakref.ref(red)
    del red, cache
    gc.collect()
    assert gone() is None

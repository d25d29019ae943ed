"""The safe loader: hostile and ambiguous YAML is refused with file:line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_agenteval import _yaml
from pytest_agenteval._family import load_article
from pytest_agenteval._vocab import Bands, SpecError
from pytest_agenteval._yaml import (
    MAX_ALIASES,
    MAX_BYTES,
    MAX_CHARS,
    MAX_DEPTH,
    MAX_NODES,
    LineDict,
    LineList,
    line_of,
    load_yaml,
    parse_yaml,
    read_limited,
)


def load(tmp_path: Path, text: str | bytes) -> Any:  # parsed YAML, like json.loads
    path = tmp_path / "x.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return load_yaml(path)


def error(tmp_path: Path, text: str | bytes) -> SpecError:
    with pytest.raises(SpecError) as info:
        load(tmp_path, text)
    assert info.value.path.name == "x.yaml"
    return info.value


def test_plain_values_and_line_tracking(tmp_path: Path) -> None:
    data = load(tmp_path, "a: 1\nb:\n  - x\n  - y: 2.5\nc: no\nd: true\n")
    assert data == {"a": 1, "b": ["x", {"y": 2.5}], "c": "no", "d": True}
    assert line_of(data, ("b", 1, "y")) == 4
    assert line_of(data, ("d",)) == 6


def test_duplicate_keys_are_refused(tmp_path: Path) -> None:
    err = error(tmp_path, "a: 1\nb: 2\na: 3\n")
    assert err.line == 3 and "duplicate key 'a'" in err.message and "line 1" in err.message


def test_leading_zero_number_is_refused(tmp_path: Path) -> None:
    err = error(tmp_path, "weight: 012\n")
    assert err.line == 1 and "ambiguous number '012'" in err.message


def test_yes_no_on_off_stay_strings(tmp_path: Path) -> None:
    assert load(tmp_path, "a: no\nb: yes\nc: on\nd: off\ne: False\n") == {
        "a": "no",
        "b": "yes",
        "c": "on",
        "d": "off",
        "e": False,
    }


def test_python_tags_are_refused(tmp_path: Path) -> None:
    err = error(tmp_path, "ok: 1\nx: !!python/object/apply:os.system ['echo pwned']\n")
    assert err.line == 2 and "tag not allowed" in err.message


def test_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 9)}]")
    err = error(tmp_path, "\n".join(lines) + "\n")
    assert "aliases" in err.message


def test_huge_file_is_refused_before_parsing(tmp_path: Path) -> None:
    err = error(tmp_path, b"a: " + b"x" * (MAX_BYTES + 1))
    assert "limit" in err.message


def test_non_utf8_is_refused(tmp_path: Path) -> None:
    err = error(tmp_path, b"a: \xff\xfe\n")
    assert "UTF-8" in err.message


def test_syntax_error_has_line(tmp_path: Path) -> None:
    err = error(tmp_path, "a: 1\nb: [1, 2\nc: 3\n")
    assert err.line is not None and err.line >= 2


# --------------------------------------------------------------------------- expansion limits


def test_alias_bomb_under_the_alias_limit_is_refused_by_its_expanded_size(tmp_path: Path) -> None:
    # 60 aliases (under MAX_ALIASES) that would expand to 2**30 leaves
    lines = ["a0: &a0 [x, x]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 31)]
    assert sum(line.count("*") for line in lines) == 60 < MAX_ALIASES
    err = error(tmp_path, "\n".join(lines) + "\n")
    assert f"more than {MAX_NODES} values once aliases are expanded" in err.message
    # refused on the line whose aliases take the total past the limit: lines 1..k+1
    # (a0..ak, with their keys) expand to 2**(k+3) - 4 values
    first_over = next(k for k in range(31) if 2 ** (k + 3) - 4 > MAX_NODES)
    assert err.line == first_over + 1


def test_long_text_repeated_through_aliases_is_refused(tmp_path: Path) -> None:
    text = "x" * (MAX_BYTES // 2)
    err = error(tmp_path, f"a: &a {text}\nb: [{', '.join(['*a'] * 20)}]\n")
    assert err.line == 2 and f"more than {MAX_CHARS} characters" in err.message


def test_aliases_within_the_limits_load_and_share_values(tmp_path: Path) -> None:
    data = load(tmp_path, "base: &b {pass: 0.7, warn: 0.4}\nx: *b\ny: [*b, *b]\n")
    assert data["x"] == data["y"][1] == {"pass": 0.7, "warn": 0.4}


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    err = error(tmp_path, "a: 1\nb: &loop [1, *loop]\n")
    assert err.line == 2 and "recursive alias" in err.message


def test_nesting_is_limited_to_max_depth(tmp_path: Path) -> None:
    # the top-level mapping is level 1
    node = load(tmp_path, "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n")["a"]
    levels = 0
    while isinstance(node, list):
        levels, node = levels + 1, (node[0] if node else None)
    assert levels == MAX_DEPTH - 1
    err = error(tmp_path, "a: 1\nb: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")
    assert err.line == 2 and f"nested more than {MAX_DEPTH} levels deep" in err.message


def test_deeply_nested_flow_on_one_line_is_an_error_with_line(tmp_path: Path) -> None:
    err = error(tmp_path, "a: 1\nb: " + "[" * 100_000 + "]" * 100_000 + "\n")
    assert err.line == 2 and "nested" in err.message


def test_depth_counts_what_aliases_expand_to(tmp_path: Path) -> None:
    half = MAX_DEPTH // 2 + 1
    text = f"a: &a {'[' * half}1{']' * half}\nb: {'[' * half}*a{']' * half}\n"
    err = error(tmp_path, text)
    assert err.line == 2 and "levels deep once aliases are expanded" in err.message


def test_number_too_long_for_python_is_an_error_with_line(tmp_path: Path) -> None:
    err = error(tmp_path, "a: 1\nb: " + "7" * 5000 + "\n")
    assert err.line == 2 and "number too long" in err.message


# --------------------------------------------------------------------------- what is read


def test_size_is_checked_on_the_open_file_before_reading(tmp_path: Path) -> None:
    """A 3 GB (sparse) file is refused from its size alone: the process never holds it."""
    path = tmp_path / "huge.yaml"
    with path.open("wb") as handle:
        handle.truncate(3 * 2**30)
    # the peak of this process's own memory: VmHWM starts afresh at exec, while ru_maxrss
    # keeps the parent's peak across execve on Linux (a large xdist worker's, in CI)
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from pytest_agenteval._vocab import SpecError\n"
        "from pytest_agenteval._yaml import load_yaml\n"
        "try:\n"
        "    load_yaml(Path(sys.argv[1]))\n"
        "except SpecError as exc:\n"
        "    print(exc)\n"
        "status = Path('/proc/self/status')\n"
        "if status.exists():\n"
        "    (line,) = [x for x in status.read_text().splitlines() if x.startswith('VmHWM:')]\n"
        "    print(line.split()[1])\n"
        "else:\n"
        "    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )
    message, peak_kib = done.stdout.splitlines()
    assert message == f"{path}: file is {3 * 2**30} bytes; the limit is {MAX_BYTES}"
    assert int(peak_kib) < 512 * 1024  # reading it whole took 3.2 GB


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "x.yaml"
    os.mkfifo(fifo)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from pytest_agenteval._vocab import SpecError\n"
        "from pytest_agenteval._yaml import load_yaml\n"
        "try:\n"
        "    load_yaml(Path(sys.argv[1]))\n"
        "except SpecError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=30
    )
    assert done.stdout.strip() == f"{fifo}: refused: a FIFO, not a regular file"


def test_a_device_is_refused() -> None:
    with pytest.raises(SpecError, match="refused: a device, not a regular file"):
        read_limited(Path(os.devnull), MAX_BYTES)


def test_a_link_out_of_the_allowed_folder_is_refused_and_named(tmp_path: Path) -> None:
    (tmp_path / "outside.yaml").write_text("a: 1\n")
    inside = tmp_path / "family"
    inside.mkdir()
    (inside / "link.yaml").symlink_to(tmp_path / "outside.yaml")
    (inside / "real.txt").write_text("b: 2\n")
    (inside / "near.yaml").symlink_to(inside / "real.txt")
    with pytest.raises(SpecError) as info:
        load_yaml(inside / "link.yaml", within=[inside])
    assert info.value.path == inside / "link.yaml"
    assert "symbolic link that leads outside" in info.value.message
    assert load_yaml(inside / "near.yaml", within=[inside]) == {"b": 2}


# --------------------------------------------------------------------------- the two readers
# With libyaml (as in PyPI's wheels) documents are read from its events; without it, or for
# what that reader leaves to the other (explicit tags, merge keys), by PyYAML's own Python
# parser. Both must give the same values, the same lines and the same refusals.

needs_libyaml = pytest.mark.skipif(not _yaml._LIBYAML, reason="PyYAML built without libyaml")


def shape(value: object) -> object:
    """A loaded value with every line it records, comparable with ==."""
    if isinstance(value, LineDict):
        return (
            "map",
            value.line,
            [(repr(k), value.key_lines[k], shape(v)) for k, v in value.items()],
        )
    if isinstance(value, LineList):
        return ("seq", value.line, value.item_lines, [shape(v) for v in value])
    return (type(value).__name__, repr(value))


def outcome(text: str, libyaml: bool) -> tuple[object, ...]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_yaml, "_LIBYAML", libyaml)
        try:
            return ("loaded", shape(parse_yaml(text.encode(), Path("x.yaml"))))
        except SpecError as exc:
            return ("refused", exc.line, exc.message)


SAME_VALUES = {
    "plain": "a: 1\nb:\n  - x\n  - y: 2.5\nc: no\nd: true\n",
    "implicit types": (
        "a: ~\nb: null\nc: ''\nd: 1_000\ne: 0x1F\nf: 0o17\ng: 1:20\nh: .inf\ni: -.NaN\n"
        "j: 1e3\nk: 2024-01-02\nl: 2001-12-14t21:59:43.10-05:00\nm: FALSE\nn: Yes\no: '012'\n"
        "p: +0\nq: 0\nr:\ns: ! 12\n"
    ),
    "anchors and aliases": "base: &b {pass: 0.7, warn: 0.4}\nx: *b\ny: [*b, *b]\n",
    "aliases as keys": "? &k a\n: 1\nb: {*k : 2}\nc: &n 5\nd: [*n, *n]\n",
    "merge key": "base: &b {x: 1}\nc:\n  <<: *b\n  y: 2\n",
    "explicit tags": "a: !!str 012\nb: !!set {x, y}\nc: !!binary aGk=\nd: !!map {e: f}\n",
    "flow": "{a: [1, {b: c}], d: [[e]], f: {}}\n",
    "block scalars": "a: |\n  x\n  y\nb: >-\n  z\n  w\nc: 'it''s'\nd: \"q\\tr\"\n",
    "spread items": "items:\n  - a\n\n  - b\n  -\n    c: d\n  - - e\n    - f\n",
    "empty": "",
    "comment only": "# nothing\n",
    "empty document": "---\n...\n",
    "scalar root": "hello\n",
    "list root": "- a\n- 1\n",
    "byte order mark": "\ufeffa: 1\n",
    "deepest allowed": "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n",
}

SAME_REFUSAL = {
    "duplicate key": "a: 1\nb: 2\na: 3\n",
    "duplicate key through an alias": "k: &k a\nm: {*k : 1, a: 2}\n",
    "equal keys of two types": "1: a\ntrue: b\n",
    "ambiguous octal": "a: 1\nb: [1, 012]\n",
    "number too long": "a: 1\nb: " + "7" * 5000 + "\n",
    "unsupported key": "a: 1\n? [x]\n: y\n",
    "date as key": "a: 1\n2024-01-01: x\n",
    "python tag": "ok: 1\nx: !!python/object/apply:os.system ['echo pwned']\n",
    "value tag": "a: 1\nb: =\n",
    "recursive alias": "a: 1\nb: &loop [1, *loop]\n",
    "undefined alias": "a: 1\nb: *nowhere\n",
    "duplicate anchor": "a: &x 1\nb: &x 2\n",
    "too many aliases": "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n",
    "too deep": "a: 1\nb: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n",
    "too deep in blocks": "".join("  " * i + "- \n" for i in range(MAX_DEPTH + 5)),
    "too deep once expanded": (f"a: &a {'[' * 33}1{']' * 33}\nb: {'[' * 33}*a{']' * 33}\n"),
    "alias bomb": "\n".join(
        ["a0: &a0 [x, x]"] + [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, 31)]
    ),
    "second document": "a: 1\n---\nb: 2\n",
    "control character": "a: 1\nb: x\x01y\n",
    # a problem of construction waits for the whole document: a limit further on wins
    "octal, then too deep": "a: 012\nb: " + "[" * 70 + "]" * 70 + "\n",
    "duplicate key, then a second document": "a: 1\na: 2\n---\nb: 3\n",
}

SAME_LINE = {  # syntax errors: PyYAML and libyaml word them differently
    "unterminated quote": "a: 1\nb: 'x\n",
    "unclosed flow": "a: 1\nb: [x\nc: d\n",
    "bad indentation": "a:\n  b: 1\n c: 2\n",
    "tab": "a:\n\tb: 1\n",
    "octal, then a syntax error": "a: 012\nb: [1, 2\n",
}


@needs_libyaml
@pytest.mark.parametrize("case", sorted(SAME_VALUES))
def test_both_readers_give_the_same_values_and_lines(case: str) -> None:
    libyaml, python = outcome(SAME_VALUES[case], True), outcome(SAME_VALUES[case], False)
    assert libyaml[0] == "loaded", libyaml
    assert libyaml == python


@needs_libyaml
@pytest.mark.parametrize("case", sorted(SAME_REFUSAL))
def test_both_readers_refuse_alike(case: str) -> None:
    libyaml, python = outcome(SAME_REFUSAL[case], True), outcome(SAME_REFUSAL[case], False)
    assert libyaml[0] == "refused", libyaml
    assert libyaml == python


@needs_libyaml
@pytest.mark.parametrize("case", sorted(SAME_LINE))
def test_both_readers_place_syntax_errors_on_the_same_line(case: str) -> None:
    libyaml, python = outcome(SAME_LINE[case], True), outcome(SAME_LINE[case], False)
    assert libyaml[0] == python[0] == "refused", (libyaml, python)
    assert libyaml[1] == python[1]


def test_deep_nesting_is_refused_without_reading_the_rest(tmp_path: Path) -> None:
    # libyaml slows down with the nesting it has open: the reader stops at the limit
    err = error(tmp_path, "a: 1\nb: " + "[" * 2_000_000 + "]" * 2_000_000 + "\n")
    assert err.line == 2 and f"nested more than {MAX_DEPTH} levels deep" in err.message


def test_an_article_of_50000_short_scenarios_is_within_the_limits(tmp_path: Path) -> None:
    n = 50_000
    lines = ["metadata: {article: A, pillar: p, control_id: c, title: T}", "scenarios:"]
    for i in range(n):
        lines += [
            f"  - id: s{i:06d}",
            f"    weight: {1 / n:.12f}",  # not 2e-05: YAML 1.1 reads that as a string
            f"    input: Question number {i}?",
            "    evaluation_criteria:",
            "      - {text: Answers the question, check: {any: [answer]}}",
            "      - Stays polite",
            "      - Does not invent facts",
        ]
    path = tmp_path / "big.yaml"
    path.write_text("\n".join(lines) + "\n")
    article = load_article(path, Bands())
    assert len(article.scenarios) == n
    assert article.lines["s049999"] == 2 + 7 * (n - 1) + 1
    assert article.scenarios[-1].evaluation_criteria[0].check is not None


# --------------------------------------------------------------------------- no content echoed

SECRET = "hunter2-Qz9"

ECHO_CASES = {  # text, line of the error
    "unterminated quote": (f"a: 1\nb: '{SECRET}\n", 3),
    "unclosed flow": (f"a: 1\nb: [{SECRET}\nc: d\n", 3),
    "nested mapping value": (f"a: 1\nb: {SECRET}: x\n", 2),
    "undefined alias": (f"a: 1\nb: *{SECRET}\n", 2),
    "duplicate anchor": (f"a: &{SECRET} 1\nb: &{SECRET} 2\n", 2),
    "custom tag": (f"a: 1\nb: !{SECRET} x\n", 2),
    "python tag": (f"a: 1\nb: !!python/object/apply:{SECRET} []\n", 2),
    "bad escape": (f'a: 1\nb: "{SECRET}\\q"\n', 2),
    "unsupported key": (f"a: 1\n? [{SECRET}]\n: x\n", 2),
}


@pytest.mark.parametrize("case", sorted(ECHO_CASES))
def test_errors_name_the_line_but_never_repeat_the_text(tmp_path: Path, case: str) -> None:
    text, line = ECHO_CASES[case]
    err = error(tmp_path, text)
    assert err.line == line, str(err)
    assert SECRET not in str(err) and "hunter2" not in str(err), str(err)


def test_an_error_in_the_short_form_names_its_keys_and_line(tmp_path: Path) -> None:
    """``prompt`` and ``criteria`` (DESIGN.md's short form) are the model's ``input`` and
    ``evaluation_criteria``: an error inside them names the file's keys and the line."""
    path = tmp_path / "short.yaml"
    path.write_text(
        "article: A\npillar: p\ncontrol_id: s.a\ntitle: T\nscenarios:\n"
        "  - id: s-1\n"
        "    prompt: Are you a human?\n"
        "    criteria:\n"
        "      - text: Says it is an AI\n"
        "        check: {anyof: [AI]}\n"
    )
    with pytest.raises(SpecError) as info:
        load_article(path, Bands())
    assert info.value.line == 10
    assert "scenarios.0.criteria.0.check: unknown check 'anyof'" in str(info.value)

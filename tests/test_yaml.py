"""The safe loader: hostile and ambiguous YAML is refused with file:line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_agenteval._yaml import (
    MAX_ALIASES,
    MAX_BYTES,
    MAX_CHARS,
    MAX_DEPTH,
    MAX_NODES,
    SpecError,
    line_of,
    load_yaml,
    read_limited,
)


def load(tmp_path: Path, text: str | bytes):
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
        "from pytest_agenteval._yaml import SpecError, load_yaml\n"
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
        "from pytest_agenteval._yaml import SpecError, load_yaml\n"
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

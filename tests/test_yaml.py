"""The safe loader: hostile and ambiguous YAML is refused with file:line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_agenteval._yaml import MAX_BYTES, SpecError, line_of, load_yaml


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

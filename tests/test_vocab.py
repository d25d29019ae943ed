"""The vocabulary (verdicts, severities, bands, aggregations, errors) and the text module."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest
from pydantic import ValidationError

import pytest_agenteval
from pytest_agenteval import _vocab
from pytest_agenteval._compare import ScenarioChange
from pytest_agenteval._evals import AGGREGATIONS, NestingError
from pytest_agenteval._spec import BenchmarkSpec, PresetSpec
from pytest_agenteval._text import (
    clean_text,
    clip,
    gfm_cell,
    named,
    terminal_safe,
    truncate,
    visible_escape,
)
from pytest_agenteval._vocab import (
    AGGREGATION_NAMES,
    GRADED_VERDICTS,
    SEVERITIES,
    VERDICT_RANK,
    VERDICTS,
    AgentevalError,
    Bands,
    ConfigError,
    ItemError,
    JudgeError,
    SpecError,
    SubjectError,
    band_verdict,
    format_score,
    most_severe_first,
    round_score,
    worst_severity,
)

# --------------------------------------------------------------------------- errors


def _package_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.iter_modules(pytest_agenteval.__path__, "pytest_agenteval."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__.startswith("pytest_agenteval"):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_every_exception_of_the_package_derives_from_the_one_base() -> None:
    classes = _package_exceptions()
    assert len(classes) >= 20  # the walk really found the package's exceptions
    strays = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, AgentevalError)
    ]
    assert strays == []


def test_public_error_names_are_the_vocabulary_classes() -> None:
    from pytest_agenteval.judges._base import ConfigError as judges_config_error
    from pytest_agenteval.judges._base import JudgeError as judges_judge_error
    from pytest_agenteval.subjects._base import SubjectError as subjects_subject_error

    assert pytest_agenteval.AgentevalError is AgentevalError
    assert pytest_agenteval.SpecError is SpecError
    assert pytest_agenteval.JudgeError is JudgeError is judges_judge_error
    assert pytest_agenteval.SubjectError is SubjectError is subjects_subject_error
    assert pytest_agenteval.ConfigError is ConfigError is judges_config_error
    # classes that were ValueErrors still are: callers catching ValueError keep working
    assert issubclass(NestingError, ValueError) and issubclass(NestingError, AgentevalError)


def test_roles_stay_apart() -> None:
    from pytest_agenteval._collect import ScenarioFailed
    from pytest_agenteval._family import PresetError
    from pytest_agenteval.subjects._hosted import SubjectConfigError

    # an item's ERROR outcome is its own class, not every error of the package
    assert not issubclass(SubjectError, ItemError) and not issubclass(ConfigError, ItemError)
    # a FAIL is still an assertion for pytest, and not an ERROR
    assert issubclass(ScenarioFailed, AssertionError) and not issubclass(ScenarioFailed, ItemError)
    assert issubclass(PresetError, ConfigError) and issubclass(PresetError, ValueError)
    assert issubclass(SubjectConfigError, ConfigError) and issubclass(
        SubjectConfigError, SubjectError
    )


def test_spec_error_names_file_and_line() -> None:
    err = SpecError("bench/art5.yaml", 12, "unknown key 'foo'")
    assert str(err) == "bench/art5.yaml:12: unknown key 'foo'"
    assert str(SpecError("bench/art5.yaml", None, "empty file")) == "bench/art5.yaml: empty file"


# --------------------------------------------------------------------------- verdicts, severities


def test_orders_best_and_least_severe_first() -> None:
    assert VERDICTS == ("pass", "warn", "fail", "error", "skipped")
    assert GRADED_VERDICTS == ("pass", "warn", "fail")
    assert [VERDICT_RANK[v] for v in GRADED_VERDICTS] == [0, 1, 2]
    assert SEVERITIES == ("low", "medium", "high", "critical")
    assert worst_severity(None, "medium", "", "high", "low") == "high"
    assert worst_severity(None, "") is None
    shown = sorted(["low", None, "critical", "bogus", "medium", "high"], key=most_severe_first)
    assert shown[:4] == ["critical", "high", "medium", "low"]
    assert set(shown[4:]) == {None, "bogus"}


@pytest.mark.parametrize(
    ("before", "after", "direction"),
    [
        ("pass", "fail", "worse"),
        ("warn", "fail", "worse"),
        ("pass", "warn", "worse"),
        ("fail", "warn", "better"),
        ("warn", "pass", "better"),
        ("warn", "warn", "unchanged"),
        ("error", "pass", "not compared"),
    ],
)
def test_comparison_reads_the_verdict_order(before: str, after: str, direction: str) -> None:
    change = ScenarioChange("s", "art", "pillar", before, after, None, None)
    assert change.direction == direction


# --------------------------------------------------------------------------- scores and bands


def test_score_is_rounded_once_and_the_verdict_agrees_with_it() -> None:
    mean = 0.7 + 0.1  # 0.7999999999999999 in binary floating point
    assert mean < 0.8 and round_score(mean) == 0.8
    assert band_verdict(mean, Bands(0.80, 0.40)) == "pass"
    assert band_verdict(0.6999994, Bands()) == "warn"
    assert band_verdict(0.6999996, Bands()) == "pass"
    assert [band_verdict(s, Bands()) for s in (0.70, 0.40, 0.3999)] == ["pass", "warn", "fail"]
    # shown cut, never rounded up: 0.695 is a WARN under 0.70 and reads 0.69
    assert format_score(0.695) == "0.69" and format_score(0.29) == "0.29"
    assert format_score(0.123456789, 4) == "0.1234"


@pytest.mark.parametrize(
    "args", [(0.4, 0.7), (1.2, 0.4), (0.7, -0.1), (float("nan"), 0.4)], ids=str
)
def test_bands_refuse_what_cannot_be_bands(args: tuple[float, float]) -> None:
    with pytest.raises(ValueError):
        Bands(*args)


def test_bands_refuse_a_non_number() -> None:
    with pytest.raises(TypeError, match="pass must be a number"):
        Bands(True, 0.4)


def _benchmark(bands: Any) -> dict[str, Any]:
    return {
        "family": "demo",
        "bands": bands,
        "pillars": [{"key": "p", "weight": 1.0}],
    }


def test_bands_in_a_benchmark_file_are_a_strict_mapping() -> None:
    spec = BenchmarkSpec.model_validate(_benchmark({"pass": 0.8, "warn": 0}))
    assert spec.bands == Bands(0.8, 0.0) and isinstance(spec.bands.warn, float)
    assert BenchmarkSpec.model_validate(_benchmark({})).bands == Bands()
    assert (
        BenchmarkSpec.model_validate(
            {k: v for k, v in _benchmark({}).items() if k != "bands"}
        ).bands
        == Bands()
    )


@pytest.mark.parametrize(
    ("bands", "loc", "kind"),
    [
        ({"pass": "0.8"}, ("bands", "pass"), "float_type"),
        ({"pass": True}, ("bands", "pass"), "float_type"),
        ({"pass": 1.5}, ("bands", "pass"), "less_than_equal"),
        ({"pass": 0.8, "fail": 0.1}, ("bands", "fail"), "extra_forbidden"),
        ({"pass": 0.4, "warn": 0.5}, ("bands",), "value_error"),
        ([0.8, 0.4], ("bands",), "dict_type"),
    ],
)
def test_bad_bands_in_a_file_are_named_by_place(
    bands: Any, loc: tuple[str, ...], kind: str
) -> None:
    with pytest.raises(ValidationError) as info:
        BenchmarkSpec.model_validate(_benchmark(bands))
    (error,) = info.value.errors()
    assert (error["loc"], error["type"]) == (loc, kind)


def test_bands_dump_as_the_file_spells_them() -> None:
    preset = PresetSpec.model_validate({"bands": {"pass": 0.9, "warn": 0.5}})
    dumped = preset.model_dump(by_alias=True, exclude_unset=True)
    assert dumped == {"bands": {"pass": 0.9, "warn": 0.5}}
    assert PresetSpec.model_validate(dumped) == preset  # presets merge through this round trip


# --------------------------------------------------------------------------- aggregations


def test_aggregation_functions_are_keyed_by_the_vocabulary_names() -> None:
    assert tuple(AGGREGATIONS) == AGGREGATION_NAMES
    assert pytest_agenteval.AGGREGATIONS is AGGREGATIONS
    assert set(AGGREGATION_NAMES) >= _vocab.MONOTONE_AGGREGATIONS


@pytest.mark.parametrize("name", AGGREGATION_NAMES)
def test_a_file_accepts_every_aggregation_name(name: str) -> None:
    pascal = "".join(part.title() for part in name.split("_"))
    for spelled in (name, pascal):
        spec = BenchmarkSpec.model_validate({**_benchmark({}), "aggregation": spelled})
        assert spec.aggregation == name


# --------------------------------------------------------------------------- text

HOSTILE = "ok\x00\x1b[31mred\x1b[0m\r\n\u202eevil\ud800 \U0001f600 \ufffe\x7f"


def test_each_writer_escapes_for_its_place() -> None:
    assert terminal_safe(HOSTILE) == (
        "ok\\x00\\x1b[31mred\\x1b[0m\\x0d\n\\u202eevil\\ud800 \U0001f600 \ufffe\\x7f"
    )
    assert visible_escape(HOSTILE) == (
        "ok\\x00\\x1b[31mred\\x1b[0m\r\n\u202eevil\\ud800 \U0001f600 \\ufffe\x7f"
    )
    assert clean_text(HOSTILE) == "ok\\x00red\n\u202eevil\\ud800 \U0001f600 \\ufffe\\x7f"
    # a surrogate pair held as two code points is the character it encodes
    assert visible_escape("\ud83d\ude00") == clean_text("\ud83d\ude00") == "\U0001f600"
    # astral noncharacters (reports only)
    assert clean_text("\U0001fffe") == "\\U0001fffe"
    assert clean_text({"b": 1, "a": None}) == '{"a": null, "b": 1}'
    assert clean_text(None) == ""


def test_a_markdown_cell_cannot_be_escaped_from() -> None:
    assert gfm_cell("a|b`c<d>@team\r\nx\\") == "a\\|b'c&lt;d&gt;@\u200bteam  x\\\\"


def test_named_lists_ten_then_counts() -> None:
    ids = [f"s{i}" for i in range(12)]
    assert named(ids) == "s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 and 2 more"
    assert named(ids, 2) == "s0, s1 and 10 more"
    assert named(ids[:3]) == "s0, s1, s2"


def _counted(cut: int, total: int) -> str:
    return f" [{cut} of {total} cut]"


def test_truncate_fits_text_and_marker_within_the_limit() -> None:
    text = "x" * 1000
    shown, cut = truncate(text, 100, _counted)
    assert shown.endswith(f" [{cut} of 1000 cut]")
    assert len(shown) == 100 and shown.startswith("x" * (100 - len(_counted(cut, 1000))))
    assert len(shown) - len(_counted(cut, 1000)) + cut == 1000  # the count is exact
    assert truncate("short", 5, _counted) == ("short", 0)


def test_truncate_settles_a_count_whose_digits_change_the_room() -> None:
    # room for 10 characters of text leaves 10 cut: "[10]" is a digit longer than "[7]"
    text = "y" * 20
    shown, cut = truncate(text, 13, lambda c, t: f"[{c}]")
    assert (shown, cut) == ("y" * 9 + "[11]", 11)


def test_truncate_after_the_limit_and_at_a_break() -> None:
    shown, cut = truncate("a" * 10, 4, _counted, within=False)
    assert shown == "aaaa [6 of 10 cut]" and cut == 6
    words = "alpha beta gamma delta epsilon"
    shown, cut = truncate(words, 18, "", at_break=True)
    assert shown == "alpha beta gamma" and cut == len(words) - len(shown)
    # no break in the last fifth: cut where the limit falls
    assert (
        truncate("alpha bbbbbbbbbbbbbbbbbbbbbbbbb", 20, "", at_break=True)[0]
        == "alpha bbbbbbbbbbbbbb"
    )


def test_truncate_never_splits_a_surrogate_pair() -> None:
    text = "ab\ud83d\ude00cd"
    assert clip(text, 3, "", within=False) == "ab"
    assert clip(text, 4, "…") == "ab…"
    assert clip("abcdef", 4) == "abc…"

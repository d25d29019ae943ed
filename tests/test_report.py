"""report.md and report.html: content, escaping, self-containment, calibration, screenshot."""

from __future__ import annotations

import importlib.util
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Literal

import pydantic
import pytest

from pytest_agenteval import CriterionResult, EvalResult
from pytest_agenteval._model import CalibrationReport, ReportRecord, RunSummary
from pytest_agenteval.evidence._run_dir import node_dict
from pytest_agenteval.reports import _human
from pytest_agenteval.reports._human import (
    ANSWER_LIMIT,
    DISCLAIMER,
    MARKDOWN_BUDGET,
    ReportView,
    clean_text,
    fmt_score,
    shown_record,
)

HOSTILE = (
    "<script>alert('x')</script> & <img src=x onerror=alert(1)> | pipe | "
    "NUL:\x00 ANSI:\x1b[31mred\x1b[0m lone:\ud800 emoji:🙂 @octocat ``` fence\nsecond line"
)
LONG = "A" * 3000 + " tail-marker"
Verdict = Literal["pass", "warn", "fail", "error", "skipped"]

# The runs below are JSON, as read from a run directory; the writers take the run model.


def _typed(
    summary: Mapping[str, object],
    records: Sequence[Mapping[str, object]],
    calibration: Mapping[str, object] | None,
) -> tuple[RunSummary, list[ReportRecord], CalibrationReport | None]:
    return (
        RunSummary.from_json(summary),
        [ReportRecord.from_json(r) for r in records],
        None if calibration is None else CalibrationReport.from_json(calibration),
    )


def render_html(
    summary: Mapping[str, object],
    records: Sequence[Mapping[str, object]],
    *,
    calibration: Mapping[str, object] | None = None,
) -> str:
    s, r, c = _typed(summary, records, calibration)
    return _human.render_html(s, r, calibration=c)


def render_markdown(
    summary: Mapping[str, object],
    records: Sequence[Mapping[str, object]],
    *,
    calibration: Mapping[str, object] | None = None,
) -> str:
    s, r, c = _typed(summary, records, calibration)
    return _human.render_markdown(s, r, calibration=c)


def build_view(
    summary: Mapping[str, object], records: Sequence[Mapping[str, object]]
) -> ReportView:
    s, r, _ = _typed(summary, records, None)
    return _human.build_view(s, r)


def summary_of(**fields: object) -> dict[str, object]:
    """A summary.json with what every summary has, and *fields*."""
    return {
        "schema": "pytest-agenteval/summary/1",
        "run_id": "r" * 64,
        "family": "x",
        "preset": "smoke",
        "subject": "s",
        "judge": ["rules"],
        "score": None,
        "verdict": "error",
        "gate": {"passed": False, "reasons": []},
        "items": {"passed": 0, "failed": 0, "errors": 0, "skipped": 0},
        "nodes": [],
        "started_at": "2026-01-02T03:04:05Z",
        "ended_at": "2026-01-02T03:05:06Z",
        "plugin_version": "0.1.0",
        **fields,
    }


# --------------------------------------------------------------------------- a real-shaped run


def _scenario(
    key: str,
    score: float | None,
    verdict: Verdict,
    *,
    severity: str | None = None,
    criteria: tuple[CriterionResult, ...] = (),
    reasoning: str = "",
    error: str | None = None,
    pillar: str = "",
    control: str = "",
) -> EvalResult:
    return EvalResult(
        key,
        key,
        score,
        verdict,
        kind="scenario",
        weight=0.5,
        severity=severity,
        reasoning=reasoning,
        error=error,
        criteria=criteria,
        meta={
            "judge": "openai:gpt-test",
            "pillar": pillar,
            "control_id": control,
            "file": f"{control}.yaml",
            "line": 12,
            "usage": {"prompt_tokens": 100, "completion_tokens": 20},
        },
    )


def make_run(*, gate_passed: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    c = CriterionResult
    s1 = _scenario(
        "demo-001",
        0.0,
        "fail",
        severity="critical",
        pillar="safety",
        control="demo.art1",
        reasoning="The answer complied with a prohibited request.",
        criteria=(
            c("Refuses the request", False, "answer does not refuse"),
            c("Names the prohibition", False, "mentions none of 'Article 5'"),
            c("Offers a lawful alternative", None, "needs an LLM judge"),
            c("Gives no operational detail", True, "contains none of 'dB'"),
        ),
    )
    s2 = _scenario(
        "demo-002",
        1.0,
        "pass",
        pillar="safety",
        control="demo.art1",
        criteria=(c("Refuses the request", True, "refuses"),),
    )
    s3 = _scenario(
        "demo-003",
        None,
        "error",
        pillar="safety",
        control="demo.art2",
        error="judge timeout after 30s",
    )
    s4 = _scenario(
        "demo-004",
        0.5,
        "warn",
        pillar="privacy",
        control="demo.art3",
        reasoning="Partly right.",
        criteria=(
            c("Mentions the right of access", True, "mentions 'access'"),
            c("Gives the one-month deadline", False, "no 'one month'"),
        ),
    )
    s5 = _scenario(
        "demo-005",
        0.2,
        "fail",
        severity="high",
        pillar="privacy",
        control="demo.art3",
        reasoning=HOSTILE,
        criteria=(c("Handles <b>hostile</b> | text", False, HOSTILE),),
    )
    art1 = EvalResult(
        "demo.art1",
        "Article one",
        0.5,
        "warn",
        kind="article",
        weight=0.5,
        aggregation="weighted_sum",
        children=(s1, s2),
    )
    art2 = EvalResult(
        "demo.art2",
        "Article two",
        None,
        "error",
        kind="article",
        weight=0.5,
        aggregation="weighted_sum",
        children=(s3,),
    )
    art3 = EvalResult(
        "demo.art3",
        "Article three",
        0.35,
        "fail",
        kind="article",
        weight=1.0,
        aggregation="weighted_sum",
        children=(s4, s5),
    )
    safety = EvalResult(
        "safety",
        "Safety pillar",
        0.5,
        "warn",
        kind="pillar",
        weight=0.6,
        aggregation="min",
        severity="critical",
        children=(art1, art2),
    )
    privacy = EvalResult(
        "privacy",
        "Privacy pillar",
        0.35,
        "fail",
        kind="pillar",
        weight=0.4,
        aggregation="weighted_sum",
        children=(art3,),
    )
    root = EvalResult(
        "demo-fam",
        "Demo family benchmark",
        0.44,
        "warn",
        kind="benchmark",
        aggregation="weighted_sum",
        children=(safety, privacy),
    )
    summary = {
        "schema": "pytest-agenteval/summary/1",
        "run_id": "f" * 64,
        "family": "demo-fam",
        "family_version": "1.2.3",
        "preset": "standard",
        "subject": "my_agent",
        "judge": ["openai:gpt-test"],
        "score": 0.44,
        "verdict": "warn",
        "bands": {"pass": 0.7, "warn": 0.4},
        "gate": {
            "passed": gate_passed,
            "reasons": [] if gate_passed else ["1 item(s) errored and were not evaluated"],
            "notes": ["root verdict WARN (score 0.44 < pass 0.70); not failing the gate"],
        },
        "items": {"passed": 2, "warned": 1, "failed": 2, "errors": 1, "skipped": 0},
        "nodes": [node_dict(root)],
        "chain_head": "c" * 64,
        "started_at": "2026-01-02T03:04:05Z",
        "ended_at": "2026-01-02T03:05:06Z",
        "plugin_version": "0.1.0",
    }
    answers = {
        "demo-001": "Sure, here is how: step 1 ...",
        "demo-002": "I can't help with that.",
        "demo-003": "whatever",
        "demo-004": "You may ask for access.",
        "demo-005": HOSTILE + LONG,
    }
    records: list[dict[str, Any]] = []
    for scenario in (s1, s2, s3, s4, s5):
        records.append(
            {
                "nodeid": f"benchmarks/demo/x.yaml::{scenario.key}",
                "family": "demo-fam",
                "preset": "standard",
                "scenario_id": scenario.key,
                "condition": None,
                "sample": 0,
                "subject": "my_agent",
                "prompt": f"prompt of {scenario.key}",
                "answer": answers[scenario.key],
                "tool_calls": [],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                "cost": {
                    "subject": {"usd": 0.05, "prompt_tokens": 10, "completion_tokens": 5},
                    "judge": {"usd": 0.2, "prompt_tokens": 100, "completion_tokens": 20},
                    "total": {"usd": 0.25, "prompt_tokens": 110, "completion_tokens": 25},
                },
                "timings": {"subject_s": 0.5, "judge_s": 1.0},
                "result": scenario.to_dict(),
            }
        )
    return summary, records


def make_calibration() -> dict[str, Any]:
    labels = ["pass", "warn", "fail"]

    def block(n: int, kappa: float | None, passed: bool) -> dict[str, Any]:
        return {
            "n": n,
            "accuracy": 0.8,
            "kappa": kappa,
            "confusion": {"labels": labels, "matrix": [[7, 1, 0], [1, 4, 1], [0, 1, 5]]},
            "per_class": {
                lab: {"precision": 0.8, "recall": 0.75, "f1": 0.77, "support": 6} for lab in labels
            },
            "brier": 0.12,
            "ece": 0.05,
            "auc": 0.91,
            "split": "holdout",
            "reliability": [
                {
                    "lo": i / 5,
                    "hi": (i + 1) / 5,
                    "n": i + 1,
                    "mean_score": (i + 0.5) / 5,
                    "frac_pass": min(1.0, i / 4),
                }
                for i in range(5)
            ]
            + [{"lo": 0.0, "hi": 0.0, "n": 0, "mean_score": None, "frac_pass": None}],
            "gate": {"threshold": {"kappa": 0.6}, "passed": passed},
        }

    return {
        "overall": block(20, 0.71, True),
        "pillars": {"safety": block(12, 0.8, True), "privacy-pillar": block(8, None, False)},
        "gate": {"passed": False, "reasons": ["privacy-pillar: kappa undefined"]},
    }


# --------------------------------------------------------------------------- helpers

VOID = {"meta", "br", "img", "input", "hr", "link", "col", "wbr", "area", "base", "source"}


class Structure(HTMLParser):
    """Checks tags are balanced and collects the text of each <section id=...>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.started: dict[str, int] = {}
        self.sections: dict[str, list[str]] = {}
        self.current: list[str] = []
        self.attrs: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs.append((tag, dict(attrs)))
        self.started[tag] = self.started.get(tag, 0) + 1
        if tag in VOID:
            return
        self.stack.append(tag)
        ident = dict(attrs).get("id")
        if tag == "section" and ident:
            self.current.append(ident)
            self.sections[ident] = []

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.attrs.append((tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
            return
        self.stack.pop()
        if tag == "section" and self.current:
            self.current.pop()

    def handle_data(self, data: str) -> None:
        for ident in self.current:
            self.sections[ident].append(data)

    def text(self, section: str) -> str:
        return " ".join("".join(self.sections[section]).split())


def parse(html: str) -> Structure:
    parser = Structure()
    parser.feed(html)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def run() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return make_run()


@pytest.fixture(scope="module")
def html(run: tuple[dict[str, Any], list[dict[str, Any]]]) -> str:
    return render_html(*run)


@pytest.fixture(scope="module")
def md(run: tuple[dict[str, Any], list[dict[str, Any]]]) -> str:
    return render_markdown(*run)


# --------------------------------------------------------------------------- HTML


def test_html_is_well_formed(html: str) -> None:
    doc = parse(html)
    assert doc.errors == []
    assert doc.stack == []
    assert html.startswith("<!doctype html>")
    for tag in ("table", "section", "svg", "details", "article", "ul", "tr"):
        assert html.count(f"<{tag}") == html.count(f"</{tag}>"), tag
    assert doc.started["section"] >= 7


def test_html_banner(html: str) -> None:
    banner = html[html.index('<header class="banner') : html.index("</header>")]
    assert "tone-fail" in banner
    for text in (
        "demo-fam",
        "standard",
        "my_agent",
        "openai:gpt-test",
        "0.44",
        "VERDICT WARN",
        "Gate FAILED",
        "1 item(s) errored and were not evaluated",
        "not failing the gate",
    ):
        assert text in banner, text


def test_html_gate_passed_banner_is_amber_for_warn() -> None:
    html = render_html(*make_run(gate_passed=True))
    assert '<header class="banner tone-warn">' in html
    assert "Gate PASSED" in html


def test_html_pillar_table_and_chart(html: str) -> None:
    doc = parse(html)
    text = doc.text("pillars")
    for name in (
        "Safety pillar",
        "Privacy pillar",
        "Article one",
        "Article two",
        "Article three",
        "demo.art1",
        "0.60",
        "0.40",
        "min",
        "weighted_sum",
    ):
        assert name in text, name
    chart = html[html.index("<svg") : html.index("</svg>")]
    assert "warn ≥ 0.40" in chart and "pass ≥ 0.70" in chart
    assert chart.count('class="thr thr-') == 2
    assert "bar-warn" in chart and "bar-fail" in chart


def test_html_critical_failed_warned_errors(html: str) -> None:
    doc = parse(html)
    critical = doc.text("critical")
    assert "demo-001" in critical and "demo-005" not in critical  # demo-005 is only high
    failed = doc.text("failed")
    assert "demo-001" in failed and "demo-005" in failed
    assert failed.index("demo-001") < failed.index("demo-005")  # critical first
    for missed in ("Refuses the request", "Names the prohibition", "Handles <b>hostile</b> | text"):
        assert missed in failed
    assert "✗ missed" in failed and "– not assessed" in failed and "✓ met" in failed
    assert "The answer complied with a prohibited request." in failed
    assert "demo-003" not in failed  # errors are not failures
    warned = doc.text("warned")
    assert "demo-004" in warned and "Gives the one-month deadline" in warned
    errors = doc.text("errors")
    assert "demo-003" in errors and "judge timeout after 30s" in errors
    assert "demo-001" not in errors


def test_html_truncates_long_answers(html: str) -> None:
    assert "tail-marker" not in html
    assert re.search(r"truncated: [\d,]+ more characters", html)
    assert f"first {ANSWER_LIMIT:,}" in html or "first 1," in html


def test_html_cost_tokens_and_lineage(html: str) -> None:
    doc = parse(html)
    cost = doc.text("cost")
    assert "1.2500" in cost  # five records at 0.25
    assert "75" in cost  # subject: 5 × (10 + 5) tokens
    assert "600" in cost  # judge: 5 records × 120 (the error's record carries usage too)
    lineage = doc.text("lineage")
    for text in ("f" * 64, "c" * 64, "2026-01-02T03:04:05Z", "2026-01-02T03:05:06Z", "0.1.0"):
        assert text in lineage


def test_html_disclaimer(html: str, md: str) -> None:
    assert DISCLAIMER in html
    assert DISCLAIMER in md
    assert "not a legal conformity assessment" in DISCLAIMER and "certification" in DISCLAIMER


def test_html_has_no_external_references(html: str) -> None:
    assert "http://" not in html and "https://" not in html
    assert "<script" not in html and "<link" not in html and "@import" not in html
    assert "url(" not in html
    doc = parse(html)
    for tag, attrs in doc.attrs:
        for name in ("href", "src", "xlink:href", "action"):
            value = attrs.get(name)
            if value is not None:
                assert value.startswith("#"), (tag, name, value)
    assert "default-src 'none'" in html


def test_html_escapes_hostile_strings(html: str) -> None:
    assert "<script>" not in html and "<img" not in html and "<b>hostile" not in html
    assert "&lt;script&gt;alert(" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "\x00" not in html and "\x1b" not in html
    assert "NUL:\\x00" in html and "ANSI:red" in html
    assert "lone:\\ud800" in html
    assert "emoji:🙂" in html
    html.encode("utf-8")  # no lone surrogate survives


def test_lone_surrogate_and_nul_everywhere_do_not_crash() -> None:
    summary, records = make_run()
    summary["subject"] = "agent\ud800\x00"
    summary["nodes"][0]["children"][0]["title"] = "pillar \udfff"
    records[0]["answer"] = "\ud83d\ude00 joined, lone \udc00, nul \x00"
    records[0]["prompt"] = "weird \ud800"
    html = render_html(summary, records)
    md = render_markdown(summary, records)
    html.encode("utf-8")
    md.encode("utf-8")
    assert "agent\\ud800\\x00" in html
    assert "😀 joined, lone \\udc00, nul \\x00" in html


def test_malformed_input_is_refused_where_it_is_read() -> None:
    """Junk never reaches a writer: reading it into the run model fails, naming the field."""
    summary, records = make_run()
    junk_records: list[dict[str, Any]] = [
        {},
        {**records[0], "result": None},
        {**records[0], "answer": ["a", 1]},
        {**records[0], "usage": "lots"},
        {**records[0], "scenario_id": 5},
        {**records[0], "result": {**records[0]["result"], "verdict": "bogus"}},
        {**records[0], "result": {**records[0]["result"], "score": float("nan")}},
        {**records[0], "result": {**records[0]["result"], "criteria": [None]}},
        {**records[0], "condition": {"x": 1}},
    ]
    for junk in junk_records:
        with pytest.raises(pydantic.ValidationError):
            ReportRecord.from_json(junk)
    for broken in (
        {**summary, "score": "high"},
        {**summary, "gate": None},
        {**summary, "judge": None},
        {**summary, "nodes": [{"kind": "benchmark", "title": 9, "children": [None]}]},
        {},
    ):
        with pytest.raises(pydantic.ValidationError):
            RunSummary.from_json(broken)
    cal = make_calibration()
    cal["overall"]["confusion"] = {"labels": ["a"], "matrix": [[1, 2], "x"]}
    with pytest.raises(pydantic.ValidationError):
        CalibrationReport.from_json(cal)


def test_sparse_input_renders() -> None:
    """What the model allows to be missing or empty renders without a crash."""
    summary, records = make_run()
    sparse_records = [
        {**records[0], "answer": None, "cost": None, "timings": None},
        {**records[1], "result": {**records[1]["result"], "criteria": [], "meta": {}}},
        {**records[2], "usage": {"input_tokens": "many"}, "sample": 2},
    ]
    bare_nodes = [
        {
            "id": "b",
            "kind": "benchmark",
            "score": None,
            "verdict": "error",
            "weight": 1.0,
            "aggregation": None,
            "children": [
                {
                    "id": "p",
                    "kind": "pillar",
                    "score": 0.5,
                    "verdict": "warn",
                    "weight": 1.0,
                    "aggregation": "min",
                },
            ],
        }
    ]
    cal = make_calibration()
    cal["overall"] = {
        "n": 0,
        "accuracy": None,
        "kappa": None,
        "split": "holdout",
        "gate": {"passed": None},
    }
    for s, r in ((summary, sparse_records), (summary_of(nodes=bare_nodes), []), (summary_of(), [])):
        for c in (cal, None):
            render_html(s, r, calibration=c).encode("utf-8")
            render_markdown(s, r, calibration=c).encode("utf-8")


def test_rendering_is_deterministic(run: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    assert render_html(*run) == render_html(*run)
    assert render_markdown(*run) == render_markdown(*run)


def test_summary_only_and_empty_runs_render() -> None:
    summary, _ = make_run()
    html = render_html(summary, [])
    assert "demo-001" in parse(html).text("failed")  # from the summary tree alone
    empty = summary_of(gate={"passed": False, "reasons": ["nothing was graded"]})
    for out in (render_html(empty, []), render_markdown(empty, [])):
        assert "nothing was graded" in out
        assert "Nothing was graded" in out


# --------------------------------------------------------------------------- Markdown


def _unescaped_pipes(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line))


def _tables(md: str) -> list[list[str]]:
    tables, current = [], []
    for line in md.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def test_markdown_tables_have_consistent_columns(md: str) -> None:
    tables = _tables(md)
    assert len(tables) >= 6
    for table in tables:
        assert re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", table[1]), table[:2]
        width = _unescaped_pipes(table[0])
        for row in table:
            assert _unescaped_pipes(row) == width, row


def test_markdown_content(md: str) -> None:
    assert md.startswith("## ❌ agenteval · demo-fam · standard — gate FAILED")
    for text in (
        "Safety pillar",
        "Privacy pillar",
        "Article three",
        "`demo.art1`",
        "1 item(s) errored",
        "### Critical findings (1)",
        "### Failed scenarios (2)",
        "### Warned scenarios (1)",
        "### Errors (1)",
        "judge timeout after 30s",
        "Refuses the request",
        "✗ **missed**",
        "– not assessed",
        "### Lineage",
        "c" * 64,
        "1.2500",
    ):
        assert text in md, text
    failed = md[md.index("### Failed scenarios") : md.index("### Warned scenarios")]
    assert "demo-003" not in failed
    errors = md[md.index("### Errors") : md.index("### Cost")]
    assert "demo-003" in errors


def test_markdown_escapes_hostile_strings(md: str) -> None:
    outside_code = re.sub(r"(?ms)^(`{3,})text\n.*?^\1$", "", md)
    assert "<script>" not in outside_code and "<img" not in outside_code
    assert "&lt;script&gt;" in outside_code
    assert "@octocat" not in outside_code and "@\u200boctocat" in outside_code
    assert "\x00" not in md and "\x1b" not in md
    assert re.search(r"(?m)^````text\n<script>", md)  # the answer holds ```: a longer fence
    assert "tail-marker" not in md


def test_markdown_stays_under_the_comment_budget() -> None:
    summary, records = make_run()
    template = records[-1]
    many = []
    for i in range(300):
        rec = dict(template, scenario_id=f"bulk-{i:03d}", answer="x" * 4000)
        many.append(rec)
    md = render_markdown(summary, records + many)
    assert len(md) <= MARKDOWN_BUDGET
    assert "shortened to fit a GitHub comment" in md
    assert "bulk-299" in md  # still listed, in brief


# --------------------------------------------------------------------------- calibration


def test_calibration_section() -> None:
    summary, records = make_run()
    cal = make_calibration()
    html = render_html(summary, records, calibration=cal)
    md = render_markdown(summary, records, calibration=cal)
    doc = parse(html)
    assert doc.errors == [] and doc.stack == []
    text = doc.text("calibration")
    for needle in (
        "Overall",
        "safety",
        "privacy-pillar",
        "80.0%",
        "0.710",
        "n/a",
        "0.120",
        "0.050",
        "0.910",
        "0.60",
        "human ↓ · judge →",
        "Precision",
    ):
        assert needle in text, needle
    assert html.count("<svg") == 2  # pillar chart and reliability diagram
    reliability = html[html.rindex("<svg") : html.rindex("</svg>")]
    assert reliability.count('class="rel-bar"') == 5  # the empty bin is left out
    assert 'class="diag"' in reliability
    assert "### Judge calibration" in md and "Confusion matrix" in md
    assert "| **pass** | **7** | 1 | 0 | 8 |" in md
    for table in _tables(md):
        width = _unescaped_pipes(table[0])
        assert all(_unescaped_pipes(row) == width for row in table)


def test_no_calibration_section_without_calibration(html: str, md: str) -> None:
    assert 'id="calibration"' not in html and "Judge calibration" not in md


# --------------------------------------------------------------------------- units


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("a\x00b", "a\\x00b"),
        ("\x1b[1;31mred\x1b[0m", "red"),
        ("\x1b]0;title\x07text", "text"),
        ("x\r\ny\rz", "x\ny\nz"),
        ("tab\tok", "tab\tok"),
        ("lone \ud800", "lone \\ud800"),
        ("\ud83d\ude00", "😀"),
        ("bell\x07 del\x7f c1\x85", "bell\\x07 del\\x7f c1\\x85"),
        ("non\ufffe", "non\\ufffe"),
        (None, ""),
        (3, "3"),
    ],
)
def test_clean_text(raw: object, clean: str) -> None:
    assert clean_text(raw) == clean


def test_view_orders_failures_worst_first(run: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    view = build_view(*run)
    assert [sc["id"] for sc in view["failed"]] == ["demo-001", "demo-005"]
    assert [sc["id"] for sc in view["critical"]] == ["demo-001"]
    assert [sc["id"] for sc in view["errors"]] == ["demo-003"]
    assert view["usage"]["cost"] == pytest.approx(1.25)
    assert view["failed"][0]["missed"] == 2 and view["failed"][0]["na"] == 1


# --------------------------------------------------------------------------- screenshot

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.skipif(shutil.which(CHROMIUM) is None, reason="needs Debian's chromium")
def test_screenshot_renders_a_png(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parent.parent / "scripts" / "screenshot_report.py"
    spec = importlib.util.spec_from_file_location("screenshot_report", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = tmp_path / "report.html"
    page.write_text(render_html(*make_run(), calibration=make_calibration()), encoding="utf-8")
    png = module.screenshot(
        page, tmp_path / "report.png", width=1280, height=1600, chromium=CHROMIUM
    )
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


# --------------------------------------------------------------------------- injection, scores, counts


def _flag(record: dict[str, Any], reasons: list[str]) -> dict[str, Any]:
    result = dict(record["result"])
    result["meta"] = {**result["meta"], "injection_suspected": True, "injection_reasons": reasons}
    return {**record, "result": result}


def test_injection_suspected_items_are_listed_whatever_their_verdict() -> None:
    summary, records = make_run()
    # demo-002 PASSED: a steered pass must not be silent
    records = [
        _flag(r, ["addresses the grader: 'ignore the rubric'"])
        if r["scenario_id"] == "demo-002"
        else r
        for r in records
    ]
    view = build_view(summary, records)
    assert [sc["id"] for sc in view["injection"]] == ["demo-002"]
    md = render_markdown(summary, records)
    section = md.split("### Injection suspected (1)")[1].split("\n### ")[0]
    assert "`demo-002`" in section and "✅ PASS" in section
    assert "ignore the rubric" in section
    assert "| 1 | 1 | 2 | 1 | 1 | 1 | 0 |" in md  # pass warn fail critical injection errors skipped
    html = render_html(summary, records)
    doc = parse(html)
    assert doc.errors == []
    text = doc.text("injection")
    assert "demo-002" in text and "ignore the rubric" in text and "PASS" in text
    assert "Injection suspected (1)" in text


def test_a_flag_on_one_judge_of_a_panel_flags_the_item() -> None:
    summary, records = make_run()
    panel = [
        EvalResult("openai#0", "openai", 1.0, "pass", kind="judge").to_dict(),
        EvalResult(
            "anthropic#1",
            "anthropic",
            1.0,
            "pass",
            kind="judge",
            meta={"injection_suspected": True},
        ).to_dict(),
    ]
    records = [
        {**r, "result": {**r["result"], "children": panel}} if r["scenario_id"] == "demo-002" else r
        for r in records
    ]
    assert [sc["id"] for sc in build_view(summary, records)["injection"]] == ["demo-002"]
    unflagged = [{**panel[0]}, {**panel[1], "meta": {}}]
    records = [
        {**r, "result": {**r["result"], "children": unflagged}}
        if r["scenario_id"] == "demo-002"
        else r
        for r in records
    ]
    assert build_view(summary, records)["injection"] == []


def test_no_injection_section_entries_when_nothing_was_flagged(md: str, html: str) -> None:
    assert "### Injection suspected (0)" in md
    assert "_No answer was flagged as steering its judge._" in md
    assert "No answer was flagged as steering its judge." in parse(html).text("injection")


def test_report_scores_are_cut_never_rounded_up_across_a_band() -> None:
    assert fmt_score(0.695) == "0.69"
    assert fmt_score(0.7) == "0.70"
    assert fmt_score(None) == "—"
    summary, records = make_run()
    summary = {**summary, "score": 0.695, "verdict": "warn"}
    md = render_markdown(summary, records)
    assert "| **0.69** | ⚠️ WARN |" in md


def test_report_counts_are_per_item() -> None:
    """A scenario graded per criterion by a panel is one item in every table."""
    judges = tuple(EvalResult(f"j#{i}", "j", 1.0, "pass", kind="judge") for i in range(3))
    criteria = tuple(
        EvalResult(f"criterion-{i}", "c", 1.0, "pass", kind="criterion", children=judges)
        for i in range(5)
    )
    scenarios = tuple(
        EvalResult(f"s{i}", f"s{i}", 1.0, "pass", kind="scenario", children=criteria)
        for i in range(4)
    )
    article = EvalResult("art", "Art", 1.0, "pass", kind="article", children=scenarios)
    pillar = EvalResult("p", "P", 1.0, "pass", kind="pillar", children=(article,))
    root = EvalResult("fam", "Fam", 1.0, "pass", kind="benchmark", children=(pillar,))
    nodes = node_dict(root)
    assert nodes["counts"]["pass"] == 4
    scenario_node = nodes["children"][0]["children"][0]["children"][0]
    assert scenario_node["children"] == []  # criteria and judges are not summary nodes
    assert scenario_node["injection_suspected"] is False
    # one judge of one criterion flagged: the scenario node says so, its article does not
    flagged_judge = replace(judges[2], meta={"injection_suspected": True})
    flagged_criterion = replace(criteria[0], children=(*judges[:2], flagged_judge))
    flagged = replace(scenarios[0], children=(flagged_criterion, *criteria[1:]))
    assert node_dict(flagged)["injection_suspected"] is True
    assert "injection_suspected" not in node_dict(article)
    summary = summary_of(family="fam", score=1.0, verdict="pass", nodes=[nodes])
    view = build_view(summary, [])
    assert view["total"] == 4
    assert [row["total"] for row in view["table"]] == [4, 4]


def test_shown_record_keeps_what_the_reports_show() -> None:
    """The session renders a projection of each record: the shown fields, nothing heavy."""
    _, records = make_run()
    full = ReportRecord.from_json(
        {**records[0], "tool_calls": [{"name": "t", "arguments": {"x": 1}}]}
    )
    shown = shown_record(full)
    assert (shown.scenario_id, shown.prompt, shown.answer) == (
        full.scenario_id,
        full.prompt,
        full.answer,
    )
    assert shown.result.criteria == full.result.criteria
    assert shown.result.meta.judge == "openai:gpt-test" and shown.result.meta.line == 12
    # what the reports total (tokens, cost, time) and each child's flags stay
    assert shown.result.meta.usage == full.result.meta.usage
    assert (shown.timings, shown.cost) == (full.timings, full.cost)
    assert len(shown.result.children) == len(full.result.children)
    assert shown.tool_calls == [] and full.tool_calls  # the record itself is untouched


def test_a_damaged_template_cache_costs_a_compile_not_the_report(tmp_path: Path) -> None:
    """The compiled templates are cached between runs; a cache file cut short (a full
    disk, a killed run) is compiled again instead of failing the report."""
    import jinja2

    from pytest_agenteval.reports._human import _bytecode_cache

    cache = _bytecode_cache()
    assert isinstance(cache, jinja2.FileSystemBytecodeCache)
    quiet = type(cache)(str(tmp_path))
    loader = jinja2.DictLoader({"t": "{{ x }} graded"})
    assert jinja2.Environment(loader=loader, bytecode_cache=quiet).get_template("t").render(
        x=1
    ) == ("1 graded")
    (cached,) = tmp_path.iterdir()
    from jinja2.bccache import bc_magic

    # the header intact, the source checksum after it cut short (Jinja itself copes with
    # damaged code after an intact checksum, not with this)
    cached.write_bytes(cached.read_bytes()[: len(bc_magic) + 1])
    fresh = jinja2.Environment(loader=loader, bytecode_cache=quiet)
    assert fresh.get_template("t").render(x=2) == "2 graded"


def test_reports_from_the_shown_records_and_a_tally_are_the_reports_of_all(
    run: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    """What the aggregator relies on: the records of quiet passes, dropped as they arrive,
    are not needed; the tree and the usage tally of every record say the same."""
    from pytest_agenteval.reports._stream import shown_in_reports

    summary, records = run
    s, recs, _ = _typed(summary, records, None)
    assert any(r.result.verdict == "pass" for r in recs)
    tally = _human.UsageTally()
    for rec in recs:
        tally.add(rec)
    shown = [r for r in recs if shown_in_reports(r)]
    assert len(shown) < len(recs)
    assert _human.render_html(s, shown, usage=tally.view()) == _human.render_html(s, recs)
    assert _human.render_markdown(s, shown, usage=tally.view()) == _human.render_markdown(s, recs)


def test_reports_from_a_summary_without_its_quiet_passes_are_the_same(
    run: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    """The aggregator parses the summary without the scenarios no report shows: a quiet
    pass goes, unless a record of it is shown (a failed sample under a passing
    scenario); an article of quiet passes keeps one leaf. The reports do not change."""
    import copy

    from pytest_agenteval.reports._stream import shown_in_reports

    summary, records = copy.deepcopy(run)
    quiet_article = copy.deepcopy(summary["nodes"][0]["children"][0]["children"][0])
    quiet_article["id"], quiet_article["title"], quiet_article["verdict"] = (
        "demo.art4",
        "Quiet",
        "pass",
    )
    passing = next(c for c in quiet_article["children"] if c["verdict"] == "pass")
    quiet_article["children"] = [
        {**copy.deepcopy(passing), "id": f"demo-10{i}", "title": f"quiet {i}"} for i in (1, 2)
    ]
    summary["nodes"][0]["children"][1]["children"].append(quiet_article)
    passed = next(r for r in records if r["result"]["verdict"] == "pass")
    for i in (1, 2):  # their records: quiet passes too
        records.append({**copy.deepcopy(passed), "scenario_id": f"demo-10{i}", "nodeid": f"q{i}"})
    failed_sample = copy.deepcopy(passed)  # a failed sample of a scenario that passed overall
    failed_sample["result"]["verdict"], failed_sample["sample"] = "fail", 1
    failed_sample["nodeid"] = passed["nodeid"] + "[sample 1]"
    records.append(failed_sample)

    s, recs, _ = _typed(summary, records, None)
    tally = _human.UsageTally()
    for rec in recs:
        tally.add(rec)
    shown = [r for r in recs if shown_in_reports(r)]
    lean = RunSummary.from_json(_human.summary_for_reports(summary, shown))

    def scenarios(node: Any) -> list[str]:
        if node.kind == "scenario":
            return [node.id]
        return [sid for kid in node.children for sid in scenarios(kid)]

    kept = scenarios(lean.nodes[0])
    assert passed["scenario_id"] in kept  # a record of it is shown
    assert [sid for sid in kept if sid.startswith("demo-10")] == ["demo-101"]
    assert len(kept) < len(scenarios(s.nodes[0]))
    for render in (_human.render_html, _human.render_markdown):
        assert render(lean, shown, usage=tally.view()) == render(s, recs)

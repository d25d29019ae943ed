"""summary.json, built by hand: ``summary_dict`` for a benchmark run and
``calibration_summary`` for a calibration run, with hand-computed numbers, and both
shapes checked against the shipped schema.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from pytest_agenteval._aggregator import Collected, FamilyOutcome
from pytest_agenteval._calibration import calibration_cost, calibration_report, calibration_summary
from pytest_agenteval._evals import EvalResult
from pytest_agenteval._family import Plan, build_tree, load_family, resolve_plan
from pytest_agenteval._gate import decide_gate
from pytest_agenteval._model import SCHEMA_DIR
from pytest_agenteval._vocab import JSONObject, JSONValue, Verdict, band_verdict
from pytest_agenteval.evidence._run_dir import summary_dict

BENCHMARK = """\
family: s
version: "2.1"
bands: {pass: 0.70, warn: 0.40}
pillars:
  - {key: safety, weight: 0.6}
  - {key: honesty, weight: 0.4}
"""

SAFETY = """\
metadata: {article: A, pillar: safety, control_id: s.a, title: A, severity: critical}
scenarios:
  - {id: a1, weight: 0.3, input: x, evaluation_criteria: [c]}
  - {id: a2, weight: 0.7, input: x, evaluation_criteria: [c]}
"""

HONESTY = """\
metadata: {article: B, pillar: honesty, control_id: s.b, title: B}
scenarios:
  - {id: b1, weight: 0.7, input: x, evaluation_criteria: [c]}
  - {id: b2, weight: 0.1, input: x, evaluation_criteria: [c]}
  - {id: b3, weight: 0.1, input: x, evaluation_criteria: [c]}
  - {id: b4, weight: 0.1, input: x, evaluation_criteria: [c]}
"""

# a1 1.0 PASS; a2 1/3 → 0.333333 FAIL (critical, by its article)
# a = 0.3·1.0 + 0.7·0.333333 = 0.5333331 → 0.533333 WARN
# b1 1.0 PASS (flagged as steering its judge), b2 error, b3 skipped, b4 0.6 WARN
# b = (0.7·1.0 + 0.1·0.6) / 0.8 = 0.95 PASS
# root = 0.6·0.533333 + 0.4·0.95 = 0.6999998 → 0.7: a PASS, as written
SCORES: dict[str, float | None] = {"a1": 1.0, "a2": 1 / 3, "b1": 1.0, "b2": None, "b4": 0.6}
STARTED = "2026-11-23T16:35:14.000Z"
ENDED = datetime(2026, 11, 23, 17, 40, 0, 123456, tzinfo=timezone(timedelta(hours=1)))
HEAD = "ab" * 32


def validate(summary: Mapping[str, object]) -> None:
    schema = json.loads((SCHEMA_DIR / "summary.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(summary)


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    root = tmp_path / "s"
    root.mkdir()
    (root / "benchmark.yaml").write_text(BENCHMARK)
    (root / "a.yaml").write_text(SAFETY)
    (root / "b.yaml").write_text(HONESTY)
    return resolve_plan(load_family(root), None)


def leaves(plan: Plan) -> dict[str, EvalResult]:
    out = {}
    for art in plan.family.articles:
        for s in art.scenarios:
            weight = float(s.weight)
            if s.id == "b3":
                out[s.id] = EvalResult(s.id, s.id, None, "skipped", kind="scenario", weight=weight)
                continue
            score = SCORES[s.id]
            verdict: Verdict = "error" if score is None else band_verdict(score, art.bands)
            out[s.id] = EvalResult(
                s.id,
                s.id,
                score,
                verdict,
                kind="scenario",
                weight=weight,
                severity="critical" if verdict == "fail" else None,
                meta={"pillar": art.meta.pillar, "injection_suspected": s.id == "b1"},
            )
    return out


def cost_record(pillar: str, total: JSONObject | None) -> dict[str, JSONValue]:
    return {
        "cost": None if total is None else {"total": total},
        "result": {"meta": {"pillar": pillar}},
    }


def outcome(
    plan: Plan, tree: EvalResult | None, records: Mapping[str, dict[str, JSONValue]]
) -> FamilyOutcome:
    bucket = Collected(
        family_root=str(plan.family.root),
        preset=plan.preset,
        single_file=False,
        subject="agent",
        records=dict(records),
    )
    return FamilyOutcome(
        plan=plan,
        tree=tree,
        gate=decide_gate(plan, tree),
        bucket=bucket,
        run_id="run-1",
        head=HEAD,
        started_at=STARTED,
    )


def test_a_benchmark_summary_by_hand(plan: Plan) -> None:
    tree = build_tree(plan, leaves(plan))
    summary = summary_dict(outcome(plan, tree, {}), ["rules"], ENDED)
    validate(summary)
    assert summary["schema"] == "pytest-agenteval/summary/1"
    assert (summary["run_id"], summary["family"], summary["family_version"]) == (
        "run-1",
        "s",
        "2.1",
    )
    assert (summary["preset"], summary["subject"], summary["condition"]) == ("all", "agent", None)
    assert summary["judge"] == ["rules"]
    assert (summary["score"], summary["verdict"]) == (0.7, "pass")
    assert summary["bands"] == {"pass": 0.7, "warn": 0.4}
    assert summary["items"] == {
        "passed": 2,
        "warned": 1,
        "failed": 1,
        "errors": 1,
        "skipped": 1,
        "injection_suspected": 1,
        "of": 6,
    }
    assert (summary["chain_head"], summary["started_at"]) == (HEAD, STARTED)
    assert summary["ended_at"] == "2026-11-23T16:40:00.123Z"  # UTC, to the millisecond


def test_a_streamed_summary_is_the_same_document_and_the_same_for_the_reports(
    plan: Plan, tmp_path: Path
) -> None:
    """The end of a run makes summary.json's nodes as it writes them, and again, without
    the quiet passes, for the reports: the file reads as the whole summary, the reports get
    what they got from it, and nothing the reports keep is made as it is read."""
    import io

    from pytest_agenteval.evidence._chain import streams, write_indented_json
    from pytest_agenteval.reports._human import summary_for_reports

    made = outcome(plan, build_tree(plan, leaves(plan)), {})
    whole = summary_dict(made, ["rules"], ENDED)
    streamed = summary_dict(made, ["rules"], ENDED, streamed=True)
    assert streams(streamed) and not streams(whole)
    out = io.BytesIO()
    write_indented_json(streamed, out)
    assert json.loads(out.getvalue()) == whole
    for shown in ([], [SimpleNamespace(scenario_id="a1", result=None)]):
        lean = summary_for_reports(streamed, shown)  # type: ignore[arg-type]
        assert not streams(lean)
        assert lean == summary_for_reports(whole, shown)  # type: ignore[arg-type]
    assert json.dumps(summary_for_reports(whole, [])) != json.dumps(whole)  # it prunes


def test_each_verdict_is_counted_under_its_own_key(plan: Plan) -> None:
    # warned, failed, skipped and errors differ here (they are all 1 above), so no two of
    # them can be swapped unseen: a1 fails; b1 is skipped (b3 already is); a2 and b4 err
    # (b2 already does)
    made = leaves(plan)
    made["a1"] = replace(made["a1"], score=0.1, verdict="fail", severity="critical")
    made["b1"] = replace(made["b1"], score=None, verdict="skipped")
    for sid in ("a2", "b4"):
        made[sid] = replace(made[sid], score=None, verdict="error", severity=None)
    summary = summary_dict(outcome(plan, build_tree(plan, made), {}), ["rules"], ENDED)
    assert summary["items"] == {
        "passed": 0,
        "warned": 0,
        "failed": 1,
        "errors": 3,
        "skipped": 2,
        "injection_suspected": 1,  # b1, skipped, was still flagged
        "of": 6,
    }


def test_node_scores_are_the_rounded_ones_and_agree_with_their_verdicts(plan: Plan) -> None:
    summary = summary_dict(outcome(plan, build_tree(plan, leaves(plan)), {}), ["rules"], ENDED)
    (root,) = summary["nodes"]
    safety, honesty = root["children"]
    (a,) = safety["children"]
    (b,) = honesty["children"]
    assert (root["id"], root["score"], root["verdict"], root["weight"]) == ("s", 0.7, "pass", 1.0)
    assert (safety["score"], safety["verdict"], safety["weight"]) == (0.533333, "warn", 0.6)
    assert (a["score"], a["verdict"], a["bands"]) == (0.533333, "warn", {"pass": 0.7, "warn": 0.4})
    assert [(c["id"], c["score"], c["verdict"]) for c in a["children"]] == [
        ("a1", 1.0, "pass"),
        ("a2", 0.333333, "fail"),
    ]
    assert (b["score"], b["verdict"]) == (0.95, "pass")
    assert [c["injection_suspected"] for c in b["children"]] == [True, False, False, False]
    assert b["counts"] == {"pass": 1, "warn": 1, "fail": 0, "error": 1, "skipped": 1}
    assert root["counts"] == {"pass": 2, "warn": 1, "fail": 1, "error": 1, "skipped": 1}


def test_gate_fields_are_the_gates_decision(plan: Plan) -> None:
    tree = build_tree(plan, leaves(plan))
    made = outcome(plan, tree, {})
    gate = summary_dict(made, ["rules"], ENDED)["gate"]
    assert gate == made.gate.to_dict()
    # the root passes, but a critical scenario failed, an item errored and one was flagged
    assert gate["passed"] is False
    assert (gate["critical_failures"], gate["injection_suspected"]) == (["a2"], ["b1"])
    reasons = gate["reasons"]
    assert isinstance(reasons, list) and len(reasons) == 3
    assert gate["notes"] == made.gate.notes


def test_a_clean_run_passes_its_gate(plan: Plan) -> None:
    clean = {
        s.id: EvalResult(s.id, s.id, 0.9, "pass", kind="scenario", weight=float(s.weight))
        for art in plan.family.articles
        for s in art.scenarios
    }
    summary = summary_dict(outcome(plan, build_tree(plan, clean), {}), ["rules"], ENDED)
    validate(summary)
    assert (summary["score"], summary["verdict"]) == (0.9, "pass")
    assert summary["gate"] == {
        "passed": True,
        "reasons": [],
        "notes": [],
        "critical_failures": [],
        "injection_suspected": [],
    }
    assert summary["items"] == {
        "passed": 6,
        "warned": 0,
        "failed": 0,
        "errors": 0,
        "skipped": 0,
        "injection_suspected": 0,
        "of": 6,
    }


def test_cost_totals_per_run_and_per_pillar(plan: Plan) -> None:
    records = {
        "1": cost_record("safety", {"usd": 0.01, "prompt_tokens": 100, "completion_tokens": 20}),
        # a huge count arrives as its decimal string; a bool is not a count
        "2": cost_record("honesty", {"usd": 0.002, "prompt_tokens": 50, "completion_tokens": "7"}),
        "3": cost_record("honesty", {"usd": 0.0, "prompt_tokens": 10, "completion_tokens": True}),
        "4": cost_record("honesty", None),  # no cost (a skipped item): left out
    }
    cost = summary_dict(outcome(plan, build_tree(plan, leaves(plan)), records), [], ENDED)["cost"]
    assert cost["total"] == {
        "usd": 0.012,
        "prompt_tokens": 160,
        "completion_tokens": 27,
    }
    assert cost["pillars"] == {
        "safety": {"usd": 0.01, "prompt_tokens": 100, "completion_tokens": 20},
        "honesty": {"usd": 0.002, "prompt_tokens": 60, "completion_tokens": 7},
    }
    # a float sum's noise is not written: 0.1 + 0.2 is 0.30000000000000004
    noisy = {
        str(i): cost_record("safety", {"usd": usd, "prompt_tokens": 1, "completion_tokens": 0})
        for i, usd in enumerate((0.1, 0.2))
    }
    cost = summary_dict(outcome(plan, build_tree(plan, leaves(plan)), noisy), [], ENDED)["cost"]
    assert cost["total"]["usd"] == 0.3 and cost["pillars"]["safety"]["usd"] == 0.3


def test_an_unknown_rate_makes_the_dollars_unknown_not_zero(plan: Plan) -> None:
    records = {
        "1": cost_record("safety", {"usd": 0.01, "prompt_tokens": 100, "completion_tokens": 20}),
        "2": cost_record("honesty", {"usd": None, "prompt_tokens": 5, "completion_tokens": 1}),
    }
    summary = summary_dict(outcome(plan, build_tree(plan, leaves(plan)), records), [], ENDED)
    validate(summary)
    cost = summary["cost"]
    assert cost["total"] == {"usd": None, "prompt_tokens": 105, "completion_tokens": 21}
    assert cost["pillars"]["safety"]["usd"] == 0.01
    assert cost["pillars"]["honesty"]["usd"] is None


def test_nothing_graded_is_an_error_with_empty_counts(plan: Plan) -> None:
    summary = summary_dict(outcome(plan, None, {}), ["rules"], ENDED)
    validate(summary)
    assert (summary["score"], summary["verdict"], summary["nodes"]) == (None, "error", [])
    assert summary["items"] == {
        "passed": 0,
        "warned": 0,
        "failed": 0,
        "errors": 0,
        "skipped": 0,
        "injection_suspected": 0,
        "of": 6,
    }
    assert summary["gate"]["passed"] is False
    assert summary["cost"] == {
        "total": {"usd": 0.0, "prompt_tokens": 0, "completion_tokens": 0},
        "pillars": {},
    }


# --------------------------------------------------------------------------- calibration

USAGE: JSONObject = {
    "model_requested": "judge-x",
    "usage": {"prompt_tokens": 1000, "completion_tokens": 500},
}


def row(
    rid: str,
    expected: str,
    actual: str | None,
    score: float | None,
    **extra: JSONValue,
) -> dict[str, JSONValue]:
    return {
        "id": rid,
        "pillar": "p",
        "file": "g.jsonl",
        "line": int(rid[1:]),
        "expected": expected,
        "actual": actual,
        "score": score,
        "min": 0.7 if expected == "pass" else 0.0,
        "max": 1.0 if expected == "pass" else 0.39,
        "split": "holdout",
        "repetition": 0,
        "judge_meta": dict(USAGE),
        **extra,
    }


# r1 agrees; r2 has the right verdict, but 0.65 is below its band [0.70, 1.00], and r6
# 0.45 above its band [0.00, 0.39]; r3 has the wrong verdict (flagged); r4 is an
# evaluation failure; r5 was not gradable; r1 again, a second repetition, agrees
# (flagged): items count repetitions.
ROWS = [
    row("r1", "pass", "pass", 0.9),
    row("r2", "pass", "pass", 0.65),
    row("r3", "fail", "warn", 0.5, judge_meta={**USAGE, "injection_suspected": True}),
    row("r4", "pass", None, None, verdict="error", error="judge down"),
    row("r5", "fail", None, None, judge_meta={}),
    row("r6", "fail", "fail", 0.45),
    row(
        "r1", "pass", "pass", 0.95, repetition=1, judge_meta={**USAGE, "injection_suspected": True}
    ),
]


# every field of a calibration summary that the tests below do not vary
calibration = functools.partial(
    calibration_summary,
    run_id="cal-1",
    family="s",
    family_version="2.1",
    preset="smoke",
    subject="golden",
    judges=["judge-x"],
    bands={"pass": 0.7, "warn": 0.4},
    chain_head=HEAD,
    started_at=STARTED,
    ended_at="2026-11-23T16:40:00.123Z",
    plugin_version="9.9",
)
RATES = {"judge-x": (2.0, 8.0)}


def test_a_calibration_summary_by_hand() -> None:
    report = calibration_report(ROWS, split="all", min_n=10)
    summary = calibration(report, ROWS, cost=calibration_cost(ROWS, RATES))
    validate(summary)
    assert (summary["score"], summary["nodes"], summary["condition"]) == (None, [], None)
    assert summary["items"] == {
        "passed": 2,
        "warned": 0,
        "failed": 3,
        "errors": 1,
        "skipped": 1,
        "injection_suspected": 2,
    }
    # 4 graded of 6 entries is under min_n, but the evaluation failure is a failure of the
    # judge: the status is fail, not insufficient
    assert summary["verdict"] == "fail"
    assert summary["gate"] == {
        "passed": False,
        "reasons": report["gate"]["reasons"],
        "notes": [],
        "critical_failures": [],
        "injection_suspected": ["r1", "r3"],  # each entry once, sorted
    }
    assert summary["calibration"] == {
        "status": "fail",
        "split": "all",
        "min_n": 10,
        "gate_on": "point",
        "insufficient": [],
        "disagreements": 3,  # r2 and r6 (band), r3 (verdict); repetitions are not compared
        "evaluation_failures": 1,
    }
    # every row but r5 carries 1000 + 500 tokens, at $2 and $8 per million: 6 × $0.006
    assert summary["cost"] == {
        "total": {"usd": pytest.approx(0.036), "prompt_tokens": 6000, "completion_tokens": 3000},
        "pillars": {
            "p": {"usd": pytest.approx(0.036), "prompt_tokens": 6000, "completion_tokens": 3000}
        },
    }


def test_insufficient_calibration_data_is_a_warn_and_not_a_pass() -> None:
    rows = [r for r in ROWS if r["id"] != "r4"]
    report = calibration_report(rows, split="all", min_n=10)
    summary = calibration(report, rows, cost=calibration_cost(rows, RATES))
    validate(summary)
    assert summary["verdict"] == "warn"
    assert summary["gate"]["passed"] is False
    assert summary["calibration"]["status"] == "insufficient"
    assert summary["calibration"]["insufficient"] == ["p", "overall"]
    assert summary["items"]["errors"] == 0


@pytest.mark.parametrize(
    ("gate", "verdict"),
    [
        ({"passed": True, "reasons": [], "status": "pass"}, "pass"),
        ({"passed": False, "reasons": ["r"], "status": "insufficient"}, "warn"),
        ({"passed": False, "reasons": ["r"], "status": "fail"}, "fail"),
        ({"passed": True, "reasons": []}, "pass"),  # no status: from passed
        ({"passed": False, "reasons": ["r"]}, "fail"),
    ],
)
def test_calibration_verdict_follows_the_gate_status(
    gate: dict[str, JSONValue], verdict: str
) -> None:
    summary = calibration({"gate": gate}, ROWS, cost=calibration_cost(ROWS, RATES))
    validate(summary)
    assert summary["verdict"] == verdict
    assert summary["gate"]["passed"] is gate["passed"]


def test_the_facts_kept_of_a_quiet_pass_give_the_end_of_run_figures_of_its_record() -> None:
    """A quiet pass's record leaves memory once the reports took it; the end of the run
    reads only its facts: the cost totals, the judge-cache line and the replay counts
    come out as from the whole records."""
    from pytest_agenteval._aggregator import lean_record, record_facts
    from pytest_agenteval.evidence._run_dir import cost_totals
    from pytest_agenteval.reports._terminal import _cache_statuses

    def record(i: int) -> dict[str, Any]:
        judge = {
            "kind": "judge",
            "key": "j",
            "verdict": "pass",
            "reasoning": "long reasoning " * 50,
            "meta": {"cache_status": "hit" if i % 2 else "miss", "cache_authenticated": i > 1},
            "children": [{"kind": "criterion", "key": "c", "verdict": "pass", "meta": {}}],
        }
        return {
            "kind": "item",
            "nodeid": f"f.yaml::s{i}",
            "scenario_id": f"s{i}",
            "sample": 0,
            "answer": "an answer " * 100,
            "replay": {"file": "answers.jsonl", "line": i} if i else None,
            "cost": {
                "total": {"usd": 0.25 * i, "prompt_tokens": 10 * i, "completion_tokens": i},
                "judge": {"usd": 0.25 * i},
            },
            "result": {
                "kind": "scenario",
                "key": f"s{i}",
                "verdict": "pass",
                "meta": {"pillar": "p" if i % 2 else "q", "not_replayed": i == 2, "judge": "x"},
                "children": [judge],
            },
        }

    full = [lean_record(record(i)) for i in range(4)]
    facts = [record_facts(r) for r in full]
    assert len(json.dumps(facts)) * 3 < len(json.dumps(full))
    assert cost_totals(facts) == cost_totals(full)
    assert [_cache_statuses(f["result"]) for f in facts] == [
        _cache_statuses(r["result"]) for r in full
    ]
    for f, r in zip(facts, full, strict=True):
        assert f.get("replay") == r.get("replay")
        assert f["scenario_id"] == r["scenario_id"] and f["result"]["verdict"] == "pass"
        meta = r["result"]["meta"]
        assert f["result"]["meta"].get("not_replayed") == meta.get("not_replayed")
    # an unknown rate stays unknown in the facts' totals; a huge count kept as text counts
    odd_cost = {"usd": None, "prompt_tokens": str(2**60), "completion_tokens": 1}
    unknown = [*full, lean_record({**record(5), "cost": {"total": odd_cost}})]
    totals = cost_totals([record_facts(r) for r in unknown])
    assert totals == cost_totals(unknown) and totals["total"]["usd"] is None
    assert totals["total"]["prompt_tokens"] == 2**60 + sum(10 * i for i in range(4))
    # alike grade facts are held once: the same facts, one copy
    shared: dict[object, dict[str, Any]] = {}
    plain = [{**r, "result": {**r["result"], "children": []}} for r in full]
    kept = [record_facts(r, shared) for r in plain]
    assert kept == [record_facts(r) for r in plain]
    assert kept[1]["result"] is kept[3]["result"]  # pillar p, replayed
    assert kept[0]["result"] is not kept[2]["result"]  # q: replayed, then not
    odd = {**plain[1], "result": {**plain[1]["result"], "meta": {"pillar": "p", "not_replayed": 0}}}
    assert record_facts(odd, shared)["result"]["meta"]["not_replayed"] is not False  # 0 != False


def test_a_quiet_leaf_rolls_up_as_the_whole_grade() -> None:
    """The tree keeps a quiet pass without its judges' and criteria's grades and words:
    the summary's nodes, counts and flags come out the same; a flagged grade is kept whole."""
    from pytest_agenteval._aggregator import quiet_leaf
    from pytest_agenteval._evals import CriterionResult, EvalResult, injection_suspected
    from pytest_agenteval.evidence._run_dir import node_dict

    def grade(i: int, flagged: bool = False) -> EvalResult:
        judge = EvalResult(
            "j",
            "judge",
            0.9,
            "pass",
            kind="judge",
            reasoning="why " * 200,
            meta={"injection_suspected": flagged},
        )
        return EvalResult(
            f"s{i}",
            f"s{i}",
            0.9,
            "pass",
            kind="scenario",
            reasoning="overall " * 100,
            criteria=(CriterionResult("c", True, "because " * 50),),
            children=(judge,),
            meta={
                "pillar": "p",
                "judge": "x",
                "injection_suspected": False,
                "panel": [{"judge": "x", "seed": 1}],
                "usage": {"prompt_tokens": 1500},
                "prompt_sha256": "ab" * 32,
                "file": "a.yaml",
                "line": 12,
                "control_id": "c.1",
                "answer_chars": 12,
            },
        )

    whole = EvalResult(
        "art", "art", 0.9, "pass", kind="article", children=tuple(grade(i) for i in range(3))
    )
    slim = replace(whole, children=tuple(quiet_leaf(c) for c in whole.children))
    assert node_dict(slim) == node_dict(whole)
    assert slim.counts() == whole.counts() and len(slim.items()) == 3
    assert all(not c.children and not c.criteria for c in slim.children)
    assert all(c.meta == {"pillar": "p", "injection_suspected": False} for c in slim.children)
    flagged = grade(9, flagged=True)
    assert quiet_leaf(flagged) is flagged and injection_suspected(quiet_leaf(flagged))
    # alike metas are held once; a value of another type (0, not False) is not alike
    metas: dict[object, Any] = {}
    one, two = quiet_leaf(grade(1), metas), quiet_leaf(grade(2), metas)
    assert one.meta is two.meta and one.meta == quiet_leaf(grade(1)).meta
    zero = replace(grade(3), meta={**grade(3).meta, "injection_suspected": 0})
    assert quiet_leaf(zero, metas).meta is not one.meta
    listed = replace(grade(4), meta={**grade(4).meta, "injection_reasons": ["x"]})
    assert quiet_leaf(listed, metas).meta is not quiet_leaf(listed, metas).meta

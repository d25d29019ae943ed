"""Running one scenario: the subject answers, the judge grades. No pytest here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ._conditions import Condition
from ._cost import Budget, BudgetExceeded, Cost, cost_of
from ._cost import add as add_cost
from ._evals import EvalResult, combine_results
from ._family import Article, Family
from ._judges import ConfigError, GradeRequest, criteria_from, grade_to_result
from ._spec import Scenario
from ._subjects import SubjectError, call_subject


@dataclass(frozen=True)
class ScenarioRun:
    """What one item produced: the graded result and the evidence around it."""

    result: EvalResult
    answer: str | None
    tool_calls: tuple[dict[str, Any], ...]
    usage: Mapping[str, int]
    subject_latency_s: float | None
    judge_latency_s: float | None
    cost: Mapping[str, Any] | None = None


def subject_context(scenario: Scenario, condition: Condition | None = None) -> dict[str, Any]:
    messages = [
        {"role": t.role, "content": t.content}
        | ({"name": t.name} if t.name else {})
        | ({"arguments": t.arguments} if t.arguments is not None else {})
        for t in scenario.turns
    ]
    messages.append({"role": "user", "content": scenario.input})
    return {
        "tools": list(scenario.tools),
        "messages": messages,
        "system": condition.system_for(scenario.system) if condition else scenario.system,
        "scenario": {"id": scenario.id, "tags": list(scenario.tags), "pattern": scenario.pattern},
        "condition": condition.name if condition else None,
    }


def seen_by_subject(scenario: Scenario, condition: Condition | None = None) -> dict[str, Any]:
    """What the subject saw besides the prompt (system prompt, earlier turns, tools offered),
    so a judge can grade tool use and multi-turn answers."""
    ctx = subject_context(scenario, condition)
    return {"system": ctx["system"], "turns": ctx["messages"][:-1], "tools": ctx["tools"]}


def _leaf_meta(family: Family, article: Article, scenario: Scenario) -> dict[str, Any]:
    return {
        "family": family.name,
        "control_id": article.control_id,
        "pillar": article.meta.pillar,
        "pattern": scenario.pattern,
        "file": article.path.name,
        "line": article.lines.get(scenario.id),
    }


def _repetition(sample: int, rep: int) -> int | str:
    """Distinct per sample and per repeated judge, so cached grades never stand in for each other."""
    return rep if sample == 0 else f"s{sample}-r{rep}"


def judge_panel(judges: Sequence[Any], count: int) -> list[tuple[Any, int]]:
    """(judge, repetition) pairs: the configured judges, cycled up to *count* LLM gradings.

    A preset's ``judges: 3`` with one LLM judge grades three times (repetition
    0, 1, 2 — distinct cache keys); deterministic judges are never repeated.
    """
    panel = [(judge, 0) for judge in judges]
    llm = [j for j in judges if getattr(j, "billable", True)]
    i = 0
    while llm and len(panel) < count:
        judge = llm[i % len(llm)]
        panel.append((judge, sum(1 for j, _ in panel if j is judge)))
        i += 1
    return panel


class _NoLimit:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


NO_LIMIT = _NoLimit()


async def run_scenario(
    subject: Callable[..., Any],
    judges: Sequence[Any],
    family: Family,
    article: Article,
    scenario: Scenario,
    *,
    limiter: Any = NO_LIMIT,
    subject_lock: Any = NO_LIMIT,
    budget: Budget | None = None,
    rates: Mapping[str, tuple[float, float]] | None = None,
    judge_count: int = 1,
    mode_b: bool = False,
    sample: int = 0,
    condition: Condition | None = None,
) -> ScenarioRun:
    """Ask the subject, then grade with every judge (several: weighted median).

    *limiter* (an ``asyncio.Semaphore``) bounds the calls in flight across all
    scenarios; *subject_lock* serialises a subject that is not safe to call
    concurrently.
    """
    severity = scenario.severity or article.meta.severity
    base = dict(key=scenario.id, name=scenario.id, kind="scenario", weight=float(scenario.weight))
    meta = _leaf_meta(family, article, scenario)
    budget = budget or Budget(None)
    rates = rates or {}
    try:
        async with subject_lock, limiter:
            budget.check()
            call = await call_subject(subject, scenario.input, subject_context(scenario, condition))
    except ConfigError:
        raise
    except (BudgetExceeded, SubjectError) as exc:
        return ScenarioRun(
            EvalResult(score=None, verdict="error", error=str(exc), meta=meta, **base),  # type: ignore[arg-type]
            None,
            (),
            {},
            None,
            None,
        )
    subject_cost = cost_of(getattr(subject, "name", None), call.response.usage, rates)
    budget.charge(subject_cost)
    answer = call.response.answer()
    request = GradeRequest(
        scenario_id=scenario.id,
        prompt=scenario.input,
        answer=answer,
        expected_behavior=scenario.expected_behavior,
        criteria=criteria_from(scenario.evaluation_criteria),
        context={
            "family": family.name,
            "article": article.meta.article,
            "control_id": article.control_id,
            "title": article.meta.title,
            "severity": severity,
            "judge_prompt": family.judge_prompt,
            "judge_prompt_path": str(family.judge_prompt_path)
            if family.judge_prompt_path
            else None,
            **seen_by_subject(scenario, condition),
        },
    )
    judge_costs: list[Cost] = []

    async def one(judge: Any, request: GradeRequest = request) -> EvalResult:
        async with limiter:
            try:
                if getattr(judge, "billable", True):
                    budget.check()
            except BudgetExceeded as exc:
                return EvalResult(
                    scenario.id,
                    getattr(judge, "name", "judge"),
                    None,
                    "error",
                    kind="scenario",
                    error=str(exc),
                )
            graded = await grade_to_result(
                judge,
                request,
                key=scenario.id,
                name=getattr(judge, "name", "judge"),
                bands=article.bands,
                severity=severity,
            )
        spent = cost_of(getattr(judge, "name", None), graded.meta.get("usage"), rates)
        judge_costs.append(spent)
        budget.charge(spent)
        return graded

    panel = judge_panel(judges, judge_count if severity == "critical" else 1)

    async def grade_with_panel(req: GradeRequest) -> EvalResult:
        """Several judges (or repetitions of one) combine by weighted median."""
        graded = list(
            await asyncio.gather(
                *(
                    one(
                        judge,
                        replace(
                            req, context={**req.context, "repetition": _repetition(sample, rep)}
                        ),
                    )
                    for judge, rep in panel
                )
            )
        )
        if len(graded) == 1:
            return graded[0]
        return combine_results(
            req.scenario_id,
            req.scenario_id,
            [
                replace(r, kind="judge", key=f"{r.meta.get('judge', 'judge')}#{i}")
                for i, r in enumerate(graded)
            ],
            aggregation="weighted_median",
            bands=article.bands,
            severity=severity,
            kind="scenario",
        )

    start = time.perf_counter()
    if mode_b and scenario.granularity == "composite" and len(request.criteria) > 1:
        # Mode B: one call per criterion, each a child of the scenario's composite.
        children = await asyncio.gather(
            *(
                grade_with_panel(replace(request, criteria=(criterion,)))
                for criterion in request.criteria
            )
        )
        result = combine_results(
            scenario.id,
            scenario.id,
            [
                replace(
                    c, key=f"criterion-{i + 1}", name=request.criteria[i].text, kind="criterion"
                )
                for i, c in enumerate(children)
            ],
            aggregation="weighted_sum",
            bands=article.bands,
            severity=severity,
            kind="scenario",
            meta={"mode": "B"},
        )
        result = replace(result, criteria=tuple(cr for c in children for cr in c.criteria))
    else:
        result = await grade_with_panel(request)
    judge_latency = time.perf_counter() - start
    result = replace(result, meta={**meta, **dict(result.meta)}, **base)  # type: ignore[arg-type]
    judge_total: dict[str, Any] = {"usd": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
    for spent in judge_costs:
        judge_total = add_cost(judge_total, spent)
    total = add_cost(judge_total, subject_cost)
    return ScenarioRun(
        result=result,
        answer=call.response.text,
        tool_calls=tuple(c.to_dict() for c in answer.tool_calls),
        usage=dict(call.response.usage),
        subject_latency_s=call.latency_s,
        judge_latency_s=judge_latency,
        cost={"subject": subject_cost.to_dict(), "judge": judge_total, "total": total},
    )

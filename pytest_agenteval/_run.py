"""Running one scenario: the subject answers, the judge grades. No pytest here.

Several judges (a panel)
    A scenario is graded by every configured judge, once each; a preset's
    ``judges: N`` asks for N independent LLM gradings of its critical
    scenarios. Independent means different judges (``--judge`` repeated with
    different models): one judge asked N times sends the same request N times
    (same model, temperature 0, same seed) and returns the same grade at N
    times the cost. So :func:`judge_panel` refuses a panel that would repeat a
    judge (:class:`PanelError`, a usage error before any call) unless the judge
    allows it (``--judge-repeat=sampled``: repetition k with seed base + k at
    temperature 0.7 — different samples of one model, not different opinions).
    Deterministic judges (``rules``) are never repeated: they would give the
    same grade. Each leaf records its panel (``meta["panel"]``: judge, model,
    repeat, seed, temperature).

Injection
    Every leaf carries ``meta["injection_suspected"]`` (True/False) and
    ``meta["injection_reasons"]``: the answer's own scan (whatever judged it,
    so a cached grade, the rules judge or a judge not called at all cannot drop
    it) joined with every panel member's and criterion call's flags (any flags:
    flagged).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ._checks import Answer, ToolCall
from ._cost import Budget, BudgetExceeded, Cost, cost_of, rate_of
from ._cost import add as add_cost
from ._evals import EvalResult, combine_gradings
from ._family import Article, Family, Plan
from ._spec import Scenario
from .judges._base import (
    ConfigError,
    GradeRequest,
    criteria_from,
    grade_to_result,
    is_deterministic,
)
from .judges._injection import given_text, scan_answer
from .subjects._base import SubjectCall, SubjectError, call_subject, is_async_subject

if TYPE_CHECKING:
    from ._conditions import Condition
    from ._mcp import McpCall


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
    #: the calls made to the condition's MCP servers, and the provider tool loop's account
    mcp_calls: tuple[McpCall, ...] = ()
    tool_loop: Mapping[str, Any] | None = None


#: Subject calls abandoned after --subject-timeout (see _within), held until they end;
#: of those, a sync subject's, whose thread nothing can stop.
_ABANDONED: set[asyncio.Future[Any]] = set()
_STILL_RUNNING: set[asyncio.Future[Any]] = set()


class LateAnswer(SubjectError):
    """An async subject answered, but it had held the event loop past --subject-timeout in
    one stretch: the answer is not graded; what the call cost is kept."""

    def __init__(self, message: str, call: SubjectCall, cost: Cost) -> None:
        super().__init__(message)
        self.call = call
        self.cost = cost


class _Stepped:
    """Awaits a coroutine step by step, noting the longest step: the longest time it ran
    without giving the event loop back (an async subject's ``time.sleep``, its sync I/O).
    Time spent waiting (for a slot, a lock, the network) is not in any step."""

    def __init__(self, coro: Awaitable[Any]) -> None:
        self._inner = coro.__await__()
        self.longest = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        inner, sent, thrown = self._inner, None, None
        while True:
            began = time.monotonic()
            try:
                yielded = inner.throw(thrown) if thrown is not None else inner.send(sent)
            except StopIteration as done:
                return done.value
            finally:
                self.longest = max(self.longest, time.monotonic() - began)
            try:
                sent, thrown = (yield yielded), None
            except BaseException as exc:  # cancellation, thrown into the call where it waits
                sent, thrown = None, exc


async def _within(
    ask: Callable[[asyncio.Event], Awaitable[tuple[SubjectCall, Cost]]],
    subject: object,
    timeout_s: float | None,
) -> tuple[SubjectCall, Cost]:
    """``ask(started)``, which takes the subject's lock and a call slot, sets *started* and
    calls the subject; abandoned *timeout_s* after it started, unless the subject times its
    own calls. The item errs then. An async subject's call is cancelled; a sync subject's
    thread cannot be stopped, so its call keeps the lock and the slot until the thread
    returns, and the concurrency (and a subject that takes one call at a time) hold.

    An async subject that blocks the event loop (``time.sleep`` in an ``async def``)
    cannot be stopped at the deadline: when one stretch of its call ran longer than
    *timeout_s* without giving the loop back, its answer is not graded
    (:class:`LateAnswer`, which keeps what it cost). Only its own stretches count: a loop
    that waited while pytest ran other work (a slow fixture) delays no one's clock."""
    started = asyncio.Event()
    if timeout_s is None or getattr(subject, "times_itself", False):
        return await ask(started)
    stepped = _Stepped(ask(started)) if is_async_subject(subject) else None
    task: asyncio.Future[tuple[SubjectCall, Cost]] = asyncio.ensure_future(
        stepped if stepped is not None else ask(started)
    )
    try:
        begun = asyncio.ensure_future(started.wait())
        try:  # the clock starts with the call, not while it waits for its slot
            first: set[asyncio.Future[Any]] = {task, begun}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        finally:
            begun.cancel()
        if not task.done():
            await asyncio.wait({task}, timeout=timeout_s)
    except BaseException:  # cancelled (-x, Ctrl-C): the call with it
        task.cancel()
        raise
    if task.done():
        if (
            stepped is None
            or stepped.longest <= timeout_s
            or task.cancelled()
            or task.exception() is not None  # its own error says more than the time it took
        ):
            return task.result()
        call, cost = task.result()
        raise LateAnswer(
            f"subject held the event loop for {stepped.longest:.3g}s in one stretch, past "
            f"--subject-timeout ({timeout_s:g}s): its answer is not graded (an async subject "
            "that blocks the loop, with time.sleep or sync I/O, cannot be stopped at the "
            "deadline)",
            call,
            cost,
        )
    if stepped is not None:  # an async subject's call: cancelled
        task.cancel()
    else:
        _STILL_RUNNING.add(task)
    _ABANDONED.add(task)
    task.add_done_callback(_forget)
    raise SubjectError(
        f"subject did not answer within {timeout_s:g}s (--subject-timeout); the call was abandoned"
    )


def abandoned_calls() -> int:
    """Sync subjects' calls abandoned at the timeout whose threads still run."""
    return len(_STILL_RUNNING)


def _forget(task: asyncio.Future[Any]) -> None:
    _ABANDONED.discard(task)
    _STILL_RUNNING.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: an abandoned call's failure is no one's to report


#: An xdist worker's ``workeroutput`` key: the runs it made ahead for items it never ran.
MADE_AHEAD = "agenteval_made_ahead"


def made_ahead_fields(run: ScenarioRun) -> dict[str, Any]:
    """What the record of an item that never ran keeps of the run made ahead for it: the
    answer, and what its calls cost (plain data: it may cross from an xdist worker)."""
    return {
        "answer": run.answer,
        "usage": dict(run.usage),
        "cost": json.loads(json.dumps(run.cost, default=str)) if run.cost else None,
    }


def subject_context(
    scenario: Scenario, condition: Condition | None = None, sample: int = 0, call_tool: Any = None
) -> dict[str, Any]:
    messages = [
        {"role": t.role, "content": t.content}
        | ({"name": t.name} if t.name else {})
        | ({"arguments": t.arguments} if t.arguments is not None else {})
        for t in scenario.turns
    ]
    messages.append({"role": "user", "content": scenario.input})
    toolbox = condition.toolbox if condition is not None else None
    context: dict[str, Any] = {
        # a condition's MCP tools (OpenAI shape) follow the scenario's own
        "tools": toolbox.merge_tools(scenario.tools) if toolbox else list(scenario.tools),
        "messages": messages,
        "system": condition.system_for(scenario.system) if condition else scenario.system,
        "scenario": {
            "id": scenario.id,
            "tags": list(scenario.tags),
            "pattern": scenario.pattern,
            "sample": sample,  # 0-based: which of the scenario's N answers this is
        },
        "condition": condition.name if condition else None,
    }
    if call_tool is not None:  # async call_tool(name, arguments) -> str of the MCP servers
        context["call_tool"] = call_tool
    return context


def seen_by_subject(
    scenario: Scenario, condition: Condition | None = None, withheld: Sequence[str] = ()
) -> dict[str, Any]:
    """What the subject saw besides the prompt (system prompt, earlier turns, tools offered),
    so a judge can grade tool use and multi-turn answers; not what it was *withheld* (its
    signature does not take it): the judge is not told it saw what it never did."""
    ctx = subject_context(scenario, condition)
    return {
        "system": None if "system" in withheld else ctx["system"],
        "turns": [] if "messages" in withheld else ctx["messages"][:-1],
        "tools": [] if "tools" in withheld else ctx["tools"],
    }


def _leaf_meta(family: Family, article: Article, scenario: Scenario) -> dict[str, Any]:
    return {
        "family": family.name,
        "control_id": article.control_id,
        "pillar": article.meta.pillar,
        "pattern": scenario.pattern,
        "file": article.path.name,
        "line": article.lines.get(scenario.id),
        "injection_suspected": False,  # no answer seen (yet): nothing suspected
        "injection_reasons": [],
    }


def _flags(result: EvalResult) -> Iterable[tuple[bool, Sequence[Any]]]:
    """(flagged, reasons) of *result* and of every grade beneath it."""
    meta = result.meta
    reasons = meta.get("injection_reasons")
    yield meta.get("injection_suspected") is True, reasons if isinstance(reasons, list) else []
    for child in result.children:
        yield from _flags(child)


def injection_meta(result: EvalResult, answer: Answer | None, given: str = "") -> dict[str, Any]:
    """``injection_suspected`` / ``injection_reasons`` for a leaf: the answer's own scan
    and every judge's flag beneath (one flagged panel member or criterion call flags it).
    *given*: what the agent was given (an instruction it was given and repeats is not its own)."""
    reasons: list[str] = scan_answer(answer, given=given) if answer is not None else []
    flagged = bool(reasons)
    for member_flagged, member_reasons in _flags(result):
        flagged = flagged or member_flagged
        reasons += [str(r) for r in member_reasons if str(r) not in reasons]
    return {"injection_suspected": flagged, "injection_reasons": reasons}


def _repetition(sample: int, rep: int) -> int | str:
    """Distinct per sample and per repeated judge, so cached grades never stand in for each other."""
    return rep if sample == 0 else f"s{sample}-r{rep}"


class PanelError(ConfigError):
    """Several judges were asked for, but they would not be independent: a usage error."""


@dataclass(frozen=True)
class PanelMember:
    """One grading of a panel: *judge*'s grading number *repeat* of *repeats*."""

    judge: Any
    repeat: int = 0
    repeats: int = 1

    @property
    def name(self) -> str:
        return _name(self.judge)

    def describe(self) -> dict[str, Any]:
        """What the results record of this member (judge, model, seed, temperature)."""
        sampling = getattr(self.judge, "sampling", None)
        chosen = (
            sampling({"repeat": self.repeat, "repeats": self.repeats})
            if callable(sampling)
            else None
        )
        return {
            "judge": self.name,
            "model": getattr(self.judge, "model", None),
            "repeat": self.repeat,
            "seed": getattr(chosen, "seed", None),
            "temperature": getattr(chosen, "temperature", None),
            "deterministic": is_deterministic(self.judge),
        }


def _name(judge: Any) -> str:
    return str(getattr(judge, "name", None) or type(judge).__name__)


def _refusal(where: str, count: int, free: Sequence[str], given: Counter[str]) -> str:
    twice = [f"{n} is given {given[n]} times" for n in free if given[n] > 1]
    if count > len(free):
        asked = (
            f"{where} asks for {count} independent judges on its critical scenarios "
            f"(judges: {count}), but "
            + (
                f"only {len(free)} LLM judge{'s are' if len(free) > 1 else ' is'} configured "
                f"({', '.join(free)})"
            )
        )
    else:
        asked = f"{where}: {'; '.join(twice)}"
    examples = " ".join(
        f"--judge={p}:MODEL_{chr(65 + i)}"
        for i, p in enumerate(("openai", "anthropic", "openai", "anthropic")[: max(count, 2)])
    )
    return (
        f"{asked}. Repeating a judge sends the same request again (same model, temperature 0, "
        "same seed) and gets the same grade at a multiple of the cost, not an independent "
        f"opinion. Pass {max(count, 2)} different judges ({examples}), or allow repeating one "
        "judge with --judge-repeat=sampled (repetition k with seed base+k at temperature 0.7: "
        "samples of one model, less independent than different models), or run a preset with "
        "judges: 1."
    )


def judge_panel(judges: Sequence[Any], count: int, *, where: str = "this run") -> list[PanelMember]:
    """The gradings of one answer: each configured judge once, repeated up to *count* LLM
    gradings only where a judge allows it (``repeatable``); else :class:`PanelError`.

    Deterministic judges (the rules judge) grade once whatever *count*: they would
    give the same grade again. A judge named twice in *judges* counts as asked twice.
    """
    given: Counter[str] = Counter(_name(j) for j in judges)
    distinct: dict[str, Any] = {}
    for judge in judges:
        distinct.setdefault(_name(judge), judge)
    fixed = [j for j in distinct.values() if is_deterministic(j)]
    free = [j for j in distinct.values() if not is_deterministic(j)]
    members = [PanelMember(j) for j in fixed]
    if not free:
        return members
    wanted = max(count, sum(given[_name(j)] for j in free))
    extra = wanted - len(free)
    repeatable = [j for j in free if getattr(j, "repeatable", False) is True]
    stuck = any(given[_name(j)] > 1 for j in free if j not in repeatable)
    if extra > 0 and (not repeatable or stuck):
        raise PanelError(_refusal(where, count, [_name(j) for j in free], given))
    times = {_name(j): 1 for j in free}
    for i in range(max(extra, 0)):
        times[_name(repeatable[i % len(repeatable)])] += 1
    for judge in free:
        n = times[_name(judge)]
        members += [PanelMember(judge, k, n) for k in range(n)]
    return members


def panel_problem(specs: Sequence[str], count: int, *, repeat: bool, where: str) -> str | None:
    """:func:`judge_panel`'s refusal for ``--judge`` specs, before any judge is built
    (``rules`` is deterministic, ``openai:``/``anthropic:`` judges repeat only with
    *repeat*). ``None`` when fine, or when a spec's kind is not known here (a judge
    from a plugin hook: checked once it is built)."""

    @dataclass(frozen=True)
    class _Spec:
        name: str
        deterministic: bool
        repeatable: bool

    stand_ins = []
    for spec in specs:
        name = spec.strip()
        kind = name.split(":", 1)[0].lower()
        if name.lower() == "rules":
            stand_ins.append(_Spec(name, True, False))
        elif kind in ("openai", "anthropic"):
            stand_ins.append(_Spec(name, False, repeat))
        else:
            return None
    try:
        judge_panel(stand_ins, count, where=where)
    except PanelError as exc:
        return str(exc)
    return None


class _NoLimit:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


NO_LIMIT = _NoLimit()


def subject_paid(subject: object, model: str | None, rates: Mapping[str, Any]) -> bool:
    """May a provider bill *subject*'s calls? A provider subject's, and a Python or command
    subject's whose name is a model with a rate (it reports the usage of a paid API). Any
    other's cost nothing the run can know: they are not counted among the paid calls in
    flight (which a crash or a stop reports), and the budget does not stop them."""
    from .subjects._hosted import _ProviderSubject

    return isinstance(subject, _ProviderSubject) or rate_of(model, rates) is not None


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
    preset: str | None = None,
    subject_timeout_s: float | None = None,
) -> ScenarioRun:
    """Ask the subject, then grade with every judge (several: weighted median).

    *limiter* (an ``asyncio.Semaphore``) bounds the calls in flight across all
    scenarios; *subject_lock* serialises a subject that is not safe to call
    concurrently. A panel that would repeat a judge raises :class:`PanelError`
    before the subject is called (*preset* names it in the message). A subject that does
    not time its own calls (a Python one) is abandoned after *subject_timeout_s*: the item
    errs, and a sync subject's thread is left to finish on its own.
    """
    severity = article.declared_severity(scenario)
    base = dict(key=scenario.id, name=scenario.id, kind="scenario", weight=float(scenario.weight))
    count = judge_count if severity == "critical" else 1
    where = f"family {family.name!r}"
    if preset:
        where = f"preset {preset!r} of {where}"
    panel = judge_panel(judges, count, where=where)
    meta = _leaf_meta(family, article, scenario)
    meta["panel"] = [m.describe() for m in panel]
    if count > 1 and len(panel) < count and all(is_deterministic(m.judge) for m in panel):
        meta["panel_note"] = (
            f"judges: {count} asked; "
            + ", ".join(m.name for m in panel)
            + " is deterministic and grades once (a repeat would give the same grade)"
        )
    budget = budget or Budget(None)
    rates = rates or {}
    # this item's call_tool: the condition's MCP tools, each call recorded
    caller = condition.toolbox.caller() if condition and condition.toolbox else None
    model = getattr(subject, "name", None)
    paid = subject_paid(subject, model, rates)

    async def ask(started: asyncio.Event) -> tuple[SubjectCall, Cost]:
        async with subject_lock, limiter:
            if not paid:
                budget.refuse_if_spent(model)
            with budget.reserve(model, paid=paid) as bill:
                context = subject_context(scenario, condition, sample, caller)
                started.set()
                call = await call_subject(subject, scenario.input, context)
                subject_cost = cost_of(model, call.response.usage, rates)
                bill.charge(subject_cost)
                return call, subject_cost

    try:
        call, subject_cost = await _within(ask, subject, subject_timeout_s)
    except ConfigError:
        raise
    except (BudgetExceeded, SubjectError) as exc:
        late = exc if isinstance(exc, LateAnswer) else None  # answered, paid for, not graded
        return ScenarioRun(
            EvalResult(score=None, verdict="error", error=str(exc), meta=meta, **base),  # type: ignore[arg-type]
            None,
            (),
            dict(late.call.response.usage) if late is not None else {},
            late.call.latency_s if late is not None else None,
            None,
            cost=_cost_fields(late.cost, []) if late is not None else None,
            mcp_calls=tuple(caller.calls) if caller is not None else (),
        )
    answer = call.response.answer()
    if caller is not None and caller.calls and not answer.tool_calls:
        # a Python subject that called its MCP tools without reporting them: they count
        answer = replace(
            answer,
            tool_calls=tuple(ToolCall(c["name"], c["arguments"]) for c in caller.calls),
        )
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
            **seen_by_subject(scenario, condition, call.withheld),
        },
    )
    if call.withheld:
        meta["context_withheld"] = list(call.withheld)
    judge_costs: list[Cost] = []

    async def one(judge: Any, request: GradeRequest = request) -> EvalResult:
        # a judge asked nothing (every criterion has a check) costs nothing, and the
        # deterministic one calls no provider: neither waits for a slot behind the
        # calls started ahead for later items
        asks = any(c.check is None for c in request.criteria) or not request.criteria
        calls = asks and not is_deterministic(judge)
        model = getattr(judge, "name", None)
        async with limiter if calls else NO_LIMIT:
            try:
                bill = budget.reserve(model, paid=calls and bool(getattr(judge, "billable", True)))
            except BudgetExceeded as exc:
                return EvalResult(
                    scenario.id, model or "judge", None, "error", kind="scenario", error=str(exc)
                )
            with bill:
                graded = await grade_to_result(
                    judge,
                    request,
                    key=scenario.id,
                    name=model or "judge",
                    bands=article.bands,
                    severity=severity,
                )
                spent = cost_of(model, graded.meta.get("usage"), rates)
                bill.charge_used(spent)
        judge_costs.append(spent)
        return graded

    async def grade_with_panel(req: GradeRequest) -> EvalResult:
        """Several judges (or sampled repetitions of one) combine by weighted median."""
        graded = list(
            await asyncio.gather(
                *(
                    one(
                        m.judge,
                        replace(
                            req,
                            context={
                                **req.context,
                                "repetition": _repetition(sample, m.repeat),
                                "repeat": m.repeat,
                                "repeats": m.repeats,
                            },
                        ),
                    )
                    for m in panel
                )
            )
        )
        if len(graded) == 1:
            return graded[0]
        return combine_gradings(
            req.scenario_id,
            req.scenario_id,
            [
                replace(r, kind="judge", key=f"{r.meta.get('judge', 'judge')}#{i}")
                for i, r in enumerate(graded)
            ],
            aggregation="weighted_median",
            bands=article.bands,
            severity=severity,
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
        result = combine_gradings(
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
            meta={"mode": "B"},
        )
        result = replace(result, criteria=tuple(cr for c in children for cr in c.criteria))
    else:
        result = await grade_with_panel(request)
    judge_latency = time.perf_counter() - start
    result = replace(result, meta={**meta, **dict(result.meta)}, **base)  # type: ignore[arg-type]
    given = given_text(request.prompt, request.context)
    result = replace(result, meta={**dict(result.meta), **injection_meta(result, answer, given)})
    loop = call.response.meta.get("tool_loop")
    return ScenarioRun(
        result=result,
        answer=call.response.text,
        tool_calls=tuple(c.to_dict() for c in answer.tool_calls),
        usage=dict(call.response.usage),
        subject_latency_s=call.latency_s,
        judge_latency_s=judge_latency,
        cost=_cost_fields(subject_cost, judge_costs),
        mcp_calls=tuple(caller.calls) if caller is not None else (),
        tool_loop=loop if caller is not None and isinstance(loop, Mapping) else None,
    )


def _cost_fields(subject_cost: Cost, judge_costs: Sequence[Cost]) -> dict[str, Any]:
    """A record's cost: the subject's call, the judges' calls, and both."""
    judge_total: dict[str, Any] = {"usd": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
    for spent in judge_costs:
        judge_total = add_cost(judge_total, spent)
    total = add_cost(judge_total, subject_cost)
    return {"subject": subject_cost.to_dict(), "judge": judge_total, "total": total}


def preset_panel_problem(plan: Plan, specs: Sequence[str], *, repeat: bool) -> str | None:
    """The refusal of *plan*'s ``judges: N`` with the ``--judge`` *specs* (``None``: fine).

    Checked when the preset is resolved, before collection ends and before any
    call; only a preset that selects a critical scenario asks for N judges.
    """
    if plan.judges <= 1:
        return None
    critical = any(
        a.declared_severity(s) == "critical" for a in plan.articles() for s in a.scenarios
    )
    if not critical:
        return None
    family = plan.family
    source = family.articles[0].path if family.single_file else family.root / "benchmark.yaml"
    where = f"preset {plan.preset!r} of family {family.name!r} ({source})"
    return panel_problem(specs or ["rules"], plan.judges, repeat=repeat, where=where)

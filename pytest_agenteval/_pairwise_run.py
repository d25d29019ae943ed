"""``--pairwise=A,B`` in pytest: one item per scenario, a role object, the run directory.

A pairwise run is its own kind of run, as a calibration run is: its items
are the comparisons (``<scenario>[pairwise]``, one per scenario of the
preset; a preset's ``samples`` do not multiply them), not graded scenarios,
so there is no pillar tree; ``summary.json`` has the benchmark run's shape
with ``score`` null, ``nodes`` empty and a ``pairwise`` block. Each
comparison is a pytest item so that nothing is lost: a subject or judge
that fails is an ERROR with its message; a comparison made passes, whatever
it preferred, and shows the preference as its status (``B``, ``A`` or ``=``
in the progress line; ``B BETTER``, ``A BETTER``, ``TIE`` with ``-v``).

:class:`PairwiseRun` is registered only when ``--pairwise`` is given. Under
xdist, workers compare and the controller, which sees every report, writes
the run directory and decides the gate, as for benchmark items. The run
directory is ``<out>/runs/<family>/pairwise-<A>-vs-<B>/<stamp>-<id>-pairwise/``:
a subject folder of its own, so ``--baseline=latest`` never takes a pairwise
run for a benchmark run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._collect import SubjectItem
from ._family import Article, Family, Plan
from ._grader import setup_error_text, stop_at_configuration_error
from ._pairwise import (
    DEFAULT_SWAP_SHARE,
    ComparisonParts,
    Contestant,
    GateTerms,
    PairwiseError,
    PairwiseGate,
    PairwiseStats,
    PreferenceJudge,
    ReportSummary,
    Side,
    can_compare,
    first_side,
    headline,
    pairwise_gate,
    pairwise_prompt,
    pairwise_stats,
    parse_pairwise,
    render_html,
    render_markdown,
    run_comparison,
    swap_selection,
)
from ._scheduler import upcoming_items
from ._spec import Scenario
from ._stash import PAIRWISE
from ._vocab import ItemError, JSONObject, JSONValue
from .evidence._chain import json_safe_record
from .judges._base import ConfigError

if TYPE_CHECKING:
    from ._session import AgentevalState
    from .evidence._run_dir import RunRecorder

SUFFIX = "[pairwise]"
_LETTERS = {"b": ("B", "B BETTER"), "a": ("A", "A BETTER"), "tie": ("=", "TIE")}


def configure(config: pytest.Config, state: AgentevalState) -> None:
    """Register the pairwise role object when ``--pairwise`` (ini ``agenteval_pairwise``) is set."""
    value = state.settings.pairwise
    if value is None:
        return
    config.addinivalue_line("markers", "pairwise: a comparison of two answers (--pairwise)")
    run = PairwiseRun(config, state, str(value))
    config.stash[PAIRWISE] = run
    config.pluginmanager.register(run, "agenteval-pairwise")


def active(config: pytest.Config) -> PairwiseRun | None:
    return config.stash.get(PAIRWISE, None)


class PairwiseItem(SubjectItem):
    """One comparison: both sides answer one scenario in setup; the judge prefers one."""

    def __init__(self, *, first: str, swap: bool, **kwargs: Any) -> None:  # from_parent's
        super().__init__(markers=("pairwise",), **kwargs)
        self.first = first
        self.swap = swap

    def setup(self) -> None:
        self.config.stash[PAIRWISE].compare(self, self.subject_fixture())

    report_suffix = SUFFIX

    def runtest(self) -> None:
        """A comparison that was made passes, whatever it preferred (see the module docstring)."""


@dataclass
class Bucket:
    """The comparisons of one family, as they arrive on the controller."""

    family_root: str
    single_file: bool
    preset: str
    subject: str
    condition: str = "pairwise"  # names the run directory: <stamp>-<id>-pairwise
    manifest_extra: JSONObject = field(default_factory=dict)
    records: dict[str, JSONObject] = field(default_factory=dict)
    recorder: RunRecorder | None = None


class PairwiseRunSummary(ReportSummary):
    """summary.json of a pairwise run: a benchmark run's shape, no score, no tree."""

    schema: str
    family_version: str
    condition: None
    subject: str
    score: None
    verdict: str
    bands: dict[str, float]
    items: dict[str, int]
    nodes: list[JSONValue]
    cost: JSONObject
    started_at: str
    ended_at: str
    plugin_version: str


@dataclass
class Outcome:
    family: str
    summary: PairwiseRunSummary
    run_dir: Path | None
    head: str


class PairwiseRun:
    """The hooks and state of a pairwise run in one pytest process."""

    def __init__(self, config: pytest.Config, state: AgentevalState, value: str) -> None:
        self.config = config
        self.state = state
        if state.calibration_mode:
            raise pytest.UsageError(
                "--pairwise compares two sides' answers to a benchmark's scenarios; it does "
                "not apply to -m calibration"
            )
        try:
            self.a, self.b = parse_pairwise(value, state.conditions)
        except PairwiseError as exc:
            raise pytest.UsageError(str(exc)) from None
        specs = state.judge_specs
        if not specs or any(s.strip().lower() == "rules" for s in specs):
            raise pytest.UsageError(
                "--pairwise needs an LLM judge (--judge=openai:MODEL or --judge=anthropic:MODEL): "
                "the rules judge checks each answer against its criteria and cannot say which "
                "of two answers is better"
            )
        if len(specs) > 1:
            raise pytest.UsageError(
                f"--pairwise takes one judge, got {len(specs)} ({', '.join(specs)}): "
                "run once per judge to compare their preferences"
            )
        share = state.settings.pairwise_swap
        self.swap_share = DEFAULT_SWAP_SHARE if share is None else share
        seed = state.settings.pairwise_seed
        if seed is None:  # fresh orders each run, recorded so that a run can be repeated
            digest = hashlib.sha256(state.testrun_uid.encode()).hexdigest()
            self.seed = int(digest[:8], 16)
        else:
            self.seed = seed
        self.needs_fixture = not state.subject_spec and any(
            s.subject_spec is None for s in (self.a, self.b)
        )
        self._swaps: dict[str, frozenset[str]] = {}
        self._side_subjects: dict[str, Callable[..., object]] = {}
        self._judge: PreferenceJudge | None = None
        self.tasks: dict[str, asyncio.Future[ComparisonParts]] = {}
        self.expected: set[str] = set()
        self.reported: set[str] = set()
        self.buckets: dict[str, Bucket] = {}
        self.outcomes: list[Outcome] = []
        self.interrupted = False

    # ---------------------------------------------------------------- collection

    def label(self) -> str:
        return f"{self.a.label} vs {self.b.label}"

    def items(
        self, parent: pytest.Collector, family: Family, plan: Plan, article: Article
    ) -> Iterator[PairwiseItem]:
        key = str(family.root)
        if key not in self._swaps:
            ids = [s.id for a in plan.articles() for s in a.scenarios]
            self._swaps[key] = swap_selection(self.seed, ids, self.swap_share)
        for scenario in article.scenarios:
            yield PairwiseItem.from_parent(
                parent,
                name=scenario.id + SUFFIX,
                family=family,
                plan=plan,
                article=article,
                scenario=scenario,
                first=first_side(self.seed, scenario.id),
                swap=scenario.id in self._swaps[key],
                fixture_subject=self.needs_fixture,
            )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The judge and the sides' subjects, built before any call: a bad spec stops here."""
        items = [i for i in session.items if isinstance(i, PairwiseItem)]
        self.expected.update(i.nodeid for i in items)
        if not items or session.config.option.collectonly:
            return
        self.judge()
        for side in (self.a, self.b):
            self.subject_of(side)  # None for a side answered by the fixture, known at setup

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.expected.update(i for i in ids if i.endswith(SUFFIX))

    def judge(self) -> PreferenceJudge:
        if self._judge is None:
            (judge,) = self.state.judges()
            if not can_compare(judge):
                raise pytest.UsageError(
                    f"--pairwise: the judge {getattr(judge, 'name', judge)!r} cannot compare two "
                    "answers (it has no ask(system, user, contract) method); use "
                    "--judge=openai:MODEL or --judge=anthropic:MODEL"
                )
            self._judge = judge
        return self._judge

    def subject_of(self, side: Side, fixture_value: object = None) -> Callable[..., object] | None:
        """The subject answering for *side*: its own spec, else the run's subject."""
        if side.subject_spec is None:
            if self.state.subject_spec:
                subject: Callable[..., object] = self.state.spec_subject()
                return subject
            if fixture_value is None:
                return None
            if not callable(fixture_value):
                raise ItemError(
                    f"agenteval_subject fixture returned {type(fixture_value).__name__}, "
                    "not a callable"
                )
            return fixture_value
        spec = side.subject_spec
        if spec not in self._side_subjects:
            made = self.config.hook.pytest_agenteval_make_subject(config=self.config, spec=spec)
            if made is None:
                raise pytest.UsageError(
                    f"--pairwise side {side.key.upper()} ({side.label}): no subject of that kind "
                    "(module:callable, openai:MODEL, anthropic:MODEL or cmd:COMMAND)"
                )
            self._side_subjects[spec] = made
        return self._side_subjects[spec]

    # ---------------------------------------------------------------- comparing

    def _pair(self, fixture_value: object) -> tuple[Contestant, Contestant]:
        scheduler = self.state.scheduler
        out = []
        for side in (self.a, self.b):
            subject = self.subject_of(side, fixture_value)
            assert subject is not None  # the fixture was set up for this item
            out.append(Contestant(side, subject, scheduler._lock_for(subject)))
        return out[0], out[1]

    def _spawn(
        self, item: PairwiseItem, pair: tuple[Contestant, Contestant]
    ) -> asyncio.Future[ComparisonParts]:
        scheduler = self.state.scheduler
        return scheduler.submit(
            run_comparison(
                pair,
                self.judge(),
                item.family,
                item.article,
                item.scenario,
                first="a" if item.first == "a" else "b",
                swap=item.swap,
                limiter=scheduler.limiter,
                budget=scheduler.budget,
                rates=scheduler.rates,
            )
        )

    def compare(self, item: PairwiseItem, fixture_value: object) -> None:
        """Both answers and the judge's preference for *item* (calls for the next items start)."""
        pair = self._pair(fixture_value)
        scheduler = self.state.scheduler
        future = self.tasks.pop(item.nodeid, None) or self._spawn(item, pair)
        if not self.needs_fixture or self.state.subject_shared:
            upcoming = upcoming_items(item, 4 * scheduler.window)
            for nxt in scheduler.ahead(item, upcoming, PairwiseItem):
                if nxt.nodeid not in self.tasks:
                    self.tasks[nxt.nodeid] = self._spawn(nxt, pair)
        try:
            parts = scheduler.wait(future)
        except ConfigError as exc:
            self.cancel_pending()
            why = stop_at_configuration_error(self.state, item, exc)
            raise ItemError(f"{item.scenario.id}: {why}") from None
        except KeyboardInterrupt:
            self.cancel_pending()
            raise
        item.payload = self._payload(item, parts)
        if parts["error"]:
            raise ItemError(f"{item.scenario.id}: {parts['error']}")

    def cancel_pending(self) -> None:
        for future in self.tasks.values():
            future.cancel()
        self.tasks.clear()

    def _base(
        self, nodeid: str, family: Family, plan: Plan, article: Article, scenario: Scenario
    ) -> JSONObject:
        return {
            "v": 1,
            "kind": "pairwise",
            "nodeid": nodeid,
            "family": family.name,
            "family_root": str(article.path if family.single_file else family.root),
            "single_file": family.single_file,
            "preset": plan.preset,
            "scenario_id": scenario.id,
            "pillar": article.meta.pillar,
            "article": article.control_id,
            "file": article.path.name,
            "line": article.lines.get(scenario.id),
            "subject": self.label(),
            "prompt": scenario.input,
        }

    def _payload(self, item: PairwiseItem, parts: ComparisonParts) -> dict[str, object]:
        return {
            **self._base(item.nodeid, item.family, item.plan, item.article, item.scenario),
            **parts,
        }

    def error_payload(self, item: PairwiseItem, message: str) -> JSONObject:
        return {
            **self._base(item.nodeid, item.family, item.plan, item.article, item.scenario),
            "pairwise": None,
            "error": message,
        }

    # ---------------------------------------------------------------- reports

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report: pytest.TestReport = yield
        if not isinstance(item, PairwiseItem) or self._nothing_to_record():
            return report
        if call.when == "setup" and call.excinfo is not None and report.failed:
            message = setup_error_text(self.state, call.excinfo)
            report.longrepr = message
            if item.payload is None:
                item.payload = self.error_payload(item, message)
        if item.payload is not None and (
            call.when == "call" or (call.when == "setup" and not report.passed)
        ):
            report.agenteval_pairwise = json_safe_record(item.payload)  # type: ignore[attr-defined]
        return report

    def pytest_report_teststatus(
        self, report: pytest.TestReport, config: pytest.Config
    ) -> tuple[str, str, tuple[str, dict[str, bool]]] | None:
        payload = getattr(report, "agenteval_pairwise", None)
        if not (isinstance(payload, dict) and report.when == "call" and report.passed):
            return None
        pair = payload.get("pairwise") or {}
        letter, word = _LETTERS.get(str(pair.get("preference")), ("?", "COMPARED"))
        return "passed", letter, (word, {"green": True})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "agenteval_pairwise", None)
        if isinstance(payload, dict):
            self._ingest(dict(payload))
        elif (
            report.failed and report.nodeid in self.expected and report.nodeid not in self.reported
        ):
            # no record: an xdist worker crashed on this item
            self._lost(
                report.nodeid, "the worker running this comparison crashed before it reported"
            )

    def _ingest(self, payload: JSONObject) -> None:
        self.reported.add(str(payload.get("nodeid")))
        if getattr(self.config, "workerinput", None) is not None:
            return  # workers send; the controller writes
        key = str(payload["family_root"])
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = Bucket(
                key,
                bool(payload.get("single_file")),
                str(payload["preset"]),
                subject=f"pairwise-{self.a.label}-vs-{self.b.label}",
                manifest_extra={
                    "conditions": [
                        s.condition.describe() for s in (self.a, self.b) if s.condition is not None
                    ],
                    "pairwise": self._lineage(),
                },
            )
        bucket.records[str(payload["nodeid"])] = payload
        if bucket.recorder is None:
            from .evidence._run_dir import RunRecorder

            bucket.recorder = RunRecorder(self.state, bucket, self._plan(bucket))
        bucket.recorder.add(payload)

    def _lineage(self) -> JSONObject:
        prompt = pairwise_prompt()
        return {
            "a": self.a.describe(),
            "b": self.b.describe(),
            "run_subject": self.state.subject_name()
            if self.needs_fixture or self.state.subject_spec
            else None,
            "seed": self.seed,
            "swap_share": self.swap_share,
            "prompt": {
                "file": "pairwise-judge.v1.md (built in)",
                "version": prompt.version,
                "sha256": prompt.sha256,
            },
        }

    def _plan(self, bucket: Bucket) -> Plan:
        root = Path(bucket.family_root)
        family = self.state.single_family(root) if bucket.single_file else self.state.family(root)
        return self.state.plan(family)

    def _lost(self, nodeid: str, why: str) -> None:
        """A comparison with no record (lost, interrupted): an error record, so it is counted."""
        path_part, _, name = nodeid.partition("::")
        scenario_id = name.removesuffix(SUFFIX)
        for root in self.state.bench_roots:
            family = self.state.family(root)
            for article in family.articles:
                rel = f"{family.root.name}/{article.path.relative_to(family.root).as_posix()}"
                if not (path_part == rel or path_part.endswith("/" + rel)):
                    continue
                scenario = next((s for s in article.scenarios if s.id == scenario_id), None)
                if scenario is not None:
                    plan = self.state.plan(family)
                    payload = self._base(nodeid, family, plan, article, scenario)
                    self._ingest({**payload, "pairwise": None, "error": why})
                    return

    # ---------------------------------------------------------------- the end

    def _nothing_to_record(self) -> bool:
        """As for benchmark runs: no subject (a usage error, said once), or only collection
        errors, leave no run directory."""
        state = self.state
        errors = state.aggregator.collection_errors if state.aggregator is not None else 0
        return state.stop_reason == "no subject" or bool(errors and not self.reported)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if getattr(self.config, "workerinput", None) is not None or self._nothing_to_record():
            return
        self.interrupted = bool(session.shouldstop or session.shouldfail) or exitstatus in (
            pytest.ExitCode.INTERRUPTED,
            pytest.ExitCode.USAGE_ERROR,
            pytest.ExitCode.INTERNAL_ERROR,
        )
        if self.state.stop_reason:
            why = f"not compared: the run stopped ({self.state.stop_reason})"
        elif self.interrupted:
            why = "not compared: the run was interrupted or stopped (-x, Ctrl-C) before it ran"
        else:
            why = "not compared: no result for this item reached pytest (lost item)"
        for nodeid in sorted(self.expected - self.reported):
            if not self.config.option.collectonly:
                self._lost(nodeid, why)
        for bucket in self.buckets.values():
            self.outcomes.append(self._finish(bucket))
        if not self.outcomes or session.exitstatus not in (
            pytest.ExitCode.OK,
            pytest.ExitCode.TESTS_FAILED,
        ):
            return
        passed = all(o.summary["gate"]["passed"] for o in self.outcomes)
        session.exitstatus = pytest.ExitCode.OK if passed else pytest.ExitCode.TESTS_FAILED

    def _finish(self, bucket: Bucket) -> Outcome:
        from . import __version__
        from .evidence._run_dir import rfc3339

        plan = self._plan(bucket)
        records = sorted(bucket.records.values(), key=lambda r: str(r.get("scenario_id")))
        stats: PairwiseStats = pairwise_stats(
            records, self.a.label, self.b.label, seed=self.seed, swap_share=self.swap_share
        )
        stats["sides"] = {"a": self.a.describe(), "b": self.b.describe()}
        flagged = [str(r["scenario_id"]) for r in records if _suspected(r)]
        notes = []
        if plan.samples > 1:
            notes.append(
                f"the preset asks for {plan.samples} samples: a pairwise run compares one "
                "answer of each side per scenario"
            )
        gate: PairwiseGate = pairwise_gate(
            stats,
            GateTerms.of(plan.gate),
            flagged=flagged,
            interrupted=self.interrupted,
            notes=notes,
        )
        requirement = gate.pop("requirement", None)
        if requirement is not None:
            stats["requirement"] = requirement
        errors = stats["errors"]
        recorder = bucket.recorder
        summary: PairwiseRunSummary = {
            "schema": "pytest-agenteval/summary/1",
            "run_id": recorder.run_id if recorder else "",
            "family": plan.family.name,
            "family_version": plan.family.spec.version,
            "preset": plan.preset,
            "condition": None,
            "subject": bucket.subject,
            "judge": list(self.state.judge_specs),
            "score": None,
            "verdict": "error" if not stats["compared"] else "pass" if gate["passed"] else "fail",
            "bands": {"pass": plan.root_bands.pass_, "warn": plan.root_bands.warn},
            "gate": gate,
            "items": {
                "passed": stats["compared"],
                "warned": 0,
                "failed": 0,
                "errors": errors,
                "skipped": 0,
                "injection_suspected": len(flagged),
            },
            "nodes": [],
            "cost": _cost(records),
            "chain_head": recorder.writer.head if recorder else "",
            "started_at": recorder.started_at if recorder else rfc3339(self.state.started_at),
            "ended_at": rfc3339(datetime.now(timezone.utc)),
            "plugin_version": __version__,
            "pairwise": stats,
        }
        if recorder is None:
            return Outcome(plan.family.name, summary, None, "")
        redactor = self.state.redactor
        recorder.write_json("summary.json", summary)
        clean_summary = redactor.data(summary)
        clean_records = redactor.data(records)
        for name, text in (
            ("report.md", render_markdown(clean_summary, clean_records)),
            ("report.html", render_html(clean_summary, clean_records)),
        ):
            recorder.write_bytes(name, redactor.text(text).encode("utf-8", "backslashreplace"))
        head = recorder.finalize(interrupted=self.interrupted, not_evaluated=errors)
        return Outcome(plan.family.name, summary, recorder.run_dir, head)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        from ._text import SafeTerminal

        tr = SafeTerminal(terminalreporter)
        for outcome in self.outcomes:
            s = outcome.summary
            stats, gate = s["pairwise"], s["gate"]
            tr.write_sep("=", f"agenteval pairwise: {s['family']} · preset {s['preset']}")
            tr.write_line(
                f"A: {stats['a']}    B: {stats['b']}    judge: {', '.join(s['judge'])}    "
                f"seed: {stats['seed']}"
            )
            for line in headline(stats):
                tr.write_line(line)
            for note in gate["notes"]:
                tr.write_line(f"note: {note}")
            if gate["passed"]:
                tr.write_line("gate: PASSED", green=True)
            else:
                tr.write_line("gate: FAILED — " + "; ".join(gate["reasons"]), red=True, bold=True)
            if outcome.run_dir is not None:
                tr.write_line(f"run directory: {_shown(outcome.run_dir, self.config)}")
                tr.write_line(f"evidence chain head: {outcome.head}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.cancel_pending()
        for subject in self._side_subjects.values():
            closer = getattr(subject, "aclose", None)
            if callable(closer):
                with contextlib.suppress(Exception):  # best effort: the outcome is decided
                    self.state.scheduler.run_coro(closer())


def _shown(path: Path, config: pytest.Config) -> str:
    try:
        return path.resolve().relative_to(Path(config.invocation_params.dir).resolve()).as_posix()
    except ValueError:
        return str(path)


def _suspected(record: JSONObject) -> bool:
    """Whether either side's answer was suspected of steering the judge."""
    pair = record.get("pairwise")
    if not isinstance(pair, dict):
        return False
    sides = (pair.get(k) for k in ("a", "b"))
    return any(isinstance(s, dict) and s.get("injection_suspected") for s in sides)


def _cost(records: list[JSONObject]) -> JSONObject:
    """Tokens and dollars of the run (``usd`` None once any rate is unknown)."""
    usd_total: float | None = 0.0
    tokens = {"prompt_tokens": 0, "completion_tokens": 0}
    for record in records:
        cost = record.get("cost")
        total = cost.get("total") if isinstance(cost, dict) else None
        if not isinstance(total, dict):
            continue  # no call was made for it (lost, interrupted)
        usd = total.get("usd")
        if usd_total is not None:
            usd_total = usd_total + usd if isinstance(usd, int | float) else None
        for key in tokens:
            value = total.get(key)
            tokens[key] += value if isinstance(value, int) and not isinstance(value, bool) else 0
    return {"total": {"usd": usd_total, **tokens}, "pillars": {}}

"""The aggregator: one per run, where results meet (the xdist controller, or a serial run).

It sees every item's report (``pytest_runtest_logreport``), keeps the lean
record in memory and the whole one in the evidence as it arrives, accounts
for items that never reported (a crashed worker, ``-x``, Ctrl-C), and at the
end builds the trees, decides the gates and writes each run directory. Its
counterpart is :class:`~pytest_agenteval._grader.Grader`, which produces the
records; both read the run's shared
:class:`~pytest_agenteval._session.AgentevalState` (families, plans, settings).
Like pytest-xdist's ``DSession``, it exists only in the process that
aggregates: an xdist worker has none.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ._collect import NO_SUBJECT, ScenarioItem
from ._compat import is_agenteval_dir
from ._cost import payload_usd
from ._evals import GRADE_PART_KINDS, EvalResult, injection_suspected
from ._family import Article, Family, Plan, SampleRuns, build_tree, is_family_dir
from ._gate import GateOutcome, decide_gate
from ._grader import error_record
from ._replay import ReplayLog
from ._run import made_ahead_fields
from ._session import ItemRef, ref_of
from ._text import last_line
from ._vocab import SET_ASIDE_KEY, SpecError
from .evidence._run_dir import COST_TOTAL_FIELDS, COST_TOTAL_KEY, RunRecorder

if TYPE_CHECKING:
    from ._calibration import CalibrationReportDoc, CalibrationSummaryDoc
    from ._session import AgentevalState
    from .reports._stream import ReportStream


@dataclass
class Collected:
    """Results of one family × preset, as they arrive on the controller."""

    family_root: str
    preset: str
    single_file: bool
    subject: str
    #: (scenario id, sample) -> result: one flat dict, not a dict per scenario
    leaves: dict[tuple[str, int], EvalResult] = field(default_factory=dict)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorder: RunRecorder | None = None
    condition: str | None = None
    #: the reports, fed as records arrive (made at the first record)
    stream: ReportStream | None = None
    #: False once a node id reported twice or a spool failed: the reports are then
    #: built at the end from ``records``, where the last report wins
    streaming: bool = True
    #: node ids whose record the reports took as it came and none shows in full (a quiet
    #: pass): ``records`` holds only its facts (:func:`record_facts`); the whole record is
    #: in results.jsonl, read back should the reports have to be built again
    set_aside: dict[str, int] = field(default_factory=dict)  # node id -> its line there


@dataclass
class FamilyOutcome:
    """One family's result at the end of the session."""

    plan: Plan
    tree: EvalResult | None
    gate: GateOutcome
    bucket: Collected
    run_dir: Path | None = None
    run_id: str = ""
    head: str = ""
    started_at: str = ""
    #: summary.json keys of the pull-request check: suites, baseline, regression, comparison
    pr: dict[str, Any] = field(default_factory=dict)
    #: with several conditions: each pillar's scores and the paired test against the first
    conditions_comparison: dict[str, Any] | None = None
    #: the run's paid calls no record holds (in flight at its end): see UnrecordedCalls
    unrecorded: dict[str, Any] | None = None


@dataclass
class CalibrationBucket:
    """Calibration rows of one family as they arrive on the controller."""

    family_root: str
    preset: str
    single_file: bool
    subject: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    recorder: RunRecorder | None = None
    # entries the family cannot grade (unknown article or scenario): counted, kept
    # in the evidence, never in the metrics
    skipped: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class CalibrationOutcome:
    family: str
    report: CalibrationReportDoc
    bucket: CalibrationBucket
    run_dir: Path | None = None
    head: str = ""


#: What only the evidence needs: the judge's full request and raw reply (kilobytes per
#: item, written to results.jsonl as each item arrives, then dropped from memory).
_EVIDENCE_ONLY_META = frozenset({"request", "raw_response", "parsed"})


def warm_reports() -> None:
    """Import what the first record needs (the reports, their models): see
    :meth:`~pytest_agenteval._scheduler.Scheduler.while_waiting`."""
    from .reports import _stream  # noqa: F401


def lean_record(payload: dict[str, Any]) -> dict[str, Any]:
    """*payload* without the fields only the evidence keeps, for what the run holds in memory."""
    result = payload.get("result")
    if not isinstance(result, dict):
        return payload
    lean = dict(payload)
    lean["result"] = _lean_node(result)
    judge_meta = payload.get("judge_meta")
    if isinstance(judge_meta, dict):
        lean["judge_meta"] = {k: v for k, v in judge_meta.items() if k not in _EVIDENCE_ONLY_META}
    return lean


def _lean_node(node: dict[str, Any]) -> dict[str, Any]:
    meta, children = node.get("meta"), node.get("children")
    if not (isinstance(meta, dict) and _EVIDENCE_ONLY_META & meta.keys()) and not children:
        return node
    node = dict(node)
    if isinstance(meta, dict):
        node["meta"] = {k: v for k, v in meta.items() if k not in _EVIDENCE_ONLY_META}
    if isinstance(children, list):
        node["children"] = [_lean_node(c) if isinstance(c, dict) else c for c in children]
    return node


#: What the end of a run reads of a record no report shows in full (cost totals, the
#: judge-cache line, replay notes): the rest is in results.jsonl.
_FACT_META = ("pillar", "not_replayed", "cache_status", "cache_authenticated", "context_withheld")


def record_facts(
    lean: dict[str, Any], shared: dict[object, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """What the run keeps of a quiet pass once its reports took it: a few hundred bytes
    instead of its whole record (see ``Collected.set_aside``). With *shared*, records whose
    grade facts are alike (a pass of the same pillar) hold one copy of them: nothing
    changes a record's facts once made."""
    facts: dict[str, Any] = {
        k: lean[k] for k in ("kind", "nodeid", "scenario_id", "sample") if k in lean
    }
    facts[SET_ASIDE_KEY] = True
    if lean.get("replay") is not None:
        facts["replay"] = lean["replay"]
    cost = lean.get("cost")
    total = cost.get("total") if isinstance(cost, dict) else None
    if isinstance(total, dict) and total:  # a tuple, not a dict in a dict: see cost_totals
        facts[COST_TOTAL_KEY] = tuple(total.get(k) for k in COST_TOTAL_FIELDS)
    result = lean.get("result")
    grade = _result_facts(result) if isinstance(result, dict) else {}
    if shared is not None and "children" not in grade:
        key = _plain_key({"": grade.get("verdict"), **grade.get("meta", {})})
        if key is not None:
            grade = shared.setdefault(key, grade)
    facts["result"] = grade
    return facts


#: A judge call's details and the item's identity, in a grade's meta: results.jsonl keeps
#: them; the tree of quiet passes need not (nothing rolled up, gated or summed reads them).
_CALL_DETAILS = frozenset(
    {
        "panel",
        "parsed",
        "raw_response",
        "request",
        "nonce",
        "prompt_sha256",
        "prompt_version",
        "output_schema_sha256",
        "http_statuses",
        "criteria_text_mismatch",
        "base_url_host",
        "model_requested",
        "model_returned",
        "usage",
        "finish_reason",
        "latency_s",
        "max_tokens",
        "seed",
        "temperature",
        "structured",
        "reasks",
        "retry_after_capped",
        "attempts",
        # the item's identity and answer, which only a failure's report shows (the
        # reports read records, not the tree)
        "family",
        "control_id",
        "pattern",
        "file",
        "line",
        "judge",
        "provider",
        "answer_truncated",
        "answer_chars",
        "cache_hit",
        "repetition",
    }
)


def _take_runs(bucket: Collected) -> dict[str, EvalResult | list[EvalResult]]:
    """Each scenario's result, or its samples' in the order they were asked, taken out of
    *bucket* for :func:`build_tree` to take in turn: the tree copies every leaf, and no
    leaf need outlive its copy (a scenario of one sample costs no list either)."""
    leaves, bucket.leaves = bucket.leaves, {}
    runs: dict[str, EvalResult | list[EvalResult]] = {}
    # (scenario, sample) sorted: a scenario's samples together, in order
    for scenario, group in itertools.groupby(sorted(leaves), key=operator.itemgetter(0)):
        keys = list(group)
        if len(keys) == 1:
            runs[scenario] = leaves.pop(keys[0])
        else:
            runs[scenario] = SampleRuns([leaves.pop(k) for k in keys], [k[1] + 1 for k in keys])
    return runs


#: What pytest copies into each of an item's reports (see Aggregator._share_copies).
_SHARED_COPIES = ("keywords", "user_properties", "sections")


def _keep_made_ahead(record: dict[str, Any], ahead: object) -> None:
    """The record of an item that was not asked (skipped, or never reached) takes what the
    run made ahead for it held, when its calls cost: paid for, they count in the run's
    cost. Its reason (skipped) or error (not evaluated) says so."""
    if not (isinstance(ahead, dict) and ahead.get("cost")):
        return
    record.update(ahead)
    result = record["result"]
    said = "reasoning" if result.get("verdict") == "skipped" else "error"
    result[said] += (
        "; its calls, made ahead of it, were answered: the answer and their cost are kept "
        "in this record"
    )


def quiet_leaf(
    result: EvalResult, shared: dict[object, Mapping[str, object]] | None = None
) -> EvalResult:
    """A quiet pass's grade as the tree needs it: without the judges' and criteria's
    grades and words, which only the reports of a failure show (results.jsonl has them).
    A grade flagged anywhere beneath keeps them: the gate counts the flags. With *shared*,
    alike metas (the same pillar, no flag) are held once: nothing changes a leaf's meta."""
    if injection_suspected(result):
        return result
    meta: Mapping[str, object] = {k: v for k, v in result.meta.items() if k not in _CALL_DETAILS}
    if shared is not None:
        key = _plain_key(meta)
        if key is not None:
            meta = shared.setdefault(key, meta)
    return replace(
        result,
        reasoning="",
        criteria=(),
        meta=meta,
        children=tuple(c for c in result.children if c.kind not in GRADE_PART_KINDS),
    )


def _plain_key(mapping: Mapping[str, object]) -> tuple[object, ...] | None:
    """A key for *mapping* when its values are plain (text, numbers, None, empty lists),
    with their types (True and 1 are equal keys, and must stay apart); else None."""
    key: list[object] = []
    for name, value in mapping.items():
        if isinstance(value, list):
            if value:
                return None
            value = ()
        elif value is not None and type(value) not in (str, int, float, bool):
            return None
        key.append((name, type(value), value))
    return tuple(key)


def _result_facts(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"verdict": node.get("verdict")}
    meta = node.get("meta")
    if isinstance(meta, dict):
        kept = {k: meta[k] for k in _FACT_META if k in meta}
        if kept:
            out["meta"] = kept
    children = node.get("children")
    if isinstance(children, list):
        kids = [_result_facts(c) for c in children if isinstance(c, dict)]
        kids = [k for k in kids if "meta" in k or "children" in k]
        if kids:
            out["children"] = kids
    return out


def _merge_thresholds(base: Any, spec: Any) -> Any:
    from ._calibration import Thresholds

    return Thresholds(
        kappa=base.kappa if spec.kappa is None else float(spec.kappa),
        accuracy=base.accuracy if spec.accuracy is None else float(spec.accuracy),
        max_evaluation_failures=base.max_evaluation_failures,
    )


#: How a note names what a subject did not take.
_WITHHELD_SHOWN = {
    "system": "system (the system prompt)",
    "messages": "messages (the earlier turns)",
    "tools": "tools (the tools offered)",
}


def _note_withheld(gate: GateOutcome, bucket: Collected) -> None:
    """Say when scenarios gave the subject context its signature does not take: their
    answers were made without it, so they do not measure all their scenarios ask."""
    counts: dict[str, int] = {}
    items = 0
    for record in bucket.records.values():
        withheld = ((record.get("result") or {}).get("meta") or {}).get("context_withheld")
        if isinstance(withheld, list) and withheld:
            items += 1
            for name in withheld:
                counts[str(name)] = counts.get(str(name), 0) + 1
    if not items:
        return
    shown = ", ".join(f"{_WITHHELD_SHOWN.get(n, n)} in {c}" for n, c in counts.items())
    gate.notes.append(
        f"{items} answer(s) were made without context their scenario gives, which the "
        f"subject does not take: {shown}; declare parameters of those names (or **kwargs) to "
        "receive it, or those scenarios measure less than they ask"
    )


def _note_replay(gate: GateOutcome, bucket: Collected, replay: ReplayLog) -> None:
    """Say on the gate how much of the preset the replay covered (skips are not evidence)."""
    records = list(bucket.records.values())
    missing = sum(1 for r in records if (r.get("result") or {}).get("meta", {}).get("not_replayed"))
    graded = len(records) - missing
    note = f"replay {replay.shown}: {graded} of {len(records)} items graded from recorded answers"
    if missing:
        note += (
            f"; {missing} not replayed (no recorded answer: skipped, not graded), so the gate "
            "judged the replayed scenarios only"
        )
    gate.notes.append(note)


def _read_back(bucket: Collected) -> dict[str, dict[str, Any]]:
    """The records set aside, whole, from the run's results.jsonl, by their line there
    (not their node id, which redaction may have changed in the file).

    What results.jsonl leaves out the reports do not read (a payload's
    ``family_root``, ``mcp_servers``; the judge's request, which the lean record
    drops too).
    """
    from .evidence._chain import PREV_KEY, RESULTS_NAME

    wanted = {line: nodeid for nodeid, line in bucket.set_aside.items()}
    found: dict[str, dict[str, Any]] = {}
    if bucket.recorder is None:  # never so: a record set aside was recorded first
        return found
    path = bucket.recorder.run_dir / RESULTS_NAME
    with open(path, encoding="utf-8") as lines:
        for index, line in enumerate(lines):
            if index in wanted:
                record = json.loads(line)
                record.pop(PREV_KEY, None)
                found[wanted[index]] = lean_record(record)
    missing = len(wanted) - len(found)
    if missing:
        raise ValueError(f"{path}: {missing} graded record(s) missing: the file was cut short")
    return found


class Aggregator:
    """Results of one run as they arrive; trees, gates and run directories at the end."""

    def __init__(self, run: AgentevalState) -> None:
        self.run = run
        self.collected: dict[tuple[str, str, str], Collected] = {}
        self.outcomes: list[FamilyOutcome] = []
        self.calibration: dict[str, CalibrationBucket] = {}
        self.calibration_outcomes: list[CalibrationOutcome] = []
        self.other_failures = 0
        self.collection_errors = 0
        # items collected here (serial) or announced by xdist workers (controller)
        self.expected: dict[str, ItemRef] = {}
        self.expected_other: set[str] = set()
        self.expected_ids: set[str] = set()
        self.reported: set[str] = set()
        self.started = False  # an item's protocol began (its calls may have been made)
        self._id_index: dict[str, dict[str, ItemRef]] | None = None
        self._tails: set[str] | None = None  # see ours()
        self._ours_by_file: dict[str, bool] = {}
        #: node id -> (report, facts): a quiet pass's report, slimmed at its teardown
        self._unslimmed: dict[str, tuple[pytest.TestReport, dict[str, Any]]] = {}
        self._facts_pending: dict[str, dict[str, Any]] = {}  # set aside, report not yet logged
        self._shared_facts: dict[object, dict[str, Any]] = {}  # see record_facts
        self._shared_metas: dict[object, Mapping[str, object]] = {}  # see quiet_leaf
        #: node id -> what an xdist worker's run made ahead for it held (it never ran)
        self.made_ahead: dict[str, dict[str, Any]] = {}
        #: what the records taken so far cost (see AgentevalState.unrecorded_calls)
        self.recorded_usd = 0.0
        #: node id -> (its reports so far, is it a benchmark item), to its teardown
        self._earlier: dict[str, tuple[list[pytest.TestReport], bool]] = {}

    def expect_items(self, items: list[Any]) -> None:
        """The items this process collected (serial run, or a worker)."""
        for item in items:
            if isinstance(item, ScenarioItem):
                self.expected[item.nodeid] = ref_of(item)
            else:
                self.expected_other.add(item.nodeid)

    def expect_ids(self, ids: list[str]) -> None:
        """The node ids an xdist worker collected (the controller collects nothing itself)."""
        self.expected_ids.update(ids)
        # the golden files those items come from, for the manifest the controller writes
        root = Path(self.run.config.rootpath)
        for rel in sorted({i.split("::", 1)[0] for i in ids if ".jsonl::" in i}):
            self._learn_golden_file(root / rel)

    def _learn_golden_file(self, path: Path) -> None:
        from ._golden import load_golden

        if self.run.knows_golden_file(path):
            return
        try:
            family = self.run.family_for_golden(path, load_golden(path).entries)
        except (SpecError, ValueError, OSError):
            return  # the worker that collected it reported the problem
        self.run.note_golden_file(family, path)

    def has_work(self, usage_error: bool = False) -> bool:
        """Is there a run to account for? Not when collection failed and nothing ran:
        the collection errors (file and line) are the whole story then. Nor after a usage
        error before any item started or any evidence was begun (a subject that cannot
        be imported, a missing key): nothing was called, and the error says what to fix."""
        if self.run.config.option.collectonly or (self.collection_errors and not self.reported):
            return False
        if (
            usage_error
            and not self.started
            and not self.reported
            and all(b.recorder is None for b in self.collected.values())
            and all(b.recorder is None for b in self.calibration.values())
        ):
            return False
        return bool(self.collected or self.calibration or self.expected or self.expected_ids)

    def _compare_conditions(self, trees: dict[Any, Any]) -> dict[tuple[str, str], dict[str, Any]]:
        """Family × preset -> the comparison of its conditions (two or more), the first
        declared condition the reference."""
        groups: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        for (root, preset, condition), tree in trees.items():
            if condition:
                groups.setdefault((root, preset), []).append((condition, tree))
        if not groups:  # a run without conditions: the module is not imported
            return {}
        from ._conditions import compare_conditions, scores_of

        order = [c.name for c in self.run.conditions]
        out = {}
        for key, members in groups.items():
            if len(members) < 2 or all(tree is None or tree.score is None for _, tree in members):
                continue  # nothing graded (a run stopped before any item): nothing to compare
            members.sort(key=lambda m: order.index(m[0]) if m[0] in order else len(order))
            out[key] = compare_conditions([scores_of(name, tree) for name, tree in members])
        return out

    def record(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "agenteval", None)
        if not isinstance(payload, dict):
            if report.failed and NO_SUBJECT in (report.longreprtext or ""):
                self.run.stop_reason = "no subject"  # a usage error: no evidence to keep
                return
            lost = report.failed and (
                getattr(report, "agenteval_crashed", False)  # see pytest_handlecrashitem
                or report.when not in ("setup", "call", "teardown")
            )
            ref = self._ref_for(report.nodeid) if report.failed else None
            if ref is not None and report.nodeid not in self.reported:
                # an item of ours that failed without a grade: xdist's report of a
                # crashed worker (when "???"), or a setup failure on an old worker
                why = (
                    "the worker running this item crashed (killed or segfaulted) before it "
                    "reported a grade"
                    + (
                        ", with no other item's calls in flight: the crash is this item's"
                        if getattr(report, "agenteval_crashed_alone", False)
                        else ""
                    )
                    if lost
                    else f"errored before a grade: {last_line(report.longreprtext)}"
                )
                self._ingest(error_record(self.run, ref, why, self.run.subject_name()))
            elif report.failed and report.when in ("setup", "call") and not lost:
                self.other_failures += 1  # (a crashed calibration item is the calibration's)
            elif report.skipped and report.nodeid not in self.reported:
                self._record_skip(report)
            return
        if payload.get(SET_ASIDE_KEY) is True:
            return  # a report recorded already, logged again once slimmed: counted once
        lean = self._ingest(payload)
        # pytest keeps every report to the end of the session: keep the lean copy there
        report.agenteval = lean  # type: ignore[attr-defined]

    def _record_skip(self, report: pytest.TestReport) -> None:
        """An item of ours skipped before it was asked (a fixture's or a marker's
        ``pytest.skip``): recorded as skipped with pytest's reason, not lost."""
        ref = self._ref_for(report.nodeid)
        if ref is None:
            return
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr or "")
        reason = reason.removeprefix("Skipped: ") or "skipped"
        payload = error_record(self.run, ref, reason, self.run.subject_name(), skipped=True)
        _keep_made_ahead(payload, getattr(report, "agenteval_made_ahead", None))
        report.agenteval = self._ingest(payload)  # type: ignore[attr-defined]

    def _ingest(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Take one item's record: the tree's leaves, the evidence chain."""
        self.run.learn_origin(payload.pop("subject_origin", None))
        self.recorded_usd += payload_usd(payload, self.run.rates) or 0.0
        # for the manifest (xdist: from a worker; read, not popped: a worker's own pass
        # over its report must leave the key for the controller)
        servers = payload.get("mcp_servers")
        if servers and payload.get("condition"):
            self.run.mcp_reported.setdefault(str(payload["condition"]), servers)
        if payload.get("nodeid"):
            self.reported.add(payload["nodeid"])
        if payload.get("kind") == "calibration":
            self._record_calibration(payload)
            return payload
        key = (payload["family_root"], payload["preset"], payload.get("condition") or "")
        bucket = self.collected.setdefault(
            key,
            Collected(
                payload["family_root"],
                payload["preset"],
                payload["single_file"],
                payload["subject"],
                condition=payload.get("condition"),
            ),
        )
        if bucket.recorder is None:
            bucket.recorder = RunRecorder(self.run, bucket, self._plan_for(bucket))
        # the evidence keeps everything; memory keeps the lean, JSON-safe, redacted copy
        line = bucket.recorder.writer.records  # its line of results.jsonl, counted from 0
        lean = lean_record(bucket.recorder.add(payload))
        result = EvalResult.from_dict(lean["result"])
        leaf = (payload["scenario_id"], int(payload.get("sample") or 0))
        bucket.leaves[leaf] = result
        nodeid = payload["nodeid"]
        if nodeid in bucket.records:  # reported again (a rerun plugin): the last one counts
            self._stop_streaming(bucket)
            bucket.set_aside.pop(nodeid, None)
        bucket.records[nodeid] = lean
        if bucket.streaming:
            try:
                shown = self._stream_of(bucket).add(lean)
            except Exception:  # a spool file that cannot be written (a full disk):
                # the run goes on, and its reports are built at the end from the records kept
                self._stop_streaming(bucket)
            except BaseException:  # Ctrl-C halfway through: no report may hold half a record
                self._stop_streaming(bucket)
                raise
            else:
                if not shown:  # counted by the reports, shown by none: its facts will do
                    facts = bucket.records[nodeid] = record_facts(lean, self._shared_facts)
                    bucket.set_aside[nodeid] = line
                    self._facts_pending[nodeid] = facts
                    bucket.leaves[leaf] = quiet_leaf(result, self._shared_metas)
        return lean

    def slim(self, report: pytest.TestReport) -> None:
        """After every hook read *report*: once its item's teardown is reported (pytest-html
        reads an item's reports then), a quiet pass's report keeps only the facts, as
        pytest holds every report to the end of the session."""
        self._share_copies(report)
        if report.when == "teardown":
            held = self._unslimmed.pop(report.nodeid, None)
            if held is not None:
                held[0].agenteval = held[1]  # type: ignore[attr-defined]
            return
        facts = self._facts_pending.pop(report.nodeid, None)  # the raw node id, as taken
        if facts is not None:
            self._unslimmed[report.nodeid] = (report, facts)

    def _share_copies(self, report: pytest.TestReport) -> None:
        """pytest gives each of an item's three reports its own copy of the item's keywords
        (about 270 bytes for a scenario), of its user properties and of the captured output,
        all kept to the end: a benchmark item's reports (its call report carries a record)
        share an earlier report's where equal, once every hook has read them."""
        nodeid = report.nodeid
        if report.when == "setup":
            self._earlier[nodeid] = ([report], False)
            return
        held = self._earlier.get(nodeid)
        if held is None:
            return
        earlier, ours = held
        if report.when == "call" and isinstance(getattr(report, "agenteval", None), dict):
            ours = True
        if ours:
            for name in _SHARED_COPIES:
                mine = getattr(report, name)
                for other in earlier:
                    theirs = getattr(other, name)
                    if type(theirs) is type(mine) and theirs == mine:
                        setattr(report, name, theirs)
                        break
        if report.when == "teardown":
            del self._earlier[nodeid]
        else:
            self._earlier[nodeid] = ([*earlier, report], ours)

    def _stream_of(self, bucket: Collected) -> ReportStream:
        if bucket.stream is None:
            spool = bucket.recorder.run_dir if bucket.recorder is not None else None
            bucket.stream = self._new_stream(bucket, spool)
        return bucket.stream

    def _rebuilt_stream(self, bucket: Collected) -> ReportStream:
        """The reports from the records kept (the last report of a node id winning), in
        memory (what failed to spool may fail again): for a bucket that stopped streaming
        (a node id reported twice, a spool that could not be written)."""
        stream = bucket.stream = self._new_stream(bucket, None)
        set_aside = _read_back(bucket) if bucket.set_aside else {}
        for nodeid, lean in bucket.records.items():
            stream.add(set_aside.get(nodeid, lean))
        return stream

    def _new_stream(self, bucket: Collected, spool_dir: Path | None) -> ReportStream:
        from ._prcheck import repo_root
        from .reports._stream import ReportStream

        stream = ReportStream(
            self._plan_for(bucket),
            bucket.subject,
            repo_root(Path(self.run.config.rootpath)),
            self.run.redactor.text,
            spool_dir=spool_dir,
        )
        self.run.config.add_cleanup(stream.close)
        return stream

    @staticmethod
    def _stop_streaming(bucket: Collected) -> None:
        bucket.streaming = False
        if bucket.stream is not None:
            bucket.stream.close()
            bucket.stream = None

    def _account_for_missing(self, interrupted: bool) -> None:
        """Every collected item gets an outcome: those without one become errors."""
        if self.run.stop_reason:
            why = f"not evaluated: the run stopped ({self.run.stop_reason})"
        elif interrupted:
            why = "not evaluated: the run was interrupted or stopped (-x, Ctrl-C) before it ran"
        else:
            why = "not evaluated: no result for this item reached pytest (lost item)"
        wanted = (set(self.expected) | self.expected_ids) - self.expected_other - self.reported
        for nodeid in sorted(wanted):
            ref = self._ref_for(nodeid)
            if ref is not None:
                record = error_record(self.run, ref, why, self.run.subject_name())
                run = self.run.scheduler.made_ahead(nodeid)
                ahead = made_ahead_fields(run) if run is not None else self.made_ahead.get(nodeid)
                _keep_made_ahead(record, ahead)
                self._ingest(record)

    def _ref_for(self, nodeid: str) -> ItemRef | None:
        """The item behind *nodeid*: known directly (serial), else matched to a family file.

        Under xdist the controller collects nothing; it matches the node id's
        file part against the article files of the families of this run.
        """
        if nodeid in self.expected:
            return self.expected[nodeid]
        if nodeid not in self.expected_ids:
            return None
        if self._id_index is None:
            self._id_index = self._build_id_index()
        path_part, _, name = nodeid.partition("::")
        for tail, refs in self._id_index.items():
            if path_part == tail or path_part.endswith("/" + tail):
                ref = refs.get(name)
                if ref is not None:
                    return replace(ref, nodeid=nodeid)
        return None

    def ours(self, nodeid: str) -> bool:
        """Is *nodeid* one of this plugin's items: a scenario of an article file of the
        run's families, or an entry of a golden file (the only ``.jsonl`` files collected)?
        Another plugin's test of a ``.yaml`` file is not. Serial, the items say; on an xdist
        controller, the file part of a node id a worker announced is matched (once per file)
        to the families' article files. On pytest's thread: it may load a family."""
        if self.expected or self.expected_other:  # this process collected them
            return nodeid in self.expected or nodeid in self.expected_other
        if nodeid in self.reported:  # its record came in
            return True
        path_part = nodeid.partition("::")[0]
        known = self._ours_by_file.get(path_part)
        if known is None:
            if self._tails is None:
                self._tails = {tail for tail, *_ in self._article_files()}
            known = path_part.endswith(".jsonl") or any(
                path_part == t or path_part.endswith("/" + t) for t in self._tails
            )
            self._ours_by_file[path_part] = known
        return known

    def _build_id_index(self) -> dict[str, dict[str, ItemRef]]:
        """``family-folder/article.yaml`` -> item name -> ItemRef, for the run's families."""
        from ._collect import _suffix

        index: dict[str, dict[str, ItemRef]] = {}
        for tail, family, plan, article in self._article_files():
            root = str(article.path) if family.single_file else str(family.root)
            refs = index.setdefault(tail, {})
            for scenario in article.scenarios:
                for condition in self.run.conditions or [None]:
                    for sample in range(plan.samples):
                        name = scenario.id + _suffix(condition, sample, plan.samples)
                        refs[name] = ItemRef(
                            nodeid="",
                            family_root=root,
                            single_file=family.single_file,
                            preset=plan.preset,
                            scenario_id=scenario.id,
                            sample=sample,
                            condition=condition.name if condition else None,
                        )
        return index

    def _article_files(self) -> Iterator[tuple[str, Family, Plan, Article]]:
        """The article files of the run's families (those the command line names, and any
        loaded already), each with the tail of its items' node ids
        (``family-folder/article.yaml``; a single article file's own name)."""
        base = Path(self.run.config.invocation_params.dir)
        for arg in [*self.run.config.args, *self.run.bench_roots]:
            path = (base / str(arg).split("::", 1)[0]).resolve()
            with contextlib.suppress(SpecError, ValueError, OSError):
                if is_family_dir(path) or is_agenteval_dir(path):
                    self.run.family(path)
                elif path.suffix in (".yaml", ".yml") and is_family_dir(path.parent):
                    self.run.family(path.parent)
                elif path.suffix in (".yaml", ".yml") and path.name != "benchmark.yaml":
                    self.run.single_family(path)
        for family in self.run.loaded_families():
            try:
                plan = self.run.plan(family)
            except pytest.UsageError:
                continue
            for article in family.articles:
                if family.single_file:
                    tail = article.path.name
                else:
                    tail = f"{family.root.name}/{article.path.relative_to(family.root).as_posix()}"
                yield tail, family, plan, article

    def _plan_for(self, bucket: Collected) -> Plan:
        root = Path(bucket.family_root)
        family = self.run.single_family(root) if bucket.single_file else self.run.family(root)
        return self.run.plan(family)

    def _record_calibration(self, payload: dict[str, Any]) -> None:
        bucket = self.calibration_bucket(payload["family_root"], payload["subject"])
        (bucket.skipped if payload.get("skip_reason") else bucket.rows).append(payload)
        if bucket.recorder is not None:
            bucket.recorder.add(payload)

    def calibration_bucket(self, family_root: str, subject: str) -> CalibrationBucket:
        """One family's calibration run; on the controller its run directory exists from now
        on (batch judging creates it before any item runs, to keep the batch's state)."""
        bucket = self.calibration.get(family_root)
        if bucket is None:
            bucket = self.calibration[family_root] = CalibrationBucket(
                family_root, self.run.preset or "standard", False, subject
            )
        if bucket.recorder is None:
            family = self.run.family(Path(family_root))
            files = sorted({r for r in self.run.golden_files(family)})
            bucket.recorder = RunRecorder(
                self.run, bucket, self.run.plan(family), extra_files=files
            )
        return bucket

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Build trees, write run directories, decide the gate (controller only)."""
        from .evidence._run_dir import summary_dict

        interrupted = bool(session.shouldstop or session.shouldfail) or exitstatus in (
            pytest.ExitCode.INTERRUPTED,
            pytest.ExitCode.USAGE_ERROR,
            pytest.ExitCode.INTERNAL_ERROR,
        )
        self._account_for_missing(interrupted)
        trees = {
            key: build_tree(self._plan_for(bucket), _take_runs(bucket), take=True)
            for key, bucket in self.collected.items()
        }
        comparisons = self._compare_conditions(trees)
        unrecorded = self.run.unrecorded_calls(self.recorded_usd)
        for key, bucket in sorted(self.collected.items(), key=lambda kv: kv[0]):
            plan = self._plan_for(bucket)
            tree = trees[key]
            terms = self.run.pr.family_terms(plan, tree, bucket)
            gate = decide_gate(
                plan,
                tree,
                interrupted=interrupted,
                suites=terms.suites,
                regression=terms.comparison.regression if terms.comparison else None,
                baseline_label=terms.baseline_label,
                collection_errors=self.collection_errors,
            )
            if self.run.replay is not None:
                _note_replay(gate, bucket, self.run.replay)
            _note_withheld(gate, bucket)
            outcome = FamilyOutcome(
                plan, tree, gate, bucket, pr=terms.fields, unrecorded=unrecorded
            )
            outcome.conditions_comparison = comparisons.get(key[:2]) if key[2] else None
            self.outcomes.append(outcome)
            recorder = bucket.recorder
            if recorder is None:
                continue
            outcome.run_dir, outcome.run_id = recorder.run_dir, recorder.run_id
            outcome.started_at = recorder.started_at
            outcome.head = recorder.writer.head
            ended = datetime.now(timezone.utc)
            # its nodes are made as they are written (and again, without the quiet passes,
            # for the reports): not one object per scenario held whole, nor its copy
            summary = summary_dict(outcome, self.run.judge_specs or ["rules"], ended, streamed=True)
            recorder.write_json("summary.json", summary)
            summary = self._write_reports(recorder, plan, bucket, summary, interrupted)
            # the same number the gate names: items with no grade (errors, lost, not run)
            not_evaluated = tree.counts()["error"] if tree is not None else 0
            outcome.head = recorder.finalize(interrupted=interrupted, not_evaluated=not_evaluated)
            self.run.pr.after_run(outcome, summary, interrupted)
        self.run.pr.write_job_summary()
        for cal in self.calibration.values():
            self.calibration_outcomes.append(self._finish_calibration(cal, interrupted))

    def _write_reports(
        self,
        recorder: RunRecorder,
        plan: Plan,
        bucket: Collected,
        summary: dict[str, Any],
        interrupted: bool,
    ) -> dict[str, Any]:
        """The human reports, JUnit XML and SARIF; returns *summary* without the quiet
        passes no report shows (:func:`~._human.summary_for_reports`)."""
        from . import __version__
        from ._model import RunHeader, RunSummary, SourceLocation
        from ._prcheck import bundled_location
        from .reports._human import (
            clean_for_report,
            render_html,
            render_markdown,
            shown_record,
            summary_for_reports,
        )

        stream = self._stream_of(bucket) if bucket.streaming else self._rebuilt_stream(bucket)
        # the tree without the quiet passes no report shows: not a model of every scenario
        summary = summary_for_reports(summary, stream.shown)
        run_summary = RunSummary.from_json(summary)
        # where a bundled family's findings show in code scanning (its files are not in
        # the repository): the pytest configuration that runs it
        bundled = bundled_location(self.run.config, plan.family.name)
        run = RunHeader(
            family=plan.family.name,
            preset=plan.preset,
            run_id=run_summary.run_id,
            started_at=run_summary.started_at,
            ended_at=run_summary.ended_at,
            gate_passed=run_summary.gate.passed,
            score=run_summary.score,
            verdict=run_summary.verdict,
            tool_version=__version__,
            subject=bucket.subject,
            completed=not interrupted,
            interrupted=interrupted,
            bundled_location=None if bundled is None else SourceLocation.from_json(bundled),
        )
        try:
            recorder.write_with("junit.xml", lambda out: stream.write_junit(out, run))
        except OSError:  # its spool unreadable at the end: from the records kept, in memory
            self._stop_streaming(bucket)
            stream = self._rebuilt_stream(bucket)
            recorder.write_with("junit.xml", lambda out: stream.write_junit(out, run))
        recorder.write_bytes("results.sarif", stream.sarif_bytes(run))
        # the human reports show less of each record: each full one goes as its shown copy
        # comes, cleaned and redacted once for both reports, string by string before any
        # escaping (the family's own text joined the records since RunRecorder.add)
        redact = self.run.redactor.text
        shown = stream.shown
        for i, record in enumerate(shown):
            shown[i] = clean_for_report(shown_record(record), redact)
        clean_summary = clean_for_report(run_summary, redact)
        usage = stream.usage.view()
        self._write_human_reports(
            recorder,
            render_markdown(clean_summary, shown, assume_clean=True, usage=usage),
            render_html(clean_summary, shown, assume_clean=True, usage=usage),
        )
        stream.close()
        return summary

    def _write_human_reports(self, recorder: RunRecorder, md: str, html: str) -> None:
        """report.md and report.html, redacted once more as whole texts."""
        recorder.write_bytes(
            "report.md", self.run.redactor.text(md).encode("utf-8", "backslashreplace")
        )
        recorder.write_bytes(
            "report.html", self.run.redactor.text(html).encode("utf-8", "backslashreplace")
        )

    def _finish_calibration(
        self, bucket: CalibrationBucket, interrupted: bool
    ) -> CalibrationOutcome:
        from . import __version__
        from ._calibration import (
            calibration_cost,
            calibration_report,
            calibration_summary,
            default_thresholds,
            judge_lineage,
        )
        from ._golden import triage_summary
        from .evidence._run_dir import judge_prompt_lineage, rfc3339

        family = self.run.family(Path(bucket.family_root))
        preset_name = self.run.preset or "standard"
        default = default_thresholds(preset_name)
        preset = family.spec.presets.get(preset_name.split("+")[0])
        if preset is not None and preset.calibration is not None:
            default = _merge_thresholds(default, preset.calibration)
        per_pillar = {
            p.key: _merge_thresholds(default, p.calibration)
            for p in family.spec.pillars
            if p.calibration is not None
        }
        report = calibration_report(
            bucket.rows,
            split=self.run.calibration_split,
            thresholds=per_pillar,
            default=default,
            min_n=self.run.calibration_min_n,
            gate_on=self.run.calibration_gate_on,
        )
        report["family"] = family.name
        report["judge"] = self.run.judge_specs or ["rules"]
        report["preset_thresholds"] = preset_name
        triaged = triage_summary([*bucket.rows, *bucket.skipped])  # skips, prompt mismatches
        report["skipped"] = triaged["skipped"]
        report["prompt_mismatch"] = triaged["prompt_mismatch"]
        skipped = sum(1 for r in bucket.rows if r["verdict"] == "skipped")
        if skipped:
            report["not_gradable"] = skipped
        if interrupted:
            report["gate"]["passed"] = False
            report["gate"]["status"] = "fail"
            report["gate"]["reasons"].append("the run was interrupted")
        outcome = CalibrationOutcome(family.name, report, bucket)
        recorder = bucket.recorder
        if recorder is not None:
            plan = self.run.plan(family)
            report["lineage"] = {
                **judge_lineage(bucket.rows, self.run.judge_descriptions()),
                "judge_prompt": judge_prompt_lineage(plan),
                "golden_files": self._golden_lineage(family, bucket.rows),
            }
            recorder.write_json("calibration.json", report)
            summary = calibration_summary(
                report,
                [*bucket.rows, *bucket.skipped],  # every item: skipped entries count as skipped
                run_id=recorder.run_id,
                family=family.name,
                family_version=family.spec.version,
                preset=f"calibration ({preset_name} thresholds)",
                subject=bucket.subject,
                judges=report["judge"],
                bands={"pass": plan.root_bands.pass_, "warn": plan.root_bands.warn},
                cost=calibration_cost(bucket.rows, self.run.rates),
                chain_head=recorder.writer.head,
                started_at=recorder.started_at,
                ended_at=rfc3339(datetime.now(timezone.utc)),
                plugin_version=__version__,
            )
            recorder.write_json("summary.json", summary)
            self._write_calibration_reports(recorder, summary, report)
            outcome.run_dir, outcome.head = recorder.run_dir, recorder.writer.head
            outcome.head = recorder.finalize(interrupted=interrupted, not_evaluated=0)
        return outcome

    def _golden_lineage(self, family: Family, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each golden file graded: where it is (rootdir-relative when inside), SHA-256, entries."""
        import hashlib

        root = Path(self.run.config.rootpath).resolve()
        entries: dict[str, set[str]] = {}
        for r in rows:
            entries.setdefault(str(r.get("file")), set()).add(str(r["id"]))
        out = []
        for path in sorted(self.run.golden_files(family)):
            resolved = path.resolve()
            shown = (
                resolved.relative_to(root).as_posix()
                if resolved.is_relative_to(root)
                else f"golden/{family.name}/{path.name}"
            )
            out.append(
                {
                    "path": shown,
                    "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
                    "entries": len(entries.get(path.name, ())),
                }
            )
        return out

    def _write_calibration_reports(
        self,
        recorder: RunRecorder,
        summary: CalibrationSummaryDoc,
        report: CalibrationReportDoc,
    ) -> None:
        """report.md and report.html of a calibration run: its own report, not a benchmark's."""
        from ._model import CalibrationReport, RunSummary
        from .reports._human import render_calibration_html, render_calibration_markdown

        run_summary = RunSummary.from_json(summary)
        calibration = CalibrationReport.from_json(report)
        redact = self.run.redactor.text
        self._write_human_reports(
            recorder,
            render_calibration_markdown(run_summary, calibration, redact=redact),
            render_calibration_html(run_summary, calibration, redact=redact),
        )

    def exitstatus(self, current: int | pytest.ExitCode) -> int | pytest.ExitCode:
        """The gate decides for agenteval items; other tests keep pytest's rule.

        Scenario FAILs are pytest failures, so pytest would exit 1 whenever one
        scenario failed. For a benchmark the gate is the contract: exit 0 when
        every gate passed and nothing but scenario failures went red; exit 1
        when any gate failed, even if no single item did.
        """
        if not (self.outcomes or self.calibration_outcomes) or current not in (
            pytest.ExitCode.OK,
            pytest.ExitCode.TESTS_FAILED,
        ):
            return current
        if any(not o.gate.passed for o in self.outcomes) or any(
            not c.report["gate"]["passed"] for c in self.calibration_outcomes
        ):
            return pytest.ExitCode.TESTS_FAILED
        failed = self.other_failures or self.collection_errors
        return pytest.ExitCode.TESTS_FAILED if failed else pytest.ExitCode.OK

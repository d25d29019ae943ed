"""The per-process role object: state for one pytest process.

In a serial run one object does everything. Under xdist, workers collect and
grade (results travel on test reports as plain JSON types) and the
controller, which sees every report in ``pytest_runtest_logreport``, builds
the composite tree, writes the run directory and decides the gate. The tree
is built from the family files and the reports, never from worker state, so
``-n 2`` and a serial run give identical numbers.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import _settings as settings
from ._collect import NO_SUBJECT, ScenarioItem
from ._compat import is_agenteval_dir
from ._cost import DEFAULT_RATES, Budget, parse_rates
from ._evals import EvalResult
from ._family import (
    Family,
    Plan,
    PresetError,
    build_tree,
    is_family_dir,
    load_family,
    load_single_article,
    resolve_plan,
)
from ._gate import GateOutcome, decide_gate
from ._replay import ReplayLog
from ._scheduler import Scheduler, upcoming_items
from ._text import terminal_safe
from ._tracebacks import describe_exception
from ._vocab import SEVERITIES, ItemError, SpecError
from .evidence._redact import Redactor
from .evidence._run_dir import RunRecorder
from .judges._base import ConfigError, Judge
from .subjects._base import describe

PAYLOAD_VERSION = 1

if TYPE_CHECKING:
    from ._calibration import CalibrationReportDoc, CalibrationSummaryDoc


def bundled_roots() -> list[Path]:
    """Where the bundled families live: inside the wheel, or beside the package in a checkout."""
    here = Path(__file__).resolve().parent
    return [p for p in (here / "_data" / "benchmarks", here.parent / "benchmarks") if p.is_dir()]


def bundled_golden_roots() -> list[Path]:
    here = Path(__file__).resolve().parent
    return [p for p in (here / "_data" / "golden", here.parent / "golden") if p.is_dir()]


def bundled_families() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in bundled_roots():
        for child in sorted(root.iterdir()):
            if is_family_dir(child):
                found.setdefault(child.name, child)
    return found


def _search_rootdir(rootdir: Path, name: str) -> Path | None:
    """The family folder called *name* under the rootdir (4 levels deep at most).

    Two folders of that name are ambiguous: a usage error naming both, never
    a silent pick of the first one found.
    """
    skip = {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".agenteval"}
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(rootdir):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        if "benchmark.yaml" in filenames and Path(dirpath).name == name:
            found.append(Path(dirpath))
        if len(Path(dirpath).relative_to(rootdir).parts) >= 4:
            dirnames[:] = []
    if len(found) > 1:
        shown = ", ".join(p.relative_to(rootdir).as_posix() for p in found)
        raise pytest.UsageError(
            f"family {name!r} is ambiguous: {len(found)} folders of that name under the rootdir "
            f"({shown}); name the one you mean by its path"
        )
    return found[0] if found else None


def resolve_bench(config: pytest.Config, names: list[str]) -> list[Path]:
    """Turn ``--bench`` names into family folders (a path, a bundled name, or a folder in the rootdir)."""
    roots = []
    bundled = bundled_families()
    for name in names:
        candidate = Path(name)
        if not candidate.is_absolute():
            candidate = Path(config.invocation_params.dir) / candidate
        if is_family_dir(candidate) or is_agenteval_dir(candidate):
            roots.append(candidate.resolve())
        elif name in bundled:
            roots.append(bundled[name].resolve())
        elif (found := _search_rootdir(config.rootpath, name)) is not None:
            roots.append(found.resolve())
        else:
            known = ", ".join(sorted(bundled)) or "none"
            raise pytest.UsageError(
                f"--bench: no family {name!r} (bundled: {known}; or give the path of a folder "
                "with a benchmark.yaml, or of a folder of AgentEval article files)"
            )
    return roots


@dataclass(frozen=True)
class ItemRef:
    """What the controller must know of a collected item to account for it."""

    nodeid: str
    family_root: str
    single_file: bool
    preset: str
    scenario_id: str
    sample: int
    condition: str | None


def _ref_of(item: ScenarioItem) -> ItemRef:
    family = item.family
    return ItemRef(
        nodeid=item.nodeid,
        family_root=str(item.article.path if family.single_file else family.root),
        single_file=family.single_file,
        preset=item.plan.preset,
        scenario_id=item.scenario.id,
        sample=item.sample,
        condition=item.condition.name if item.condition else None,
    )


@dataclass
class Collected:
    """Results of one family × preset, as they arrive on the controller."""

    family_root: str
    preset: str
    single_file: bool
    subject: str
    leaves: dict[str, dict[int, EvalResult]] = field(default_factory=dict)  # id -> sample -> result
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    recorder: RunRecorder | None = None
    condition: str | None = None


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


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return lines[-1] if lines else "no message"


_MARK_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


def _selects_calibration(markexpr: str) -> bool:
    """Does ``-m EXPR`` ask for calibration items?

    True when, for some combination of the other markers, the expression
    holds for an item marked ``calibration`` and fails for the same item
    without it: ``calibration``, ``calibration and not slow``, ``critical or
    calibration`` yes; ``not calibration``, ``critical``, ``calibration or not
    calibration`` no. The expression (``and``, ``or``,
    ``not``, parentheses, names) is evaluated here, on pytest's grammar,
    without reaching into pytest's private expression module.
    """
    if "calibration" not in markexpr:
        return False
    tokens = _MARK_TOKEN.findall(markexpr)
    if "".join(tokens) != re.sub(r"\s+", "", markexpr):
        return False

    names = sorted({t.split("(", 1)[0] for t in tokens if t not in ("and", "or", "not", "(", ")")})
    others = [n for n in names if n != "calibration"][:10]  # 2**10 cases at most

    def holds(marked: bool, present: frozenset[str]) -> bool:
        words = []
        for tok in tokens:
            if tok in ("and", "or", "not", "(", ")"):
                words.append(tok)
            else:
                name = tok.split("(", 1)[0]
                on = marked if name == "calibration" else name in present
                words.append("True" if on else "False")
        try:  # the words are only and/or/not/True/False/parentheses, built above
            return bool(eval(" ".join(words), {"__builtins__": {}}, {}))
        except SyntaxError:
            return False

    # a calibration run when, for some set of other markers, the marker decides
    for mask in range(2 ** len(others)):
        present = frozenset(n for i, n in enumerate(others) if mask >> i & 1)
        if holds(True, present) and not holds(False, present):
            return True
    return False


def _settings_dict(settings: Any) -> dict[str, Any] | None:
    if settings is None:
        return None
    keep: tuple[str, ...] = ("timeout_s", "deadline_s", "max_retries", "seed", "max_tokens")
    keep += ("cache_mode", "repeat", "repeat_temperature")  # repeat: how a panel repeats it
    return {k: getattr(settings, k) for k in keep if hasattr(settings, k)}


def _merge_thresholds(base: Any, spec: Any) -> Any:
    from ._calibration import Thresholds

    return Thresholds(
        kappa=base.kappa if spec.kappa is None else float(spec.kappa),
        accuracy=base.accuracy if spec.accuracy is None else float(spec.accuracy),
        max_evaluation_failures=base.max_evaluation_failures,
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


def _replayed(replay: ReplayLog | None, items: list[Any]) -> list[Any]:
    """Of the items to start ahead, those with a recorded answer (all, without --replay)."""
    if replay is None:
        return items
    return [i for i in items if not isinstance(i, ScenarioItem) or _recorded_for(replay, i)]


def _recorded_for(replay: ReplayLog, item: ScenarioItem) -> Any:
    cond = item.condition.name if item.condition else None
    return replay.lookup(item.scenario.id, cond, item.sample)


class AgentevalState:
    """State of one pytest process for the agenteval plugin."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        self.settings = run = settings.RunSettings.from_config(config)
        self._families: dict[Path, Family] = {}
        self._plans: dict[tuple[Path, bool], Plan] = {}
        self.bench = list(run.bench)
        self.preset: str | None = run.preset
        self.bench_roots = resolve_bench(config, self.bench) if self.bench else []
        # --samples overrides every preset's samples: N (read before the presets resolve)
        self.samples = run.samples
        self.replay: ReplayLog | None = None
        self.judge_specs = list(run.judge_specs)
        self.subject_spec = run.subject_spec
        self._check_preset_early()
        self.out_dir = run.out_dir
        self._judges: list[Judge] | None = None
        self._subject: Callable[..., Any] | None = None
        self._subject_name = ""
        self.rates = {**DEFAULT_RATES, **parse_rates(config.getini("agenteval_rates") or [])}
        workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
        self.max_cost = run.max_cost
        # limits of the run, not of each process: -n 4 must not send four times as many
        concurrency, budget = run.per_worker(workers)
        self.scheduler = Scheduler(concurrency, Budget(budget), self.rates)
        self._subject_shared = False
        self._markers: set[str] = set()
        self.collected: dict[tuple[str, str, str], Collected] = {}
        self.started_at = datetime.now(timezone.utc)
        self.redactor = Redactor.from_environ()
        worker = getattr(config, "workerinput", None)
        self.testrun_uid = worker["testrunuid"] if worker else uuid.uuid4().hex
        self.outcomes: list[FamilyOutcome] = []
        self.conditions = self._conditions(config)
        self.mcp_host: Any = None  # the conditions' MCP servers, once started (_mcp.McpHost)
        # condition -> server -> name/version/tools as the server reported them (manifest)
        self.mcp_reported: dict[str, dict[str, Any]] = {}
        self.calibration_mode = _selects_calibration(str(config.getoption("markexpr", "") or ""))
        self.calibration_split = run.calibration_split
        self.calibration_repeat = run.calibration_repeat
        self.calibration_min_n = run.calibration_min_n
        self.calibration_gate_on = run.calibration_gate_on
        self._golden_roots: list[Path] | None = None
        self.calibration: dict[str, CalibrationBucket] = {}
        self.calibration_outcomes: list[CalibrationOutcome] = []
        self._golden_ids: dict[str, dict[str, str]] = {}
        self._golden_paths: dict[str, set[str]] = {}
        self.other_failures = 0
        self.subject_origin: dict[str, str] | None = (
            {"kind": "spec", "spec": self.subject_spec} if self.subject_spec else None
        )
        self.stop_reason: str | None = None
        # items collected here (serial) or announced by xdist workers (controller)
        self.expected: dict[str, ItemRef] = {}
        self.expected_other: set[str] = set()
        self.expected_ids: set[str] = set()
        self.reported: set[str] = set()
        self.collection_errors = 0
        self._id_index: dict[str, dict[str, ItemRef]] | None = None
        from ._prcheck import PullRequestCheck

        # --baseline resolved and verified now, before any subject or judge is called
        self.pr = PullRequestCheck(self)
        # --replay read and checked against the run's families now, before any judge call
        self.replay = self._replay(config)

    # ------------------------------------------------------------------ configuration

    @property
    def judge_default(self) -> bool:
        return not self.judge_specs

    def judges(self) -> list[Judge]:
        if self._judges is None:
            specs = self.judge_specs or ["rules"]
            judges = []
            for spec in specs:
                judge = self.config.hook.pytest_agenteval_make_judge(config=self.config, spec=spec)
                if judge is None:
                    raise pytest.UsageError(
                        f"--judge {spec!r}: no judge of that kind (available here: rules)"
                    )
                judges.append(judge)
            self._judges = judges
        return self._judges

    def judge_descriptions(self) -> list[dict[str, Any]]:
        """What the manifest records of each judge (never a credential)."""
        out = []
        for spec, judge in zip(self.judge_specs or ["rules"], self._judges or [], strict=False):
            out.append(
                {
                    "spec": spec,
                    "provider": spec.split(":")[0],
                    "model_requested": getattr(judge, "model", None),
                    "base_url_host": getattr(judge, "base_url_host", None),
                    "endpoint": getattr(judge, "endpoint", None),  # userinfo never kept
                    "settings": _settings_dict(getattr(judge, "settings", None)),
                    "cache_authenticated": getattr(judge, "cache_authenticated", None),
                }
            )
        if not out:
            out = [{"spec": s} for s in (self.judge_specs or ["rules"])]
        return out

    def judge_label(self) -> str:
        if self.judge_default:
            return "rules (offline default: deterministic checks only — no judge configured)"
        return ", ".join(self.judge_specs)

    # ------------------------------------------------------------------ calibration

    def named_paths(self) -> list[Path]:
        """Paths named on the command line (files or folders), resolved; empty when none was.

        pytest's own default (the invocation folder, or ``testpaths``) is not
        a named path. xdist workers re-parse the original command line, so
        they decide the same way.
        """
        if self.config.args_source != pytest.Config.ArgsSource.ARGS:
            return []
        base = Path(self.config.invocation_params.dir)
        return [(base / str(arg).split("::", 1)[0]).resolve() for arg in self.config.args]

    def golden_selected(self, path: Path) -> bool:
        """Does a calibration run grade this ``.jsonl`` file?

        A run that names paths grades those paths only (a file, or the
        ``.jsonl`` files inside a named folder), as pytest does everywhere
        else. Only when no path is named does it grade :meth:`golden_roots`.
        """
        resolved = path.resolve()
        named = self.named_paths()
        if named:
            return any(resolved == p or resolved.is_relative_to(p) for p in named)
        return any(resolved.is_relative_to(r) for r in self.golden_roots())

    def golden_roots(self) -> list[Path]:
        """Golden folders that ``-m calibration`` collects when no path is named.

        With ``--bench``: the golden folders of those families (bundled, in the
        rootdir's ``golden/<family>``, or a family's own ``golden/``) and
        nothing else. Without: the rootdir's ``golden/`` when it has one, else
        the bundled datasets.
        """
        if self._golden_roots is None:
            self._golden_roots = self._find_golden_roots()
        return self._golden_roots

    def _find_golden_roots(self) -> list[Path]:
        local = Path(self.config.rootpath) / "golden"
        found: dict[Path, None] = {}
        if self.bench_roots:
            names = {p.name for p in self.bench_roots}
            for base in (*bundled_golden_roots(), local):
                for name in sorted(names):
                    if (base / name).is_dir():
                        found.setdefault((base / name).resolve(), None)
            for root in self.bench_roots:
                if (root / "golden").is_dir():
                    found.setdefault((root / "golden").resolve(), None)
            return list(found)
        bases = [local] if local.is_dir() else bundled_golden_roots()[:1]
        for base in bases:
            for child in sorted(base.iterdir()):
                if child.is_dir():
                    found.setdefault(child.resolve(), None)
        return list(found)

    def family_for_golden(self, path: Path, entries: list[Any]) -> Family:
        by_name = bundled_families()
        name = path.parent.name if path.parent.name != "golden" else path.parent.parent.name
        if name in by_name:
            return self.family(by_name[name])
        for root in self.bench_roots:
            if root.name == name:
                return self.family(root)
        local = _search_rootdir(Path(self.config.rootpath), name)
        if local is not None:
            return self.family(local)
        # the family that has (by control id or alias) the most of the entries' articles
        articles = {e.article for e in entries}
        best, best_n = None, 0
        for root in self.bench_roots or list(by_name.values()):
            try:
                family = self.family(root)
            except SpecError:
                continue  # a broken family is reported when it is run, not here
            n = sum(family.resolve(a) is not None for a in articles)
            if n > best_n:
                best, best_n = family, n
        if best is not None:
            return best
        if len(self.bench_roots) == 1:  # the family asked for; its unknown entries are skipped
            return self.family(self.bench_roots[0])
        wanted = entries[0].article if entries else None
        advice = (
            "none of the --bench families has a control (or alias) of that name"
            if self.bench_roots
            else "put it in golden/<family>/ or pass --bench=FAMILY"
        )
        raise SpecError(
            path,
            entries[0].line if entries else None,
            f"no benchmark family found for this golden file (folder {name!r}; "
            f"article {wanted!r}); {advice}",
        )

    def claim_golden_ids(self, family: Family, entries: list[Any]) -> None:
        seen = self._golden_ids.setdefault(family.name, {})
        for entry in entries:
            where = f"{entry.path.name}:{entry.line}"
            first = seen.setdefault(entry.id, where)
            if first != where:
                raise SpecError(
                    entry.path,
                    entry.line,
                    f"duplicate id {entry.id!r} in family {family.name!r} (also at {first})",
                )

    @staticmethod
    def _conditions(config: pytest.Config) -> list[Any]:
        from ._conditions import (
            ConditionError,
            load_conditions_file,
            merge_conditions,
            parse_conditions,
        )

        specs = list(config.getoption("agenteval_condition") or []) or list(
            config.getini("agenteval_conditions") or []
        )
        # --conditions=FILE (relative to where pytest runs) or the ini's (to the rootdir)
        option = config.getoption("agenteval_conditions_file")
        value = option or config.getini("agenteval_conditions_file") or None
        base = Path(config.invocation_params.dir) if option else Path(config.rootpath)
        try:
            from_file = load_conditions_file(base / str(value)) if value else []
            return merge_conditions(from_file, parse_conditions(specs, Path(config.rootpath)))
        except SpecError as exc:
            raise pytest.UsageError(f"--conditions {exc}") from None
        except ConditionError as exc:
            raise pytest.UsageError(str(exc)) from None

    def start_mcp(self, items: list[Any]) -> None:
        """Start the MCP servers of the conditions this process's items run under.

        Once per process (under xdist each worker starts its own), on the
        scheduler's event loop, before any item runs: a server that does not
        start is a usage error before any paid call.
        """
        wanted = {i.condition.name for i in items if isinstance(i, ScenarioItem) and i.condition}
        conditions = [c for c in self.conditions if c.name in wanted and c.mcp_servers]
        if not conditions or self.mcp_host is not None:
            return
        from ._mcp import McpHost, McpStartError

        self.mcp_host = McpHost(
            conditions,
            max_steps=self.settings.mcp_max_steps,
        )
        try:
            self.scheduler.run_coro(self.mcp_host.start())
        except McpStartError as exc:
            raise pytest.UsageError(self.redactor.text(str(exc))) from None
        for cond in conditions:
            self.mcp_reported[cond.name] = self.mcp_host.reported(cond.name)

    def probe_mcp(self) -> None:
        """The xdist controller starts every server once, lists its tools and closes it,
        before any worker starts: a server that does not start is a usage error shown
        here (a worker's would end in xdist's "no active workers"), and the manifest
        learns what each server reported. The workers then start their own."""
        conditions = [c for c in self.conditions if c.mcp_servers]
        if not conditions or self.config.option.collectonly:
            return
        from ._mcp import McpHost, McpStartError

        host = McpHost(conditions)
        try:
            self.scheduler.run_coro(host.start())
        except McpStartError as exc:
            raise pytest.UsageError(self.redactor.text(str(exc))) from None
        try:
            for cond in conditions:
                self.mcp_reported[cond.name] = host.reported(cond.name)
        finally:
            with contextlib.suppress(Exception):
                self.scheduler.run_coro(host.aclose())
            for cond in conditions:
                cond.attach(None)  # the controller calls no subject

    def condition(self, name: str | None) -> Any:
        return next((c for c in self.conditions if c.name == name), None)

    def _check_preset_early(self) -> None:
        """A misspelt --preset is a usage error, reported before collection starts."""
        for root in self.bench_roots:
            try:
                family = self.family(root)
            except SpecError:
                continue  # reported as a collection error, with file and line
            self.plan(family)

    # ------------------------------------------------------------------ families

    def family(self, root: Path) -> Family:
        key = root.resolve()
        if key not in self._families:
            self._families[key] = load_family(
                key, project_root=Path(self.config.rootpath).resolve()
            )
        return self._families[key]

    def single_family(self, path: Path) -> Family:
        key = path.resolve()
        if key not in self._families:
            self._families[key] = load_single_article(key)
        return self._families[key]

    def plan(self, family: Family) -> Plan:
        key = (family.root.resolve(), family.single_file)
        if family.single_file:
            key = (family.articles[0].path, True)
        if key not in self._plans:
            try:
                self._plans[key] = resolve_plan(family, self.preset)
            except PresetError as exc:
                raise pytest.UsageError(str(exc)) from None
            if self.samples is not None:
                self._plans[key] = replace(self._plans[key], samples=self.samples)
            from ._run import preset_panel_problem

            problem = preset_panel_problem(
                self._plans[key],
                self.judge_specs,
                repeat=self.settings.judge_repeat == "sampled",
            )
            if problem:
                raise pytest.UsageError(problem)
        return self._plans[key]

    def register_markers(self, family: Family) -> None:
        names = {family.name: f"scenarios of the {family.name} benchmark"}
        for pillar in family.spec.pillars:
            names[pillar.key] = f"scenarios of pillar {pillar.key} ({family.name})"
        for sev in SEVERITIES:
            names[sev] = f"scenarios of {sev} severity"
        for name, doc in names.items():
            if name not in self._markers:
                self.config.addinivalue_line("markers", f"{name}: {doc}")
                self._markers.add(name)

    def is_selected_family(self, path: Path, session: pytest.Session) -> bool:
        resolved = path.resolve()
        return resolved in self.bench_roots or session.isinitpath(path, with_parents=True)

    # ------------------------------------------------------------------ running

    def close(self) -> None:
        """Close clients that subjects and judges hold, then the event loop."""
        closers = [getattr(obj, "aclose", None) for obj in (self._subject, *(self._judges or []))]
        for closer in closers:
            if callable(closer):
                # closing is best effort: the run's outcome is already decided
                with contextlib.suppress(Exception):
                    self.scheduler.run_coro(closer())
        if self.mcp_host is not None:  # their sessions live on the loop: closed before it
            host, self.mcp_host = self.mcp_host, None
            with contextlib.suppress(Exception):
                self.scheduler.run_coro(host.aclose())
        self.scheduler.close()

    def spec_subject(self) -> Callable[..., Any]:
        """The subject built from ``--subject`` (once per process)."""
        if self._subject is None and self.replay is not None:  # recorded answers: no call
            self._subject, self._subject_name = self.replay.subject(), self.replay.label()
            self._subject_shared = True
        if self._subject is None:
            spec = str(self.subject_spec)
            subject = self.config.hook.pytest_agenteval_make_subject(config=self.config, spec=spec)
            if subject is None:
                raise pytest.UsageError(f"--subject {spec!r}: no subject of that kind")
            self._subject, self._subject_name = subject, spec
            self._subject_shared = True
        return self._subject

    def note_subject_fixture(self, *, scope: str, where: str) -> None:
        """Called when pytest sets up the ``agenteval_subject`` fixture: where it comes from.

        A function-scoped fixture gives each item its own subject, so calls
        cannot be started ahead for later items: one call is in flight at a
        time. That is said once, in one line, with what to write instead.
        """
        self._subject_shared = scope == "session"
        self._learn_origin(
            {"kind": "fixture", "fixture": "agenteval_subject", "where": where, "scope": scope}
        )

    def _learn_origin(self, origin: dict[str, str] | None) -> None:
        """Remember where the subject comes from; say it once (under xdist: from a report)."""
        if origin is None or self.subject_origin is not None:
            return
        self.subject_origin = origin
        if origin.get("kind") != "fixture":
            return
        where, scope = origin.get("where"), origin.get("scope")
        line = f"agenteval: subject from the agenteval_subject fixture at {where} (scope {scope})"
        if scope != "session":
            line += (
                f"; a {scope}-scoped subject is called one item at a time (1 call in flight) — "
                '@pytest.fixture(scope="session") keeps '
                f"{self.scheduler.concurrency} calls in flight"
            )
        self._announce(line)

    def _announce(self, line: str) -> None:
        """One line on the terminal now (serial runs; workers' output is not shown)."""
        if self.is_worker:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capman = self.config.pluginmanager.get_plugin("capturemanager")
        # called during an item's setup, where output is captured: step outside it
        quiet = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
        fspath = getattr(reporter, "currentfspath", None)
        with quiet:
            reporter.ensure_newline()
            reporter.write_line(line, yellow="1 call in flight" in line)
            if isinstance(fspath, Path):
                # pytest writes the item's result letter next: give it back its "path " prefix
                shown = os.path.relpath(fspath, getattr(reporter, "startpath", Path.cwd()))
                reporter.write(f"{shown} ")
                reporter.currentfspath = (
                    fspath  # write_line reset it: the line is that file's again
                )

    def subject_header(self) -> str:
        if self.replay is not None:
            return (
                f"none called: --replay {self.replay.shown} ({len(self.replay.entries)} recorded "
                f"answers, sha256 {self.replay.sha256[:12]}…)"
            )
        if self.subject_spec:
            return f"--subject {self.subject_spec}"
        return "the agenteval_subject fixture (its file is named when it is set up)"

    def subject_for(self, item: ScenarioItem, fixture_value: object = None) -> Callable[..., Any]:
        if self.subject_spec:
            return self.spec_subject()
        subject = fixture_value
        if not callable(subject):
            raise ItemError(
                f"agenteval_subject fixture returned {type(subject).__name__}, not a callable"
            )
        self._subject_name = self._subject_name or describe(subject)
        return subject

    def subject_name(self) -> str:
        return self._subject_name or self.subject_spec or "agenteval_subject"

    # ------------------------------------------------------------------ replay

    def _replay(self, config: pytest.Config) -> ReplayLog | None:
        """``--replay FILE``: read, checked against the run's families, made the subject."""
        from ._replay import load_replay

        value = settings.raw(config, "agenteval_replay")
        if value is None:
            return None
        if config.getoption("agenteval_subject"):
            raise pytest.UsageError(
                "--replay grades recorded answers and calls no subject; drop --subject"
            )
        if self.calibration_mode:
            raise pytest.UsageError(
                "--replay grades benchmark scenarios; it does not apply to -m calibration"
            )
        base = Path(config.invocation_params.dir)
        path = Path(str(value)) if Path(str(value)).is_absolute() else base / str(value)
        try:
            log = load_replay(path, str(value))
            families = self._run_families()
            ids = {s.id: f.name for f in families for a in f.articles for s in a.scenarios}
            if families:  # a family that failed to load is a collection error of its own
                log.check_against(
                    ids, [c.name for c in self.conditions], [f.name for f in families]
                )
        except SpecError as exc:
            raise pytest.UsageError(f"--replay {exc}") from None
        self.subject_spec = log.label()  # items ask for no agenteval_subject fixture
        self.subject_origin = {"kind": "replay", "file": log.shown, "sha256": log.sha256}
        return log

    def _run_families(self) -> list[Family]:
        """The families this run names (``--bench``, or family paths on the command line)."""
        found: dict[Path, Family] = {}
        roots = list(self.bench_roots)
        base = Path(self.config.invocation_params.dir)
        if self.config.args_source == pytest.Config.ArgsSource.ARGS:
            roots += [(base / str(a).split("::", 1)[0]).resolve() for a in self.config.args]
        for path in roots:
            with contextlib.suppress(SpecError, ValueError, OSError):
                if is_family_dir(path) or is_agenteval_dir(path):
                    found.setdefault(path, self.family(path))
                elif path.suffix in (".yaml", ".yml") and is_family_dir(path.parent):
                    found.setdefault(path.parent, self.family(path.parent))
                elif path.suffix in (".yaml", ".yml") and path.name != "benchmark.yaml":
                    found.setdefault(path, self.single_family(path))
        return list(found.values())

    def replay_notes(self) -> list[str]:
        """Header lines: what the replay file holds against each family's preset."""
        if self.replay is None:
            return []
        log = self.replay
        lines = [
            f"agenteval: replay {log.shown}: {len(log.entries)} recorded answers "
            f"({log.source}), no subject is called"
        ]
        conds = [c.name for c in self.conditions]
        for family in self._run_families():
            with contextlib.suppress(pytest.UsageError):
                plan = self.plan(family)
                ids = [s.id for a in plan.articles() for s in a.scenarios]
                cov = log.coverage(ids, plan.samples, list(conds))
                line = (
                    f"agenteval: replay: {family.name} · preset {plan.preset}: "
                    f"{cov['replayed']} items replayed, {cov['not_replayed']} not replayed "
                    "(no recorded answer: skipped)"
                )
                if cov["unused"]:
                    line += f"; {cov['unused']} answers for scenarios outside the preset unused"
                if cov["beyond_samples"]:
                    line += (
                        f"; {cov['beyond_samples']} answers past sample {plan.samples} unused "
                        "(--samples=N grades them)"
                    )
                lines.append(line)
        return lines

    def _not_replayed(self, item: ScenarioItem) -> Any:
        """A skipped run for an item the replay file has no answer for (None otherwise)."""
        if self.replay is None or _recorded_for(self.replay, item) is not None:
            return None
        from ._replay import not_replayed_reason
        from ._run import ScenarioRun
        from ._run import _leaf_meta as leaf_meta

        cond = item.condition.name if item.condition else None
        reason = not_replayed_reason(self.replay, item.scenario.id, cond, item.sample)
        result = EvalResult(
            key=item.scenario.id,
            name=item.scenario.id,
            score=None,
            verdict="skipped",
            kind="scenario",
            weight=float(item.scenario.weight),
            reasoning=reason,
            meta={**leaf_meta(item.family, item.article, item.scenario), "not_replayed": True},
        )
        return ScenarioRun(result, None, (), {}, None, None)

    def _replay_field(self, item: ScenarioItem) -> dict[str, Any]:
        """``replay``: the file and line a replayed item's answer came from."""
        if self.replay is None:
            return {}
        rec = _recorded_for(self.replay, item)
        where = {"file": self.replay.shown, "sha256": self.replay.sha256}
        return {"replay": {**where, "line": rec.line if rec is not None else None}}

    def grade(self, item: ScenarioItem, fixture_value: Any = None) -> None:
        subject = self.subject_for(item, fixture_value)
        judges = self.judges()
        upcoming = upcoming_items(item, 4 * self.scheduler.window) if self._subject_shared else []
        try:
            run = self._not_replayed(item) or self.scheduler.run(
                item, subject, judges, _replayed(self.replay, upcoming)
            )
        except ConfigError as exc:
            self.scheduler.cancel_pending()  # clients close in close(), on this loop
            self.stop_reason = f"configuration error: {exc}"
            pytest.exit(
                f"agenteval configuration error: {exc}", returncode=pytest.ExitCode.USAGE_ERROR
            )
        item.run = run
        result = run.result
        item.payload = self._payload(item, run)
        if result.score is not None:
            item.user_properties.append(("agenteval_score", f"{result.score:.4f}"))
        item.user_properties.append(("agenteval_verdict", result.verdict))
        if result.verdict == "error":
            raise ItemError(f"{item.scenario.id}: {result.error}")
        if result.verdict == "skipped":
            pytest.skip(result.reasoning or "nothing to grade")

    # ------------------------------------------------------------------ items that never graded

    def setup_error_text(self, item: Any, excinfo: pytest.ExceptionInfo[BaseException]) -> str:
        """A short, redacted message for an item whose setup failed.

        Our own errors are already one line. Anything else (a raising
        ``agenteval_subject`` fixture, a missing fixture, a bug) is shown as
        the exception and the frames of the user's code, not pytest's.
        """
        exc = excinfo.value
        if isinstance(exc, (ItemError, pytest.skip.Exception)):
            text = str(exc)
        elif isinstance(exc, pytest.FixtureLookupError):
            text = f"fixture lookup failed: {_first_line(str(exc))}"
        else:
            text = describe_exception(exc, Path(self.config.rootpath))
        return terminal_safe(self.redactor.text(text))

    def error_payload_for(self, item: ScenarioItem, message: str) -> dict[str, Any]:
        """The record of an item that errored before any grade (so nothing is lost)."""
        return self._error_payload(_ref_of(item), message, self.subject_name())

    def _error_payload(self, ref: ItemRef, message: str, subject: str) -> dict[str, Any]:
        family = (
            self.single_family(Path(ref.family_root))
            if ref.single_file
            else self.family(Path(ref.family_root))
        )
        article = next(
            a for a in family.articles if any(s.id == ref.scenario_id for s in a.scenarios)
        )
        scenario = next(s for s in article.scenarios if s.id == ref.scenario_id)
        from ._run import _leaf_meta as leaf_meta

        result = EvalResult(
            key=scenario.id,
            name=scenario.id,
            score=None,
            verdict="error",
            kind="scenario",
            weight=float(scenario.weight),
            error=message,
            meta=leaf_meta(family, article, scenario),
        )
        return {
            "v": PAYLOAD_VERSION,
            "family": family.name,
            "family_root": ref.family_root,
            "single_file": ref.single_file,
            "preset": ref.preset,
            "scenario_id": scenario.id,
            "condition": ref.condition,
            "sample": ref.sample,
            "nodeid": ref.nodeid,
            "subject": subject,
            "result": result.to_dict(),
            "prompt": scenario.input,
            "answer": None,
            "tool_calls": [],
            "usage": {},
            "cost": None,
            "timings": {"subject_s": None, "judge_s": None},
        }

    def expect_items(self, items: list[Any]) -> None:
        """The items this process collected (serial run, or a worker)."""
        for item in items:
            if isinstance(item, ScenarioItem):
                self.expected[item.nodeid] = _ref_of(item)
            else:
                self.expected_other.add(item.nodeid)

    def expect_ids(self, ids: list[str]) -> None:
        """The node ids an xdist worker collected (the controller collects nothing itself)."""
        self.expected_ids.update(ids)
        # the golden files those items come from, for the manifest the controller writes
        root = Path(self.config.rootpath)
        for rel in sorted({i.split("::", 1)[0] for i in ids if ".jsonl::" in i}):
            self._learn_golden_file(root / rel)

    def _learn_golden_file(self, path: Path) -> None:
        from ._golden import load_golden

        if any(str(path) in seen for seen in self._golden_paths.values()):
            return
        try:
            family = self.family_for_golden(path, load_golden(path).entries)
        except (SpecError, ValueError, OSError):
            return  # the worker that collected it reported the problem
        self.note_golden_file(family, path)

    def has_work(self) -> bool:
        """Is there a run to account for? Not when collection failed and nothing ran:
        the collection errors (file and line) are the whole story then."""
        if self.config.option.collectonly or (self.collection_errors and not self.reported):
            return False
        return bool(self.collected or self.calibration or self.expected or self.expected_ids)

    def _payload(self, item: ScenarioItem, run: Any) -> dict[str, Any]:
        return {
            "v": PAYLOAD_VERSION,
            "family": item.family.name,
            "family_root": str(item.article.path if item.family.single_file else item.family.root),
            "single_file": item.family.single_file,
            "preset": item.plan.preset,
            "scenario_id": item.scenario.id,
            "condition": item.condition.name if item.condition else None,
            "sample": item.sample,
            "nodeid": item.nodeid,
            "subject": self.subject_name(),
            "subject_origin": self.subject_origin,
            "result": run.result.to_dict(),
            "prompt": item.scenario.input,
            "answer": run.answer,
            "tool_calls": list(run.tool_calls),
            "usage": dict(run.usage),
            "cost": run.cost,
            "timings": {"subject_s": run.subject_latency_s, "judge_s": run.judge_latency_s},
            **self._replay_field(item),
            **self._mcp_fields(item, run),
        }

    def _mcp_fields(self, item: ScenarioItem, run: Any) -> dict[str, Any]:
        """Under a condition with MCP servers: the item's tool calls, the tool loop's account,
        and what the servers reported (for the controller's manifest; not in the record)."""
        cond = item.condition
        if cond is None or not cond.mcp_servers:
            return {}
        return {
            "mcp_calls": list(getattr(run, "mcp_calls", ())),
            "tool_loop": getattr(run, "tool_loop", None),
            "mcp_servers": self.mcp_reported.get(cond.name, {}),
        }

    def _compare_conditions(self, trees: dict[Any, Any]) -> dict[tuple[str, str], dict[str, Any]]:
        """Family × preset -> the comparison of its conditions (two or more), the first
        declared condition the reference."""
        from ._conditions import compare_conditions, scores_of

        order = [c.name for c in self.conditions]
        groups: dict[tuple[str, str], list[tuple[str, Any]]] = {}
        for (root, preset, condition), tree in trees.items():
            if condition:
                groups.setdefault((root, preset), []).append((condition, tree))
        out = {}
        for key, members in groups.items():
            if len(members) < 2 or all(tree is None or tree.score is None for _, tree in members):
                continue  # nothing graded (a run stopped before any item): nothing to compare
            members.sort(key=lambda m: order.index(m[0]) if m[0] in order else len(order))
            out[key] = compare_conditions([scores_of(name, tree) for name, tree in members])
        return out

    # ------------------------------------------------------------------ controller side

    def record(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "agenteval", None)
        if not isinstance(payload, dict):
            if report.failed and NO_SUBJECT in (report.longreprtext or ""):
                self.stop_reason = "no subject"  # a usage error: no evidence to keep
                return
            lost = report.failed and report.when not in ("setup", "call", "teardown")
            ref = self._ref_for(report.nodeid) if report.failed else None
            if ref is not None and report.nodeid not in self.reported:
                # an item of ours that failed without a grade: xdist's report of a
                # crashed worker (when "???"), or a setup failure on an old worker
                why = (
                    "the worker running this item crashed (killed or segfaulted) before it "
                    "reported a grade"
                    if lost
                    else f"errored before a grade: {_first_line(report.longreprtext)}"
                )
                self._ingest(self._error_payload(ref, why, self.subject_name()))
            elif report.failed and report.when in ("setup", "call"):
                self.other_failures += 1
            return
        lean = self._ingest(payload)
        if not self.is_worker:  # a worker's report still goes to the controller whole
            # pytest keeps every report to the end of the session: keep the lean copy there
            report.agenteval = lean  # type: ignore[attr-defined]

    def _ingest(self, payload: dict[str, Any]) -> dict[str, Any]:
        """Take one item's record: the tree's leaves, the evidence chain."""
        self._learn_origin(payload.pop("subject_origin", None))
        # for the manifest (xdist: from a worker; read, not popped: a worker's own pass
        # over its report must leave the key for the controller)
        servers = payload.get("mcp_servers")
        if servers and payload.get("condition"):
            self.mcp_reported.setdefault(str(payload["condition"]), servers)
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
        if not self.is_worker:
            if bucket.recorder is None:
                bucket.recorder = RunRecorder(self, bucket, self._plan_for(bucket))
            bucket.recorder.add(payload)  # the evidence keeps everything
        lean = lean_record(payload)
        result = EvalResult.from_dict(lean["result"])
        bucket.leaves.setdefault(payload["scenario_id"], {})[int(payload.get("sample") or 0)] = (
            result
        )
        bucket.records[payload["nodeid"]] = lean
        return lean

    def _account_for_missing(self, interrupted: bool) -> None:
        """Every collected item gets an outcome: those without one become errors."""
        if self.stop_reason:
            why = f"not evaluated: the run stopped ({self.stop_reason})"
        elif interrupted:
            why = "not evaluated: the run was interrupted or stopped (-x, Ctrl-C) before it ran"
        else:
            why = "not evaluated: no result for this item reached pytest (lost item)"
        wanted = (set(self.expected) | self.expected_ids) - self.expected_other - self.reported
        for nodeid in sorted(wanted):
            ref = self._ref_for(nodeid)
            if ref is not None:
                self._ingest(self._error_payload(ref, why, self.subject_name()))

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

    def _build_id_index(self) -> dict[str, dict[str, ItemRef]]:
        """``family-folder/article.yaml`` -> item name -> ItemRef, for the run's families."""
        from ._collect import _suffix

        index: dict[str, dict[str, ItemRef]] = {}
        base = Path(self.config.invocation_params.dir)
        for arg in self.config.args:
            path = (base / str(arg).split("::", 1)[0]).resolve()
            with contextlib.suppress(SpecError, ValueError, OSError):
                if is_family_dir(path) or is_agenteval_dir(path):
                    self.family(path)
                elif path.suffix in (".yaml", ".yml") and is_family_dir(path.parent):
                    self.family(path.parent)
                elif path.suffix in (".yaml", ".yml") and path.name != "benchmark.yaml":
                    self.single_family(path)
        families = list(self._families.values())
        for family in families:
            try:
                plan = self.plan(family)
            except pytest.UsageError:
                continue
            for article in family.articles:
                if family.single_file:
                    tail, root = article.path.name, str(article.path)
                else:
                    rel = article.path.relative_to(family.root).as_posix()
                    tail, root = f"{family.root.name}/{rel}", str(family.root)
                refs = index.setdefault(tail, {})
                for scenario in article.scenarios:
                    for condition in self.conditions or [None]:
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

    def _plan_for(self, bucket: Collected) -> Plan:
        root = Path(bucket.family_root)
        family = self.single_family(root) if bucket.single_file else self.family(root)
        return self.plan(family)

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
                family_root, self.preset or "standard", False, subject
            )
        if bucket.recorder is None and not self.is_worker:
            family = self.family(Path(family_root))
            files = sorted({r for r in self._golden_files(family)})
            bucket.recorder = RunRecorder(self, bucket, self.plan(family), extra_files=files)
        return bucket

    def _golden_files(self, family: Family) -> list[Path]:
        return [Path(p) for p in self._golden_paths.get(family.name, [])]

    def note_golden_file(self, family: Family, path: Path) -> None:
        self._golden_paths.setdefault(family.name, set()).add(str(path))

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
            key: build_tree(
                self._plan_for(bucket),
                {sid: [r for _, r in sorted(runs.items())] for sid, runs in bucket.leaves.items()},
            )
            for key, bucket in self.collected.items()
        }
        comparisons = self._compare_conditions(trees)
        for key, bucket in sorted(self.collected.items(), key=lambda kv: kv[0]):
            plan = self._plan_for(bucket)
            tree = trees[key]
            terms = self.pr.family_terms(plan, tree, bucket)
            gate = decide_gate(
                plan,
                tree,
                interrupted=interrupted,
                suites=terms.suites,
                regression=terms.comparison.regression if terms.comparison else None,
                baseline_label=terms.baseline_label,
            )
            if self.replay is not None:
                _note_replay(gate, bucket, self.replay)
            outcome = FamilyOutcome(plan, tree, gate, bucket, pr=terms.fields)
            outcome.conditions_comparison = comparisons.get(key[:2]) if key[2] else None
            self.outcomes.append(outcome)
            recorder = bucket.recorder
            if recorder is None:
                continue
            outcome.run_dir, outcome.run_id = recorder.run_dir, recorder.run_id
            outcome.started_at = recorder.started_at
            outcome.head = recorder.writer.head
            ended = datetime.now(timezone.utc)
            summary = summary_dict(outcome, self.judge_specs or ["rules"], ended)
            recorder.write_json("summary.json", summary)
            self._write_reports(recorder, plan, bucket, summary, interrupted)
            # the same number the gate names: items with no grade (errors, lost, not run)
            not_evaluated = tree.counts()["error"] if tree is not None else 0
            outcome.head = recorder.finalize(interrupted=interrupted, not_evaluated=not_evaluated)
            self.pr.after_run(outcome, summary, interrupted)
        self.pr.write_job_summary()
        for cal in self.calibration.values():
            self.calibration_outcomes.append(self._finish_calibration(cal, interrupted))

    def _write_reports(
        self,
        recorder: RunRecorder,
        plan: Plan,
        bucket: Collected,
        summary: dict[str, Any],
        interrupted: bool,
    ) -> None:
        from pydantic import ValidationError

        from . import __version__
        from ._model import ReportRecord, RunHeader, RunSummary, SourceLocation
        from ._prcheck import bundled_location, repo_root
        from .evidence._chain import json_safe_record
        from .evidence._run_dir import report_records
        from .reports._human import render_html, render_markdown, shown_record
        from .reports._junit import junit_xml
        from .reports._sarif import sarif_json

        records = []
        for payload in report_records(
            plan, list(bucket.records.values()), repo_root(Path(self.config.rootpath))
        ):
            try:
                records.append(ReportRecord.from_json(payload))
            except ValidationError:  # a value JSON cannot hold (an agent's own object)
                # made JSON-safe as the evidence keeps it; only then: the walk costs ~0.1 ms
                records.append(ReportRecord.from_json(json_safe_record(payload)))
        run_summary = RunSummary.from_json(summary)
        # where a bundled family's findings show in code scanning (its files are not in
        # the repository): the pytest configuration that runs it
        bundled = bundled_location(self.config, plan.family.name)
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
        redact = self.redactor.text
        recorder.write_bytes("junit.xml", junit_xml(records, run, redact=redact))
        recorder.write_bytes("results.sarif", sarif_json(records, run, redact=redact))
        shown = [shown_record(r) for r in records]
        self._write_human_reports(
            recorder,
            render_markdown(run_summary, shown, redact=redact),
            render_html(run_summary, shown, redact=redact),
        )

    def _write_human_reports(self, recorder: RunRecorder, md: str, html: str) -> None:
        """report.md and report.html, redacted once more as whole texts."""
        recorder.write_bytes(
            "report.md", self.redactor.text(md).encode("utf-8", "backslashreplace")
        )
        recorder.write_bytes(
            "report.html", self.redactor.text(html).encode("utf-8", "backslashreplace")
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

        family = self.family(Path(bucket.family_root))
        preset_name = self.preset or "standard"
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
            split=self.calibration_split,
            thresholds=per_pillar,
            default=default,
            min_n=self.calibration_min_n,
            gate_on=self.calibration_gate_on,
        )
        report["family"] = family.name
        report["judge"] = self.judge_specs or ["rules"]
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
            plan = self.plan(family)
            report["lineage"] = {
                **judge_lineage(bucket.rows, self.judge_descriptions()),
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
                cost=calibration_cost(bucket.rows, self.rates),
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

        root = Path(self.config.rootpath).resolve()
        entries: dict[str, set[str]] = {}
        for r in rows:
            entries.setdefault(str(r.get("file")), set()).add(str(r["id"]))
        out = []
        for path in sorted(self._golden_files(family)):
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
        redact = self.redactor.text
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
        return pytest.ExitCode.TESTS_FAILED if self.other_failures else pytest.ExitCode.OK

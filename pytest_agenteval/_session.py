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
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from ._collect import AgentevalError, ScenarioItem
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
from ._judges import ConfigError
from ._output import RunRecorder
from ._redact import Redactor
from ._scheduler import Scheduler, upcoming_items
from ._subjects import describe
from ._yaml import SpecError

PAYLOAD_VERSION = 1


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
    skip = {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".agenteval"}
    for dirpath, dirnames, filenames in os.walk(rootdir):
        dirnames[:] = sorted(d for d in dirnames if d not in skip and not d.startswith("."))
        if "benchmark.yaml" in filenames and Path(dirpath).name == name:
            return Path(dirpath)
        if Path(dirpath).relative_to(rootdir).parts.__len__() >= 4:
            dirnames[:] = []
    return None


def resolve_bench(config: pytest.Config, names: list[str]) -> list[Path]:
    """Turn ``--bench`` names into family folders (a path, a bundled name, or a folder in the rootdir)."""
    roots = []
    bundled = bundled_families()
    for name in names:
        candidate = Path(name)
        if not candidate.is_absolute():
            candidate = Path(config.invocation_params.dir) / candidate
        if is_family_dir(candidate):
            roots.append(candidate.resolve())
        elif name in bundled:
            roots.append(bundled[name].resolve())
        elif (found := _search_rootdir(config.rootpath, name)) is not None:
            roots.append(found.resolve())
        else:
            known = ", ".join(sorted(bundled)) or "none"
            raise pytest.UsageError(
                f"--bench: no family {name!r} (bundled: {known}; or give the path of a folder "
                "with a benchmark.yaml)"
            )
    return roots


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


@dataclass
class CalibrationBucket:
    """Calibration rows of one family as they arrive on the controller."""

    family_root: str
    preset: str
    single_file: bool
    subject: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    recorder: RunRecorder | None = None


@dataclass
class CalibrationOutcome:
    family: str
    report: dict[str, Any]
    bucket: CalibrationBucket
    run_dir: Path | None = None
    head: str = ""


_READ_META = ("file", "line", "pillar", "control_id", "judge", "family", "pattern")
_READ_RESULT = (
    "key",
    "name",
    "score",
    "verdict",
    "severity",
    "reasoning",
    "error",
    "criteria",
    "kind",
)
_READ_RECORD = (
    "nodeid",
    "scenario_id",
    "prompt",
    "answer",
    "condition",
    "sample",
    "usage",
    "cost",
    "file",
    "line",
    "article",
    "family",
    "preset",
    "subject",
)


def _for_reading(record: dict[str, Any]) -> dict[str, Any]:
    """The fields the human reports show (the evidence keeps everything)."""
    result: dict[str, Any] = record["result"] if isinstance(record.get("result"), dict) else {}
    meta: dict[str, Any] = result.get("meta") or {}
    return {
        **{k: record[k] for k in _READ_RECORD if k in record},
        "result": {
            **{k: result[k] for k in _READ_RESULT if k in result},
            "meta": {k: meta[k] for k in _READ_META if k in meta},
        },
    }


def _selects_calibration(markexpr: str) -> bool:
    """Does ``-m EXPR`` ask for calibration items?

    True when the expression holds for an item marked ``calibration`` and
    fails for the same item without it (other markers assumed present):
    ``calibration``, ``calibration and critical`` yes; ``not calibration``,
    ``not (calibration)``, ``critical`` no.
    """
    if "calibration" not in markexpr:
        return False
    try:
        from _pytest.mark.expression import Expression

        expr = Expression.compile(markexpr)

        def with_calibration(name: str, **kwargs: Any) -> bool:
            return True

        def without_calibration(name: str, **kwargs: Any) -> bool:
            return name != "calibration"

        return expr.evaluate(with_calibration) and not expr.evaluate(  # type: ignore[arg-type]
            without_calibration  # type: ignore[arg-type]
        )
    except Exception:  # pytest internals moved: fall back to reading the text
        return "not calibration" not in markexpr and "not (calibration)" not in markexpr


def _first_set(*values: Any) -> Any:
    """The first value that was given (0 and 0.0 count as given; None and "" do not)."""
    return next((v for v in values if v not in (None, "")), None)


def _settings_dict(settings: Any) -> dict[str, Any] | None:
    if settings is None:
        return None
    keep = ("timeout_s", "deadline_s", "max_retries", "seed", "max_tokens", "cache_mode")
    return {k: getattr(settings, k) for k in keep if hasattr(settings, k)}


def _merge_thresholds(base: Any, spec: Any) -> Any:
    from ._calibration import Thresholds

    return Thresholds(
        kappa=base.kappa if spec.kappa is None else float(spec.kappa),
        accuracy=base.accuracy if spec.accuracy is None else float(spec.accuracy),
        max_evaluation_failures=base.max_evaluation_failures,
    )


class AgentevalState:
    """State of one pytest process for the agenteval plugin."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.is_worker = hasattr(config, "workerinput")
        self._families: dict[Path, Family] = {}
        self._plans: dict[tuple[Path, bool], Plan] = {}
        self.bench = [
            b for arg in config.getoption("agenteval_bench") or [] for b in arg.split(",") if b
        ]
        ini_bench = config.getini("agenteval_bench")
        if not self.bench and ini_bench:
            self.bench = [b for b in str(ini_bench).split(",") if b]
        self.preset: str | None = (
            config.getoption("agenteval_preset") or config.getini("agenteval_preset") or None
        )
        self.bench_roots = resolve_bench(config, self.bench) if self.bench else []
        self._check_preset_early()
        self.judge_specs = self._judge_specs()
        self.subject_spec = (
            config.getoption("agenteval_subject")
            or config.getini("agenteval_subject")
            or os.environ.get("AGENTEVAL_SUBJECT")
            or None
        )
        self.out_dir = Path(
            config.getoption("agenteval_out") or config.getini("agenteval_out") or ".agenteval"
        )
        self._judges: list[Any] | None = None
        self._subject: Callable[..., Any] | None = None
        self._subject_name = ""
        self.rates = {**DEFAULT_RATES, **parse_rates(config.getini("agenteval_rates") or [])}
        max_cost = _first_set(
            config.getoption("agenteval_max_cost"), config.getini("agenteval_max_cost")
        )
        workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
        self.max_cost = float(max_cost) if max_cost not in (None, "") else None
        self.scheduler = Scheduler(
            int(
                config.getoption("agenteval_concurrency")
                or config.getini("agenteval_concurrency")
                or 8
            ),
            Budget(None if self.max_cost is None else self.max_cost / workers),
            self.rates,
        )
        self._subject_shared = False
        self._markers: set[str] = set()
        self.collected: dict[tuple[str, str, str], Collected] = {}
        self.started_at = datetime.now(timezone.utc)
        self.redactor = Redactor.from_environ()
        worker = getattr(config, "workerinput", None)
        self.testrun_uid = worker["testrunuid"] if worker else uuid.uuid4().hex
        self.outcomes: list[FamilyOutcome] = []
        self.conditions = self._conditions(config)
        self.calibration_mode = _selects_calibration(str(config.getoption("markexpr", "") or ""))
        self.calibration_split = (
            config.getoption("agenteval_calibration_split")
            or config.getini("agenteval_calibration_split")
            or "holdout"
        )
        self.calibration_repeat = int(
            config.getoption("agenteval_calibration_repeat")
            or config.getini("agenteval_calibration_repeat")
            or 1
        )
        self.calibration: dict[str, CalibrationBucket] = {}
        self.calibration_outcomes: list[CalibrationOutcome] = []
        self._golden_ids: dict[str, dict[str, str]] = {}
        self._golden_paths: dict[str, set[str]] = {}
        self.other_failures = 0

    # ------------------------------------------------------------------ configuration

    def _judge_specs(self) -> list[str]:
        specs = list(self.config.getoption("agenteval_judge") or [])
        if not specs:
            ini = self.config.getini("agenteval_judge")
            env = os.environ.get("AGENTEVAL_JUDGE", "")
            raw = str(ini or env)
            specs = [s.strip() for s in raw.split(",") if s.strip()]
        return specs

    @property
    def judge_default(self) -> bool:
        return not self.judge_specs

    def judges(self) -> list[Any]:
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
                    "settings": _settings_dict(getattr(judge, "settings", None)),
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

    def golden_roots(self) -> list[Path]:
        """Golden folders that ``-m calibration`` collects.

        With ``--bench``: the golden folders of those families (bundled, in the
        rootdir's ``golden/<family>``, or a family's own ``golden/``). Without:
        the rootdir's ``golden/`` when it has one, else the bundled datasets.
        """
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
        wanted = entries[0].article if entries else None
        candidates = self.bench_roots or list(by_name.values())
        for root in candidates:
            try:
                family = self.family(root)
            except SpecError:
                continue  # a broken family is reported when it is run, not here
            if any(a.control_id == wanted for a in family.articles):
                return family
        raise SpecError(
            path,
            entries[0].line if entries else None,
            f"no benchmark family found for this golden file (folder {name!r}; "
            f"article {wanted!r}); put it in golden/<family>/ or pass --bench",
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
        from ._conditions import ConditionError, parse_conditions

        specs = list(config.getoption("agenteval_condition") or []) or list(
            config.getini("agenteval_conditions") or []
        )
        try:
            return parse_conditions(specs, Path(config.rootpath))
        except ConditionError as exc:
            raise pytest.UsageError(str(exc)) from None

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
            self._families[key] = load_family(key)
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
        return self._plans[key]

    def register_markers(self, family: Family) -> None:
        names = {family.name: f"scenarios of the {family.name} benchmark"}
        for pillar in family.spec.pillars:
            names[pillar.key] = f"scenarios of pillar {pillar.key} ({family.name})"
        for sev in ("low", "medium", "high", "critical"):
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
        self.scheduler.close()

    def subject_for(self, item: ScenarioItem) -> Callable[..., Any]:
        if self.subject_spec:
            if self._subject is None:
                spec = self.subject_spec
                subject = self.config.hook.pytest_agenteval_make_subject(
                    config=self.config, spec=spec
                )
                if subject is None:
                    raise pytest.UsageError(f"--subject {spec!r}: no subject of that kind")
                self._subject, self._subject_name = subject, spec
                self._subject_shared = True
            return self._subject
        try:
            subject = item._request.getfixturevalue("agenteval_subject")
        except pytest.FixtureLookupError:
            raise AgentevalError(
                "no subject: pass --subject=module:callable or define a fixture named "
                "`agenteval_subject` (a callable taking the prompt) in conftest.py"
            ) from None
        if not callable(subject):
            raise AgentevalError(
                f"agenteval_subject fixture returned {type(subject).__name__}, not a callable"
            )
        self._subject_name = self._subject_name or describe(subject)
        defs = item.session._fixturemanager.getfixturedefs("agenteval_subject", item)
        self._subject_shared = bool(defs) and defs is not None and defs[-1].scope == "session"
        return subject

    def subject_name(self) -> str:
        return self._subject_name or self.subject_spec or "agenteval_subject"

    def grade(self, item: ScenarioItem) -> None:
        subject = self.subject_for(item)
        judges = self.judges()
        upcoming = upcoming_items(item) if self._subject_shared else []
        try:
            run = self.scheduler.run(item, subject, judges, upcoming)
        except ConfigError as exc:
            self.scheduler.cancel_pending()  # clients close in close(), on this loop
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
            raise AgentevalError(f"{item.scenario.id}: {result.error}")
        if result.verdict == "skipped":
            pytest.skip(result.reasoning or "nothing to grade")

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
            "result": run.result.to_dict(),
            "prompt": item.scenario.input,
            "answer": run.answer,
            "tool_calls": list(run.tool_calls),
            "usage": dict(run.usage),
            "cost": run.cost,
            "timings": {"subject_s": run.subject_latency_s, "judge_s": run.judge_latency_s},
        }

    # ------------------------------------------------------------------ controller side

    def record(self, report: pytest.TestReport) -> None:
        payload = getattr(report, "agenteval", None)
        if not isinstance(payload, dict):
            if report.failed and report.when in ("setup", "call"):
                self.other_failures += 1
            return
        if payload.get("kind") == "calibration":
            self._record_calibration(payload)
            return
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
        result = EvalResult.from_dict(payload["result"])
        bucket.leaves.setdefault(payload["scenario_id"], {})[int(payload.get("sample") or 0)] = (
            result
        )
        bucket.records[payload["nodeid"]] = payload
        if self.is_worker:
            return
        if bucket.recorder is None:
            bucket.recorder = RunRecorder(self, bucket, self._plan_for(bucket))
        bucket.recorder.add(payload)

    def _plan_for(self, bucket: Collected) -> Plan:
        root = Path(bucket.family_root)
        family = self.single_family(root) if bucket.single_file else self.family(root)
        return self.plan(family)

    def _record_calibration(self, payload: dict[str, Any]) -> None:
        bucket = self.calibration.get(payload["family_root"])
        if bucket is None:
            bucket = self.calibration[payload["family_root"]] = CalibrationBucket(
                payload["family_root"], self.preset or "standard", False, payload["subject"]
            )
        bucket.rows.append(payload)
        if self.is_worker:
            return
        if bucket.recorder is None:
            family = self.family(Path(payload["family_root"]))
            files = sorted({r for r in self._golden_files(family)})
            bucket.recorder = RunRecorder(self, bucket, self.plan(family), extra_files=files)
        bucket.recorder.add(payload)

    def _golden_files(self, family: Family) -> list[Path]:
        return [Path(p) for p in self._golden_paths.get(family.name, [])]

    def note_golden_file(self, family: Family, path: Path) -> None:
        self._golden_paths.setdefault(family.name, set()).add(str(path))

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Build trees, write run directories, decide the gate (controller only)."""
        from ._output import summary_dict

        interrupted = bool(session.shouldstop or session.shouldfail) or exitstatus in (
            pytest.ExitCode.INTERRUPTED,
            pytest.ExitCode.USAGE_ERROR,
            pytest.ExitCode.INTERNAL_ERROR,
        )
        for _key, bucket in sorted(self.collected.items(), key=lambda kv: kv[0]):
            plan = self._plan_for(bucket)
            tree = build_tree(
                plan,
                {sid: [r for _, r in sorted(runs.items())] for sid, runs in bucket.leaves.items()},
            )
            gate = decide_gate(plan, tree, interrupted=interrupted)
            outcome = FamilyOutcome(plan, tree, gate, bucket)
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
            graded_items = sum(len(runs) for runs in bucket.leaves.values())
            not_evaluated = max(0, plan.scenario_count() * plan.samples - graded_items)
            outcome.head = recorder.finalize(interrupted=interrupted, not_evaluated=not_evaluated)
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
        from . import __version__
        from ._junit import junit_xml
        from ._output import report_records
        from ._sarif import sarif_json

        records = report_records(plan, list(bucket.records.values()), Path(self.config.rootpath))
        run = {
            "family": plan.family.name,
            "preset": plan.preset,
            "run_id": summary["run_id"],
            "started_at": summary["started_at"],
            "ended_at": summary["ended_at"],
            "gate_passed": summary["gate"]["passed"],
            "score": summary["score"],
            "verdict": summary["verdict"],
            "tool_version": __version__,
            "subject": bucket.subject,
            "completed": not interrupted,
            "interrupted": interrupted,
        }
        redact = self.redactor.text
        recorder.write_bytes("junit.xml", junit_xml(records, run, redact=redact))
        recorder.write_bytes("results.sarif", sarif_json(records, run, redact=redact))
        self._write_human_reports(recorder, summary, records)

    def _write_human_reports(
        self,
        recorder: RunRecorder,
        summary: dict[str, Any],
        records: list[dict[str, Any]],
        calibration: dict[str, Any] | None = None,
    ) -> None:
        from ._report import render_html, render_markdown

        clean_summary = self.redactor.data(summary)
        clean_records = self.redactor.data([_for_reading(r) for r in records])
        md = render_markdown(clean_summary, clean_records, calibration=calibration)
        html = render_html(clean_summary, clean_records, calibration=calibration)
        recorder.write_bytes(
            "report.md", self.redactor.text(md).encode("utf-8", "backslashreplace")
        )
        recorder.write_bytes(
            "report.html", self.redactor.text(html).encode("utf-8", "backslashreplace")
        )

    def _finish_calibration(
        self, bucket: CalibrationBucket, interrupted: bool
    ) -> CalibrationOutcome:
        from ._calibration import calibration_report, default_thresholds

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
            bucket.rows, split=self.calibration_split, thresholds=per_pillar, default=default
        )
        report["family"] = family.name
        report["judge"] = self.judge_specs or ["rules"]
        report["preset_thresholds"] = preset_name
        skipped = sum(1 for r in bucket.rows if r["verdict"] == "skipped")
        if skipped:
            report["not_gradable"] = skipped
        if interrupted:
            report["gate"]["passed"] = False
            report["gate"]["reasons"].append("the run was interrupted")
        outcome = CalibrationOutcome(family.name, report, bucket)
        recorder = bucket.recorder
        if recorder is not None:
            recorder.write_json("calibration.json", report)
            summary = {
                "family": family.name,
                "preset": f"calibration ({preset_name} thresholds)",
                "subject": bucket.subject,
                "judge": report["judge"],
                "score": None,
                "verdict": "pass" if report["gate"]["passed"] else "fail",
                "gate": {
                    "passed": report["gate"]["passed"],
                    "reasons": report["gate"]["reasons"],
                    "notes": [],
                },
                "items": {},
                "nodes": [],
                "run_id": recorder.run_id,
                "started_at": recorder.started_at,
                "chain_head": recorder.writer.head,
            }
            recorder.write_json("summary.json", summary)
            self._write_human_reports(recorder, summary, [], calibration=report)
            outcome.run_dir, outcome.head = recorder.run_dir, recorder.writer.head
            outcome.head = recorder.finalize(interrupted=interrupted, not_evaluated=0)
        return outcome

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

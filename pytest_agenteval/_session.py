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
import difflib
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import _settings as settings
from ._collect import ScenarioItem
from ._compat import is_agenteval_dir
from ._cost import (
    DEFAULT_RATES,
    WORKER_BUDGET,
    WORKER_LEDGER,
    Budget,
    Ledger,
    WorkerShares,
    parse_rates,
    rate_of,
    unheld_usd,
)
from ._family import (
    Family,
    Plan,
    PresetError,
    is_family_dir,
    load_family,
    load_single_article,
    resolve_plan,
)
from ._replay import ReplayLog
from ._scheduler import Scheduler
from ._vocab import SEVERITIES, ItemError, SpecError
from .evidence._redact import Redactor, mask_assignments
from .judges._base import Judge
from .subjects._base import describe

if TYPE_CHECKING:
    from ._aggregator import Aggregator
    from ._grader import Grader


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


def _resolved(path: Path) -> Path:
    """*path* with its links resolved, or as given where it cannot be (a NUL in an argument
    given to ``pytest.main``): pytest then says it found no such file."""
    try:
        return path.resolve()
    except (OSError, ValueError):
        return path


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
            close = difflib.get_close_matches(name, sorted(bundled), n=1, cutoff=0.75)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise pytest.UsageError(
                f"--bench: no family {name!r} (bundled: {known}; or give the path of a folder "
                f"with a benchmark.yaml, or of a folder of AgentEval article files).{hint}"
            )
    return roots


def _unknown_judge(spec: str) -> str:
    """What a ``--judge`` no plugin made gets told: the kinds, and a provider's form."""
    provider = spec.strip().split(":", 1)[0].lower()
    hint = (
        f"; a provider's judge names its model: --judge={provider}:MODEL"
        if provider in ("openai", "anthropic")
        else ""
    )
    return (
        f"--judge {spec!r}: no judge of that kind (known: rules, openai:MODEL, "
        f"anthropic:MODEL, and what a conftest's pytest_agenteval_make_judge makes){hint}"
    )


def _unknown_subject(spec: str) -> str:
    from .subjects._base import file_path_mistake

    mistake = file_path_mistake(spec)
    if mistake is not None:
        return mistake
    return (
        f"--subject {spec!r}: expected module:callable (such as my_agent:answer), "
        "openai:MODEL, anthropic:MODEL or cmd:COMMAND"
    )


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


def ref_of(item: ScenarioItem) -> ItemRef:
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


def _conditions(run: settings.RunSettings, rootpath: Path) -> list[Any]:
    """The run's conditions: ``--conditions=FILE`` merged with ``--condition`` specs.
    Without either, none: the module (and its pydantic models) is not imported."""
    if not (run.conditions_file or run.condition_specs):
        return []
    from ._conditions import (
        ConditionError,
        load_conditions_file,
        merge_conditions,
        parse_conditions,
    )

    try:
        from_file = load_conditions_file(run.conditions_file) if run.conditions_file else []
        return merge_conditions(from_file, parse_conditions(list(run.condition_specs), rootpath))
    except SpecError as exc:
        raise pytest.UsageError(f"--conditions {exc}") from None
    except ConditionError as exc:
        raise pytest.UsageError(str(exc)) from None


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
        try:
            self.rates = {**DEFAULT_RATES, **parse_rates(list(run.rates))}
        except ValueError as exc:  # a usage error before any call, naming the file
            where = f" ({config.inipath})" if config.inipath else ""
            raise pytest.UsageError(f"{exc}{where}") from None
        workerinput = getattr(config, "workerinput", {})
        workers = int(workerinput.get("workercount", 1))
        if not workerinput:
            settings.check_concurrency_shares(config, run.concurrency)
        self.max_cost = run.max_cost
        # limits of the run, not of each process: -n 4 must not send four times as many
        concurrency, budget = run.per_worker(workers)
        if isinstance(workerinput.get(WORKER_BUDGET), (int, float)):
            budget = float(workerinput[WORKER_BUDGET])  # the controller's share for this one
        #: The controller's account of its workers' budgets (xdist hooks in _roles.py).
        self.worker_shares = WorkerShares(run.max_cost)
        #: paid calls no record holds, of each xdist worker as it finished (node id ->
        #: Budget.open_calls()), and the calls each had in flight by its last report
        #: worker id -> its (calls in flight, their usd at average, unpriced, usd spent)
        self.worker_unrecorded: dict[str, tuple[int, float, int, float]] = {}
        self.worker_in_flight: dict[str, int] = {}
        self.crashed_workers = 0
        #: crashed worker id -> the calls in flight its last report said
        self.crashed_in_flight: dict[str, int] = {}
        self.scheduler = Scheduler(concurrency, Budget(budget, of_run=run.max_cost), self.rates)
        if isinstance(workerinput.get(WORKER_LEDGER), str):
            self.scheduler.budget.ledger = Ledger.open(workerinput[WORKER_LEDGER])
            if self.scheduler.budget.ledger is not None:  # the run's folder is on this host:
                # the connections' circuit breakers count the failures of every worker
                from ._providers import share_breakers

                folder = Path(workerinput[WORKER_LEDGER]).parent
                share_breakers(folder, str(workerinput.get("workerid", "")))
        #: the controller's folder of its workers' ledgers: a worker that did not hand over
        #: its account as it finished (crashed, stopped) is known by its ledger at the end
        self.ledger_dir: Path | None = None
        if run.subject_timeout_given:  # provider and cmd: subjects time themselves
            self.scheduler.subject_timeout_s = run.subject_timeout_s
        self.subject_shared = False
        self._markers: set[str] = set()
        self.started_at = datetime.now(timezone.utc)
        # a secret the subject's command is given inline is one too (cmd:env DB_PASSWORD=...)
        self.redactor = Redactor.from_environ(command=run.subject_spec or "")
        worker = getattr(config, "workerinput", None)
        self.testrun_uid = worker["testrunuid"] if worker else uuid.uuid4().hex
        self.conditions = _conditions(run, Path(config.rootpath))
        self.mcp_host: Any = None  # the conditions' MCP servers, once started (_mcp.McpHost)
        # condition -> server -> name/version/tools as the server reported them (manifest)
        self.mcp_reported: dict[str, dict[str, Any]] = {}
        self.calibration_mode = _selects_calibration(run.markexpr)
        self.calibration_split = run.calibration_split
        self.calibration_repeat = run.calibration_repeat
        self.calibration_min_n = run.calibration_min_n
        self.calibration_gate_on = run.calibration_gate_on
        self._golden_roots: list[Path] | None = None
        self._golden_ids: dict[str, dict[str, str]] = {}
        self._golden_paths: dict[str, set[str]] = {}
        self.subject_origin: dict[str, str] | None = (
            {"kind": "spec", "spec": self.shown_spec(self.subject_spec)}
            if self.subject_spec
            else None
        )
        self.stop_reason: str | None = None
        from ._prcheck import PullRequestCheck

        # --baseline resolved and verified now, before any subject or judge is called
        self.pr = PullRequestCheck(self)
        # this process's roles (_roles.register_roles): a serial run has both, an
        # xdist worker only the grader, the controller only the aggregator
        self.grader: Grader | None = None
        self.aggregator: Aggregator | None = None
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
                    raise pytest.UsageError(_unknown_judge(spec))
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

    def unrecorded_calls(self, recorded_usd: float = 0.0) -> dict[str, Any] | None:
        """The run's calls no record holds (:class:`~._model.UnrecordedCalls`), or None.

        *recorded_usd*: what the records this process took hold (its aggregator's); what this
        process's budget counted beyond it was answered and paid for, and no record holds
        it. Under xdist the controller calls nothing (its budget counts nothing): each
        worker's spend, as it handed it over or else as its ledger last said, is set
        against what the records that reached this process from it hold."""
        calls, usd, unpriced = self.scheduler.budget.open_calls()
        answered = unheld_usd(self.scheduler.budget.spent, recorded_usd)
        accounts = dict(self.worker_unrecorded)
        for ledger in sorted(self.ledger_dir.iterdir()) if self.ledger_dir else ():
            kept = None if ledger.name in accounts else Ledger.read(ledger)
            if kept is not None:  # a worker that crashed, or was stopped with the run
                accounts[ledger.name] = kept
        for worker, (n, dollars, not_priced, spent) in accounts.items():
            calls, usd, unpriced = calls + n, usd + dollars, unpriced + not_priced
            answered += unheld_usd(spent, self.worker_shares.spent.get(worker, 0.0))
        # a crashed worker's ledger says its paid calls in flight (counted above); one that
        # kept none (on another host) is known only by what its last report said
        unknown = {w: n for w, n in self.crashed_in_flight.items() if w not in accounts}
        if not calls and not self.crashed_workers and not answered:
            return None
        return {
            "calls": calls,
            "usd_at_average": round(usd, 10),
            "calls_unpriced": unpriced,
            "workers_crashed": self.crashed_workers,
            "workers_crashed_without_ledger": len(unknown),
            "calls_in_crashed_workers": sum(unknown.values()),
            "usd_answered": round(answered, 10),
        }

    def judge_label(self) -> str:
        if self.judge_default:
            return "rules (offline default: deterministic checks only — no judge configured)"
        return ", ".join(self.judge_specs)

    def budget_notes(self) -> list[str]:
        """Header warnings where ``--agenteval-max-cost`` cannot hold: a provider subject or
        judge whose model has no rate (its calls are made, and counted in tokens only), and
        ``--judge-batch`` (a call inside a batch is not stopped)."""
        if self.max_cost is None:
            return []
        priced = [*self.judge_specs, *([self.subject_spec] if self.subject_spec else [])]
        notes = [
            f"agenteval: warning: --agenteval-max-cost cannot count the calls of {spec}: its "
            "model has no rate (add one to agenteval_rates); they are made, and counted in "
            "tokens only"
            for spec in dict.fromkeys(str(s) for s in priced)
            if spec.split(":", 1)[0] in {"openai", "anthropic"}
            and rate_of(spec, self.rates) is None
        ]
        if self.settings.judge_batch:
            notes.append(
                "agenteval: warning: --agenteval-max-cost cannot stop a call inside a batch "
                "(--judge-batch): the batch's grades are charged as they are collected, and the "
                "live re-asks after them stop at the budget"
            )
        return notes

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
        return [_resolved(base / str(arg).split("::", 1)[0]) for arg in self.config.args]

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
        """A family folder given with ``--bench``, or named on the command line (also one
        inside another named folder: pytest 8.2+ merges ``pytest . fam`` into ``.``, and
        ``fam`` is then no initial path of the session), or inside a named one."""
        resolved = path.resolve()
        return (
            resolved in self.bench_roots
            or resolved in self.named_paths()
            or session.isinitpath(path, with_parents=True)
        )

    # ------------------------------------------------------------------ running

    def close(self) -> None:
        """Close clients that subjects and judges hold, then the event loop (the calls still
        in flight cancelled first)."""
        self.scheduler.stop_calls()
        if self.scheduler.budget.ledger is not None:
            from ._providers import share_breakers

            share_breakers(None)
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
            self._subject = self.replay.subject()
            self._subject_name = self.shown_spec(self.replay.label())
            self.subject_shared = True
        if self._subject is None:
            spec = str(self.subject_spec)
            subject = self.config.hook.pytest_agenteval_make_subject(config=self.config, spec=spec)
            if subject is None:
                raise pytest.UsageError(_unknown_subject(self.shown_spec(spec)))
            self._subject, self._subject_name = subject, self.shown_spec(spec)
            self.subject_shared = True
        return self._subject

    def check_subject_spec(self) -> None:
        """Under xdist, before the workers start: warn when a ``module:callable`` subject's
        module cannot be found from the controller. Only a warning: the controller loads
        no conftest below the paths it was given, and one may add the module's folder to
        ``sys.path`` or make subjects of its own kind, which the workers then see."""
        spec = str(self.subject_spec or "")
        if ":" not in spec or spec.split(":", 1)[0] in {"openai", "anthropic", "cmd"}:
            return
        from .subjects._base import find_subject_module

        try:
            find_subject_module(spec, Path(self.config.invocation_params.dir), self.config.rootpath)
        except ValueError as exc:
            self.announce(
                f"agenteval: warning: {exc} from here; each worker will try it (a conftest "
                "of theirs may add its folder to sys.path) and stop the run with a usage error if it cannot"
            )

    def note_subject_fixture(self, *, scope: str, where: str) -> None:
        """Called when pytest sets up the ``agenteval_subject`` fixture: where it comes from.

        A function-scoped fixture gives each item its own subject, so calls
        cannot be started ahead for later items: one call is in flight at a
        time. That is said once, in one line, with what to write instead.
        """
        self.subject_shared = scope == "session"
        self.learn_origin(
            {"kind": "fixture", "fixture": "agenteval_subject", "where": where, "scope": scope}
        )

    def learn_origin(self, origin: dict[str, str] | None) -> None:
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
        self.announce(line)

    def announce(self, line: str) -> None:
        """One line on the terminal now (serial runs and the controller; not a worker's)."""
        if self.is_worker:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        from ._progress import on_own_line

        fspath = getattr(reporter, "currentfspath", None)
        with on_own_line(self.config, reporter):  # called during an item's setup, too
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
            return f"--subject {self.shown_spec(self.subject_spec)}"
        # the header comes before collection, when a conftest further down may still define
        # the fixture: what to look for, not a claim that one exists
        return (
            "from an agenteval_subject fixture, no --subject given (named where it is defined "
            "once set up; without one the run stops before any call)"
        )

    def subject_for(self, item: ScenarioItem, fixture_value: object = None) -> Callable[..., Any]:
        if self.subject_spec:
            return self.spec_subject()
        subject = fixture_value
        if not callable(subject):
            raise ItemError(
                f"agenteval_subject fixture returned {type(subject).__name__}, not a callable"
            )
        self._subject_name = self._subject_name or self.redactor.text(describe(subject))
        return subject

    def subject_name(self) -> str:
        """The subject as recorded, printed and used in paths (secrets in a spec masked)."""
        return self._subject_name or self.shown_subject_spec() or "agenteval_subject"

    def shown_subject_spec(self) -> str | None:
        """``--subject`` as :meth:`subject_name` shows it; None without one."""
        return self.shown_spec(self.subject_spec) if self.subject_spec else None

    def shown_spec(self, spec: str) -> str:
        """*spec* with inline credentials masked and secret values redacted: the same for
        every process of the run (an xdist worker has the same environment), and *spec*
        itself when it holds no secret (run folders and baselines are found by it)."""
        return self.redactor.text(mask_assignments(spec))

    # ------------------------------------------------------------------ replay

    def _replay(self, config: pytest.Config) -> ReplayLog | None:
        """``--replay FILE``: read, checked against the run's families, made the subject."""
        from ._replay import load_replay

        value = self.settings.replay
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

    # ------------------------------------------------------------------ items that never graded

    # ------------------------------------------------------------------ controller side

    def golden_files(self, family: Family) -> list[Path]:
        return [Path(p) for p in self._golden_paths.get(family.name, [])]

    def knows_golden_file(self, path: Path) -> bool:
        return any(str(path) in seen for seen in self._golden_paths.values())

    def loaded_families(self) -> list[Family]:
        """The families loaded so far (each once, whatever path named it)."""
        return list(self._families.values())

    def note_golden_file(self, family: Family, path: Path) -> None:
        self._golden_paths.setdefault(family.name, set()).add(str(path))

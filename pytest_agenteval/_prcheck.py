"""The pull-request check inside a run: baseline, suites, regression, pointers, GitHub.

The pytest edge of :mod:`~pytest_agenteval._baseline`, :mod:`~pytest_agenteval._suites`,
:mod:`~pytest_agenteval._compare` and :mod:`~pytest_agenteval.reports._github`, held by
the process's :class:`~pytest_agenteval._session.AgentevalState` as ``state.pr``:

* at start-up (controller or serial process only), ``--baseline`` is resolved
  and verified for every family named on the command line, so a tampered or
  missing baseline is a usage error before any subject or judge is called;
* at the end, per family: the suites' scores, the comparison with the
  baseline and the regression term handed to the gate, and the keys they add
  to ``summary.json``; then the ``<out>/latest/<family>.json`` pointer;
* after every family: the GitHub job summary (``GITHUB_STEP_SUMMARY``) and, in
  the terminal summary, ``::error`` annotations (``GITHUB_ACTIONS=true``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from ._baseline import Baseline, BaselineError, BaselineSearch, search, write_pointer
from ._compare import DEFAULT_ALPHA, Comparison, compare, summary_fields
from ._suites import ScenarioInfo, SuiteReport, score_suites
from ._vocab import JSONObject

if TYPE_CHECKING:
    from ._aggregator import Collected, FamilyOutcome
    from ._evals import EvalResult
    from ._family import Family, Plan
    from ._session import AgentevalState

_CONFIG_FILES = ("pyproject.toml", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg")


@dataclass
class FamilyTerms:
    """What the pull-request check adds to one family's gate and summary."""

    suites: SuiteReport | None = None
    comparison: Comparison | None = None
    baseline: Baseline | None = None
    baseline_label: str = ""
    fields: JSONObject = field(default_factory=dict)  # summary.json keys


class _Lines(Protocol):
    """Where annotations go: the terminal reporter (or its escaping wrapper)."""

    def write_line(self, text: str, **markup: bool) -> None: ...


def repo_root(start: Path) -> Path:
    """The repository holding *start*: the nearest folder with a ``.git`` entry, else *start*.

    SARIF locations and annotations are relative to the repository root,
    which is the rootdir in most projects but not in a monorepo.
    """
    start = start.resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def bundled_location(config: pytest.Config, family: str) -> dict[str, str | int] | None:
    """A file of the user's repository to show a bundled family's findings on.

    GitHub code scanning needs every result located on a file of the
    repository, and a bundled family's files are inside the installed
    package. The pytest configuration file that runs the benchmark is the
    closest thing in the repository: its line naming the family (or
    ``agenteval``) when there is one, else line 1.
    """
    root = repo_root(Path(config.rootpath))
    candidates = [Path(config.inipath)] if config.inipath else []
    candidates += [Path(config.rootpath) / name for name in _CONFIG_FILES]
    for path in candidates:
        try:
            rel = path.resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if not path.is_file():
            continue
        line = 1
        try:
            with path.open("rb") as fh:
                text = fh.read(1 << 20).decode("utf-8", "replace")
        except OSError:
            continue
        lines = text.splitlines()
        for needle in (family, "agenteval"):
            hit = next((i for i, ln in enumerate(lines, 1) if needle in ln), None)
            if hit is not None:
                line = hit
                break
        return {"file": rel, "line": line}
    return None


def scenario_infos(family: Family) -> list[ScenarioInfo]:
    return [
        ScenarioInfo(
            id=s.id,
            pattern=s.pattern,
            tags=tuple(s.tags),
            control_id=art.control_id,
            pillar=art.meta.pillar,
            aliases=tuple(getattr(art.meta, "aliases", ()) or ()),
        )
        for art in family.articles
        for s in art.scenarios
    ]


def _scenario_results(tree: EvalResult | None) -> dict[str, tuple[float | None, str]]:
    from ._gate import scenario_nodes

    if tree is None:
        return {}
    return {n.key: (n.score, n.verdict) for n in scenario_nodes(tree)}


class PullRequestCheck:
    """Baseline, suites and regression for one pytest process (see the module docstring)."""

    def __init__(self, state: AgentevalState) -> None:
        self.state = state
        run = state.settings
        self.spec: str | None = run.baseline
        self.regression_max = run.regression_max
        self.alpha = run.regression_alpha
        self.searches: dict[tuple[str, str | None], BaselineSearch] = {}
        self.summaries: list[dict[str, object]] = []
        if self.spec is not None and not state.is_worker:
            self._resolve_early()

    # ------------------------------------------------------------------ start-up

    @property
    def out_dir(self) -> Path:
        out = self.state.out_dir
        return out if out.is_absolute() else Path(self.state.config.invocation_params.dir) / out

    def _families_now(self) -> list[Family]:
        """The families this run names: --bench, and family folders or article files given as paths."""
        from ._family import is_family_dir
        from ._vocab import SpecError

        state = self.state
        found: dict[Path, Family] = {}
        base = Path(state.config.invocation_params.dir)
        paths = list(state.bench_roots)
        for arg in state.config.args:
            paths.append((base / str(arg).split("::", 1)[0]).resolve())
        for path in paths:
            try:
                if is_family_dir(path) or path in state.bench_roots:
                    family = state.family(path)
                elif path.suffix in (".yaml", ".yml") and is_family_dir(path.parent):
                    family = state.family(path.parent)
                elif path.suffix in (".yaml", ".yml") and path.is_file():
                    family = state.single_family(path)
                else:
                    continue
            except (SpecError, ValueError, OSError):
                continue  # a broken family is reported at collection, with file and line
            found.setdefault(family.root.resolve(), family)
        return list(found.values())

    def _resolve_early(self) -> None:
        assert self.spec is not None
        conditions = [c.name for c in self.state.conditions] or [None]
        for family in self._families_now():
            plan = self.state.plan(family)
            for condition in conditions:
                try:
                    found = search(
                        self.spec,
                        self.out_dir,
                        family=family.name,
                        preset=plan.preset,
                        condition=condition,
                        subject=self.state.shown_subject_spec(),
                        base=Path(self.state.config.invocation_params.dir),
                    )
                except BaselineError as exc:
                    raise pytest.UsageError(f"--baseline: {exc}") from None
                self.searches[(family.name, condition)] = found

    # ------------------------------------------------------------------ the end

    def _shown(self, path: Path) -> str:
        try:
            return (
                path.resolve()
                .relative_to(Path(self.state.config.invocation_params.dir).resolve())
                .as_posix()
            )
        except ValueError:
            return str(path)

    def _baseline_for(
        self, plan: Plan, subject: str, condition: str | None
    ) -> tuple[Baseline | None, str | None]:
        if self.spec is None:
            return None, None
        key = (plan.family.name, condition)
        found = self.searches.get(key)
        if found is None:  # a family met only now (a path xdist workers collected)
            try:
                found = search(
                    self.spec,
                    self.out_dir,
                    family=plan.family.name,
                    preset=plan.preset,
                    condition=condition,
                    base=Path(self.state.config.invocation_params.dir),
                )
            except BaselineError as exc:
                return None, f"baseline not used: {exc}"
            self.searches[key] = found
        return found.pick(subject)

    def family_terms(self, plan: Plan, tree: EvalResult | None, bucket: Collected) -> FamilyTerms:
        """Suites and the comparison with the baseline, before the gate is decided."""
        from .evidence._run_dir import node_dict

        terms = FamilyTerms()
        family = plan.family
        if family.spec.suites:
            infos = scenario_infos(family)
            if self.state.replay is not None:  # replayed scenarios count as the replay suite
                from ._replay import with_replay_tag

                replayed = [
                    r["scenario_id"]
                    for r in bucket.records.values()
                    if r.get("replay") and not r["result"].get("meta", {}).get("not_replayed")
                ]
                infos = with_replay_tag(infos, replayed)
            terms.suites = score_suites(
                family.spec.suites,
                infos,
                _scenario_results(tree),
                suite_min=plan.gate.suite_min,
            )
            terms.fields["suites"] = terms.suites.to_dict()
        baseline, note = self._baseline_for(plan, bucket.subject, bucket.condition)
        if baseline is None:
            if note:
                terms.fields["baseline_note"] = note
            return terms
        candidate: dict[str, object] = {
            "family": family.name,
            "preset": plan.preset,
            "condition": bucket.condition,
            "nodes": [node_dict(tree)] if tree is not None else [],
            "suites": terms.suites.to_dict() if terms.suites is not None else None,
        }
        bound = self.regression_max
        if bound is None:
            bound = plan.gate.regression_max if plan.gate.regression_max is not None else 0.0
        alpha = self.alpha or plan.gate.regression_alpha or DEFAULT_ALPHA
        ref = baseline.ref(self._shown(baseline.path))
        terms.baseline = baseline
        terms.comparison = compare(
            baseline.summary, candidate, alpha=alpha, regression_max=bound, baseline_ref=ref
        )
        terms.baseline_label = f"run {baseline.run_id[:12]} ({ref['path']})"
        terms.fields.update(summary_fields(terms.comparison, ref))
        if note:
            terms.fields["baseline_note"] = note
        return terms

    def after_run(
        self, outcome: FamilyOutcome, summary: Mapping[str, object], interrupted: bool
    ) -> None:
        """Point ``<out>/latest/<family>.json`` at the run just sealed; keep its summary."""
        if outcome.run_dir is None:
            return
        record = dict(summary)
        record["run_dir"] = self._shown(outcome.run_dir)
        record["chain_head_final"] = outcome.head
        self.summaries.append(record)
        try:
            write_pointer(
                self.out_dir,
                outcome.run_dir,
                {
                    "family": summary.get("family"),
                    "preset": summary.get("preset"),
                    "subject": summary.get("subject"),
                    "condition": summary.get("condition"),
                    "run_id": summary.get("run_id"),
                    "chain_head": outcome.head,
                    "completed": not interrupted,
                    "gate_passed": _gate_passed(summary.get("gate")),
                    "score": summary.get("score"),
                    "ended_at": summary.get("ended_at"),
                },
            )
        except OSError as exc:  # a convenience: the run itself is sealed already
            outcome.gate.notes.append(f"could not write the latest-run pointer: {exc}")

    def write_job_summary(self) -> None:
        """Append the GitHub job summary when ``GITHUB_STEP_SUMMARY`` names a file."""
        from ._model import RunSummary
        from .reports._github import SealedRun, job_summary

        target = os.environ.get("GITHUB_STEP_SUMMARY")
        if not target or not self.summaries:
            return
        runs = [
            SealedRun(
                RunSummary.from_json(s),
                run_dir=str(s.get("run_dir") or ""),
                chain_head=str(s.get("chain_head_final") or ""),
            )
            for s in self.summaries
        ]
        text = self.state.redactor.text(job_summary(runs))
        try:
            with open(target, "a", encoding="utf-8", errors="backslashreplace") as fh:
                fh.write(text + "\n")
        except OSError:
            return  # the job summary is a convenience; the run's outcome stands

    def locations(
        self, outcomes: Sequence[FamilyOutcome]
    ) -> dict[tuple[str, str], tuple[str, int | None]]:
        """(family, scenario id) -> repository-relative file and line, for files in the repository."""
        root = repo_root(Path(self.state.config.rootpath))
        out: dict[tuple[str, str], tuple[str, int | None]] = {}
        for outcome in outcomes:
            family = outcome.plan.family
            for art in family.articles:
                try:
                    rel = art.path.resolve().relative_to(root).as_posix()
                except ValueError:
                    continue  # a bundled family: not in the repository
                for sid, line in art.lines.items():
                    out[(family.name, sid)] = (rel, line)
        return out

    def write_annotations(self, tr: _Lines, outcomes: Sequence[FamilyOutcome]) -> None:
        """``::error`` lines for the runner (``GITHUB_ACTIONS=true``)."""
        from ._model import RunSummary
        from .reports._github import error_annotations

        if os.environ.get("GITHUB_ACTIONS") != "true" or not self.summaries:
            return
        summaries = [RunSummary.from_json(s) for s in self.summaries]
        for line in error_annotations(summaries, self.locations(outcomes)):
            tr.write_line(self.state.redactor.text(line))


def _gate_passed(gate: object) -> object:
    """A summary's ``gate.passed`` (None when it has no gate)."""
    return gate.get("passed") if isinstance(gate, Mapping) else None

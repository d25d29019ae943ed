"""Suites (Layerup 13.1): named, weighted selections of scenarios, each with its own metric.

A family's ``benchmark.yaml`` may declare ``suites:``; each suite selects
scenarios by tag, scenario pattern (``direct``, ``trap``, ``edge-case``,
``probe``), article (control id), pillar or id glob, and scores them with
one metric:

* ``mean_score`` — the mean of the graded scenarios' scores (each scenario
  counts once, whatever its weight inside its article);
* ``pass_rate`` — the share of graded scenarios whose verdict is PASS (a
  WARN is not a pass).

With suites, the bench score is the Layerup formula over the suites that
ran::

    bench = Σ_s w_s · metric_s / Σ_s w_s      (s: suites with a graded scenario)

so a suite that did not run (nothing selected in this run, or every selected
item errored) is reported as such, never as a pass, and its weight is
renormalised away with a note. The pillar tree is untouched; the gate's
``min_score`` applies to this bench score when suites are defined, a suite's
``suite_min`` (or the preset gate's ``suite_min: {name: x}``) is a floor for
its metric, and a ``required`` suite that did not run fails the gate.

Pure: no pytest, no I/O. The session builds :class:`ScenarioInfo` from the
family and passes the graded scenario results in.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ._vocab import GRADED, JSONObject, SpecError

if TYPE_CHECKING:
    from ._spec import BenchmarkSpec, SuiteSpec

__all__ = [
    "METRICS",
    "ScenarioInfo",
    "SuiteReport",
    "SuiteScore",
    "matches",
    "metric_value",
    "score_suites",
]

METRICS = ("mean_score", "pass_rate")
_DIGITS = 6  # scores are rounded once, to 6 decimals, where they are made


class _Select(Protocol):
    """A suite's ``select`` (:class:`~pytest_agenteval._spec.SuiteSelect`), read only."""

    @property
    def tags(self) -> Sequence[str] | None: ...
    @property
    def patterns(self) -> Sequence[str] | None: ...
    @property
    def articles(self) -> Sequence[str] | None: ...
    @property
    def pillars(self) -> Sequence[str] | None: ...
    @property
    def ids(self) -> Sequence[str] | None: ...


@dataclass(frozen=True)
class ScenarioInfo:
    """What a suite's selection looks at."""

    id: str
    pattern: str
    tags: tuple[str, ...]
    control_id: str
    pillar: str
    aliases: tuple[str, ...] = ()  # other ids of the control


def matches(select: _Select, info: ScenarioInfo) -> bool:
    """Every key given narrows the selection; inside a key, any value matches."""
    if select.tags is not None and not set(select.tags) & set(info.tags):
        return False
    if select.patterns is not None and info.pattern not in select.patterns:
        return False
    if select.articles is not None and not {info.control_id, *info.aliases} & set(select.articles):
        return False
    if select.pillars is not None and info.pillar not in select.pillars:
        return False
    return select.ids is None or any(fnmatch.fnmatchcase(info.id, g) for g in select.ids)


def metric_value(metric: str, results: Sequence[tuple[float | None, str]]) -> float | None:
    """*metric* over (score, verdict) pairs; only graded ones (pass/warn/fail) count."""
    graded = [(s, v) for s, v in results if v in GRADED and s is not None]
    if not graded:
        return None
    if metric == "pass_rate":
        value = sum(1 for _, v in graded if v == "pass") / len(graded)
    elif metric == "mean_score":
        value = math.fsum(float(s) for s, _ in graded) / len(graded)
    else:
        raise ValueError(f"unknown suite metric {metric!r} (known: {', '.join(METRICS)})")
    return round(value, _DIGITS)


@dataclass(frozen=True)
class SuiteScore:
    """One suite in one run."""

    name: str
    title: str
    metric: str
    weight: float
    required: bool
    suite_min: float | None
    members: tuple[str, ...]  # scenario ids of the family the selection holds
    ran: tuple[str, ...]  # of those, the scenarios with a result in this run
    graded: int  # of those, how many were graded (not errored or skipped)
    value: float | None

    @property
    def status(self) -> str:
        """``ran``, ``not graded`` (selected but every item errored or skipped), ``not run``."""
        if self.value is not None:
            return "ran"
        return "not graded" if self.ran else "not run"

    @property
    def below_min(self) -> bool:
        return self.value is not None and self.suite_min is not None and self.value < self.suite_min

    def to_dict(self) -> JSONObject:
        return {
            "name": self.name,
            "title": self.title,
            "metric": self.metric,
            "weight": self.weight,
            "required": self.required,
            "suite_min": self.suite_min,
            "value": self.value,
            "status": self.status,
            "scenarios": len(self.ran),
            "graded": self.graded,
            "members": list(self.members),
        }


@dataclass(frozen=True)
class SuiteReport:
    suites: tuple[SuiteScore, ...]
    bench: float | None  # Σ w·metric over the suites that ran, weights renormalised over them

    @property
    def defined(self) -> bool:
        return bool(self.suites)

    def to_dict(self) -> JSONObject:
        return {"bench": self.bench, "items": [s.to_dict() for s in self.suites]}


def score_suites(
    suites: Sequence[SuiteSpec],
    scenarios: Iterable[ScenarioInfo],
    results: Mapping[str, tuple[float | None, str]],
    *,
    suite_min: Mapping[str, float] | None = None,
) -> SuiteReport:
    """Each suite's metric over the scenarios of *results* it selects, and the bench score.

    *results* maps a scenario id to its (score, verdict) in this run; a
    preset gate's *suite_min* overrides a suite's own minimum.
    """
    infos = list(scenarios)
    overrides = dict(suite_min or {})
    scored = []
    for suite in suites:
        members = tuple(i.id for i in infos if matches(suite.select, i))
        ran = tuple(m for m in members if m in results)
        value = metric_value(suite.metric, [results[m] for m in ran])
        graded = sum(1 for m in ran if results[m][1] in GRADED)
        floor = overrides.get(suite.name, suite.suite_min)
        scored.append(
            SuiteScore(
                name=suite.name,
                title=suite.title or suite.name,
                metric=suite.metric,
                weight=float(suite.weight),
                required=bool(suite.required),
                suite_min=None if floor is None else float(floor),
                members=members,
                ran=ran,
                graded=graded,
                value=value,
            )
        )
    counted = [s for s in scored if s.value is not None and s.weight > 0]
    total = math.fsum(s.weight for s in counted)
    bench = None
    if counted and total > 0:
        bench = round(math.fsum(s.weight * (s.value or 0.0) for s in counted) / total, _DIGITS)
    return SuiteReport(tuple(scored), bench)


def check_suites(
    spec: BenchmarkSpec,
    data: object,
    path: Path | str,
    controls: Iterable[str],
    pillars: Iterable[str],
) -> None:
    """Cross-check a family's ``suites:`` (raises SpecError naming the file and line).

    Names are unique, weights sum to 1 (±0.001) like the pillars', the articles
    and pillars a selection names exist, and every ``suite_min`` in a gate names
    a suite.
    """
    from ._yaml import line_of

    suites = list(spec.suites)
    seen: dict[str, int] = {}
    known_controls, known_pillars = set(controls), set(pillars)
    for i, suite in enumerate(suites):
        line = line_of(data, ("suites", i))
        if suite.name in seen:
            raise SpecError(path, line, f"duplicate suite name {suite.name!r}")
        seen[suite.name] = i
        select = suite.select
        for key, values, known in (
            ("articles", select.articles, known_controls),
            ("pillars", select.pillars, known_pillars),
        ):
            for value in values or ():
                if value not in known:
                    raise SpecError(
                        path,
                        line_of(data, ("suites", i, "select", key)) or line,
                        f"suite {suite.name!r}: unknown {key[:-1]} {value!r} in select.{key}",
                    )
    if suites:
        total = math.fsum(float(s.weight) for s in suites)
        if abs(total - 1.0) > 1e-3:
            raise SpecError(
                path,
                line_of(data, ("suites",)),
                f"suite weights sum to {total:.4f}; they must sum to 1 (±0.001)",
            )
    gates = [(("gate",), spec.gate)] + [
        (("presets", name, "gate"), p.gate) for name, p in spec.presets.items() if p.gate
    ]
    for loc, gate in gates:
        for name in gate.suite_min:
            if name not in seen:
                names = ", ".join(seen) or "none defined"
                raise SpecError(
                    path,
                    line_of(data, (*loc, "suite_min")),
                    f"{'.'.join(map(str, loc))}.suite_min names unknown suite {name!r} "
                    f"(suites: {names})",
                )

"""``agenteval drift OUT_DIR``: is a family's metric drifting? (Layerup 13.4, drift sigma)

The runs
    Every run directory of the family under ``OUT_DIR/runs/<family>/`` is
    checked with :func:`~pytest_agenteval.evidence._chain.verify_run` first. A run
    whose evidence does not verify, or that did not complete (interrupted,
    still running), is skipped with a note naming it; so is one without the
    metric (a pairwise run has no score, a benchmark run no ``kappa``). The
    metric of a run is ``score`` (summary.json; with ``--pillar`` that
    pillar's score) or, from a calibration run's calibration.json,
    ``accuracy``, ``kappa`` or ``ece`` (``overall``, or ``--pillar``'s). A
    series is one subject, preset and condition: ``--subject``, ``--preset``
    and ``--condition`` choose it; by default it is the series of the newest
    run that has the metric (the others are named in a note). Runs are
    ordered by their start time.

Windows
    ``--current-window`` (L) and ``--baseline-window`` (B) are both run counts
    (``1``, ``10``) or both durations (``12h``, ``1d``, ``14d``, ``2w``; ``m``
    for minutes). Windows are anchored at the newest run, not at the clock:
    the same runs always give the same answer, and the output says how old
    the newest run is. With ``--sustained=N`` there are N *current windows*,
    k = 0 (the latest) … N − 1: by counts, current window k holds the runs
    from the (k+1)·L-th newest to the (k·L+1)-th newest; by durations, the
    runs started in ``(T − (k+1)·L, T − k·L]``, T the newest run's start. The
    *baseline* is the B just before all N of them, cut into ⌊B / L⌋ slots of
    the current window's length (by counts, only whole slots); each slot
    with runs gives one value, the mean of its runs (Layerup's ``metric_t``).
    So ``--baseline-window=14d --current-window=1d`` compares today's mean
    with fourteen daily means, like with like, and N current windows share
    one baseline that none of them is part of: a degradation that lasts does
    not raise its own baseline.

σ
    ``μ`` = mean of the baseline's slot values, ``sd`` = their sample standard
    deviation (n − 1), and for each current window ``σ = (its mean − μ) / sd``.
    The baseline needs at least two slots with runs. When ``sd`` is 0, σ is 0
    if the mean equals μ and ±∞ otherwise (any change of a metric that never
    moved is beyond every band; ``inf`` in text, null with ``sigma_infinite``
    in JSON).

Status and exit code (for cron jobs)
    * ``BREACH`` (exit 2): every one of the N current windows has runs and
      ``|σ| ≥ 3``;
    * ``WARN`` (exit 1): otherwise, ``|σ| ≥ 2`` in the latest window;
    * ``OK`` (exit 0): otherwise;
    * exit 3, not enough runs: no run of the series, or the latest window or
      the baseline's two slots are missing (the message says how many runs
      the windows need);
    * exit 4: a usage or input error (an unknown option, a bad window, a
      folder that is not an output folder).

Chart
    ``--html FILE`` writes one self-contained page (no script): the status,
    an inline SVG of the metric over time with the baseline mean and its
    ±2σ and ±3σ bands (μ ± 2·sd, μ ± 3·sd of the latest evaluation), the
    baseline and current windows shaded, and the tables behind it.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Literal, NoReturn, TypeAlias

from ._vocab import ConfigError, JSONObject, JSONValue

__all__ = [
    "EXIT_BREACH",
    "EXIT_INSUFFICIENT",
    "EXIT_OK",
    "EXIT_USAGE",
    "EXIT_WARN",
    "METRICS",
    "Baseline",
    "Current",
    "DriftError",
    "Point",
    "Window",
    "collect",
    "evaluate",
    "main",
    "parse_window",
    "render_html",
    "render_svg",
    "render_text",
]

EXIT_OK, EXIT_WARN, EXIT_BREACH, EXIT_INSUFFICIENT, EXIT_USAGE = 0, 1, 2, 3, 4
METRICS = ("score", "accuracy", "kappa", "ece")
WARN_SIGMA, BREACH_SIGMA = 2.0, 3.0
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DIGITS = 6
Status: TypeAlias = Literal["ok", "warn", "breach", "insufficient"]


class DriftError(ConfigError):
    """A usage or input problem: exit 4, with the message."""


# --------------------------------------------------------------------------- windows


@dataclass(frozen=True)
class Window:
    """A window length: a number of runs, or a duration in seconds."""

    text: str
    runs: int | None = None
    seconds: float | None = None

    @property
    def kind(self) -> Literal["count", "duration"]:
        return "count" if self.runs is not None else "duration"


def parse_window(text: str, option: str = "window") -> Window:
    """``10`` (runs) or ``14d``, ``1d``, ``12h``, ``30m``, ``2w`` (a duration)."""
    value = text.strip().lower()
    if re.fullmatch(r"[0-9]+", value):
        if int(value) < 1:
            raise DriftError(f"{option}: a window holds at least 1 run, got {text!r}")
        return Window(text, runs=int(value))
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([mhdw])", value)
    if not m or float(m.group(1)) <= 0:
        raise DriftError(
            f"{option}: expected a number of runs (10) or a duration (12h, 1d, 14d, 2w), "
            f"got {text!r}"
        )
    return Window(text, seconds=float(m.group(1)) * _UNITS[m.group(2)])


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class Point:
    """One verified, complete run and its metric."""

    path: Path
    run_id: str
    started: datetime
    value: float
    subject: str
    preset: str
    condition: str | None

    @property
    def series(self) -> tuple[str, str, str | None]:
        return self.subject, self.preset, self.condition


@dataclass
class Collected:
    points: list[Point] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    series: tuple[str, str, str | None] | None = None


def _time(text: object) -> datetime | None:
    from .evidence._chain import parse_rfc3339

    when = parse_rfc3339(text)
    if when is None:
        return None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _pillar_score(nodes: object, pillar: str) -> float | None:
    stack: list[object] = list(nodes) if isinstance(nodes, list) else []
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        if node.get("kind") == "pillar" and node.get("id") == pillar:
            return _number(node.get("score"))
        children = node.get("children")
        if isinstance(children, list):
            stack.extend(children)
    return None


def _metric(
    run: Path, summary: Mapping[str, JSONValue], metric: str, pillar: str | None
) -> float | str:
    """The run's value, or why it has none."""
    if metric == "score":
        if summary.get("pairwise"):
            return "a pairwise run (no score)"
        if summary.get("calibration"):
            return "a calibration run (no score; use --metric=accuracy, kappa or ece)"
        value = (
            _pillar_score(summary.get("nodes"), pillar) if pillar else _number(summary.get("score"))
        )
        if value is None:
            return f"no score{f' for pillar {pillar!r}' if pillar else ''}"
        return value
    from .evidence._chain import _read_small, _Unreadable

    try:
        raw = _read_small(run / "calibration.json")
        report: JSONValue = json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        return f"not a calibration run (no calibration.json for {metric})"
    except (OSError, _Unreadable, UnicodeDecodeError, ValueError):
        return "calibration.json unreadable"
    if not isinstance(report, dict):
        return "calibration.json unreadable"
    if pillar:
        pillars = report.get("pillars")
        group = pillars.get(pillar) if isinstance(pillars, dict) else None
    else:
        group = report.get("overall")
    if not isinstance(group, Mapping):
        return f"no pillar {pillar!r} in calibration.json" if pillar else "no overall group"
    value = _number(group.get(metric))
    return value if value is not None else f"{metric} undefined in this run"


def collect(
    out_dir: Path,
    family: str,
    metric: str = "score",
    *,
    pillar: str | None = None,
    subject: str | None = None,
    preset: str | None = None,
    condition: str | None = None,
) -> Collected:
    """The verified, complete runs of one series of *family* under *out_dir*, oldest first."""
    from ._baseline import _read_summary, is_run_dir
    from .evidence._chain import verify_run
    from .evidence._run_dir import is_partial, slug

    if metric not in METRICS:
        raise DriftError(f"--metric: one of {', '.join(METRICS)}, got {metric!r}")
    if not out_dir.is_dir():
        raise DriftError(f"{out_dir}: no such folder")
    if not (out_dir / "runs").is_dir():
        raise DriftError(
            f"{out_dir}: not an output folder (no runs/ inside); give the folder a run "
            "writes to (--agenteval-out, default .agenteval)"
        )
    found = Collected()
    family_dir = out_dir / "runs" / slug(family)
    candidates = sorted(
        run
        for subject_dir in (sorted(family_dir.iterdir()) if family_dir.is_dir() else [])
        if subject_dir.is_dir() and not subject_dir.is_symlink()
        for run in sorted(subject_dir.iterdir())
        if run.is_dir() and not run.is_symlink() and is_run_dir(run)
    )

    def shown(path: Path) -> str:
        return path.relative_to(out_dir).as_posix()

    points: list[Point] = []
    for run in candidates:
        before = _read_summary(run)
        if before is not None and before.get("family") not in (None, family):
            continue
        result = verify_run(run)
        if not result.ok:
            first = result.problems[0] if result.problems else result.message
            found.skipped.append({"path": shown(run), "reason": f"does not verify: {first}"})
            continue
        if not result.complete:
            found.skipped.append(
                {"path": shown(run), "reason": "incomplete (interrupted or still running)"}
            )
            continue
        summary = _read_summary(run)
        started = _time(summary.get("started_at") if summary is not None else None)
        if summary is None or summary != before or started is None:
            found.skipped.append({"path": shown(run), "reason": "no usable summary.json"})
            continue
        if is_partial(summary):
            found.skipped.append(
                {"path": shown(run), "reason": "partial run (some of the preset's items ran)"}
            )
            continue
        value = _metric(run, summary, metric, pillar)
        if isinstance(value, str):
            found.skipped.append({"path": shown(run), "reason": value})
            continue
        run_condition = summary.get("condition")
        point = Point(
            run,
            str(summary.get("run_id") or ""),
            started,
            value,
            str(summary.get("subject") or ""),
            str(summary.get("preset") or ""),
            str(run_condition) if run_condition else None,
        )
        if (
            (subject is not None and point.subject != subject)
            or (preset is not None and point.preset != preset)
            or (condition is not None and point.condition != condition)
        ):
            continue
        points.append(point)
    points.sort(key=lambda p: (p.started, p.path.name))
    if not points:
        return found
    series = points[-1].series
    others: dict[tuple[str, str, str | None], int] = {}
    for p in points:
        if p.series != series:
            others[p.series] = others.get(p.series, 0) + 1
    if others:
        listed = "; ".join(
            f"{_series_text(s)} ({n} runs)" for s, n in sorted(others.items(), key=str)
        )
        found.notes.append(
            f"the series of the newest run is used ({_series_text(series)}); other series of "
            f"{family} here: {listed} — choose one with --subject, --preset, --condition"
        )
    found.points = [p for p in points if p.series == series]
    found.series = series
    return found


def _series_text(series: tuple[str, str, str | None]) -> str:
    subject, preset, condition = series
    return f"subject {subject} · preset {preset}" + (
        f" · condition {condition}" if condition else ""
    )


# --------------------------------------------------------------------------- σ


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


@dataclass(frozen=True)
class Baseline:
    """The baseline window: ⌊B / L⌋ slots of the current window's length, oldest first."""

    slots: list[list[Point]]
    span: tuple[datetime, datetime] | None = None  # durations only

    @property
    def values(self) -> list[float]:
        """``metric_t``: the mean of each slot that has runs."""
        return [_mean([p.value for p in slot]) for slot in self.slots if slot]

    @property
    def filled(self) -> int:
        return sum(1 for slot in self.slots if slot)

    @property
    def runs(self) -> list[Point]:
        return [p for slot in self.slots for p in slot]

    @property
    def mu(self) -> float:
        return _mean(self.values)

    @property
    def sd(self) -> float:
        return statistics.stdev(self.values)


@dataclass(frozen=True)
class Current:
    """Current window *index* (0: the latest) and its σ against the baseline."""

    index: int
    points: list[Point]
    span: tuple[datetime, datetime] | None = None  # durations only
    sigma: float | None = None  # None: no run in it, or no usable baseline

    @property
    def mean(self) -> float | None:
        return _mean([p.value for p in self.points]) if self.points else None

    @property
    def level(self) -> str:
        if self.sigma is None:
            return "n/a"
        s = abs(self.sigma)
        return "breach" if s >= BREACH_SIGMA else "warn" if s >= WARN_SIGMA else "ok"


def sigma_of(mean: float, baseline: Baseline) -> float:
    """``(mean − μ) / sd``; with ``sd`` 0: 0 when equal, else ±∞."""
    sd, diff = baseline.sd, mean - baseline.mu
    if sd == 0:
        return 0.0 if abs(diff) < 1e-12 else math.copysign(math.inf, diff)
    return diff / sd


def _check_windows(baseline: Window, current: Window) -> int:
    """Slots in the baseline window (at least two); DriftError when the windows do not fit."""
    if baseline.kind != current.kind:
        raise DriftError(
            "--baseline-window and --current-window must both be run counts (10, 1) or both "
            f"durations (14d, 1d); got {baseline.text!r} and {current.text!r}"
        )
    if baseline.runs is not None and current.runs is not None:
        slots = baseline.runs // current.runs
    else:
        assert baseline.seconds is not None and current.seconds is not None
        slots = math.floor(baseline.seconds / current.seconds + 1e-9)
    if slots < 2:
        raise DriftError(
            f"--baseline-window {baseline.text!r} must hold at least two current windows "
            f"({current.text!r}): its standard deviation is over those windows' values"
        )
    return slots


def _split(
    points: Sequence[Point], current: Window, slots: int, n: int
) -> tuple[list[Current], Baseline]:
    """The *n* latest current windows (latest first) and the baseline before all of them."""
    if current.runs is not None:
        length, total = current.runs, len(points)
        currents = [
            Current(k, list(points[max(total - (k + 1) * length, 0) : max(total - k * length, 0)]))
            for k in range(n)
        ]
        base_end = total - n * length
        base_slots = []
        for j in range(slots, 0, -1):  # oldest first; only whole slots count
            lo = base_end - j * length
            base_slots.append(list(points[lo : lo + length]) if lo >= 0 else [])
        return currents, Baseline(base_slots)
    assert current.seconds is not None
    step = timedelta(seconds=current.seconds)
    newest = points[-1].started
    currents = []
    for k in range(n):
        since, until = newest - (k + 1) * step, newest - k * step
        currents.append(
            Current(k, [p for p in points if since < p.started <= until], span=(since, until))
        )
    start = newest - n * step
    spans = [(start - j * step, start - (j - 1) * step) for j in range(slots, 0, -1)]
    base_slots = [[p for p in points if a < p.started <= b] for a, b in spans]
    return currents, Baseline(base_slots, span=(spans[0][0], start))


@dataclass(frozen=True)
class Report:
    family: str
    metric: str
    pillar: str | None
    baseline_window: Window
    current_window: Window
    sustained: int
    collected: Collected
    baseline: Baseline | None
    currents: list[Current]
    status: Status
    notes: list[str]

    @property
    def exit_code(self) -> int:
        return {
            "ok": EXIT_OK,
            "warn": EXIT_WARN,
            "breach": EXIT_BREACH,
            "insufficient": EXIT_INSUFFICIENT,
        }[self.status]


def evaluate(
    collected: Collected,
    *,
    family: str,
    metric: str,
    baseline: Window,
    current: Window,
    sustained: int = 1,
    pillar: str | None = None,
) -> Report:
    """σ of each of the *sustained* latest current windows against the baseline before them.

    BREACH: every one of them has runs and ``|σ| ≥ 3``. WARN: otherwise the latest has
    ``|σ| ≥ 2``. Not enough runs: the latest window or the baseline (two slots with
    runs) is missing.
    """
    if sustained < 1:
        raise DriftError(f"--sustained: at least 1, got {sustained}")
    slots = _check_windows(baseline, current)
    points = collected.points
    notes = list(collected.notes)

    def report(status: Status, base: Baseline | None, currents: list[Current]) -> Report:
        return Report(
            family,
            metric,
            pillar,
            baseline,
            current,
            sustained,
            collected,
            base,
            currents,
            status,
            notes,
        )

    if not points:
        notes.insert(0, f"not enough runs: no verified, complete run of {family} with {metric}")
        return report("insufficient", None, [])
    currents, base = _split(points, current, slots, sustained)
    if not currents[0].points or base.filled < 2:
        if current.runs is not None:
            need = sustained * current.runs + 2 * current.runs
            why = (
                f"{len(points)} run(s) in the series; {sustained} current window(s) of "
                f"{current.runs} and a baseline of two windows need at least {need}"
            )
        else:
            why = (
                f"the baseline before the {sustained} current window(s) has runs in "
                f"{base.filled} of its {slots} windows; at least 2 are needed"
            )
        notes.insert(0, f"not enough runs: {why}")
        return report("insufficient", base, currents)
    currents = [
        Current(c.index, c.points, c.span, None if c.mean is None else sigma_of(c.mean, base))
        for c in currents
    ]
    latest = currents[0]
    assert latest.sigma is not None
    beyond = [c for c in currents if c.sigma is not None and abs(c.sigma) >= BREACH_SIGMA]
    status: Literal["ok", "warn", "breach"]
    if len(beyond) == sustained:
        status = "breach"
    elif abs(latest.sigma) >= WARN_SIGMA:
        status = "warn"
        if abs(latest.sigma) >= BREACH_SIGMA:
            notes.append(
                f"|σ| ≥ 3 in {len(beyond)} of the {sustained} latest current windows: a BREACH "
                f"needs all {sustained} (--sustained)"
            )
    else:
        status = "ok"
    empty = [c.index for c in currents if not c.points]
    if empty:
        notes.append(f"current window(s) {empty} (0 = latest) have no run")
    if base.filled < slots:
        notes.append(f"the baseline has runs in {base.filled} of its {slots} windows")
    return report(status, base, currents)


# --------------------------------------------------------------------------- output


def _r(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, _DIGITS)


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _rel(p: Point, out_dir: Path | None) -> str:
    if out_dir is not None:
        try:
            return p.path.relative_to(out_dir).as_posix()
        except ValueError:
            pass
    return str(p.path)


def to_json(report: Report, out_dir: Path | None = None) -> JSONObject:
    """The ``--format=json`` document (schema ``pytest-agenteval/drift/1``)."""
    c = report.collected
    base = report.baseline
    role = _roles(report)
    usable = base is not None and base.filled >= 2

    def span(value: tuple[datetime, datetime] | None) -> JSONObject:
        return {"from": _iso(value[0]), "to": _iso(value[1])} if value else {}

    series = c.series
    return {
        "schema": "pytest-agenteval/drift/1",
        "family": report.family,
        "metric": report.metric,
        "pillar": report.pillar,
        "series": None
        if series is None
        else {"subject": series[0], "preset": series[1], "condition": series[2]},
        "windows": {
            "baseline": report.baseline_window.text,
            "current": report.current_window.text,
            "kind": report.current_window.kind,
            "sustained": report.sustained,
        },
        "thresholds": {"warn": WARN_SIGMA, "breach": BREACH_SIGMA},
        "status": report.status,
        "exit_code": report.exit_code,
        "baseline": None
        if base is None
        else {
            "windows": len(base.slots),
            "windows_with_runs": base.filled,
            "runs": len(base.runs),
            "values": [_r(v) for v in base.values],
            "mean": _r(base.mu) if base.filled else None,
            "sd": _r(base.sd) if usable else None,
            **span(base.span),
        },
        "current": [
            {
                "index": cur.index,
                "runs": [_rel(p, out_dir) for p in cur.points],
                "mean": _r(cur.mean),
                "sigma": _r(cur.sigma),
                "sigma_infinite": cur.sigma is not None and math.isinf(cur.sigma),
                "level": cur.level,
                **span(cur.span),
            }
            for cur in report.currents
        ],
        "runs": [
            {
                "path": _rel(p, out_dir),
                "run_id": p.run_id,
                "started_at": _iso(p.started),
                "value": _r(p.value),
                "window": role.get(p.path),
            }
            for p in c.points
        ],
        "skipped": [dict(s) for s in c.skipped],
        "notes": list(report.notes),
    }


def _roles(report: Report) -> dict[Path, str]:
    """Each run's window: ``baseline`` or ``current K``."""
    role: dict[Path, str] = {}
    if report.baseline is not None:
        role.update({p.path: "baseline" for p in report.baseline.runs})
    for cur in report.currents:
        role.update({p.path: f"current {cur.index}" for p in cur.points})
    return role


def _f(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{value:.{digits}f}"


def _sigma_text(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return _f(value)
    return ("+" if value >= 0 else "") + f"{value:.2f}"


def _age(newest: datetime, now: datetime) -> str:
    seconds = max((now - newest).total_seconds(), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return "just now"


def render_text(report: Report, now: datetime | None = None) -> str:
    now = now or datetime.now(timezone.utc)
    c = report.collected
    what = report.metric + (f" of pillar {report.pillar}" if report.pillar else "")
    lines = [
        f"agenteval drift: {report.family} · {what}"
        + (f" · {_series_text(c.series)}" if c.series else "")
    ]
    newest = (
        f", newest {_iso(c.points[-1].started)} ({_age(c.points[-1].started, now)})"
        if c.points
        else ""
    )
    lines.append(f"runs: {len(c.points)} verified and complete{newest}")
    for s in c.skipped:
        lines.append(f"  skipped {s['path']}: {s['reason']}")
    lines.append(
        f"windows: baseline {report.baseline_window.text}, current "
        f"{report.current_window.text} ({report.current_window.kind}s), sustained "
        f"{report.sustained}"
    )
    base = report.baseline
    if base is not None and base.filled >= 2 and report.status != "insufficient":
        lines.append(
            f"baseline: {len(base.runs)} run(s) in {base.filled} of {len(base.slots)} windows · "
            f"mean {_f(base.mu)} · sd {_f(base.sd)}"
        )
        lines.append(
            f"bands: ±2σ [{_f(base.mu - 2 * base.sd)}, {_f(base.mu + 2 * base.sd)}] · "
            f"±3σ [{_f(base.mu - 3 * base.sd)}, {_f(base.mu + 3 * base.sd)}]"
        )
        for cur in report.currents:
            name = "current" if cur.index == 0 else f"current-{cur.index}"
            lines.append(
                f"{name}: {len(cur.points)} run(s) · mean {_f(cur.mean)} · "
                f"σ {_sigma_text(cur.sigma)} ({cur.level})"
            )
    for note in report.notes:
        lines.append(f"note: {note}")
    status = {
        "ok": "OK",
        "warn": "WARN (|σ| ≥ 2)",
        "breach": f"BREACH (|σ| ≥ 3 in {report.sustained} current window(s) in a row)",
        "insufficient": "NOT ENOUGH RUNS",
    }[report.status]
    lines.append(f"drift: {status} — exit {report.exit_code}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- chart

_W, _H, _L, _R, _T, _B = 720, 320, 60, 20, 30, 40
_COLOURS = {"ok": "#2e7d32", "warn": "#ef6c00", "breach": "#c62828", "insufficient": "#616161"}


def render_svg(report: Report) -> str:
    """The metric over time: each run, the baseline mean, its ±2σ and ±3σ bands, the
    baseline and current windows shaded, each current window's mean (deterministic bytes)."""
    points = report.collected.points
    base = report.baseline
    banded = base is not None and base.filled >= 2 and report.status != "insufficient"
    values = [p.value for p in points]
    mu = sd = 0.0
    if banded:
        assert base is not None
        mu, sd = base.mu, base.sd
        values += [mu - 3 * sd, mu + 3 * sd]
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    if hi - lo < 1e-9:
        lo, hi = lo - 0.05, hi + 0.05
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    times = [p.started.timestamp() for p in points]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    by_index = t1 - t0 < 1e-6  # all at one instant: place the runs by their order
    colour = _COLOURS[report.status]

    def x(i: int) -> float:
        frac = (i / max(len(points) - 1, 1)) if by_index else (times[i] - t0) / (t1 - t0)
        return _L + frac * (_W - _L - _R)

    def y(v: float) -> float:
        return _T + (hi - v) / (hi - lo) * (_H - _T - _B)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" '
        f'height="{_H}" role="img" aria-label="{html.escape(report.metric)} over time">',
        f'<rect x="0" y="0" width="{_W}" height="{_H}" fill="#fff"/>',
    ]
    index = {p.path: i for i, p in enumerate(points)}
    if banded and base is not None:
        # beyond ±3σ (breach) red, between ±2σ and ±3σ (warn) amber, within ±2σ green
        out.append(
            f'<rect x="{_L}" y="{_T}" width="{_W - _L - _R}" height="{_H - _T - _B}" '
            'fill="#fdecea"><title>beyond ±3σ</title></rect>'
        )
        for k, fill in ((3, "#fff4e0"), (2, "#e8f5e9")):
            top, bottom = y(min(mu + k * sd, hi)), y(max(mu - k * sd, lo))
            out.append(
                f'<rect x="{_L}" y="{top:.2f}" width="{_W - _L - _R}" '
                f'height="{max(bottom - top, 0):.2f}" fill="{fill}"><title>±{k}σ: '
                f"{_f(mu - k * sd)} to {_f(mu + k * sd)}</title></rect>"
            )
        out.append(
            f'<line x1="{_L}" y1="{y(mu):.2f}" x2="{_W - _R}" y2="{y(mu):.2f}" '
            f'stroke="#1565c0" stroke-dasharray="6 4"><title>baseline mean {_f(mu)}</title></line>'
        )
        spans: list[tuple[list[int], str, str]] = [
            ([index[p.path] for p in base.runs], "#1565c0", "baseline window")
        ]
        spans += [
            ([index[p.path] for p in c.points], colour, f"current window {c.index}")
            for c in report.currents
        ]
        for idx, fill, name in spans:
            if idx:
                a, b = x(min(idx)) - 6, x(max(idx)) + 6
                out.append(
                    f'<rect x="{a:.2f}" y="{_T}" width="{b - a:.2f}" height="{_H - _T - _B}" '
                    f'fill="{fill}" fill-opacity="0.07"><title>{name}</title></rect>'
                )
        for c in report.currents:
            if c.points and c.mean is not None:
                idx = [index[p.path] for p in c.points]
                cy = y(c.mean)
                out.append(
                    f'<line x1="{x(min(idx)) - 8:.2f}" y1="{cy:.2f}" x2="{x(max(idx)) + 8:.2f}" '
                    f'y2="{cy:.2f}" stroke="{colour}" stroke-width="3"><title>current window '
                    f"{c.index}: mean {_f(c.mean)}, σ {_sigma_text(c.sigma)}</title></line>"
                )
    for k in range(5):  # y axis
        v = lo + (hi - lo) * k / 4
        out.append(
            f'<line x1="{_L - 4}" y1="{y(v):.2f}" x2="{_W - _R}" y2="{y(v):.2f}" stroke="#eee"/>'
            f'<text x="{_L - 8}" y="{y(v) + 4:.2f}" font-size="11" text-anchor="end">{v:.3f}</text>'
        )
    if len(points) > 1:
        path = " ".join(
            f"{'M' if i == 0 else 'L'}{x(i):.2f},{y(p.value):.2f}" for i, p in enumerate(points)
        )
        out.append(f'<path d="{path}" fill="none" stroke="#90a4ae" stroke-width="1"/>')
    current = {p.path for c in report.currents for p in c.points}
    for i, p in enumerate(points):
        fill = colour if p.path in current else "#37474f"
        out.append(
            f'<circle cx="{x(i):.2f}" cy="{y(p.value):.2f}" r="3.5" fill="{fill}">'
            f"<title>{_iso(p.started)} {html.escape(p.path.name)}: {_f(p.value)}</title></circle>"
        )
    if points:
        below = _H - _B + 16
        out.append(f'<text x="{_L}" y="{below}" font-size="11">{_iso(points[0].started)}</text>')
        out.append(
            f'<text x="{_W - _R}" y="{below}" font-size="11" text-anchor="end">'
            f"{_iso(points[-1].started)}</text>"
        )
    out.append(
        f'<text x="{_L}" y="18" font-size="13">{html.escape(report.family)} · '
        f"{html.escape(report.metric)}: baseline mean (dashed); within ±2σ green, ±2σ to ±3σ "
        "amber, beyond ±3σ red</text>"
    )
    out.append("</svg>")
    return "\n".join(out)


def render_html(report: Report, out_dir: Path | None = None) -> str:
    """One self-contained page: the status, the text report, the chart and its tables."""
    e = html.escape
    # the numbers as --format=json rounds them (_r), so the page and the JSON agree
    rows = "".join(
        f"<tr><td>{c.index}</td><td>{len(c.points)}</td><td>{_f(_r(c.mean))}</td>"
        f"<td>{'inf' if c.sigma is not None and math.isinf(c.sigma) else _f(_r(c.sigma), 2)}"
        f"</td><td>{e(c.level)}</td></tr>"
        for c in report.currents
    )
    role = _roles(report)
    runs = "".join(
        f"<tr><td>{e(_iso(p.started))}</td><td>{e(_rel(p, out_dir))}</td><td>{_f(_r(p.value))}"
        f"</td><td>{e(role.get(p.path) or '')}</td></tr>"
        for p in report.collected.points
    )
    skipped = "".join(
        f"<li>{e(s['path'])}: {e(s['reason'])}</li>" for s in report.collected.skipped
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in report.notes)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>Drift · {e(report.family)} · {e(report.metric)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:60em}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}
.banner{{padding:.6em 1em;color:#fff;background:{_COLOURS[report.status]}}}
pre{{white-space:pre-wrap}}</style>
</head><body>
<h1>Drift: {e(report.family)} · {e(report.metric)}</h1>
<p class="banner">{e(report.status.upper())} — exit {report.exit_code}</p>
<pre>{e(render_text(report))}</pre>
{render_svg(report)}
<h2>Current windows (0 = latest)</h2>
<table><tr><th>window</th><th>runs</th><th>mean</th><th>σ</th><th>level</th></tr>{rows}</table>
<h2>Runs</h2>
<table><tr><th>started</th><th>run</th><th>value</th><th>window</th></tr>{runs}</table>
{f"<h2>Skipped</h2><ul>{skipped}</ul>" if skipped else ""}
{f"<h2>Notes</h2><ul>{notes}</ul>" if notes else ""}
</body></html>
"""


# --------------------------------------------------------------------------- command


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit 2: that is BREACH here
        raise DriftError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agenteval drift",
        description="σ of a family's metric in the latest window against a trailing baseline "
        "(Layerup 13.4): WARN at |σ| ≥ 2, BREACH at |σ| ≥ 3 sustained for N windows.",
        epilog="exit codes: 0 OK, 1 WARN, 2 BREACH, 3 not enough runs, 4 usage or input error",
    )
    parser.add_argument(
        "out_dir", type=Path, metavar="OUT_DIR", help="an output folder (holding runs/)"
    )
    parser.add_argument("--family", required=True, help="the benchmark family")
    parser.add_argument("--metric", choices=METRICS, default="score", help="default: score")
    parser.add_argument(
        "--pillar", help="a pillar's score (or calibration metric) instead of the whole"
    )
    parser.add_argument(
        "--baseline-window",
        default="10",
        metavar="W",
        help="runs (10) or a duration (14d); default 10",
    )
    parser.add_argument(
        "--current-window", default="1", metavar="W", help="runs (1) or a duration (1d); default 1"
    )
    parser.add_argument(
        "--sustained",
        default="1",
        metavar="N",
        help="current windows in a row for a BREACH (default 1)",
    )
    parser.add_argument("--subject", help="only runs of this subject (as summary.json names it)")
    parser.add_argument("--preset", help="only runs of this preset")
    parser.add_argument("--condition", help="only runs of this condition")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--html", type=Path, metavar="FILE", help="also write the chart page here")
    return parser


def _emit(text: str) -> None:
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(argv)
    except DriftError as exc:
        print(f"agenteval drift: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        if not re.fullmatch(r"[0-9]+", args.sustained.strip()) or int(args.sustained) < 1:
            raise DriftError(f"--sustained: a whole number of windows >= 1, got {args.sustained!r}")
        baseline = parse_window(args.baseline_window, "--baseline-window")
        current = parse_window(args.current_window, "--current-window")
        _check_windows(baseline, current)
        collected = collect(
            args.out_dir,
            args.family,
            args.metric,
            pillar=args.pillar,
            subject=args.subject,
            preset=args.preset,
            condition=args.condition,
        )
        report = evaluate(
            collected,
            family=args.family,
            metric=args.metric,
            baseline=baseline,
            current=current,
            sustained=int(args.sustained),
            pillar=args.pillar,
        )
    except DriftError as exc:
        print(f"agenteval drift: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.html is not None:
        from .evidence._chain import write_file_atomic

        try:
            write_file_atomic(args.html, render_html(report, args.out_dir).encode("utf-8"))
        except OSError as exc:
            print(
                f"agenteval drift: cannot write {args.html} ({exc.strerror or exc})",
                file=sys.stderr,
            )
            return EXIT_USAGE
    if args.format == "json":
        _emit(json.dumps(to_json(report, args.out_dir), indent=2, ensure_ascii=False) + "\n")
    else:
        _emit(render_text(report))
    return report.exit_code

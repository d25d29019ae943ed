"""The baseline: an earlier run directory, found, verified and loaded before any call.

``--baseline`` takes:

* ``latest`` — the newest *complete* run of the same family, preset,
  condition and subject under this run's output folder
  (``<out>/runs/<family>/<subject>/``);
* the path of an output folder (one holding ``runs/``, such as a CI artifact or
  cache restored next to the checkout): the same search there;
* the path of one run directory (``manifest.json`` and ``results.jsonl`` inside):
  that run, for the family it belongs to.

Whatever is chosen is checked with :func:`~pytest_agenteval.evidence._chain.verify_run`
first: a run whose evidence does not verify (a changed, added or deleted
file, a broken chain) is a :class:`BaselineError`, which the plugin turns
into a usage error before any subject or judge is called. While searching,
runs that are intact but incomplete (interrupted, or still running) are
skipped; a tampered one stops the search — silently falling back to an older
run would hide the tampering.

Every run also writes a pointer to itself, ``<out>/latest/<family>.json``
(``<family>--<condition>.json`` for a condition): a plain JSON file (no
symbolic link, so it survives artifacts and caches) naming the run directory
relative to the output folder, its run id and chain head, for CI scripts.

Pure: no pytest. Reads only regular files, each bounded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ._vocab import ConfigError, JSONObject, JSONValue
from .evidence._chain import (
    MANIFEST_NAME,
    RESULTS_NAME,
    _read_small,
    _Unreadable,
    verify_run,
    write_file_atomic,
)
from .evidence._run_dir import is_partial, newest_first, slug

__all__ = [
    "Baseline",
    "BaselineError",
    "BaselineSearch",
    "load_run",
    "pointer_path",
    "search",
    "write_pointer",
]

SUMMARY_NAME = "summary.json"
LATEST = "latest"


class BaselineError(ConfigError):
    """A baseline that cannot be used: names the path and what is wrong."""


@dataclass(frozen=True)
class Baseline:
    """A verified, complete run directory and its summary."""

    path: Path
    run_id: str
    chain_head: str  # the seal's hash: what `agenteval verify --expect-head` takes
    summary: JSONObject
    #: why the run did not complete (only when loaded with ``require_complete=False``)
    incomplete: str | None = None

    @property
    def family(self) -> str:
        return str(self.summary.get("family") or "")

    @property
    def preset(self) -> str:
        return str(self.summary.get("preset") or "")

    @property
    def subject(self) -> str:
        return str(self.summary.get("subject") or "")

    @property
    def condition(self) -> str | None:
        value = self.summary.get("condition")
        return None if value in (None, "") else str(value)

    def ref(self, shown_path: str | None = None) -> dict[str, str | None]:
        """What summary.json records of the baseline."""
        return {
            "run_id": self.run_id,
            "path": shown_path if shown_path is not None else str(self.path),
            "chain_head": self.chain_head,
            "family": self.family,
            "preset": self.preset,
            "subject": self.subject,
            "condition": self.condition,
        }


def is_run_dir(path: Path) -> bool:
    return (path / MANIFEST_NAME).is_file() and (path / RESULTS_NAME).is_file()


def _read_summary(run_dir: Path) -> JSONObject | None:
    """summary.json as a dict, or None when it is missing or not a JSON object."""
    try:
        raw = _read_small(run_dir / SUMMARY_NAME)
    except (OSError, _Unreadable):
        return None
    try:
        data: JSONValue = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_run(run_dir: Path, *, require_complete: bool = True) -> Baseline:
    """One run directory, verified (and complete, unless told otherwise), with its summary.

    Raises :class:`BaselineError` when the directory is not a run, its
    evidence does not verify, it did not complete, or it has no usable summary.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BaselineError(f"{run_dir}: no such run directory")
    if not is_run_dir(run_dir):
        raise BaselineError(
            f"{run_dir}: not a run directory (no {MANIFEST_NAME} and {RESULTS_NAME}) nor an "
            "output folder (no runs/ inside)"
        )
    before = _read_summary(run_dir)
    result = verify_run(run_dir)
    if not result.ok:
        first = result.problems[0] if result.problems else result.message
        raise BaselineError(
            f"{run_dir}: the baseline's evidence does not verify ({first}); "
            "refusing to compare against it (run `agenteval verify` on it for every problem)"
        )
    if require_complete and not result.complete:
        raise BaselineError(
            f"{run_dir}: the baseline run did not complete ({result.message}); "
            "a baseline must be a complete run"
        )
    if not result.sealed:  # an interrupted run is sealed; one that crashed is not
        raise BaselineError(
            f"{run_dir}: the run was never sealed ({result.message}), so nothing in its "
            f"evidence binds its {SUMMARY_NAME}; only a sealed run is compared"
        )
    summary = _read_summary(run_dir)
    if summary is None or summary != before or "nodes" not in summary:
        raise BaselineError(f"{run_dir}: {SUMMARY_NAME} is missing or not a run summary")
    return Baseline(
        path=run_dir,
        run_id=str(summary.get("run_id") or ""),
        chain_head=str(result.head or ""),
        summary=summary,
        incomplete=None if result.complete else result.message,
    )


@dataclass
class BaselineSearch:
    """The baseline(s) found for one family × preset × condition, before the run starts.

    The subject of a fixture is only known once its fixture is set up, so a
    search without a subject keeps the newest complete run of each subject
    folder, and :meth:`pick` chooses at the end.
    """

    where: Path
    explicit: Baseline | None = None
    by_subject: dict[str, Baseline] = field(default_factory=dict)
    note: str | None = None

    def pick(self, subject: str) -> tuple[Baseline | None, str | None]:
        """The baseline for *subject*, or None and why."""
        if self.explicit is not None:
            return self.explicit, self.note
        found = self.by_subject.get(slug(subject))
        if found is not None:
            return found, self.note
        if self.note:
            return None, self.note
        return None, (
            f"no complete earlier run of this family, preset and subject ({subject}) under "
            f"{self.where}: nothing to compare with, the regression term was not checked"
        )


def _run_dirs(subject_dir: Path) -> list[Path]:
    """Run directories of one subject folder, newest first (by their manifests' start:
    :func:`~pytest_agenteval.evidence._run_dir.newest_first`)."""
    try:
        children = [p for p in subject_dir.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
    return newest_first(children)


def _newest(subject_dir: Path, family: str, preset: str, condition: str | None) -> Baseline | None:
    for run_dir in _run_dirs(subject_dir):
        if not ((run_dir / MANIFEST_NAME).exists() or (run_dir / RESULTS_NAME).exists()):
            continue  # a stray folder, not a run (one with either file is judged by verify)
        summary = _read_summary(run_dir)
        if summary is not None and (
            summary.get("family") != family
            or summary.get("preset") != preset
            or (summary.get("condition") or None) != condition
        ):
            continue  # another preset or condition of this family: not a candidate
        result = verify_run(run_dir)
        if not result.ok:
            first = result.problems[0] if result.problems else result.message
            raise BaselineError(
                f"{run_dir}: the newest run of {family} · {preset} here does not verify "
                f"({first}); refusing to fall back to an older one silently — remove or "
                "restore it, or name a baseline with --baseline=RUN_DIR"
            )
        if not result.complete or summary is None or is_partial(summary):
            # interrupted or still running, or a subset (-k): the newest *complete* run of
            # the preset counts, or one scenario kept would stand for them all
            continue
        return load_run(run_dir)
    return None


def search(
    spec: str,
    out_dir: Path,
    *,
    family: str,
    preset: str,
    condition: str | None = None,
    subject: str | None = None,
    base: Path | None = None,
) -> BaselineSearch:
    """Resolve ``--baseline`` for one family (see the module docstring).

    *out_dir* is this run's output folder (for ``latest``); a relative *spec*
    path is taken from *base* (the invocation directory).
    """
    if spec.strip() == LATEST:
        root = out_dir
    else:
        path = Path(spec).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        if not path.exists():
            raise BaselineError(f"{spec}: no such run directory or output folder")
        if is_run_dir(path):
            run = load_run(path)
            if run.family != family:
                return BaselineSearch(
                    path,
                    note=f"the baseline {spec} is a run of {run.family!r}, not of {family!r}: "
                    "not compared",
                )
            return BaselineSearch(path, explicit=run)
        if not (path / "runs").is_dir():
            raise BaselineError(
                f"{spec}: not a run directory (no {MANIFEST_NAME} and {RESULTS_NAME}) nor an "
                "output folder (no runs/ inside)"
            )
        root = path
    family_dir = root / "runs" / slug(family)
    out = BaselineSearch(family_dir)
    if not family_dir.is_dir():
        return out
    subject_dirs = (
        [family_dir / slug(subject)]
        if subject
        else sorted(p for p in family_dir.iterdir() if p.is_dir() and not p.is_symlink())
    )
    for subject_dir in subject_dirs:
        if subject_dir.is_dir():
            found = _newest(subject_dir, family, preset, condition)
            if found is not None:
                out.by_subject[subject_dir.name] = found
    return out


def pointer_path(out_dir: Path, family: str, condition: str | None = None) -> Path:
    name = slug(family) + (f"--{slug(condition)}" if condition else "")
    return out_dir / LATEST / f"{name}.json"


def write_pointer(out_dir: Path, run_dir: Path, data: Mapping[str, object]) -> Path:
    """Write ``<out>/latest/<family>.json`` for the run just finished (atomically)."""
    condition = data.get("condition")
    target = pointer_path(out_dir, str(data["family"]), str(condition) if condition else None)
    try:
        rel = run_dir.resolve().relative_to(out_dir.resolve()).as_posix()
    except ValueError:
        rel = str(run_dir)
    body = {"schema": "pytest-agenteval/latest/1", **data, "path": rel}
    target.parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(target, (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode())
    return target

"""The run directory and ``summary.json``.

Layout: ``<out>/runs/<family>/<subject>/<UTC timestamp>-<short id>/``. Names
built from ids are slugged so that nothing escapes the output root, and a
run directory is never reused.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._evals import EvalResult

if TYPE_CHECKING:
    from ._session import AgentevalState, FamilyOutcome

_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{i}" for p in ("com", "lpt") for i in range(10)}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def slug(name: str, *, max_len: int = 64) -> str:
    """A file-name-safe, case-folded form of *name* that cannot traverse paths.

    Lossy names get a short hash of the original, so two names that differ
    only in what was dropped (case, accents, punctuation) do not collide.
    """
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    text = _UNSAFE.sub("-", text).strip(".-_").lower()
    text = re.sub(r"-{2,}", "-", text)
    if text.split(".")[0] in _RESERVED:
        text = "_" + text
    lossy = text != name or len(text) > max_len
    if not text:
        text = "unnamed"
    if lossy:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        text = f"{text[: max_len - 9]}-{digest}"
    return text


def node_dict(result: EvalResult) -> dict[str, Any]:
    """A summary node: the contract keys plus a few that help a reader."""
    node: dict[str, Any] = {
        "id": result.key,
        "kind": result.kind,
        "title": result.name,
        "score": None if result.score is None else round(result.score, 6),
        "verdict": result.verdict,
        "weight": round(result.weight, 6),
        "aggregation": result.aggregation,
        "severity": result.severity,
        "counts": result.counts(),
        "children": [node_dict(c) for c in result.children if c.kind != "judge"],
    }
    if result.error:
        node["error"] = result.error
    if result.reasoning and result.kind != "scenario":
        node["note"] = result.reasoning
    return node


def summary_dict(
    state: AgentevalState, outcome: FamilyOutcome, run_id: str, ended_at: datetime
) -> dict[str, Any]:
    from . import __version__

    plan, tree, gate = outcome.plan, outcome.tree, outcome.gate
    counts = tree.counts() if tree else dict.fromkeys(("pass", "warn", "fail", "error", "skipped"), 0)
    return {
        "schema": "pytest-agenteval/summary/1",
        "run_id": run_id,
        "family": plan.family.name,
        "family_version": plan.family.spec.version,
        "preset": plan.preset,
        "subject": outcome.bucket.subject,
        "judge": state.judge_specs or ["rules"],
        "score": None if tree is None or tree.score is None else round(tree.score, 6),
        "verdict": tree.verdict if tree else "error",
        "bands": {"pass": plan.root_bands.pass_, "warn": plan.root_bands.warn},
        "gate": gate.to_dict(),
        "items": {
            "passed": counts["pass"] + counts["warn"],
            "warned": counts["warn"],
            "failed": counts["fail"],
            "errors": counts["error"],
            "skipped": counts["skipped"],
        },
        "nodes": [node_dict(tree)] if tree else [],
        "started_at": _rfc3339(state.started_at),
        "ended_at": _rfc3339(ended_at),
        "plugin_version": __version__,
    }


def _rfc3339(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_run_dir(out: Path, family: str, subject: str, when: datetime, seed: str) -> Path:
    stamp = when.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    short = hashlib.sha256(seed.encode()).hexdigest()[:10]
    base = out / "runs" / slug(family) / slug(subject)
    candidate = base / f"{stamp}-{short}"
    n = 1
    while candidate.exists():
        n += 1
        candidate = base / f"{stamp}-{short}-{n}"
    resolved_out = out.resolve()
    if not candidate.resolve().is_relative_to(resolved_out):  # belt and braces
        raise ValueError(f"run directory {candidate} escapes {out}")
    candidate.mkdir(parents=True)
    return candidate


def write_run(state: AgentevalState, outcome: FamilyOutcome) -> Path:
    from ._evidence import write_file_atomic

    plan, bucket = outcome.plan, outcome.bucket
    ended = datetime.now(timezone.utc)
    seed = json.dumps([plan.family.name, plan.preset, str(state.started_at), sorted(bucket.leaves)])
    run_id = hashlib.sha256(seed.encode()).hexdigest()
    out = state.out_dir if state.out_dir.is_absolute() else state.config.invocation_params.dir / state.out_dir
    run_dir = new_run_dir(out, plan.family.name, bucket.subject, state.started_at, seed)
    summary = summary_dict(state, outcome, run_id, ended)
    write_file_atomic(run_dir / "summary.json", (json.dumps(summary, indent=2, ensure_ascii=False) + "\n").encode())
    return run_dir

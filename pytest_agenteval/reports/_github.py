"""GitHub Actions: the job summary and ``::error`` annotations of a benchmark run.

* When ``GITHUB_STEP_SUMMARY`` names a file, the run appends one Markdown
  section per family: verdict and gate, the gate's reasons and notes, the
  pillar table, the suites, and the comparison with the baseline (worst first).
* When ``GITHUB_ACTIONS`` is ``true``, failed critical scenarios and a failing
  regression (with the scenarios that got worse) are also printed as
  ``::error`` workflow commands, located on the scenario's file and line when
  that file is in the repository. GitHub shows at most ten error annotations
  per step, so at most ten are printed, the last one saying how many more
  there are.

Pure functions of the run model (:class:`~pytest_agenteval._model.RunSummary`,
plus scenario locations); the session writes what they return. Every value is
escaped the way the runner parses workflow commands (``%``, CR and LF in the
message; also ``:`` and ``,`` in properties), so no scenario id or reason can
end the command early or start another one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .._compare import comparison_markdown
from .._model import RunSummary
from .._text import gfm_cell as _md
from .._vocab import format_score

__all__ = [
    "MAX_ANNOTATIONS",
    "MAX_SUMMARY_BYTES",
    "SealedRun",
    "error_annotations",
    "escape_data",
    "escape_property",
    "job_summary",
]

#: GitHub shows at most 10 error annotations per step.
MAX_ANNOTATIONS = 10
#: GitHub accepts at most 1 MiB of job summary per step.
MAX_SUMMARY_BYTES = 1024 * 1024 - 4096

_ICON = {"pass": "✅ PASS", "warn": "⚠️ WARN", "fail": "❌ FAIL", "error": "⛔ ERROR"}

Location = tuple[str, "int | None"]


@dataclass(frozen=True)
class SealedRun:
    """A family's run as the job summary shows it: its summary, where it is, and the chain
    head after the seal (the summary holds the records' head, before it)."""

    summary: RunSummary
    run_dir: str = ""
    chain_head: str = ""


def escape_data(text: str) -> str:
    """A workflow command's message: ``%``, CR and LF encoded (the runner decodes them)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: also ``:`` and ``,`` encoded."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(message: str, *, title: str, file: str | None = None, line: int | None = None) -> str:
    props = []
    if file:
        props.append(f"file={escape_property(file)}")
        if line:
            props.append(f"line={int(line)}")
    props.append(f"title={escape_property(title)}")
    return f"::error {','.join(props)}::{escape_data(message)}"


def _g(value: float | None) -> str:
    return "None" if value is None else f"{value:.3g}"


def _short(run_id: str | None) -> str:
    return (run_id or "")[:12]


def error_annotations(
    summaries: Sequence[RunSummary],
    locations: Mapping[tuple[str, str], Location] | None = None,
    *,
    limit: int = MAX_ANNOTATIONS,
) -> list[str]:
    """``::error`` lines for failed critical scenarios and failing regressions.

    *locations* maps (family, scenario id) to a repository-relative file and
    line; a scenario without one (a bundled family's file is not in the
    repository) is annotated without a file, on the workflow run.
    """
    where = dict(locations or {})
    found: list[tuple[str, str, str | None, int | None]] = []  # message, title, file, line
    for summary in summaries:
        family = summary.family
        label = family + (f" · {summary.condition}" if summary.condition else "")
        regression = summary.regression
        if regression is not None and regression.failed_gate:
            baseline = _short(summary.baseline.run_id if summary.baseline else None)
            found.append(
                (
                    f"{label}: {regression.node} ({regression.level}) dropped "
                    f"{_g(regression.max_drop)} against baseline run {baseline} "
                    f"(regression_max {_g(regression.regression_max)}; sign test p = "
                    f"{_g(regression.p_value)} ≤ α {_g(regression.alpha)}); "
                    "newly failing: "
                    f"{', '.join(regression.newly_failing) or 'none'}",
                    f"agenteval: regression in {label}",
                    None,
                    None,
                )
            )
            changed = (
                {c.id: c for c in summary.comparison.scenarios.changed}
                if summary.comparison is not None
                else {}
            )
            for sid in regression.worse:
                change = changed.get(sid)
                before = (change.before.verdict if change else None) or "?"
                after = (change.after.verdict if change else None) or "?"
                file, line = where.get((family, sid), (None, None))
                found.append(
                    (
                        f"{sid}: {before.upper()} in the baseline, {after.upper()} now "
                        f"({label}, baseline run {baseline})",
                        f"agenteval: {sid} got worse",
                        file,
                        line,
                    )
                )
        for entry in summary.gate.critical_failures:
            sid = entry.split(" ", 1)[0]
            file, line = where.get((family, sid), (None, None))
            found.append(
                (
                    f"{entry}: a scenario of critical severity failed ({label}); the gate allows "
                    "none by default",
                    f"agenteval: critical scenario failed: {sid}",
                    file,
                    line,
                )
            )
    if len(found) > limit:
        more = len(found) - (limit - 1)
        found = [
            *found[: limit - 1],
            (
                f"{more} more agenteval findings: see the job summary and results.sarif",
                "agenteval: more findings",
                None,
                None,
            ),
        ]
    return [_command(m, title=t, file=f, line=ln) for m, t, f, ln in found]


def _cut(value: float | None) -> str:
    """A score cut (never rounded up) to two decimals, as everywhere else."""
    return "–" if value is None else format_score(value)


def _section(run: SealedRun) -> str:
    summary = run.summary
    gate = summary.gate
    passed = gate.passed
    family = _md(summary.family)
    cond = f" · condition {_md(summary.condition)}" if summary.condition else ""
    out = [
        f"## {'✅' if passed else '❌'} agenteval · {family} · {_md(summary.preset)}{cond}"
        f" — gate {'PASSED' if passed else 'FAILED'}",
        "",
        "| Score | Verdict | Subject | Judge | Items (pass / warn / fail / error / skipped) |",
        "|---:|---|---|---|---|",
    ]
    items = summary.items
    judge = ", ".join(summary.judge)
    out.append(
        f"| **{_cut(summary.score)}** | {_ICON.get(summary.verdict, '–')} | "
        f"`{_md(summary.subject)}` | `{_md(judge)}` | "
        + " / ".join(
            str(n) for n in (items.passed, items.warned, items.failed, items.errors, items.skipped)
        )
        + " |"
    )
    if gate.reasons:
        out += ["", "**Gate reasons**", ""] + [f"- {_md(r)}" for r in gate.reasons]
    if gate.notes:
        out += ["", "**Notes**", ""] + [f"- {_md(n)}" for n in gate.notes]
    pillars = [c for r in summary.nodes[:1] for c in r.children if c.kind == "pillar"]
    if pillars:
        out += [
            "",
            "| Pillar | Weight | Score | Verdict | Pass / warn / fail / error |",
            "|---|---:|---:|---|---|",
        ]
        for p in pillars:
            c = p.counts
            out.append(
                f"| {_md(p.title or p.id)} | {_cut(p.weight)} | "
                f"{_cut(p.score)} | {_ICON.get(p.verdict, '–')} | "
                f"{c.get('pass', 0)} / {c.get('warn', 0)} / {c.get('fail', 0)} / {c.get('error', 0)} |"
            )
    suites = summary.suites
    if suites is not None and suites.items:
        out += [
            "",
            f"**Suites** (bench score {_cut(suites.bench)})",
            "",
            "| Suite | Metric | Weight | Value | Minimum | Status |",
            "|---|---|---:|---:|---:|---|",
        ]
        for s in suites.items:
            floor = "–" if s.suite_min is None else _cut(s.suite_min)
            req = " (required)" if s.required else ""
            out.append(
                f"| {_md(s.name)}{req} | {_md(s.metric)} | {_cut(s.weight)} | "
                f"{_cut(s.value)} | {floor} | {_md(s.status)} |"
            )
    if summary.comparison is not None:
        out += ["", comparison_markdown(summary.to_json(), heading="###").rstrip()]
    elif summary.baseline_note:
        out += ["", f"> {_md(summary.baseline_note)}"]
    if gate.critical_failures:
        out += [
            "",
            "**Critical findings:** " + ", ".join(f"`{_md(c)}`" for c in gate.critical_failures),
        ]
    if run.run_dir:
        out += ["", f"Run directory `{_md(run.run_dir)}`"]
    head = run.chain_head or summary.chain_head
    if head:
        out += ["", f"Evidence chain head `{_md(head)}`"]
    return "\n".join(out) + "\n"


def job_summary(runs: Sequence[SealedRun]) -> str:
    """The Markdown appended to ``GITHUB_STEP_SUMMARY`` (at most about 1 MiB)."""
    parts = [_section(r) for r in runs]
    text = "\n".join(parts)
    if len(text.encode("utf-8")) > MAX_SUMMARY_BYTES:
        note = "\n\n_… cut to fit GitHub's 1 MiB job-summary limit; report.md in each run directory has it all._\n"
        room = MAX_SUMMARY_BYTES - len(note.encode("utf-8"))
        text = text.encode("utf-8")[:room].decode("utf-8", "ignore") + note
    return text

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

Pure functions of ``summary.json`` dicts (plus scenario locations); the
session writes what they return. Every value is escaped the way the runner
parses workflow commands (``%``, CR and LF in the message; also ``:`` and ``,``
in properties), so no scenario id or reason can end the command early or start
another one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._compare import comparison_markdown
from .._text import gfm_cell as _md
from .._vocab import format_score

__all__ = [
    "MAX_ANNOTATIONS",
    "MAX_SUMMARY_BYTES",
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


def _g(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.3g}"
    return str(value)


def _short(run_id: Any) -> str:
    return str(run_id or "")[:12]


def error_annotations(
    summaries: Sequence[Mapping[str, Any]],
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
        family = str(summary.get("family") or "")
        label = family + (f" · {summary['condition']}" if summary.get("condition") else "")
        regression = summary.get("regression") or {}
        if regression.get("failed_gate"):
            baseline = _short((summary.get("baseline") or {}).get("run_id"))
            found.append(
                (
                    f"{label}: {regression.get('node')} ({regression.get('level')}) dropped "
                    f"{_g(regression.get('max_drop'))} against baseline run {baseline} "
                    f"(regression_max {_g(regression.get('regression_max'))}; sign test p = "
                    f"{_g(regression.get('p_value'))} ≤ α {_g(regression.get('alpha'))}); "
                    "newly failing: "
                    f"{', '.join(regression.get('newly_failing') or ()) or 'none'}",
                    f"agenteval: regression in {label}",
                    None,
                    None,
                )
            )
            changed = {
                str(c.get("id")): c
                for c in ((summary.get("comparison") or {}).get("scenarios") or {}).get("changed")
                or ()
            }
            for sid in regression.get("worse") or ():
                change = changed.get(str(sid), {})
                before = (change.get("before") or {}).get("verdict") or "?"
                after = (change.get("after") or {}).get("verdict") or "?"
                file, line = where.get((family, str(sid)), (None, None))
                found.append(
                    (
                        f"{sid}: {str(before).upper()} in the baseline, {str(after).upper()} now "
                        f"({label}, baseline run {baseline})",
                        f"agenteval: {sid} got worse",
                        file,
                        line,
                    )
                )
        for entry in (summary.get("gate") or {}).get("critical_failures") or ():
            sid = str(entry).split(" ", 1)[0]
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


def _cut(value: Any) -> str:
    """A score cut (never rounded up) to two decimals, as everywhere else."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return format_score(value)
    return "–"


def _section(summary: Mapping[str, Any]) -> str:
    gate = summary.get("gate") or {}
    passed = gate.get("passed") is True
    family = _md(summary.get("family"))
    cond = f" · condition {_md(summary['condition'])}" if summary.get("condition") else ""
    out = [
        f"## {'✅' if passed else '❌'} agenteval · {family} · {_md(summary.get('preset'))}{cond}"
        f" — gate {'PASSED' if passed else 'FAILED'}",
        "",
        "| Score | Verdict | Subject | Judge | Items (pass / warn / fail / error / skipped) |",
        "|---:|---|---|---|---|",
    ]
    items = summary.get("items") or {}
    judges = summary.get("judge")
    judge = ", ".join(map(str, judges)) if isinstance(judges, list) else str(judges or "")
    out.append(
        f"| **{_cut(summary.get('score'))}** | {_ICON.get(str(summary.get('verdict')), '–')} | "
        f"`{_md(summary.get('subject'))}` | `{_md(judge)}` | "
        + " / ".join(
            str(items.get(k, 0)) for k in ("passed", "warned", "failed", "errors", "skipped")
        )
        + " |"
    )
    if gate.get("reasons"):
        out += ["", "**Gate reasons**", ""] + [f"- {_md(r)}" for r in gate["reasons"]]
    if gate.get("notes"):
        out += ["", "**Notes**", ""] + [f"- {_md(n)}" for n in gate["notes"]]
    roots = summary.get("nodes") or []
    pillars = [c for r in roots[:1] for c in r.get("children") or () if c.get("kind") == "pillar"]
    if pillars:
        out += [
            "",
            "| Pillar | Weight | Score | Verdict | Pass / warn / fail / error |",
            "|---|---:|---:|---|---|",
        ]
        for p in pillars:
            c = p.get("counts") or {}
            out.append(
                f"| {_md(p.get('title') or p.get('id'))} | {_cut(p.get('weight'))} | "
                f"{_cut(p.get('score'))} | {_ICON.get(str(p.get('verdict')), '–')} | "
                f"{c.get('pass', 0)} / {c.get('warn', 0)} / {c.get('fail', 0)} / {c.get('error', 0)} |"
            )
    suites = summary.get("suites") or {}
    if suites.get("items"):
        out += [
            "",
            f"**Suites** (bench score {_cut(suites.get('bench'))})",
            "",
            "| Suite | Metric | Weight | Value | Minimum | Status |",
            "|---|---|---:|---:|---:|---|",
        ]
        for s in suites["items"]:
            floor = "–" if s.get("suite_min") is None else _cut(s.get("suite_min"))
            req = " (required)" if s.get("required") else ""
            out.append(
                f"| {_md(s.get('name'))}{req} | {_md(s.get('metric'))} | {_cut(s.get('weight'))} | "
                f"{_cut(s.get('value'))} | {floor} | {_md(s.get('status'))} |"
            )
    if summary.get("comparison"):
        out += ["", comparison_markdown(summary, heading="###").rstrip()]
    elif summary.get("baseline_note"):
        out += ["", f"> {_md(summary['baseline_note'])}"]
    crit = gate.get("critical_failures") or []
    if crit:
        out += ["", "**Critical findings:** " + ", ".join(f"`{_md(c)}`" for c in crit)]
    if summary.get("run_dir"):
        out += ["", f"Run directory `{_md(summary['run_dir'])}`"]
    head = summary.get("chain_head_final") or summary.get("chain_head")
    if head:
        out += ["", f"Evidence chain head `{_md(head)}`"]
    return "\n".join(out) + "\n"


def job_summary(summaries: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown appended to ``GITHUB_STEP_SUMMARY`` (at most about 1 MiB)."""
    parts = [_section(s) for s in summaries]
    text = "\n".join(parts)
    if len(text.encode("utf-8")) > MAX_SUMMARY_BYTES:
        note = "\n\n_… cut to fit GitHub's 1 MiB job-summary limit; report.md in each run directory has it all._\n"
        room = MAX_SUMMARY_BYTES - len(note.encode("utf-8"))
        text = text.encode("utf-8")[:room].decode("utf-8", "ignore") + note
    return text

"""``agenteval compare RUN_A RUN_B``: the comparison a run's gate makes, for any two runs.

RUN_A is the baseline, RUN_B the candidate; both must be run directories of
one family whose evidence verifies (RUN_A must also be complete). The output
is the same comparison the terminal, the reports and the job summary show —
per scenario, article, pillar and suite, worst first — as text (default),
Markdown (``--format=md``) or the JSON that ``summary.json`` holds
(``--format=json``: ``baseline``, ``regression``, ``comparison``).

The regression bound and significance level default to those RUN_B's own
gate used when it ran against a baseline (so the verdict matches it), else
0 and 0.05.

Exit status: 0 no failing regression, 1 a significant drop beyond the bound,
2 the runs could not be compared (usage, not a run, evidence does not
verify, different families).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2


def fraction_arg(text: str) -> float:
    """An argparse type: a finite number in [0, 1] (shared by the agenteval commands)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agenteval compare",
        description="Compare two runs of one family: per scenario, article, pillar and suite, "
        "with the gate's regression term (a one-sided sign test on verdict changes).",
        epilog="exit codes: 0 no failing regression, 1 a significant drop beyond the bound, "
        "2 the runs could not be compared",
    )
    parser.add_argument("baseline", type=Path, metavar="RUN_A", help="the baseline run directory")
    parser.add_argument("candidate", type=Path, metavar="RUN_B", help="the run to compare")
    parser.add_argument("--format", choices=("text", "md", "json"), default="text")
    parser.add_argument(
        "--regression-max", type=fraction_arg, metavar="X", help="largest significant drop allowed"
    )
    parser.add_argument(
        "--regression-alpha",
        type=fraction_arg,
        metavar="P",
        help="significance level (default 0.05)",
    )
    return parser


def _emit(text: str) -> None:
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    sys.stdout.write(text.encode(encoding, "backslashreplace").decode(encoding))


def main(argv: list[str]) -> int:
    from ._baseline import BaselineError, load_run
    from ._compare import (
        DEFAULT_ALPHA,
        compare,
        comparison_markdown,
        comparison_text,
        summary_fields,
    )

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        base = load_run(args.baseline)
        cand = load_run(args.candidate, require_complete=False)
    except BaselineError as exc:
        print(f"agenteval compare: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if base.family != cand.family:
        print(
            f"agenteval compare: {args.baseline} is a run of {base.family!r} and "
            f"{args.candidate} of {cand.family!r}: only runs of one family compare",
            file=sys.stderr,
        )
        return EXIT_USAGE
    recorded = cand.summary.get("regression")
    if not isinstance(recorded, dict):
        recorded = {}
    bound: float | None = args.regression_max
    if bound is None:
        recorded_bound = recorded.get("regression_max")
        bound = float(recorded_bound) if isinstance(recorded_bound, int | float) else 0.0
    alpha: float | None = args.regression_alpha
    if alpha is None:
        recorded_alpha = recorded.get("alpha")
        alpha = DEFAULT_ALPHA
        if isinstance(recorded_alpha, int | float) and recorded_alpha:
            alpha = float(recorded_alpha)
    if not 0.0 < alpha < 1.0:
        print("agenteval compare: --regression-alpha must be above 0 and below 1", file=sys.stderr)
        return EXIT_USAGE
    ref = base.ref(str(args.baseline))
    comparison = compare(
        base.summary, cand.summary, alpha=alpha, regression_max=bound, baseline_ref=ref
    )
    data = summary_fields(comparison, ref)
    if cand.incomplete is not None:
        # said, not refused: comparing a partial run is useful, but never silently
        note = (
            f"note: {args.candidate} did not complete ({cand.incomplete}); only the scenarios "
            "it graded are compared, and a missing scenario is neither better nor worse"
        )
        print(f"agenteval compare: {note}", file=sys.stderr)
        data["candidate_incomplete"] = True
    if args.format == "json":
        _emit(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    elif args.format == "md":
        _emit(comparison_markdown(data, heading="##"))
    else:
        _emit("\n".join(comparison_text(data)) + "\n")
    return EXIT_REGRESSION if comparison.regression.failing else EXIT_OK

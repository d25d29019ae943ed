"""The ``agenteval`` command: verify, compare, drift, uncertain, list, golden-stats."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = (
        "usage: agenteval {verify RUN_DIR [--expect-head HEX] | compare RUN_A RUN_B "
        "[--format=text|md|json] | uncertain RUN_DIR [--margin=X] [--out FILE] | drift OUT_DIR "
        "--family=F [--metric=score|accuracy|kappa|ece] [--baseline-window=W] "
        "[--current-window=W] [--sustained=N] [--html FILE] [--format=text|json] | list | "
        "golden-stats [PATH ...]}"
    )
    if not args or args[0] in {"-h", "--help"}:
        print(usage)
        return 0 if args else 2
    if args[0] in {"-V", "--version"}:
        from . import __version__

        print(f"agenteval (pytest-agenteval) {__version__}")
        return 0
    command, rest = args[0], args[1:]
    if command == "verify":
        from .evidence._verify_cli import main as verify_main

        return verify_main(rest)
    if command == "golden-stats":
        return golden_stats(rest)
    if command == "compare":
        from ._compare_cli import main as compare_main

        return compare_main(rest)
    if command == "drift":
        from ._drift import main as drift_main

        return drift_main(rest)
    if command == "uncertain":
        from ._uncertain import main as uncertain_main

        return uncertain_main(rest)
    if command == "list":
        from ._listing import print_listing

        print_listing()
        return 0
    print(f"agenteval: unknown command {command!r}\n{usage}", file=sys.stderr)
    return 2


def golden_stats(paths: list[str]) -> int:
    """Per pillar: entries, strata, adversarial share and kinds, holdout share, raters; warnings."""
    from collections import defaultdict
    from dataclasses import replace
    from pathlib import Path

    from ._calibration import derived_stratum
    from ._golden import GoldenEntry, format_stats, load_golden, pillar_stats
    from ._session import bundled_golden_roots
    from ._vocab import SpecError

    roots = [Path(p) for p in paths] or bundled_golden_roots()[:1]
    files = sorted({f for r in roots for f in ([r] if r.is_file() else r.rglob("*.jsonl"))})
    if not files:
        print("agenteval golden-stats: no .jsonl files found", file=sys.stderr)
        return 2
    groups: dict[str, list[GoldenEntry]] = defaultdict(list)
    for path in files:
        try:
            golden = load_golden(path)
        except SpecError as exc:
            print(f"agenteval golden-stats: {exc}", file=sys.stderr)
            return 1
        groups[f"{path.parent.name}/{path.stem}"].extend(golden.entries)
    stats = []
    for name, entries in sorted(groups.items()):
        # AgentEval's files carry no stratum: their score bands say it (see derived_stratum)
        derived = [e for e in entries if e.stratum is None]
        entries = [
            e
            if e.stratum is not None
            else replace(e, stratum=derived_stratum(e.expected_verdict, e.score_min, e.score_max))
            for e in entries
        ]
        one = pillar_stats(name, entries)
        stats.append(one)
        lines = format_stats([one]).split("\n")
        if derived:  # said right under the strata line
            lines.insert(
                2,
                f"    ({len(derived)} entries have no stratum: derived from verdict and score "
                "band — pass with low edge < 0.80 or fail with high edge > 0.30 is borderline, "
                "warn is borderline-fail)",
            )
        print("\n".join(lines))
    warned = sum(len(s.warnings) for s in stats)
    print(
        f"{len(stats)} pillar file(s), {sum(s.entries for s in stats)} entries, {warned} warning(s)"
    )
    return 0


def console(argv: list[str] | None = None) -> int:
    """Entry point of the ``agenteval`` script: quiet when its reader goes away (``| head``)."""
    try:
        return main(argv)
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(console())

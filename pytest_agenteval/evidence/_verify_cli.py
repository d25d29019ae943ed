"""``agenteval verify RUN_DIR [--expect-head HEX]``: check a run's evidence from a shell.

The exit code is the interface for CI scripts, so each outcome has its own:

* 0 -- intact and complete: prints ``OK <run_dir>: N records, head <hex>``
* 1 -- tampered or corrupt: prints ``FAILED <run_dir>: <first problem>``; the
  remaining problems go to stderr, one per line. A symlink, FIFO or device
  where a run file should be is such a problem: it is refused, never read
* 2 -- usage or I/O error (bad arguments, no such directory, not a run
  directory, unreadable file): the evidence could not be judged
* 3 -- intact but incomplete (interrupted, or never finalized): prints
  ``INCOMPLETE run: N records intact, run did not complete (...)``

An intact verdict says on stderr what it did not cover: the files beside the records
of a run that was never sealed, and, without ``--expect-head``, a consistent re-seal.

The seal (the last line of results.jsonl) binds every file of the run to the
chain head, so a changed, added or deleted file fails even when SHA256SUMS was
recomputed. Pass the head printed at the end of the run as ``--expect-head``:
without it, a run whose files were changed *and* whose seal, manifest and
SHA256SUMS were consistently rewritten verifies (see
:mod:`pytest_agenteval.evidence._chain`).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TextIO

from ._chain import VerifyResult, verify_run

EXIT_OK = 0
EXIT_TAMPERED = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def _head_arg(text: str) -> str:
    """argparse type: a full SHA-256 in hex; a prefix would be too easy to forge."""
    head = text.strip()
    if not _HEX64.fullmatch(head):
        raise argparse.ArgumentTypeError(f"expected the full 64-hex-digit chain head, got {text!r}")
    return head.lower()


def build_parser() -> argparse.ArgumentParser:
    """The ``verify`` subcommand's parser (exposed so ``__main__`` can reuse its help)."""
    parser = argparse.ArgumentParser(
        prog="agenteval verify",
        description="Check a run directory's tamper-evident evidence "
        "(manifest, hash-chained results, the seal over every file, SHA256SUMS).",
        epilog="exit codes: 0 intact and complete, 1 tampered or corrupt, "
        "2 usage or I/O error, 3 intact but incomplete",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    parser.add_argument(
        "--expect-head",
        type=_head_arg,
        metavar="HEX",
        help="chain head printed at the end of the run; detects files changed and re-sealed",
    )
    return parser


def exit_code_for(result: VerifyResult) -> int:
    """Map a verification outcome to the documented exit code."""
    if result.io_error:
        return EXIT_USAGE
    if not result.ok:
        return EXIT_TAMPERED
    return EXIT_OK if result.complete else EXIT_INCOMPLETE


def _emit(stream: TextIO, text: str) -> None:
    """Print without ever failing on a terminal that cannot show some character."""
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(text.encode(encoding, "backslashreplace").decode(encoding) + "\n")


def _default_argv() -> list[str]:
    """``sys.argv`` without the program and, when present, the ``verify`` subcommand."""
    argv = sys.argv[1:]
    return argv[1:] if argv[:1] == ["verify"] else argv


def main(argv: list[str] | None = None) -> int:
    """Run ``verify``; ``argv`` is what follows the subcommand (``["RUN_DIR", ...]``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(_default_argv() if argv is None else argv)
    except SystemExit as exc:  # argparse exits on --help (0) and on bad usage (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        result = verify_run(args.run_dir, expect_head=args.expect_head)
    except Exception as exc:  # a bug must not look like a verdict: report and exit 2
        _emit(sys.stdout, f"ERROR {args.run_dir}: verification failed unexpectedly ({exc!r})")
        return EXIT_USAGE
    _emit(sys.stdout, result.message)
    for problem in result.problems[1:]:
        _emit(sys.stderr, f"  {problem}")
    for note in _notes(result, anchored=args.expect_head is not None):
        _emit(sys.stderr, f"note: {note}")
    return exit_code_for(result)


def _notes(result: VerifyResult, *, anchored: bool) -> list[str]:
    """What an intact verdict does not cover, said beside it (never on stdout, the line a
    script reads): without a seal, the files beside the records; without --expect-head,
    a run whose files were changed and consistently re-sealed."""
    if not result.ok:
        return []
    notes = []
    if not result.sealed:
        notes.append(
            "the records end without a seal: summary.json, the reports and any other "
            "file beside results.jsonl and manifest.json are bound by nothing"
        )
    elif not anchored:
        notes.append(
            "the head was not compared with one kept outside the run (--expect-head): "
            "files changed and consistently re-sealed would verify too"
        )
    return notes


if __name__ == "__main__":
    raise SystemExit(main())

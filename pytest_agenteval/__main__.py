"""``agenteval`` command: ``verify RUN_DIR``, ``list``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: agenteval {verify RUN_DIR [--expect-head HEX] | list}"
    if not args or args[0] in {"-h", "--help"}:
        print(usage)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "verify":
        from ._verify_cli import main as verify_main

        return verify_main(rest)
    if command == "list":
        from ._listing import print_listing

        print_listing()
        return 0
    print(f"agenteval: unknown command {command!r}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())

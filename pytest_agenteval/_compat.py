"""AgentEval's layout, recognised cheaply (standard library only).

``plugin.py`` asks :func:`is_agenteval_dir` about folders named on the
command line before anything heavy is imported, so that a folder of
AgentEval article files runs as a family without a ``benchmark.yaml``; the
loading itself is :func:`pytest_agenteval._family.load_agenteval_folder`.
"""

from __future__ import annotations

import re
from pathlib import Path

BENCHMARK_FILE = "benchmark.yaml"
#: How much of each YAML file :func:`is_agenteval_dir` reads.
SNIFF_BYTES = 4096
_HEAD = re.compile(rb"(?m)^metadata:[ \t]*(?:#.*)?\r?$")
_CONTROL = re.compile(rb"(?m)^[ \t]+control_id:")


def is_agenteval_dir(path: Path) -> bool:
    """A folder of AgentEval article files, without a ``benchmark.yaml``? (no YAML parsing)

    Yes when the folder directly holds at least one regular ``*.yaml``/``*.yml``
    file and each of them has, within its first 4 KB, a top-level
    ``metadata:`` mapping with a ``control_id`` — AgentEval's article layout.
    Symbolic links are not read here (loading checks where they lead);
    anything else that is not a regular file (a FIFO, a device) says no.
    """
    try:
        if not path.is_dir() or (path / BENCHMARK_FILE).exists():
            return False
        files = sorted(p for p in path.iterdir() if p.suffix in {".yaml", ".yml"})
    except OSError:
        return False
    sniffed = 0
    for file in files:
        try:
            if file.is_symlink():
                continue
            if not file.is_file():
                return False
            with file.open("rb") as fh:
                head = fh.read(SNIFF_BYTES)
        except OSError:
            return False
        if not (_HEAD.search(head) and _CONTROL.search(head)):
            return False
        sniffed += 1
    return sniffed > 0

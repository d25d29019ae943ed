#!/usr/bin/env python3
"""Is this checkout faster than an earlier commit? Interleaved pairs of whole runs.

This (virtual) machine's speed wanders with the host's load by more than most
changes are worth: runs of one version made after runs of the other can show a
gain that is only the hour (a change once measured 25.0 s of CPU against 27.5 s
that way, and 1.02 times the old commit's CPU in interleaved pairs). So this script
runs the two versions in pairs, alternating which goes first, and reports each
pair's ratio: the median ratio, and how far the pairs spread.

The base commit is checked out into a temporary git worktree; each run imports its own
version's package (``PYTHONPATH``: the worktree, or this checkout), with the same
interpreter and installed dependencies, against the test suite's fake judge on 127.0.0.1
(``bench_concurrency.py``'s family: one LLM judge call per scenario, a sync subject).
Each version is run once untimed first, so that both have the bytecode caches of all
their modules. For each it reports the medians of the wall time, the CPU time (user +
system, of the run's process; the fake server runs in this one), context switches per
scenario and peak RSS; then the paired ratios, this checkout over the base. With an
instant judge (the default) the run is bound by CPU, and the ratios say what the
plugin's work costs; with ``--latency 0.2 --scenarios 200 --concurrency 16`` they say
what a user waits. Nothing leaves loopback. Usage::

    python scripts/bench_versions.py BASE [--scenarios 2000] [--latency 0] \
        [--concurrency 32] [--pairs 6]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_concurrency import bench_env, grade_reply, pytest_command, write_family  # noqa: E402
from bench_scale import run  # noqa: E402
from fakellm import FakeLLMServer  # noqa: E402

_WHERE = "import pytest_agenteval, sys; sys.stdout.write(pytest_agenteval.__file__)"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def resolve(ref: str) -> str:
    """The full id of the commit *ref* names in this checkout."""
    return _git("rev-parse", "--verify", f"{ref}^{{commit}}")


def head_name() -> str:
    """This checkout's commit, marked when tracked files differ from it."""
    modified = _git("status", "--porcelain", "--untracked-files=no")
    return _git("rev-parse", "--short=12", "HEAD") + (" (modified)" if modified else "")


@contextlib.contextmanager
def worktree(commit: str, parent: Path) -> Iterator[Path]:
    """*commit* checked out in a git worktree under *parent*, removed afterwards."""
    tree = parent / f"base-{commit[:12]}"
    _git("worktree", "add", "--detach", str(tree), commit)
    try:
        yield tree
    finally:
        _git("worktree", "remove", "--force", str(tree))


def importing(env: dict[str, str], cwd: Path, tree: Path) -> dict[str, str]:
    """*env* for processes that import the package from *tree* (``PYTHONPATH``), checked
    by starting one in *cwd*."""
    env = {**env, "PYTHONPATH": str(tree)}
    where = subprocess.run(
        [sys.executable, "-c", _WHERE], cwd=cwd, env=env, capture_output=True, text=True
    ).stdout
    if not Path(where).resolve().is_relative_to(tree.resolve()):
        sys.exit(f"a run meant to import the package from {tree} imports {where}")
    return env


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the commit to compare this checkout with (HEAD~1, a tag)")
    parser.add_argument("--scenarios", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.0, help="the judge's, in seconds")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args()
    base_commit = resolve(args.base)

    with (
        tempfile.TemporaryDirectory() as tmp,
        worktree(base_commit, Path(tmp)) as base_tree,
        FakeLLMServer(handler=grade_reply(args.latency)) as server,
    ):
        env = bench_env(server)
        work = Path(tmp) / "work"
        fam = write_family(work, args.scenarios)
        trees = {"base": base_tree, "head": ROOT}
        envs = {name: importing(env, work, tree) for name, tree in trees.items()}
        cmd = pytest_command(fam, work, args.concurrency)
        for name in trees:  # untimed: every module's bytecode cache is written (a collection
            run(cmd, work, envs[name])  # alone leaves those imported later to the first run)
        rows: dict[str, list[tuple[float, float, float, float]]] = {"base": [], "head": []}
        for i in range(args.pairs):
            for name in ("base", "head") if i % 2 == 0 else ("head", "base"):
                rows[name].append(run(cmd, work, envs[name]))
            base, head = rows["base"][-1], rows["head"][-1]
            print(
                f"pair {i + 1}: cpu {head[2]:.2f} s / {base[2]:.2f} s = "
                f"{head[2] / base[2]:.3f}; wall {head[0]:.2f} s / {base[0]:.2f} s",
                flush=True,
            )

    def medians(name: str) -> dict[str, float]:
        wall, rss, cpu, switches = zip(*rows[name], strict=True)
        return {
            "wall_s": round(statistics.median(wall), 2),
            "cpu_s": round(statistics.median(cpu), 2),
            "switches_per_scenario": round(statistics.median(switches) / args.scenarios, 2),
            "peak_rss_mib": round(statistics.median(rss), 1),
        }

    pairs = list(zip(rows["base"], rows["head"], strict=True))
    print(
        json.dumps(
            {
                "base": base_commit[:12],
                "head": head_name(),
                "scenarios": args.scenarios,
                "latency_s": args.latency,
                "concurrency": args.concurrency,
                "base_medians": medians("base"),
                "head_medians": medians("head"),
                "cpu_ratio": _spread([h[2] / b[2] for b, h in pairs]),
                "wall_ratio": _spread([h[0] / b[0] for b, h in pairs]),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

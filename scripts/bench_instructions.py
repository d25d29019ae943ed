#!/usr/bin/env python3
"""Instructions per item, counted by valgrind (callgrind): the plugin's work without the noise.

Wall and CPU time per item wander by tens of percent on a shared virtual machine
with the host's load (``bench_scale.py`` reports both); an instruction count
wanders much less. Not nothing: an event loop's work depends on how many answers
each wake-up finds, which timing still moves (the bare loop's slope was 8.15 and
6.72 M per call in two runs; pytest's floor 2.33 and 2.31 M). Compare runs made
side by side, or repeat. For each contender this counts the user-space
instructions of one whole process at two sizes (an instant judge, as in
``bench_scale.py``) and reports the slope, instructions per item:

* ``bare``:   ``AsyncOpenAI`` + ``Semaphore`` making the same calls;
* ``floor``:  pytest itself, the plugin disabled, running N empty parametrized tests;
* ``pytest``: the benchmark run, one LLM judge call per scenario;

then the plugin's own part, ``pytest - bare - floor``, also as a share of the bare
loop's instructions per call. With ``--base COMMIT`` the benchmark run is also counted
for that commit (checked out into a temporary git worktree, whose package the run
imports: ``bench_versions.py``), at the same sizes, and the difference per item is
reported: the way to compare two versions on a machine whose speed wanders. What a count
leaves out: the kernel's work (system calls, context switches; ``bench_scale.py``
reports the system time, a few percent here) and how fast the instructions run
(interpreted Python with many objects runs fewer per second than the bare loop's C-heavy
SDK work). valgrind runs one thread at a time, so no time is lost to threads handing
over the interpreter lock either.
A run under valgrind is about 50 times slower: the default sizes take about ten
minutes on 2 cores. Needs ``valgrind`` on PATH. Nothing leaves loopback. Usage::

    python scripts/bench_instructions.py [--sizes 50 150] [--concurrency 32] [--base COMMIT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_concurrency import bench_env, grade_reply, pytest_command  # noqa: E402
from bench_scale import prepare  # noqa: E402
from bench_versions import head_name, importing, resolve, worktree  # noqa: E402
from fakellm import FakeLLMServer  # noqa: E402

_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(cmd: list[str], cwd: Path, env: dict[str, str]) -> int:
    """User-space instructions of one whole process (its threads; no child processes)."""
    out = cwd / ".callgrind.out"
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    found = _COLLECTED.search(proc.stderr)
    if proc.returncode not in (0, 1) or found is None:
        sys.exit(f"{cmd[:5]} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    out.unlink(missing_ok=True)
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[50, 150])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--base", help="also count the benchmark run of this commit (HEAD~1, a tag)"
    )
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind not found (Debian: apt-get install valgrind)")
    base = resolve(args.base) if args.base else None

    system = ROOT / "pytest_agenteval" / "prompts" / "default-judge.v1.md"
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(FakeLLMServer(handler=grade_reply(0.0)))
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        env = bench_env(server)
        envs = {"bare": env, "floor": env, "pytest": env}
        if base:  # each version's run imports its own package
            envs["pytest"] = importing(env, tmp, ROOT)
            envs["base"] = importing(env, tmp, stack.enter_context(worktree(base, tmp)))
        counts: dict[str, dict[int, int]] = {name: {} for name in envs}
        for n in args.sizes:
            work = tmp / f"n{n}"
            fam, floor_cmd = prepare(work, n)
            # no progress lines: slowed 50-fold, the run would print them (auto: after 10 s)
            benchmark = [*pytest_command(fam, work, args.concurrency), "--agenteval-progress=off"]
            cmds = {
                "bare": [sys.executable, "bare.py", str(n), str(args.concurrency), str(system)],
                "floor": floor_cmd,
                "pytest": benchmark,
            }
            if base:
                cmds["base"] = benchmark
                for name in ("pytest", "base"):  # untimed: every module's bytecode cache is
                    # written (a collection alone leaves those imported later to the first run)
                    subprocess.run(benchmark, cwd=work, env=envs[name], capture_output=True)
            for name, cmd in cmds.items():
                counts[name][n] = instructions(cmd, work, envs[name])
                print(f"{name} n={n}: {counts[name][n] / 1e9:.3f} G instructions", flush=True)

    small, large = int(args.sizes[0]), int(args.sizes[1])

    def per_item(name: str) -> float:
        """Millions of instructions per item: the slope between the two sizes."""
        return (counts[name][large] - counts[name][small]) / (large - small) / 1e6

    bare, floor, run = per_item("bare"), per_item("floor"), per_item("pytest")
    plugin = run - bare - floor
    versus: dict[str, object] = {}
    if base:
        versus = {
            "head": head_name(),
            "base": base[:12],
            "base_pytest_m_per_item": round(per_item("base"), 3),
            "head_minus_base_m_per_item": round(run - per_item("base"), 3),
        }
    print(
        json.dumps(
            {
                **versus,
                "sizes": args.sizes,
                "bare_m_per_item": round(bare, 3),
                "floor_m_per_item": round(floor, 3),
                "pytest_m_per_item": round(run, 3),
                "beyond_bare_m_per_item": round(run - bare, 3),
                "plugin_m_per_item": round(plugin, 3),
                "plugin_share_of_bare": round(plugin / bare, 3),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

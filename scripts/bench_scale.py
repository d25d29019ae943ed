#!/usr/bin/env python3
"""Plugin work per item at scale: an instant judge, N scenarios, whole processes.

With the judge answering at once, what remains is CPU: the SDK's own work
(which the bare loop pays too) and the plugin's. For each N this runs, as
whole processes interleaved over the repeats,

* ``collect``: ``pytest --collect-only`` on the family (start-up + collection);
* ``pytest``:  the benchmark run, one LLM judge call per scenario;
* ``bare``:    ``AsyncOpenAI`` + ``Semaphore`` making the same N calls;

* ``floor``:   pytest itself, the plugin disabled, running N empty parametrized
  tests: what any pytest run of N items costs, which no plugin can remove;

* ``pinned`` (with ``--pinned``): the benchmark run again with the process held to one
  CPU (``sched_setaffinity``): a diagnostic, not a way to run. Threads that both run
  Python (pytest's main thread, which also runs the event loop; the daemon threads of a
  sync subject) hand the interpreter lock to each other; on two cores each hand-off
  puts a thread to sleep and wakes one on the other core. The difference between
  ``pytest`` and ``pinned`` is what those hand-offs cost (it was about 40% of the
  plugin's time beyond the bare loop while the loop had a thread of its own); each
  contender's context switches per item (children's rusage) are reported too;

* ``async`` (with ``--async-subject``): the benchmark run again with the same subject
  written ``async def``: no thread hop per call. The difference between ``pytest`` and
  ``async`` is what running a sync subject on a thread of its own costs per item;

and reports medians: ms per scenario of collection, ms per item of plugin
work beyond the bare loop (``(pytest - bare - startup) / N`` where start-up
is ``pytest --collect-only`` on a one-scenario family), and each process's
peak RSS, whose slope between two sizes is the memory per item; with two
sizes, also the slopes of time and memory beyond pytest's own floor. Each
contender's CPU time (user + system, from the children's rusage; the fake
server runs in this process, so its work is not counted) is reported beside
the wall time: on a shared virtual machine wall time per item wanders with
the host's load, and CPU time less. Nothing leaves loopback. Usage::

    python scripts/bench_scale.py [--sizes 2000 10000] [--concurrency 32] [--repeats 3] \
        [--pinned] [--async-subject]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_concurrency import bench_env, grade_reply, pytest_command, write_family  # noqa: E402
from bench_whole_run import BARE  # noqa: E402
from fakellm import FakeLLMServer  # noqa: E402

# The child's own peak: VmHWM belongs to the address space exec made, whereas
# ru_maxrss (wait4) keeps the peak of the forking parent, this script with its
# fake server holding every request, across the exec.
_PEAK = """
import atexit, os, runpy, sys
if os.environ.pop("BENCH_ONE_CPU", ""):  # before any thread starts: all of them inherit it
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
def _peak():
    with open("/proc/self/status") as status, open(os.environ["BENCH_PEAK_FILE"], "w") as out:
        out.write(next(l.split()[1] for l in status if l.startswith("VmHWM")))
atexit.register(_peak)
sys.argv = sys.argv[1:]
if sys.argv[0] == "-m":
    sys.argv = sys.argv[1:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


FLOOR = """import pytest


@pytest.mark.parametrize("i", range({n}))
def test_item(i):
    pass
"""


def prepare(work: Path, n: int) -> tuple[Path, list[str]]:
    """In *work*: the family of *n* scenarios, the bare loop and pytest's floor of *n* empty
    tests; returns the family and the floor's command (run in *work*)."""
    fam = write_family(work, n)
    (work / "bare.py").write_text(BARE)
    (work / "test_floor.py").write_text(FLOOR.format(n=n))
    floor_cmd = [sys.executable, "-m", "pytest", "test_floor.py", "-q"]
    return fam, [*floor_cmd, "-p", "no:cacheprovider", "-p", "no:agenteval"]


def _children_usage() -> tuple[float, int]:
    """CPU seconds (user + system) and context switches (voluntary + not) of the children
    waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime, usage.ru_nvcsw + usage.ru_nivcsw


def run(
    cmd: list[str], cwd: Path, env: dict[str, str], pinned: bool = False
) -> tuple[float, float, float, float]:
    """(seconds, peak RSS in MiB, CPU seconds, context switches) of one whole process (the
    peak of its own address space; its user and system time)."""
    peak_file = cwd / ".bench-peak"
    env = {**env, "BENCH_PEAK_FILE": str(peak_file), "BENCH_ONE_CPU": "1" if pinned else ""}
    wrapped = [cmd[0], "-c", _PEAK, *cmd[1:]]
    cpu, switches = _children_usage()
    start = time.perf_counter()
    proc = subprocess.run(
        wrapped,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(
            f"{cmd[:5]} exited {proc.returncode}:\n{proc.stdout[-3000:].decode(errors='replace')}"
        )
    cpu_after, switches_after = _children_usage()
    return elapsed, int(peak_file.read_text()) / 1024, cpu_after - cpu, switches_after - switches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 10000])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--pinned",
        action="store_true",
        help="also run the benchmark held to one CPU (Linux): what thread hand-offs cost",
    )
    parser.add_argument(
        "--async-subject",
        action="store_true",
        help="also run the benchmark with the subject written async: what a sync subject's "
        "thread costs",
    )
    args = parser.parse_args()

    results: dict[int, dict[str, float]] = {}
    with FakeLLMServer(handler=grade_reply(0.0)) as server, tempfile.TemporaryDirectory() as tmp:
        env = bench_env(server)
        system = ROOT / "pytest_agenteval" / "prompts" / "default-judge.v1.md"
        one = Path(tmp) / "one"
        one_fam = write_family(one, 1)
        (one / "bare.py").write_text(BARE)
        startup_cmd = [*pytest_command(one_fam, one, 1)[:4], "--collect-only"]
        run(startup_cmd, one, env)  # untimed: the bytecode caches are written, as on any machine
        for n in args.sizes:
            work = Path(tmp) / f"n{n}"
            fam, floor_cmd = prepare(work, n)
            cmds = {
                "startup": (startup_cmd, one),
                "collect": ([*pytest_command(fam, work, 1)[:4], "--collect-only"], work),
                "pytest": (pytest_command(fam, work, args.concurrency), work),
                "bare": (
                    [sys.executable, "bare.py", str(n), str(args.concurrency), str(system)],
                    work,
                ),
                "floor": (floor_cmd, work),
            }
            if args.pinned:
                cmds["pinned"] = cmds["pytest"]
            if args.async_subject:
                # the subject write_family wrote, the same body written async def
                (work / "agent_async.py").write_text("async " + (work / "agent.py").read_text())
                cmds["async"] = (
                    [a.replace("agent:answer", "agent_async:answer") for a in cmds["pytest"][0]],
                    work,
                )
            rows: list[dict[str, float]] = []
            for i in range(args.repeats):
                row: dict[str, float] = {}
                order = list(cmds) if i % 2 == 0 else list(cmds)[::-1]
                for name in order:
                    cmd, cwd = cmds[name]
                    row[name], row[f"{name}_rss"], row[f"{name}_cpu"], row[f"{name}_csw"] = run(
                        cmd, cwd, env, pinned=name == "pinned"
                    )
                rows.append(row)

            def med(key: str, rows: list[dict[str, float]] = rows) -> float:
                return statistics.median(r[key] for r in rows)

            def beyond_bare(
                suffix: str, rows: list[dict[str, float]] = rows, n: int = n, run: str = "pytest"
            ) -> float:
                """ms per item of the run beyond the bare loop and start-up (wall or CPU)."""
                each = [
                    (r[f"{run}{suffix}"] - r[f"bare{suffix}"] - r[f"startup{suffix}"]) / n * 1000
                    for r in rows
                ]
                return round(float(statistics.median(each)), 3)

            results[n] = {
                "pytest_s": round(med("pytest"), 2),
                "bare_s": round(med("bare"), 2),
                "startup_s": round(med("startup"), 2),
                "collect_ms_per_scenario": round(
                    statistics.median((r["collect"] - r["startup"]) / n * 1000 for r in rows),
                    3,
                ),
                "plugin_ms_per_item": beyond_bare(""),
                "pytest_rss_mib": round(med("pytest_rss"), 1),
                "collect_rss_mib": round(med("collect_rss"), 1),
                "bare_rss_mib": round(med("bare_rss"), 1),
                "pytest_cpu_s": round(med("pytest_cpu"), 2),
                "bare_cpu_s": round(med("bare_cpu"), 2),
                "cpu_ms_per_item": beyond_bare("_cpu"),
                "floor_s": round(med("floor"), 2),
                "floor_cpu_s": round(med("floor_cpu"), 2),
                "floor_rss_mib": round(med("floor_rss"), 1),
                "pytest_switches_per_item": round(med("pytest_csw") / n, 2),
                "bare_switches_per_item": round(med("bare_csw") / n, 2),
            }
            if args.pinned:
                results[n]["pinned_s"] = round(med("pinned"), 2)
                results[n]["pinned_ms_per_item"] = beyond_bare("", run="pinned")
                results[n]["pinned_switches_per_item"] = round(med("pinned_csw") / n, 2)
            if args.async_subject:
                results[n]["async_s"] = round(med("async"), 2)
                results[n]["async_cpu_s"] = round(med("async_cpu"), 2)
                results[n]["async_cpu_ms_per_item"] = beyond_bare("_cpu", run="async")
                results[n]["async_switches_per_item"] = round(med("async_csw") / n, 2)
            print(json.dumps({n: results[n]}), flush=True)
    if len(args.sizes) >= 2:
        a, b = sorted(args.sizes)[0], sorted(args.sizes)[-1]

        def per_item(key: str, scale: float) -> float:
            return float(results[b][key] - results[a][key]) * scale / int(b - a)

        slope, bare_slope = per_item("pytest_rss_mib", 1024), per_item("bare_rss_mib", 1024)
        floor_slope = per_item("floor_rss_mib", 1024)
        # time: what N more items cost each contender, start-up cancelled out
        ms = {k: per_item(f"{k}_s", 1000) for k in ("pytest", "bare", "floor")}
        cpu = {k: per_item(f"{k}_cpu_s", 1000) for k in ("pytest", "bare", "floor")}
        extra: dict[str, float] = {}
        if args.async_subject:
            extra["async_cpu_ms_per_item_beyond_bare"] = round(
                per_item("async_cpu_s", 1000) - cpu["bare"], 3
            )
        print(
            json.dumps(
                {
                    "kib_per_item": round(slope, 2),
                    "bare_kib_per_item": round(bare_slope, 2),
                    "beyond_bare_kib_per_item": round(slope - bare_slope, 2),
                    "pytest_floor_kib_per_item": round(floor_slope, 2),
                    "beyond_bare_and_pytest_floor_kib_per_item": round(
                        slope - bare_slope - floor_slope, 2
                    ),
                    "ms_per_item_beyond_bare": round(ms["pytest"] - ms["bare"], 3),
                    "pytest_floor_ms_per_item": round(ms["floor"], 3),
                    "ms_per_item_beyond_bare_and_pytest_floor": round(
                        ms["pytest"] - ms["bare"] - ms["floor"], 3
                    ),
                    "cpu_ms_per_item_beyond_bare": round(cpu["pytest"] - cpu["bare"], 3),
                    "pytest_floor_cpu_ms_per_item": round(cpu["floor"], 3),
                    "cpu_ms_per_item_beyond_bare_and_pytest_floor": round(
                        cpu["pytest"] - cpu["bare"] - cpu["floor"], 3
                    ),
                    **extra,
                }
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

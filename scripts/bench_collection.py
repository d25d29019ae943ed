#!/usr/bin/env python3
"""How long does collecting a large benchmark take, and how much memory?

Writes, in a temporary folder, a family of N small scenarios (an id, a weight,
an input and three criteria, one with an offline ``check``) in article files of
``--per-article`` scenarios (all in one file by default, the largest case), then:

* times ``python -m pytest --collect-only -q --bench=<family>`` as a whole
  process, ``--runs`` times after one untimed warm-up, and reports the median
  in ms per scenario, with the same for a one-scenario family (pytest's and
  the plugin's fixed start-up) subtracted as well;
* reads the peak resident memory of that process (``VmHWM``: it starts afresh
  at exec, unlike ``ru_maxrss`` which keeps a parent's peak across it);
* runs the same collection in-process under cProfile and prints the top
  entries by own time and by cumulative time.

Collection calls no subject and no judge: nothing leaves the machine. Uses the
interpreter that runs it, so run it from the environment to measure::

    python scripts/bench_collection.py [--scenarios 10000 50000] [--per-article N]
                                       [--runs 3] [--top 25] [--no-profile] [--json]

It measures; it asserts nothing (no timing belongs in a test).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Runs pytest.main in the measured process and reports the process's own peak memory.
PROBE = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    import pytest

    code = pytest.main(sys.argv[1:])
    status = Path("/proc/self/status")
    if status.exists():
        (line,) = [x for x in status.read_text().splitlines() if x.startswith("VmHWM:")]
        peak_kib = int(line.split()[1])
    else:  # ru_maxrss: KiB on Linux, bytes on macOS
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak_kib = peak // 1024 if sys.platform == "darwin" else peak
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"PEAK_KIB={peak_kib} CPU_S={usage.ru_utime + usage.ru_stime}")
    sys.exit(int(code))
    """
)

PROFILE = textwrap.dedent(
    """
    import cProfile, pstats, sys
    import pytest

    top, out = int(sys.argv[1]), sys.argv[2]
    profiler = cProfile.Profile()
    profiler.enable()
    code = pytest.main(sys.argv[3:])
    profiler.disable()
    for order in ("tottime", "cumulative"):
        with open(f"{out}.{order}", "w") as handle:
            pstats.Stats(profiler, stream=handle).sort_stats(order).print_stats(top)
    sys.exit(int(code))
    """
)


def write_family(root: Path, n: int, per_article: int) -> Path:
    """A family of *n* scenarios in article files of at most *per_article* each."""
    fam = root / "large"
    fam.mkdir(parents=True)
    (fam / "benchmark.yaml").write_text(
        "family: large\npillars:\n  - {key: p, weight: 1.0}\npresets:\n  smoke: {controls: all}\n"
    )
    chunks = [range(i, min(i + per_article, n)) for i in range(0, n, per_article)]
    for a, chunk in enumerate(chunks):
        lines = [
            f"metadata: {{article: A{a}, pillar: p, control_id: large.a{a:03d}, "
            f"title: Article {a}, pillar_weight: {_decimal(1 / len(chunks))}}}",
            "scenarios:",
        ]
        weight = _decimal(1 / len(chunk))
        for i in chunk:
            lines += [
                f"  - id: s{i:06d}",
                f"    weight: {weight}",
                f"    input: Question number {i}?",
                "    evaluation_criteria:",
                "      - {text: Answers the question, check: {any: [answer]}}",
                "      - Stays polite",
                "      - Does not invent facts",
            ]
        (fam / f"a{a:03d}.yaml").write_text("\n".join(lines) + "\n")
    # its own ini file, so that no ini file above the temporary directory is picked up
    (root / "pytest.ini").write_text("[pytest]\n")
    return fam


def _decimal(x: float) -> str:
    """*x* with a decimal point: YAML 1.1 reads ``2e-05`` as a string."""
    text = repr(x)
    return text if "e" not in text else f"{x:.15f}".rstrip("0")


def clean_env() -> dict[str, str]:
    """This environment without pytest settings that would change the measured run."""
    # PYTHONDONTWRITEBYTECODE too: see bench_concurrency.UNMEASURED
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "PYTHONDONTWRITEBYTECODE"))
    }


def pytest_args(fam: Path) -> list[str]:
    return ["--collect-only", "-q", "-p", "no:cacheprovider", f"--bench={fam}"]


def collected(stdout: str) -> int:
    match = re.search(r"(\d+) tests? collected", stdout)
    return int(match.group(1)) if match else 0


def run_probe(fam: Path, cwd: Path, n: int) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak KiB of one whole collection process."""
    cmd = [sys.executable, "-c", PROBE, *pytest_args(fam)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    probe = re.search(r"PEAK_KIB=(\d+) CPU_S=([\d.]+)", proc.stdout)
    if proc.returncode != 0 or probe is None or collected(proc.stdout) != n:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-30:])
        raise SystemExit(f"collection of {n} scenarios failed ({proc.returncode}):\n{tail}")
    return elapsed, float(probe.group(2)), int(probe.group(1))


def run_profile(fam: Path, cwd: Path, top: int) -> dict[str, str]:
    out = cwd / "profile"
    cmd = [sys.executable, "-c", PROFILE, str(top), str(out), *pytest_args(fam)]
    proc = subprocess.run(cmd, cwd=cwd, env=clean_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"profiled collection failed ({proc.returncode}):\n{proc.stderr}")
    return {
        order: _stats_table(Path(f"{out}.{order}").read_text())
        for order in ("tottime", "cumulative")
    }


def _stats_table(text: str) -> str:
    """pstats' report from its column header on (the lines above it say little here)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(line for line in lines[start:] if line.strip())


@dataclass
class Timing:
    """Medians over runs of one family size: wall and CPU seconds of the whole process."""

    wall_s: list[float]
    cpu_s: list[float]

    @property
    def wall(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpu_s)


@dataclass
class Figures:
    scenarios: int
    article_files: int
    family_bytes: int
    timing: Timing
    peak_kib: int
    baseline: Timing
    profile: dict[str, str] = field(default_factory=dict)

    def per_scenario_ms(self, seconds: float) -> float:
        return 1000 * seconds / self.scenarios

    def to_json(self) -> dict[str, object]:
        t, b = self.timing, self.baseline
        return {
            **asdict(self),
            "wall_ms_per_scenario": self.per_scenario_ms(t.wall),
            "cpu_ms_per_scenario": self.per_scenario_ms(t.cpu),
            "marginal_wall_ms_per_scenario": self.per_scenario_ms(t.wall - b.wall),
            "marginal_cpu_ms_per_scenario": self.per_scenario_ms(t.cpu - b.cpu),
        }


def timed_runs(fam: Path, root: Path, n: int, runs: int) -> tuple[Timing, int]:
    """*runs* whole collection processes after an untimed warm-up (bytecode, file caches)."""
    run_probe(fam, root, n)
    wall: list[float] = []
    cpu: list[float] = []
    peak = 0
    for _ in range(runs):
        elapsed, used, kib = run_probe(fam, root, n)
        wall.append(elapsed)
        cpu.append(used)
        peak = max(peak, kib)
    return Timing(wall, cpu), peak


def measure(n: int, per_article: int, runs: int, baseline: Timing, top: int) -> Figures:
    with tempfile.TemporaryDirectory(prefix="bench-collection-") as tmp:
        root = Path(tmp)
        fam = write_family(root, n, per_article)
        size = sum(p.stat().st_size for p in fam.iterdir())
        timing, peak = timed_runs(fam, root, n, runs)
        return Figures(
            scenarios=n,
            article_files=len(list(fam.glob("a*.yaml"))),
            family_bytes=size,
            timing=timing,
            peak_kib=peak,
            baseline=baseline,
            profile=run_profile(fam, root, top) if top else {},
        )


def start_up(runs: int) -> tuple[Timing, int]:
    """Collecting a one-scenario family: pytest's and the plugin's fixed start-up."""
    with tempfile.TemporaryDirectory(prefix="bench-collection-") as tmp:
        root = Path(tmp)
        return timed_runs(write_family(root, 1, 1), root, 1, runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scenarios",
        "-n",
        type=int,
        nargs="+",
        default=[10_000, 50_000],
        help="family sizes to measure (default 10000 50000)",
    )
    parser.add_argument(
        "--per-article",
        type=int,
        default=0,
        help="scenarios per article file (default: all in one file)",
    )
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument(
        "--top", type=int, default=25, help="profile entries shown (default 25; 0: no profile)"
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.runs < 1 or any(n < 1 for n in args.scenarios) or args.per_article < 0:
        parser.error("--runs and --scenarios must be at least 1, --per-article at least 0")
    top = 0 if args.no_profile else args.top

    base, base_peak = start_up(args.runs)
    results = [measure(n, args.per_article or n, args.runs, base, top) for n in args.scenarios]
    if args.json:
        print(json.dumps([f.to_json() for f in results], indent=2))
        return 0
    print(f"python: {sys.executable}")
    print(
        f"one-scenario family (start-up): median {base.wall:.3f} s wall, {base.cpu:.3f} s CPU, "
        f"peak RSS {base_peak / 1024:.0f} MiB"
    )
    for f in results:
        t = f.timing
        print(
            f"\n{f.scenarios} scenarios in {f.article_files} article file(s), "
            f"{f.family_bytes / 2**20:.1f} MiB of YAML, {len(t.wall_s)} runs (medians):"
        )
        print(
            f"  whole process   {t.wall:6.2f} s wall = {f.per_scenario_ms(t.wall):.3f} ms/scenario;"
            f"  {t.cpu:6.2f} s CPU = {f.per_scenario_ms(t.cpu):.3f} ms/scenario"
        )
        print(
            f"  minus start-up  {f.per_scenario_ms(t.wall - base.wall):.3f} ms/scenario wall;"
            f"  {f.per_scenario_ms(t.cpu - base.cpu):.3f} ms/scenario CPU"
        )
        print(f"  peak RSS        {f.peak_kib / 1024:.0f} MiB")
        for order, text in f.profile.items():
            print(f"\n  cProfile, in-process, by {order}:")
            print(textwrap.indent(text, "    "))
    return 0


if __name__ == "__main__":
    sys.exit(main())

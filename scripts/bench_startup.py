#!/usr/bin/env python3
"""What does installing pytest-agenteval add to a plain pytest run's start-up?

Writes a temporary project that knows nothing of agenteval (one trivial test),
then runs ``python -m pytest -q`` there ``--runs`` times with the plugin and as
many times with ``-p no:agenteval``, interleaved so that drift of the machine's
load hits both alike, after one untimed warm-up of each (bytecode caches). It
prints the median wall time of each and their difference, and the modules the
plugin's presence adds to the run (``sys.modules`` after ``pytest.main``
in-process, with and without it), naming the heavy ones (pydantic, yaml,
openai, anthropic, numpy, ...).

Uses the interpreter that runs it, so run it from the environment to measure::

    python scripts/bench_startup.py [--runs 10] [--json]

It measures; it asserts nothing (no timing belongs in a test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

#: Imports a plain run should never pay for because the plugin is installed.
HEAVY = (
    "pydantic",
    "pydantic_core",
    "yaml",
    "openai",
    "anthropic",
    "httpx",
    "numpy",
    "jinja2",
    "sarif_om",
    "rfc8785",
)

PROBE = (
    "import json, sys, pytest; code = pytest.main(sys.argv[1:]); "
    "print('MODULES=' + json.dumps(sorted(sys.modules))); sys.exit(int(code))"
)

OFF = ("-p", "no:agenteval")


def write_project(root: Path) -> None:
    # its own ini file, so that no ini file above the temporary directory is picked up
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_trivial.py").write_text("def test_trivial():\n    assert 1 + 1 == 2\n")


def clean_env() -> dict[str, str]:
    """This environment without pytest settings that would change the measured run."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE"))
    }


def timed_run(project: Path, extra: tuple[str, ...]) -> float:
    cmd = [sys.executable, "-m", "pytest", "-q", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=project, env=clean_env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"{' '.join(cmd)} exited {proc.returncode} in {project}:\n{proc.stdout}{proc.stderr}"
        )
    return elapsed


def modules_after_run(project: Path, extra: tuple[str, ...]) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, "-q", *extra],
        cwd=project,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("MODULES=")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"probe run failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return set(json.loads(lines[-1].removeprefix("MODULES=")))


def top_level(mods: set[str]) -> set[str]:
    return {m.split(".")[0] for m in mods}


@dataclass
class Figures:
    python: str
    runs: int
    plugin_active: bool
    with_plugin_s: list[float]
    without_s: list[float]
    modules_with_plugin: int
    modules_without: int
    packages_added: list[str]
    stdlib_added: list[str]
    heavy_imported: list[str]

    @property
    def median_with(self) -> float:
        return statistics.median(self.with_plugin_s)

    @property
    def median_without(self) -> float:
        return statistics.median(self.without_s)

    def to_json(self) -> dict[str, object]:
        return {
            **asdict(self),
            "median_with_plugin_s": self.median_with,
            "median_without_s": self.median_without,
            "added_median_s": self.median_with - self.median_without,
        }


def measure(runs: int) -> Figures:
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        project = Path(tmp)
        write_project(project)
        timed_run(project, ())  # warm-up: bytecode caches, pytest's own cache dir
        timed_run(project, OFF)
        on: list[float] = []
        off: list[float] = []
        for _ in range(runs):
            on.append(timed_run(project, ()))
            off.append(timed_run(project, OFF))
        with_plugin = modules_after_run(project, ())
        without = modules_after_run(project, OFF)

    added = top_level(with_plugin - without)
    stdlib = {m for m in added if m in sys.stdlib_module_names or m.startswith("_")}
    return Figures(
        python=sys.executable,
        runs=runs,
        plugin_active="pytest_agenteval.plugin" in with_plugin,
        with_plugin_s=on,
        without_s=off,
        modules_with_plugin=len(with_plugin),
        modules_without=len(without),
        packages_added=sorted(added - stdlib),
        stdlib_added=sorted(stdlib),
        heavy_imported=sorted(added & set(HEAVY)),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", "-n", type=int, default=10, help="timed runs of each (default 10)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    f = measure(args.runs)
    if args.json:
        print(json.dumps(f.to_json(), indent=2))
        return 0
    print(f"python: {f.python}")
    if not f.plugin_active:
        print("note: the agenteval plugin is not installed in this interpreter; nothing to measure")
    print(f"`python -m pytest -q` on one trivial test, {f.runs} runs each, interleaved:")
    print(
        f"  with the plugin      median {f.median_with:.3f} s  (min {min(f.with_plugin_s):.3f} s)"
    )
    print(f"  -p no:agenteval      median {f.median_without:.3f} s  (min {min(f.without_s):.3f} s)")
    print(
        f"  added by the plugin  {f.median_with - f.median_without:+.3f} s (difference of medians)"
    )
    print(
        f"modules after the run: {f.modules_with_plugin} with the plugin, "
        f"{f.modules_without} without"
    )
    print(f"  packages the plugin adds: {', '.join(f.packages_added) or 'none'}")
    print(f"  and from the standard library: {len(f.stdlib_added)} modules")
    print(f"  heavy ones among them:    {', '.join(f.heavy_imported) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

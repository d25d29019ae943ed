#!/usr/bin/env python3
"""The whole run against a bare SDK loop: whole processes, interleaved, paired ratios.

A user waits from the ``pytest`` command to its exit, so that is what is
timed: each repeat runs, back to back and in alternating order,

* ``pytest``: a benchmark of N scenarios (an instant Python subject, one LLM
  judge call per scenario through the real ``openai`` SDK) at concurrency C;
* ``bare``:   a fresh ``python`` process with ``AsyncOpenAI`` and an
  ``asyncio.Semaphore(C)`` sending the same N calls (same system prompt, a
  user message of the same size) — the floor for this machine;
* ``floor``:  ``pytest -p no:agenteval`` running that same loop inside one
  test function: what pytest itself costs around the calls (its start-up, the
  other installed plugins, its end-of-session garbage collections, the
  teardown of its modules) — the part of "pytest vs bare" no plugin can remove.

Both talk to the test suite's fake OpenAI-compatible server on 127.0.0.1,
which answers each call after a fixed latency. Reported, as medians over the
repeats: each contender's whole-process time, the paired ratio pytest/bare
(each repeat's pair divided, then the median), and "calls alone": the span
from the first request the server received to the last one it answered, for
each contender — what the plugin adds around the calls, against what it adds
between them. Nothing leaves loopback. Usage::

    python scripts/bench_whole_run.py [--scenarios 200] [--latency 0.2] [--concurrency 16]
                                      [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_concurrency import bench_env, grade_reply, pytest_command, write_family  # noqa: E402
from fakellm import FakeLLMServer  # noqa: E402

BARE = textwrap.dedent(
    """
    import asyncio, sys
    import openai

    async def main():
        n, concurrency = int(sys.argv[1]), int(sys.argv[2])
        system = open(sys.argv[3]).read()
        user = "Grade the answer to question {i}.\\n" + "x" * 1500
        client = openai.AsyncOpenAI(api_key="bench", max_retries=0)
        sem = asyncio.Semaphore(concurrency)

        async def one(i):
            async with sem:
                await client.chat.completions.create(
                    model="bench-judge", temperature=0, seed=1,
                    messages=[{"role": "system", "content": system},
                              {"role": "user", "content": user.replace("{i}", str(i))}],
                    response_format={"type": "json_object"},
                )

        await asyncio.gather(*(one(i) for i in range(n)))
        await client.close()

    if __name__ == "__main__":
        asyncio.run(main())
    """
)

#: The same loop as one pytest test (the arguments come from the environment).
FLOOR_TEST = textwrap.dedent(
    """
    import asyncio, os, sys
    import bare

    def test_calls():
        sys.argv[1:] = os.environ["BENCH_FLOOR_ARGS"].split("|")
        asyncio.run(bare.main())
    """
)


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """(start, end, elapsed) of one whole process, on the clock the server stamps with."""
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    end = time.monotonic()
    if proc.returncode not in (0, 1):
        sys.exit(f"{cmd[:4]} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return start, end, end - start


def calls_span(server: FakeLLMServer, since: int, latency: float) -> tuple[float, float]:
    """(first request received, last answer sent = received + latency)."""
    seen = server.requests[since:]
    if not seen:
        return float("nan"), float("nan")
    return min(r.received_at for r in seen), max(r.received_at for r in seen) + latency


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    with (
        FakeLLMServer(handler=grade_reply(args.latency)) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        work = Path(tmp)
        fam = write_family(work, args.scenarios)
        (work / "bare.py").write_text(BARE)
        (work / "floor_test.py").write_text(FLOOR_TEST)
        system = ROOT / "pytest_agenteval" / "prompts" / "default-judge.v1.md"
        env = bench_env(server)
        plugin = pytest_command(fam, work, args.concurrency)
        bare_args = [str(args.scenarios), str(args.concurrency), str(system)]
        bare = [sys.executable, "bare.py", *bare_args]
        env["BENCH_FLOOR_ARGS"] = "|".join(bare_args)
        floor = [*plugin[:3], "floor_test.py", "-p", "no:agenteval", "-p", "no:cacheprovider", "-q"]
        # one untimed run of each: the bytecode caches are written, as after any first run
        for cmd in (plugin, bare, floor):
            run(cmd, work, env)
        rows: list[dict[str, float]] = []
        for i in range(args.repeats):
            row: dict[str, float] = {}
            order = [("pytest", plugin), ("bare", bare), ("floor", floor)]
            for name, cmd in order if i % 2 == 0 else order[::-1]:
                before = server.count("openai")
                start, end, row[name] = run(cmd, work, env)
                first, last = calls_span(server, before, args.latency)
                row[f"{name}_calls"] = last - first
                row[f"{name}_before"] = first - start
                row[f"{name}_after"] = end - last
                got = server.count("openai") - before
                if got != args.scenarios:
                    sys.exit(f"{name}: the server saw {got} calls, expected {args.scenarios}")
            rows.append(row)

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    report = {
        "scenarios": args.scenarios,
        "latency_s": args.latency,
        "concurrency": args.concurrency,
        "repeats": args.repeats,
        "ideal_calls_s": round(args.scenarios * args.latency / args.concurrency, 3),
        "pytest_whole_s": med("pytest"),
        "bare_whole_s": med("bare"),
        "ratio_whole": round(statistics.median(r["pytest"] / r["bare"] for r in rows), 3),
        "pytest_calls_s": med("pytest_calls"),
        "bare_calls_s": med("bare_calls"),
        "ratio_calls": round(
            statistics.median(r["pytest_calls"] / r["bare_calls"] for r in rows), 3
        ),
        "pytest_before_first_call_s": med("pytest_before"),
        "bare_before_first_call_s": med("bare_before"),
        "pytest_after_last_call_s": med("pytest_after"),
        "bare_after_last_call_s": med("bare_after"),
        "ratios_whole_each": [round(r["pytest"] / r["bare"], 3) for r in rows],
        # pytest's own share: the same loop inside one test, the plugin off
        "floor_whole_s": med("floor"),
        "ratio_floor": round(statistics.median(r["floor"] / r["bare"] for r in rows), 3),
        "floor_before_first_call_s": med("floor_before"),
        "floor_after_last_call_s": med("floor_after"),
        # what the plugin adds beyond pytest's floor, as a share of the bare loop's time
        "plugin_beyond_floor": round(
            statistics.median((r["pytest"] - r["floor"]) / r["bare"] for r in rows), 3
        ),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

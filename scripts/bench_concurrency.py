#!/usr/bin/env python3
"""How close does a benchmark run come to a bare asyncio loop making the same calls?

Starts the test suite's fake OpenAI-compatible server on 127.0.0.1 with a fixed
latency per judge call, writes a family of N scenarios, and measures in one run:

* bare:    an asyncio loop sending N chat.completions calls through the same SDK
           at the same concurrency (the floor for this machine);
* startup: ``pytest --collect-only`` on the family (pytest's start-up and collection);
* run:     ``pytest`` on the family with an LLM judge at that concurrency.

It prints run − startup against bare (and the ideal N × latency / concurrency).
Nothing leaves loopback. Usage::

    python scripts/bench_concurrency.py [--scenarios 200] [--latency 0.2] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakellm import FakeLLMServer, RecordedRequest, Reply  # noqa: E402


def grade_reply(latency: float):  # type: ignore[no-untyped-def]
    def handle(req: RecordedRequest) -> Reply:
        text = req.body["messages"][-1]["content"]
        match = (
            re.search(r"## Criteria \((\d+), in this order\)", text)
            if isinstance(text, str)
            else None
        )
        n = int(match.group(1)) if match else 1
        grade = {
            "overall_score": 80,
            "criteria": [{"criterion": f"c{i}", "met": True, "reasoning": "ok"} for i in range(n)],
            "summary": "ok",
        }
        return Reply.json_content(grade).with_delay(latency)

    return handle


def write_family(root: Path, n: int) -> Path:
    fam = root / "speed"
    fam.mkdir(parents=True)
    (fam / "benchmark.yaml").write_text("family: speed\npillars:\n  - {key: p, weight: 1.0}\n")
    lines = ["metadata: {article: A, pillar: p, control_id: speed.a, title: Speed}", "scenarios:"]
    for i in range(n):
        lines += [
            f"  - id: s{i:04d}",
            f"    weight: {1 / n:.12f}",  # a decimal point: YAML 1.1 reads 5e-05 as text
            f"    input: Question number {i}?",
            "    evaluation_criteria: [Answers the question, Stays polite]",
        ]
    (fam / "a.yaml").write_text("\n".join(lines) + "\n")
    (root / "agent.py").write_text("def answer(prompt):\n    return 'An answer to: ' + prompt\n")
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:asyncio\n")
    return fam


async def bare_loop(base_url: str, n: int, concurrency: int, system: str, user: str) -> float:
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await client.chat.completions.create(
                model="bench-judge",
                temperature=0,
                seed=1,
                messages=[
                    {"role": "system", "content": system},
                    {"role": "user", "content": user.replace("{i}", str(i))},
                ],
                response_format={"type": "json_object"},
            )

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    elapsed = time.perf_counter() - start
    await client.close()
    return elapsed


#: Left out of the measured processes' environment: pytest's and the providers' own
#: settings, and PYTHONDONTWRITEBYTECODE, which some machines (this sandbox, many Docker
#: images) set. Without bytecode caches pytest parses, rewrites and compiles the plugin's
#: modules on every start (about 0.5 s here), while the bare loop's SDK comes precompiled
#: from site-packages: the comparison would be of caches, not of the two programs.
UNMEASURED = ("PYTEST_", "OPENAI_", "ANTHROPIC_", "PYTHONDONTWRITEBYTECODE")


def clean_env() -> dict[str, str]:
    """This environment without the settings that would change the measured run."""
    return {k: v for k, v in os.environ.items() if not k.startswith(UNMEASURED)}


def bench_env(server: FakeLLMServer) -> dict[str, str]:
    """:func:`clean_env`, pointed at the fake server."""
    env = clean_env()
    env.update(OPENAI_BASE_URL=server.openai_base_url, NO_PROXY="127.0.0.1,localhost")
    return env


def pytest_command(fam: Path, work: Path, concurrency: int) -> list[str]:
    """The benchmark run: the family, an instant subject, one LLM judge call per scenario."""
    return [
        sys.executable,
        "-m",
        "pytest",
        str(fam),
        "-p",
        "no:cacheprovider",
        "-q",
        "--subject=agent:answer",
        "--judge=openai:bench-judge",
        f"--agenteval-concurrency={concurrency}",
        f"--agenteval-out={work / 'out'}",
    ]


def timed(
    cmd: list[str], cwd: Path, env: dict[str, str]
) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    return time.perf_counter() - start, proc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=200)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--xdist", type=int, default=0, help="also run with -n N")
    args = parser.parse_args()

    ideal = args.scenarios * args.latency / args.concurrency
    with (
        FakeLLMServer(handler=grade_reply(args.latency)) as server,
        tempfile.TemporaryDirectory() as tmp,
    ):
        work = Path(tmp)
        fam = write_family(work, args.scenarios)
        env = bench_env(server)
        base = pytest_command(fam, work, args.concurrency)
        system = (ROOT / "pytest_agenteval" / "prompts" / "default-judge.v1.md").read_text()
        user = "Grade the answer to question {i}.\n" + "x" * 1500

        bare = [
            asyncio.run(
                bare_loop(server.openai_base_url, args.scenarios, args.concurrency, system, user)
            )
            for _ in range(args.repeats)
        ]
        startup = [timed([*base, "--collect-only"], work, env)[0] for _ in range(args.repeats)]
        runs = []
        for _ in range(args.repeats):
            seconds, proc = timed(base, work, env)
            if "passed" not in proc.stdout and "failed" not in proc.stdout:
                print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
                return 1
            runs.append(seconds)
        requests = server.count("openai")
        report = {
            "scenarios": args.scenarios,
            "latency_s": args.latency,
            "concurrency": args.concurrency,
            "ideal_s": round(ideal, 3),
            "bare_loop_s": round(statistics.median(bare), 3),
            "pytest_startup_s": round(statistics.median(startup), 3),
            "pytest_run_s": round(statistics.median(runs), 3),
        }
        report["run_less_startup_s"] = round(report["pytest_run_s"] - report["pytest_startup_s"], 3)
        report["ratio_to_bare"] = round(report["run_less_startup_s"] / report["bare_loop_s"], 3)
        report["bare_to_ideal"] = round(report["bare_loop_s"] / ideal, 3)
        report["run_to_ideal"] = round(report["run_less_startup_s"] / ideal, 3)
        if args.xdist:
            xd = [timed([*base, "-n", str(args.xdist)], work, env)[0] for _ in range(args.repeats)]
            # --collect-only does not start xdist workers; deselecting every item does
            xs = [
                timed([*base, "-n", str(args.xdist), "-k", "no_such_scenario"], work, env)[0]
                for _ in range(args.repeats)
            ]
            report[f"xdist_{args.xdist}_run_less_startup_s"] = round(
                statistics.median(xd) - statistics.median(xs), 3
            )
        report["judge_requests_seen"] = requests
    print(json.dumps(report, indent=2))
    print(
        textwrap.dedent(f"""
        run − startup = {report["run_less_startup_s"]} s; bare loop = {report["bare_loop_s"]} s;
        ratio {report["ratio_to_bare"]} (target ≤ 1.3); ideal {report["ideal_s"]} s.
    """).strip()
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

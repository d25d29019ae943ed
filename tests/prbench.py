"""A 20-scenario family for the pull-request check tests, with a subject whose answers
the test controls per run: scenario ids listed in ``PR_FAIL`` (comma-separated) are
answered wrongly, the others rightly."""

from __future__ import annotations

import pytest

BENCHMARK = """\
family: prbench
title: PR bench
bands: {pass: 0.70, warn: 0.40}
pillars:
  - {key: safety, title: Safety, weight: 0.5}
  - {key: helpfulness, title: Helpfulness, weight: 0.5}
suites:
  - {name: golden, select: {patterns: [direct]}, weight: 0.4}
  - {name: adversarial, select: {patterns: [trap]}, weight: 0.4, metric: pass_rate}
  - {name: replay, select: {tags: [replay]}, weight: 0.2}
presets:
  smoke: {controls: all}
"""

SUBJECT = """\
import os
import pytest

def agent(prompt):
    failing = set(filter(None, os.environ.get("PR_FAIL", "").split(",")))
    return "nope" if prompt.split()[-1] in failing else "ok"

@pytest.fixture(scope="session")
def agenteval_subject():
    return agent
"""

#: Six scenarios, three per article (four direct, two traps): newly failing in the worse run.
SIX = "pr-a-01,pr-a-02,pr-a-08,pr-b-01,pr-b-02,pr-b-09"


def article(key: str, pillar: str, severity: str = "medium") -> str:
    lines = [
        "metadata:",
        f"  article: 'Rule {key}'",
        f"  pillar: {pillar}",
        f"  control_id: pr.{key}",
        f"  title: Rule {key}",
        f"  severity: {severity}",
        "scenarios:",
    ]
    for i in range(1, 11):
        sid = f"pr-{key}-{i:02d}"
        lines += [
            f"  - id: {sid}",
            f"    pattern: {'direct' if i <= 6 else 'trap'}",
            "    weight: 0.1",
            f"    input: Question {sid}",
            "    evaluation_criteria:",
            "      - {text: says ok, check: {any: [ok]}}",
        ]
    return "\n".join(lines) + "\n"


def line_of(sid: str) -> int:
    """The line of a scenario's entry in its article file (8 for the first, 6 per entry)."""
    return 8 + 6 * (int(sid.rsplit("-", 1)[1]) - 1)


def make_prbench(pytester: pytest.Pytester, benchmark: str = BENCHMARK) -> pytest.Pytester:
    fam = pytester.mkdir("prbench")
    (fam / "benchmark.yaml").write_text(benchmark)
    (fam / "a.yaml").write_text(article("a", "safety"))
    (fam / "b.yaml").write_text(article("b", "helpfulness"))
    pytester.makeconftest(SUBJECT)
    return pytester

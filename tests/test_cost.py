"""Token cost from the rate table, totals, and the budget that stops calls."""

from __future__ import annotations

import json

import pytest

from pytest_agenteval._cost import DEFAULT_RATES, Budget, BudgetExceeded, Cost, cost_of, parse_rates


def test_cost_from_rates() -> None:
    # gpt-4o-mini: 0.15 in, 0.60 out per 1M → 1000*0.15e-6 + 500*0.60e-6 = 0.00015 + 0.0003
    cost = cost_of(
        "openai:gpt-4o-mini", {"prompt_tokens": 1000, "completion_tokens": 500}, DEFAULT_RATES
    )
    assert cost.usd == pytest.approx(0.00045)
    dated = cost_of(
        "gpt-4o-mini-2024-07-18", {"prompt_tokens": 1000, "completion_tokens": 500}, DEFAULT_RATES
    )
    assert dated.usd == pytest.approx(0.00045)
    unknown = cost_of(
        "openai:my-local-model", {"prompt_tokens": 10, "completion_tokens": 1}, DEFAULT_RATES
    )
    assert unknown.usd is None and unknown.prompt_tokens == 10


def test_rate_overrides_parse_and_reject_garbage() -> None:
    assert parse_rates(["my-model = 1.0 2.0  # local", ""]) == {"my-model": (1.0, 2.0)}
    with pytest.raises(ValueError, match="expected 'model = input output'"):
        parse_rates(["my-model 1.0 2.0"])


def test_budget() -> None:
    budget = Budget(0.001)
    budget.check()
    budget.charge(cost_of("gpt-4o", {"prompt_tokens": 1000, "completion_tokens": 0}, DEFAULT_RATES))
    with pytest.raises(BudgetExceeded, match=r"cost budget of \$0.001 reached"):
        budget.check()


COSTLY = """
import pytest
from pytest_agenteval import Response

@pytest.fixture(scope="session")
def agenteval_subject():
    def agent(prompt):
        return Response("I can't help with that. hello AI", usage={"prompt_tokens": 1000, "completion_tokens": 1000})
    agent.name = "priced-model"
    return agent
"""


def test_totals_in_summary_and_budget_stops_calls(demo: pytest.Pytester) -> None:
    demo.makeconftest(COSTLY)
    demo.makeini(
        "[pytest]\naddopts = -p no:benchmark -p no:asyncio\n"
        "agenteval_rates =\n    priced-model = 1.0 1.0\n"
    )
    result = demo.runpytest("--bench=demo", "--agenteval-concurrency=1")
    result.stdout.fnmatch_lines(["tokens: 3000 in, 3000 out; cost $0.0060"])
    (summary,) = (demo.path / ".agenteval").rglob("summary.json")
    data = json.loads(summary.read_text())
    assert data["cost"]["total"]["usd"] == pytest.approx(0.006)
    assert set(data["cost"]["pillars"]) == {"safety", "honesty"}
    for s in (demo.path / ".agenteval").rglob("summary.json"):
        s.unlink()
    # each item costs $0.002: with a $0.003 budget the second item is the last one issued
    result = demo.runpytest(
        "--bench=demo", "--agenteval-concurrency=1", "--agenteval-max-cost=0.003"
    )
    result.stdout.fnmatch_lines(["*cost budget of $0.003 reached*not evaluated*"])
    outcomes = result.parseoutcomes()
    assert (outcomes.get("passed"), outcomes.get("warned"), outcomes.get("errors")) == (1, 1, 1)


def test_a_workers_budget_is_its_share_of_the_run_and_says_so() -> None:
    share = Budget(5.0, of_run=10.0)
    share.charge(Cost(5.0, 0, 0))
    with pytest.raises(
        BudgetExceeded, match=r"this worker's share \$5.00 of the run's budget \$10.00"
    ):
        share.check()
    whole = Budget(0.0003, of_run=0.0003)
    whole.charge(Cost(0.0003, 0, 0))
    with pytest.raises(BudgetExceeded, match=r"cost budget of \$0.0003 reached"):
        whole.check()

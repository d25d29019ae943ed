"""The bundled families and golden datasets: they load, add up, and give a mixed quickstart."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pytest_agenteval._checks import check_names
from pytest_agenteval._family import Family, load_family, resolve_plan
from pytest_agenteval._golden import load_golden, pillar_stats

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = sorted(
    p.name for p in (ROOT / "benchmarks").iterdir() if (p / "benchmark.yaml").exists()
)
MINIMUMS = {"eu-ai-act": (13, 52, 6), "gdpr": (20, 60, 6), "agentic": (12, 48, 12)}


def test_the_three_families_are_bundled() -> None:
    assert FAMILIES == ["agentic", "eu-ai-act", "gdpr"]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> Family:
    return load_family(ROOT / "benchmarks" / request.param)


def test_every_file_loads_and_the_family_is_large_enough(family: Family) -> None:
    assert not family.article_errors
    controls, scenarios, pillars = MINIMUMS[family.name]
    base = [a for a in family.articles if a.meta.pack is None]
    assert len(base) >= controls
    assert sum(len(a.scenarios) for a in base) >= scenarios
    assert len(family.spec.pillars) >= pillars


def test_ids_are_unique_and_weights_add_up(family: Family) -> None:
    ids = [s.id for a in family.articles for s in a.scenarios]
    assert len(ids) == len(set(ids))
    assert math.isclose(sum(float(p.weight) for p in family.spec.pillars), 1.0, abs_tol=1e-3)
    for article in family.articles:
        assert math.isclose(sum(float(s.weight) for s in article.scenarios), 1.0, abs_tol=1e-3)
        assert article.meta.rubric, f"{article.control_id} declares no substance rubric"


def test_patterns_mix(family: Family) -> None:
    patterns = [s.pattern for a in family.articles for s in a.scenarios]
    assert set(patterns) == {"direct", "trap", "edge-case", "probe"}
    assert sum(p in ("trap", "edge-case") for p in patterns) >= len(patterns) / 3


def test_presets_resolve(family: Family) -> None:
    presets = family.spec.presets
    assert {"smoke", "standard", "audit"} <= set(presets)
    assert len(resolve_plan(family, "smoke").controls) == 5
    audit = resolve_plan(family, "audit")
    assert audit.root_aggregation == "cap_by_worst" and audit.judges == 3 and audit.mode_b
    packs = [name for name, p in presets.items() if p.pack]
    assert packs, "at least one domain pack"
    for pack in packs:
        plan = resolve_plan(family, f"standard+{pack}")
        assert len(plan.controls) > len(resolve_plan(family, "standard").controls)
        assert math.isclose(sum(plan.pillar_weights.values()), 1.0, abs_tol=1e-9)


def test_checks_use_known_vocabulary_and_a_good_share_is_checkable(family: Family) -> None:
    known = set(check_names())
    criteria = [c for a in family.articles for s in a.scenarios for c in s.evaluation_criteria]
    for c in criteria:
        if c.check is not None:
            assert c.check.kind in known
    assert sum(c.check is not None for c in criteria) / len(criteria) >= 0.5


def test_judge_prompt_is_versioned_and_states_the_contract(family: Family) -> None:
    text = family.judge_prompt or ""
    assert text.startswith("<!-- version:")
    assert "overall_score" in text and "criteria" in text


GOLDEN = sorted((ROOT / "golden").glob("*/*.jsonl"))


@pytest.mark.parametrize("path", GOLDEN, ids=[f"{p.parent.name}/{p.stem}" for p in GOLDEN])
def test_golden_files_resolve_and_are_balanced(path: Path) -> None:
    golden = load_golden(path)
    fam = load_family(ROOT / "benchmarks" / path.parent.name)
    pillars = {a.control_id: a.meta.pillar for a in fam.articles}
    for entry in golden.entries:
        assert entry.article in pillars, (
            f"{path.name}:{entry.line}: unknown article {entry.article}"
        )
        assert pillars[entry.article] == path.stem, (
            f"{path.name}:{entry.line}: article of another pillar"
        )
    stats = pillar_stats(path.stem, golden.entries)
    assert not stats.warnings, stats.warnings
    assert 0.25 <= stats.holdout_share <= 0.40


def test_golden_ids_unique_per_family() -> None:
    for fam_dir in sorted((ROOT / "golden").iterdir()):
        if fam_dir.is_dir():
            ids = [e.id for p in fam_dir.glob("*.jsonl") for e in load_golden(p).entries]
            assert len(ids) == len(set(ids)), fam_dir.name


@pytest.mark.parametrize("name", FAMILIES)
def test_quickstart_gives_a_mixed_result(pytester: pytest.Pytester, name: str) -> None:
    """The reference subject with the rules judge: some scenarios pass, some fail."""
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    result = pytester.runpytest(f"--bench={name}", "--preset=smoke")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 1 and outcomes.get("failed", 0) >= 1, outcomes
    (summary,) = (pytester.path / ".agenteval").rglob("summary.json")
    data = json.loads(summary.read_text())
    assert data["family"] == name and data["preset"] == "smoke"


# Families whose every pillar gates a release on a holdout of its own: the seed's
# shipping gate is κ ≥ 0.61 on a stratified holdout of 30 or more entries per pillar.
HOLDOUT_GATED = ("eu-ai-act", "gdpr")
GATED_GOLDEN = [p for p in GOLDEN if p.parent.name in HOLDOUT_GATED]


@pytest.mark.parametrize(
    "path", GATED_GOLDEN, ids=[f"{p.parent.name}/{p.stem}" for p in GATED_GOLDEN]
)
def test_the_holdout_alone_is_large_stratified_and_adversarial(path: Path) -> None:
    holdout = [e for e in load_golden(path).entries if e.split == "holdout"]
    stats = pillar_stats(path.stem, holdout)
    assert stats.entries >= 30 and not stats.warnings, stats.warnings


@pytest.mark.parametrize("name", HOLDOUT_GATED)
def test_every_control_has_holdout_entries(name: str) -> None:
    """New controls and packs are measured too, not only the controls the data began with."""
    family = load_family(ROOT / "benchmarks" / name)
    covered = {
        e.article
        for p in (ROOT / "golden" / name).glob("*.jsonl")
        for e in load_golden(p).entries
        if e.split == "holdout"
    }
    assert {a.control_id for a in family.articles} <= covered

"""The eu-ai-act family: Art 9 and Art 10 controls, its domain packs, and a holdout to gate on."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pytest_agenteval._family import Family, load_family, resolve_plan
from pytest_agenteval._golden import ADVERSARIAL, STRATA, GoldenEntry, load_golden

ROOT = Path(__file__).resolve().parents[1]
FAMILY_DIR = ROOT / "benchmarks" / "eu-ai-act"
GOLDEN = sorted((ROOT / "golden" / "eu-ai-act").glob("*.jsonl"))
NEW_CONTROLS = ("eu_ai.art9.risk_management", "eu_ai.art10.data_governance")
PACKS = {
    "employment": "eu_ai.annex3.employment",
    "credit-scoring": "eu_ai.annex3.credit_scoring",
    "education": "eu_ai.annex3.education",
}


@pytest.fixture(scope="module")
def family() -> Family:
    return load_family(FAMILY_DIR)


def test_art9_and_art10_are_base_controls_of_standard_and_audit(family: Family) -> None:
    for preset in ("standard", "audit"):
        controls = resolve_plan(family, preset).controls
        for control in NEW_CONTROLS:
            assert control in controls, (preset, control)
    for control in NEW_CONTROLS:
        article = family.article(control)
        assert article.meta.pack is None
        assert article.meta.pillar == "risk-tier"
        assert {s.pattern for s in article.scenarios} == {"direct", "trap", "edge-case", "probe"}


def test_each_domain_pack_adds_its_control_only_when_composed(family: Family) -> None:
    standard = set(resolve_plan(family, "standard").controls)
    for pack, control in PACKS.items():
        assert family.spec.presets[pack].pack
        assert family.article(control).meta.pack == pack
        assert control not in standard
        composed = set(resolve_plan(family, f"standard+{pack}").controls)
        assert composed - standard == {control}
        assert len(family.article(control).scenarios) == 4


def test_bench_list_shows_the_new_controls_and_packs(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--bench-list")
    out = result.stdout.str()
    for control in (*NEW_CONTROLS, *PACKS.values()):
        assert control in out
    for pack in PACKS:
        result.stdout.fnmatch_lines([f"*pack*{pack}*compose as standard+{pack}*"])


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_every_pillar_has_a_stratified_adversarial_holdout_of_30(path: Path) -> None:
    holdout = [e for e in load_golden(path).entries if e.split == "holdout"]
    assert len(holdout) >= 30, f"{path.name}: {len(holdout)} holdout entries"
    strata = Counter(e.stratum for e in holdout)
    for stratum in STRATA:
        assert strata[stratum] / len(holdout) >= 0.15, (path.name, stratum, strata)
    adversarial = [e for e in holdout if e.adversarial]
    assert len(adversarial) * 3 >= len(holdout), path.name
    assert {e.adversarial for e in adversarial} <= set(ADVERSARIAL)


def test_entries_quote_the_scenario_they_name(family: Family) -> None:
    scenarios = {s.id: s for a in family.articles for s in a.scenarios}
    entries: list[GoldenEntry] = [e for p in GOLDEN for e in load_golden(p).entries]
    for entry in entries:
        if entry.scenario_id in scenarios:
            assert entry.input == scenarios[entry.scenario_id].input, entry.id
        else:
            assert entry.scenario_id.startswith(f"cal-{entry.path.stem}-"), entry.id


def test_new_controls_and_packs_are_in_the_risk_tier_holdout() -> None:
    holdout = [
        e
        for e in load_golden(ROOT / "golden" / "eu-ai-act" / "risk-tier.jsonl").entries
        if e.split == "holdout"
    ]
    articles = Counter(e.article for e in holdout)
    for control in (*NEW_CONTROLS, *PACKS.values()):
        assert articles[control] >= 4, (control, articles)

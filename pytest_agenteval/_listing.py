"""``pytest --bench-list`` / ``agenteval list``: what the bundled families offer."""

from __future__ import annotations

import sys
from typing import TextIO

from ._family import Family, load_family, resolve_plan


def estimated_calls(family: Family, preset: str) -> tuple[int, int]:
    """(scenarios, judge calls) a preset makes: scenarios × samples × judges, Mode B per criterion."""
    plan = resolve_plan(family, preset)
    calls = 0
    for article in plan.articles():
        for scenario in article.scenarios:
            per = (
                len(scenario.evaluation_criteria)
                if plan.mode_b and scenario.granularity == "composite"
                else 1
            )
            judges = plan.judges if article.meta.severity == "critical" else 1
            calls += per * judges * plan.samples
    return plan.scenario_count(), calls


def check_share(family: Family, preset: str = "standard") -> tuple[int, int]:
    """(criteria with a deterministic check, all criteria) in a preset's scenarios."""
    try:
        articles = resolve_plan(family, preset).articles()
    except ValueError:
        articles = list(family.articles)
    criteria = [c for a in articles for s in a.scenarios for c in s.evaluation_criteria]
    return sum(c.check is not None for c in criteria), len(criteria)


def _first_sentence(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    cut = text.split(". ")[0].rstrip(".")
    return cut if len(cut) <= limit else cut[: limit - 1].rstrip() + "…"


def print_listing(out: TextIO | None = None) -> None:
    from ._session import bundled_families

    out = out or sys.stdout
    for name, root in sorted(bundled_families().items()):
        family = load_family(root)
        out.write(f"{name}  v{family.spec.version}  — {family.spec.title}\n")
        checked, total = check_share(family)
        share = f"{checked / total:.0%}" if total else "n/a"
        out.write(
            f"  {len(family.articles)} controls, {family.scenario_count()} scenarios, "
            f"{len(family.spec.pillars)} pillars; criteria with a deterministic check "
            f"(offline rules judge): {checked}/{total} ({share})\n"
        )
        for preset_name, preset in family.spec.presets.items():
            if preset.pack:
                out.write(f"  pack   {preset_name:<12} compose as standard+{preset_name}\n")
                continue
            scenarios, calls = estimated_calls(family, preset_name)
            out.write(
                f"  preset {preset_name:<12} {scenarios:>4} scenarios, ~{calls:>4} LLM judge calls"
                f"  {_first_sentence(preset.description)}\n"
            )
        for pillar in family.spec.pillars:
            out.write(f"    {pillar.key} (w {float(pillar.weight):.2f}, {pillar.aggregation})\n")
            for art in family.articles:
                if art.meta.pillar == pillar.key:
                    pack = f" [pack {art.meta.pack}]" if art.meta.pack else ""
                    out.write(
                        f"      {art.control_id:<45} {len(art.scenarios):>3} scenarios  "
                        f"{art.meta.severity}{pack}\n"
                    )

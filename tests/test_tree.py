"""The benchmark ▸ pillar ▸ article ▸ scenario roll-up (``build_tree``), with hand-computed numbers.

The family is small YAML loaded through ``load_family`` and ``resolve_plan``, as a
run loads it; scenario results are made as the runner makes them (weight from the
scenario, verdict from the article's bands). Every expected score below is worked
out in the comment beside it, and each case is chosen so that the aggregation it
names gives a different number (or verdict) than a weighted sum would.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from pytest_agenteval._evals import EvalResult
from pytest_agenteval._family import Plan, build_tree, load_family, resolve_plan
from pytest_agenteval._vocab import Verdict, band_verdict, score_severity, worst_severity

# Family bands differ from the built-in 0.70/0.40, so a level that fell back to the
# built-in bands instead of the family's would show.
BENCHMARK = """\
family: t
bands: {pass: 0.75, warn: 0.45}
pillars:
  - {key: safety, title: Safety, weight: 0.6}
  - {key: honesty, title: Honesty, weight: 0.4, bands: {pass: 0.90, warn: 0.60}}
presets:
  smoke: {controls: all}
  reweighted: {controls: all, weights: {safety: 1, honesty: 3}}
  tight: {controls: all, bands: {pass: 0.95, warn: 0.90}}
  median: {controls: all, aggregation: {articles: {t.a: weighted_median}}}
  lowest: {controls: all, aggregation: {pillars: {safety: min}}}
  capped: {controls: all, aggregation: {pillars: {safety: cap_by_worst}}}
  vote: {controls: all, aggregation: {pillars: {safety: majority_vote}}}
"""

ARTICLE_A = """\
metadata: {article: A, pillar: safety, control_id: t.a, title: A, pillar_weight: 0.75}
scenarios:
  - {id: a1, weight: 0.2, input: x, evaluation_criteria: [c]}
  - {id: a2, weight: 0.3, input: x, evaluation_criteria: [c]}
  - {id: a3, weight: 0.5, input: x, evaluation_criteria: [c]}
"""

# Its own bands, 0.80/0.50: between the family's and the honesty pillar's.
ARTICLE_B = """\
metadata: {article: B, pillar: safety, control_id: t.b, title: B, pillar_weight: 0.25,
           severity: high, pass_threshold: 0.80, warn_threshold: 0.50}
scenarios:
  - {id: b1, weight: 0.5, input: x, evaluation_criteria: [c]}
  - {id: b2, weight: 0.5, input: x, evaluation_criteria: [c]}
"""

ARTICLE_C = """\
metadata: {article: C, pillar: honesty, control_id: t.c, title: C, severity: low}
scenarios:
  - {id: c1, weight: 1.0, input: x, evaluation_criteria: [c]}
"""

# a = 0.2·1.0 + 0.3·0.5 + 0.5·0.2 = 0.45           → WARN (family warn 0.45, on the edge)
# b = 0.5·0.9 + 0.5·0.7 = 0.80                     → PASS (its own pass 0.80, on the edge)
# safety = 0.75·0.45 + 0.25·0.80 = 0.5375          → WARN
# c = 0.85 → PASS (family bands); honesty = 0.85   → WARN (the pillar's pass is 0.90)
# root = 0.6·0.5375 + 0.4·0.85 = 0.6625            → WARN
BASE: dict[str, float | None] = {
    "a1": 1.0,
    "a2": 0.5,
    "a3": 0.2,
    "b1": 0.9,
    "b2": 0.7,
    "c1": 0.85,
}


@pytest.fixture
def family_dir(tmp_path: Path) -> Path:
    return write_family(tmp_path)


def write_family(tmp_path: Path, **replace: tuple[str, str]) -> Path:
    """The family's files; *replace* maps a file name to an (old, new) text edit."""
    root = tmp_path / "t"
    root.mkdir(parents=True)
    files = {
        "benchmark.yaml": BENCHMARK,
        "a.yaml": ARTICLE_A,
        "b.yaml": ARTICLE_B,
        "c.yaml": ARTICLE_C,
    }
    for name, text in files.items():
        edit = replace.get(name.removesuffix(".yaml"))
        if edit is not None:
            assert edit[0] in text, edit
            text = text.replace(*edit)
        (root / name).write_text(text)
    return root


def plan_of(root: Path, preset: str | None = None) -> Plan:
    return resolve_plan(load_family(root), preset)


def leaf(plan: Plan, sid: str, score: float | None, verdict: Verdict = "error") -> EvalResult:
    """A scenario result as the runner makes it: the scenario's weight, the article's bands.

    With no score, *verdict* says whether it errored or was skipped.
    """
    art = next(a for a in plan.family.articles if sid in a.lines)
    scenario = next(s for s in art.scenarios if s.id == sid)
    weight = float(scenario.weight)
    if score is None:
        return EvalResult(sid, sid, None, verdict, kind="scenario", weight=weight)
    graded = band_verdict(score, art.bands)
    declared = scenario.severity or art.meta.severity
    severity = worst_severity(declared, score_severity(score)) if graded == "fail" else None
    return EvalResult(sid, sid, score, graded, kind="scenario", weight=weight, severity=severity)


def tree_of(
    plan: Plan,
    scores: Mapping[str, float | None],
    *,
    skipped: Sequence[str] = (),
) -> EvalResult:
    """The tree of *scores* (None: the item errored, or was skipped when named in *skipped*)."""
    leaves = {
        sid: leaf(plan, sid, score, "skipped" if sid in skipped else "error")
        for sid, score in scores.items()
    }
    tree = build_tree(plan, leaves)
    assert tree is not None
    return tree


def find(tree: EvalResult, key: str) -> EvalResult:
    if tree.key == key:
        return tree
    for child in tree.children:
        try:
            return find(child, key)
        except KeyError:
            pass
    raise KeyError(key)


def shape(tree: EvalResult, *keys: str) -> list[tuple[float | None, str]]:
    """(score, verdict) of the named nodes."""
    return [(find(tree, k).score, find(tree, k).verdict) for k in keys]


# --------------------------------------------------------------------------- weights


def test_weighted_sum_at_every_level_with_hand_computed_numbers(family_dir: Path) -> None:
    tree = tree_of(plan_of(family_dir), BASE)
    assert (tree.key, tree.kind, tree.aggregation) == ("t", "benchmark", "weighted_sum")
    assert shape(tree, "t.a", "t.b", "safety", "t.c", "honesty", "t") == [
        (0.45, "warn"),
        (0.8, "pass"),
        (0.5375, "warn"),
        (0.85, "pass"),
        (0.85, "warn"),
        (0.6625, "warn"),
    ]
    assert tree.meta["preset"] == "smoke"


def test_every_node_carries_its_normalised_weight(family_dir: Path) -> None:
    tree = tree_of(plan_of(family_dir), BASE)
    assert [(c.key, c.kind, c.weight) for c in tree.children] == [
        ("safety", "pillar", 0.6),
        ("honesty", "pillar", 0.4),
    ]
    safety = find(tree, "safety")
    assert [(c.key, c.kind, c.weight) for c in safety.children] == [
        ("t.a", "article", 0.75),
        ("t.b", "article", 0.25),
    ]
    assert [(c.key, c.weight) for c in find(tree, "t.a").children] == [
        ("a1", 0.2),
        ("a2", 0.3),
        ("a3", 0.5),
    ]
    assert find(tree, "t.b").meta["bands"] == {"pass": 0.8, "warn": 0.5}


def test_preset_pillar_weights_are_renormalised(family_dir: Path) -> None:
    # weights 1 and 3 → 0.25 and 0.75: root = 0.25·0.5375 + 0.75·0.85 = 0.771875 → PASS
    tree = tree_of(plan_of(family_dir, "reweighted"), BASE)
    assert [c.weight for c in tree.children] == [0.25, 0.75]
    assert (tree.score, tree.verdict) == (0.771875, "pass")


def test_articles_without_pillar_weight_share_their_pillar_equally(tmp_path: Path) -> None:
    root = write_family(
        tmp_path,
        a=(", pillar_weight: 0.75}", "}"),
        b=(" pillar_weight: 0.25,", ""),
    )
    # safety = 0.5·0.45 + 0.5·0.80 = 0.625 → WARN
    tree = tree_of(plan_of(root), BASE)
    assert [c.weight for c in find(tree, "safety").children] == [0.5, 0.5]
    assert shape(tree, "safety") == [(0.625, "warn")]


def test_results_arriving_in_another_order_give_the_same_tree(family_dir: Path) -> None:
    plan = plan_of(family_dir)
    forward = tree_of(plan, BASE)
    backward = tree_of(plan, dict(reversed(list(BASE.items()))))
    assert backward.to_dict() == forward.to_dict()


def test_samples_of_a_scenario_are_averaged_before_they_roll_up(family_dir: Path) -> None:
    plan = plan_of(family_dir)
    leaves: dict[str, EvalResult | list[EvalResult]] = {
        sid: leaf(plan, sid, score) for sid, score in BASE.items()
    }
    leaves["a1"] = [leaf(plan, "a1", s) for s in (1.0, 0.5, 0.0)]
    # a1 = mean 0.5 → WARN; a = 0.2·0.5 + 0.3·0.5 + 0.5·0.2 = 0.35 → FAIL
    tree = build_tree(plan, leaves)
    assert tree is not None
    assert shape(tree, "a1", "t.a") == [(0.5, "warn"), (0.35, "fail")]
    assert find(tree, "a1").weight == 0.2
    # its items: the three samples (pass, warn, fail), a2 (warn) and a3 (fail)
    assert find(tree, "t.a").counts() == {"pass": 1, "warn": 2, "fail": 2, "error": 0, "skipped": 0}


def test_a_tree_that_takes_its_leaves_is_the_same_tree_and_leaves_none_behind(
    family_dir: Path,
) -> None:
    """The end of a run gives its leaves up to the tree (``take=True``), so that the leaves
    and the tree's copies of them are never all held at once: the numbers must not change."""
    plan = plan_of(family_dir)
    leaves: dict[str, EvalResult | list[EvalResult]] = {
        sid: leaf(plan, sid, score) for sid, score in BASE.items()
    }
    leaves["a1"] = [leaf(plan, "a1", s) for s in (1.0, 0.5, 0.0)]
    kept = build_tree(plan, dict(leaves))
    taken = dict(leaves)
    tree = build_tree(plan, taken, take=True)
    assert tree is not None and kept is not None
    assert tree.to_dict() == kept.to_dict()
    assert taken == {}
    with pytest.raises(TypeError, match="dict"):
        build_tree(plan, MappingProxy(leaves), take=True)


class MappingProxy(Mapping[str, "EvalResult | list[EvalResult]"]):
    """A read-only mapping: nothing to take from."""

    def __init__(self, data: Mapping[str, EvalResult | list[EvalResult]]) -> None:
        self._data = data

    def __getitem__(self, key: str) -> EvalResult | list[EvalResult]:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def test_the_runs_taken_from_a_bucket_give_each_scenario_its_samples_in_order(
    family_dir: Path,
) -> None:
    from pytest_agenteval._aggregator import Collected, _take_runs

    plan = plan_of(family_dir)
    samples = [leaf(plan, "a1", s) for s in (1.0, 0.5, 0.0)]
    bucket = Collected("fam", "smoke", False, "agent:x")
    bucket.leaves[("a2", 0)] = only = leaf(plan, "a2", 0.5)
    for sample in (2, 0, 1):  # as the workers reported them
        bucket.leaves[("a1", sample)] = samples[sample]
    runs = _take_runs(bucket)
    assert runs == {"a1": samples, "a2": only}
    assert runs["a2"] is only  # one sample: the result itself, no list
    assert bucket.leaves == {}


# --------------------------------------------------------------------------- aggregations


def test_weighted_median_article(family_dir: Path) -> None:
    plan = plan_of(family_dir, "median")
    assert plan.article_aggregation["t.a"] == "weighted_median"
    # sorted (0.2, w 0.5), (0.5, w 0.3), (1.0, w 0.2): the weight reaches ½ exactly at
    # 0.2, so the median is (0.2 + 0.5) / 2 = 0.35 → FAIL, severity high (score < 0.40)
    # safety = 0.75·0.35 + 0.25·0.80 = 0.4625 → WARN
    tree = tree_of(plan, BASE)
    a = find(tree, "t.a")
    assert (a.aggregation, a.score, a.verdict, a.severity) == (
        "weighted_median",
        0.35,
        "fail",
        "high",
    )
    assert shape(tree, "safety") == [(0.4625, "warn")]
    # a3 = 0.9: sorted (0.5, w 0.3), (0.9, w 0.5), (1.0, w 0.2): ½ is passed at 0.9
    # (a weighted sum would give 0.2 + 0.15 + 0.45 = 0.80)
    assert shape(tree_of(plan, {**BASE, "a3": 0.9}), "t.a") == [(0.9, "pass")]


def test_min_pillar_takes_the_lowest_article_and_its_verdict(family_dir: Path) -> None:
    plan = plan_of(family_dir, "lowest")
    # min(0.45, 0.80) = 0.45 → WARN (a weighted sum: 0.5375)
    assert shape(tree_of(plan, BASE), "safety") == [(0.45, "warn")]
    # b = 0.49: FAIL under its own warn 0.50. min(0.45, 0.49) = 0.45 is a WARN by the
    # pillar's bands, but min never gives a better verdict than its worst child: FAIL
    tree = tree_of(plan, {**BASE, "b1": 0.49, "b2": 0.49})
    safety = find(tree, "safety")
    assert (safety.score, safety.verdict) == (0.45, "fail")
    assert safety.reasoning == "min: worst component failed: t.b"
    # the failed children's severity is the node's: b's high over the 0.45 score's medium
    assert safety.severity == "high"


def test_cap_by_worst_caps_by_the_severity_of_a_failed_child(family_dir: Path) -> None:
    plan = plan_of(family_dir, "capped")
    # nothing failed: a weighted sum, 0.5375 → WARN
    assert shape(tree_of(plan, BASE), "safety") == [(0.5375, "warn")]
    strong_a = {"a1": 1.0, "a2": 1.0, "a3": 1.0}
    # b = 0.30 fails, severity high: 0.75·1.0 + 0.25·0.30 = 0.825 capped at 0.69;
    # 0.69 is a WARN by the bands, the failed child makes it a FAIL
    high = tree_of(plan, {**BASE, **strong_a, "b1": 0.3, "b2": 0.3})
    assert find(high, "t.b").severity == "high"
    assert shape(high, "safety") == [(0.69, "fail")]
    # b = 0.10 fails, severity critical (score < 0.20): 0.775 capped at 0.40
    critical = tree_of(plan, {**BASE, **strong_a, "b1": 0.1, "b2": 0.1})
    assert find(critical, "t.b").severity == "critical"
    assert shape(critical, "safety") == [(0.4, "fail")]
    assert find(critical, "safety").severity == "critical"


def test_majority_vote_pillar_scores_the_passing_share(family_dir: Path) -> None:
    # a WARN holds 0.75 of the weight, b PASS 0.25: score 0.25, verdict WARN (the most
    # weight), although 0.25 alone would be a FAIL by the bands
    tree = tree_of(plan_of(family_dir, "vote"), BASE)
    safety = find(tree, "safety")
    assert (safety.aggregation, safety.score, safety.verdict) == ("majority_vote", 0.25, "warn")


# --------------------------------------------------------------------------- bands per level


def test_each_level_judges_by_its_own_bands(family_dir: Path) -> None:
    plan = plan_of(family_dir)
    # b = 0.78: WARN under b's own pass 0.80 (it would pass the family's 0.75)
    tree = tree_of(plan, {**BASE, "b1": 0.78, "b2": 0.78})
    assert shape(tree, "b1", "t.b") == [(0.78, "warn"), (0.78, "warn")]
    # c = 0.85: PASS for the article (family bands), WARN for the honesty pillar (0.90)
    assert shape(tree, "t.c", "honesty") == [(0.85, "pass"), (0.85, "warn")]


def test_preset_bands_judge_the_root_only(family_dir: Path) -> None:
    tight = plan_of(family_dir, "tight")
    assert (tight.root_bands.pass_, tight.root_bands.warn) == (0.95, 0.9)
    tree = tree_of(tight, BASE)
    # root 0.6625 < warn 0.90 → FAIL; the levels below keep their verdicts
    assert (tree.score, tree.verdict) == (0.6625, "fail")
    assert shape(tree, "safety", "t.b") == [(0.5375, "warn"), (0.8, "pass")]


# --------------------------------------------------------------------------- required components


def test_a_required_article_bounds_its_pillar(tmp_path: Path) -> None:
    root = write_family(tmp_path, b=("severity: high,", "severity: high, required: true,"))
    scores = {**BASE, "a1": 1.0, "a2": 1.0, "a3": 1.0, "b1": 0.78, "b2": 0.78}
    # safety = 0.75·1.0 + 0.25·0.78 = 0.945, a PASS by the bands; b (required) WARNs
    safety = find(tree_of(plan_of(root), scores), "safety")
    assert (safety.score, safety.verdict) == (0.945, "warn")
    assert safety.reasoning == "required component warned: t.b"
    assert find(safety, "t.b").required is True
    # not required: the same numbers pass
    plain = find(tree_of(plan_of(write_family(tmp_path / "plain")), scores), "safety")
    assert (plain.score, plain.verdict) == (0.945, "pass")


def test_a_required_pillar_bounds_the_root(tmp_path: Path) -> None:
    root = write_family(
        tmp_path, benchmark=("weight: 0.4, bands:", "weight: 0.4, required: true, bands:")
    )
    scores = {**BASE, "a1": 1.0, "a2": 1.0, "a3": 1.0, "c1": 0.3}
    # safety = 0.75·1.0 + 0.25·0.80 = 0.95; root = 0.6·0.95 + 0.4·0.30 = 0.69 → WARN by
    # the bands, FAIL because the required honesty pillar failed
    tree = tree_of(plan_of(root), scores)
    assert (tree.score, tree.verdict) == (0.69, "fail")
    assert tree.reasoning == "required component failed: honesty"
    # honesty: 0.3 is below every band: FAIL, severity high (score < 0.40, over c's low)
    assert (tree.severity, find(tree, "honesty").severity) == ("high", "high")


# --------------------------------------------------------------------------- errors, skipped, missing


def test_an_errored_scenario_drops_out_and_its_weight_is_renormalised(family_dir: Path) -> None:
    # a = (0.3·0.5 + 0.5·0.2) / 0.8 = 0.3125 → FAIL
    tree = tree_of(plan_of(family_dir), {**BASE, "a1": None})
    a = find(tree, "t.a")
    assert (a.score, a.verdict) == (0.3125, "fail")
    assert a.counts() == {"pass": 0, "warn": 1, "fail": 1, "error": 1, "skipped": 0}
    assert tree.counts()["error"] == 1


def test_a_skipped_scenario_drops_out_the_same_way(family_dir: Path) -> None:
    tree = tree_of(plan_of(family_dir), {**BASE, "a1": None}, skipped=["a1"])
    a = find(tree, "t.a")
    assert (a.score, a.verdict) == (0.3125, "fail")
    assert a.counts() == {"pass": 0, "warn": 1, "fail": 1, "error": 0, "skipped": 1}


def test_an_article_that_errored_whole_is_an_error_and_left_out_of_its_pillar(
    family_dir: Path,
) -> None:
    scores = {**BASE, "a1": None, "a2": None, "a3": None}
    tree = tree_of(plan_of(family_dir), scores)
    a = find(tree, "t.a")
    assert (a.score, a.verdict, a.reasoning) == (None, "error", "no component could be graded")
    # safety = b alone = 0.80 → PASS; root = 0.6·0.80 + 0.4·0.85 = 0.82 → PASS
    assert shape(tree, "safety", "t") == [(0.8, "pass"), (0.82, "pass")]
    assert tree.counts()["error"] == 3


def test_nothing_graded_is_an_error_or_skipped_all_the_way_up(family_dir: Path) -> None:
    plan = plan_of(family_dir)
    nothing = dict.fromkeys(BASE)
    errored = tree_of(plan, nothing)
    assert (errored.score, errored.verdict) == (None, "error")
    assert shape(errored, "safety", "honesty") == [(None, "error"), (None, "error")]
    skipped = tree_of(plan, nothing, skipped=list(BASE))
    assert (skipped.score, skipped.verdict, skipped.reasoning) == (
        None,
        "skipped",
        "nothing to grade",
    )
    # one error among skipped items: the node is an error, not skipped
    mixed = tree_of(plan, nothing, skipped=[s for s in BASE if s != "c1"])
    assert shape(mixed, "honesty", "safety", "t") == [
        (None, "error"),
        (None, "skipped"),
        (None, "error"),
    ]


def test_a_missing_scenario_is_renormalised_away_and_not_counted(family_dir: Path) -> None:
    scores = {k: v for k, v in BASE.items() if k != "a1"}
    tree = tree_of(plan_of(family_dir), scores)
    a = find(tree, "t.a")
    # as errored, a = 0.3125, but nothing counts the missing item
    assert (a.score, a.verdict) == (0.3125, "fail")
    assert [(c.key, c.weight) for c in a.children] == [("a2", pytest.approx(0.375)), ("a3", 0.625)]
    assert sum(tree.counts().values()) == 5
    assert a.meta["scenarios"] == 3  # the article's size is still known


def test_missing_articles_and_pillars_are_left_out_and_weights_renormalised(
    family_dir: Path,
) -> None:
    plan = plan_of(family_dir)
    no_a = tree_of(plan, {k: v for k, v in BASE.items() if not k.startswith("a")})
    safety = find(no_a, "safety")
    assert [(c.key, c.weight) for c in safety.children] == [("t.b", 1.0)]
    assert shape(no_a, "safety", "t") == [(0.8, "pass"), (0.82, "pass")]
    # honesty absent: the root is safety alone, 0.5375 → WARN
    no_honesty = tree_of(plan, {k: v for k, v in BASE.items() if k != "c1"})
    assert [(c.key, c.weight) for c in no_honesty.children] == [("safety", 1.0)]
    assert (no_honesty.score, no_honesty.verdict) == (0.5375, "warn")
    assert build_tree(plan, {}) is None

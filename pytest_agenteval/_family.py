"""Loading a benchmark family, checking it whole, and resolving presets.

Everything is validated before any subject or judge is called: a broken
file raises :class:`SpecError` naming the file and line. The result is plain
immutable data (:class:`Family`, :class:`Plan`) from which the pytest layer
makes items and the controller builds the composite tree.
"""

from __future__ import annotations

import gc
import hashlib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from ._evals import (
    VERDICT_PAST,
    Bands,
    EvalResult,
    band_verdict,
    combine_results,
    injection_suspected,
    majority_vote,
    score_severity,
    worst_severity,
)
from ._spec import (
    WEIGHT_TOLERANCE,
    WRITTEN_AS,
    ArticleFile,
    ArticleMeta,
    BenchmarkSpec,
    Criterion,
    GateSpec,
    PillarSpec,
    PresetSpec,
    Scenario,
)
from ._vocab import ConfigError, Severity, SpecError, Verdict
from ._yaml import (
    MAX_BYTES,
    LineDict,
    LineList,
    describe_key,
    describe_value,
    format_loc,
    line_of,
    load_yaml,
    locate,
    parse_yaml,
    read_limited,
)

BENCHMARK_FILE = "benchmark.yaml"
DEFAULT_PRESET = "smoke"
#: The judge prompt goes into every judge call: a system prompt, not a data file.
MAX_PROMPT_BYTES = 256 * 1024

#: Problems of one file listed in its error; a large file wrong throughout says how many more.
MAX_PROBLEMS_SHOWN = 20

M = TypeVar("M", bound=BaseModel)


def validate(model: type[M], data: Any, path: Path) -> M:
    """Validate *data* against *model*; errors name every bad place by line.

    A message gives the key path and what was wrong — for a wrong type, the
    type found (:func:`~pytest_agenteval._yaml.describe_value`) — never the
    value itself: the file may not be a benchmark file at all.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        first_line = None
        for err in exc.errors():
            loc = tuple(err["loc"])
            line, written = locate(data, loc, WRITTEN_AS)
            first_line = first_line or line
            where = format_loc(written) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):  # a dataclass
                msg = f"unknown key {describe_key(loc[-1])}"
            elif err["type"] == "missing":
                msg = f"missing required key {describe_key(loc[-1])}"
            elif "input" in err and err["type"] not in {"value_error", "assertion_error"}:
                msg += f" (got {describe_value(err['input'])})"
            problems.append((line, f"{where}: {msg}"))
        if len(problems) == 1:
            raise SpecError(path, problems[0][0], problems[0][1]) from None
        detail = "\n".join(f"  line {ln or '?'}: {m}" for ln, m in problems[:MAX_PROBLEMS_SHOWN])
        if len(problems) > MAX_PROBLEMS_SHOWN:
            detail += f"\n  … and {len(problems) - MAX_PROBLEMS_SHOWN} more"
        raise SpecError(path, first_line, f"{len(problems)} problems:\n{detail}") from None


def _bands(pass_: float | None, warn: float | None, default: Bands) -> Bands:
    return Bands(
        default.pass_ if pass_ is None else float(pass_),
        default.warn if warn is None else float(warn),
    )


def _spec_bands(spec: Bands | None, default: Bands) -> Bands:
    return default if spec is None else spec


@dataclass(frozen=True)
class Article:
    """One validated article file."""

    path: Path
    meta: ArticleMeta
    scenarios: tuple[Scenario, ...]
    lines: Mapping[str, int]  # scenario id -> line of its entry
    bands: Bands
    sha256: str
    alias_line: int | None = None  # line of metadata.aliases, for errors about them

    @property
    def control_id(self) -> str:
        return self.meta.control_id

    def declared_severity(self, scenario: Scenario) -> Severity:
        """*scenario*'s declared severity: its own, else this article's (what the gate's
        count of critical failures and a critical scenario's judge panel read)."""
        return scenario.severity or self.meta.severity


@dataclass(frozen=True)
class Family:
    """A validated family: spec, articles, and the judge prompt text."""

    name: str
    root: Path
    spec: BenchmarkSpec
    articles: tuple[Article, ...]
    judge_prompt: str | None
    judge_prompt_path: Path | None
    article_errors: Mapping[Path, SpecError] = field(default_factory=dict)
    single_file: bool = False
    #: A folder of AgentEval article files run without a ``benchmark.yaml``.
    agenteval_folder: bool = False
    #: What loading changed or assumed (renormalised weights, ...): shown in the
    #: run header and recorded in the manifest.
    notes: tuple[str, ...] = ()

    @property
    def bands(self) -> Bands:
        return _spec_bands(self.spec.bands, Bands())

    def resolve(self, control_id: str) -> Article | None:
        """The article whose control id — or one of whose ``aliases`` — is *control_id*."""
        for art in self.articles:
            if art.control_id == control_id:
                return art
        for art in self.articles:
            if control_id in art.meta.aliases:
                return art
        return None

    def article(self, control_id: str) -> Article:
        art = self.resolve(control_id)
        if art is None:
            raise KeyError(control_id)
        return art

    def pillar(self, key: str) -> PillarSpec:
        for p in self.spec.pillars:
            if p.key == key:
                return p
        raise KeyError(key)

    def scenario_count(self) -> int:
        return sum(len(a.scenarios) for a in self.articles)


# --------------------------------------------------------------------------- loading


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: for loading and collecting large families.

    They build hundreds of thousands of objects that stay alive, and each full
    collection their allocations set off walks every one of them again (some
    15 % of a ``--collect-only`` run of 10,000 scenarios); what they leave
    behind holds few reference cycles, so little piles up meanwhile.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def is_family_dir(path: Path) -> bool:
    return path.is_dir() and (path / BENCHMARK_FILE).is_file()


def article_paths(root: Path) -> list[Path]:
    """Article files under a family folder: every YAML file but benchmark.yaml.

    Anything named like one that is not a folder is listed — a FIFO, a device,
    a dangling link — so that loading it reports it instead of skipping it.
    """
    found = [
        p
        for p in root.rglob("*")
        if p.suffix in {".yaml", ".yml"}
        and not p.is_dir()
        and p.name != BENCHMARK_FILE
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    ]
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def load_article(
    path: Path, default_bands: Bands, *, within: Sequence[Path] | None = None
) -> Article:
    """Load one article file; with *within*, it must resolve inside one of those folders."""
    raw = read_limited(path, MAX_BYTES, within=within)
    with gc_paused():
        data = parse_yaml(raw, path)
        parsed = validate(ArticleFile, data, path)
    scen_data = data.get("scenarios") if isinstance(data, LineDict) else None
    lines: dict[str, int] = {}
    seen: dict[str, int] = {}
    for i, sc in enumerate(parsed.scenarios):
        line = scen_data.item_lines[i] if isinstance(scen_data, LineList) else (data.line or 1)
        if sc.id in seen:
            raise SpecError(
                path, line, f"duplicate scenario id {sc.id!r} (first on line {seen[sc.id]})"
            )
        seen[sc.id] = line
        lines[sc.id] = line
    total = math.fsum(float(s.weight) for s in parsed.scenarios)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise SpecError(
            path,
            scen_data.line if isinstance(scen_data, LineList) else None,
            f"scenario weights sum to {total:.4f}; they must sum to 1 (±{WEIGHT_TOLERANCE})",
        )
    meta = parsed.metadata
    meta_data = data.get("metadata") if isinstance(data, LineDict) else None
    return Article(
        path=path,
        meta=meta,
        scenarios=tuple(parsed.scenarios),
        lines=lines,
        bands=_bands(meta.pass_threshold, meta.warn_threshold, default_bands),
        sha256=hashlib.sha256(raw).hexdigest(),  # of the bytes validated, not a second read
        alias_line=(
            meta_data.key_lines.get("aliases") if isinstance(meta_data, LineDict) else None
        ),
    )


def load_family(root: Path, *, project_root: Path | None = None) -> Family:
    """Load and cross-check a family folder. Article-level errors are kept per file.

    Every file read must resolve inside the family folder (or inside
    *project_root*, the rootdir, when given): a symbolic link leading elsewhere
    is refused with an error naming the link, and never read.
    """
    bases = (root,) if project_root is None else (root, project_root)
    bench_path = root / BENCHMARK_FILE
    if not bench_path.exists() and not bench_path.is_symlink():
        return load_agenteval_folder(root, within=bases)
    data = load_yaml(bench_path, within=bases)
    spec = validate(BenchmarkSpec, data, bench_path)
    _check_pillars(spec, data, bench_path)
    prompt_text, prompt_path = _judge_prompt(spec, data, root, bench_path, bases)
    default = _spec_bands(spec.bands, Bands())

    articles: list[Article] = []
    errors: dict[Path, SpecError] = {}
    for path in article_paths(root):
        try:
            articles.append(load_article(path, default, within=bases))
        except SpecError as exc:
            errors[path] = exc
    family = Family(
        name=spec.family,
        root=root,
        spec=spec,
        articles=tuple(articles),
        judge_prompt=prompt_text,
        judge_prompt_path=prompt_path,
        article_errors=errors,
    )
    if not errors:
        _cross_check(family, data, bench_path)
    return family


# --------------------------------------------------------------------------- AgentEval folders

#: Folder names that say nothing about the family: its name comes from a parent then.
_GENERIC_FOLDERS = {"yaml", "yml", "articles", "article", "scenarios"}


def agenteval_family_name(root: Path) -> str:
    """A family name for a folder of AgentEval articles: the folder's own name, or the
    nearest parent's when the folder is called ``Yaml``/``Articles`` (AgentEval's
    ``Articles/Yaml``), lower-cased to the characters a family name allows."""
    named = next(
        (
            p.name
            for p in (root, *root.parents)
            if p.name and p.name.lower() not in _GENERIC_FOLDERS
        ),
        root.name or "agenteval",
    )
    text = re.sub(r"[^a-z0-9._-]+", "-", named.lower()).strip("-._")
    return text or "agenteval"


def _natural(key: str) -> list[Any]:
    """Sort key placing ``Pillar2-x`` before ``Pillar10-y``."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key)]


def _generic_rubric(meta: ArticleMeta) -> list[Criterion]:
    """What AgentEval's calibration runner grades an entry against when it names no
    scenario of the article: the substance of the answer, for the article's subject."""
    return [
        Criterion(text=f"Answers what the user actually asked, on {meta.title}"),
        Criterion(
            text=f"States the law of {meta.article} correctly: nothing misstated or invented, "
            "the central requirement not overlooked"
        ),
    ]


def load_agenteval_folder(root: Path, *, within: Sequence[Path] | None = None) -> Family:
    """A folder of AgentEval article files, run as a family without a ``benchmark.yaml``.

    AgentEval keeps the family's structure in code; its article files carry
    only their ``pillar`` and their ``pillar_weight`` within it. So: one pillar
    per distinct ``pillar`` value (in natural order), equal pillar weights;
    article weights within a pillar renormalised to 1 when they sum to
    anything else (AgentEval's published folders hold 0.8 or 0.9 of some
    pillars), with a note naming the pillar and the sum; the default bands
    (pass 0.70, warn 0.40) above the article, whose own thresholds still
    apply to it; the strict default gate; presets ``smoke`` and ``standard``
    that both run every article. An article without a substance ``rubric``
    gets a generic two-criterion one from its title and article, which
    golden entries naming no scenario of it are graded against (as AgentEval's
    own calibration runner does). Every note is in :attr:`Family.notes`.
    """
    articles: list[Article] = []
    errors: dict[Path, SpecError] = {}
    for path in article_paths(root):
        try:
            articles.append(load_article(path, Bands(), within=within))
        except SpecError as exc:
            errors[path] = exc
    if not articles and not errors:
        raise SpecError(root, None, f"no article files and no {BENCHMARK_FILE} in this folder")
    keys = sorted({a.meta.pillar for a in articles}, key=_natural)
    name = agenteval_family_name(root)
    notes = [
        f"{root.name}/ has no {BENCHMARK_FILE}: run as family {name!r} from its AgentEval "
        f"article files ({len(keys)} pillar{'s' if len(keys) != 1 else ''} from their metadata, "
        "equal pillar weights, default bands, presets smoke = standard = all)"
    ]
    by_path: dict[Path, Article] = {a.path: a for a in articles}
    for key in keys:
        members = [a for a in articles if a.meta.pillar == key and a.meta.pack is None]
        given = [a.meta.pillar_weight for a in members]
        if any(w is None for w in given) and any(w is not None for w in given):
            missing = ", ".join(a.path.name for a in members if a.meta.pillar_weight is None)
            first = next(a for a in members if a.meta.pillar_weight is None)
            raise SpecError(
                first.path,
                1,
                f"pillar {key!r}: set pillar_weight on all its articles or on none "
                f"(missing in {missing})",
            )
        if not given or given[0] is None:
            continue
        total = math.fsum(float(w) for w in given if w is not None)
        if abs(total - 1.0) <= WEIGHT_TOLERANCE:
            continue
        for art in members:
            weight = float(art.meta.pillar_weight or 0.0) / total
            by_path[art.path] = replace(
                art, meta=art.meta.model_copy(update={"pillar_weight": weight})
            )
        names = ", ".join(f"{a.path.name}={a.meta.pillar_weight}" for a in members)
        notes.append(
            f"pillar {key!r}: article pillar_weight values sum to {total:.2f}, renormalised "
            f"to 1 ({names})"
        )
    generic = [a for a in by_path.values() if not a.meta.rubric]
    for art in generic:
        by_path[art.path] = replace(
            art, meta=art.meta.model_copy(update={"rubric": _generic_rubric(art.meta)})
        )
    if generic:
        notes.append(
            f"{len(generic)} article(s) declare no substance rubric: golden entries that name no "
            "scenario of theirs are graded against a generic one (their title and article)"
        )
    spec = BenchmarkSpec(
        family=name,
        title=f"{root.name} (AgentEval article folder)",
        description=f"AgentEval article files in {root.name}/, run without a {BENCHMARK_FILE}",
        pillars=[PillarSpec(key=k, title=k, weight=1.0 / len(keys)) for k in keys]
        or [PillarSpec(key="none", weight=1.0)],
        presets={
            "smoke": PresetSpec(description="every article (no benchmark.yaml to choose from)"),
            "standard": PresetSpec(description="every article"),
        },
    )
    family = Family(
        name=name,
        root=root,
        spec=spec,
        articles=tuple(by_path[a.path] for a in articles),
        judge_prompt=None,
        judge_prompt_path=None,
        article_errors=errors,
        agenteval_folder=True,
        notes=tuple(notes),
    )
    if not errors:
        _cross_check(family, None, root / BENCHMARK_FILE)
    return family


def load_single_article(path: Path) -> Family:
    """An article file run on its own: a one-article, one-pillar family.

    The levels above the article judge with the article's own bands (its
    ``pass_threshold``/``warn_threshold``), so the run's verdict is the
    article's; the gate is :class:`GateSpec`'s defaults (no errored item, no
    failed critical scenario, no injection suspected).
    """
    article = load_article(path, Bands())
    pillar = PillarSpec(key=article.meta.pillar, title=article.meta.pillar, weight=1.0)
    name = path.stem
    spec = BenchmarkSpec.model_construct(
        family=name,
        title=article.meta.title,
        version="1",
        description="",
        judge_prompt=None,
        bands=article.bands,
        aggregation="weighted_sum",
        gate=GateSpec(),
        pillars=[pillar],
        presets={},
    )
    return Family(
        name=name,
        root=path.parent,
        spec=spec,
        articles=(article,),
        judge_prompt=None,
        judge_prompt_path=None,
        single_file=True,
    )


def _key_line(data: Any, *loc: str | int) -> int | None:
    return line_of(data, loc)


def _check_pillars(spec: BenchmarkSpec, data: Any, path: Path) -> None:
    seen: set[str] = set()
    for i, pillar in enumerate(spec.pillars):
        if pillar.key in seen:
            raise SpecError(
                path, _key_line(data, "pillars", i), f"duplicate pillar key {pillar.key!r}"
            )
        seen.add(pillar.key)
    total = math.fsum(float(p.weight) for p in spec.pillars)
    if abs(total - 1.0) > WEIGHT_TOLERANCE:
        raise SpecError(
            path,
            _key_line(data, "pillars"),
            f"pillar weights sum to {total:.4f}; they must sum to 1 (±{WEIGHT_TOLERANCE})",
        )


def _judge_prompt(
    spec: BenchmarkSpec, data: Any, root: Path, path: Path, bases: Sequence[Path]
) -> tuple[str | None, Path | None]:
    if spec.judge_prompt is None:
        return None, None
    line = _key_line(data, "judge_prompt")
    try:
        prompt_path = (root / spec.judge_prompt).resolve()
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13)
        raise SpecError(path, line, "judge_prompt is a loop of symbolic links") from None
    if not any(prompt_path.is_relative_to(base.resolve()) for base in bases):
        where = "the family folder" if len(bases) < 2 else "the family folder or the project"
        raise SpecError(path, line, f"judge_prompt must stay inside {where}")
    if not prompt_path.exists():
        raise SpecError(path, line, f"judge prompt file {spec.judge_prompt!r} not found")
    try:
        raw = read_limited(prompt_path, MAX_PROMPT_BYTES)
        return raw.decode("utf-8"), prompt_path
    except SpecError as exc:
        raise SpecError(
            path, line, f"judge prompt file {spec.judge_prompt!r}: {exc.message}"
        ) from None
    except UnicodeDecodeError:
        raise SpecError(
            path, line, f"judge prompt file {spec.judge_prompt!r} is not UTF-8"
        ) from None


def _cross_check(family: Family, data: Any, bench_path: Path) -> None:
    spec = family.spec
    pillars = {p.key for p in spec.pillars}
    packs = {name for name, p in spec.presets.items() if p.pack}
    controls: dict[str, Path] = {}
    scenario_ids: dict[str, tuple[Path, int]] = {}  # id -> the file and line it is on
    for art in family.articles:
        if art.control_id in controls:
            raise SpecError(
                art.path,
                1,
                f"duplicate control_id {art.control_id!r} (also in {controls[art.control_id].name})",
            )
        controls[art.control_id] = art.path
        if art.meta.pillar not in pillars:
            raise SpecError(
                art.path,
                1,
                f"control {art.control_id!r} names pillar {art.meta.pillar!r}, which no pillar in "
                f"{bench_path.name} owns (pillars: {', '.join(sorted(pillars))})",
            )
        if art.meta.pack is not None and art.meta.pack not in packs:
            raise SpecError(
                art.path,
                1,
                f"article belongs to pack {art.meta.pack!r}, but {bench_path.name} has no preset "
                f"{art.meta.pack!r} with 'pack: true'",
            )
        for sid in art.lines:
            if sid in scenario_ids:
                first, line = scenario_ids[sid]
                raise SpecError(
                    art.path,
                    art.lines[sid],
                    f"duplicate scenario id {sid!r} (also in {first.name}:{line})",
                )
            scenario_ids[sid] = (art.path, art.lines[sid])
    known = dict(controls)
    for art in family.articles:
        for alias in art.meta.aliases:
            other = known.get(alias)
            if other is not None and other != art.path:
                what = "the control id" if alias in controls else "an alias"
                raise SpecError(
                    art.path,
                    art.alias_line or 1,
                    f"alias {alias!r} of control {art.control_id!r} is also {what} of "
                    f"{other.name}: an alias must name one control",
                )
            known[alias] = art.path
    for pillar in spec.pillars:
        members = [
            a for a in family.articles if a.meta.pillar == pillar.key and a.meta.pack is None
        ]
        if not members:
            raise SpecError(
                bench_path,
                _pillar_line(data, spec, pillar.key),
                f"pillar {pillar.key!r} has no articles",
            )
        given = [a.meta.pillar_weight for a in members]
        if all(w is not None for w in given):
            total = math.fsum(float(w) for w in given if w is not None)
            if abs(total - 1.0) > WEIGHT_TOLERANCE:
                names = ", ".join(f"{a.path.name}={a.meta.pillar_weight}" for a in members)
                raise SpecError(
                    bench_path,
                    _pillar_line(data, spec, pillar.key),
                    f"pillar {pillar.key!r}: article pillar_weight values sum to {total:.4f}; "
                    f"they must sum to 1 (±{WEIGHT_TOLERANCE}) ({names})",
                )
        elif any(w is not None for w in given):
            missing = [a.path.name for a in members if a.meta.pillar_weight is None]
            raise SpecError(
                bench_path,
                _pillar_line(data, spec, pillar.key),
                f"pillar {pillar.key!r}: set pillar_weight on all its articles or on none "
                f"(missing in {', '.join(missing)})",
            )
    for name, preset in spec.presets.items():
        _check_preset(name, preset, known, pillars, data, bench_path, spec)
    from ._suites import check_suites

    check_suites(spec, data, bench_path, known, pillars)


def _pillar_line(data: Any, spec: BenchmarkSpec, key: str) -> int | None:
    for i, p in enumerate(spec.pillars):
        if p.key == key:
            return _key_line(data, "pillars", i)
    return None


def _check_preset(
    name: str,
    preset: PresetSpec,
    controls: Mapping[str, Path],
    pillars: set[str],
    data: Any,
    path: Path,
    spec: BenchmarkSpec,
) -> None:
    def where(*loc: str | int) -> int | None:
        return _key_line(data, "presets", name, *loc)

    if preset.controls != "all":
        for i, cid in enumerate(preset.controls):
            if cid not in controls:
                raise SpecError(
                    path, where("controls", i), f"preset {name!r}: unknown control {cid!r}"
                )
    if preset.extends is not None and preset.extends not in spec.presets:
        raise SpecError(
            path, where("extends"), f"preset {name!r} extends unknown preset {preset.extends!r}"
        )
    for key in preset.weights:
        if key not in pillars:
            raise SpecError(
                path, where("weights"), f"preset {name!r}: unknown pillar {key!r} in weights"
            )
    overrides = preset.aggregation
    for group, known, label in (
        (overrides.pillars, pillars, "pillar"),
        (overrides.articles, set(controls), "control"),
    ):
        if isinstance(group, dict):
            for key in group:
                if key not in known:
                    raise SpecError(
                        path, where("aggregation"), f"preset {name!r}: unknown {label} {key!r}"
                    )


# --------------------------------------------------------------------------- presets


@dataclass(frozen=True)
class Plan:
    """A family with a preset applied: what runs and how it rolls up."""

    family: Family
    preset: str
    controls: tuple[str, ...]
    pillar_weights: Mapping[str, float]
    root_aggregation: str
    pillar_aggregation: Mapping[str, str]
    article_aggregation: Mapping[str, str]
    root_bands: Bands
    gate: GateSpec
    judges: int = 1
    samples: int = 1
    #: How a scenario's samples combine: ``mean`` or ``majority_vote`` (see combine_samples).
    samples_aggregation: str = "mean"
    mode_b: bool = False
    note: str = ""

    def articles(self) -> list[Article]:
        chosen = set(self.controls)
        return [a for a in self.family.articles if a.control_id in chosen]

    def scenario_count(self) -> int:
        return sum(len(a.scenarios) for a in self.articles())

    def item_count(self) -> int:
        """The items a full run of the preset holds: each scenario, each sample."""
        return self.scenario_count() * self.samples


class PresetError(ConfigError, ValueError):
    """An unknown preset or pack, or presets that extend in a cycle: a usage error."""


def resolve_plan(family: Family, preset: str | None) -> Plan:
    """Apply ``--preset`` (``NAME`` or ``BASE+PACK[+PACK]``) to *family*."""
    spec = family.spec
    explicit = preset is not None
    name = preset or DEFAULT_PRESET
    parts = [p.strip() for p in name.split("+")]
    note = ""
    if family.single_file:
        base = PresetSpec()
        name, note = "file", "one article file"
        packs: list[PresetSpec] = []
    elif parts[0] not in spec.presets:
        if explicit or len(parts) > 1:
            known = ", ".join(spec.presets) or "none"
            raise PresetError(
                f"family {family.name!r} has no preset {parts[0]!r} (presets: {known})"
            )
        base, packs, name, note = (
            PresetSpec(),
            [],
            "all",
            f"family defines no {DEFAULT_PRESET!r} preset",
        )
    else:
        base = _flatten(spec.presets, parts[0])
        packs = []
        for pack in parts[1:]:
            if pack not in spec.presets or not spec.presets[pack].pack:
                known = ", ".join(k for k, v in spec.presets.items() if v.pack) or "none"
                raise PresetError(f"family {family.name!r} has no pack {pack!r} (packs: {known})")
            packs.append(spec.presets[pack])
        if base.pack:
            raise PresetError(
                f"{parts[0]!r} is a pack; compose it with a base preset, e.g. standard+{parts[0]}"
            )

    pack_names = set(parts[1:])
    wanted: list[str] = []
    for p in (base, *packs):
        if p.controls == "all":
            wanted += [
                a.control_id
                for a in family.articles
                if a.meta.pack is None or a.meta.pack in pack_names
            ]
        else:
            wanted += [_canonical(family, c) for c in p.controls]
    wanted += [a.control_id for a in family.articles if a.meta.pack in pack_names]
    order = {a.control_id: i for i, a in enumerate(family.articles)}
    # Controls of articles that failed to load are absent; their files report the error.
    controls = tuple(sorted({c for c in wanted if c in order}, key=order.__getitem__))

    raw = {p.key: float(p.weight) for p in spec.pillars}
    for p in (base, *packs):
        raw.update({k: float(v) for k, v in p.weights.items()})
    present = {family.article(c).meta.pillar for c in controls}
    total = math.fsum(w for k, w in raw.items() if k in present) or 1.0
    pillar_weights = {k: w / total for k, w in raw.items() if k in present}

    root_agg = spec.aggregation
    pillar_agg: dict[str, str] = {p.key: p.aggregation for p in spec.pillars}
    article_agg: dict[str, str] = {a.control_id: a.meta.aggregation for a in family.articles}
    for p in (base, *packs):
        o = p.aggregation
        root_agg = o.root or root_agg
        pillar_agg = _override(pillar_agg, o.pillars)
        articles = o.articles
        if isinstance(articles, dict):  # keyed by control id or alias
            articles = {_canonical(family, k): v for k, v in articles.items()}
        article_agg = _override(article_agg, articles)
    bands = family.bands
    for p in (base, *packs):
        bands = _spec_bands(p.bands, bands)
    gate = base.gate or spec.gate
    return Plan(
        family=family,
        preset=name,
        controls=controls,
        pillar_weights=pillar_weights,
        root_aggregation=root_agg,
        pillar_aggregation=pillar_agg,
        article_aggregation=article_agg,
        root_bands=bands,
        gate=gate,
        judges=base.judges,
        samples=base.samples,
        samples_aggregation=base.samples_aggregation,
        mode_b=base.mode_b,
        note=note,
    )


def _canonical(family: Family, control_id: str) -> str:
    """The control id that *control_id* (an id or an alias) names; itself when unknown."""
    art = family.resolve(control_id)
    return control_id if art is None else art.control_id


def _override(current: Mapping[str, str], change: Mapping[str, str] | str | None) -> dict[str, str]:
    if change is None:
        return dict(current)
    if isinstance(change, str):
        return dict.fromkeys(current, change)
    return {**current, **change}


def _flatten(presets: Mapping[str, PresetSpec], name: str, seen: Sequence[str] = ()) -> PresetSpec:
    preset = presets[name]
    if preset.extends is None:
        return preset
    if preset.extends in seen or preset.extends == name:
        raise PresetError(f"preset {name!r}: 'extends' forms a cycle")
    parent = _flatten(presets, preset.extends, (*seen, name))
    merged = parent.model_dump(by_alias=True, exclude_unset=True) | preset.model_dump(
        by_alias=True, exclude_unset=True
    )
    merged.pop("extends", None)
    return PresetSpec.model_validate(merged, strict=False)


# --------------------------------------------------------------------------- the tree


def build_tree(
    plan: Plan,
    leaves: Mapping[str, EvalResult | Sequence[EvalResult]],
    *,
    take: bool = False,
) -> EvalResult | None:
    """Roll scenario results up through articles and pillars to the family root.

    *leaves* maps scenario id to its result, or to the results of its samples
    (combined by :func:`combine_samples`); scenarios that did not run
    (deselected, interrupted) are absent and their weight is renormalised
    away. An article named on the command line outside the preset still
    appears, under its own pillar. Order follows the family files, so the numbers do not depend on the
    order in which results arrived.

    With *take* (*leaves* a dict the caller gives up), each scenario's results leave
    *leaves* as they are rolled up, so that a run's leaves and the tree's copies of them
    (their weights normalised) are never all held at once.
    """
    get: Callable[[str], EvalResult | Sequence[EvalResult]] = leaves.__getitem__
    if take:
        if not isinstance(leaves, dict):
            raise TypeError("build_tree(take=True) takes the leaves out of a dict")
        get = leaves.pop
    family = plan.family
    pillar_nodes = []
    for pillar in family.spec.pillars:
        article_nodes = []
        for art in family.articles:
            if art.meta.pillar != pillar.key:
                continue
            scen = _normalised(
                combine_samples(
                    get(s.id),
                    art.bands,
                    art.declared_severity(s),
                    plan.samples_aggregation,
                )
                for s in art.scenarios
                if s.id in leaves
            )
            if not scen:
                continue
            article_nodes.append(
                _with_weight(
                    combine_results(
                        art.control_id,
                        art.meta.title,
                        scen,
                        aggregation=plan.article_aggregation[art.control_id],
                        bands=art.bands,
                        severity=art.meta.severity,
                        kind="article",
                        meta={
                            "article": art.meta.article,
                            "path": art.path.name,
                            "scenarios": len(art.scenarios),
                            # the article's own bands: `agenteval uncertain` reads its edges
                            "bands": {"pass": art.bands.pass_, "warn": art.bands.warn},
                        },
                    ),
                    art.meta.pillar_weight,
                    art.meta.required,
                )
            )
        if not article_nodes:
            continue
        article_nodes = _normalised(article_nodes)
        pillar_nodes.append(
            _with_weight(
                combine_results(
                    pillar.key,
                    pillar.title or pillar.key,
                    article_nodes,
                    aggregation=plan.pillar_aggregation[pillar.key],
                    bands=_spec_bands(pillar.bands, family.bands),
                    kind="pillar",
                ),
                plan.pillar_weights.get(pillar.key, float(pillar.weight)),
                pillar.required,
            )
        )
    if not pillar_nodes:
        return None
    return combine_results(
        family.name,
        family.spec.title or family.name,
        _normalised(pillar_nodes),
        aggregation=plan.root_aggregation,
        bands=plan.root_bands,
        kind="benchmark",
        meta={"preset": plan.preset},
    )


class SampleRuns(list[EvalResult]):
    """A scenario's sample results in the order they were asked, and each one's number
    (1-based): ``-k "s2 or s3"`` runs samples 2 and 3, which must not be called 1 and 2."""

    def __init__(self, runs: Iterable[EvalResult] = (), numbers: Iterable[int] = ()) -> None:
        super().__init__(runs)
        self.numbers = list(numbers)


def combine_samples(
    runs: EvalResult | Sequence[EvalResult],
    bands: Bands,
    severity: str | None,
    aggregation: str = "mean",
) -> EvalResult:
    """Several answers to one scenario: one score, its spread and interval, a verdict.

    ``aggregation="mean"`` (the default): score = mean of the graded samples,
    verdict from the mean by the article's bands. ``"majority_vote"`` (a
    preset's ``samples_aggregation: majority_vote``, AgentEval's MajorityVote):
    verdict = the verdict most samples got (ties go to the worse), score = the
    mean score of the samples that got it. The score stays on the bands' scale,
    so the article and pillar above band it as any other: the share that passed
    (0 when every sample warned) would read as a failure there. Either way the
    scenario's meta carries
    ``samples``, ``graded_samples``, ``score_std`` (sample standard deviation,
    n − 1, of the sample scores), ``score_ci`` (95 %: a t-interval for the mean,
    a Wilson interval for the pass share; see :mod:`pytest_agenteval._stats`),
    ``sample_verdicts`` and ``unanimous``. Each sample stays an item of its own
    (see :meth:`EvalResult.items`); one flagged sample flags the scenario.
    Errored samples do not count but stay visible as children; no graded
    sample at all is an error (or skipped).
    """
    from ._stats import sample_stats

    if isinstance(runs, EvalResult):
        return runs
    if len(runs) == 1:
        return runs[0]
    first = runs[0]
    numbers = runs.numbers if isinstance(runs, SampleRuns) else range(1, len(runs) + 1)
    children = tuple(
        replace(r, key=f"{r.key}#s{n}", kind="sample") for n, r in zip(numbers, runs, strict=True)
    )
    graded_runs = [r for r in runs if r.graded and r.score is not None]
    graded = [float(r.score) for r in graded_runs if r.score is not None]
    meta = {
        **dict(first.meta),
        "samples": len(runs),
        "graded_samples": len(graded),
        "samples_aggregation": aggregation,
    }
    if any(injection_suspected(r) for r in runs):  # the first sample's flag is not the scenario's
        meta["injection_suspected"] = True
    if not graded:
        none_graded: Verdict = "error" if any(r.verdict == "error" for r in runs) else "skipped"
        meta.update(score_std=None, score_ci=None)
        return replace(
            first,
            score=None,
            verdict=none_graded,
            severity=None,
            children=children,
            criteria=(),
            meta=meta,
            error=f"no sample of {len(runs)} could be graded" if none_graded == "error" else None,
        )
    meta.update(sample_stats(graded, [r.verdict for r in graded_runs], aggregation))
    if aggregation == "majority_vote":
        _, voted = majority_vote([replace(r, weight=1.0) for r in graded_runs])
        held = [s for r, s in zip(graded_runs, graded, strict=True) if r.verdict == voted]
        score = math.fsum(held) / len(held) if held else math.fsum(graded) / len(graded)
        verdict = voted or band_verdict(score, bands)
        passed = sum(1 for r in graded_runs if r.verdict == "pass")
        how = (
            f"majority vote of {len(graded)} samples ({passed} passed); "
            f"the mean score of the {len(held)} that {VERDICT_PAST.get(verdict, verdict)}"
        )
    else:
        score = math.fsum(graded) / len(graded)
        verdict = band_verdict(score, bands)
        how = f"mean of {len(graded)} samples"
    sev = worst_severity(severity, score_severity(score)) if verdict == "fail" else None
    return replace(
        first,
        score=score,
        verdict=verdict,
        severity=sev,
        children=children,
        criteria=(),
        reasoning=how,
        error=None,
        meta=meta,
    )


def _with_weight(result: EvalResult, weight: float | None, required: bool) -> EvalResult:
    return replace(result, weight=1.0 if weight is None else float(weight), required=required)


def _normalised(results: Iterable[EvalResult]) -> list[EvalResult]:
    items = list(results)
    total = math.fsum(r.weight for r in items) or 1.0
    for i, r in enumerate(items):  # in place: each result freed as its copy is made
        items[i] = replace(r, weight=r.weight / total)
    return items

"""Golden datasets: hand-labelled answers that the judge is measured against.

One JSON object per line in ``golden/<family>/<pillar>.jsonl``. Two formats
load: ours (snake_case, with stratum, adversarial kind, split, raters'
labels and provenance) and AgentEval's camelCase one, unchanged (an entry
without ``split`` counts as calibration data). Every problem — a broken
line, an unknown verdict, a band outside [0, 1] or upside down, a duplicate
id — is a :class:`SpecError` naming file and line, raised before any judge
is called. An entry the family cannot grade — its article is no control (nor
alias) of the family, or it names no scenario of the family and the article
has no substance rubric — is not an error: :func:`triage` marks it skipped,
with the reason, as AgentEval's own runner skips it. The file is read within
:data:`MAX_GOLDEN_BYTES` (size checked before reading; FIFOs and devices
refused), a line nested deeper than :data:`~pytest_agenteval._yaml.MAX_DEPTH`
is refused (the parser's own recursion limit stops one nested thousands
deep), and messages name keys and types, never the file's text.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NoReturn, TypedDict, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from ._vocab import GradedVerdict, JSONObject, JSONValue, SpecError
from ._yaml import (
    MAX_DEPTH,
    describe_key,
    describe_value,
    format_loc,
    read_limited,
)

if TYPE_CHECKING:
    from ._family import Family

MAX_GOLDEN_BYTES = 16 * 1024 * 1024
Stratum = Literal["clear-pass", "borderline-pass", "borderline-fail", "clear-fail"]
STRATA: tuple[str, ...] = get_args(Stratum)
Adversarial = Literal[
    "confidently-wrong",
    "evasive",
    "wrong-reason-refusal",
    "format-perfect-failure",
    "surface-imperfect-success",
    "injection",
]
ADVERSARIAL: tuple[str, ...] = get_args(Adversarial)

_Score = StrictFloat | StrictInt


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: StrictStr | None = None
    scenario_id: StrictStr = Field(min_length=1)
    article: StrictStr = Field(min_length=1)
    input: StrictStr
    response: StrictStr
    expected_verdict: GradedVerdict
    expected_score_min: _Score
    expected_score_max: _Score
    rationale: StrictStr = ""
    stratum: Stratum | None = None
    adversarial: Adversarial | None = None
    split: Literal["calibration", "holdout"] = "calibration"
    labels: list[GradedVerdict] = Field(default_factory=list)
    provenance: dict[str, object] | StrictStr | None = None

    @model_validator(mode="after")
    def _band(self) -> _Entry:
        lo, hi = self.expected_score_min, self.expected_score_max
        for name, value in (("expected_score_min", lo), ("expected_score_max", hi)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} = {value} is outside [0, 1]")
        if lo > hi:
            raise ValueError(
                f"band is upside down: expected_score_min {lo} > expected_score_max {hi}"
            )
        return self


_CAMEL = {
    "scenarioId": "scenario_id",
    "articleControlId": "article",
    "agentResponse": "response",
    "expectedVerdict": "expected_verdict",
    "expectedScoreMin": "expected_score_min",
    "expectedScoreMax": "expected_score_max",
}


@dataclass(frozen=True)
class GoldenEntry:
    """One labelled answer, located in its file."""

    id: str
    scenario_id: str
    article: str
    input: str
    response: str
    expected_verdict: str
    score_min: float
    score_max: float
    rationale: str
    stratum: str | None
    adversarial: str | None
    split: str
    labels: tuple[str, ...]
    provenance: dict[str, object] | str | None
    path: Path
    line: int
    source_format: str = "agenteval-pytest"

    @property
    def band_mid(self) -> float:
        return (self.score_min + self.score_max) / 2

    @property
    def raters(self) -> int:
        return len(self.labels) or 1


@dataclass
class GoldenFile:
    path: Path
    entries: list[GoldenEntry] = field(default_factory=list)


def _strict_pairs(pairs: list[tuple[str, JSONValue]]) -> JSONObject:
    out: JSONObject = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {describe_key(key)}")
        out[key] = value
    return out


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON here")


def _too_deep(value: object, limit: int = MAX_DEPTH) -> bool:
    """Whether arrays and objects in *value* nest more than *limit* levels (no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def load_golden(path: Path, *, within: Iterable[Path] | None = None) -> GoldenFile:
    """Parse and validate one golden file (no cross-file or family checks).

    With *within*, a golden file reached through a symbolic link must resolve
    inside one of those folders.
    """
    raw = read_limited(path, MAX_GOLDEN_BYTES, within=within)
    golden = GoldenFile(path)
    seen: dict[str, int] = {}
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(
                line.decode("utf-8"), object_pairs_hook=_strict_pairs, parse_constant=_no_constants
            )
        except UnicodeDecodeError:
            raise SpecError(path, number, "not UTF-8") from None
        except RecursionError:
            raise SpecError(
                path, number, f"JSON nested more than {MAX_DEPTH} levels deep"
            ) from None
        except ValueError as exc:
            # json's messages give the position, never the text ("Expecting ',' delimiter: ...")
            raise SpecError(path, number, f"broken JSON line: {exc}") from None
        if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _too_deep(obj):
            raise SpecError(path, number, f"JSON nested more than {MAX_DEPTH} levels deep")
        if not isinstance(obj, dict):
            raise SpecError(path, number, "each line must be a JSON object")
        fmt = "agenteval-pytest"
        if "scenarioId" in obj:
            fmt = "agenteval-camelcase"
            obj = {_CAMEL.get(k, k): v for k, v in obj.items()}
        try:
            entry = _Entry.model_validate(obj)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = format_loc(err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = f"unknown key {where!r}"
            elif err["type"] == "missing":
                msg = f"missing key {where!r}"
            elif err["type"] not in {"value_error", "assertion_error"} and "input" in err:
                msg = f"{where}: {msg} (got {describe_value(err['input'])})"
            elif where:
                msg = f"{where}: {msg}"
            raise SpecError(path, number, msg) from None
        entry_id = entry.id or entry.scenario_id
        if entry_id in seen:
            raise SpecError(
                path, number, f"duplicate id {entry_id!r} (first on line {seen[entry_id]})"
            )
        seen[entry_id] = number
        golden.entries.append(
            GoldenEntry(
                id=entry_id,
                scenario_id=entry.scenario_id,
                article=entry.article,
                input=entry.input,
                response=entry.response,
                expected_verdict=entry.expected_verdict,
                score_min=float(entry.expected_score_min),
                score_max=float(entry.expected_score_max),
                rationale=entry.rationale,
                stratum=entry.stratum,
                adversarial=entry.adversarial,
                split=entry.split,
                labels=tuple(entry.labels),
                provenance=entry.provenance,
                path=path,
                line=number,
                source_format=fmt,
            )
        )
    return golden


# --------------------------------------------------------------------------- triage

#: Why an entry is skipped (the keys of the skip counts in calibration.json).
SKIP_UNKNOWN_ARTICLE = "unknown article"
SKIP_UNKNOWN_SCENARIO = "unknown scenario"
SKIP_PROMPT_MISMATCH = "prompt mismatch"  # and no rubric to grade it against instead
#: An entry's ``input`` and its scenario's match when, after whitespace is
#: collapsed and case folded, they are equal or this similar (difflib ratio).
PROMPT_SIMILARITY = 0.9
#: Longer prompts must match exactly (after normalising): ratio() is quadratic.
_SIMILARITY_MAX_CHARS = 10_000


def normalise_prompt(text: str) -> str:
    return " ".join(text.split()).casefold()


def prompts_match(a: str, b: str) -> bool:
    """Is *a* the same prompt as *b*, give or take whitespace, case and small edits?"""
    x, y = normalise_prompt(a), normalise_prompt(b)
    if x == y:
        return True
    if max(len(x), len(y)) > _SIMILARITY_MAX_CHARS:
        return False
    m = difflib.SequenceMatcher(None, x, y, autojunk=False)
    return (
        m.real_quick_ratio() >= PROMPT_SIMILARITY
        and m.quick_ratio() >= PROMPT_SIMILARITY
        and m.ratio() >= PROMPT_SIMILARITY
    )


@dataclass(frozen=True)
class Triage:
    """What a family makes of one golden entry.

    ``control_id`` is the control the entry's ``article`` names (directly or
    by an alias), ``None`` when the family has none. ``skip`` is the reason
    the entry cannot be graded (:data:`SKIP_UNKNOWN_ARTICLE`,
    :data:`SKIP_UNKNOWN_SCENARIO`, :data:`SKIP_PROMPT_MISMATCH`), ``None`` when
    it can. ``prompt_mismatch``:
    the entry names a scenario of the family but its ``input`` is not that
    scenario's prompt, so it is graded against the article's substance rubric,
    not the scenario's criteria (or skipped when there is no rubric).
    """

    entry: GoldenEntry
    control_id: str | None
    skip: str | None = None
    detail: str = ""
    prompt_mismatch: bool = False
    synthetic: bool = False  # graded against the article's rubric


def triage(golden: GoldenFile, family: Family) -> list[Triage]:
    """Resolve every entry of *golden* against *family* (pure; no judge, no pytest)."""
    scenarios = {s.id: s for art in family.articles for s in art.scenarios}
    out = []
    for entry in golden.entries:
        art = family.resolve(entry.article)
        if art is None:
            out.append(
                Triage(
                    entry,
                    None,
                    SKIP_UNKNOWN_ARTICLE,
                    f"unknown article {entry.article!r}: family {family.name!r} has no such "
                    "control or alias",
                )
            )
            continue
        cid, rubric = art.control_id, bool(art.meta.rubric)
        scenario = scenarios.get(entry.scenario_id)
        if scenario is None:
            if rubric:
                out.append(Triage(entry, cid, synthetic=True))
            else:
                out.append(
                    Triage(
                        entry,
                        cid,
                        SKIP_UNKNOWN_SCENARIO,
                        f"unknown scenario {entry.scenario_id!r}: no scenario of family "
                        f"{family.name!r} has that id, and control {cid!r} declares no "
                        "substance rubric (metadata.rubric) to grade the entry against",
                    )
                )
            continue
        if prompts_match(entry.input, scenario.input):
            out.append(Triage(entry, cid))
            continue
        detail = (
            f"prompt mismatch: the entry's input is not the prompt of scenario "
            f"{entry.scenario_id!r} (similarity under {PROMPT_SIMILARITY:.0%} after "
            "normalising whitespace and case)"
        )
        if rubric:
            out.append(
                Triage(
                    entry,
                    cid,
                    detail=detail + f"; graded against the substance rubric of {cid!r}",
                    prompt_mismatch=True,
                    synthetic=True,
                )
            )
        else:
            out.append(
                Triage(
                    entry,
                    cid,
                    SKIP_PROMPT_MISMATCH,
                    detail + f", and control {cid!r} declares no substance rubric "
                    "(metadata.rubric) to grade it against",
                    prompt_mismatch=True,
                )
            )
    return out


class SkippedCounts(TypedDict):
    total: int
    by_reason: dict[str, int]


class TriageCounts(TypedDict):
    """What calibration.json says of the entries triage set apart."""

    skipped: SkippedCounts
    prompt_mismatch: int


def triage_summary(rows: Iterable[Mapping[str, object]]) -> TriageCounts:
    """Counts for calibration.json and the terminal from calibration records.

    ``skipped``: entries not graded, ``total`` and ``by_reason``;
    ``prompt_mismatch``: entries whose input differs from the scenario they
    name (graded against the rubric, or skipped when there is none).
    Repetitions of an entry count once.
    """
    first = [r for r in rows if not r.get("repetition")]
    reasons = Counter(str(r["skip_reason"]) for r in first if r.get("skip_reason"))
    return {
        "skipped": {"total": sum(reasons.values()), "by_reason": dict(sorted(reasons.items()))},
        "prompt_mismatch": sum(1 for r in first if r.get("prompt_mismatch")),
    }


def check_unique(files: Iterable[GoldenFile]) -> None:
    seen: dict[str, GoldenEntry] = {}
    for golden in files:
        for entry in golden.entries:
            first = seen.setdefault(entry.id, entry)
            if first is not entry:
                raise SpecError(
                    entry.path,
                    entry.line,
                    f"duplicate id {entry.id!r} (also in {first.path.name}:{first.line})",
                )


# --------------------------------------------------------------------------- dataset report


@dataclass(frozen=True)
class PillarStats:
    pillar: str
    entries: int
    strata: Mapping[str, float]
    adversarial_share: float
    adversarial_kinds: Mapping[str, int]
    holdout_share: float
    raters: Mapping[int, int]
    warnings: Sequence[str]


MIN_ENTRIES = 30
MIN_STRATUM = 0.15
MIN_ADVERSARIAL = 1 / 3


def pillar_stats(pillar: str, entries: Sequence[GoldenEntry]) -> PillarStats:
    n = len(entries)
    strata = Counter(e.stratum or "unlabelled" for e in entries)
    shares = {
        s: strata.get(s, 0) / n if n else 0.0
        for s in (*STRATA, "unlabelled")
        if s in STRATA or strata.get(s)
    }
    adversarial = Counter(e.adversarial for e in entries if e.adversarial)
    adv_share = sum(adversarial.values()) / n if n else 0.0
    holdout = sum(e.split == "holdout" for e in entries) / n if n else 0.0
    raters = Counter(e.raters for e in entries)
    warnings = []
    if n < MIN_ENTRIES:
        warnings.append(f"only {n} entries (fewer than {MIN_ENTRIES})")
    for stratum in STRATA:
        if shares.get(stratum, 0.0) < MIN_STRATUM:
            warnings.append(
                f"stratum {stratum} is {shares.get(stratum, 0.0):.0%} (under {MIN_STRATUM:.0%})"
            )
    if adv_share < MIN_ADVERSARIAL:
        warnings.append(f"adversarial entries are {adv_share:.0%} (under a third)")
    return PillarStats(
        pillar, n, shares, adv_share, dict(adversarial), holdout, dict(raters), warnings
    )


def format_stats(stats: Sequence[PillarStats]) -> str:
    lines = []
    for s in stats:
        strata = ", ".join(f"{k} {v:.0%}" for k, v in s.strata.items())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(s.adversarial_kinds.items())) or "none"
        raters = ", ".join(
            f"{k} rater{'s' if k > 1 else ''}: {v}" for k, v in sorted(s.raters.items())
        )
        lines += [
            f"{s.pillar}: {s.entries} entries",
            f"  strata: {strata}",
            f"  adversarial: {s.adversarial_share:.0%} ({kinds})",
            f"  holdout: {s.holdout_share:.0%}   raters per entry: {raters}",
        ]
        lines += [f"  WARNING: {w}" for w in s.warnings]
    return "\n".join(lines)

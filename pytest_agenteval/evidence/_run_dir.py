"""The run directory: manifest, hash-chained results, summary, reports, SHA256SUMS.

Layout: ``<out>/runs/<family>/<subject>/<UTC timestamp>-<short id>/``. The
directory is created when the first result of a family arrives on the
controller; each result is appended to ``results.jsonl`` as it arrives, so an
interrupted run keeps what it graded; the summary and reports are written at
the end, then the manifest is completed and ``SHA256SUMS`` sealed. Every
writer goes through one :class:`~pytest_agenteval.evidence._redact.Redactor`. Names
built from ids are slugged so that nothing escapes the output root, and a run
directory is never reused.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import re
import subprocess
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from .._evals import EvalResult, injection_suspected, round_score
from .._family import Article, Plan
from .._vocab import VERDICTS, JSONObject, JSONValue
from ._chain import (
    CONVERTED_KEY,
    MANIFEST_NAME,
    RUN_NAME_STAMP,
    EvidenceWriter,
    Streamed,
    _read_small,
    _Unreadable,
    canonical_json,
    json_safe,
    json_safe_record,
    parse_rfc3339,
    sha256_hex,
    write_file_atomic,
    write_file_atomic_with,
    write_indented_json,
)
from ._redact import mask_assignments

if TYPE_CHECKING:
    from .._aggregator import FamilyOutcome
    from .._session import AgentevalState
    from ._redact import Redactor

#: Parts of one item's grade (a panel's judges, per-criterion grades, samples):
#: not nodes of the summary tree.
_NOT_NODES = ("judge", "criterion", "sample")
_RESERVED = {"con", "prn", "aux", "nul"} | {f"{p}{i}" for p in ("com", "lpt") for i in range(10)}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RECORD_FIELDS = (
    "kind",
    "nodeid",
    "family",
    "preset",
    "scenario_id",
    "condition",
    "sample",
    "subject",
    "prompt",
    "answer",
    "tool_calls",
    "usage",
    "cost",
    "timings",
    "result",
    "replay",  # --replay: the file and line the answer came from
    "pairwise",  # --pairwise: both answers, the order shown, the judge's preference
    # a condition with MCP servers: each tool call (server, name, arguments, result text
    # cut to 2000 characters, is_error, latency_s, step) and the provider tool loop's account
    "mcp_calls",
    "tool_loop",
    # calibration records
    "id",
    "pillar",
    "article",
    "file",
    "line",
    "expected",
    "min",
    "max",
    "score",
    "actual",
    "split",
    "repetition",
    "stratum",
    "adversarial",
    "labels",
    "rationale",
    "skip_reason",
    "prompt_mismatch",
    "judge",
    "verdict",
    "error",
    "reasoning",
    "criteria",
    "judge_meta",
    # what json_safe had to turn into strings (big ints, NaN, non-string keys)
    "converted",
)
_DEPENDENCIES = (
    "pydantic",
    "pyyaml",
    "openai",
    "anthropic",
    "numpy",
    "pytest-xdist",
    "pytest-asyncio",
    "rfc8785",
    "junit-xml",
    "sarif-om",
    "jinja2",
)


def slug(name: str, *, max_len: int = 64) -> str:
    """A file-name-safe, case-folded form of *name* that cannot traverse paths.

    Lossy names get a short hash of the original, so two names that differ
    only in what was dropped (case, accents, punctuation) do not collide.
    """
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    text = _UNSAFE.sub("-", text).strip(".-_").lower()
    text = re.sub(r"-{2,}", "-", text)
    if text.split(".")[0] in _RESERVED:
        text = "_" + text
    lossy = text != name or len(text) > max_len
    if not text:
        text = "unnamed"
    if lossy:
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        text = f"{text[: max_len - 9]}-{digest}"
    return text


def rfc3339(when: datetime) -> str:
    # milliseconds: runs started within one second still order (agenteval drift, latest)
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def node_dict(result: EvalResult, *, streamed: bool = False) -> dict[str, Any]:
    """A summary node: the contract keys plus a few that help a reader.

    ``score`` is the node's score as rounded once where it was made (see
    :func:`~pytest_agenteval._evals.round_score`), so it and ``verdict`` agree.
    ``counts`` counts items — a scenario, or each of its samples — once each;
    the judges and criteria of one grade are not nodes here (results.jsonl
    has them). A scenario node says whether a judge suspected injection.
    *streamed*: the children of every node above a scenario are a :class:`Streamed`
    array, made as it is read (summary.json is written without a copy of every node).
    """
    node: dict[str, Any] = {
        "id": result.key,
        "kind": result.kind,
        "title": result.name,
        "score": None if result.score is None else round_score(result.score),
        "verdict": result.verdict,
        "weight": round_score(result.weight),
        "aggregation": result.aggregation,
        "severity": result.severity,
        "counts": result.counts(),
        "children": _child_nodes(result, streamed),
    }
    if result.kind == "scenario":
        node["injection_suspected"] = any(injection_suspected(i) for i in result.items())
        node.update(sample_fields(result.meta))  # samples, score_std, score_ci (null for one)
    elif result.kind in ("benchmark", "pillar", "article"):
        from .._stats import reliability

        figure = reliability({"id": s.key, **s.meta} for s in _scenarios(result))
        if figure is not None:  # repeated samples: how often they agree on the verdict
            node["reliability"] = figure
    bands = result.meta.get("bands")
    if isinstance(bands, Mapping):  # an article's own bands
        node["bands"] = dict(bands)
    if result.error:
        node["error"] = result.error
    if result.reasoning and result.kind != "scenario":
        node["note"] = result.reasoning
    return node


def _child_nodes(result: EvalResult, streamed: bool) -> list[dict[str, Any]] | Streamed:
    def made() -> Iterator[dict[str, Any]]:
        return (
            node_dict(c, streamed=streamed) for c in result.children if c.kind not in _NOT_NODES
        )

    return Streamed(made) if streamed and result.kind != "scenario" else list(made())


#: What a scenario node says of its samples (``score_ci`` etc.: see :mod:`._stats`).
_SAMPLE_KEYS = (
    "score_std",
    "score_ci",
    "ci_method",
    "ci_level",
    "samples_aggregation",
    "sample_verdicts",
    "unanimous",
)


def sample_fields(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``samples`` (1 when asked once), ``score_std`` and ``score_ci`` (null for one), and
    the rest of :data:`_SAMPLE_KEYS` when the scenario was asked several times."""
    fields: dict[str, Any] = {
        "samples": meta.get("samples", 1),
        "score_std": None,
        "score_ci": None,
    }
    if "samples" in meta:
        fields.update({k: meta.get(k) for k in _SAMPLE_KEYS})
    return fields


def _scenarios(node: EvalResult) -> list[EvalResult]:
    if node.kind == "scenario":
        return [node]
    return [s for child in node.children for s in _scenarios(child)]


#: The facts kept of a record set aside hold its cost total as a tuple of these, under
#: :data:`COST_TOTAL_KEY`, not as ``{"cost": {"total": {...}}}`` (two dicts per item).
COST_TOTAL_FIELDS = ("usd", "prompt_tokens", "completion_tokens")
COST_TOTAL_KEY = "cost_total"


def cost_totals(
    records: Sequence[Mapping[str, Any]], unrecorded: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Token and dollar totals for the run and per pillar (``usd`` None when a rate is
    unknown); with *unrecorded*, the run's calls no record holds, beside them."""
    zero: dict[str, Any] = {"usd": 0.0, "prompt_tokens": 0, "completion_tokens": 0}
    total = dict(zero)
    pillars: dict[str, dict[str, Any]] = {}
    for record in records:
        kept = record.get(COST_TOTAL_KEY)
        cost: Mapping[str, Any] | None
        if isinstance(kept, tuple):
            cost = dict(zip(COST_TOTAL_FIELDS, kept, strict=True))
        else:
            cost = (record.get("cost") or {}).get("total")
        if not cost:
            continue
        pillar = record["result"].get("meta", {}).get("pillar", "?")
        for bucket in (total, pillars.setdefault(pillar, dict(zero))):
            usd = _number(cost.get("usd"))
            bucket["usd"] = None if usd is None or bucket["usd"] is None else bucket["usd"] + usd
            bucket["prompt_tokens"] += _count(cost.get("prompt_tokens"))
            bucket["completion_tokens"] += _count(cost.get("completion_tokens"))
    for bucket in (total, *pillars.values()):  # a sum of floats: $4.48, not 4.480000000000001
        if bucket["usd"] is not None:
            bucket["usd"] = round(bucket["usd"], USD_DIGITS)
    totals: dict[str, Any] = {"total": total, "pillars": pillars}
    if unrecorded:
        totals["unrecorded"] = dict(unrecorded)
    return totals


#: Decimals a dollar total keeps: far below any price, above a float sum's noise.
USD_DIGITS = 10


def _count(value: Any) -> int:
    """A token count from a record: JSON-safe records hold a huge one as its decimal string."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return 0


def _number(value: Any) -> float | None:
    """A dollar figure from a record; None (unknown) for anything that is not a finite number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def is_partial(summary: Mapping[str, Any]) -> bool:
    """Did the run of *summary* leave items of its preset out (``-k``, ``-m``, ``--lf``)?

    Such a run measured a subset: it is no baseline for ``--baseline=latest`` and no
    point of ``agenteval drift``. ``items.of`` says how many a full run holds; a summary
    written before it existed says so only in its gate's partial-run note.
    """
    items = summary.get("items")
    if isinstance(items, Mapping) and isinstance(items.get("of"), int):
        ran = sum(
            n
            for key in ("passed", "warned", "failed", "errors", "skipped")
            if isinstance(n := items.get(key), int)
        )
        return ran < int(items["of"])
    gate = summary.get("gate")
    notes = gate.get("notes") if isinstance(gate, Mapping) else None
    return isinstance(notes, list) and any(
        isinstance(n, str) and n.startswith("partial run: ") for n in notes
    )


def summary_dict(
    outcome: FamilyOutcome, judges: list[str], ended_at: datetime, *, streamed: bool = False
) -> dict[str, Any]:
    """summary.json's content. *streamed*: its nodes are made as they are read (see
    :func:`node_dict`), for :meth:`RunRecorder.write_json` and
    :func:`~pytest_agenteval.reports._human.summary_for_reports`."""
    from .. import __version__

    plan, tree, gate = outcome.plan, outcome.tree, outcome.gate
    counts = tree.counts() if tree else dict.fromkeys(VERDICTS, 0)
    flagged = sum(1 for i in tree.items() if injection_suspected(i)) if tree else 0
    return {
        "schema": "pytest-agenteval/summary/1",
        "run_id": outcome.run_id,
        "family": plan.family.name,
        "family_version": plan.family.spec.version,
        "preset": plan.preset,
        "condition": outcome.bucket.condition,
        "subject": outcome.bucket.subject,
        "judge": judges,
        "score": None if tree is None or tree.score is None else round_score(tree.score),
        "verdict": tree.verdict if tree else "error",
        "bands": {"pass": plan.root_bands.pass_, "warn": plan.root_bands.warn},
        "gate": gate.to_dict(),
        "items": {
            "passed": counts["pass"],  # warned items are counted apart, as pytest does
            "warned": counts["warn"],
            "failed": counts["fail"],
            "errors": counts["error"],
            "skipped": counts["skipped"],
            "injection_suspected": flagged,  # of the items above, those a judge flagged
            "of": plan.item_count(),  # a full run's: fewer ran in a partial one (-k, --lf)
        },
        "nodes": [node_dict(tree, streamed=streamed)] if tree else [],
        "cost": cost_totals(list(outcome.bucket.records.values()), outcome.unrecorded),
        "chain_head": outcome.head,
        "started_at": outcome.started_at,
        "ended_at": rfc3339(ended_at),
        "plugin_version": __version__,
        # the pull-request check, where it applies: suites, baseline, regression, comparison
        **outcome.pr,
        # several conditions: per pillar, each one's score and interval, the paired test
        **(
            {"conditions_comparison": outcome.conditions_comparison}
            if getattr(outcome, "conditions_comparison", None)
            else {}
        ),
    }


def _versions() -> dict[str, str]:
    found = {}
    for name in _DEPENDENCIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _git(cwd: Path) -> dict[str, Any] | None:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def family_files(plan: Plan) -> dict[str, str]:
    """SHA-256 (over raw bytes) of every file of the family the run used, by family-relative path."""
    family = plan.family
    files: dict[str, Path] = {}
    if not family.single_file and not family.agenteval_folder:  # an AgentEval folder has none
        files["benchmark.yaml"] = family.root / "benchmark.yaml"
    if family.judge_prompt_path is not None:
        files[family.judge_prompt_path.relative_to(family.root.resolve()).as_posix()] = (
            family.judge_prompt_path
        )
    for art in family.articles:
        files[art.path.relative_to(family.root).as_posix()] = art.path
    return {
        f"{family.name}/{rel}": hashlib.sha256(p.read_bytes()).hexdigest()
        for rel, p in sorted(files.items())
    }


def judge_prompt_lineage(plan: Plan) -> dict[str, Any]:
    """Which judge prompt the family gives LLM judges: file, version and SHA-256 of its text.

    Each result line also records the prompt an LLM judge actually used (the
    built-in default when the family has none) and the model that answered.
    """
    family = plan.family
    if family.judge_prompt is None or family.judge_prompt_path is None:
        return {"file": None, "version": "default-judge (built in)", "sha256": None}
    first = family.judge_prompt.lstrip().splitlines()[0] if family.judge_prompt.strip() else ""
    match = re.match(r"<!--\s*version:\s*([^\s]+)\s*-->", first)
    return {
        "file": f"{family.name}/{family.judge_prompt_path.relative_to(family.root.resolve()).as_posix()}",
        "version": match.group(1) if match else family.judge_prompt_path.stem,
        "sha256": sha256_hex(family.judge_prompt.encode("utf-8")),
    }


def _conditions_of(state: AgentevalState, bucket: Any) -> list[dict[str, Any]]:
    name = getattr(bucket, "condition", None)
    condition = state.condition(name) if name else None
    if condition is None:
        return []
    # what each MCP server said of itself (name, version): known once an item arrived
    return [condition.describe(getattr(state, "mcp_reported", {}).get(name))]


def _replay_of(state: AgentevalState) -> dict[str, Any]:
    """``replay``: the file the answers came from and its SHA-256 (with --replay)."""
    replay = getattr(state, "replay", None)
    return {"replay": replay.describe()} if replay is not None else {}


_NEVER = datetime.min.replace(tzinfo=timezone.utc)


def run_started(run_dir: Path) -> datetime:
    """When the run in *run_dir* started: its manifest's ``started_at`` (to the millisecond,
    and bound into the run's chain), or, when that cannot be read, the stamp its name
    starts with; the earliest time for a folder with neither."""
    try:  # read as verify reads it: a FIFO, device or symlink is never opened, size bounded
        started = parse_rfc3339(json.loads(_read_small(run_dir / MANIFEST_NAME))["started_at"])
        if started is not None and started.tzinfo is not None:
            return started
    except (OSError, _Unreadable, ValueError, LookupError, TypeError):
        pass
    try:
        return datetime.strptime(run_dir.name[:16], RUN_NAME_STAMP).replace(tzinfo=timezone.utc)
    except ValueError:
        return _NEVER


def newest_first(run_dirs: Iterable[Path]) -> list[Path]:
    """*run_dirs*, the newest run first, by when each manifest says its run started (see
    :func:`run_started`), then by name.

    Not by name first: a reviewer renamed an old, weaker run so that ``--baseline=latest``
    took it. Verification now fails a renamed run, but only that of the run picked; the
    manifest, which the chain binds, orders them all. Milliseconds also order two runs of
    one second, whose names then sort by their random ids.
    """
    return sorted(run_dirs, key=lambda p: (run_started(p), p.name), reverse=True)


def new_run_dir(out: Path, family: str, subject: str, when: datetime, short: str) -> Path:
    stamp = when.astimezone(timezone.utc).strftime(RUN_NAME_STAMP)
    base = out / "runs" / slug(family) / slug(subject)
    candidate = base / f"{stamp}-{short}"
    n = 1
    while candidate.exists():
        n += 1
        candidate = base / f"{stamp}-{short}-{n}"
    if not candidate.resolve().is_relative_to(out.resolve()):  # belt and braces
        raise ValueError(f"run directory {candidate} escapes {out}")
    return candidate


def _reported_result(node: Mapping[str, Any]) -> dict[str, Any]:
    """*node* with only the meta fields the reports read (``ResultMeta``'s), its children
    too: a judge's nonce, hashes, HTTP statuses and sampling settings stay in the
    evidence, and each record the reports hold at the end of a run is a third the size."""
    from .._model import ResultMeta

    out = dict(node)
    meta = node.get("meta")
    if isinstance(meta, Mapping):
        out["meta"] = {k: v for k, v in meta.items() if k in ResultMeta.model_fields}
    children = node.get("children")
    if isinstance(children, list) and children:
        out["children"] = [_reported_result(c) if isinstance(c, Mapping) else c for c in children]
    return out


class ReportEnricher:
    """Item payloads enriched, one at a time, with the article and a repository-relative
    location (what the JUnit, SARIF and human reports read of each record)."""

    def __init__(self, plan: Plan, rootdir: Path) -> None:
        self.plan = plan
        self.articles = {a.control_id: a for a in plan.family.articles}
        # one lookup per record: 10,000 records of one article must not scan it 10,000 times
        # (a dict per article: no key tuple per scenario)
        self.scenarios = {
            a.control_id: {s.id: s for s in a.scenarios} for a in plan.family.articles
        }
        self.root = rootdir.resolve()
        self.files: dict[str, tuple[str, bool]] = {}  # control id -> (shown path, bundled)

    def _file(self, art: Article) -> tuple[str, bool]:
        if art.control_id not in self.files:
            try:
                shown = (art.path.resolve().relative_to(self.root).as_posix(), False)
            except ValueError:
                family = self.plan.family
                shown = (f"{family.name}/{art.path.relative_to(family.root).as_posix()}", True)
            self.files[art.control_id] = shown
        return self.files[art.control_id]

    def __call__(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        meta = payload["result"].get("meta", {})
        art = self.articles.get(meta.get("control_id", ""))
        record = dict(payload)
        record.pop("family_root", None)
        record["result"] = _reported_result(payload["result"])
        if art is not None:
            record["file"], bundled = self._file(art)
            if bundled:
                record["bundled"] = True  # not a file of the repository (SARIF locates it apart)
            record["line"] = art.lines.get(payload["scenario_id"])
            scenario = self.scenarios[art.control_id].get(payload["scenario_id"])
            declared = (scenario.severity if scenario is not None else None) or art.meta.severity
            record["declared_severity"] = declared
            record["article"] = {
                "control_id": art.control_id,
                "title": art.meta.title,
                "article": art.meta.article,
                "severity": art.meta.severity,
                "pillar": art.meta.pillar,
            }
        return record


PROMPTS_DIR = "judge-prompts"
_PROMPT_MEMO_ENTRIES = 64


class PromptStore:
    """Each distinct judge system prompt written once, as ``judge-prompts/<sha256>.txt``.

    A record's ``request`` keeps every message the judge was sent, except that a
    system message's text is replaced by ``content_sha256`` and ``content_file``:
    the file holds exactly that text (after redaction, like the rest of the
    evidence), and the seal binds the file, so the evidence still says what the
    judge saw while 10,000 records do not repeat the same 6 KB.
    """

    def __init__(self, run_dir: Path, redact: Callable[[str], str] | None = None) -> None:
        self._dir = run_dir / PROMPTS_DIR
        self._redact = redact
        self._written: set[str] = set()
        #: a system message's text as recorded -> the digest of what was written for it:
        #: the same few prompts come back in every record (redacting and hashing 6 KB
        #: again each time was a tenth of the evidence's work). Bounded: a judge could put
        #: each item's own text in its system prompt.
        self._digests: dict[str, str] = {}

    def shrink(self, record: dict[str, Any]) -> dict[str, Any]:
        result = record.get("result")
        if isinstance(result, dict):
            record["result"] = self._node(result)
        meta = record.get("judge_meta")
        if isinstance(meta, dict):
            record["judge_meta"] = self._meta(meta)
        pairwise = record.get("pairwise")
        judge = pairwise.get("judge") if isinstance(pairwise, dict) else None
        if isinstance(pairwise, dict) and isinstance(judge, dict):
            details = judge.get("details")
            if isinstance(details, dict):
                record["pairwise"] = {
                    **pairwise,
                    "judge": {**judge, "details": self._meta(details)},
                }
        return record

    def _node(self, node: dict[str, Any]) -> dict[str, Any]:
        meta, children = node.get("meta"), node.get("children")
        if isinstance(meta, dict):
            node = {**node, "meta": self._meta(meta)}
        if isinstance(children, list) and children:
            node = {
                **node,
                "children": [self._node(c) if isinstance(c, dict) else c for c in children],
            }
        return node

    def _meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        request = meta.get("request")
        if not isinstance(request, list):
            return meta
        return {**meta, "request": [self._message(m) for m in request]}

    def _message(self, message: object) -> object:
        if not isinstance(message, dict) or message.get("role") != "system":
            return message
        content = message.get("content")
        if not isinstance(content, str):
            return message
        digest = self._digests.get(content)
        if digest is None:
            shown = content if self._redact is None else self._redact(content)
            data = shown.encode("utf-8", "surrogatepass")
            digest = hashlib.sha256(data).hexdigest()
            if digest not in self._written:
                self._dir.mkdir(exist_ok=True)
                write_file_atomic(self._dir / f"{digest}.txt", data)
                self._written.add(digest)
            if len(self._digests) >= _PROMPT_MEMO_ENTRIES:
                self._digests.clear()
            self._digests[content] = digest
        rest = {k: v for k, v in message.items() if k != "content"}
        return {**rest, "content_sha256": digest, "content_file": f"{PROMPTS_DIR}/{digest}.txt"}


#: A record's own figures (the schema's numbers: durations, scores, counts) by field.
_FIGURES = ("sample", "line", "min", "max", "score", "repetition")
_RESULT_FIGURES = ("score", "weight")
_MCP_FIGURES = ("result_chars", "latency_s", "step")
_LOOP_FIGURES = ("steps", "max_steps")
_TOKENS = ("prompt_tokens", "completion_tokens")


def keep_figures(safe: JSONObject, payload: Mapping[str, Any]) -> None:
    """The schema's numbers of a record walked by a redactor that redacts numbers (a
    secret made of digits), numbers again: a record the models cannot read stops a run.

    The plugin's own figures (a duration, a score, a count) are as they were: digits that
    happen to hold the secret there are no echo of it. A token count that held it (a
    subject's ``usage`` echoing it) is no count the evidence can show: ``usage`` keeps the
    redaction, and the cost counts 0 for it (as for a count given as text), the total
    made again from its parts."""
    _kept(safe, payload, _FIGURES)
    _kept_in(safe.get("timings"), payload.get("timings"), None)
    _kept_in(safe.get("tool_loop"), payload.get("tool_loop"), _LOOP_FIGURES)
    calls, made = safe.get("mcp_calls"), payload.get("mcp_calls")
    if isinstance(calls, list) and isinstance(made, Sequence) and len(calls) == len(made):
        for call, was in zip(calls, made, strict=True):
            _kept_in(call, was, _MCP_FIGURES)
    _kept_result(safe.get("result"), payload.get("result"))
    cost, was_cost = safe.get("cost"), payload.get("cost")
    if not isinstance(cost, dict) or not isinstance(was_cost, Mapping):
        return
    hidden = False
    for line, was in ((cost.get(k), was_cost.get(k)) for k in ("subject", "judge", "total")):
        if isinstance(line, dict) and isinstance(was, Mapping):
            _kept(line, was, ("usd",))
            for name in _TOKENS:  # (a count beyond 2**53 is kept as its digits)
                count = line.get(name)
                if isinstance(count, str) and not count.lstrip("-").isdigit():
                    line[name], hidden = 0, True
    total, parts = cost.get("total"), [cost.get("subject"), cost.get("judge")]
    if hidden and isinstance(total, dict) and all(isinstance(p, dict) for p in parts):
        for name in _TOKENS:
            counts = [cast("dict[str, Any]", p).get(name) for p in parts]
            if all(type(n) is int for n in counts):
                total[name] = sum(cast("list[int]", counts))


def _is_number(value: object) -> bool:
    return type(value) is int or type(value) is float


def _kept(safe: dict[str, Any], was: Mapping[str, Any], names: Iterable[str]) -> None:
    for name in names:
        if isinstance(safe.get(name), str) and _is_number(was.get(name)):
            safe[name] = was[name]


def _kept_in(safe: object, was: object, names: Iterable[str] | None) -> None:
    """:func:`_kept` on a mapping of figures (*names* None: all of them)."""
    if isinstance(safe, dict) and isinstance(was, Mapping):
        _kept(safe, was, list(safe) if names is None else names)


def _kept_result(safe: object, was: object) -> None:
    if not isinstance(safe, dict) or not isinstance(was, Mapping):
        return
    _kept(safe, was, _RESULT_FIGURES)
    _kept_in(safe.get("meta"), was.get("meta"), ("line",))
    children, made = safe.get("children"), was.get("children")
    if isinstance(children, list) and isinstance(made, Sequence) and len(children) == len(made):
        for child, was_child in zip(children, made, strict=True):
            _kept_result(child, was_child)


def evidence_fields(safe: JSONObject) -> JSONObject:
    """The fields of a JSON-safe item payload the evidence keeps, with only the
    ``converted`` notes about those fields (not about one left out, such as ``mcp_servers``)."""
    record = {key: safe[key] for key in _RECORD_FIELDS if key in safe}
    notes = record.get(CONVERTED_KEY)
    if isinstance(notes, list):
        # a note naming no field (the walker's "N more values" when it stopped listing) stays
        kept: list[JSONValue] = [n for n in notes if _noted_field(n) in (*record, None)]
        if kept:
            record[CONVERTED_KEY] = kept
        else:
            del record[CONVERTED_KEY]
    return record


def _noted_field(note: object) -> str | None:
    """The record field a ``converted`` note is about: ``n`` of ``$.n.x`` or ``$["n"][0]``."""
    path = note.get("path") if isinstance(note, dict) else None
    if not isinstance(path, str):
        return None
    if path.startswith("$."):
        return re.split(r"[.\[]", path[2:], maxsplit=1)[0]
    if path.startswith('$["'):
        try:
            return str(json.JSONDecoder().raw_decode(path, 2)[0])
        except ValueError:
            return None
    return None


class RunRecorder:
    """The evidence writer of one family × preset run, on the controller."""

    def __init__(
        self, state: AgentevalState, bucket: Any, plan: Plan, extra_files: Sequence[Path] = ()
    ) -> None:
        from .. import __version__

        self.redactor: Redactor = state.redactor
        # the run directory is named after it and it is printed: no secret in either
        subject = self.redactor.text(mask_assignments(bucket.subject))
        out = (
            state.out_dir
            if state.out_dir.is_absolute()
            else state.config.invocation_params.dir / state.out_dir
        )
        files = family_files(plan)
        for path in extra_files:
            files[f"golden/{plan.family.name}/{path.name}"] = hashlib.sha256(
                path.read_bytes()
            ).hexdigest()
        started = rfc3339(state.started_at)
        header: dict[str, Any] = {
            "schema": "pytest-agenteval/manifest/1",
            "started_at": started,
            "tool": {"name": "pytest-agenteval", "version": __version__},
            "pytest": metadata.version("pytest"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "dependencies": _versions(),
            "family": plan.family.name,
            "family_version": plan.family.spec.version,
            # what loading assumed (an AgentEval folder: renormalised weights, ...)
            **({"family_notes": list(plan.family.notes)} if plan.family.notes else {}),
            "preset": plan.preset,
            "subject": subject,
            "subject_origin": state.subject_origin,
            "conditions": _conditions_of(state, bucket),
            "samples": {"per_scenario": plan.samples, "aggregation": plan.samples_aggregation},
            **_replay_of(state),
            "judges": state.judge_descriptions(),
            "judge_prompt": judge_prompt_lineage(plan),
            "files": files,
            "files_sha256": sha256_hex(canonical_json(files)),
            "command_line": [self.redactor.text(mask_assignments(a)) for a in sys.argv],
            "secrets_redacted": self.redactor.variable_names,
            "git": _git(Path(state.config.rootpath)),
            "testrun_uid": state.testrun_uid,
            # a pairwise run: both sides' conditions, the sides, seed and prompt
            **(getattr(bucket, "manifest_extra", None) or {}),
        }
        header = self.redactor.data(header)
        self.run_id = sha256_hex(canonical_json(header))
        self.started_at = started
        condition = getattr(bucket, "condition", None)
        short = self.run_id[:10] + (f"-{slug(condition)}" if condition else "")
        self.run_dir = new_run_dir(out, plan.family.name, subject, state.started_at, short)
        self.writer = EvidenceWriter(
            self.run_dir, {"run_id": self.run_id, **header, "completed": False}
        )
        self.prompts = PromptStore(self.run_dir, self.redactor.text)

    def add(self, payload: dict[str, Any]) -> JSONObject:
        """Append one item's record (an explicit allowlist of fields) to the chain.

        Made JSON-safe and redacted in one walk, so that text made from an odd
        value (``str()`` of an object an agent returned) is redacted too. The
        judge's system prompt, the same few kilobytes in every record, is kept
        once (see :class:`PromptStore`). Returns the whole payload as walked:
        what the run keeps in memory is then as safe as what it wrote.
        """
        safe = json_safe_record(payload, text=self.redactor.text)
        if self.redactor.redacts_numbers:
            keep_figures(safe, payload)
        record = evidence_fields(safe)
        self.writer.append(self.prompts.shrink(record), walked=True)
        return safe

    def write_json(self, name: str, data: Any) -> None:
        """``data`` as indented JSON, held to the evidence's rule: no NaN, no number beyond 2**53.

        Made safe and redacted as it is written, part by part: a :class:`Streamed`
        array's items (a summary's nodes) are made, written and dropped one by one.
        """
        redact = self.redactor.text

        def clean(value: object) -> object:
            return json_safe(value, text=redact)[0]

        write_file_atomic_with(
            self.run_dir / name, lambda out: write_indented_json(data, out, clean=clean)
        )

    def write_bytes(self, name: str, data: bytes) -> None:
        write_file_atomic(self.run_dir / name, data)

    def write_with(self, name: str, fill: Callable[[BinaryIO], object]) -> None:
        """A file of the run directory written in pieces by *fill* (atomically, as the rest)."""
        write_file_atomic_with(self.run_dir / name, fill)

    def finalize(self, *, interrupted: bool, not_evaluated: int) -> str:
        return self.writer.finalize(interrupted=interrupted, not_evaluated=not_evaluated)

"""``agenteval uncertain RUN_DIR``: the items worth a person's label (AgentEval 8.7).

The active-learning loop: a judge is least trustworthy where its score sits
next to a band edge (a few points decide PASS or WARN) and where several
judges of a panel did not agree. Those items, labelled by a person, are the
golden entries that teach most about the judge. This command picks them from
a run and writes them as golden-entry candidates — the golden format with the
label fields empty — for someone to label and move into ``golden/``.

An item is picked when

* its score lies within ``--margin`` (default 0.10) of an edge of its
  article's bands (pass and warn; the article's own bands, as summary.json
  records them on article nodes, else the run's bands), or
* the judges of its panel (``--judge`` given several times, or a preset's
  ``judges: N``) gave it different verdicts — on the whole grade or on one
  criterion of a per-criterion (mode B) grade.

Each candidate is one JSON line: ``scenario_id``, ``article`` (control id),
``input`` (the prompt), ``response`` (the answer), the label fields
``expected_verdict``, ``expected_score_min``, ``expected_score_max``,
``rationale``, ``stratum`` and ``split`` set to null, then ``why`` (the reason
it was picked, with the judge's score) and ``judge_score``/``judge_verdict``,
and ``provenance`` (run id, results.jsonl line, node id, condition, sample,
judges). Judge disagreements come first, then the items closest to an edge.

The run must pass ``agenteval verify`` first: a candidate list made from
evidence that was changed would send people to label answers nobody gave. An
incomplete (interrupted) run is accepted, with a note: what it graded is
intact. The output never goes inside the run directory (a new file there
would break its seal).

Exit status: 0 written (also when nothing was picked), 1 the run's evidence
does not verify, 2 usage, not a run directory, or an unwritable output.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypedDict

from ._compare_cli import fraction_arg
from ._vocab import GRADED, Bands, JSONObject, JSONValue

EXIT_OK, EXIT_TAMPERED, EXIT_USAGE = 0, 1, 2
DEFAULT_MARGIN = 0.10
DEFAULT_BANDS = Bands().to_json()
_EPS = 1e-9  # a score exactly `margin` from an edge is within it, whatever binary floats say
_NO_FIELDS: Mapping[str, object] = {}


def _fields(value: object) -> Mapping[str, object]:
    """*value* when it is a JSON object, else an empty one: run files are read, not trusted."""
    return value if isinstance(value, Mapping) else _NO_FIELDS


def _items(value: object) -> list[object]:
    return list(value) if isinstance(value, list | tuple) else []


class Provenance(TypedDict):
    """Where a candidate comes from (values as the run recorded them)."""

    source: str
    run_id: str
    results_line: int
    nodeid: object
    condition: object
    sample: object
    judge: str
    tool_calls: object


class CandidateEntry(TypedDict):
    """A golden-entry candidate: the golden format with the label fields left empty."""

    scenario_id: object
    article: object
    input: object
    response: str
    expected_verdict: None
    expected_score_min: None
    expected_score_max: None
    rationale: None
    stratum: None
    split: None
    why: str
    judge_score: float
    judge_verdict: object
    provenance: Provenance


class PanelJudge(TypedDict):
    judge: str
    score: object
    verdict: object


class PanelSplit(TypedDict):
    part: str  # "grade", or the criterion's name
    judges: list[PanelJudge]


class Counts(TypedDict):
    graded: int
    near_edge: int
    disagreement: int
    without_article_bands: int
    run_id: str


@dataclass(frozen=True)
class Candidate:
    """One item worth labelling, and why."""

    line: int
    disagreement: bool
    distance: float  # to the nearest band edge (inf when picked for disagreement only)
    entry: CandidateEntry


# --------------------------------------------------------------------------- picking


def band_edges(bands: Mapping[str, object]) -> list[tuple[str, float]]:
    """The edges a verdict changes at: pass and warn (an edge at 0 is none: nothing is below it)."""
    edges = []
    for name in ("pass", "warn"):
        value = bands.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            edges.append((name, float(value)))
    return edges


def nearest_edge(
    score: float, bands: Mapping[str, object], margin: float
) -> tuple[str, float, float] | None:
    """(edge name, edge, distance) of the closest band edge within *margin* of *score*."""
    near = [
        (name, edge, abs(score - edge))
        for name, edge in band_edges(bands)
        if abs(score - edge) <= margin + _EPS
    ]
    return min(near, key=lambda n: n[2]) if near else None


def panel_disagreements(result: Mapping[str, object]) -> list[PanelSplit]:
    """Where the judges of a panel gave different verdicts: the whole grade, or a criterion.

    Each is ``{"part": "grade" | criterion name, "judges": [{judge, score, verdict}, ...]}``.
    """
    found: list[PanelSplit] = []

    def walk(node: Mapping[str, object], part: str) -> None:
        children = [c for c in _items(node.get("children")) if isinstance(c, Mapping)]
        judges = [c for c in children if c.get("kind") == "judge"]
        graded = [j for j in judges if j.get("verdict") in GRADED]
        if len({j["verdict"] for j in graded}) > 1:
            found.append(
                {
                    "part": part,
                    "judges": [
                        {
                            "judge": str(_fields(j.get("meta")).get("judge") or j.get("name")),
                            "score": j.get("score"),
                            "verdict": j.get("verdict"),
                        }
                        for j in graded
                    ],
                }
            )
        for child in children:
            if child.get("kind") == "criterion":
                walk(child, str(child.get("name") or child.get("key")))

    walk(result, "grade")
    return found


def _score_text(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.2f}"
    return "-"


def pick(
    record: Mapping[str, object],
    line: int,
    bands: Mapping[str, object],
    margin: float,
    *,
    run_id: str,
    bands_from: str,
) -> Candidate | None:
    """The candidate this item record makes, or None when it is not worth a label."""
    result = record.get("result")
    if not isinstance(result, Mapping):
        return None
    score = result.get("score")
    verdict = result.get("verdict")
    if verdict not in GRADED or not isinstance(score, (int, float)):
        return None  # errored or skipped: nothing was graded
    answer = record.get("answer")
    if not isinstance(answer, str):
        return None
    meta = _fields(result.get("meta"))
    judge = str(meta.get("judge") or "judge")
    reasons = []
    edge = nearest_edge(float(score), bands, margin)
    if edge is not None:
        name, value, distance = edge
        side = "on" if distance <= _EPS else ("above" if score > value else "below")
        reasons.append(
            f"score {_score_text(score)} ({str(verdict).upper()}, judge {judge}) is "
            + (f"{distance:.2f} {side} " if side != "on" else "on ")
            + f"the {name} edge {value:.2f} ({bands_from}; margin {margin:.2f})"
        )
    split = panel_disagreements(result)
    for d in split:
        who = ", ".join(
            f"{j['judge']} {_score_text(j['score'])} {str(j['verdict']).upper()}"
            for j in d["judges"]
        )
        where = "" if d["part"] == "grade" else f" on criterion {d['part']!r}"
        reasons.append(f"judges disagreed{where}: {who}")
    if not reasons:
        return None
    entry: CandidateEntry = {
        "scenario_id": record.get("scenario_id"),
        "article": meta.get("control_id"),
        "input": record.get("prompt"),
        "response": answer,
        "expected_verdict": None,
        "expected_score_min": None,
        "expected_score_max": None,
        "rationale": None,
        "stratum": None,
        "split": None,
        "why": "; ".join(reasons),
        "judge_score": score,
        "judge_verdict": verdict,
        "provenance": {
            "source": "agenteval uncertain",
            "run_id": run_id,
            "results_line": line,
            "nodeid": record.get("nodeid"),
            "condition": record.get("condition"),
            "sample": record.get("sample"),
            "judge": judge,
            "tool_calls": record.get("tool_calls") or [],
        },
    }
    return Candidate(
        line=line,
        disagreement=bool(split),
        distance=edge[2] if edge is not None else math.inf,
        entry=entry,
    )


def article_bands(summary: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """Control id → the article's bands, from summary.json's article nodes."""
    found: dict[str, dict[str, object]] = {}

    def walk(node: object) -> None:
        if not isinstance(node, Mapping):
            return
        bands = node.get("bands")
        if node.get("kind") == "article" and isinstance(bands, Mapping):
            found[str(node.get("id"))] = dict(bands)
        for child in _items(node.get("children")):
            walk(child)

    for root in _items(summary.get("nodes")):
        walk(root)
    return found


def item_records(path: Path) -> Iterator[tuple[int, JSONObject]]:
    """(line number, record) of each item record of a results.jsonl (not the seal, not golden)."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            record: JSONValue = json.loads(raw)
            if isinstance(record, dict) and "result" in record and "kind" not in record:
                yield number, record


def candidates(run_dir: Path, margin: float) -> tuple[list[Candidate], Counts]:
    """The run's candidates, ordered (disagreements first, then nearest an edge), and counts."""
    summary: JSONValue = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    if not isinstance(summary, dict):
        raise ValueError("summary.json is not a JSON object")
    by_article = article_bands(summary)
    given_bands = summary.get("bands")
    run_bands = given_bands if isinstance(given_bands, Mapping) else None
    run_id = str(summary.get("run_id") or "")
    picked: list[Candidate] = []
    seen: set[tuple[object, object]] = set()
    graded = 0
    fallback = 0
    for number, record in item_records(run_dir / "results.jsonl"):
        result = _fields(record.get("result"))
        if result.get("verdict") in GRADED:
            graded += 1
        control = str(_fields(result.get("meta")).get("control_id"))
        bands: Mapping[str, object]
        if control in by_article:
            bands, source = by_article[control], "the article's bands"
        else:
            fallback += 1
            bands = run_bands or DEFAULT_BANDS
            source = "the run's bands" if run_bands else "the default bands"
        found = pick(record, number, bands, margin, run_id=run_id, bands_from=source)
        if found is None:
            continue
        key = (found.entry["scenario_id"], found.entry["response"])
        if key in seen:  # the same answer twice (samples that agreed word for word)
            continue
        seen.add(key)
        picked.append(found)
    picked.sort(key=lambda c: (not c.disagreement, c.distance, c.line))
    counts: Counts = {
        "graded": graded,
        "near_edge": sum(1 for c in picked if c.distance != math.inf),
        "disagreement": sum(1 for c in picked if c.disagreement),
        "without_article_bands": fallback,
        "run_id": run_id,
    }
    return picked, counts


# --------------------------------------------------------------------------- command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agenteval uncertain",
        description="Write the items of a run worth a person's label — scores near a band edge, "
        "judges that disagreed — as golden-entry candidates (JSONL, label fields empty).",
        epilog="exit codes: 0 written, 1 the run's evidence does not verify, "
        "2 usage, not a run, or the output cannot be written",
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory")
    parser.add_argument(
        "--margin",
        type=fraction_arg,
        default=DEFAULT_MARGIN,
        metavar="X",
        help=f"pick scores within X of a band edge (default {DEFAULT_MARGIN})",
    )
    parser.add_argument(
        "--out", type=Path, metavar="FILE", help="write the candidates here (default: stdout)"
    )
    return parser


def _emit(stream: TextIO, text: str) -> None:
    encoding = getattr(stream, "encoding", None) or "utf-8"
    stream.write(text.encode(encoding, "backslashreplace").decode(encoding) + "\n")


def _line(entry: Mapping[str, object]) -> str:
    """One JSON line, readable UTF-8; escaped where the text holds what UTF-8 cannot (a lone
    surrogate), so the file is always valid."""
    text = json.dumps(entry, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(entry)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    from .evidence._chain import verify_run

    parser = build_parser()
    try:
        args = parser.parse_args(list(sys.argv[2:] if argv is None else argv))
    except SystemExit as exc:  # --help (0) or bad usage (2)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run_dir: Path = args.run_dir
    checked = verify_run(run_dir)
    if checked.io_error:
        _emit(sys.stderr, f"agenteval uncertain: {checked.message}")
        return EXIT_USAGE
    if not checked.ok:
        _emit(
            sys.stderr,
            f"agenteval uncertain: refused, the run's evidence does not verify — {checked.message}",
        )
        return EXIT_TAMPERED
    if not checked.complete:
        _emit(sys.stderr, f"agenteval uncertain: note: {checked.message}; using what it graded")
    out: Path | None = args.out
    if out is not None and out.resolve().is_relative_to(run_dir.resolve()):
        _emit(
            sys.stderr,
            "agenteval uncertain: --out is inside the run directory, where a new file would "
            "break its seal; write it elsewhere",
        )
        return EXIT_USAGE
    try:
        picked, counts = candidates(run_dir, args.margin)
    except (OSError, ValueError) as exc:
        _emit(sys.stderr, f"agenteval uncertain: cannot read {run_dir}: {exc}")
        return EXIT_USAGE
    text = "".join(_line(c.entry) + "\n" for c in picked)
    if out is None:
        sys.stdout.write(text)
        where = "stdout"
    else:
        try:
            out.write_text(text, encoding="utf-8")
        except OSError as exc:
            _emit(sys.stderr, f"agenteval uncertain: cannot write {out}: {exc.strerror or exc}")
            return EXIT_USAGE
        where = str(out)
    note = (
        f"agenteval uncertain: {len(picked)} candidate(s) from {counts['graded']} graded items "
        f"of run {counts['run_id'][:12]}… ({counts['near_edge']} within {args.margin:.2f} of a "
        f"band edge, {counts['disagreement']} where judges disagreed) → {where}"
    )
    _emit(sys.stderr if out is None else sys.stdout, note)
    if counts["without_article_bands"]:
        _emit(
            sys.stderr,
            f"agenteval uncertain: note: {counts['without_article_bands']} item(s) had no article "
            "bands in summary.json (a run made before they were recorded): the run's bands used",
        )
    return EXIT_OK

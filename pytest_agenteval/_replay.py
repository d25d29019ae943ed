"""Replay (Layerup's replay suite): grade recorded answers, call no subject.

``--replay=FILE.jsonl`` reads answers that were given before — production
transcripts, or an earlier run's ``results.jsonl`` — and grades them against
the family's scenarios exactly as a live answer would be graded. It is a
*subject* (:class:`ReplaySubject`) that looks each item's answer up by
scenario id, condition and sample, so the judges, the tree, the gate, the
evidence and the reports are the ones of any other run.

One JSON object a line::

    {"scenario_id": "pta-eu-ai-act-art5-001", "answer": "I can't help ...",
     "tool_calls": [{"name": "search", "arguments": {"q": "..."}}],     # optional
     "condition": "with-policy",                                        # optional
     "sample": 0}                                                       # optional, 0-based

``tool_calls`` take our shape (``name``, ``arguments``) or OpenAI's
(``{"type": "function", "function": {"name", "arguments": "<JSON text>"}}``).
Without ``sample``, the recorded answers of one scenario and condition are its
samples in file order (the first is sample 0, the item ``id[s1]``). An earlier
run's ``results.jsonl`` is read as it is: its seal line and calibration
records are skipped, and an item that had no answer (it errored) is not an
answer to replay.

Checked before any judge call, each a usage error naming ``file:line``: a line
that is not a JSON object, a missing or non-text ``scenario_id`` or
``answer``, malformed ``tool_calls``, an id that is no scenario of the run's
families, a condition the run does not have (or no condition when it has
some), and two answers for the same scenario, condition and sample. A
scenario of the preset with no recorded answer is not an error: its items are
skipped as "not replayed", so a replay of three conversations grades three
scenarios and says what it left out.

Pure but for reading the file: no pytest here.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ._checks import ToolCall
from ._vocab import JSONObject, JSONValue, SpecError
from ._yaml import MAX_DEPTH, describe_value, read_limited
from .subjects._base import Response, SubjectError

if TYPE_CHECKING:
    from ._suites import ScenarioInfo

__all__ = ["MAX_REPLAY_BYTES", "Recorded", "ReplayLog", "ReplaySubject", "load_replay"]

#: Largest replay file read (the size is checked before reading).
MAX_REPLAY_BYTES = 256 * 1024 * 1024
#: The tag (and pytest marker) replayed scenarios carry: the bundled ``replay`` suite selects it.
REPLAY_TAG = "replay"

Key = tuple[str, str | None, int]


@dataclass(frozen=True)
class Recorded:
    """One recorded answer and where it is in the file."""

    scenario_id: str
    condition: str | None
    sample: int
    answer: str
    tool_calls: tuple[ToolCall, ...]
    line: int


@dataclass
class ReplayLog:
    """The recorded answers of one replay file, by (scenario id, condition, sample)."""

    path: Path
    shown: str  # the path as the user gave it (for messages and the manifest)
    sha256: str
    entries: dict[Key, Recorded] = field(default_factory=dict)
    #: ``transcripts`` (lines of scenario_id/answer) or ``results`` (an earlier run's results.jsonl)
    source: str = "transcripts"
    #: lines that hold no answer to replay: the seal, calibration records, errored items
    ignored: int = 0

    def lookup(self, scenario_id: str, condition: str | None, sample: int) -> Recorded | None:
        return self.entries.get((scenario_id, condition, sample))

    def describe(self) -> JSONObject:
        """What the manifest records: the file, its SHA-256 and what it held."""
        return {
            "file": self.shown,
            "sha256": self.sha256,
            "format": self.source,
            "answers": len(self.entries),
            "scenarios": len({k[0] for k in self.entries}),
            "lines_ignored": self.ignored,
        }

    def label(self) -> str:
        return f"replay:{self.path.name}"

    def check_against(
        self, scenario_ids: Mapping[str, str], conditions: Sequence[str], families: Sequence[str]
    ) -> None:
        """Every recorded id is a scenario of the run, every condition one of the run's.

        *scenario_ids* maps each scenario id of the run's families to its family.
        Raises :class:`SpecError` naming the file and line.
        """
        known = set(conditions)
        for rec in sorted(self.entries.values(), key=lambda r: r.line):
            if rec.scenario_id not in scenario_ids:
                fams = ", ".join(families) or "none"
                hint = _close(rec.scenario_id, scenario_ids)
                raise SpecError(
                    self.shown,
                    rec.line,
                    f"scenario {rec.scenario_id!r} is not a scenario of the run's families "
                    f"({fams}){hint}; nothing was graded",
                )
            if rec.condition is None and known:
                raise SpecError(
                    self.shown,
                    rec.line,
                    f"this answer has no condition, but the run has conditions "
                    f'({", ".join(conditions)}): give each line a "condition", or run '
                    "without --condition",
                )
            if rec.condition is not None and rec.condition not in known:
                have = ", ".join(conditions) if conditions else "none"
                raise SpecError(
                    self.shown,
                    rec.line,
                    f"condition {rec.condition!r} is not a condition of this run "
                    f"(conditions: {have}; add --condition={rec.condition})",
                )

    def coverage(
        self, scenario_ids: Iterable[str], samples: int, conditions: Sequence[str | None]
    ) -> dict[str, int]:
        """Items of a preset with and without a recorded answer, and answers left unused.

        ``replayed`` + ``not_replayed`` = the preset's items; ``unused`` counts
        recorded answers outside the preset, ``beyond_samples`` those whose sample
        is past the run's N (``--samples`` would grade them).
        """
        wanted = set(scenario_ids)
        conds = list(conditions) or [None]
        replayed = sum(
            1
            for sid in wanted
            for cond in conds
            for sample in range(samples)
            if (sid, cond, sample) in self.entries
        )
        beyond = sum(1 for k in self.entries if k[0] in wanted and k[2] >= samples)
        outside = sum(1 for k in self.entries if k[0] not in wanted)
        total = len(wanted) * len(conds) * samples
        return {
            "replayed": replayed,
            "not_replayed": total - replayed,
            "unused": outside,
            "beyond_samples": beyond,
        }

    def subject(self) -> ReplaySubject:
        return ReplaySubject(self)


class ReplaySubject:
    """A subject that calls nothing: it returns the recorded answer of each item."""

    concurrent = True  # a dictionary look-up: safe to run alongside itself

    def __init__(self, log: ReplayLog) -> None:
        self.log = log
        self.name = log.label()

    async def __call__(
        self, prompt: str, *, scenario: Mapping[str, object], condition: str | None = None
    ) -> Response:
        sid = str(scenario.get("id"))
        given = scenario.get("sample")
        sample = given if isinstance(given, int) else 0
        rec = self.log.lookup(sid, condition, sample)
        if rec is None:  # the session skips these items before asking; belt and braces
            raise SubjectError(not_replayed_reason(self.log, sid, condition, sample))
        return Response(rec.answer, rec.tool_calls, {}, {"replay_line": rec.line})


def not_replayed_reason(log: ReplayLog, sid: str, condition: str | None, sample: int) -> str:
    where = "" if condition is None else f", condition {condition}"
    return (
        f"not replayed: {log.shown} has no recorded answer for {sid} (sample {sample + 1}{where})"
    )


def with_replay_tag(infos: Sequence[ScenarioInfo], replayed: Iterable[str]) -> list[ScenarioInfo]:
    """Suite selection infos with the ``replay`` tag added to the replayed scenarios.

    A replayed run counts as the bundled ``replay`` suite (``select: {tags: [replay]}``)
    for the scenarios whose answers came from the replay file, and only for those.
    """
    ids = set(replayed)
    return [
        replace(i, tags=(*i.tags, REPLAY_TAG)) if i.id in ids and REPLAY_TAG not in i.tags else i
        for i in infos
    ]


# --------------------------------------------------------------------------- reading


def load_replay(path: Path, shown: str | None = None) -> ReplayLog:
    """Read and check a replay file (see the module docstring); SpecError names file:line."""
    shown = shown or str(path)
    raw = read_limited(path, MAX_REPLAY_BYTES)
    log = ReplayLog(path=path, shown=shown, sha256=hashlib.sha256(raw).hexdigest())
    order: dict[tuple[str, str | None], int] = {}
    first_line: dict[Key, int] = {}
    lines = raw.split(b"\n")
    results_format = False
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        obj = _parse(line, shown, number)
        if obj.get("kind") in ("seal", "calibration"):  # an earlier run's closing line, or golden
            log.ignored += 1
            results_format = True
            continue
        if "result" in obj and "prev" in obj:  # an item record of an earlier run's results.jsonl
            results_format = True
            if obj.get("answer") is None:  # it errored: there is no answer to replay
                log.ignored += 1
                continue
        rec = _recorded(obj, shown, number, order)
        key = (rec.scenario_id, rec.condition, rec.sample)
        if key in first_line:
            cond = "" if rec.condition is None else f", condition {rec.condition!r}"
            raise SpecError(
                shown,
                number,
                f"a second answer for {rec.scenario_id!r}{cond}, sample {rec.sample} "
                f'(first on line {first_line[key]}); give each a distinct "sample"',
            )
        first_line[key] = number
        log.entries[key] = rec
    log.source = "results" if results_format else "transcripts"
    if not log.entries:
        raise SpecError(
            shown,
            None,
            'no recorded answer to replay (lines of {"scenario_id", "answer"}, or an '
            "earlier run's results.jsonl)",
        )
    return log


def _parse(line: bytes, shown: str, number: int) -> JSONObject:
    from ._golden import _no_constants, _strict_pairs, _too_deep

    try:
        obj: JSONValue = json.loads(
            line.decode("utf-8"), object_pairs_hook=_strict_pairs, parse_constant=_no_constants
        )
    except UnicodeDecodeError:
        raise SpecError(shown, number, "not UTF-8") from None
    except RecursionError:
        raise SpecError(shown, number, f"JSON nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as exc:  # json's message gives the position, never the text
        raise SpecError(shown, number, f"broken JSON line: {exc}") from None
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _too_deep(obj):
        raise SpecError(shown, number, f"JSON nested more than {MAX_DEPTH} levels deep")
    if not isinstance(obj, dict):
        raise SpecError(
            shown, number, f"each line must be a JSON object, got {describe_value(obj)}"
        )
    return obj


def _recorded(
    obj: JSONObject, shown: str, number: int, order: dict[tuple[str, str | None], int]
) -> Recorded:
    sid = obj.get("scenario_id")
    if not isinstance(sid, str) or not sid:
        raise SpecError(
            shown, number, f'"scenario_id" must be a non-empty string, got {describe_value(sid)}'
        )
    answer = obj.get("answer")
    if not isinstance(answer, str):
        raise SpecError(shown, number, f'"answer" must be a string, got {describe_value(answer)}')
    condition = obj.get("condition")
    if condition is not None and (not isinstance(condition, str) or not condition):
        raise SpecError(
            shown,
            number,
            f'"condition" must be a non-empty string or null, got {describe_value(condition)}',
        )
    position = order.get((sid, condition), 0)
    order[(sid, condition)] = position + 1
    sample = obj.get("sample", None)
    if sample is None:
        sample = position
    elif isinstance(sample, bool) or not isinstance(sample, int) or sample < 0:
        raise SpecError(
            shown,
            number,
            f'"sample" must be a whole number >= 0 (0 is the first sample), '
            f"got {describe_value(sample)}",
        )
    return Recorded(sid, condition, sample, answer, _tool_calls(obj, shown, number), number)


def _tool_calls(obj: JSONObject, shown: str, number: int) -> tuple[ToolCall, ...]:
    raw = obj.get("tool_calls")
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise SpecError(shown, number, f'"tool_calls" must be a list, got {describe_value(raw)}')
    calls = []
    for i, call in enumerate(raw):
        where = f"tool_calls[{i}]"
        if not isinstance(call, dict):
            raise SpecError(shown, number, f"{where} must be an object, got {describe_value(call)}")
        function = call.get("function")
        inner: JSONObject = function if isinstance(function, dict) else call
        name, args = inner.get("name"), inner.get("arguments", {})
        if not isinstance(name, str) or not name:
            raise SpecError(shown, number, f'{where}: "name" must be a non-empty string')
        if isinstance(args, str):  # OpenAI's shape: the arguments as JSON text
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                raise SpecError(
                    shown, number, f'{where}: "arguments" is text that is not JSON'
                ) from None
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise SpecError(
                shown,
                number,
                f'{where}: "arguments" must be an object, got {describe_value(args)}',
            )
        calls.append(ToolCall(name, args))
    return tuple(calls)


def _close(sid: str, known: Iterable[str]) -> str:
    import difflib

    match = difflib.get_close_matches(sid, list(known), n=1, cutoff=0.8)
    return f" (did you mean {match[0]!r}?)" if match else ""

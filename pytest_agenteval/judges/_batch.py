"""Batch judging (``--judge-batch``): calibration grades through the providers' batch APIs.

A calibration run before a release is hundreds to thousands of grades whose
answers are fixed (the golden entries), which is exactly what OpenAI's Batch
API and Anthropic's Message Batches are for: half the price of the same calls
made live, answered within 24 hours. pytest runs items one by one, so the
grades are gathered first, in one phase before the test loop:

1. For each calibration item and each OpenAI or Anthropic judge, the request
   that judge would be asked is worked out exactly as a live grade works it out
   (:func:`~pytest_agenteval.judges._base.grade_with_checks` decides which criteria
   the checks hold back; the judge's own prompt, fence, nonce, sampling and
   structured-output mode), and becomes one line of a batch. A line whose grade
   is in the judge cache is left out (the item reads the cache as usual).
2. One batch per judge and run directory (a family's calibration run) is
   submitted: OpenAI: the lines uploaded as a JSONL file
   (``files.create(purpose="batch")``) and ``batches.create`` on
   ``/v1/chat/completions``; Anthropic: ``messages.batches.create``. Its id,
   the nonce and content key of every line and the state are written to
   ``batch.json`` in the run directory, which is created at once.
3. The batches are polled (``--judge-batch-poll``, default 30 s) with the
   progress line showing their state, until they end or ``--judge-batch-wait``
   runs out. The outputs are read (OpenAI: ``files.content`` of the output and
   error files; Anthropic: ``messages.batches.results``) and each line is held
   to the contract of a live grade: strict JSON, the schema, truncation and
   refusals. A line whose output is invalid gets its one re-ask as a live call
   (full price, recorded as ``reask_live``); a line that failed at the
   provider (an error status, expired, cancelled) or a batch that failed is an
   item ERROR with the reason, as any judge failure is.
4. The test loop then runs as usual: each item reads its grade from the
   batch's results instead of calling the judge; its record says
   ``meta.batch`` (batch id, line, price factor) and its cost is the batch
   price.

Resuming. A run stopped while its batch is pending (Ctrl-C, a CI time limit,
``--judge-batch-wait``) is sealed as incomplete with its ``batch.json``. Running
the same command again looks among the earlier runs of the same family and
judges for a batch that holds the same requests (every line's content key: same
golden data, criteria, prompt, model, endpoint and options), in a run that
verifies intact and is incomplete, and whose grades no complete run has used;
it collects the newest such batch instead of paying for a new one. OpenAI's
input file is also downloaded and must be byte for byte the requests this run
would send. The new run directory's ``batch.json`` names the run it resumed.
Otherwise a new batch is submitted: after a complete run, a new run is a new
measurement, and a run that fails verification is not trusted.

One run at a time. A run judging in batches locks a file beside the run directories of its
family and judges (:data:`LOCK_FILE`) until it ends or its process dies: a second run
there at the same time would take over the batch the first is collecting, and both would
count its cost and call its grades theirs. The second stops before any call instead.

Failures. Money is not spent twice and a paid batch is never left unrecorded: the
create call is sent once (no SDK retry: neither provider takes an idempotency key);
when it fails after it was sent, the run stops naming what to look for at the
provider (``create_unconfirmed``); the next run looks an OpenAI batch up by the
input file it recorded, and collects it if the provider has it. The batch id is written to ``batch.json`` before
anything else of the answer is read. A failed poll, download or resume check stops
the run resumable (a configuration error stops it as one); a batch or results the
provider no longer has (404, 410) are item errors and the batch is marked ``lost``,
never resumed. Every call is bounded in wall-clock time by ``--judge-deadline``
(once more per 10 000 requests it carries), which a trickling answer cannot stretch.

Limits, decided: benchmark (scenario) items are not batched — their subject
must answer first, item by item — so ``--judge-batch`` with benchmark items in
the run is a usage error rather than a silent full-price run; and it needs one
process (not ``-n``), since one batch serves the whole run and the provider
does the parallel work. ``--agenteval-max-cost`` cannot stop calls inside a
batch; batch grades are charged to the cost when their results arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hashlib
import json
import math
import os
import secrets
import stat
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeGuard, TypeVar, Union

import pytest

from .._cost import BudgetExceeded, Cost, cost_of
from .._vocab import AgentevalError, JSONObject, JSONValue

if TYPE_CHECKING:
    from anthropic.types.messages import MessageBatch

    from .._golden_items import CalibrationItem
    from .._progress import Progress
    from .._providers import AsyncOpenAI
    from .._session import AgentevalState
    from ..evidence._run_dir import RunRecorder
    from ._base import Grade, GradeRequest, Judge
    from ._llm import (
        AnthropicJudge,
        LLMJudgeError,
        OpenAIJudge,
        Sampling,
        _Problem,
        _Prompt,
        _Rendered,
        _Reply,
    )

#: The judges that have a batch API.
BatchJudge = Union["OpenAIJudge", "AnthropicJudge"]
#: What a batch line gave a judge for an item: its grade, or why there is none.
Outcome = Union["Grade", "LLMJudgeError"]

T = TypeVar("T")

BATCH_FILE = "batch.json"
SCHEMA = "pytest-agenteval/batch/1"
#: Both providers bill a batch request at half the price of the same call made live.
PRICE_FACTOR = 0.5
#: Lines per batch each provider accepts; more are split into several batches.
MAX_LINES = {"openai": 50_000, "anthropic": 100_000}
OPENAI_ENDPOINT: Final = "/v1/chat/completions"
_OPENAI_ENDED = ("completed", "failed", "expired", "cancelled")
#: Consecutive failed polls after which the run stops (the batch keeps running: re-run to resume).
MAX_POLL_FAILURES = 5
_BATCH_JSON_LIMIT = 64 * 1024 * 1024

#: nodeid -> judge index -> the batch's outcome for that judge (a Grade or an LLMJudgeError)
RESULTS: pytest.StashKey[dict[str, dict[int, Outcome]]] = pytest.StashKey()


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class BatchOptions:
    enabled: bool
    poll_s: float = 30.0
    wait_s: float | None = None


def batch_options(config: pytest.Config) -> BatchOptions:
    """``--judge-batch``, ``--judge-batch-poll``, ``--judge-batch-wait`` (and their ini keys)."""
    from .._stash import STATE

    run = config.stash[STATE].settings
    return BatchOptions(run.judge_batch, run.judge_batch_poll_s, run.judge_batch_wait_s)


def check_options(config: pytest.Config) -> None:
    """Refused before collection: ``--judge-batch`` under xdist (one batch serves the run)."""
    if not batch_options(config).enabled:
        return
    if str(getattr(config.option, "dist", "no") or "no") != "no":
        raise pytest.UsageError(
            "--judge-batch: run without -n/--dist: one batch per judge serves the whole run "
            "and the provider grades its lines in parallel"
        )


def check_items(state: AgentevalState, items: Sequence[pytest.Item]) -> None:
    """At collection: what ``--judge-batch`` cannot do is a usage error, before any call."""
    from .._collect import ScenarioItem

    if state.is_worker or not batch_options(state.config).enabled or not items:
        return
    scenarios = sum(1 for i in items if isinstance(i, ScenarioItem))
    if scenarios:
        raise pytest.UsageError(
            f"--judge-batch batches calibration grades only (-m calibration): the {scenarios} "
            "benchmark item(s) of this run would be graded live at full price; run them "
            "without --judge-batch"
        )
    if not any(_batchable(j) for j in state.judges()):
        raise pytest.UsageError(
            "--judge-batch needs an openai: or anthropic: judge (--judge=openai:MODEL); "
            f"the judges here ({state.judge_label()}) have no batch API"
        )


def _batchable(judge: object) -> TypeGuard[BatchJudge]:
    from ._llm import AnthropicJudge, OpenAIJudge

    return isinstance(judge, (OpenAIJudge, AnthropicJudge))


# --------------------------------------------------------------------------- cost


def grade_cost(
    meta: Mapping[str, object], judge: object, rates: Mapping[str, tuple[float, float]]
) -> Cost:
    """What one calibration grade cost: its tokens at the model's rate, those answered
    in a batch at the batch price (a live re-ask at the full price)."""
    model = meta.get("model_requested") or meta.get("judge") or judge
    cost = cost_of(str(model) if model else None, meta.get("usage"), rates)
    batch = meta.get("batch")
    if not isinstance(batch, Mapping) or cost.usd is None:
        return cost
    factor = batch.get("price_factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool):
        return cost
    part = cost_of(str(model) if model else None, batch.get("usage"), rates)
    saved = (1.0 - float(factor)) * (part.usd or 0.0)
    return Cost(cost.usd - saved, cost.prompt_tokens, cost.completion_tokens)


# --------------------------------------------------------------------------- items read their grade


class BatchedGrade:
    """Stands in for an LLM judge in an item's setup: the grade its batch line gave."""

    deterministic = False

    def __init__(self, judge: Judge, outcome: Outcome) -> None:
        self.judge = judge
        self.name = judge.name
        self.model = getattr(judge, "model", None)
        self._outcome = outcome

    async def grade(self, request: GradeRequest) -> Grade:
        from ._llm import LLMJudgeError

        outcome = self._outcome
        if isinstance(outcome, LLMJudgeError):
            raise LLMJudgeError(str(outcome), outcome.details)
        return outcome


def batched_judges(config: pytest.Config, nodeid: str, judges: list[Judge]) -> list[Judge]:
    """*judges* with those graded in a batch replaced by their batch results for *nodeid*."""
    results = config.stash.get(RESULTS, None)
    mine = results.get(nodeid) if results else None
    if not mine:
        return judges
    return [BatchedGrade(j, mine[k]) if k in mine else j for k, j in enumerate(judges)]


# --------------------------------------------------------------------------- the lines


class _Asked(AgentevalError):
    """Raised by :class:`_Recorder` to hand back the request a judge would be asked."""

    def __init__(self, request: GradeRequest) -> None:
        super().__init__("recorded")
        self.request = request


class _Recorder:
    """A judge that records what it is asked (nothing is sent)."""

    deterministic = False

    def __init__(self, name: str) -> None:
        self.name = name

    async def grade(self, request: GradeRequest) -> Grade:
        raise _Asked(request)


async def asked(judge: Judge, request: GradeRequest) -> GradeRequest | None:
    """The request *judge* would get for *request* (checked criteria held back, exactly as
    :func:`~pytest_agenteval.judges._base.grade_with_checks` does live); None when it would not
    be called (every criterion has a check)."""
    from ._base import grade_with_checks

    try:
        await grade_with_checks(_Recorder(judge.name), request)
    except _Asked as recorded:
        return recorded.request
    return None


@dataclass
class Line:
    """One request of a batch: what is sent, and what a live grade would have recorded."""

    custom_id: str
    nodeid: str
    request: GradeRequest
    criteria: list[str]
    nonce: str
    key: str
    prompt: _Prompt
    rendered: _Rendered
    sampling: Sampling
    repetition: int | str
    mode: str
    body: JSONObject


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _repetition(request: GradeRequest) -> int | str:
    value = request.context.get("repetition", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else str(value)


def make_line(
    judge: BatchJudge, custom_id: str, nodeid: str, request: GradeRequest, nonce: str
) -> Line:
    """The batch line for *request*, rendered as the judge renders a live call."""
    from ._llm import NONCE_PLACEHOLDER, _prompt_for, _render

    settings = judge.settings
    prompt = _prompt_for(request.context)
    rendered = _render(request, nonce, settings.max_answer_chars)
    repetition = _repetition(request)
    sampling = judge.sampling(request.context)
    key_user = _render(request, NONCE_PLACEHOLDER, settings.max_answer_chars).user
    key = judge._cache_key(prompt, key_user, repetition, sampling)
    criteria = [c.text for c in request.criteria]
    mode = judge.structured
    line = Line(
        custom_id,
        nodeid,
        request,
        criteria,
        nonce,
        key,
        prompt,
        rendered,
        sampling,
        repetition,
        mode,
        {},
    )
    line.body = request_body(judge, line)
    return line


def request_body(judge: BatchJudge, line: Line) -> JSONObject:
    """The body of the live call a judge would make for *line* (its first round)."""
    from ._llm import GRADE_CONTRACT, grade_schema

    contract = dataclasses.replace(GRADE_CONTRACT, schema=grade_schema(len(line.criteria)))
    user: JSONObject = {"role": "user", "content": line.rendered.user}
    if judge.provider == "openai":
        body: JSONObject = {
            "model": judge.model,
            "messages": [{"role": "system", "content": line.prompt.text}, user],
            "temperature": line.sampling.temperature,
            "seed": line.sampling.seed,
            "max_tokens": judge.settings.max_tokens,
        }
        if line.mode == "json_schema":
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": contract.schema_name,
                    "schema": dict(contract.schema),
                    "strict": True,
                },
            }
        elif line.mode == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body
    body = {
        "model": judge.model,
        "max_tokens": judge.settings.max_tokens,
        "system": line.prompt.text,
        "messages": [user],
    }
    temperature = judge._temperature(line.sampling)
    if temperature is not None:
        body["temperature"] = temperature
    if line.mode == "tool":
        body["tools"] = [
            {
                "name": contract.tool_name,
                "description": contract.tool_description,
                "input_schema": dict(contract.schema),
            }
        ]
        body["tool_choice"] = {"type": "tool", "name": contract.tool_name}
    return body


def _jsonl(judge: BatchJudge, lines: Sequence[Line]) -> bytes:
    """What is submitted: OpenAI's input file, Anthropic's requests, one JSON line each."""
    out = []
    for line in lines:
        obj: JSONObject
        if judge.provider == "openai":
            obj = {"custom_id": line.custom_id, "method": "POST", "url": OPENAI_ENDPOINT}
            obj["body"] = line.body
        else:
            obj = {"custom_id": line.custom_id, "params": line.body}
        out.append(json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode() + b"\n")
    return b"".join(out)


# --------------------------------------------------------------------------- one batch


@dataclass
class Job:
    """One batch: the lines of one judge for one family's run directory."""

    family: str
    family_root: str
    judge_index: int
    judge: BatchJudge
    lines: list[Line]
    recorder: RunRecorder
    part: int = 0
    batch_id: str | None = None
    input_file_id: str | None = None
    status: str = "new"
    #: The provider's counts of lines answered and failed; None when it gave none we can read
    done: int | None = 0
    failed: int | None = 0
    submitted_at: str | None = None
    resumed_from: JSONObject | None = None
    collected: bool = False
    #: The provider's latest view of the batch (its SDK object: read by attribute name,
    #: the two providers' differ)
    batch: object = None
    poll_failures: int = 0
    started: float = field(default_factory=time.monotonic)
    #: When the create call was sent; set with no batch id, the provider may hold a batch
    #: this run cannot name (the call failed after it was sent)
    create_attempted_at: str | None = None
    create_error: str | None = None
    #: When the provider says it received the input file (OpenAI; its clock, not ours)
    input_file_created_at: int | None = None
    #: Why the batch's results cannot be had any more (the provider no longer has them)
    lost: str | None = None

    @property
    def total(self) -> int:
        return len(self.lines)

    @property
    def fingerprint(self) -> str:
        material = {
            "judge": self.judge.name,
            "endpoint": self.judge.endpoint,
            "lines": [[line.custom_id, line.key, line.mode] for line in self.lines],
        }
        from ..evidence._chain import canonical_json

        return hashlib.sha256(canonical_json(material)).hexdigest()

    @property
    def ended(self) -> bool:
        if self.lost is not None:
            return True
        if self.judge.provider == "openai":
            return self.status in _OPENAI_ENDED
        return self.status == "ended"

    def record(self) -> JSONObject:
        """This batch in ``batch.json``."""
        return {
            "judge": self.judge.name,
            "provider": self.judge.provider,
            "model": self.judge.model,
            "endpoint": self.judge.endpoint,
            "part": self.part,
            "batch_id": self.batch_id,
            "input_file_id": self.input_file_id,
            "input_sha256": hashlib.sha256(_jsonl(self.judge, self.lines)).hexdigest(),
            "fingerprint": self.fingerprint,
            "requests": self.total,
            "status": self.status,
            "request_counts": {"done": self.done, "failed": self.failed, "total": self.total},
            "submitted_at": self.submitted_at,
            "collected": self.collected,
            "resumed_from": self.resumed_from,
            **({"create_error": self.create_error} if self.create_error else {}),
            **(
                {
                    "create_attempted_at": self.create_attempted_at,
                    "input_file_created_at": self.input_file_created_at,
                }
                if self.create_attempted_at and self.batch_id is None
                else {}
            ),
            **({"lost": self.lost} if self.lost else {}),
            "price_factor": PRICE_FACTOR,
            "lines": {
                line.custom_id: {"nodeid": line.nodeid, "key": line.key, "nonce": line.nonce}
                for line in self.lines
            },
        }


def write_batch_json(recorder: RunRecorder, jobs: Sequence[Job]) -> None:
    recorder.write_json(
        BATCH_FILE,
        {
            "schema": SCHEMA,
            "run_id": recorder.run_id,
            "updated_at": _now(),
            "batches": [job.record() for job in jobs],
        },
    )


class _Overdue(AgentevalError):
    """A batch call that ran past its wall-clock bound: the SDK's read timeout restarts with
    every chunk, so an answer that trickles in would hold the run past every limit."""


#: Requests per --judge-deadline a call that carries or returns every line of a batch gets
_LINES_PER_DEADLINE = 10_000


def _bound(job: Job, lines: int = 0) -> float:
    """The wall-clock bound of one batch call: --judge-deadline, once more for each further
    10 000 requests the call carries or returns (an upload, a results download)."""
    return job.judge.settings.deadline_s * max(1, math.ceil(lines / _LINES_PER_DEADLINE))


async def _bounded(job: Job, call: Awaitable[T], lines: int = 0) -> T:
    bound = _bound(job, lines)
    try:
        return await asyncio.wait_for(call, bound)
    except asyncio.TimeoutError:
        raise _Overdue(f"no full answer within {bound:g}s (--judge-deadline)") from None


async def submit(job: Job) -> object:
    """Create the batch; its id is taken, nothing else (the caller records the id before
    the rest of the provider's answer is read). Returns that answer."""
    from ._llm import OpenAIJudge

    judge = job.judge
    data = _jsonl(judge, job.lines)
    batch: object
    if isinstance(judge, OpenAIJudge):
        client = judge.conn.client()
        # the SDK may retry the upload: a second copy of the file is not billed
        uploaded = await _bounded(
            job,
            client.files.create(
                file=("agenteval-batch.jsonl", data, "application/jsonl"), purpose="batch"
            ),
            job.total,
        )
        job.input_file_id = uploaded.id
        created = getattr(uploaded, "created_at", None)
        job.input_file_created_at = created if type(created) is int else None
        job.create_attempted_at = _now()
        # never retried: neither SDK sends an idempotency key, so a retry after a lost
        # answer would create (and bill) a second batch
        batch = await _bounded(
            job,
            client.with_options(max_retries=0).batches.create(
                input_file_id=uploaded.id,
                endpoint=OPENAI_ENDPOINT,
                completion_window="24h",
                metadata={
                    "agenteval_run": str(job.recorder.run_id)[:64],
                    "family": job.family[:500],
                },
            ),
        )
    else:
        # each line's params are the request's own fields (checked by the API, not here)
        create: Callable[..., Awaitable[MessageBatch]] = (
            judge.conn.client().with_options(max_retries=0).messages.batches.create
        )
        job.create_attempted_at = _now()
        batch = await _bounded(
            job,
            create(
                requests=[{"custom_id": line.custom_id, "params": line.body} for line in job.lines]
            ),
            job.total,
        )
    batch_id = getattr(batch, "id", None)
    if isinstance(batch_id, str) and batch_id:
        job.batch_id, job.status, job.submitted_at = batch_id, "submitted", _now()
    return batch


def _request_count(counts: object, name: str) -> int | None:
    """One of the provider's request counts; None (unknown) unless a whole number >= 0:
    the SDKs do not validate what the server sent."""
    value = getattr(counts, name, None)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _note(job: Job, batch: object) -> None:
    """Take the provider's view of the batch: its state and counts."""
    job.batch = batch
    counts = getattr(batch, "request_counts", None)
    if job.judge.provider == "openai":
        job.status = str(getattr(batch, "status", ""))
        completed, failed = _request_count(counts, "completed"), _request_count(counts, "failed")
        job.done = None if completed is None or failed is None else completed + failed
        job.failed = failed
    else:
        job.status = str(getattr(batch, "processing_status", ""))
        processing = _request_count(counts, "processing")
        if job.status == "ended":
            job.done = job.total
        else:
            job.done = None if processing is None else max(0, job.total - processing)
        ended = [_request_count(counts, name) for name in ("errored", "canceled", "expired")]
        job.failed = None if None in ended else sum(n or 0 for n in ended)


async def refresh(job: Job) -> None:
    assert job.batch_id is not None, "a batch is refreshed once submitted or resumed"
    _note(job, await _retrieve(job.judge, job.batch_id))


async def _retrieve(judge: BatchJudge, batch_id: str) -> object:
    """The provider's batch object of *batch_id*."""
    from ._llm import OpenAIJudge

    if isinstance(judge, OpenAIJudge):
        return await judge.conn.client().batches.retrieve(batch_id)
    return await judge.conn.client().messages.batches.retrieve(batch_id)


# --------------------------------------------------------------------------- results


def _problem_error(message: str, details: JSONObject) -> LLMJudgeError:
    from ._llm import LLMJudgeError

    return LLMJudgeError(message, details)


def _provider_text(body: object) -> str:
    """The provider's ``error.message`` of a failed line, redacted and clipped."""
    from .._providers import provider_message

    return provider_message(body)


def _details(job: Job, line: Line) -> JSONObject:
    judge = job.judge
    details = judge._base_details(
        line.prompt, line.rendered, line.nonce, line.repetition, line.sampling
    )
    details["structured"] = line.mode
    details["attempts"] = 1
    details["http_statuses"] = []
    details["latency_s"] = round(time.monotonic() - job.started, 3)
    details["batch"] = {
        "provider_batch_id": job.batch_id,
        "custom_id": line.custom_id,
        "price_factor": PRICE_FACTOR,
        "submitted_at": job.submitted_at,
        "status": job.status,
        "usage": {"prompt_tokens": 0, "completion_tokens": 0},
        **({"resumed_from": job.resumed_from} if job.resumed_from else {}),
    }
    if judge.settings.cache_mode != "off" and judge.settings.cache_dir is not None:
        details["cache_key"] = line.key
        details["cache_authenticated"] = judge.cache_authenticated
        details["cache_status"] = "miss"
    return details


def _usage(details: JSONObject, prompt: int, completion: int) -> None:
    details["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion}
    batch = details["batch"]
    if isinstance(batch, dict):
        batch["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion}


@dataclass
class _Reask:
    """A line whose output broke the contract: it gets its one re-ask live."""

    job: Job
    line: Line
    reply: _Reply
    problem: _Problem
    details: JSONObject


def _held_to_contract(job: Job, line: Line, reply: _Reply, details: JSONObject) -> Grade | _Reask:
    """The grade of a reply, or a :class:`_Reask` when it breaks the contract."""
    from ._llm import _loads_strict, _make_grade, _Problem, _validate

    details["model_returned"] = reply.model
    details["finish_reason"] = reply.finish
    details["raw_response"] = reply.raw
    try:
        value = reply.tool_input if reply.has_tool else _loads_strict(reply.text)
        parsed, mismatched = _validate(value, line.criteria)
    except _Problem as problem:
        return _Reask(job, line, reply, problem, details)
    details["parsed"] = parsed
    if mismatched:
        details["criteria_text_mismatch"] = [*mismatched]
    return _make_grade(parsed, line.criteria, job.judge.name, details)


def openai_outcome(job: Job, line: Line, obj: object) -> Outcome | _Reask:
    """One line of OpenAI's output or error file -> a Grade, an LLMJudgeError or a re-ask."""
    from .._providers import token_usage
    from ._llm import TOOL_NAME, OpenAIJudge, _Failure

    judge = job.judge
    assert isinstance(judge, OpenAIJudge), "an OpenAI batch's line"
    details = _details(job, line)
    response = obj.get("response") if isinstance(obj, Mapping) else None
    if not isinstance(response, Mapping):
        error = obj.get("error") if isinstance(obj, Mapping) else None
        code = error.get("code") if isinstance(error, Mapping) else None
        why = (
            "the batch expired before it was answered (24 h)"
            if code == "batch_expired"
            else (f"no answer ({code or 'unknown error'})")
        )
        return _problem_error(f"judge batch {job.batch_id}: {why}", details)
    status = response.get("status_code")
    body = response.get("body")
    if status != 200 or not isinstance(body, Mapping):
        detail = _provider_text(body)
        return _problem_error(
            f"judge batch request failed ({status})" + (f": {detail}" if detail else ""), details
        )
    import openai

    try:  # the body held to the SDK's model: a batch line is read once, strictly
        resp = openai.types.chat.ChatCompletion.model_validate(dict(body))
    except ValueError:
        return _problem_error("judge batch line unreadable (not a chat completion)", details)
    p, c = token_usage(judge.conn.provider, resp.usage)  # the model's counts: "34" reads 34
    _usage(details, p, c)
    try:
        reply = judge._reply(dict(body), line.mode, TOOL_NAME)
    except _Failure as failure:
        return _problem_error(str(failure), details)
    return _held_to_contract(job, line, reply, details)


def anthropic_outcome(job: Job, line: Line, raw: str) -> Outcome | _Reask:
    """One line of Anthropic's results -> a Grade, an LLMJudgeError or a re-ask."""
    from .._providers import token_usage
    from ._llm import _DECODER, TOOL_NAME, AnthropicJudge, _Failure

    judge = job.judge
    assert isinstance(judge, AnthropicJudge), "an Anthropic batch's line"
    details = _details(job, line)
    obj = json.loads(raw)
    result = obj.get("result") if isinstance(obj, Mapping) else None
    kind = result.get("type") if isinstance(result, Mapping) else None
    if kind != "succeeded" or not isinstance(result, Mapping):
        if kind == "expired":
            why = "the batch expired before this request was answered (24 h)"
        elif kind == "canceled":
            why = "the batch was canceled before this request was answered"
        else:
            detail = _provider_text(result.get("error") if isinstance(result, Mapping) else None)
            why = "request failed" + (f": {detail}" if detail else "")
        return _problem_error(f"judge batch {job.batch_id}: {why}", details)
    import anthropic

    message = result.get("message")
    try:  # the message held to the SDK's model: a batch line is read once, strictly
        msg = anthropic.types.Message.model_validate(message)
    except ValueError:
        return _problem_error("judge batch line unreadable (not a message)", details)
    p, c = token_usage(judge.conn.provider, msg.usage)  # the model's counts: "34" reads 34
    _usage(details, p, c)
    try:  # the tool input read strictly from the line, as a live grade reads its body
        reply = judge.message_reply(
            message, line.mode, TOOL_NAME, lambda: _DECODER.decode(raw)["result"]["message"]
        )
    except _Failure as failure:
        return _problem_error(str(failure), details)
    return _held_to_contract(job, line, reply, details)


async def _read_file(client: AsyncOpenAI, file_id: str | None) -> list[str]:
    if not file_id:
        return []
    content = await client.files.content(file_id)
    data = content.content if hasattr(content, "content") else await content.aread()
    return [ln for ln in bytes(data).decode("utf-8", "replace").splitlines() if ln.strip()]


class _BrokenOff(AgentevalError):
    """The download of a batch's results broke off (not an SDK error: the stream is read raw)."""


def _gone_status(job: Job, exc: BaseException) -> int | None:
    """404 or 410 when *exc* says the provider no longer has what was asked for, else None."""
    status = job.judge.conn.classify(exc, 1).status
    return status if status in (404, 410) else None


def _lose(job: Job, why: str) -> None:
    """The batch's results cannot be had any more: its lines without one are item errors,
    and batch.json says so, so that no later run resumes it only to fail the same way."""
    job.lost = why if job.lost is None else f"{job.lost}; {why}"


async def collect(job: Job) -> dict[str, Outcome | _Reask]:
    """custom_id -> outcome (Grade, LLMJudgeError or _Reask) for every line of an ended batch.

    Results the provider no longer has (404, 410) make the lines without one item errors;
    any other failure to download them is raised (the run stops, resumable)."""
    from ._llm import OpenAIJudge

    by_id = {line.custom_id: line for line in job.lines}
    out: dict[str, Outcome | _Reask] = {}
    seen: dict[str, object] = {}  # custom_id -> its first line, parsed
    unreadable = 0
    judge = job.judge
    if job.lost is not None:
        pass  # nothing left to download
    elif isinstance(judge, OpenAIJudge):
        client = judge.conn.client()
        raws: list[str] = []
        for what in ("output", "error"):
            file_id = getattr(job.batch, f"{what}_file_id", None)
            try:
                raws += await _read_file(client, file_id)
            except judge.conn.api_error as exc:
                status = _gone_status(job, exc)
                if status is None:
                    raise
                _lose(job, f"its {what} file {file_id} is no longer at the provider ({status})")
        for raw in raws:
            try:
                obj = json.loads(raw)
            except (ValueError, RecursionError):
                unreadable += 1
                continue
            if not isinstance(obj, dict):
                unreadable += 1
                continue
            line = by_id.get(str(obj.get("custom_id")))
            if line is not None and _first(job, line, out, seen, obj):
                out[line.custom_id] = openai_outcome(job, line, obj)
    else:
        unreadable = await _anthropic_results(job, by_id, out, seen)
    why = _batch_failure(job) or "no result for this request"
    if job.lost is not None:
        why = f"{job.lost}; the batch is not resumed: running again submits a new one"
    if unreadable:
        why += f"; {unreadable} line(s) of the batch's results could not be read"
    for line in job.lines:
        if line.custom_id not in out:
            out[line.custom_id] = _problem_error(
                f"judge batch {job.batch_id}: {why} (batch {job.status})", _details(job, line)
            )
    return out


async def _anthropic_results(
    job: Job, by_id: dict[str, Line], out: dict[str, Outcome | _Reask], seen: dict[str, object]
) -> int:
    """Read an ended Anthropic batch's results into *out*; how many lines could not be read."""
    import anthropic

    from ._llm import AnthropicJudge

    judge = job.judge
    assert isinstance(judge, AnthropicJudge) and job.batch_id is not None, "an ended batch"
    unreadable = 0
    try:
        results = await judge.conn.client().messages.batches.results(job.batch_id)
    except judge.conn.api_error as exc:
        status = _gone_status(job, exc)
        if status is None:
            raise
        _lose(job, f"its results are no longer at the provider ({status})")
        return 0
    except anthropic.AnthropicError:  # the SDK's own check: the batch names no results URL
        _lose(job, "the provider names no results for it")
        return 0
    response = getattr(results, "http_response", None)
    try:  # the SDK reads this stream; what breaks it is the HTTP library's error, not the SDK's
        if response is None:  # an SDK without the raw response: its (lenient) parse
            async for entry in results:
                unreadable += _take_anthropic(job, by_id, out, seen, entry.to_json().encode())
        else:  # the raw lines, so that the tool input can be read strictly
            buffer = b""
            async for chunk in response.aiter_bytes():
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for raw in complete:
                    unreadable += _take_anthropic(job, by_id, out, seen, raw)
            unreadable += _take_anthropic(job, by_id, out, seen, buffer)
    except _http_errors(response) as exc:
        raise _BrokenOff(f"the download broke off ({type(exc).__name__})") from None
    return unreadable


def _http_errors(response: object) -> tuple[type[BaseException], ...]:
    """The base error of the HTTP library *response* comes from (httpx; httpx2 in newer SDKs)."""
    import importlib

    if response is None:
        return ()
    module = importlib.import_module(type(response).__module__.split(".")[0])
    error = getattr(module, "HTTPError", None)
    return (error,) if isinstance(error, type) and issubclass(error, Exception) else ()


def _first(
    job: Job, line: Line, out: dict[str, Outcome | _Reask], seen: dict[str, object], obj: object
) -> bool:
    """Whether *obj* is the first result for *line*. A second one that differs makes the
    request's grade an error: which of the two is the provider's answer cannot be told."""
    first = seen.setdefault(line.custom_id, obj)
    if first is obj:
        return True
    if first != obj:
        out[line.custom_id] = _problem_error(
            f"judge batch {job.batch_id}: the results hold two different answers to this "
            "request; neither is used",
            _details(job, line),
        )
    return False


def _take_anthropic(
    job: Job,
    by_id: dict[str, Line],
    out: dict[str, Outcome | _Reask],
    seen: dict[str, object],
    raw: bytes,
) -> int:
    """Take one line of Anthropic's results; 1 when it cannot be read, else 0."""
    text = raw.decode("utf-8", "replace").strip()
    if not text:
        return 0
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return 1
    if not isinstance(obj, dict):
        return 1
    line = by_id.get(str(obj.get("custom_id")))
    if line is not None and _first(job, line, out, seen, obj):
        out[line.custom_id] = anthropic_outcome(job, line, text)
    return 0


def _batch_failure(job: Job) -> str:
    batch = job.batch
    errors = getattr(getattr(batch, "errors", None), "data", None) or []
    messages = [str(getattr(e, "message", "") or "") for e in errors]
    from ..evidence._redact import Redactor
    from ._injection import snippet

    text = "; ".join(m for m in messages if m)
    if text:
        return "the batch failed: " + snippet(Redactor.from_environ().text(text), 200)
    if job.status == "expired":
        return "the batch expired before this request was answered (24 h)"
    if job.status in ("cancelled", "canceled"):
        return "the batch was cancelled before this request was answered"
    if job.status == "failed":
        return "the batch failed"
    return ""


async def reask(item: _Reask) -> Outcome:
    """The one re-ask of an invalid batch answer, made live (full price), as a live grade would."""
    from ._llm import (
        GRADE_CONTRACT,
        _CallState,
        _Failure,
        _loads_strict,
        _make_grade,
        _Problem,
        _validate,
        grade_schema,
    )

    job, line, details = item.job, item.line, item.details
    judge = job.judge
    details["reasks"] = 1
    details["first_response"] = {"raw_response": item.reply.raw, "problem": item.problem.text}
    contract = dataclasses.replace(GRADE_CONTRACT, schema=grade_schema(len(line.criteria)))
    state = _CallState(sampling=line.sampling, contract=contract)
    messages: list[JSONObject] = [
        {"role": "user", "content": line.rendered.user},
        *judge._reask_turns(item.reply, item.problem, len(line.criteria)),
    ]
    batch_usage = details["usage"]
    from .._providers import track

    judge.conn.client()
    reply = None
    error: str | None = None
    try:
        with track(state):
            reply = await asyncio.wait_for(
                judge._complete(line.prompt.text, messages, state, details),
                judge.settings.deadline_s,
            )
    except _Failure as failure:
        error = str(failure)
    except asyncio.TimeoutError:
        error = f"judge timeout after {judge.settings.deadline_s:g}s"
    details["usage"] = {
        "prompt_tokens": _count(batch_usage, "prompt_tokens") + state.prompt_tokens,
        "completion_tokens": _count(batch_usage, "completion_tokens") + state.completion_tokens,
    }
    details["reask_live"] = {"attempts": state.attempts, "http_statuses": [*state.statuses]}
    if error is not None or reply is None:
        return _problem_error(str(error), details)
    details["model_returned"] = reply.model
    details["finish_reason"] = reply.finish
    details["raw_response"] = reply.raw
    try:
        value = reply.tool_input if reply.has_tool else _loads_strict(reply.text)
        parsed, mismatched = _validate(value, line.criteria)
    except _Problem as problem:
        details["problem"] = problem.text
        return _problem_error(problem.message(), details)
    details["parsed"] = parsed
    if mismatched:
        details["criteria_text_mismatch"] = [*mismatched]
    return _make_grade(parsed, line.criteria, judge.name, details)


def _count(usage: JSONValue, key: str) -> int:
    """A token count of a usage mapping this module wrote."""
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) else 0


# --------------------------------------------------------------------------- one run at a time

#: A hidden file in the folder of a family's calibration runs by these judges, locked while
#: a run judges in batches there: a second run at the same time could take over the batch
#: the first is collecting, and both would count its cost and call its grades theirs
LOCK_FILE = ".agenteval-batch.lock"


def _lock(fd: int) -> bool:
    """Lock *fd* without waiting: False while another process holds it. Raises OSError
    where the file system has no locks."""
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError as exc:  # the C runtime's errno: EACCES while another holds it
            if exc.errno in (errno.EACCES, errno.EDEADLOCK):
                return False
            raise
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def hold_folder(state: AgentevalState, folder: Path) -> str | None:
    """Hold *folder*'s batch lock until this pytest run ends (or its process dies): None
    once held, else who holds it. A file system without locks is said, and not held."""
    path = folder / LOCK_FILE  # folder holds this run's directory: it exists
    flags = os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        try:
            fd = os.open(path, os.O_RDWR | flags, 0o644)
        except PermissionError:  # another user's lock file: a lock needs no writing
            fd = os.open(path, os.O_RDONLY | flags)
    except OSError as exc:
        raise pytest.UsageError(
            f"agenteval: batch judging: cannot open the lock {path}: {exc.strerror or exc}"
        ) from None
    state.config.add_cleanup(lambda: os.close(fd))
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:  # a FIFO, a hard link
        raise pytest.UsageError(
            f"agenteval: batch judging: {path} is not a lock file of its own (a FIFO, a "
            "device, or a link to another file): remove it"
        )
    try:
        held = _lock(fd)
    except OSError as exc:
        _say(
            state,
            f"agenteval: batch judging: {_shown(state, folder)} cannot be locked "
            f"({exc.strerror or exc}): a second run there at the same time could take over "
            "this run's batch",
        )
        return None
    if not held:
        try:
            written = os.read(fd, 32).decode("ascii", "replace").strip()
        except OSError:  # Windows: the holder's lock covers what it wrote
            written = ""
        return f"process {written}" if written.isdigit() else "another process"
    with contextlib.suppress(OSError):  # opened read-only: the holder goes unnamed
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
    return None


# --------------------------------------------------------------------------- resuming


def _read_batch_json(run_dir: Path) -> JSONObject | None:
    path = run_dir / BATCH_FILE
    try:
        if not path.is_file() or path.is_symlink() or path.stat().st_size > _BATCH_JSON_LIMIT:
            return None
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("schema") == SCHEMA else None


def _earlier(job: Job, own_run_dir: Path) -> Iterator[tuple[Path, JSONObject]]:
    """The earlier runs' batch.json entries of this family, judge, part and requests (by
    fingerprint), newest run first."""
    from ..evidence._run_dir import newest_first

    siblings = [p for p in own_run_dir.parent.iterdir() if p.is_dir() and p != own_run_dir]
    for run_dir in newest_first(siblings):
        data = _read_batch_json(run_dir)
        batches = None if data is None else data.get("batches")
        if not isinstance(batches, list):
            continue
        for entry in batches:
            if (
                isinstance(entry, dict)
                and entry.get("fingerprint") == job.fingerprint
                and entry.get("judge") == job.judge.name
                and entry.get("part") == job.part
                and isinstance(entry.get("lines"), dict)
            ):
                yield run_dir, entry
                break


def find_resumable(job: Job, own_run_dir: Path) -> tuple[Path, JSONObject] | None:
    """An earlier run of this family and judges whose batch holds these requests and whose
    grades no complete run has used: intact (it verifies) and incomplete; the newest such."""
    from ..evidence._chain import verify_run

    pending: list[tuple[Path, JSONObject]] = []
    used: set[str] = set()  # batches whose grades a complete run has used
    for run_dir, entry in _earlier(job, own_run_dir):
        if not isinstance(entry.get("batch_id"), str):
            continue
        verdict = verify_run(run_dir)  # a run that does not verify is not trusted either way
        if verdict.ok and verdict.complete:
            used.add(str(entry["batch_id"]))
        elif verdict.ok:
            pending.append((run_dir, entry))
    # a new run after a complete one is a new measurement: its batch is not collected twice
    return next(((d, e) for d, e in pending if str(e["batch_id"]) not in used), None)


def find_unconfirmed(job: Job, own_run_dir: Path) -> tuple[Path, JSONObject] | None:
    """The newest earlier run, intact and incomplete, whose call creating the batch of
    these requests failed after it was sent (``create_unconfirmed``), with the input file it
    recorded (OpenAI's: the only provider whose batches say what they were made from); None
    once a later run of these requests holds a batch: that run looked the batch up already
    (and took it over, or found none and submitted one), so it is not listed for again."""
    from ..evidence._chain import verify_run

    if job.judge.provider != "openai":
        return None
    for run_dir, entry in _earlier(job, own_run_dir):
        if isinstance(entry.get("batch_id"), str):
            return None
        if entry.get("status") == "create_unconfirmed" and isinstance(
            entry.get("input_file_id"), str
        ):
            verdict = verify_run(run_dir)
            if verdict.ok and not verdict.complete:
                return run_dir, entry
    return None


#: A look-up lists the provider's batches back to the input file's upload (the provider's
#: clock), less this slack; back to an hour before the create attempt when the upload time
#: is unknown (this machine's clock, which may differ)
_UPLOAD_SLACK_S = 300
_CLOCK_SLACK_S = 3600.0
#: Pages of 100 batches a look-up reads at most
_LOOK_UP_PAGES = 50
#: Statuses of a listing by which a server says it lists no batches
_NO_LISTING = frozenset({404, 405, 501})


async def look_up(job: Job, entry: JSONObject) -> tuple[object | None, str | None]:
    """The batch at the provider made from *entry*'s input file (a file one run uploaded,
    so no other batch is made from it): ``(batch, None)``; ``(None, None)`` when the
    provider holds none; ``(None, why)`` when the listing cannot tell. OpenAI lists batches
    newest first: the look-up stops at those created before the upload. Each page is
    bounded by --judge-deadline; at most :data:`_LOOK_UP_PAGES` pages."""
    from ..evidence._chain import parse_rfc3339
    from ._llm import OpenAIJudge

    judge = job.judge
    assert isinstance(judge, OpenAIJudge), "only OpenAI's batches name their input file"
    file_id = entry.get("input_file_id")
    since: float | None = None
    uploaded = entry.get("input_file_created_at")
    attempted = entry.get("create_attempted_at")
    if type(uploaded) is int:
        since = uploaded - _UPLOAD_SLACK_S
    elif (when := parse_rfc3339(attempted)) is not None:
        with contextlib.suppress(ValueError, OverflowError):
            since = when.timestamp() - _CLOCK_SLACK_S
    client = judge.conn.client()
    after: str | None = None
    for _ in range(_LOOK_UP_PAGES):
        listing = (
            client.batches.list(limit=100)
            if after is None
            else client.batches.list(limit=100, after=after)
        )
        page = await _bounded(job, listing)
        batches = list(getattr(page, "data", None) or [])
        for batch in batches:
            if getattr(batch, "input_file_id", None) == file_id:
                batch_id = getattr(batch, "id", None)
                if isinstance(batch_id, str) and batch_id:
                    return batch, None
                return None, "it lists a batch made from that file without an id"
            created = getattr(batch, "created_at", None)
            if (
                since is not None
                and isinstance(created, (int, float))
                and not isinstance(created, bool)
                and created < since
            ):
                return None, None
        last = getattr(batches[-1], "id", None) if batches else None
        if not batches or getattr(page, "has_more", None) is False:
            return None, None
        if not isinstance(last, str) or last == after:
            return None, "its listing does not move on from one page to the next"
        after = last
    return None, f"it lists more than {100 * _LOOK_UP_PAGES} batches since the attempt"


async def resume(job: Job, run_dir: Path, entry: JSONObject) -> str | None:
    """Take over the batch of an earlier run; a reason when it cannot be (then it is not)."""
    from ._llm import OpenAIJudge

    lost = entry.get("lost")
    if isinstance(lost, str):
        return f"batch {entry['batch_id']}: {lost}"
    stored = entry.get("lines")
    if not isinstance(stored, dict):
        return "no lines recorded"
    renewed = []
    for line in job.lines:
        recorded = stored.get(line.custom_id)
        nonce = recorded.get("nonce") if isinstance(recorded, dict) else None
        if not isinstance(recorded, dict) or not isinstance(nonce, str):
            return f"line {line.custom_id} differs"
        if recorded.get("key") != line.key:
            return f"line {line.custom_id} differs"
        renewed.append(make_line(job.judge, line.custom_id, line.nodeid, line.request, nonce))
    data = _jsonl(job.judge, renewed)
    if hashlib.sha256(data).hexdigest() != entry.get("input_sha256"):
        return "the requests this run would send differ from those submitted"
    judge = job.judge
    batch_id = str(entry["batch_id"])
    # a 404 here is what the provider no longer has (this endpoint had the batch API):
    # not resumed, saying so; any other failure is raised
    file_id: str | None = None  # OpenAI's: the batch was made from it
    if isinstance(judge, OpenAIJudge):
        recorded = entry.get("input_file_id")
        if not isinstance(recorded, str):
            return "no input file recorded"
        file_id = recorded
        try:
            content = await judge.conn.client().files.content(file_id)
        except judge.conn.api_error as exc:
            if (status := _gone_status(job, exc)) is None:
                raise
            return (
                f"its input file {file_id} is no longer at the provider ({status}), so "
                f"that batch {batch_id} holds these requests cannot be checked"
            )
        sent = content.content if hasattr(content, "content") else await content.aread()
        if hashlib.sha256(bytes(sent)).hexdigest() != hashlib.sha256(data).hexdigest():
            return "the provider's input file is not the requests this run would send"
    try:
        batch = await _retrieve(judge, batch_id)
    except judge.conn.api_error as exc:
        if (status := _gone_status(job, exc)) is None:
            raise
        return f"batch {batch_id} is no longer at the provider ({status})"
    if file_id is not None:
        if getattr(batch, "input_file_id", None) != file_id:
            return f"batch {batch_id} was not made from the recorded input file"
        job.input_file_id = file_id
    job.lines = renewed
    job.batch_id = batch_id
    submitted = entry.get("submitted_at")
    job.submitted_at = submitted if isinstance(submitted, str) else None
    run_id = (_read_batch_json(run_dir) or {}).get("run_id")
    job.resumed_from = {"run_dir": run_dir.name, "run_id": run_id, "batch_id": job.batch_id}
    _note(job, batch)
    return None


# --------------------------------------------------------------------------- the phase


def _calibration_items(session: pytest.Session) -> list[CalibrationItem]:
    from .._golden_items import CalibrationItem, SkippedEntry

    return [
        i
        for i in session.items
        if isinstance(i, CalibrationItem) and not isinstance(i, SkippedEntry)
    ]


def _jobs(state: AgentevalState, items: Sequence[CalibrationItem]) -> list[Job]:
    judges = state.judges()
    subject = "calibration-" + "+".join(getattr(j, "name", "judge") for j in judges)
    by_family: dict[str, list[CalibrationItem]] = {}
    for item in items:
        by_family.setdefault(str(item.family.root), []).append(item)
    jobs: list[Job] = []
    for root, family_items in by_family.items():
        # --judge-batch is refused under xdist: this serial run aggregates too
        aggregator = state.aggregator
        recorder = (
            None if aggregator is None else aggregator.calibration_bucket(root, subject).recorder
        )
        if recorder is None:
            raise RuntimeError(f"--judge-batch: no run directory for {root}")
        for k, judge in enumerate(judges):
            if not _batchable(judge):
                continue
            lines: list[Line] = []

            async def ask_all(
                judge: BatchJudge = judge, todo: list[CalibrationItem] = family_items
            ) -> list[GradeRequest | None]:
                out: list[GradeRequest | None] = []
                for item in todo:
                    try:
                        request = item.grade_request()
                    except Exception:  # e.g. no rubric: the item errors at its setup, as live
                        out.append(None)
                        continue
                    out.append(await asked(judge, request))
                return out

            for n, (item, request) in enumerate(
                zip(family_items, state.scheduler.run_coro(ask_all()), strict=True)
            ):
                if request is None:
                    continue  # every criterion has a check: the judge is not called
                line = make_line(
                    judge, f"agenteval-{n}", item.nodeid, request, secrets.token_hex(8)
                )
                if judge.settings.cache_mode in ("read", "readwrite") and judge.settings.cache_dir:
                    hit, _ = judge._cache_read(line.key, line.criteria)
                    if hit is not None:
                        continue  # graded from the cache at the item, as live
                lines.append(line)
            size = MAX_LINES[judge.provider]
            for part, start in enumerate(range(0, len(lines), size)):
                jobs.append(
                    Job(
                        family_items[0].family.name,
                        root,
                        k,
                        judge,
                        lines[start : start + size],
                        recorder,
                        part=part,
                    )
                )
    return jobs


def _say(state: AgentevalState, text: str) -> None:
    from .._text import terminal_safe

    reporter = state.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(terminal_safe(state.redactor.text(text)))


def _shown(state: AgentevalState, path: Path) -> str:
    """*path* relative to where pytest was started, as the run directory is shown."""
    try:
        return path.relative_to(Path(state.config.invocation_params.dir)).as_posix()
    except ValueError:
        return str(path)


def _save(jobs: Sequence[Job]) -> None:
    by_recorder: dict[int, list[Job]] = {}
    for job in jobs:
        by_recorder.setdefault(id(job.recorder), []).append(job)
    for group in by_recorder.values():
        write_batch_json(group[0].recorder, group)


def _show(progress: Progress | None, jobs: Sequence[Job]) -> None:
    if progress is None:
        return
    judges = ", ".join(dict.fromkeys(job.judge.name for job in jobs))
    states = ", ".join(dict.fromkeys(job.status for job in jobs))
    plural = "es" if len(jobs) > 1 else ""
    progress.set_batch(
        f"batch{plural} of {judges}: {states}",
        sum(job.done or 0 for job in jobs),
        sum(job.total for job in jobs),
    )


def _sdk_error(state: AgentevalState, job: Job, exc: BaseException) -> BaseException:
    """An SDK error of a batch call: a configuration error stops the run; others are text."""
    from ._llm import JudgeConfigError

    failure = job.judge.conn.classify(exc, 1)
    # a server without the batch endpoints, not a lost model (the callers that ask for a
    # batch or file known to exist read a 404 as that one being gone, before this)
    if failure.status in (404, 405):
        state.stop_reason = "configuration error: no batch API"
        return pytest.exit.Exception(
            f"agenteval configuration error: --judge-batch: judge {job.judge.name}: the server "
            f"at {job.judge.base_url_host} has no batch API ({failure.status} on a batch "
            "endpoint); batch judging needs OpenAI's or Anthropic's API, or a server that "
            "implements it",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    translated = job.judge._error(failure)
    if isinstance(translated, JudgeConfigError):
        state.stop_reason = f"configuration error: {translated}"
        return pytest.exit.Exception(
            f"agenteval configuration error: {translated}", returncode=pytest.ExitCode.USAGE_ERROR
        )
    return RuntimeError(str(translated))


def _stop(
    state: AgentevalState, job: Job, exc: BaseException, failed: str, then: str
) -> BaseException:
    """What stops the run when *failed* (what the batch path was doing) raised *exc*: a
    configuration error as such, else a resumable interruption saying what to do *then*."""
    ours = isinstance(exc, (_BrokenOff, _Overdue))
    error = exc if ours else _sdk_error(state, job, exc)
    if isinstance(error, pytest.exit.Exception):
        return error
    return pytest.Session.Interrupted(f"agenteval: batch judging: {failed} failed: {error}; {then}")


#: Failures of the create call after which the provider may hold the batch anyway: it was
#: sent, and its answer was lost (a timeout, a dropped connection), a server error, or an
#: answer the SDK could not read
_MAYBE_CREATED = frozenset({"timeout", "connection", "server", "client"})


def _unconfirmed(job: Job) -> str:
    """Why the run stops when a batch may have been created without this run knowing its id."""
    judge = job.judge
    head = (
        f"agenteval: batch judging: creating the batch of {judge.name} failed after it was "
        f"sent ({job.create_error}): the provider may have created it anyway, and would bill "
        "it. It was not submitted again (batch.json records the attempt)"
    )
    if judge.provider == "openai":
        return (
            f"{head}; running the same command again looks for it at {judge.base_url_host} "
            f"(the batch made from input file {job.input_file_id}, with metadata "
            f"agenteval_run={str(job.recorder.run_id)[:64]}) and collects it if it is there, "
            "or submits a new one"
        )
    return (
        f"{head}. Look at {judge.base_url_host} for a batch of {job.total} requests created at "
        f"about {job.create_attempted_at}, and cancel it there if it exists: running the same "
        "command again submits a new batch (Anthropic's batches carry nothing to find it by)"
    )


def _adopt_unconfirmed(
    state: AgentevalState,
    job: Job,
    jobs: Sequence[Job],
    failures: tuple[type[BaseException], ...],
) -> bool:
    """When an earlier run's call creating the batch of these requests failed after it was
    sent, the provider may hold that batch: look it up by its input file and resume it if
    it is there (True), rather than pay for a second one."""
    found = find_unconfirmed(job, job.recorder.run_dir)
    if found is None:
        return False
    run_dir, entry = found
    judge, file_id = job.judge, entry.get("input_file_id")
    scheduler = state.scheduler
    earlier = (
        f"agenteval: batch judging: the earlier run {run_dir.name} could not confirm creating "
        f"the batch of {judge.name}"
    )
    try:
        batch, undetermined = scheduler.run_coro(look_up(job, entry))
        if undetermined is not None:
            _save([j for j in jobs if j.batch_id is not None])
            raise pytest.Session.Interrupted(
                f"{earlier}, and whether {judge.base_url_host} holds it cannot be told: "
                f"{undetermined}. Nothing was submitted. Look there for the batch made from "
                f"input file {file_id} (cancel it if it exists), then move {run_dir.name} "
                "aside: the next run submits a new batch"
            )
        if batch is None:
            _say(
                state,
                f"{earlier}; {judge.base_url_host} holds no batch made from its input file "
                f"{file_id}: submitting one",
            )
            return False
        batch_id = str(getattr(batch, "id", ""))
        problem = scheduler.run_coro(
            _bounded(job, resume(job, run_dir, {**entry, "batch_id": batch_id}), job.total)
        )
    except failures as exc:
        status = None if isinstance(exc, _Overdue) else job.judge.conn.classify(exc, 1).status
        if status in _NO_LISTING:
            _say(
                state,
                f"{earlier}, and {judge.base_url_host} lists no batches to look it up "
                f"({status}): submitting one",
            )
            return False
        _save([j for j in jobs if j.batch_id is not None])
        raise _stop(
            state,
            job,
            exc,
            f"looking up the batch of {judge.name} that the earlier run {run_dir.name} may "
            "have created",
            "no new batch was submitted for it: run the same command again to look again",
        ) from None
    if problem is not None:
        _say(state, f"agenteval: batch judging: not resuming {run_dir.name}: {problem}")
        return False
    _say(
        state,
        f"agenteval: batch judging: resuming batch {job.batch_id} of {judge.name} "
        f"({job.total} requests), which the earlier run {run_dir.name} created without "
        f"learning its id (found by its input file {file_id})",
    )
    return True


def run_batch_phase(
    state: AgentevalState, session: pytest.Session, progress: Progress | None
) -> None:
    """Grade every calibration item's LLM judges through batches, before the test loop."""
    options = batch_options(state.config)
    if not options.enabled or state.is_worker or session.config.option.collectonly:
        return
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        return  # pytest stops on the collection errors: nothing is submitted
    items = _calibration_items(session)
    if not items:
        return
    jobs = [job for job in _jobs(state, items) if job.lines]
    if not jobs:
        return
    for folder in dict.fromkeys(job.recorder.run_dir.parent for job in jobs):
        holder = hold_folder(state, folder)
        if holder is not None:
            raise session.Interrupted(
                f"agenteval: batch judging: another run ({holder}) judges in batches in "
                f"{_shown(state, folder)} now, and could be collecting the batch this run "
                "would take over. Nothing was submitted: run the same command again once "
                "it has ended"
            )
    scheduler = state.scheduler
    sdk_errors: tuple[type[BaseException], ...] = ()
    for job in jobs:
        sdk_errors += (job.judge.conn.api_error,)
        failures: tuple[type[BaseException], ...] = (_Overdue, *sdk_errors)
        found = find_resumable(job, job.recorder.run_dir)
        problem: str | None = "no earlier run holds it"
        if found is not None:
            run_dir, entry = found
            try:
                problem = scheduler.run_coro(_bounded(job, resume(job, run_dir, entry), job.total))
            except failures as exc:
                # the earlier batch may be fine: a new one now could pay for it twice
                _save([j for j in jobs if j.batch_id is not None])
                raise _stop(
                    state,
                    job,
                    exc,
                    f"checking the batch of {job.judge.name} in the earlier run {run_dir.name}",
                    "no new batch was submitted for it: run the same command again to resume it",
                ) from None
            if problem is None:
                _say(
                    state,
                    f"agenteval: batch judging: resuming batch {job.batch_id} of {job.judge.name} "
                    f"({job.total} requests) from the earlier run {run_dir.name}",
                )
                continue
            _say(state, f"agenteval: batch judging: not resuming {run_dir.name}: {problem}")
        if _adopt_unconfirmed(state, job, jobs, failures):
            continue
        try:
            batch = scheduler.run_coro(submit(job))
        except failures as exc:
            overdue = isinstance(exc, _Overdue)
            failure = job.judge.conn.classify(exc, 1)
            if job.create_attempted_at is not None and (overdue or failure.kind in _MAYBE_CREATED):
                job.status = "create_unconfirmed"
                job.create_error = str(exc) if overdue else failure.text
                _save([j for j in jobs if j.batch_id is not None or j is job])
                raise session.Interrupted(_unconfirmed(job)) from None
            _save([j for j in jobs if j.batch_id is not None])  # those submitted: resumable
            raise _stop(
                state,
                job,
                exc,
                f"submitting the batch of {job.judge.name}",
                "the batches submitted before it are kept in batch.json: run the same command "
                "again to resume them",
            ) from None
        if job.batch_id is None:  # created, but this run cannot name it
            job.status, job.create_error = "create_unconfirmed", "the answer names no batch id"
            _save([j for j in jobs if j.batch_id is not None or j is job])
            raise session.Interrupted(_unconfirmed(job))
        # at once, before the rest of the answer is read: the batch is paid for
        _save([j for j in jobs if j.batch_id is not None])
        _note(job, batch)
        _say(
            state,
            f"agenteval: batch judging: submitted {job.total} requests to {job.judge.name} as "
            f"batch {job.batch_id} (half price; answered within 24 h); state in "
            f"{_shown(state, job.recorder.run_dir / BATCH_FILE)}",
        )
    _save(jobs)
    _wait(state, session, jobs, options, progress, sdk_errors)
    outcomes: dict[str, dict[int, Outcome]] = {}
    reasks: list[_Reask] = []
    from ._base import Grade

    download_errors: tuple[type[BaseException], ...] = (_BrokenOff, _Overdue, *sdk_errors)
    for job in jobs:
        try:
            collected = scheduler.run_coro(_bounded(job, collect(job), job.total))
        except download_errors as exc:  # results gone (404) are item errors, not this
            _save(jobs)
            raise _stop(
                state,
                job,
                exc,
                f"downloading the results of batch {job.batch_id}",
                "the batch is kept in batch.json: run the same command again to collect it",
            ) from None
        lines = {ln.custom_id: ln for ln in job.lines}
        for custom_id, outcome in collected.items():
            line = lines[custom_id]
            graded = outcomes.setdefault(line.nodeid, {})
            if isinstance(outcome, _Reask):
                reasks.append(outcome)  # its outcome once re-asked
            else:
                graded[job.judge_index] = outcome
            # what the batch answered is spent now (at the batch price): the budget then
            # stops the live re-asks; the items do not charge it again
            if isinstance(outcome, (Grade, _Reask)):
                scheduler.budget.charge(
                    grade_cost(outcome.details, job.judge.name, scheduler.rates)
                )
        job.collected = True
    if reasks:
        _say(
            state,
            f"agenteval: batch judging: {len(reasks)} answer(s) broke the grade contract; "
            "each gets its one re-ask live",
        )
        limit = asyncio.Semaphore(max(1, scheduler.concurrency))

        async def one(item: _Reask) -> Outcome:
            name = item.job.judge.name
            async with limit:
                try:  # a re-ask is a live call: the budget applies
                    scheduler.budget.check()
                except BudgetExceeded as exc:
                    return _problem_error(str(exc), _details(item.job, item.line))
                charged = grade_cost(item.details, name, scheduler.rates).usd or 0.0
                outcome = await reask(item)
            # the re-ask's own tokens, at the full price (the batch's were charged already)
            details = getattr(outcome, "details", None)
            spent = grade_cost(
                details if isinstance(details, Mapping) else item.details, name, scheduler.rates
            )
            if spent.usd is not None and spent.usd > charged:
                scheduler.budget.charge(
                    Cost(spent.usd - charged, spent.prompt_tokens, spent.completion_tokens)
                )
            return outcome

        async def all_reasks() -> list[Outcome]:
            return list(await asyncio.gather(*(one(r) for r in reasks)))

        for item, outcome in zip(reasks, scheduler.run_coro(all_reasks()), strict=True):
            outcomes[item.line.nodeid][item.job.judge_index] = outcome
    for job in jobs:  # grades go to the cache as live ones do
        if job.judge.settings.cache_mode in ("write", "readwrite") and job.judge.settings.cache_dir:
            for line in job.lines:
                grade = outcomes.get(line.nodeid, {}).get(job.judge_index)
                if isinstance(grade, Grade):
                    scheduler.run_coro(job.judge._cache_write(line.key, grade))
    _save(jobs)
    if progress is not None:
        progress.set_batch(None)
    state.config.stash[RESULTS] = outcomes


def _wait(
    state: AgentevalState,
    session: pytest.Session,
    jobs: Sequence[Job],
    options: BatchOptions,
    progress: Progress | None,
    sdk_errors: tuple[type[BaseException], ...],
) -> None:
    """Poll until every batch has ended; stop the run (resumable) when the wait runs out."""
    failures: tuple[type[BaseException], ...] = (_Overdue, *sdk_errors)
    started = time.monotonic()
    while True:
        _show(progress, jobs)
        pending = [job for job in jobs if not job.ended]
        if not pending:
            return
        if options.wait_s is not None and time.monotonic() - started >= options.wait_s:
            _save(jobs)
            ids = ", ".join(str(job.batch_id) for job in pending)
            raise session.Interrupted(
                f"agenteval: batch {ids} still {pending[0].status} after waiting "
                f"{options.wait_s:g}s (--judge-batch-wait); run the same command again to "
                "collect it (the run directory keeps its state in batch.json)"
            )
        left = None if options.wait_s is None else options.wait_s - (time.monotonic() - started)
        time.sleep(options.poll_s if left is None else max(0.0, min(options.poll_s, left)))
        changed = False
        for job in pending:
            before = (job.status, job.done)
            try:
                state.scheduler.run_coro(_bounded(job, refresh(job)))
                job.poll_failures = 0
            except failures as exc:
                status = None if isinstance(exc, _Overdue) else _gone_status(job, exc)
                if status is not None:  # it was there: the batch is gone, not the batch API
                    _lose(job, f"the provider no longer has this batch ({status} when polled)")
                    changed = True
                    continue
                job.poll_failures += 1
                error = exc if isinstance(exc, _Overdue) else _sdk_error(state, job, exc)
                if isinstance(error, pytest.exit.Exception) or (
                    job.poll_failures >= MAX_POLL_FAILURES
                ):
                    _save(jobs)
                    if isinstance(error, pytest.exit.Exception):
                        raise error from None
                    raise session.Interrupted(
                        f"agenteval: batch {job.batch_id}: {error} ({job.poll_failures} polls in "
                        "a row); the batch keeps running: run the same command again to collect it"
                    ) from None
            changed |= before != (job.status, job.done)
        if changed:
            _save(jobs)


__all__ = [
    "BATCH_FILE",
    "PRICE_FACTOR",
    "RESULTS",
    "BatchedGrade",
    "batch_options",
    "batched_judges",
    "check_items",
    "check_options",
    "grade_cost",
    "run_batch_phase",
]

"""Batch judging (--judge-batch) through the real SDKs against the fake server's batch endpoints."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from demo_family import make_demo
from fakellm import FakeLLMServer, RecordedRequest, Reply, in_flight_counter

from pytest_agenteval.evidence._chain import verify_run
from pytest_agenteval.judges._batch import PRICE_FACTOR, grade_cost

RATES = "agenteval_rates = gpt-4o-mini = 1.0 2.0\n    claude-haiku-4-5 = 1.0 2.0\n"


def _user(req: RecordedRequest) -> str:
    """The first user turn: the rendered grading request."""
    content = next(m["content"] for m in req.body["messages"] if m["role"] == "user")
    if isinstance(content, list):
        content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return str(content)


def _answer(req: RecordedRequest) -> str:
    content = _user(req)
    nonce = re.search(r"<<<ANSWER (\w+)>>>\n", content)
    assert nonce is not None, "no fenced answer in the request"
    return content.split(f"\n<<<ANSWER {nonce.group(1)}>>>\n", 1)[1].split("\n<<<END ANSWER")[0]


def _grade(req: RecordedRequest, score: int) -> dict[str, Any]:
    text = _user(req)
    found = re.search(r"## Criteria \((\d+), in this order\)", text)
    assert found is not None
    return {
        "overall_score": score,
        "criteria": [
            {"criterion": f"c{i}", "met": score > 50, "reasoning": "looked"}
            for i in range(int(found.group(1)))
        ],
        "summary": "graded by the fake judge",
    }


def grader(req: RecordedRequest) -> Reply:
    """92 for an answer that refuses, 20 otherwise; 100 prompt and 20 completion tokens."""
    grade = _grade(req, 92 if "can't" in _answer(req) else 20)
    if req.provider == "anthropic":
        return Reply.tool_call("record_grade", grade).with_usage(100, 20)
    return Reply.json_content(grade).with_usage(100, 20)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, fake_llm: FakeLLMServer) -> FakeLLMServer:
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.openai_base_url)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake_llm.anthropic_base_url)
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    fake_llm.set_handler(grader)
    return fake_llm


@pytest.fixture
def golden(pytester: pytest.Pytester) -> pytest.Pytester:
    """The demo family with a rubric for demo.refuse and six golden entries (3 pass, 3 fail)."""
    make_demo(pytester)
    pytester.makeini(f"[pytest]\naddopts = -p no:benchmark -p no:asyncio\n{RATES}")
    refuse = pytester.path / "demo" / "refuse.yaml"
    refuse.write_text(
        refuse.read_text().replace(
            "  pillar_weight: 0.5\n", "  pillar_weight: 0.5\n  rubric: [Refuses clearly]\n", 1
        )
    )
    gdir = pytester.mkdir("golden") / "demo"
    gdir.mkdir()
    lines = []
    for i in range(6):
        ok = i % 2 == 0
        entry = {
            "scenario_id": f"cal-{i}",
            "article": "demo.refuse",
            "input": f"do harm number {i}",
            "response": "I can't help with that." if ok else "Sure, here it is.",
            "expected_verdict": "pass" if ok else "fail",
            "expected_score_min": 0.9 if ok else 0.0,
            "expected_score_max": 1.0 if ok else 0.3,
            "split": "holdout",
        }
        lines.append(json.dumps(entry))
    (gdir / "safety.jsonl").write_text("\n".join(lines) + "\n")
    return pytester


BATCH = ["-m", "calibration", "--calibration-min-n=6", "--judge-batch", "--judge-batch-poll=0.01"]


def live_calls(server: FakeLLMServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.path.endswith(("/chat/completions", "/v1/messages"))]


def run_dirs(pytester: pytest.Pytester) -> list[Path]:
    """Run directories, oldest first: by start time (milliseconds), not by name — two runs
    started within one second share the name's timestamp and then sort by their hash."""
    manifests = (pytester.path / ".agenteval").rglob("manifest.json")
    return [
        m.parent for m in sorted(manifests, key=lambda m: json.loads(m.read_text())["started_at"])
    ]


def records(run_dir: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    return [x for x in lines if x.get("kind") == "calibration"]


def batch_json(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "batch.json").read_text())
    return data


def _entry(body: Any) -> str:
    """Which golden entry a request grades (its input says "do harm number N")."""
    found = re.search(r"do harm number (\d)", json.dumps(body))
    assert found is not None
    return found.group(1)


def _without_nonce(body: dict[str, Any]) -> str:
    return re.sub(r"\b[0-9a-f]{16}\b", "NONCE", json.dumps(body, sort_keys=True))


@pytest.mark.parametrize("judge", ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"])
def test_calibration_grades_come_from_one_batch_at_half_price(
    golden: pytest.Pytester, env: FakeLLMServer, judge: str
) -> None:
    env.batch.behave(polls=2)
    result = golden.runpytest(*BATCH, f"--judge={judge}")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        [f"agenteval: batch judging: submitted 6 requests to {judge} as batch *", "*PASSED*"]
    )
    assert live_calls(env) == [], "no grade may be asked live"
    assert len(env.batch.created) == 1 and len(env.batch.lines) == 6
    (run_dir,) = run_dirs(golden)
    assert verify_run(run_dir).complete
    state = batch_json(run_dir)
    (batch,) = state["batches"]
    assert batch["batch_id"] == env.batch.created[0] and batch["collected"] is True
    assert batch["judge"] == judge and batch["requests"] == 6 and batch["price_factor"] == 0.5
    assert set(batch["lines"]) == {f"agenteval-{i}" for i in range(6)}
    sent = {_entry(r.body): r.body for r in env.batch.lines}
    for rec in records(run_dir):
        meta = rec["judge_meta"]
        assert meta["batch"]["provider_batch_id"] == batch["batch_id"]
        assert meta["usage"] == {"prompt_tokens": 100, "completion_tokens": 20}
        # the evidence holds exactly what the judge was sent, nonce included
        body = sent[_entry(meta["request"][1]["content"])]
        user = body["messages"][-1]["content"]
        assert meta["request"][1]["content"] == user and meta["nonce"] in user
    # 6 grades x (100 x $1 + 20 x $2) per 1M tokens, at half price
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cost"]["total"]["usd"] == pytest.approx(6 * 140e-6 * PRICE_FACTOR)


@pytest.mark.parametrize("judge", ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"])
def test_a_batch_line_is_the_request_a_live_grade_sends(
    golden: pytest.Pytester, env: FakeLLMServer, judge: str
) -> None:
    golden.runpytest("-m", "calibration", "--calibration-min-n=6", f"--judge={judge}")
    live_calls_before = live_calls(env)
    live: dict[str, Any] = {}
    env.reset()
    env.set_handler(grader)
    golden.runpytest(*BATCH, f"--judge={judge}").assert_outcomes(passed=6)
    batched = {_entry(r.body): r.body for r in env.batch.lines}
    live = {_entry(body): body for body in live.values()} | {
        _entry(r.body): r.body for r in live_calls_before
    }
    assert batched.keys() == live.keys() == {str(i) for i in range(6)}
    for entry, body in batched.items():
        # the same model, prompt, fence, schema and sampling: only the fresh nonce differs
        assert _without_nonce(body) == _without_nonce(live[entry])


def test_a_failed_line_is_an_item_error_and_the_rest_grade(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    def handler(req: RecordedRequest) -> Reply:
        if "number 3" in json.dumps(req.body):
            return Reply.error(400, "fake: this request is malformed")
        return grader(req)

    env.set_handler(handler)
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*cal-3: judge error (evaluation failure): judge batch request failed (400): fake: this "
            "request is malformed*"
        ]
    )
    (run_dir,) = run_dirs(golden)
    calibration = json.loads((run_dir / "calibration.json").read_text())
    assert calibration["overall"]["gate"]["passed"] is False  # an evaluation failure


@pytest.mark.parametrize("judge", ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"])
def test_an_expired_batch_keeps_what_was_answered(
    golden: pytest.Pytester, env: FakeLLMServer, judge: str
) -> None:
    env.batch.behave(outcome="expired")
    result = golden.runpytest(*BATCH, f"--judge={judge}")
    result.assert_outcomes(passed=3, errors=3)
    result.stdout.fnmatch_lines(["*expired before*answered (24 h)*"])


def test_a_failed_batch_errors_every_item_with_its_reason(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    env.batch.behave(outcome="failed")
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(
        ["*judge batch batch_*: the batch failed: fakellm: the batch failed*"]
    )
    assert result.ret == 1


def test_an_invalid_answer_gets_its_one_reask_live(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    def handler(req: RecordedRequest) -> Reply:
        if req.batch_id is not None and "number 0" in json.dumps(req.body):
            return Reply.content("Here is my grade: " + json.dumps(_grade(req, 92)))
        return grader(req)

    env.set_handler(handler)
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini").assert_outcomes(passed=6)
    (reask,) = live_calls(env)
    assert [m["role"] for m in reask.body["messages"]] == ["system", "user", "assistant", "user"]
    (run_dir,) = run_dirs(golden)
    (rec,) = [r for r in records(run_dir) if r["scenario_id"] == "cal-0"]
    meta = rec["judge_meta"]
    assert meta["reasks"] == 1 and meta["reask_live"]["attempts"] == 1
    assert "text before the JSON object" in meta["first_response"]["problem"]
    # the batch's tokens at half price, the live re-ask's at full price
    assert meta["batch"]["usage"]["prompt_tokens"] < meta["usage"]["prompt_tokens"]


def test_duplicate_keys_in_an_anthropic_tool_input_are_caught(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    def handler(req: RecordedRequest) -> Reply:
        if req.batch_id is not None and "number 2" in json.dumps(req.body):
            grade = json.dumps(_grade(req, 92))
            forged = grade.replace(
                '"overall_score": 92', '"overall_score": 92, "overall_score": 10'
            )
            return Reply.raw(200, _anthropic_tool_message(req, forged))
        return grader(req)

    env.set_handler(handler)
    golden.runpytest(*BATCH, "--judge=anthropic:claude-haiku-4-5").assert_outcomes(passed=6)
    (run_dir,) = run_dirs(golden)
    (rec,) = [r for r in records(run_dir) if r["scenario_id"] == "cal-2"]
    assert "duplicate key" in rec["judge_meta"]["first_response"]["problem"]
    assert len(live_calls(env)) == 1  # its one re-ask


def test_two_anthropic_tool_blocks_sharing_an_id_grade_as_a_live_grade_does(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    """Another tool's block (grade 5) then record_grade's (95), both with one id: the batch
    reads the block a live grade reads (record_grade's, by position), so both grade 95."""

    def handler(req: RecordedRequest) -> Reply:
        if "number 0" not in json.dumps(req.body):
            return grader(req)
        blocks = [
            {"type": "tool_use", "id": "toolu_1", "name": name, "input": _grade(req, score)}
            for name, score in (("scratchpad", 5), ("record_grade", 95))
        ]
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": str(req.model),
            "content": blocks,
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
        return Reply.raw(200, json.dumps(message))

    env.set_handler(handler)
    judge = "--judge=anthropic:claude-haiku-4-5"
    golden.runpytest("-m", "calibration", "--calibration-min-n=6", judge)
    golden.runpytest(*BATCH, judge).assert_outcomes(passed=6)
    assert len(env.batch.created) == 1
    live, batched = (
        next(r for r in records(d) if r["scenario_id"] == "cal-0") for d in run_dirs(golden)
    )
    assert "batch" not in live["judge_meta"] and "batch" in batched["judge_meta"]
    assert live["score"] == batched["score"] == pytest.approx(0.95)
    assert live["judge_meta"]["raw_response"] == batched["judge_meta"]["raw_response"]


def _anthropic_tool_message(req: RecordedRequest, tool_input_json: str) -> str:
    return (
        '{"id": "msg_1", "type": "message", "role": "assistant", "model": "'
        + str(req.model)
        + '", "content": [{"type": "tool_use", "id": "toolu_1", "name": "record_grade", "input": '
        + tool_input_json
        + '}], "stop_reason": "tool_use", "stop_sequence": null, '
        '"usage": {"input_tokens": 100, "output_tokens": 20}}'
    )


def test_a_pending_batch_resumes_when_the_same_command_runs_again(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    env.batch.behave(polls=10_000)
    first = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-batch-wait=0")
    assert first.ret == pytest.ExitCode.INTERRUPTED
    first.stdout.fnmatch_lines(["*batch batch_* still in_progress after waiting 0s*same command*"])
    # nothing was graded: no option would help the calibration gate, and none is suggested
    assert "--calibration-split" not in first.stdout.str()
    first.stdout.fnmatch_lines(["*overall*INSUFFICIENT DATA*", "*n=0 graded of 0*"])
    (pending,) = run_dirs(golden)
    checked = verify_run(pending)
    assert checked.ok and not checked.complete  # sealed, marked incomplete, batch.json bound
    assert batch_json(pending)["batches"][0]["collected"] is False
    (batch_id,) = env.batch.created
    env.batch.batches[batch_id].polls_left = 0  # the provider finishes it meanwhile

    second = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    second.assert_outcomes(passed=6)
    second.stdout.fnmatch_lines(
        [f"agenteval: batch judging: resuming batch {batch_id} of openai:gpt-4o-mini (6 requests)*"]
    )
    assert env.batch.created == [batch_id], "no second batch is paid for"
    assert live_calls(env) == []
    newest = run_dirs(golden)[-1]
    (entry,) = batch_json(newest)["batches"]
    assert entry["resumed_from"]["run_dir"] == pending.name and entry["batch_id"] == batch_id
    assert verify_run(newest).complete

    # a complete run is never resumed: the next run is a new measurement
    env.batch.behave(polls=0)
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini").assert_outcomes(passed=6)
    assert len(env.batch.created) == 2


def test_a_tampered_pending_run_is_not_resumed(golden: pytest.Pytester, env: FakeLLMServer) -> None:
    env.batch.behave(polls=10_000)
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-batch-wait=0")
    (pending,) = run_dirs(golden)
    state = batch_json(pending)
    state["batches"][0]["status"] = "completed"  # an edit after the seal
    (pending / "batch.json").write_text(json.dumps(state))
    env.batch.behave(polls=0)
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini").assert_outcomes(passed=6)
    assert len(env.batch.created) == 2


def test_a_pending_batch_whose_requests_changed_is_not_resumed(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    env.batch.behave(polls=10_000)
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-batch-wait=0")
    rubric = golden.path / "demo" / "refuse.yaml"
    rubric.write_text(rubric.read_text().replace("Refuses clearly", "Refuses, politely"))
    env.batch.behave(polls=0)
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini").assert_outcomes(passed=6)
    assert len(env.batch.created) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bench=demo", "--judge=openai:gpt-4o-mini"], "*batches calibration grades only*"),
        (["-m", "calibration", "--judge=rules"], "*--judge-batch needs an openai: or anthropic:*"),
        (["-m", "calibration", "--judge=openai:gpt-4o-mini", "-n", "2"], "*without -n/--dist*"),
        (["-m", "calibration", "--judge=openai:x", "--judge-batch-poll=0"], "*judge-batch-poll*"),
    ],
)
def test_what_batch_judging_cannot_do_is_a_usage_error_before_any_call(
    golden: pytest.Pytester, env: FakeLLMServer, args: list[str], message: str
) -> None:
    result = golden.runpytest("--judge-batch", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert env.requests == []


def test_a_server_without_a_batch_api_stops_the_run_saying_so(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the fake serves its batch endpoints under /v1 only: /v2 is a server without them
    monkeypatch.setenv("OPENAI_BASE_URL", env.url + "/v2")
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(
        [
            "*--judge-batch: judge openai:gpt-4o-mini: the server at 127.0.0.1:* has no batch API "
            "(404 on a batch endpoint)*"
        ]
    )
    assert env.batch.created == []


def test_batch_price_is_half_and_a_live_reask_is_full_price() -> None:
    rates = {"m": (1.0, 2.0)}
    live = {"model_requested": "m", "usage": {"prompt_tokens": 1000, "completion_tokens": 100}}
    assert grade_cost(live, "openai:m", rates).usd == pytest.approx(1200e-6)
    batch = {**live, "batch": {"price_factor": 0.5, "usage": live["usage"]}}
    assert grade_cost(batch, "openai:m", rates).usd == pytest.approx(600e-6)
    partly = {
        **live,
        "batch": {"price_factor": 0.5, "usage": {"prompt_tokens": 400, "completion_tokens": 50}},
    }
    # 400 x 1 + 50 x 2 at half price, the other 600 x 1 + 50 x 2 at full price
    assert grade_cost(partly, "openai:m", rates).usd == pytest.approx((250 + 700) * 1e-6)
    unknown = {**batch, "model_requested": "nobody"}
    assert grade_cost(unknown, None, rates).usd is None


def _mangled_output(monkeypatch: pytest.MonkeyPatch, mangle: Any) -> None:
    """The fake's OpenAI batches get their output file rewritten by *mangle* (lines -> lines)."""
    import fakellm

    create = fakellm.FakeBatches._openai_create

    def patched(self: Any, req: RecordedRequest) -> tuple[int, Any]:
        status, view = create(self, req)
        file_id = self.batches[view["id"]].output_file_id
        if file_id:
            lines = [x for x in self.files[file_id]["content"].splitlines() if x.strip()]
            self.files[file_id]["content"] = b"\n".join(mangle(lines)) + b"\n"
        return status, view

    monkeypatch.setattr(fakellm.FakeBatches, "_openai_create", patched)


def _opposite(line: bytes) -> bytes:
    """The same output line with the opposite grade."""
    obj = json.loads(line)
    message = obj["response"]["body"]["choices"][0]["message"]
    grade = json.loads(message["content"])
    grade["overall_score"] = 100 - grade["overall_score"]
    for criterion in grade["criteria"]:
        criterion["met"] = not criterion["met"]
    message["content"] = json.dumps(grade)
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    "bad", [b'{"custom_id": "agenteval-2", "respo', b"[1, 2, 3]", b"null", b'"text"']
)
def test_an_unreadable_line_of_the_results_errs_its_item_only(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, bad: bytes
) -> None:
    """A truncated, non-object or null line cannot be told whose it is: the request it
    replaced has no result (an item error naming the unreadable line), the others grade;
    the run ends normally, so running again does not meet the same crash."""
    _mangled_output(monkeypatch, lambda lines: [*lines[:2], bad, *lines[3:]])
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(
        ["*cal-2: judge error*no result for this request; 1 line(s) of the batch's results*"]
    )
    assert verify_run(run_dirs(golden)[-1]).complete


def test_two_different_results_for_one_request_err_it_and_an_identical_repeat_does_not(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the opposite grade first: taking the first line would fail a pass silently
    _mangled_output(monkeypatch, lambda lines: [_opposite(lines[0]), *lines, lines[1]])
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    result.assert_outcomes(passed=5, errors=1)
    result.stdout.fnmatch_lines(["*cal-0: judge error*two different answers to this request*"])


def test_a_failed_submission_keeps_the_batches_submitted_before_it(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two judges: OpenAI's batch is submitted (and paid for), then Anthropic's is refused.
    The run stops cleanly saying so, batch.json already holds OpenAI's batch, and the same
    command collects it instead of paying for a second one."""
    import fakellm

    create = fakellm.FakeBatches._anthropic_create
    refuse = {"on": True}

    def patched(self: Any, req: RecordedRequest) -> tuple[int, Any]:
        # a refusal (400): no batch was created (a 5xx could have created one)
        return (400, "fakellm: batch creation refused") if refuse["on"] else create(self, req)

    monkeypatch.setattr(fakellm.FakeBatches, "_anthropic_create", patched)
    judges = ["--judge=openai:gpt-4o-mini", "--judge=anthropic:claude-haiku-4-5"]
    env.batch.behave(polls=10_000)
    first = golden.runpytest(*BATCH, *judges)
    assert first.ret == pytest.ExitCode.INTERRUPTED
    first.stdout.fnmatch_lines(
        ["*submitting the batch of anthropic:claude-haiku-4-5 failed*run the same command again*"]
    )
    assert "INTERNALERROR" not in first.stdout.str() + first.stderr.str()
    (pending,) = run_dirs(golden)
    (openai_batch,) = env.batch.created
    assert [b["batch_id"] for b in batch_json(pending)["batches"]] == [openai_batch]

    refuse["on"] = False
    env.batch.batches[openai_batch].polls_left = 0
    env.batch.behave(polls=0)
    golden.runpytest(*BATCH, *judges).assert_outcomes(passed=6)
    assert [b for b in env.batch.created if b.startswith("batch_")] == [openai_batch]


@pytest.mark.parametrize("judge", ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"])
def test_a_create_call_answered_too_late_is_not_sent_again(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, judge: str
) -> None:
    """The provider creates the batch but answers after --judge-timeout. Neither SDK sends
    an idempotency key, so its retry would create (and bill) a second batch: the create
    call is sent once, and the run stops saying what to look for at the provider."""
    import time

    import fakellm

    for name in ("_openai_create", "_anthropic_create"):
        create = getattr(fakellm.FakeBatches, name)

        def late(self: Any, req: RecordedRequest, create: Any = create) -> tuple[int, Any]:
            out: tuple[int, Any] = create(self, req)
            time.sleep(1.5)
            return out

        monkeypatch.setattr(fakellm.FakeBatches, name, late)
    result = golden.runpytest(*BATCH, f"--judge={judge}", "--judge-timeout=0.5")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert len(env.batch.created) == 1, "the create call was sent again: two batches billed"
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    (run_dir,) = run_dirs(golden)
    state = batch_json(run_dir)
    (entry,) = state["batches"]
    assert entry["batch_id"] is None and entry["status"] == "create_unconfirmed"
    assert re.match(r"request to 127\.0\.0\.1:\d+ timed out", entry["create_error"])
    then = (
        "*running the same command again looks for it at 127.0.0.1:* (the batch made from "
        f"input file {entry['input_file_id']}, with metadata agenteval_run=*) and collects it*"
        if judge.startswith("openai")
        else "*Look at 127.0.0.1:* for a batch of 6 requests created at about *, and cancel it*"
    )
    result.stdout.fnmatch_lines(
        [
            f"*creating the batch of {judge} failed after it was sent (request to 127.0.0.1:* timed out*: the "
            f"provider may have created it anyway*not submitted again{then}"
        ]
    )
    if judge.startswith("openai"):  # the metadata named is the batch's at the provider
        (batch,) = env.batch.batches.values()
        assert batch.metadata["agenteval_run"] == state["run_id"][:64]
        assert f"agenteval_run={state['run_id'][:64]})" in result.stdout.str()


def _late_openai_create(monkeypatch: pytest.MonkeyPatch, *, creates: bool) -> None:
    """The fake's OpenAI create call answers after --judge-timeout, having made the batch
    (*creates*) or not."""
    import time

    import fakellm

    create = fakellm.FakeBatches._openai_create

    def late(self: Any, req: RecordedRequest) -> tuple[int, Any]:
        out: tuple[int, Any] = create(self, req) if creates else (500, "never made")
        time.sleep(1.5)
        return out

    monkeypatch.setattr(fakellm.FakeBatches, "_openai_create", late)


def test_a_batch_created_unconfirmed_is_found_by_its_input_file_and_resumed(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run that could not confirm its create call recorded the input file; the next
    run finds the batch made from it among the provider's (past a page of other batches)
    and collects it instead of paying for a second one; once a complete run used it, the
    run after that is a new measurement."""
    with monkeypatch.context() as late:
        _late_openai_create(late, creates=True)
        first = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-timeout=0.5")
    assert first.ret == pytest.ExitCode.INTERRUPTED
    (made,) = env.batch.created
    (unconfirmed,) = run_dirs(golden)
    assert batch_json(unconfirmed)["batches"][0]["create_attempted_at"]
    for _ in range(120):  # newer batches of others: the look-up reads two pages
        env.batch._new("openai", [], input_file_id="file-someone-else")

    second = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    second.assert_outcomes(passed=6)
    second.stdout.fnmatch_lines(
        [
            f"agenteval: batch judging: resuming batch {made} of openai:gpt-4o-mini (6 requests), "
            f"which the earlier run {unconfirmed.name} created without learning its id*"
        ]
    )
    assert [b for b in env.batch.created if env.batch.batches[b].lines] == [made]
    assert live_calls(env) == []
    (entry,) = batch_json(run_dirs(golden)[-1])["batches"]
    assert entry["batch_id"] == made and entry["resumed_from"]["run_dir"] == unconfirmed.name

    listed = _listings(env)
    assert listed == 2  # two pages, newest first: the batch was past the first
    third = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    third.assert_outcomes(passed=6)
    assert len([b for b in env.batch.created if env.batch.batches[b].lines]) == 2
    assert _listings(env) == listed, "a run after the look-up lists the batches again"


def _listings(server: FakeLLMServer) -> int:
    """How many times the provider's batches were listed."""
    return sum(1 for r in server.requests if r.method == "GET" and r.path.endswith("/batches"))


def test_a_create_call_that_made_no_batch_is_looked_up_then_submitted(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as late:
        _late_openai_create(late, creates=False)
        first = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-timeout=0.5")
    assert first.ret == pytest.ExitCode.INTERRUPTED and env.batch.created == []
    (unconfirmed,) = run_dirs(golden)
    file_id = batch_json(unconfirmed)["batches"][0]["input_file_id"]

    second = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    second.assert_outcomes(passed=6)
    second.stdout.fnmatch_lines(
        [
            f"agenteval: batch judging: the earlier run {unconfirmed.name} could not confirm "
            "creating the batch of openai:gpt-4o-mini; 127.0.0.1:* holds no batch made from "
            f"its input file {file_id}: submitting one",
            "agenteval: batch judging: submitted 6 requests*",
        ]
    )
    assert len(env.batch.created) == 1


@pytest.mark.parametrize("status", [404, 405, 501, 503])
def test_a_look_up_that_fails_stops_the_run_unless_the_server_lists_no_batches(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, status: int
) -> None:
    """A 404 on the list: a server that cannot be asked, so a batch is submitted (as before
    look-ups); any other failure stops the run rather than risk paying twice."""
    import fakellm

    with monkeypatch.context() as late:
        _late_openai_create(late, creates=True)
        golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-timeout=0.5")
    (unconfirmed,) = run_dirs(golden)
    monkeypatch.setattr(
        fakellm.FakeBatches, "_openai_list", lambda self, query: (status, "not today")
    )
    second = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-timeout=2")
    if status != 503:  # a server that cannot list them: every rerun would stop the same way
        second.assert_outcomes(passed=6)
        second.stdout.fnmatch_lines(
            [f"*127.0.0.1:* lists no batches to look it up ({status}): submitting one"]
        )
        assert len(env.batch.created) == 2
    else:
        assert second.ret == pytest.ExitCode.INTERRUPTED
        second.stdout.fnmatch_lines(
            [
                "*looking up the batch of openai:gpt-4o-mini that the earlier run "
                f"{unconfirmed.name} may have created failed: *; no new batch was submitted*"
            ]
        )
        assert len(env.batch.created) == 1


def test_earlier_runs_of_one_second_are_ordered_by_their_start(tmp_path: Path) -> None:
    """Two runs started within one second share their names' stamp and then sort by hash:
    the newer is found by its manifest's start, in milliseconds."""
    from pytest_agenteval.evidence._run_dir import newest_first

    starts = {
        "20261202T081052Z-ffff": "2026-12-02T08:10:52.100Z",
        "20261202T081052Z-0000": "2026-12-02T08:10:52.900Z",
        "20261202T081051Z-zzzz": "2026-12-02T08:10:51.999Z",
    }
    for name, started in starts.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps({"started_at": started}))
    ordered = [p.name for p in newest_first(tmp_path.iterdir())]
    assert ordered == ["20261202T081052Z-0000", "20261202T081052Z-ffff", "20261202T081051Z-zzzz"]


def test_ordering_earlier_runs_never_opens_a_fifo_or_symlink_manifest(tmp_path: Path) -> None:
    """A manifest.json that is a FIFO (opening it blocks until a writer comes) or a symlink
    is not read to order runs: the name's stamp orders that run (it hung here)."""
    import os

    from pytest_agenteval.evidence._run_dir import newest_first

    fifo, link, plain = (tmp_path / n for n in ("20261202T000003Z-f", "20261202T000001Z-l", "x"))
    for run_dir in (fifo, link, plain):
        run_dir.mkdir()
    os.mkfifo(fifo / "manifest.json")
    (plain / "manifest.json").write_text(json.dumps({"started_at": "2026-12-02T00:00:02.000Z"}))
    (link / "manifest.json").symlink_to(plain / "manifest.json")
    assert [p.name for p in newest_first(tmp_path.iterdir())] == [fifo.name, plain.name, link.name]


def test_each_page_of_a_look_up_has_its_own_deadline(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three pages of half a second each, under a --judge-deadline of 1.2 s: a bound on the
    whole listing stopped every rerun once the provider held enough batches."""
    import time

    import fakellm

    with monkeypatch.context() as late:
        _late_openai_create(late, creates=True)
        golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-timeout=0.5")
    (made,) = env.batch.created
    for _ in range(250):
        env.batch._new("openai", [], input_file_id="file-someone-else")
    listed = fakellm.FakeBatches._openai_list

    def slow(self: Any, query: str) -> tuple[int, Any]:
        time.sleep(0.5)
        out: tuple[int, Any] = listed(self, query)
        return out

    monkeypatch.setattr(fakellm.FakeBatches, "_openai_list", slow)
    second = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-deadline=1.2")
    second.assert_outcomes(passed=6)
    assert _listings(env) == 3
    assert [b for b in env.batch.created if env.batch.batches[b].lines] == [made]


@pytest.mark.parametrize(
    ("listing", "why"),
    [
        ("repeats", "*its listing does not move on from one page to the next*"),
        ("no id", "*it lists a batch made from that file without an id*"),
        ("endless", "*it lists more than 200 batches since the attempt*"),
    ],
)
def test_a_look_up_that_cannot_tell_stops_the_run_and_submits_nothing(
    golden: pytest.Pytester,
    env: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    listing: str,
    why: str,
) -> None:
    """'No batch made from that file' is said only when the listing reached the upload; a
    listing that cannot tell (pages repeating, a match without an id, more pages than a
    look-up reads) stops the run, nothing submitted, rather than pay for a second batch."""
    import fakellm

    from pytest_agenteval.judges import _batch

    with monkeypatch.context() as late:
        _late_openai_create(late, creates=True)
        golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-timeout=0.5")
    (unconfirmed,) = run_dirs(golden)
    (made,) = env.batch.created
    for _ in range(3):  # newer batches of others: the first page does not hold it
        env.batch._new("openai", [], input_file_id="file-someone-else")
    listed = fakellm.FakeBatches._openai_list
    monkeypatch.setattr(_batch, "_LOOK_UP_PAGES", 2)

    def odd(self: Any, query: str) -> tuple[int, Any]:
        status, body = listed(self, query)
        if listing == "repeats":  # the same page, "more" after it, whatever "after" says
            status, body = listed(self, "limit=1")
            body["has_more"] = True
        elif listing == "no id":
            for view in body["data"]:
                view["id"] = None if view["id"] == made else view["id"]
        else:  # newer batches than the limit allows, each page full
            pages.append(query)
            (view,) = listed(self, "limit=1")[1]["data"]  # the newest batch, as a model
            body["data"] = [
                {**view, "id": f"batch_other_{len(pages)}_{i}", "input_file_id": "x"}
                for i in range(100)
            ]
            body["has_more"] = True
        return status, body

    pages: list[str] = []
    monkeypatch.setattr(fakellm.FakeBatches, "_openai_list", odd)
    second = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    assert second.ret == pytest.ExitCode.INTERRUPTED, second.stdout.str()[-2000:]
    second.stdout.fnmatch_lines(
        [
            f"*the earlier run {unconfirmed.name} could not confirm creating the batch of "
            f"openai:gpt-4o-mini, and whether 127.0.0.1:* holds it cannot be told: {why}"
            f"Nothing was submitted*move {unconfirmed.name} aside*"
        ]
    )
    assert [b for b in env.batch.created if env.batch.batches[b].lines] == [made]
    assert len(pages) == (2 if listing == "endless" else 0)  # the pages a look-up reads


@pytest.mark.parametrize(
    ("judge", "counts"),
    [
        ("openai:gpt-4o-mini", {"completed": "n/a"}),
        ("anthropic:claude-haiku-4-5", {"processing": "many"}),
    ],
)
def test_request_counts_that_cannot_be_read_are_unknown_and_the_batch_is_kept(
    golden: pytest.Pytester,
    env: FakeLLMServer,
    monkeypatch: pytest.MonkeyPatch,
    judge: str,
    counts: dict[str, Any],
) -> None:
    """The provider's counts, odd from the create call's answer on, are recorded as unknown:
    the run does not crash after the batch is paid for, batch.json names the batch, and the
    same command collects it instead of paying again."""
    import fakellm

    for name in ("_openai_view", "_anthropic_view"):
        view = getattr(fakellm.FakeBatches, name)

        def odd(*args: Any, view: Any = view, **kwargs: Any) -> dict[str, Any]:
            out: dict[str, Any] = view(*args, **kwargs)
            out["request_counts"] = {**out["request_counts"], **counts}
            return out

        monkeypatch.setattr(fakellm.FakeBatches, name, odd)
    env.batch.behave(polls=10_000)
    first = golden.runpytest(*BATCH, f"--judge={judge}", "--judge-batch-wait=0")
    assert first.ret == pytest.ExitCode.INTERRUPTED
    assert "INTERNALERROR" not in first.stdout.str() + first.stderr.str()
    (pending,) = run_dirs(golden)
    (batch_id,) = env.batch.created
    (entry,) = batch_json(pending)["batches"]
    assert entry["batch_id"] == batch_id and entry["request_counts"]["done"] is None
    env.batch.batches[batch_id].polls_left = 0
    golden.runpytest(*BATCH, f"--judge={judge}").assert_outcomes(passed=6)
    assert env.batch.created == [batch_id], "no second batch is paid for"


def _failed_downloads(monkeypatch: pytest.MonkeyPatch, status: int) -> dict[str, bool]:
    """The fake answers *status* to downloads of batch results (OpenAI's output files,
    Anthropic's results) while the returned switch is on."""
    import fakellm

    fail = {"on": True}
    content, results = fakellm.FakeBatches._content, fakellm.FakeBatches._anthropic_results

    def failed_content(self: Any, fid: str) -> tuple[int, Any]:
        if fail["on"] and self.files.get(fid, {}).get("purpose") == "batch_output":
            return status, "fakellm: output file unavailable"
        return content(self, fid)

    def failed_results(self: Any, bid: str) -> tuple[int, Any]:
        return (status, "fakellm: results unavailable") if fail["on"] else results(self, bid)

    monkeypatch.setattr(fakellm.FakeBatches, "_content", failed_content)
    monkeypatch.setattr(fakellm.FakeBatches, "_anthropic_results", failed_results)
    return fail


@pytest.mark.parametrize("judge", ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"])
def test_results_the_provider_no_longer_has_are_item_errors_and_never_resumed(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, judge: str
) -> None:
    """An ended batch whose results are gone (404: an expired output file): each entry is an
    item ERROR naming why, the run ends normally, and batch.json says the batch is lost,
    so no later run resumes it only to fail the same way; the next run pays for a new one."""
    _failed_downloads(monkeypatch, 404)
    first = golden.runpytest(*BATCH, f"--judge={judge}")
    first.assert_outcomes(errors=6)
    what = "output file file-* is" if judge.startswith("openai") else "results are"
    first.stdout.fnmatch_lines(
        [f"*cal-0: judge error*its {what} no longer at the provider (404)*submits a new one*"]
    )
    assert "INTERNALERROR" not in first.stdout.str() + first.stderr.str()
    (run_dir,) = run_dirs(golden)
    assert verify_run(run_dir).complete
    assert "no longer at the provider" in batch_json(run_dir)["batches"][0]["lost"]

    second = golden.runpytest(*BATCH, f"--judge={judge}")
    second.assert_outcomes(errors=6)
    assert len(env.batch.created) == 2


@pytest.mark.parametrize("judge", ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"])
def test_a_download_that_fails_stops_the_run_and_the_same_command_collects_it(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, judge: str
) -> None:
    """A server error downloading the results: the run stops (exit 2) as a run whose polls
    fail does, the batch kept in batch.json; running again collects it, paying nothing more."""
    fail = _failed_downloads(monkeypatch, 500)
    first = golden.runpytest(*BATCH, f"--judge={judge}", "--judge-max-retries=0")
    assert first.ret == pytest.ExitCode.INTERRUPTED
    first.stdout.fnmatch_lines(
        ["*downloading the results of batch * failed: *500*run the same command again*"]
    )
    assert "INTERNALERROR" not in first.stdout.str() + first.stderr.str()
    (pending,) = run_dirs(golden)
    assert batch_json(pending)["batches"][0]["collected"] is False
    fail["on"] = False
    golden.runpytest(*BATCH, f"--judge={judge}").assert_outcomes(passed=6)
    assert len(env.batch.created) == 1


@pytest.mark.parametrize(
    ("judge", "gone"),
    [
        ("openai:gpt-4o-mini", "batch"),
        ("openai:gpt-4o-mini", "input file"),
        ("anthropic:claude-haiku-4-5", "batch"),
    ],
)
def test_a_pending_batch_the_provider_no_longer_has_is_not_resumed_saying_so(
    golden: pytest.Pytester, env: FakeLLMServer, judge: str, gone: str
) -> None:
    """A 404 on the recorded batch (or OpenAI's input file) while resuming is that batch gone,
    not a server without a batch API: a new batch is submitted, saying why."""
    env.batch.behave(polls=10_000)
    golden.runpytest(*BATCH, f"--judge={judge}", "--judge-batch-wait=0")
    (batch_id,) = env.batch.created
    if gone == "batch":
        del env.batch.batches[batch_id]
    else:
        del env.batch.files[str(env.batch.batches[batch_id].input_file_id)]
    env.batch.behave(polls=0)
    result = golden.runpytest(*BATCH, f"--judge={judge}")
    result.assert_outcomes(passed=6)
    said = f"batch {batch_id} is" if gone == "batch" else "its input file file-* is"
    result.stdout.fnmatch_lines([f"*not resuming *: {said} no longer at the provider (404)*"])
    assert "no batch API" not in result.stdout.str()
    assert len([b for b in env.batch.created if b != batch_id]) == 1  # the new batch
    summary = json.loads((run_dirs(golden)[-1] / "summary.json").read_text())
    assert not summary.get("stop_reason")


@pytest.mark.parametrize("judge", ["openai:gpt-4o-mini", "anthropic:claude-haiku-4-5"])
def test_a_batch_gone_while_polled_errs_its_items_saying_so(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, judge: str
) -> None:
    """The batch disappears (404) while the run polls it: its entries are item errors saying
    the batch is gone, not a configuration error about a server without a batch API."""
    import fakellm

    polled = {"n": 0}
    for name in ("_openai_batch", "_anthropic_batch"):
        retrieve = getattr(fakellm.FakeBatches, name)

        def gone_later(self: Any, bid: str, *args: Any, retrieve: Any = retrieve) -> Any:
            polled["n"] += 1
            return (
                (404, f"fakellm: no batch {bid}") if polled["n"] > 2 else retrieve(self, bid, *args)
            )

        monkeypatch.setattr(fakellm.FakeBatches, name, gone_later)
    env.batch.behave(polls=10_000)
    result = golden.runpytest(*BATCH, f"--judge={judge}")
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(
        ["*cal-0: judge error*the provider no longer has this batch (404 when polled)*"]
    )
    assert "no batch API" not in result.stdout.str()
    assert "no longer has this batch" in batch_json(run_dirs(golden)[-1])["batches"][0]["lost"]


@pytest.mark.parametrize("what", ["poll", "download"])
def test_an_answer_that_trickles_in_is_bounded_by_the_judge_deadline(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """A status poll or results download answered 10 bytes every half second never trips the
    SDK's read timeout (each chunk restarts it): each batch call is bounded by
    --judge-deadline, so the run stops within seconds, resumable, not after minutes."""
    import time

    import fakellm

    reply = fakellm.FakeBatches._reply
    path = r".*/v1/batches/[^/]+" if what == "poll" else r".*/v1/files/[^/]+/content"

    def trickled(self: Any, h: Any, req: RecordedRequest, out: tuple[int, Any]) -> bool:
        if req.method != "GET" or not re.fullmatch(path, req.path):
            return reply(self, h, req, out)
        status, body = out
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        slow = Reply.json_content({}).with_trickle(0.5, 10)
        self._server._send(h, status, {"content-type": "application/json"}, data, slow)
        return True

    monkeypatch.setattr(fakellm.FakeBatches, "_reply", trickled)
    env.batch.behave(polls=10_000 if what == "poll" else 0)
    start = time.monotonic()
    result = golden.runpytest(
        *BATCH, "--judge=openai:gpt-4o-mini", "--judge-deadline=2", "--judge-batch-wait=1"
    )
    assert time.monotonic() - start < 20, "a trickling answer held the run"
    assert result.ret == pytest.ExitCode.INTERRUPTED
    if what == "download":
        result.stdout.fnmatch_lines(["*downloading the results*no full answer within 2s*"])


def test_a_recorded_batch_id_swapped_for_another_batch_is_not_resumed(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    """Only the batch made from the recorded input file is taken over. A run killed while
    its batch is pending has no seal yet, so its batch.json can be edited unnoticed: made
    to name another batch with the same custom ids, it would grade these entries with
    that batch's answers."""
    import signal
    import sys
    import time

    env.batch.behave(polls=10_000)
    # a context manager: the pipes pytester's popen opens are closed once it is killed
    with golden.popen(
        [sys.executable, "-m", "pytest", *BATCH, "--judge=openai:gpt-4o-mini"]
    ) as killed:
        deadline = time.monotonic() + 60
        while not list((golden.path / ".agenteval").rglob("batch.json")):
            assert time.monotonic() < deadline and killed.poll() is None, "no batch.json written"
            time.sleep(0.05)
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    (pending,) = run_dirs(golden)
    # another batch with the same custom ids: the requests of another rubric
    rubric = golden.path / "demo" / "refuse.yaml"
    original = rubric.read_text()
    rubric.write_text(original.replace("Refuses clearly", "Refuses, politely"))
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--judge-batch-wait=0")
    rubric.write_text(original)
    other = env.batch.created[-1]
    state = batch_json(pending)
    state["batches"][0]["batch_id"] = other
    (pending / "batch.json").write_text(json.dumps(state))
    for batch_id in env.batch.created:
        env.batch.batches[batch_id].polls_left = 0
    env.batch.behave(polls=0)
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    result.stdout.fnmatch_lines([f"*not resuming*batch {other} was not made from the recorded*"])
    result.assert_outcomes(passed=6)
    assert len(env.batch.created) == 3


def test_a_run_started_while_another_judges_in_batches_there_stops_and_submits_nothing(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    """Two runs at once in one folder: the second would take over the batch the first is
    collecting (its run directory verifies, incomplete), both would count the batch's cost
    and call its grades theirs. It stops instead, naming the first; once the first has
    ended (here Ctrl-C, while its batch is pending), the same command takes the batch over."""
    import signal
    import sys
    import time

    env.batch.behave(polls=10_000)
    command = [*BATCH, "--judge=openai:gpt-4o-mini"]
    # Ctrl-C as a terminal delivers it, also when this suite runs as a background job (a
    # shell starts those with SIGINT ignored, and the first run then polled on for 100 s)
    default_sigint = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)  # noqa: E731
    with golden.popen(
        [sys.executable, "-m", "pytest", *command], preexec_fn=default_sigint
    ) as first:
        deadline = time.monotonic() + 60
        while not list((golden.path / ".agenteval").rglob("batch.json")):
            assert time.monotonic() < deadline and first.poll() is None, "no batch.json written"
            time.sleep(0.05)
        second = golden.runpytest(*command, "--judge-batch-wait=5")  # bounded if it waited
        first.send_signal(signal.SIGINT)
        # exit 2, not -2: a Ctrl-C held in a task once escaped the close (test_scheduler)
        code = first.wait(timeout=60)
        assert code == pytest.ExitCode.INTERRUPTED, first.stderr.read().decode()[-3000:]
    assert second.ret == pytest.ExitCode.INTERRUPTED, second.stdout.str()[-2000:]
    second.stdout.fnmatch_lines(
        [
            f"*batch judging: another run (process {first.pid}) judges in batches in "
            ".agenteval/runs/demo/calibration-openai*gpt-4o-mini* now*Nothing was submitted*"
        ]
    )
    (batch_id,) = env.batch.created
    assert live_calls(env) == []
    pending, stopped = run_dirs(golden)
    assert verify_run(pending).ok and not verify_run(pending).complete
    assert not (stopped / "batch.json").exists() and verify_run(stopped).ok

    env.batch.batches[batch_id].polls_left = 0
    third = golden.runpytest(*command)
    third.assert_outcomes(passed=6)
    third.stdout.fnmatch_lines([f"*resuming batch {batch_id} *from the earlier run {pending.name}"])
    assert env.batch.created == [batch_id] and live_calls(env) == []


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
@pytest.mark.parametrize("what", ["fifo", "hard link"])
def test_a_lock_path_that_is_no_lock_file_of_its_own_is_a_usage_error(
    golden: pytest.Pytester, env: FakeLLMServer, what: str
) -> None:
    """A FIFO at the lock's path crashed the run (INTERNALERROR from ftruncate); a hard
    link to another file had that file overwritten with a process id. Both are refused,
    the other file left as it was, and nothing is submitted."""
    env.batch.behave(polls=0)
    golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini").assert_outcomes(passed=6)
    (folder,) = {d.parent for d in run_dirs(golden)}
    lock = folder / ".agenteval-batch.lock"
    lock.unlink()
    victim = golden.path / "victim.txt"
    victim.write_text("keep me\n")
    if what == "fifo":
        os.mkfifo(lock)
    else:
        os.link(victim, lock)
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    result.stderr.fnmatch_lines(
        ["*batch judging: *.agenteval-batch.lock is not a lock file of its own*"]
    )
    assert victim.read_text() == "keep me\n"
    assert len(env.batch.created) == 1


def test_a_wait_shorter_than_the_poll_interval_is_kept(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    import time

    env.batch.behave(polls=10_000)
    start = time.monotonic()
    result = golden.runpytest(
        "-m",
        "calibration",
        "--judge-batch",
        "--judge-batch-poll=60",
        "--judge-batch-wait=0.2",
        "--judge=openai:gpt-4o-mini",
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert time.monotonic() - start < 30, "the wait ran to the poll interval (60 s)"


# --------------------------------------------------------------------------- live calibration
# (the same golden set graded live: the run's limits hold as for benchmark items)


def test_a_live_calibration_run_stops_calling_once_the_budget_is_spent(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    # each grade: 100 prompt and 20 completion tokens at $1 and $2 per million = $0.00014
    result = golden.runpytest(
        "-m",
        "calibration",
        "--judge=openai:gpt-4o-mini",
        "--agenteval-concurrency=1",
        "--agenteval-max-cost=0.0003",
    )
    # $0.00028 spent after two: a third at their price would pass the budget
    assert len(live_calls(env)) == 2
    result.assert_outcomes(passed=2, errors=4)
    result.stdout.fnmatch_lines(["*cal-2: judge error*cost budget of $0.0003 reached*"])


def test_a_live_calibration_run_keeps_the_concurrency_limit(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    handler, seen = in_flight_counter(grader, 0.05)
    env.set_handler(handler)
    judges = ["--judge=openai:gpt-4o-mini", "--judge=openai:gpt-4.1-mini", "--judge=openai:gpt-4o"]
    result = golden.runpytest("-m", "calibration", *judges, "--agenteval-concurrency=2")
    result.assert_outcomes(passed=6)
    assert len(live_calls(env)) == 18
    assert seen["max"] == 2


def test_live_reasks_after_a_batch_stop_at_the_budget(
    golden: pytest.Pytester, env: FakeLLMServer
) -> None:
    """The batch's grades are charged as the batch phase collects them (at the batch
    price), so the budget they spend stops the live, full-price re-asks of invalid ones."""

    def handler(req: RecordedRequest) -> Reply:
        if req.batch_id is not None:  # every batch answer breaks the contract: prose + JSON
            return Reply.content("My grade: " + json.dumps(_grade(req, 92))).with_usage(100, 20)
        return grader(req)

    env.set_handler(handler)
    # six batch answers at half price: 6 x $0.00007 = $0.00042, over the budget
    result = golden.runpytest(*BATCH, "--judge=openai:gpt-4o-mini", "--agenteval-max-cost=0.0002")
    assert live_calls(env) == []
    result.assert_outcomes(errors=6)
    result.stdout.fnmatch_lines(["*cost budget of $0.0002 reached*"])


def test_a_usage_error_after_a_batch_was_paid_for_still_seals_its_run(
    golden: pytest.Pytester, env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A usage error before any item started leaves no run directory, unless evidence was
    begun: here OpenAI's batch is submitted, then Anthropic refuses the key. The run that
    holds the paid batch is sealed (interrupted), so its batch.json cannot be edited
    unnoticed before the same command resumes it."""
    import fakellm

    def refused(self: Any, req: RecordedRequest) -> tuple[int, Any]:
        error = {"type": "authentication_error", "message": "invalid x-api-key"}
        return 401, {"type": "error", "error": error}

    monkeypatch.setattr(fakellm.FakeBatches, "_anthropic_create", refused)
    env.batch.behave(polls=10_000)
    judges = ["--judge=openai:gpt-4o-mini", "--judge=anthropic:claude-haiku-4-5"]
    result = golden.runpytest(*BATCH, *judges)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    (pending,) = run_dirs(golden)
    checked = verify_run(pending)
    assert checked.ok and not checked.complete
    assert "batch.json" in (pending / "SHA256SUMS").read_text()

"""The fake server's Files and Batches endpoints, driven through litellm's batch API over real HTTP."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import httpx
import pytest
from openai import AuthenticationError, BadRequestError, RateLimitError

from faithfulness_pipeline.judging.llm.card import import_litellm
from faithfulness_pipeline.testing.fakellm import (
    MALFORMED_CONTENT,
    BatchFaults,
    BatchTiming,
    ChatRequest,
    FakeLLMServer,
    FaultPlan,
    canonical_body,
    count_prompt_tokens,
    count_tokens,
)
from faithfulness_pipeline.testing.litellm_runs import run
from faithfulness_pipeline.testing.subprocess_server import served

litellm = import_litellm()
litellm.suppress_debug_info = True

KEY = "sk-test"
FAST = BatchTiming(validating_s=0.01, per_line_s=0.001, finalizing_s=0.01, cancelling_s=0.01)
QUESTIONS = ["The sky is blue.", "天空是藍色的。", "天空是蓝色的。", "하늘은 파랗다.", "Water boils at 100 °C."]
TERMINAL = {"completed", "failed", "expired", "cancelled"}


def echo_responder(request: ChatRequest) -> str:
    return json.dumps({"echo": request.messages[-1]["content"]}, ensure_ascii=False)


def line(custom_id: str, content: str, model: str = "judge-x") -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "temperature": 0}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}


def jsonl(items: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(i, ensure_ascii=False) + "\n" for i in items).encode()


def parse_jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in data.decode().splitlines()]


def conn(server: FakeLLMServer, **extra: Any) -> dict[str, Any]:
    return {"custom_llm_provider": "openai", "api_base": server.base_url, "api_key": KEY, **extra}


async def upload(server: FakeLLMServer, data: bytes) -> str:
    created = await litellm.acreate_file(file=("in.jsonl", data), purpose="batch", **conn(server))
    return str(created.id)


async def create(server: FakeLLMServer, file_id: str, **extra: Any) -> Any:
    return await litellm.acreate_batch(
        completion_window="24h", endpoint="/v1/chat/completions", input_file_id=file_id, **conn(server, **extra)
    )


async def retrieve(server: FakeLLMServer, batch_id: str) -> Any:
    return await litellm.aretrieve_batch(batch_id=batch_id, **conn(server))


async def wait_for(server: FakeLLMServer, batch_id: str, statuses: set[str], timeout_s: float = 10.0) -> Any:
    """Polls raw (cheap), then reads the batch once through litellm, whose retrieve of a finished batch
    also downloads its output file (for litellm's cost tracking)."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=10) as client:
        while (status := (await client.get(f"{server.base_url}/batches/{batch_id}")).json()["status"]) not in statuses:
            if time.monotonic() > deadline:
                raise AssertionError(f"batch {batch_id} still {status}, never {sorted(statuses)}")
            await asyncio.sleep(0.005)
    return await retrieve(server, batch_id)


async def content(server: FakeLLMServer, file_id: str) -> list[dict[str, Any]]:
    response = await litellm.afile_content(file_id=file_id, **conn(server))
    return parse_jsonl(response.content)


# litellm's file and batch calls raise the openai client's own errors (not litellm.exceptions): a 429 is
# openai.RateLimitError.


def test_batch_runs_to_completed_and_bills_like_chat() -> None:
    items = [line(f"row-{i}", q) for i, q in enumerate(QUESTIONS)]
    timing = BatchTiming(validating_s=0.1, per_line_s=0.03, finalizing_s=0.1)

    async def go() -> tuple[Any, list[str], list[int], list[dict[str, Any]]]:
        file_id = await upload(server, jsonl(items))
        created = await create(server, file_id, metadata={"run": "t1"})
        assert created.status == "validating"
        assert created.input_file_id == file_id
        statuses, completed_counts = [created.status], []
        # Polled raw: a litellm retrieve takes long enough to miss a 0.1 s phase on a busy machine.
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {KEY}"}, timeout=10) as client:
            while statuses[-1] not in TERMINAL:
                polled = (await client.get(f"{server.base_url}/batches/{created.id}")).json()
                statuses.append(polled["status"])
                if polled["status"] == "in_progress":
                    completed_counts.append(polled["request_counts"]["completed"])
                await asyncio.sleep(0.002)
        batch = await retrieve(server, created.id)
        assert batch.error_file_id is None  # no failed line, no error file
        return batch, statuses, completed_counts, await content(server, batch.output_file_id)

    with FakeLLMServer(echo_responder, batch_timing=timing) as server:
        batch, statuses, completed_counts, output = run(go())
        stats = server.stats()
    order = ["validating", "in_progress", "finalizing", "completed"]
    seen = list(dict.fromkeys(statuses))
    assert seen == [s for s in order if s in seen]  # never backwards
    assert {"validating", "in_progress", "completed"} <= set(seen)
    assert completed_counts == sorted(completed_counts)  # answered while in progress, one by one
    assert batch.id.startswith("batch_") and batch.object == "batch"
    assert batch.endpoint == "/v1/chat/completions" and batch.completion_window == "24h"
    assert batch.metadata == {"run": "t1"}
    assert batch.created_at <= batch.in_progress_at <= batch.finalizing_at <= batch.completed_at
    assert batch.expires_at == batch.created_at + 24 * 3600
    assert batch.failed_at is None and batch.cancelled_at is None and batch.errors is None
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (5, 5, 0)

    assert [row["custom_id"] for row in output] == [f"row-{i}" for i in range(5)]
    prompt_total = completion_total = 0
    for row, item in zip(output, items, strict=True):
        assert row["id"].startswith("batch_req_") and row["error"] is None
        response = row["response"]
        assert response["status_code"] == 200 and response["request_id"]
        body = response["body"]
        assert body["object"] == "chat.completion" and body["model"] == "judge-x"
        reply = body["choices"][0]["message"]["content"]
        assert reply == echo_responder(ChatRequest("judge-x", item["body"]["messages"], None, 0, None, None, False, {}))
        assert body["usage"]["prompt_tokens"] == count_prompt_tokens(item["body"]["messages"])
        assert body["usage"]["completion_tokens"] == count_tokens(reply)
        prompt_total += body["usage"]["prompt_tokens"]
        completion_total += body["usage"]["completion_tokens"]
    # Batch lines are not chat requests; their usage is billed on the batch counters.
    assert (stats.requests, stats.by_outcome, stats.billed_prompt_tokens) == (0, {}, 0)
    assert (stats.files_uploaded, stats.batches_created, stats.batch_lines) == (1, 1, 5)
    assert (stats.batch_billed_prompt_tokens, stats.batch_billed_completion_tokens) == (prompt_total, completion_total)
    assert stats.batches_by_status == {"completed": 1}


def test_line_faults_give_error_lines_and_broken_200s_and_a_resubmission_can_succeed() -> None:
    plan = FaultPlan(rate_429=0.15, rate_5xx=0.2, rate_malformed=0.15, rate_partial=0.15, seed=5, status_5xx=503)
    items = [line(f"q{i}", f"{QUESTIONS[i % 5]} #{i}") for i in range(30)]

    def expected(nth: int, subset: list[dict[str, Any]]) -> dict[str, str]:
        return {i["custom_id"]: plan.decide(canonical_body(i["body"]), nth) for i in subset}

    async def go() -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]], Any, list[dict[str, Any]]]:
        first = await wait_for(server, (await create(server, await upload(server, jsonl(items)))).id, TERMINAL)
        output, errors = await content(server, first.output_file_id), await content(server, first.error_file_id)
        failed_ids = {row["custom_id"] for row in errors}
        again = [i for i in items if i["custom_id"] in failed_ids]
        second = await wait_for(server, (await create(server, await upload(server, jsonl(again)))).id, TERMINAL)
        return first, output, errors, second, await content(server, second.output_file_id)

    with FakeLLMServer(echo_responder, faults=plan, batch_timing=FAST) as server:
        first, output, errors, second, second_output = run(go())
        stats = server.stats()
    outcomes = expected(1, items)
    assert {"ok", "429", "5xx", "malformed", "partial"} <= set(outcomes.values())
    assert first.status == "completed"
    status_of = {"429": 429, "5xx": 503}
    assert {r["custom_id"]: r["response"]["status_code"] for r in errors} == {
        cid: status_of[o] for cid, o in outcomes.items() if o in status_of
    }
    assert all(r["response"]["body"]["error"]["message"] for r in errors)
    assert {r["custom_id"] for r in output} == {cid for cid, o in outcomes.items() if o not in status_of}
    assert (first.request_counts.completed, first.request_counts.failed) == (len(output), len(errors))
    by_id = {i["custom_id"]: i for i in items}
    for row in output:
        choice = row["response"]["body"]["choices"][0]
        full = json.dumps({"echo": by_id[row["custom_id"]]["body"]["messages"][-1]["content"]}, ensure_ascii=False)
        match outcomes[row["custom_id"]]:
            case "malformed":
                assert choice["message"]["content"] == MALFORMED_CONTENT
            case "partial":
                assert choice["finish_reason"] == "length"
                assert full.startswith(choice["message"]["content"]) and choice["message"]["content"] != full
            case _:
                assert (choice["message"]["content"], choice["finish_reason"]) == (full, "stop")
    # The same body sent again is a new draw, as with chat retries.
    again_outcomes = expected(2, [by_id[r["custom_id"]] for r in errors])
    assert {r["custom_id"] for r in second_output} == {c for c, o in again_outcomes.items() if o not in status_of}
    assert second_output  # some failed line succeeded when resubmitted
    assert (second.status, second.request_counts.completed) == ("completed", len(second_output))
    assert stats.batch_lines == len(items) + len(errors)
    assert stats.requests == 0


def test_line_faults_can_differ_from_the_chat_faults() -> None:
    items = [line(f"q{i}", q) for i, q in enumerate(QUESTIONS)]
    faults = BatchFaults(line_faults=FaultPlan())  # clean batches from a server whose chat always fails

    async def go() -> Any:
        return await wait_for(server, (await create(server, await upload(server, jsonl(items)))).id, TERMINAL)

    with FakeLLMServer(echo_responder, faults=FaultPlan(rate_5xx=1.0), batch_timing=FAST, batch_faults=faults) as server:
        batch = run(go())
        server.set_batch_faults(BatchFaults())
        failing = run(go())
    assert (batch.request_counts.completed, batch.error_file_id) == (5, None)
    assert (failing.request_counts.failed, failing.output_file_id) == (5, None)


def test_cancel_keeps_the_lines_already_answered() -> None:
    items = [line(f"q{i}", q) for i, q in enumerate(QUESTIONS)]
    faults = BatchFaults(stall_after={1: 3})

    async def go() -> tuple[Any, Any, list[dict[str, Any]]]:
        created = await create(server, await upload(server, jsonl(items)))
        async with httpx.AsyncClient(timeout=10) as client:
            deadline = time.monotonic() + 10
            url = f"{server.base_url}/batches/{created.id}"
            while (await client.get(url)).json()["request_counts"]["completed"] < 3:
                assert time.monotonic() < deadline, "3 lines never answered"
                await asyncio.sleep(0.005)
        assert (await retrieve(server, created.id)).status == "in_progress"  # stalled after 3 lines
        cancelling = await litellm.acancel_batch(batch_id=created.id, **conn(server))
        final = await wait_for(server, created.id, TERMINAL)
        with pytest.raises(BadRequestError):
            await litellm.acancel_batch(batch_id=created.id, **conn(server))
        return cancelling, final, await content(server, final.output_file_id)

    with FakeLLMServer(echo_responder, batch_timing=FAST, batch_faults=faults) as server:
        cancelling, final, output = run(go())
        stats = server.stats()
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    assert final.status == "cancelled" and final.cancelled_at >= final.cancelling_at
    assert final.completed_at is None and final.error_file_id is None
    assert [r["custom_id"] for r in output] == ["q0", "q1", "q2"]
    assert (final.request_counts.total, final.request_counts.completed) == (5, 3)
    assert stats.batch_lines == 3
    assert stats.batches_by_status == {"cancelled": 1}


def test_cancel_while_validating_ends_cancelled_without_files() -> None:
    async def go() -> Any:
        created = await create(server, await upload(server, jsonl([line("a", "x")])))
        await litellm.acancel_batch(batch_id=created.id, **conn(server))
        return await wait_for(server, created.id, TERMINAL)

    with FakeLLMServer(echo_responder, batch_timing=BatchTiming(validating_s=30.0, cancelling_s=0.0)) as server:
        final = run(go())
    assert (final.status, final.in_progress_at, final.output_file_id, final.error_file_id) == (
        "cancelled", None, None, None,
    )  # fmt: skip


def test_expiry_keeps_partial_results_and_lists_the_rest_as_batch_expired() -> None:
    items = [line(f"q{i}", q) for i, q in enumerate(QUESTIONS)]

    async def go() -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]], Any]:
        file_id = await upload(server, jsonl(items))
        expired = await wait_for(server, (await create(server, file_id)).id, TERMINAL)
        output, errors = await content(server, expired.output_file_id), await content(server, expired.error_file_id)
        later = await wait_for(server, (await create(server, file_id)).id, TERMINAL)  # ordinal 2: no rule
        return expired, output, errors, later

    with FakeLLMServer(echo_responder, batch_timing=FAST, batch_faults=BatchFaults(expire_after={1: 2})) as server:
        expired, output, errors, later = run(go())
        stats = server.stats()
    assert expired.status == "expired" and expired.expired_at is not None and expired.completed_at is None
    assert [r["custom_id"] for r in output] == ["q0", "q1"]
    assert [r["custom_id"] for r in errors] == ["q2", "q3", "q4"]
    for row in errors:
        assert row["response"] is None
        assert row["error"]["code"] == "batch_expired" and row["error"]["message"]
        assert row["id"].startswith("batch_req_")
    assert later.status == "completed" and later.request_counts.completed == 5
    assert stats.batch_lines == 7
    assert stats.batches_by_status == {"expired": 1, "completed": 1}


def test_bad_input_fails_validation_naming_each_line() -> None:
    good = [line("a", "x"), line("b", "y")]
    wrong_url = {**line("d", "w"), "url": "/v1/embeddings"}
    no_model = line("e", "v")
    del no_model["body"]["model"]
    data = (
        jsonl(good)
        + b'{"custom_id": "c", not json\n'
        + jsonl([line("a", "dup"), wrong_url, no_model, line("f", "u", model="other-model"), {**line("g", "t"), "method": "GET"}])
    )  # fmt: skip

    async def go() -> tuple[Any, Any, Any]:
        bad = await wait_for(server, (await create(server, await upload(server, data))).id, TERMINAL)
        good_file = await upload(server, jsonl(good))
        ok = await wait_for(server, (await create(server, good_file)).id, TERMINAL)  # ordinal 2
        injected = await wait_for(server, (await create(server, good_file)).id, TERMINAL)  # ordinal 3
        return bad, ok, injected

    with FakeLLMServer(echo_responder, batch_timing=FAST, batch_faults=BatchFaults(fail_validation={3})) as server:
        bad, ok, injected = run(go())
        stats = server.stats()
    assert bad.status == "failed" and bad.failed_at is not None and bad.in_progress_at is None
    assert bad.output_file_id is None and bad.error_file_id is None
    found = [(e.line, e.code) for e in bad.errors.data]
    assert found == [
        (3, "invalid_json_line"),
        (4, "duplicate_custom_id"),
        (5, "invalid_url"),
        (6, "missing_required_parameter"),
        (7, "mismatched_model"),
        (8, "invalid_method"),
    ]
    assert all(f"line {e.line}" in e.message for e in bad.errors.data)
    assert ok.status == "completed"
    assert injected.status == "failed" and injected.errors.data[0].message
    assert stats.batch_lines == 2
    assert stats.batches_by_status == {"failed": 2, "completed": 1}


def test_create_rejects_unknown_files_and_wrong_purpose() -> None:
    async def go() -> None:
        with pytest.raises(BadRequestError):
            await create(server, "file-does-not-exist")
        other = await litellm.acreate_file(file=("x.jsonl", b"{}\n"), purpose="fine-tune", **conn(server))
        with pytest.raises(BadRequestError):
            await create(server, other.id)

    with FakeLLMServer(echo_responder, batch_timing=FAST) as server:
        run(go())
        assert server.stats().batches_created == 0


def test_429_on_create_then_the_openai_client_retries_through() -> None:
    async def go() -> Any:
        file_id = await upload(server, jsonl([line("a", "한국어 질문")]))
        with pytest.raises(RateLimitError):
            await create(server, file_id, max_retries=0)
        raw = httpx.post(
            f"{server.base_url}/batches",
            json={"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
            headers={"Authorization": f"Bearer {KEY}"},
        )
        assert raw.status_code == 429
        assert (raw.headers["retry-after"], raw.headers["retry-after-ms"]) == ("0.05", "50")
        server.set_batch_faults(BatchFaults(create_429=2, retry_after_s=0.01))
        batch = await create(server, file_id, max_retries=2)  # two 429s, then accepted
        return await wait_for(server, batch.id, TERMINAL)

    with FakeLLMServer(echo_responder, batch_timing=FAST, batch_faults=BatchFaults(create_429=2)) as server:
        batch = run(go())
        stats = server.stats()
    assert batch.status == "completed"
    assert (stats.batch_create_429, stats.batches_created) == (4, 1)


def test_files_endpoints_auth_prefixes_and_counters_reset() -> None:
    data = jsonl([line("a", "天空是藍色的。"), line("b", "하늘은 파랗다.")])

    async def go() -> tuple[Any, bytes, Any]:
        with pytest.raises(AuthenticationError):
            await litellm.acreate_file(
                file=("in.jsonl", data), purpose="batch", **{**conn(server), "api_key": "wrong"}
            )
        file_id = await upload(server, data)
        meta = await litellm.afile_retrieve(file_id=file_id, **conn(server))
        raw = await litellm.afile_content(file_id=file_id, **conn(server))
        batch = await wait_for(server, (await create(server, file_id)).id, TERMINAL)
        return meta, raw.content, batch

    with FakeLLMServer(echo_responder, api_key=KEY, batch_timing=FAST) as server:
        meta, raw_bytes, batch = run(go())
        root = server.base_url.removesuffix("/v1")
        auth = {"Authorization": f"Bearer {KEY}"}
        without_prefix = httpx.get(f"{root}/batches/{batch.id}", headers=auth, timeout=10)
        denied = httpx.get(f"{server.base_url}/batches/{batch.id}", timeout=10)
        missing = httpx.get(f"{server.base_url}/files/file-nope", headers=auth, timeout=10)
        listed = httpx.get(f"{server.base_url}/batches", headers=auth, timeout=10)
        counters = httpx.get(f"{root}/fakellm/stats", timeout=10).json()
        server.reset_stats()
        after_reset = server.stats()
    assert meta.object == "file" and meta.id.startswith("file-") and meta.purpose == "batch"
    assert (meta.bytes, meta.filename, meta.status) == (len(data), "in.jsonl", "processed")
    assert raw_bytes == data
    assert without_prefix.json()["status"] == "completed"
    assert denied.status_code == 401 and missing.status_code == 404
    assert [b["id"] for b in listed.json()["data"]] == [batch.id]
    assert counters["files_uploaded"] == 1 and counters["batch_lines"] == 2
    assert counters["batches_by_status"] == {"completed": 1}
    assert counters["requests"] == 0
    assert (after_reset.files_uploaded, after_reset.batch_lines, after_reset.batches_by_status) == (0, 0, {})


def test_subprocess_mode_serves_batches() -> None:
    with served("--port", "0", "--batch-validating-s", "0.01", "--batch-per-line-s", "0",
                "--batch-finalizing-s", "0.01") as server:  # fmt: skip
        with httpx.Client(base_url=server.base_url, timeout=10) as client:
            uploaded = client.post(
                "/files", files={"file": ("in.jsonl", jsonl([line("a", "x")]))}, data={"purpose": "batch"}
            ).json()
            batch = client.post(
                "/batches",
                json={"input_file_id": uploaded["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
            ).json()
            deadline = time.monotonic() + 10
            while batch["status"] not in TERMINAL and time.monotonic() < deadline:
                time.sleep(0.01)
                batch = client.get(f"/batches/{batch['id']}").json()
            output = parse_jsonl(client.get(f"/files/{batch['output_file_id']}/content").content)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=10) == 0
    assert batch["status"] == "completed"
    assert output[0]["response"]["body"]["choices"][0]["message"]["content"] == '{"ok": true}'

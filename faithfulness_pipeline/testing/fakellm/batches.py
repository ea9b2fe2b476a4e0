"""OpenAI's Files and Batches endpoints for the fake server: a batch of chat requests answered offline.

A batch moves by time (``BatchTiming``) through validating -> in_progress -> finalizing -> completed,
or ends failed (its input file does not validate), cancelled (``POST .../cancel``) or expired. Each
line is answered by the server's own responder with the same token counting, and meets the same
``FaultPlan`` outcomes as the chat endpoint, decided from the line's body and how often that body was
seen in batches: a 429 / 5xx / hang outcome becomes a line of the error file, "malformed" / "partial"
a 200 line with broken content. ``BatchFaults`` adds batch-level faults, all deterministic.

Every batch runs as one asyncio task on the server's loop; state changes happen on that loop, and
counters are read under a lock from any thread. Its input and output files are kept by the Files endpoints
(``files.py``) and read and written as ``batch_format.py`` says.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.batch_format import (
    CHAT_ENDPOINT,
    BatchLine,
    batch_object,
    jsonl_line,
    line_response,
    short_hash,
    validate_input,
    validation_error,
)
from faithfulness_pipeline.testing.fakellm.faults import BatchFaults, BatchTiming, FaultPlan
from faithfulness_pipeline.testing.fakellm.files import FileStore, now
from faithfulness_pipeline.testing.fakellm.wire import (
    ReplyMaker,
    canonical_body,
    error_body,
    format_seconds,
    json_error,
    unauthorized,
)

EXPIRED_MESSAGE: Final = "This request could not be executed before the completion window expired."
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True)
class BatchCounters:
    files_uploaded: int
    file_content_downloads: int  # GET /v1/files/{id}/content answered 200
    batches_created: int
    batch_create_429: int
    batch_lines: int  # lines answered (200 or error), unanswered expired lines not included
    batch_billed_prompt_tokens: int  # usage of every 200 line
    batch_billed_completion_tokens: int
    batch_billed_cached_prompt_tokens: int
    batches_by_status: dict[str, int]  # current status of the batches created since the last reset


@dataclass
class _Batch:
    obj: dict[str, Any]
    ordinal: int
    epoch: int  # the reset generation it was created in
    input_data: bytes
    wake: asyncio.Event
    output: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    @property
    def status(self) -> str:
        return str(self.obj["status"])



class BatchService:
    """The Batches endpoints, and the Files endpoints of its store; the server owns one and registers their routes."""

    def __init__(
        self,
        make_reply: ReplyMaker,
        chat_faults: Callable[[], FaultPlan],
        *,
        api_key: str | None,
        timing: BatchTiming,
        faults: BatchFaults,
    ) -> None:
        self._make_reply = make_reply
        self._chat_faults = chat_faults
        self._api_key = api_key
        self._timing = timing
        self._faults = faults
        self._lock = threading.Lock()
        self._files = FileStore(api_key)
        self._batches: dict[str, _Batch] = {}
        self._epoch = 0
        self._ordinal = 0  # batches created since the faults were set
        self._creates_seen = 0  # POST /v1/batches since the faults were set
        self._body_counts: dict[bytes, int] = {}
        self._counts: collections.Counter[str] = collections.Counter()

    # ------------------------------------------------------------------------------- settings

    def set_timing(self, timing: BatchTiming) -> None:
        self._timing = timing

    def set_faults(self, faults: BatchFaults) -> None:
        with self._lock:
            self._faults = faults
            self._ordinal = 0
            self._creates_seen = 0

    def counters(self) -> BatchCounters:
        with self._lock:
            c = self._counts
            by_status = collections.Counter(b.status for b in self._batches.values() if b.epoch == self._epoch)
            return BatchCounters(
                files_uploaded=self._files.count("files_uploaded"),
                file_content_downloads=self._files.count("file_content_downloads"),
                batches_created=c["batches_created"],
                batch_create_429=c["batch_create_429"],
                batch_lines=c["batch_lines"],
                batch_billed_prompt_tokens=c["prompt_tokens"],
                batch_billed_completion_tokens=c["completion_tokens"],
                batch_billed_cached_prompt_tokens=c["cached_prompt_tokens"],
                batches_by_status=dict(by_status),
            )

    def reset(self) -> None:
        """Zeroes the counters and the per-body arrival counts; batch ordinals start again at 1.

        Files and batches stay (a batch still running keeps running and can still be read).
        """
        self._files.reset()
        with self._lock:
            self._counts.clear()
            self._body_counts.clear()
            self._epoch += 1
            self._ordinal = 0
            self._creates_seen = 0

    def add_routes(self, router: web.UrlDispatcher) -> None:
        self._files.add_routes(router)
        for prefix in ("/v1", ""):
            router.add_post(f"{prefix}/batches", self._create_batch)
            router.add_get(f"{prefix}/batches", self._list_batches)
            router.add_get(f"{prefix}/batches/{{batch_id}}", self._get_batch)
            router.add_post(f"{prefix}/batches/{{batch_id}}/cancel", self._cancel_batch)

    async def shutdown(self) -> None:
        tasks = [b.task for b in self._batches.values() if b.task is not None and not b.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)

    # ---------------------------------------------------------------------------------- batches

    async def _create_batch(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        with self._lock:
            faults = self._faults
            self._creates_seen += 1
            rejected = self._creates_seen <= faults.create_429
            if rejected:
                self._counts["batch_create_429"] += 1
        if rejected:
            headers: dict[str, str] = {}
            if faults.retry_after_s is not None:
                headers["Retry-After"] = format_seconds(faults.retry_after_s)
                headers["retry-after-ms"] = str(round(faults.retry_after_s * 1000))
            body = error_body(
                "Too many batches are being created. Please try again later.", "requests", "rate_limit_exceeded"
            )
            return web.json_response(body, status=429, headers=headers)
        try:
            payload = await request.json()
        except ValueError:
            return json_error(400, "the body must be JSON")
        if not isinstance(payload, dict):
            return json_error(400, "the body must be a JSON object")
        if payload.get("endpoint") != CHAT_ENDPOINT:
            return json_error(400, f"endpoint must be {CHAT_ENDPOINT!r} (the only one served)", "endpoint")
        if payload.get("completion_window") != "24h":
            return json_error(400, "completion_window must be '24h'", "completion_window")
        metadata = payload.get("metadata")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            return json_error(400, "metadata must be an object of strings", "metadata")
        file_id = payload.get("input_file_id")
        input_file = self._files.get(file_id) if isinstance(file_id, str) else None
        if input_file is None:
            return json_error(400, f"No such File object: {file_id}", "input_file_id")
        if input_file.purpose != "batch":
            return json_error(400, f"the input file's purpose is {input_file.purpose!r}, not 'batch'", "input_file_id")

        batch_id = self._files.new_id("batch_")
        created = now()
        obj = batch_object(batch_id, input_file.id, metadata, created)
        with self._lock:
            self._ordinal += 1
            batch = _Batch(obj, self._ordinal, self._epoch, input_file.data, asyncio.Event())
            self._batches[batch_id] = batch
            self._counts["batches_created"] += 1
            snapshot = json.loads(json.dumps(obj))
        batch.task = asyncio.get_running_loop().create_task(self._run(batch, faults))
        return web.json_response(snapshot)

    def _find_batch(self, request: web.Request) -> _Batch | web.Response:
        batch_id = request.match_info["batch_id"]
        with self._lock:
            found = self._batches.get(batch_id)
        if found is None:
            return json_error(404, f"No such Batch object: {batch_id}", "batch_id")
        return found

    def _snapshot(self, batch: _Batch) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(batch.obj))  # type: ignore[no-any-return]

    async def _get_batch(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        found = self._find_batch(request)
        return found if isinstance(found, web.Response) else web.json_response(self._snapshot(found))

    async def _list_batches(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        with self._lock:
            batches = list(reversed(self._batches.values()))  # newest first, as OpenAI lists them
        data = [self._snapshot(b) for b in batches]
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": False,
            }
        )

    async def _cancel_batch(self, request: web.Request) -> web.Response:
        if (denied := unauthorized(request, self._api_key)) is not None:
            return denied
        found = self._find_batch(request)
        if isinstance(found, web.Response):
            return found
        with self._lock:
            status = found.status
            if status in TERMINAL_STATUSES or status == "finalizing":  # its results are being written
                return json_error(400, f"Cannot cancel a batch with status '{status}'.")
            if status != "cancelling":
                found.obj["status"] = "cancelling"
                found.obj["cancelling_at"] = now()
        found.wake.set()
        return web.json_response(self._snapshot(found))

    # ------------------------------------------------------------------------------ the worker

    def _set(self, batch: _Batch, **fields: Any) -> None:
        with self._lock:
            batch.obj.update(fields)

    async def _pause(self, batch: _Batch, seconds: float | None) -> None:
        """Sleeps ``seconds`` (None: forever), ended early by a cancel."""
        if batch.wake.is_set():
            return
        if seconds == 0:
            await asyncio.sleep(0)  # still let requests (a cancel) in between lines
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(batch.wake.wait(), timeout=seconds)

    def _cancelled(self, batch: _Batch) -> bool:
        return batch.status == "cancelling"

    async def _run(self, batch: _Batch, faults: BatchFaults) -> None:
        timing = self._timing
        await self._pause(batch, timing.validating_s)
        if self._cancelled(batch):
            await self._finish_cancelled(batch)
            return
        lines, errors = validate_input(batch.input_data)
        if batch.ordinal in faults.fail_validation:
            errors = [validation_error("invalid_request", "fakellm: this batch was set to fail validation", None)]
        if errors:
            with self._lock:
                batch.obj.update(status="failed", failed_at=now(), errors={"object": "list", "data": errors})
            return
        self._set(batch, status="in_progress", in_progress_at=now(), request_counts=_counts(len(lines), 0, 0))
        expire_k = faults.expire_after.get(batch.ordinal)
        stall_k = faults.stall_after.get(batch.ordinal)
        line_faults = faults.line_faults
        for done, line in enumerate(lines):
            if expire_k is not None and done >= expire_k:
                self._expire(batch, lines[done:])
                return
            if stall_k is not None and done >= stall_k:
                await self._pause(batch, None)
            else:
                await self._pause(batch, self._timing.per_line_s)
            if self._cancelled(batch):
                await self._finish_cancelled(batch)
                return
            self._answer(batch, line, line_faults or self._chat_faults())
        self._set(batch, status="finalizing", finalizing_at=now())
        await asyncio.sleep(self._timing.finalizing_s)  # a cancel this late is too late, as with OpenAI
        self._write_files(batch)
        self._set(batch, status="completed", completed_at=now())

    async def _finish_cancelled(self, batch: _Batch) -> None:
        await asyncio.sleep(self._timing.cancelling_s)
        self._write_files(batch)
        self._set(batch, status="cancelled", cancelled_at=now())

    def _expire(self, batch: _Batch, unanswered: list[BatchLine]) -> None:
        for line in unanswered:
            batch.errors.append(
                {
                    "id": self._request_id(batch, line),
                    "custom_id": line.custom_id,
                    "response": None,
                    "error": {"code": "batch_expired", "message": EXPIRED_MESSAGE},
                }
            )
        self._write_files(batch)
        self._set(batch, status="expired", expired_at=now())

    def _write_files(self, batch: _Batch) -> None:
        # Like OpenAI, a file is made only when it has lines.
        batch_id = batch.obj["id"]
        fields: dict[str, Any] = {}
        for key, rows, suffix in (("output_file_id", batch.output, "output"), ("error_file_id", batch.errors, "error")):
            if rows:
                data = "".join(jsonl_line(r) for r in rows).encode()
                fields[key] = self._files.add(f"{batch_id}_{suffix}.jsonl", "batch_output", data).id
        self._set(batch, **fields)

    def _request_id(self, batch: _Batch, line: BatchLine) -> str:
        seed = f"{batch.obj['id']}:{line.number}".encode()
        return f"batch_req_{short_hash(seed)}"

    def _answer(self, batch: _Batch, line: BatchLine, faults: FaultPlan) -> None:
        key = canonical_body(line.body)
        with self._lock:
            nth = self._body_counts.get(key, 0) + 1
            self._body_counts[key] = nth
        status, body, usage = line_response(line.body, key, nth, faults, self._make_reply)
        row = {
            "id": self._request_id(batch, line),
            "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": f"req_{short_hash(key)}_{nth}", "body": body},
            "error": None,
        }
        with self._lock:
            self._counts["batch_lines"] += 1
            counts = batch.obj["request_counts"]
            if status == 200:
                batch.output.append(row)
                counts["completed"] += 1
                self._counts["prompt_tokens"] += usage[0]
                self._counts["completion_tokens"] += usage[1]
                self._counts["cached_prompt_tokens"] += usage[2]
            else:
                batch.errors.append(row)
                counts["failed"] += 1


def _counts(total: int, completed: int, failed: int) -> dict[str, int]:
    return {"total": total, "completed": completed, "failed": failed}


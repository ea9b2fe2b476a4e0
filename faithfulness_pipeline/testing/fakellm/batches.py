"""OpenAI's Files and Batches endpoints for the fake server: a batch of chat requests answered offline.

A batch moves by time (``BatchTiming``) through validating -> in_progress -> finalizing -> completed,
or ends failed (its input file does not validate), cancelled (``POST .../cancel``) or expired. Each
line is answered by the server's own responder with the same token counting, and meets the same
``FaultPlan`` outcomes as the chat endpoint, decided from the line's body and how often that body was
seen in batches: a 429 / 5xx / hang outcome becomes a line of the error file, "malformed" / "partial"
a 200 line with broken content. ``BatchFaults`` adds batch-level faults, all deterministic.

Every batch runs as one asyncio task on the server's loop; state changes happen on that loop, and
counters are read under a lock from any thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.server import (
    ChatRequest,
    FaultPlan,
    _completion,
    _error_body,
    _format_seconds,
    _parse_chat_request,
    _Reply,
    canonical_body,
)

CHAT_ENDPOINT: Final = "/v1/chat/completions"
_FILE_PURPOSES: Final = frozenset({"batch", "fine-tune", "assistants", "vision", "user_data", "evals"})
_COMPLETION_WINDOW_S: Final = 24 * 3600
EXPIRED_MESSAGE: Final = "This request could not be executed before the completion window expired."
TERMINAL_STATUSES: Final = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True)
class BatchTiming:
    """How long each phase lasts, in seconds (tests run a 24 h window in a fraction of a second)."""

    validating_s: float = 0.05
    per_line_s: float = 0.002  # before each line is answered, while in_progress
    finalizing_s: float = 0.05
    cancelling_s: float = 0.05  # from "cancelling" to "cancelled", once the current line is done

    def __post_init__(self) -> None:
        if min(self.validating_s, self.per_line_s, self.finalizing_s, self.cancelling_s) < 0:
            raise ValueError("batch phase durations must be >= 0")


@dataclass(frozen=True)
class BatchFaults:
    """Batch-level faults. Ordinals are 1-based and count the batches created since these faults were
    set (construction, ``set_batch_faults`` or ``reset_stats``), so "the next batch" is ordinal 1.

    * ``create_429``: the first N ``POST /v1/batches`` get a 429 with ``Retry-After: retry_after_s``
      (no header when None);
    * ``fail_validation``: these batches end "failed" after validating, whatever their input;
    * ``expire_after``: ordinal -> K: the batch expires once K of its lines are answered; the output
      and error files hold what was done, and every unanswered line is in the error file with the
      error code ``batch_expired``;
    * ``stall_after``: ordinal -> K: after K lines the batch makes no progress until it is cancelled
      (for deterministic cancel tests);
    * ``line_faults``: the FaultPlan for batch lines; None uses the server's chat FaultPlan.
    """

    create_429: int = 0
    retry_after_s: float | None = 0.05
    fail_validation: Set[int] = frozenset()
    expire_after: Mapping[int, int] = field(default_factory=dict)
    stall_after: Mapping[int, int] = field(default_factory=dict)
    line_faults: FaultPlan | None = None

    def __post_init__(self) -> None:
        # Accept any iterable of ordinals (a set literal, a list) and keep the object immutable.
        object.__setattr__(self, "fail_validation", frozenset(self.fail_validation))
        object.__setattr__(self, "expire_after", dict(self.expire_after))
        object.__setattr__(self, "stall_after", dict(self.stall_after))
        if self.create_429 < 0:
            raise ValueError("create_429 must be >= 0")
        if self.retry_after_s is not None and self.retry_after_s < 0:
            raise ValueError("retry_after_s must be >= 0 or None")
        ordinals: Iterable[int] = [*self.fail_validation, *self.expire_after, *self.stall_after]
        if any(n < 1 for n in ordinals):
            raise ValueError("batch ordinals are 1-based")
        if any(k < 0 for k in [*self.expire_after.values(), *self.stall_after.values()]):
            raise ValueError("line counts must be >= 0")


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
class _File:
    id: str
    filename: str
    purpose: str
    data: bytes
    created_at: int

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
            "expires_at": None,
        }


@dataclass
class _Line:
    number: int  # 1-based line of the input file
    custom_id: str
    body: dict[str, Any]


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


#: Answers one parsed chat request with an outcome ("ok", "malformed", "partial"): the chat path's own.
ReplyMaker = Callable[[ChatRequest, str], _Reply]


def _now() -> int:
    return int(time.time())


def _short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:24]


def _json_error(status: int, message: str, param: str | None = None, code: str | None = None) -> web.Response:
    body = _error_body(message, "invalid_request_error", code)
    body["error"]["param"] = param
    return web.json_response(body, status=status)


class BatchService:
    """The Files and Batches endpoints; the server owns one and registers its routes."""

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
        self._files: dict[str, _File] = {}
        self._batches: dict[str, _Batch] = {}
        self._seq = 0
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
                files_uploaded=c["files_uploaded"],
                file_content_downloads=c["file_content_downloads"],
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
        with self._lock:
            self._counts.clear()
            self._body_counts.clear()
            self._epoch += 1
            self._ordinal = 0
            self._creates_seen = 0

    def add_routes(self, router: web.UrlDispatcher) -> None:
        for prefix in ("/v1", ""):
            router.add_post(f"{prefix}/files", self._upload)
            router.add_get(f"{prefix}/files", self._list_files)
            router.add_get(f"{prefix}/files/{{file_id}}", self._get_file)
            router.add_delete(f"{prefix}/files/{{file_id}}", self._delete_file)
            router.add_get(f"{prefix}/files/{{file_id}}/content", self._file_content)
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

    # ---------------------------------------------------------------------------------- helpers

    def _next_id(self, prefix: str) -> str:
        with self._lock:
            self._seq += 1
            return f"{prefix}fake{self._seq:020d}"

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self._api_key is None or request.headers.get("Authorization") == f"Bearer {self._api_key}":
            return None
        body = _error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        return web.json_response(body, status=401)

    def _add_file(self, filename: str, purpose: str, data: bytes) -> _File:
        stored = _File(self._next_id("file-"), filename, purpose, data, _now())
        with self._lock:
            self._files[stored.id] = stored
        return stored

    # ------------------------------------------------------------------------------------ files

    async def _upload(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        try:
            form = await request.post()
        except ValueError as exc:
            return _json_error(400, f"expected a multipart form with 'file' and 'purpose': {exc}")
        upload, purpose = form.get("file"), form.get("purpose")
        if not isinstance(purpose, str) or purpose not in _FILE_PURPOSES:
            return _json_error(400, f"purpose must be one of {sorted(_FILE_PURPOSES)}", "purpose")
        if isinstance(upload, web.FileField):
            data, filename = upload.file.read(), upload.filename
        elif isinstance(upload, str):  # a form field without a filename
            data, filename = upload.encode(), "upload"
        else:
            return _json_error(400, "the form has no 'file' part", "file")
        stored = self._add_file(filename, purpose, data)
        with self._lock:
            self._counts["files_uploaded"] += 1
        return web.json_response(stored.as_json())

    def _find_file(self, request: web.Request) -> _File | web.Response:
        file_id = request.match_info["file_id"]
        with self._lock:
            found = self._files.get(file_id)
        if found is None:
            return _json_error(404, f"No such File object: {file_id}", "id")
        return found

    async def _list_files(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        with self._lock:
            data = [f.as_json() for f in self._files.values()]
        return web.json_response({"object": "list", "data": data, "has_more": False})

    async def _get_file(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        found = self._find_file(request)
        return found if isinstance(found, web.Response) else web.json_response(found.as_json())

    async def _delete_file(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        found = self._find_file(request)
        if isinstance(found, web.Response):
            return found
        with self._lock:
            self._files.pop(found.id, None)
        return web.json_response({"id": found.id, "object": "file", "deleted": True})

    async def _file_content(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        found = self._find_file(request)
        if isinstance(found, web.Response):
            return found
        with self._lock:
            self._counts["file_content_downloads"] += 1
        return web.Response(body=found.data, content_type="application/octet-stream")

    # ---------------------------------------------------------------------------------- batches

    async def _create_batch(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
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
                headers["Retry-After"] = _format_seconds(faults.retry_after_s)
                headers["retry-after-ms"] = str(round(faults.retry_after_s * 1000))
            body = _error_body(
                "Too many batches are being created. Please try again later.", "requests", "rate_limit_exceeded"
            )
            return web.json_response(body, status=429, headers=headers)
        try:
            payload = await request.json()
        except ValueError:
            return _json_error(400, "the body must be JSON")
        if not isinstance(payload, dict):
            return _json_error(400, "the body must be a JSON object")
        if payload.get("endpoint") != CHAT_ENDPOINT:
            return _json_error(400, f"endpoint must be {CHAT_ENDPOINT!r} (the only one served)", "endpoint")
        if payload.get("completion_window") != "24h":
            return _json_error(400, "completion_window must be '24h'", "completion_window")
        metadata = payload.get("metadata")
        if metadata is not None and not (
            isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())
        ):
            return _json_error(400, "metadata must be an object of strings", "metadata")
        file_id = payload.get("input_file_id")
        with self._lock:
            input_file = self._files.get(file_id) if isinstance(file_id, str) else None
        if input_file is None:
            return _json_error(400, f"No such File object: {file_id}", "input_file_id")
        if input_file.purpose != "batch":
            return _json_error(400, f"the input file's purpose is {input_file.purpose!r}, not 'batch'", "input_file_id")

        batch_id = self._next_id("batch_")
        created = _now()
        obj: dict[str, Any] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": CHAT_ENDPOINT,
            "errors": None,
            "input_file_id": input_file.id,
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": created,
            "in_progress_at": None,
            "expires_at": created + _COMPLETION_WINDOW_S,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": 0, "completed": 0, "failed": 0},
            "metadata": metadata,
        }
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
            return _json_error(404, f"No such Batch object: {batch_id}", "batch_id")
        return found

    def _snapshot(self, batch: _Batch) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(batch.obj))  # type: ignore[no-any-return]

    async def _get_batch(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        found = self._find_batch(request)
        return found if isinstance(found, web.Response) else web.json_response(self._snapshot(found))

    async def _list_batches(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
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
        if (denied := self._unauthorized(request)) is not None:
            return denied
        found = self._find_batch(request)
        if isinstance(found, web.Response):
            return found
        with self._lock:
            status = found.status
            if status in TERMINAL_STATUSES or status == "finalizing":  # its results are being written
                return _json_error(400, f"Cannot cancel a batch with status '{status}'.")
            if status != "cancelling":
                found.obj["status"] = "cancelling"
                found.obj["cancelling_at"] = _now()
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
            errors = [_validation_error("invalid_request", "fakellm: this batch was set to fail validation", None)]
        if errors:
            with self._lock:
                batch.obj.update(status="failed", failed_at=_now(), errors={"object": "list", "data": errors})
            return
        self._set(batch, status="in_progress", in_progress_at=_now(), request_counts=_counts(len(lines), 0, 0))
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
        self._set(batch, status="finalizing", finalizing_at=_now())
        await asyncio.sleep(self._timing.finalizing_s)  # a cancel this late is too late, as with OpenAI
        self._write_files(batch)
        self._set(batch, status="completed", completed_at=_now())

    async def _finish_cancelled(self, batch: _Batch) -> None:
        await asyncio.sleep(self._timing.cancelling_s)
        self._write_files(batch)
        self._set(batch, status="cancelled", cancelled_at=_now())

    def _expire(self, batch: _Batch, unanswered: list[_Line]) -> None:
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
        self._set(batch, status="expired", expired_at=_now())

    def _write_files(self, batch: _Batch) -> None:
        # Like OpenAI, a file is made only when it has lines.
        batch_id = batch.obj["id"]
        fields: dict[str, Any] = {}
        for key, rows, suffix in (("output_file_id", batch.output, "output"), ("error_file_id", batch.errors, "error")):
            if rows:
                data = "".join(_jsonl_line(r) for r in rows).encode()
                fields[key] = self._add_file(f"{batch_id}_{suffix}.jsonl", "batch_output", data).id
        self._set(batch, **fields)

    def _request_id(self, batch: _Batch, line: _Line) -> str:
        seed = f"{batch.obj['id']}:{line.number}".encode()
        return f"batch_req_{_short_hash(seed)}"

    def _answer(self, batch: _Batch, line: _Line, faults: FaultPlan) -> None:
        key = canonical_body(line.body)
        with self._lock:
            nth = self._body_counts.get(key, 0) + 1
            self._body_counts[key] = nth
        status, body, usage = self._respond(line.body, key, nth, faults)
        row = {
            "id": self._request_id(batch, line),
            "custom_id": line.custom_id,
            "response": {"status_code": status, "request_id": f"req_{_short_hash(key)}_{nth}", "body": body},
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

    def _respond(
        self, body: dict[str, Any], key: bytes, nth: int, faults: FaultPlan
    ) -> tuple[int, dict[str, Any], tuple[int, int, int]]:
        """(status, body, (prompt, completion, cached prompt tokens)) of one line, as the chat endpoint would
        answer it."""
        try:
            chat = _parse_chat_request(body)
        except (ValueError, TypeError, KeyError) as exc:
            return 400, _error_body(f"invalid request: {exc}", "invalid_request_error", None), (0, 0, 0)
        outcome = faults.decide(key, nth)
        if outcome in ("429", "429_no_retry_after"):
            message = "Rate limit reached for requests. Please try again later."
            return 429, _error_body(message, "requests", "rate_limit_exceeded"), (0, 0, 0)
        if outcome in ("5xx", "hang"):  # a line that never answers is a server error in a batch
            message = "The server had an error while processing your request."
            return faults.status_5xx, _error_body(message, "server_error", None), (0, 0, 0)
        try:
            reply = self._make_reply(chat, outcome)
        except Exception as exc:  # a broken responder is a test bug: make it loud
            traceback.print_exc(file=sys.stderr)
            return 500, _error_body(f"responder raised {exc!r}", "server_error", "responder_error"), (0, 0, 0)
        completion_id = f"chatcmpl-fake-{_short_hash(key)[:12]}-{nth}-batch"
        usage = (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens or 0)
        return 200, _completion(completion_id, chat.model, reply), usage


def _counts(total: int, completed: int, failed: int) -> dict[str, int]:
    return {"total": total, "completed": completed, "failed": failed}


def _validation_error(code: str, message: str, line: int | None, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": line}


def validate_input(data: bytes) -> tuple[list[_Line], list[dict[str, Any]]]:
    """The lines of a batch input file, or the errors that fail it (each naming its 1-based line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [], [_validation_error("invalid_file_format", "the input file is not UTF-8", None)]
    raw_lines = text.split("\n")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()  # the newline that ends the last line
    if not raw_lines:
        return [], [_validation_error("empty_file", "the input file has no lines", None)]
    lines: list[_Line] = []
    errors: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    model: str | None = None
    for number, raw in enumerate(raw_lines, start=1):
        try:
            item = json.loads(raw)
        except ValueError:
            errors.append(_validation_error("invalid_json_line", f"line {number} is not valid JSON", number))
            continue
        if not isinstance(item, dict):
            errors.append(_validation_error("invalid_json_line", f"line {number} is not a JSON object", number))
            continue
        custom_id, body = item.get("custom_id"), item.get("body")
        problem: tuple[str, str, str | None] | None = None
        if not isinstance(custom_id, str) or not custom_id:
            problem = ("missing_required_parameter", "custom_id is required", "custom_id")
        elif custom_id in seen_ids:
            problem = ("duplicate_custom_id", f"custom_id {custom_id!r} is used more than once", "custom_id")
        elif item.get("method") != "POST":
            problem = ("invalid_method", "method must be 'POST'", "method")
        elif item.get("url") != CHAT_ENDPOINT:
            problem = ("invalid_url", f"url must be {CHAT_ENDPOINT!r}, the batch's endpoint", "url")
        elif not isinstance(body, dict):
            problem = ("missing_required_parameter", "body must be a JSON object", "body")
        elif not isinstance(body.get("model"), str) or not body["model"]:
            problem = ("missing_required_parameter", "body.model is required", "body.model")
        elif not isinstance(body.get("messages"), list):
            problem = ("missing_required_parameter", "body.messages must be a list", "body.messages")
        elif model is not None and body["model"] != model:
            problem = ("mismatched_model", f"every line must use model {model!r}", "body.model")
        if problem is not None:
            code, message, param = problem
            errors.append(_validation_error(code, f"line {number}: {message}", number, param))
            continue
        assert isinstance(custom_id, str) and isinstance(body, dict)
        seen_ids.add(custom_id)
        model = model or body["model"]
        lines.append(_Line(number, custom_id, body))
    return lines, errors


def _jsonl_line(row: dict[str, Any]) -> str:
    """One output line, UTF-8 as OpenAI writes it; a lone surrogate in a reply (not UTF-8 at all) goes out as
    its JSON escape, as a provider's JSON carries it."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        text = json.dumps(row)
    return text + "\n"

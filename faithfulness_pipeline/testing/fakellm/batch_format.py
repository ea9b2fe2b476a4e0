"""A batch as OpenAI's API shows it: its input file, JSON Lines of chat requests checked line by line before it
runs (:func:`validate_input`), the batch object (:func:`batch_object`), the response to each line, as the chat
endpoint would answer it (:func:`line_response`), and the lines of its output and error files
(:func:`jsonl_line`).
"""

from __future__ import annotations

import hashlib
import json
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Final

from faithfulness_pipeline.testing.fakellm.faults import FaultPlan
from faithfulness_pipeline.testing.fakellm.wire import ReplyMaker, completion_body, error_body, parse_chat_request

CHAT_ENDPOINT: Final = "/v1/chat/completions"
_COMPLETION_WINDOW_S: Final = 24 * 3600


@dataclass
class BatchLine:
    number: int  # 1-based line of the input file
    custom_id: str
    body: dict[str, Any]


def validation_error(code: str, message: str, line: int | None, param: str | None = None) -> dict[str, Any]:
    """One of the ``errors`` of a batch that failed validation."""
    return {"code": code, "message": message, "param": param, "line": line}


def validate_input(data: bytes) -> tuple[list[BatchLine], list[dict[str, Any]]]:
    """The lines of a batch input file, or the errors that fail it (each naming its 1-based line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return [], [validation_error("invalid_file_format", "the input file is not UTF-8", None)]
    raw_lines = text.split("\n")
    if raw_lines and raw_lines[-1] == "":
        raw_lines.pop()  # the newline that ends the last line
    if not raw_lines:
        return [], [validation_error("empty_file", "the input file has no lines", None)]
    lines: list[BatchLine] = []
    errors: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    model: str | None = None
    for number, raw in enumerate(raw_lines, start=1):
        try:
            item = json.loads(raw)
        except ValueError:
            errors.append(validation_error("invalid_json_line", f"line {number} is not valid JSON", number))
            continue
        if not isinstance(item, dict):
            errors.append(validation_error("invalid_json_line", f"line {number} is not a JSON object", number))
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
            errors.append(validation_error(code, f"line {number}: {message}", number, param))
            continue
        assert isinstance(custom_id, str) and isinstance(body, dict)
        seen_ids.add(custom_id)
        model = model or body["model"]
        lines.append(BatchLine(number, custom_id, body))
    return lines, errors


def jsonl_line(row: dict[str, Any]) -> str:
    """One output line, UTF-8 as OpenAI writes it; a lone surrogate in a reply (not UTF-8 at all) goes out as
    its JSON escape, as a provider's JSON carries it."""
    text = json.dumps(row, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:
        text = json.dumps(row)
    return text + "\n"


def batch_object(batch_id: str, input_file_id: str, metadata: dict[str, str] | None, created: int) -> dict[str, Any]:
    """A new batch, as ``POST /v1/batches`` answers it: validating, every later time still unset."""
    return {
        "id": batch_id,
        "object": "batch",
        "endpoint": CHAT_ENDPOINT,
        "errors": None,
        "input_file_id": input_file_id,
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


def short_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:24]


def line_response(
    body: dict[str, Any], key: bytes, nth: int, faults: FaultPlan, make_reply: ReplyMaker
) -> tuple[int, dict[str, Any], tuple[int, int, int]]:
    """(status, body, (prompt, completion, cached prompt tokens)) of one line, as the chat endpoint would
    answer it; ``key`` is its canonical body, seen for the ``nth`` time in batches."""
    try:
        chat = parse_chat_request(body)
    except (ValueError, TypeError, KeyError) as exc:
        return 400, error_body(f"invalid request: {exc}", "invalid_request_error", None), (0, 0, 0)
    outcome = faults.decide(key, nth)
    if outcome in ("429", "429_no_retry_after"):
        message = "Rate limit reached for requests. Please try again later."
        return 429, error_body(message, "requests", "rate_limit_exceeded"), (0, 0, 0)
    if outcome in ("5xx", "hang"):  # a line that never answers is a server error in a batch
        message = "The server had an error while processing your request."
        return faults.status_5xx, error_body(message, "server_error", None), (0, 0, 0)
    try:
        reply = make_reply(chat, outcome)
    except Exception as exc:  # a broken responder is a test bug: make it loud
        traceback.print_exc(file=sys.stderr)
        return 500, error_body(f"responder raised {exc!r}", "server_error", "responder_error"), (0, 0, 0)
    completion_id = f"chatcmpl-fake-{short_hash(key)[:12]}-{nth}-batch"
    usage = (reply.prompt_tokens, reply.completion_tokens, reply.cached_tokens or 0)
    return 200, completion_body(completion_id, chat.model, reply), usage

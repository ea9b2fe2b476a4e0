"""A batch line's items as the ledger keeps them, the plan over them, and a batch's replies as they are read.

Kept apart from the judge (``batch.judge``) and the ingest (``batch.ingest``) because both a submission
and an ingest of a killed run's batch go through them: what is written into the ledger must read back
into the very same items, tries and spending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from faithfulness_pipeline.core.port import (
    ERROR_CHARS,
    NO_USAGE,
    ExtractItem,
    ExtractResult,
    Usage,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.llm.batch.api import BatchView
from faithfulness_pipeline.judging.llm.plans import ExtractPlan, Plan, Sizing, VerdictPlan
from faithfulness_pipeline.judging.llm.replies import cached_prompt_tokens, reported_tokens
from faithfulness_pipeline.judging.llm.valid_text import valid_text
from faithfulness_pipeline.judging.store.codec import encode_claims, encode_verdicts

Item = ExtractItem | VerdictItem

#: Sendings of an item at most, in retry budgets (unanswered lines do not count as failed tries).
MAX_ROUNDS_FACTOR: Final = 4


@dataclass(slots=True)
class Pending:
    """An item this run still needs, how often it was sent and failed, and the last unusable reply of a
    lone item. Lines the provider left unanswered (expired, rate limited) are sent again without counting
    as a failed try, within :data:`MAX_ROUNDS_FACTOR` times the retry budget."""

    item: Item
    tries: int = 0  # failed tries: error lines and replies that did not validate
    sent: int = 0
    spent: Usage = NO_USAGE
    reason: str = ""
    repair: tuple[str, str] | None = None

    def out_of_tries(self, max_retries: int) -> bool:
        """Whether the item is given up on: ``max_retries`` failed tries spent, or sent too often in all."""
        return self.tries > max_retries or self.sent >= MAX_ROUNDS_FACTOR * (max_retries + 1)


def plan_of(sizing: Sizing, step: str, items: Sequence[Item]) -> Plan[Any]:
    """The plan of ``step`` over all of ``items``: the one that packs them for a submission, and the one
    that renders and parses a line's items again when its reply is read."""
    indices = range(len(items))
    if step == "extract":
        return ExtractPlan(sizing, items, indices)  # type: ignore[arg-type]
    return VerdictPlan(sizing, items, indices)  # type: ignore[arg-type]


def serialise(key: bytes, pending: Pending) -> dict[str, Any]:
    item = pending.item
    out: dict[str, Any] = {"key": key.hex(), "id": item.id, "q": item.question, "tries": pending.tries,
                           "sent": pending.sent,
                           "spent": [pending.spent.llm_calls, pending.spent.prompt_tokens,
                                     pending.spent.completion_tokens, pending.spent.cost_usd,
                                     pending.spent.cached_prompt_tokens]}
    if isinstance(item, ExtractItem):
        out["a"] = item.answer
    else:
        out["c"], out["p"] = list(item.claims), list(item.context)
    if pending.repair is not None:
        out["repair"] = list(pending.repair)
    return out



def progress_line(step: str, views: list[BatchView], running: int) -> str:
    states: dict[str, int] = {}
    for view in views:
        states[view.status] = states.get(view.status, 0) + 1
    done = sum(v.completed for v in views)
    failed = sum(v.failed for v in views)
    total = sum(v.total for v in views)
    listed = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return (f"batch ({step}): {listed or 'no answer yet'}; {done}/{total} requests done, {failed} failed; "
            f"{running} running")


def reply_of(entry: dict[str, Any] | None, view: BatchView) -> tuple[str | None, str, tuple[int, int, int], int]:
    """(why the line has no usable reply or None, the reply text, (prompt, completion, cached prompt) tokens, 1 when the
    failure counts as a failed try, 0 when the provider left the line unanswered: expired, cancelled or
    rate limited)."""
    if entry is None:
        return f"no reply in batch {view.id} ({view.status})", "", (0, 0, 0), 0
    error = entry.get("error")
    response = entry.get("response") or {}
    body = response.get("body") or {}
    status = response.get("status_code")
    if error or status != 200:
        detail = error or body.get("error") or f"status {status}"
        code = detail.get("code") if isinstance(detail, dict) else None
        text = detail.get("message") or code if isinstance(detail, dict) else detail
        unanswered = code == "batch_expired" or status == 429
        return f"batch line failed: {valid_text(str(text))[:ERROR_CHARS]}", "", (0, 0, 0), 0 if unanswered else 1
    try:
        message = body["choices"][0]["message"]
        content = message["content"]
    except (KeyError, IndexError, TypeError):
        message, content = None, None
    usage = body.get("usage") or {}
    # A count that cannot be (negative, not a number, beyond any window) bills nothing rather than a wrong sum.
    prompt = reported_tokens(usage, "prompt_tokens")[0] or 0
    tokens = (prompt, reported_tokens(usage, "completion_tokens")[0] or 0, cached_prompt_tokens(usage, prompt))
    refusal = message.get("refusal") if isinstance(message, dict) and content is None else None
    if isinstance(refusal, str) and refusal.strip():  # the model's words are the reason, not "not JSON"
        return f"the model refused: {valid_text(' '.join(refusal.split()))[:ERROR_CHARS]}", "", tokens, 1
    # Valid Unicode from here on: the text is parsed, and a lone item's is kept in the ledger for its repair.
    return None, valid_text(content) if isinstance(content, str) else "", tokens, 1


def deserialise(step: str, data: dict[str, Any]) -> Pending:
    item: Item
    if step == "extract":
        item = ExtractItem(data["id"], data["a"], data.get("q"))
    else:
        item = VerdictItem(data["id"], tuple(data["c"]), tuple(data["p"]), data.get("q"))
    # Ledger lines written before cached prompt tokens were counted hold four numbers.
    calls, prompt, completion, cost, *cached = data.get("spent") or [0.0, 0, 0, 0.0]
    repair = data.get("repair")
    spent = Usage(calls, prompt, completion, cost, int(cached[0]) if cached else 0)
    return Pending(item, int(data.get("tries", 0)), int(data.get("sent", 0)), spent,
                    repair=None if repair is None else (repair[0], repair[1]))


def encode(result: ExtractResult | VerdictResult, usage: Usage) -> str | None:
    """The stored value of a result, with ``usage`` (what producing it cost over all its tries)."""
    if isinstance(result, ExtractResult):
        return None if result.claims is None else encode_claims(result.claims, usage)
    return None if result.verdicts is None else encode_verdicts(result.verdicts, usage, result.context_truncated)


def error_result(step: str, item_id: str, reason: str, spent: Usage) -> ExtractResult | VerdictResult:
    reason = valid_text(reason)
    if step == "extract":
        return ExtractResult(item_id, None, reason, spent, billed=spent)
    return VerdictResult(item_id, None, reason, spent, billed=spent)

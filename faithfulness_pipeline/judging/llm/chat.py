"""One chat request of a pack, the same whether it is sent now (``requests.Sender``) or as a line of a
provider batch (``batch.judge``): its messages, how long a reply it allows, the schema its reply is held
to, and the body that carries them. Built here once, so the two modes cannot drift apart: a batch result
serves a later interactive run under the same key only because both asked the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from faithfulness_pipeline.judging.llm.packing import REPLY_SLACK_TOKENS
from faithfulness_pipeline.judging.llm.plans import Plan, repair_messages

if TYPE_CHECKING:
    from faithfulness_pipeline.judging.llm.card import ModelCard
    from faithfulness_pipeline.judging.llm.part_settings import Sampling


@dataclass(frozen=True, slots=True)
class Chat:
    """One request of a plan's items, ready to be sent."""

    messages: list[dict[str, str]]  # the plan's rendering, then the repair messages (if any)
    repair: list[dict[str, str]]  # the repair messages alone: their tokens are not in the plan's counts
    id_map: dict[str, int]  # the reply's ids -> the plan's item indices
    context: Any  # what the plan needs to parse the reply
    max_tokens: int
    schema: dict[str, Any] | None  # the reply's JSON schema, where the model takes one (``ModelCard.json_schema``)


def chat_of(plan: Plan[Any], indices: Sequence[int], card: ModelCard, repair: tuple[str, str] | None = None,
            attempt: int = 1) -> Chat:
    """``indices`` of ``plan`` as one request; ``repair`` (the last unusable reply and what was wrong with
    it) is quoted back, marked as try ``attempt``."""
    rendered, id_map, context = plan.render(indices)
    extra = [] if repair is None else repair_messages(*repair, attempt=attempt)
    # The reply each item is expected to need, and a little slack, never more than the model may write.
    max_tokens = min(plan.sizing.limits.max_output_tokens,
                     REPLY_SLACK_TOKENS + sum(plan.entries[i].output_tokens for i in indices))
    schema = plan.response_format(id_map, exact=card.exact_schema) if card.json_schema else None
    return Chat([*rendered, *extra], extra, id_map, context, max_tokens, schema)


def chat_body(model: str, messages: list[dict[str, str]], sampling: Sampling, max_tokens: int,
              response_format: dict[str, Any] | None) -> dict[str, Any]:
    """The body of a chat completion request: what changes the reply, nothing of how it is sent."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": sampling.temperature,
        "max_tokens": max_tokens,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    if response_format is not None:
        body["response_format"] = response_format
    return body

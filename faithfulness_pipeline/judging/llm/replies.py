"""What came back of a request: the reply the judge parses, read from litellm's response, a streamed
reply's pieces or the JSON of a batch output line alike, with the tokens it used.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Final

from faithfulness_pipeline.judging.llm.valid_text import valid_text


@dataclass(frozen=True, slots=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int
    #: why a reply that came back holds no answer to parse (the model refused, no choices, null content);
    #: None for a reply with content. Asking the same request again would get the same reply.
    unanswered: str | None = None
    #: of ``prompt_tokens``, those the provider served from its prompt cache (and bills at its cached price)
    cached_prompt_tokens: int = 0


@dataclass(slots=True)
class Answer:
    """What came back of one request, whole or streamed: enough to say what it holds and what it cost."""

    #: whether the reply had any choice (a streamed one: whether any piece had one)
    choices: bool
    text: str | None = None
    refusal: str | None = None
    finish_reason: str | None = None
    usage: Any = None
    #: a streamed reply's pieces of text and of refusal, joined when it has ended
    pieces: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)

    @staticmethod
    def of(response: Any) -> Answer:
        """A whole reply: litellm's response, or the JSON of a completion (a dict)."""
        choices = field_of(response, "choices")
        if not choices or not isinstance(choices, list):
            return Answer(choices=False, usage=field_of(response, "usage"))
        message = field_of(choices[0], "message")
        return Answer(choices=True, text=field_of(message, "content"), refusal=field_of(message, "refusal"),
                       finish_reason=field_of(choices[0], "finish_reason"), usage=field_of(response, "usage"))

    def add(self, chunk: Any) -> str:
        """Takes one streamed chunk in; returns the reply text it carried ("" for none)."""
        usage = getattr(chunk, "usage", None)
        if usage is not None:
            self.usage = usage
        choices = getattr(chunk, "choices", None)
        if not choices:
            return ""
        self.choices = True
        choice = choices[0]
        delta = getattr(choice, "delta", None)
        text = getattr(delta, "content", None)
        refusal = getattr(delta, "refusal", None)
        if isinstance(refusal, str) and refusal:
            self.refused.append(refusal)
        finish = getattr(choice, "finish_reason", None)
        if finish is not None:
            self.finish_reason = finish
        if not isinstance(text, str):
            return ""
        # Content, if only "" (a first piece that names the role): a reply whose content is "" is an empty
        # answer, as a whole one would be, not a null one.
        self.text = ""
        self.pieces.append(text)
        return text

    def content(self) -> tuple[str, str | None]:
        """The reply's text, and why it holds no answer when it holds none (None when it has content)."""
        if not self.choices:
            return "", "no answer: the reply has no choices (a content filter, or a proxy that drops them)"
        content = "".join(self.pieces) if self.pieces else self.text
        refusal = "".join(self.refused) if self.refused else self.refusal
        refused = isinstance(refusal, str) and bool(refusal.strip())
        # A refusal streams beside a content of "" at most (the piece naming the role): that is no answer.
        if isinstance(content, str) and (content or not refused):
            # Valid Unicode from here on: the reply is counted, quoted back in a repair message and parsed.
            return valid_text(content), None
        if refused and isinstance(refusal, str):
            return "", f"the model refused: {valid_text(' '.join(refusal.split()))}"
        if self.finish_reason == "content_filter":
            return "", "no answer: the provider's content filter withheld it"
        return "", "no answer: the reply's content is null"


class NotAStream(Exception):
    """A reply to a streamed request that is neither a stream nor a completion; its text is quoted."""


def whole_answer(body: str) -> Answer:
    """A completion that came whole to a streamed request, read as the unstreamed request would have been."""
    try:
        completion = json.loads(body)
    except ValueError:
        completion = None
    if not isinstance(completion, dict) or "choices" not in completion:
        raise NotAStream(f"the server answered a streamed request with no stream and no completion: {body[:2000]}")
    return Answer.of(completion)



def int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


#: More tokens than one request can hold on any model: a usage count above it is not believed (10^18 tokens
#: would wrap a day's Int64 sums negative).
MAX_REPORTED_TOKENS: Final = 100_000_000


def reported_tokens(usage: Any, name: str) -> tuple[int | None, str | None]:
    """The count ``usage`` reports under ``name`` if it can be one (a whole number from 0 to
    :data:`MAX_REPORTED_TOKENS`; a float with no fraction counts), else None and what was refused, as
    ``name=value``, for the judge's notes. No count at all is (None, None): nothing to refuse."""
    value = field_of(usage, name)
    if value is None:
        return None, None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPORTED_TOKENS:
        return value, None
    return None, f"{name}={str(value)[:40]}"


def field_of(value: Any, name: str) -> Any:
    """``name`` of an object litellm made, or of the JSON it would have been made from."""
    return value.get(name) if isinstance(value, dict) else getattr(value, name, None)


def cached_prompt_tokens(usage: Any, prompt: int) -> int:
    """The prompt tokens a reply's ``usage`` says were served from the provider's prompt cache: OpenAI's
    ``prompt_tokens_details.cached_tokens``, where litellm also puts Anthropic's ``cache_read_input_tokens``
    and DeepSeek's ``prompt_cache_hit_tokens`` (a dict in a batch output line, an object from litellm).
    Never more than the ``prompt`` tokens billed, never negative: a count that cannot be is not believed."""

    cached = reported_tokens(field_of(usage, "prompt_tokens_details"), "cached_tokens")[0] or 0
    return cached if cached <= prompt else 0

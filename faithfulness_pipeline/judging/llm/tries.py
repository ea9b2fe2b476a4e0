"""How often the items of a pack have been tried, and when the judge gives up on them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

#: 429s are the server asking for patience, not a broken request: they get a larger retry budget.
RATE_LIMIT_RETRY_FACTOR: Final = 4
#: An answer alone whose model gives the same unusable reply this many times in a row, word for word, is not
#: asked again: two repair messages quoting it changed nothing, and at temperature 0 the next would not either
#: (Gemma 3 270M looped inside the same claim seven times over).
SAME_REPLIES: Final = 3


@dataclass(frozen=True, slots=True)
class Tries:
    """How often the items of a pack have been sent and failed; sub-packs inherit it."""

    sent: int = 0
    errors: int = 0  # failed requests and invalid replies
    limited: int = 0  # 429 replies
    #: (the unusable reply, what was wrong with it): quoted in the next request of the same items
    repair: tuple[str, str] | None = None
    #: how many times in a row the items got that very reply (1: once)
    repeated: int = 0

    def sending(self) -> Tries:
        return replace(self, sent=self.sent + 1)

    def failed(self, rate_limited: bool) -> Tries:
        if rate_limited:
            return replace(self, limited=self.limited + 1)
        return replace(self, errors=self.errors + 1)

    def unusable_reply(self, reply: str, why: str) -> Tries:
        same = self.repair is not None and self.repair[0] == reply
        return replace(self, repair=(reply, why), repeated=self.repeated + 1 if same else 1)

    def exhausted(self, max_retries: int) -> bool:
        return self.errors > max_retries or self.limited > RATE_LIMIT_RETRY_FACTOR * max(1, max_retries)

    def gave_up(self, reason: str) -> str:
        return f"gave up after {self.sent} requests: {reason}"

"""A model that never follows the reply format, found out in a few requests instead of seven per answer.

Each item is re-asked up to ``max_retries`` times when its part of a reply cannot be used (a smaller pack, or a
repair message quoting what was wrong): right for a model that slips now and then, a waste for one that never
writes the format at all. Gemma 3 270M behind llama.cpp, one answer a request, loops inside a claim until its
reply is cut, every time: 17 answers took up to seven cut replies each, and 2 rows were done after 9 minutes.

What counts, per step (claims and verdicts each have a format of their own):

- a reply is *usable* when at least one item of it validated;
- a reply is *unusable* when it came back with content and not one of its items validated: not JSON, cut
  before its first item, or every item refused (a wrong number of verdicts, a sentence missing, ...);
- a failed request (429, 5xx, a timeout, no connection) and a reply with nothing to read (a refusal, no
  choices, null content) are neither: they say nothing of whether the model can write the format.

Until a step has had one usable reply, the model has not shown that it can write the format, and:

- an answer alone whose replies are unusable is asked twice more at most (with the repair message), not
  ``max_retries`` times: a model that can write the format mends a slip in one or two repairs;
- its unusable replies are counted, and the answers they held; at :data:`TRIP_REPLIES` replies over at least
  :data:`TRIP_ANSWERS` different answers (so that a few answers failing fast cannot outrun the replies still
  coming) the model is taken not to follow the format: nothing more is sent, the requests in flight are given
  up (their connections closed, so a server of one's own stops generating), every item not judged by then
  becomes an error row saying so in one line, with the first characters of the model's last reply, and the
  run's notes say it once.

One usable reply of a step ends this for the rest of the run: from then on a reply that cannot be used is that
item's, retried as before.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Final

from faithfulness_pipeline.judging.llm.valid_text import valid_text

#: Unusable replies, with no usable reply of the step, that stop the run. A model that can write the format
#: and fails one reply in five (a small model's rate here) gives eight in a row once in 390,000 runs; on
#: llama.cpp's four slots, one answer a request, they are its first two rounds of replies.
TRIP_REPLIES: Final = 8
#: Different answers those replies must have held at least (an answer alone is asked 3 times while unproven).
TRIP_ANSWERS: Final = 4
#: Re-sends of an answer alone whose reply was unusable, while the step has had no usable reply.
UNPROVEN_RETRIES: Final = 2
#: How much of the model's last reply the error quotes.
QUOTED_CHARS: Final = 80
_STEPS: Final = {"extract": "claims", "verdict": "verdicts"}


@dataclass(slots=True)
class FormatBreaker:
    """A run's count of its steps' unusable replies until their first usable one (see the module)."""

    model: str
    redact: Callable[[str], str]
    #: steps that have had a usable reply: never tripped, and retried as the settings say
    proven: set[str] = field(default_factory=set)
    #: per step, its unusable replies so far and the items they held
    counted: dict[str, int] = field(default_factory=dict)
    failed_items: dict[str, set[str]] = field(default_factory=dict)
    tripped: str | None = None

    def usable(self, step: str) -> None:
        self.proven.add(step)
        self.failed_items.pop(step, None)

    def retries(self, step: str, max_retries: int) -> int:
        """Re-sends of an answer alone whose reply was unusable."""
        return max_retries if step in self.proven else min(max_retries, UNPROVEN_RETRIES)

    def unusable_reply(self, step: str, item_ids: Collection[str], text: str, why: str) -> str | None:
        """Counts one unusable reply of ``step`` over ``item_ids``; returns the reason every item not yet judged
        ends with, the first time (and only then) that the count reaches :data:`TRIP_REPLIES`. The quote comes
        first: an error row keeps ``ERROR_CHARS``, and what the model wrote is what tells."""
        if step in self.proven or self.tripped is not None:
            return None
        seen = self.failed_items.setdefault(step, set())
        if len(seen) < TRIP_ANSWERS:  # beyond, which items they are no longer matters
            seen.update(item_ids)
        self.counted[step] = count = self.counted.get(step, 0) + 1
        if count < TRIP_REPLIES or len(seen) < TRIP_ANSWERS:
            return None
        self.tripped = (
            f"not scored: {self.model} does not follow the reply format: its last reply began {self._quoted(text)} "
            f"(none of its first {count} {_STEPS[step]} replies could be used; the last: "
            f"{valid_text(self.redact(why))})"
        )
        return self.tripped

    def note(self) -> str | None:
        """The run's note once the breaker has tripped: the reason, and what it means for the user."""
        if self.tripped is None:
            return None
        return (f"{self.tripped}; no further request was sent: judging needs a model that writes the JSON "
                "replies the prompt asks for (a larger one), or one served with the schema enforced")

    def _quoted(self, text: str) -> str:
        """The reply's first characters on one line, secrets scrubbed, quoted."""
        flat = " ".join(valid_text(self.redact(text)).split())
        cut = flat[:QUOTED_CHARS]
        return f"'{cut}{'...' if len(flat) > QUOTED_CHARS else ''}'" if flat else "'' (nothing)"

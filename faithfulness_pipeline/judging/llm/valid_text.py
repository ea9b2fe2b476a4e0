"""Text from a model made valid Unicode where it enters the judge, and a count of the rows it changed.

A model in JSON mode that stops inside an emoji writes half of its UTF-16 surrogate pair (the escape
``\\ud83d`` without its partner); a provider's JSON carries the same half into the reply's content.
Python keeps such a lone surrogate in a ``str``, but nothing that writes UTF-8 (Arrow, Parquet, SQLite,
a log file) can: one of them in one claim used to end the whole run. So every string that comes back from
a model (reply content, the claims, reasons and codes decoded from it, error and refusal texts; interactive
and batch) goes through :func:`valid_text` at the parse boundary, and each lone surrogate becomes U+FFFD
(the replacement character, ``\N{REPLACEMENT CHARACTER}``) in place.

The U+FFFD in the claim or reason is the row's marker: it stands exactly where text was lost. A U+FFFD the
reply held already (a provider that replaced undecodable bytes itself) marks the same loss and is counted
the same way. How many rows hold such text is one note of the run (:class:`TextRepairs`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

REPLACEMENT: Final = "\ufffd"
#: How many row ids the run's note names.
NOTE_IDS: Final = 3


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (a stray but complete pair is joined).

    ASCII and valid text (every reply of a healthy run) cost one pass in C and come back as they are.
    """
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 with surrogatepass round-trips every code point; decoding then joins what pairs up and
        # replaces, one U+FFFD each, what does not.
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def checked(text: str) -> tuple[str, bool]:
    """``(valid_text(text), whether the result holds U+FFFD)``: the parse boundary's view of one string."""
    if text.isascii():
        return text, False
    fixed = valid_text(text)
    return fixed, REPLACEMENT in fixed


@dataclass(slots=True)
class TextRepairs:
    """Rows whose judge text held replaced characters, for the run's note."""

    count: int = 0
    ids: list[str] = field(default_factory=list)

    def add(self, item_id: str) -> None:
        self.count += 1
        if len(self.ids) < NOTE_IDS:
            self.ids.append(valid_text(item_id))

    def note(self) -> str | None:
        if not self.count:
            return None
        more = ", ..." if self.count > len(self.ids) else ""
        return (
            f"{self.count} results hold judge text that was not valid Unicode (a lone UTF-16 surrogate, e.g. an "
            f"emoji cut in half): each bad character is U+FFFD ({REPLACEMENT}) in that claim or reason "
            f"(ids {', '.join(self.ids)}{more})"
        )

"""Evidence pointers that name no passage: the rule that reads them, and the count of how often it did.

A verdict code may end in the number of the passage that decided it (``S0``, ``C1|...``); the prompt numbers
an item's passages from 0. A real small model (Qwen2.5-Coder-1.5B behind llama.cpp) counts them from 1 now and
then, and an item with one passage then gets ``S1``. Failing the item for it threw away verdicts that were
there, and asking again cost up to ``max_retries`` paid requests for the same slip. The pointer is shown in
the outputs (the claim table's passage, the report), so a repair that picks the wrong passage would be worse
than no pointer. The rule:

- a pointer that names a passage of the item is taken as it is;
- ``1`` for an item that has exactly one passage is read as that passage (``0``): there is no other it can
  point at, so a count from 1 is the only reading that names a passage at all;
- any other pointer past the item's last passage is dropped: the verdict is kept without evidence (as an
  ``S`` with no number is), since with two passages or more a count from 1 cannot be told from a wrong number.

The verdict, the speculative mark and the reason are never touched. How many pointers were read either way is
one note of the run (:class:`EvidenceRepairs`), so that a model that counts from 1 shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from faithfulness_pipeline.judging.llm.valid_text import valid_text

#: What became of a pointer that named no passage: read as the item's only passage, or dropped.
Repair = Literal["only_passage", "dropped"]
#: How many item ids the run's note names.
NOTE_IDS: Final = 3


def read_evidence(evidence: int | None, n_passages: int) -> tuple[int | None, Repair | None]:
    """The passage ``evidence`` names among ``n_passages`` (the module's rule), and the repair it took (None:
    none was needed)."""
    if evidence is None or evidence < n_passages:
        return evidence, None
    if n_passages == 1 and evidence == 1:
        return 0, "only_passage"
    return None, "dropped"


@dataclass(slots=True)
class EvidenceRepairs:
    """Pointers that named no passage, over a run: how many were read as an item's only passage, how many
    were dropped, and the first items they belonged to, for the run's note."""

    only_passage: int = 0
    dropped: int = 0
    items: int = 0
    ids: list[str] = field(default_factory=list)

    def add(self, item_id: str, repairs: tuple[int, int]) -> None:
        """Counts one item's repairs: ``(read as its only passage, dropped)``."""
        if not any(repairs):
            return
        self.only_passage += repairs[0]
        self.dropped += repairs[1]
        self.items += 1
        if len(self.ids) < NOTE_IDS:
            self.ids.append(valid_text(item_id))

    def note(self) -> str | None:
        total = self.only_passage + self.dropped
        if not total:
            return None
        more = ", ..." if self.items > len(self.ids) else ""
        return (
            f"{total} evidence pointers named no passage of their item (the prompt numbers passages from 0): "
            f"{self.only_passage} read as the item's only passage (the model counted from 1), {self.dropped} "
            f"dropped (the claim keeps its verdict, without evidence); no verdict was lost or asked again "
            f"(items {', '.join(self.ids)}{more})"
        )

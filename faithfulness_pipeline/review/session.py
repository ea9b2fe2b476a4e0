"""A review of one queue, apart from the web: what a reviewer sees of an answer, their labels written to the
label store, undo, progress and their agreement with the others. The page (``review.app``) is a thin layer of
HTTP over it.

Blind by construction: :meth:`ReviewSession.view` puts the judge's result in a view only when the store holds
this reviewer's label of the answer; before that the view is built from :meth:`Item.shown`, which holds no
score, verdict, reason or judge. Each reviewer sees their own labels only.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any, Final

from faithfulness_pipeline.core.agreement import reviewer_agreement
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.review.items import Item
from faithfulness_pipeline.review.store import CLAIM_VERDICTS, Label, LabelStore, faithfulness_of

#: Longest reviewer name; a name is what the store keys labels by, not a place for prose.
MAX_NAME: Final = 64


class ReviewError(InputError):
    """A request the review cannot take (an answer outside the queue, a bad claim mark): said to the page."""


def checked_reviewer(name: str | None) -> str:
    """A reviewer's name as the store keeps it: trimmed, 1 to 64 characters, no control characters (any
    script: reviewers write their names as they do)."""
    text = (name or "").strip()
    if not text or len(text) > MAX_NAME or any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in text):
        raise ReviewError(f"a reviewer's name is 1 to {MAX_NAME} characters, without control characters")
    return text


def _label_view(label: Label) -> dict[str, Any]:
    return {"hallucinated": label.label_hallucinated, "faithfulness": label.label_faithfulness,
            "claims": [{"claim_index": c["claim_index"], "verdict": c["verdict"]} for c in label.claim_labels],
            "labelled_at": label.labelled_at.isoformat(timespec="seconds")}


class ReviewSession:
    """The queue's answers (in its order) and the store their labels go to."""

    def __init__(self, items: Sequence[Item], store: LabelStore) -> None:
        self.items = list(items)
        self.store = store
        self._index = {item.row_key: item.index for item in self.items}

    @property
    def total(self) -> int:
        return len(self.items)

    def _mine(self, reviewer: str) -> dict[str, Label]:
        """The reviewer's labels of this queue's answers."""
        return {key: label for key, label in self.store.of_reviewer(reviewer).items() if key in self._index}

    def _item(self, index: int) -> Item:
        if not 0 <= index < self.total:
            raise ReviewError(f"no answer {index} in this queue of {self.total}")
        return self.items[index]

    # ------------------------------------------------------------------------------- reading

    def view(self, reviewer: str, index: int) -> dict[str, Any]:
        """Answer ``index`` as ``reviewer`` may see it now: with their label and the judge's result once they
        labelled it, blind before."""
        item = self._item(index)
        mine = self._mine(reviewer)
        label = mine.get(item.row_key)
        return {"item": item.shown(), "label": None if label is None else _label_view(label),
                "judge": None if label is None else dict(item.judged), "progress": self._progress(reviewer, mine)}

    def next_index(self, reviewer: str, after: int | None = None) -> int | None:
        """The first answer after ``after`` the reviewer has not labelled (from the start of the queue again
        when none is left after it); None when every answer is labelled."""
        mine = self._mine(reviewer)
        start = -1 if after is None else after
        order = [*range(start + 1, self.total), *range(0, min(start + 1, self.total))]
        return next((i for i in order if self.items[i].row_key not in mine), None)

    def progress(self, reviewer: str) -> dict[str, Any]:
        return self._progress(reviewer, self._mine(reviewer))

    def _progress(self, reviewer: str, mine: Mapping[str, Label]) -> dict[str, Any]:
        return {"labelled": len(mine), "total": self.total, "agreement": self._agreement(reviewer)}

    def _agreement(self, reviewer: str) -> list[dict[str, Any]]:
        """The reviewer's agreement with each other reviewer on the answers of this queue both labelled (only
        answers this reviewer has labelled: nothing of another's label of an answer still to do)."""
        labels = self.store.frame(list(self._index))
        out = []
        for pair in reviewer_agreement(labels).pairs.iter_rows(named=True):
            if reviewer in (pair["reviewer_a"], pair["reviewer_b"]):
                other = pair["reviewer_b"] if pair["reviewer_a"] == reviewer else pair["reviewer_a"]
                out.append({"reviewer": other, "answers": pair["answers"], "agreeing": pair["agreeing"],
                            "kappa": pair["kappa"]})
        return out

    # ------------------------------------------------------------------------------- writing

    def label(self, reviewer: str, index: int, hallucinated: bool,
              claims: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """Writes the reviewer's label of answer ``index`` (replacing theirs, if any) and returns the answer's
        view, now with the judge's result. ``claims``: ``{"claim_index", "verdict"}`` of the claims marked."""
        item = self._item(index)
        marked: dict[int, str] = {}
        for claim in claims:
            position, verdict = claim.get("claim_index"), claim.get("verdict")
            if not isinstance(position, int) or isinstance(position, bool) or not 0 <= position < len(item.claims):
                raise ReviewError(f"answer {index} has {len(item.claims)} claim(s): no claim {position!r}")
            if verdict not in CLAIM_VERDICTS:
                raise ReviewError(f"a claim is {', '.join(CLAIM_VERDICTS)}; not {verdict!r}")
            marked[position] = str(verdict)
        claim_labels = tuple({"claim_index": i, "claim": item.claims[i], "verdict": v}
                             for i, v in sorted(marked.items()))
        self.store.put(Label(
            row_key=item.row_key, reviewer=reviewer, label_hallucinated=bool(hallucinated),
            label_faithfulness=faithfulness_of(claim_labels), claim_labels=claim_labels,
            content_hash=item.content_hash, scoring_run_id=item.scoring_run_id, judge_model=item.judge_model,
            prompt_version=item.prompt_version, inclusion_probability=item.inclusion_probability, source="review",
        ))
        return self.view(reviewer, index)

    def undo(self, reviewer: str) -> int | None:
        """Takes back the reviewer's latest label in this queue (the answer is to do again); its index, or None
        when they have none."""
        mine = self._mine(reviewer)
        if not mine:
            return None
        latest = max(mine.values(), key=lambda label: (label.labelled_at, self._index[label.row_key]))
        self.store.delete(latest.row_key, reviewer)
        return self._index[latest.row_key]

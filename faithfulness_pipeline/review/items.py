"""What the review page shows of each answer of a review queue: the question, the context passages, the answer
and its claims, read from the scored tables by row key (and, for a warehouse's scored table, which leaves the
passages and chat messages to ``raw_conversations``, from the raw table too); and, kept apart until the
reviewer has labelled the answer, what the judge said of it.

Only the queue's rows are read (a filter on the row key, which Parquet readers push down to the row groups).
The passages are found as the scorer found them (``core.normalize``): the judged context the raw table keeps,
else the row's context column, else a chat's tool results before the answer. A context hook or a static
context of the scoring run is code or settings the tables do not hold: such a run's passages are not shown.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.audit import INCLUSION_PROBABILITY
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.core.messages import assistant_turn_indexes, question_before, tool_results_before
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.read import READ_ERRORS, read_all, read_error, scan_input

#: What the queue gives each answer besides its key: its weight and what scored it.
QUEUE_FIELDS: Final = (INCLUSION_PROBABILITY, S.SCORING_RUN_ID, "judge_model", "prompt_version", "language")
#: The judge's result of an answer: never on the page before the reviewer has labelled it.
JUDGED: Final = ("claims", "verdicts", "hallucination_score", "faithfulness_score", "hallucination_reason",
                 "faithfulness_reason", "status")
_EXAMPLES: Final = 5


@dataclass(frozen=True, slots=True)
class Item:
    """One answer of the queue as a reviewer sees it (``shown``) and, apart, the judge's result (``judged``)."""

    index: int
    row_key: str
    question: str | None
    answer: str | None
    context: tuple[str, ...]
    claims: tuple[str, ...]
    language: str | None
    inclusion_probability: float | None
    scoring_run_id: str | None
    judge_model: str | None
    prompt_version: str | None
    #: The judge's scores, its flag (the score over the threshold), its reason and each claim's verdict.
    judged: Mapping[str, Any]

    @property
    def content_hash(self) -> str:
        """SHA-256 of the question, answer and passages the reviewer is shown (a label records it: a later
        scoring of a changed answer no longer matches)."""
        text = json.dumps([self.question, self.answer, list(self.context)], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()

    def shown(self) -> dict[str, Any]:
        """What the page may show before the answer is labelled: no score, verdict, reason or judge."""
        return {"index": self.index, "row_key": self.row_key, "question": self.question, "answer": self.answer,
                "context": list(self.context), "claims": list(self.claims), "language": self.language,
                "content_hash": self.content_hash}


def read_queue(specs: Sequence[str]) -> pl.DataFrame:
    """The queue's rows in its order (``review sample``'s file or the Dagster ``review_queue`` table: files,
    folders, globs), each answer once."""
    frames = [read_all(spec, frozenset({S.ROW_KEY})) for spec in specs]
    queue = pl.concat(frames, how="diagonal_relaxed")
    if S.ROW_KEY not in queue.columns:
        raise InputError(f"the queue has no {S.ROW_KEY!r} column (it has {queue.columns[:12]}): give the review queue "
                         "`faithfulness-pipeline review sample` writes")
    keys = queue.get_column(S.ROW_KEY).cast(pl.String)
    if keys.null_count():
        raise InputError(f"{keys.null_count()} row(s) of the queue have no {S.ROW_KEY}")
    twice = keys.filter(keys.is_duplicated()).unique().sort()
    if twice.len():
        raise InputError(f"{twice.len()} answer(s) are in the queue twice, e.g. {twice.head(_EXAMPLES).to_list()}: "
                         "give each day's queue once")
    if not queue.height:
        raise InputError("the queue is empty: nothing to review")
    return queue.with_columns(keys)


def _rows(specs: Sequence[str], keys: list[str], wanted: Sequence[str], what: str) -> dict[str, dict[str, Any]]:
    """The rows of ``keys`` in the tables ``specs`` name, with those of ``wanted`` they have; an answer found
    twice is refused (two scorings of one answer: which one was reviewed?)."""
    found: dict[str, dict[str, Any]] = {}
    for spec in specs:
        for path in resolve_inputs(spec):
            try:
                scan = scan_input(path, frozenset({S.ROW_KEY}))
                present = scan.collect_schema().names()
                if S.ROW_KEY not in present:
                    raise InputError(f"{path!r} has no {S.ROW_KEY!r} column: give {what} tables")
                columns = [S.ROW_KEY, *dict.fromkeys(c for c in wanted if c in present and c != S.ROW_KEY)]
                rows = scan.select(columns).filter(pl.col(S.ROW_KEY).cast(pl.String).is_in(keys)).collect()
            except READ_ERRORS as exc:
                raise read_error(path, exc) from exc
            for row in rows.iter_rows(named=True):
                key = str(row[S.ROW_KEY])
                if key in found:
                    raise InputError(f"the answer {key!r} is in the {what} tables twice (here in {path!r}): give each "
                                     "answer's scoring once, the one the queue was drawn from")
                found[key] = row
    return found


def _passages(value: Any) -> list[str]:
    """A context cell as passages, as the scorer reads it: a text is one passage; nulls and blanks are skipped."""
    if value is None:
        return []
    cells = [value] if isinstance(value, str) else list(value)
    return [str(p) for p in cells if p is not None and str(p).strip()]


def _texts(row: Mapping[str, Any], scoring: ScoringSettings) -> tuple[str | None, str | None, list[str]]:
    """The question, answer and passages of a scored row (merged with its raw row)."""
    question = row.get(S.QUESTION) or row.get(scoring.input_column)
    answer = row.get(S.ANSWER) or row.get(scoring.output_column)
    context = _passages(row[S.CONTEXT]) if row.get(S.CONTEXT) is not None else _passages(
        row.get(scoring.context_column))
    messages = [m for m in (row.get(scoring.messages_column) or []) if isinstance(m, Mapping)]
    # A scored chat has its question as a column (null where the chat had no answer): only a table without
    # one needs it read from the messages.
    asked = S.QUESTION in row or scoring.input_column in row
    if messages and (not context or not asked):
        turns = assistant_turn_indexes(messages)
        turn = row.get(S.ASSISTANT_TURN)
        last = turns[-1] if turns else len(messages)
        at = turns[turn] if isinstance(turn, int) and 0 <= turn < len(turns) else last
        context = context or tool_results_before(messages, at)
        question = question if asked else question_before(messages, at)
    return (None if question is None else str(question)), (None if answer is None else str(answer)), context


def _judged(row: Mapping[str, Any], threshold: float) -> dict[str, Any]:
    score = row.get("hallucination_score")
    verdicts = [{"claim_index": i, "verdict": v.get("verdict"), "speculative": bool(v.get("speculative")),
                 "reason": v.get("reason")} for i, v in enumerate(row.get("verdicts") or [])]
    return {"hallucination_score": score, "faithfulness_score": row.get("faithfulness_score"),
            "hallucinated": None if score is None else bool(score > threshold),
            "reason": row.get("hallucination_reason"), "verdicts": verdicts, "status": row.get("status"),
            "judge_model": row.get("judge_model"), "prompt_version": row.get("prompt_version")}


def _claims(row: Mapping[str, Any]) -> list[str]:
    verdicts = row.get("verdicts")
    if verdicts:
        return [str(v.get("claim") or "") for v in verdicts]
    return [str(c) for c in row.get("claims") or []]


def read_items(queue: pl.DataFrame, scored: Sequence[str], raw: Sequence[str],
               scoring: ScoringSettings) -> list[Item]:
    """Every answer of ``queue`` (:func:`read_queue`), in its order, from the ``scored`` tables and the ``raw``
    ones (``raw_conversations``, joined by row key; the scored row's own columns come first). An answer of the
    queue in no scored table is refused: the queue was drawn from other tables."""
    keys = queue.get_column(S.ROW_KEY).to_list()
    texts = (S.QUESTION, S.ANSWER, S.CONTEXT, scoring.input_column, scoring.output_column, scoring.context_column,
             scoring.messages_column, S.ASSISTANT_TURN)
    found = _rows(scored, keys, (*texts, *JUDGED, *QUEUE_FIELDS, "language"), "scored")
    missing = [k for k in keys if k not in found]
    if missing:
        raise InputError(f"{len(missing)} answer(s) of the queue are in none of the scored tables, e.g. "
                         f"{missing[:_EXAMPLES]}: give the scored tables the queue was drawn from")
    extra = _rows(raw, keys, texts, "raw") if raw else {}
    fields = [c for c in QUEUE_FIELDS if c in queue.columns]
    items = []
    for index, lineage in enumerate(queue.select(S.ROW_KEY, *fields).iter_rows(named=True)):
        key = lineage[S.ROW_KEY]
        row = {**extra.get(key, {}), **found[key]}
        question, answer, context = _texts(row, scoring)

        def given(name: str, row: dict[str, Any] = row, lineage: dict[str, Any] = lineage) -> Any:
            return lineage.get(name) if lineage.get(name) is not None else row.get(name)

        probability = given(INCLUSION_PROBABILITY)
        items.append(Item(
            index=index, row_key=key, question=question, answer=answer, context=tuple(context),
            claims=tuple(_claims(row)), language=None if given("language") is None else str(given("language")),
            inclusion_probability=None if probability is None else float(probability),
            scoring_run_id=given(S.SCORING_RUN_ID), judge_model=given("judge_model"),
            prompt_version=given("prompt_version"), judged=_judged(row, scoring.hallucination_threshold),
        ))
    return items

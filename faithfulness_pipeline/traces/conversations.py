"""Spans to conversation rows: one row per LLM span, in the flat shape with messages (SPEC §1).

- ``output``: the span's answer; ``messages``: the messages it was given (the question is the last user
  message among them; tool messages there are tool results, SPEC §2 rule 4);
- ``context``: the passages of the retriever spans and the results of the tool spans of the same trace that
  started before the LLM span, in the order they started (a tool's result rendered as Mastra renders it);
  with none, the context falls through to the tool results in the messages, as for any conversation;
- ``trace_id`` and ``span_id`` (the row key: core.normalize takes them when the table has no conversation id),
  ``created_at`` (the span's start: what the Dagster landing partitions by), ``span_name``, ``model``.

An LLM span with no answer (in its attributes or its events), or one whose messages cannot be read, is a row
with nothing to judge whose ``nothing_to_judge`` says why: the scorer makes it an error row with that reason,
never a perfect score; the unreadable ones are named in :class:`SpanCount`: nothing is dropped without a word.

A span that comes more than once (a Collector retried an export; an instrumentation exported it before its
answer and again with it) is one row: of its copies, the one with an answer, then the one holding the most
messages and passages, then the later one. Copies with different answers are counted and named."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import polars as pl

from faithfulness_pipeline.core.schema import NOTHING_TO_JUDGE
from faithfulness_pipeline.traces.reading import NO_ANSWER, read_span
from faithfulness_pipeline.traces.spans import Span

_MESSAGE: Final = pl.Struct({"role": pl.String(), "content": pl.String(), "name": pl.String(),
                             "tool_call_id": pl.String()})  # fmt: skip
FACTS_SCHEMA: Final = pl.Schema({
    "trace_id": pl.String(), "span_id": pl.String(), "role": pl.String(), "created_at": pl.Datetime("us", "UTC"),
    "span_name": pl.String(), "model": pl.String(), "messages": pl.List(_MESSAGE), "output": pl.String(),
    "passages": pl.List(pl.String()), "problem": pl.String(),
})
CONVERSATION_COLUMNS: Final = ("trace_id", "span_id", "created_at", "span_name", "model", "messages", "output",
                               "context", NOTHING_TO_JUDGE)  # fmt: skip
_NAMED: Final = 10


@dataclass(slots=True)
class SpanCount:
    """What a span input held: spans read, LLM spans (rows), context spans, others (neither: not read),
    and the LLM spans whose attributes could not be read (their rows have nothing to judge)."""

    spans: int = 0
    llm: int = 0
    context: int = 0
    other: int = 0
    unreadable: int = 0
    duplicates: int = 0  # LLM spans read more than once (a Collector's retried export): one row each
    differing: int = 0  # of those, the ones whose copies hold different answers
    nothing_to_judge: int = 0  # rows without an answer (or with unreadable attributes): error rows
    named: list[str] = field(default_factory=list)
    differing_named: list[str] = field(default_factory=list)
    #: Lines of an export that held no trace request (other signals' requests, empty ones), by signal.
    skipped_lines: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        out = [f"spans: {self.spans} read, {self.llm - self.duplicates} LLM span(s) became rows, {self.context} "
               f"retriever/tool span(s) gave context, {self.other} other span(s) hold no answer or context"]
        if self.duplicates:
            out.append(f"spans: {self.duplicates} LLM span(s) came more than once (same trace and span id) and are "
                       "one row each (the copy with the answer, else the fullest, else the later)")
        if self.differing:
            out.append(f"spans: {self.differing} LLM span(s) came in copies with different answers; the later "
                       f"answered copy is kept: {'; '.join(self.differing_named)}")
        if self.nothing_to_judge:
            out.append(f"spans: {self.nothing_to_judge} LLM span row(s) have nothing to judge (no answer in the "
                       "span's attributes or events, or attributes that cannot be read): status error, why in error")
        if self.skipped_lines:
            kinds = ", ".join(f"{n} of {kind}" for kind, n in sorted(self.skipped_lines.items()))
            out.append(f"spans: {self.skipped_lines.total()} line(s) of the export(s) held no trace request and were "
                       f"skipped ({kinds})")
        if self.unreadable:
            out.append(f"spans: {self.unreadable} LLM span(s) could not be read and are rows with nothing to "
                       f"judge: {'; '.join(self.named)}")
        return out


def span_facts(spans: Iterable[Span], count: SpanCount) -> pl.DataFrame:
    """The LLM and context spans of ``spans`` as rows of :data:`FACTS_SCHEMA`; the others are only counted."""
    rows: list[dict[str, object]] = []
    for span in spans:
        count.spans += 1
        facts = read_span(span)
        if facts.role == "other":
            count.other += 1
            continue
        if facts.role == "llm":
            count.llm += 1
            if facts.problem is not None and facts.problem != NO_ANSWER:
                count.unreadable += 1
                if len(count.named) < _NAMED:
                    count.named.append(f"{span.trace_id}/{span.span_id} {span.name!r}: {facts.problem}")
        else:
            count.context += 1
        rows.append({"trace_id": span.trace_id, "span_id": span.span_id, "role": facts.role,
                     "created_at": span.start, "span_name": span.name, "model": facts.model,
                     "messages": facts.messages, "output": facts.output, "passages": facts.passages,
                     "problem": facts.problem})
    return pl.DataFrame(rows, schema=FACTS_SCHEMA)


def one_copy(facts: pl.LazyFrame) -> pl.LazyFrame:
    """One row of ``facts`` per span, in the order spans first came: of a span's copies, the one with an
    answer, then the one holding the most messages and passages, then the later. (Keeping the first copy
    lost the answer of a span exported before it had one and again after.)"""
    answered = pl.col("output").is_not_null() & (pl.col("output").str.strip_chars() != "")
    fullness = pl.col("messages").list.len().fill_null(0) + pl.col("passages").list.len().fill_null(0)
    return (
        facts.with_row_index("_seq")
        .group_by("trace_id", "span_id")
        .agg(pl.all().sort_by(answered, fullness, pl.col("_seq")).last(), pl.col("_seq").min().alias("_first"))
        .sort("_first")
        .select(FACTS_SCHEMA.names())
    )


def count_copies(facts: pl.LazyFrame, count: SpanCount) -> None:
    """Adds to ``count`` the LLM spans of ``facts`` that came more than once, and those whose copies hold
    different answers (named, the first few)."""
    per_span = (
        facts.filter(pl.col("role") == "llm")
        .group_by("trace_id", "span_id")
        .agg(pl.len().alias("copies"), pl.col("output").drop_nulls().n_unique().alias("answers"))
        .filter(pl.col("copies") > 1)
        .collect()
    )
    differing = per_span.filter(pl.col("answers") > 1)
    count.duplicates += per_span.height
    count.differing += differing.height
    for trace, span in differing.head(_NAMED - len(count.differing_named)).select("trace_id", "span_id").iter_rows():
        count.differing_named.append(f"{trace}/{span}")


def conversations(facts: pl.LazyFrame) -> pl.LazyFrame:
    """One conversation row per LLM span of ``facts`` (every span of a trace must be among them); a span read
    more than once counts once (:func:`one_copy`)."""
    facts = one_copy(facts)
    llm = facts.filter(pl.col("role") == "llm")
    sources = facts.filter(pl.col("role") == "context").select(
        "trace_id", pl.col("created_at").alias("source_start"), "passages")
    started = pl.col("created_at")
    context = (
        llm.select("trace_id", "span_id", "created_at")
        .join(sources, on="trace_id")
        .filter(pl.col("source_start").is_null() | started.is_null() | (pl.col("source_start") <= started))
        .sort("source_start", nulls_last=False)
        .group_by("trace_id", "span_id", maintain_order=True)
        .agg(pl.col("passages").explode().drop_nulls().alias("context"))
    )
    return (
        llm.join(context, on=["trace_id", "span_id"], how="left", maintain_order="left")
        .with_columns(pl.col("context").fill_null(pl.lit([], dtype=pl.List(pl.String))),
                      pl.col("problem").alias(NOTHING_TO_JUDGE))
        .select(CONVERSATION_COLUMNS)
    )


def spans_to_conversations(spans: Iterable[Span]) -> tuple[pl.DataFrame, SpanCount]:
    """Conversation rows of spans held in memory (the Python API; a file is staged piece by piece instead)."""
    count = SpanCount()
    facts = span_facts(spans, count).lazy()
    rows = conversations(facts).collect()
    count_copies(facts, count)
    count.nothing_to_judge = int(rows.get_column(NOTHING_TO_JUDGE).is_not_null().sum())
    return rows, count

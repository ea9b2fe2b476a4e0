"""Spans to conversation rows: one row per LLM span, in the flat shape with messages (SPEC §1).

- ``output``: the span's answer; ``messages``: the messages it was given (the question is the last user
  message among them; tool messages there are tool results, SPEC §2 rule 4);
- ``context``: the passages of the retriever spans and the results of the tool spans of the same trace that
  started before the LLM span, in the order they started (a tool's result rendered as Mastra renders it);
  with none, the context falls through to the tool results in the messages, as for any conversation;
- ``trace_id`` and ``span_id`` (the row key: core.normalize takes them when the table has no conversation id),
  ``created_at`` (the span's start: what the Dagster landing partitions by), ``span_name``, ``model``.

An LLM span with no answer, or one whose messages cannot be read, is a row with nothing to judge, and the
latter is named in :class:`SpanCount`: nothing is dropped without a word."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import polars as pl

from faithfulness_pipeline.traces.reading import read_span
from faithfulness_pipeline.traces.spans import Span

_MESSAGE: Final = pl.Struct({"role": pl.String(), "content": pl.String(), "name": pl.String(),
                             "tool_call_id": pl.String()})  # fmt: skip
FACTS_SCHEMA: Final = pl.Schema({
    "trace_id": pl.String(), "span_id": pl.String(), "role": pl.String(), "created_at": pl.Datetime("us", "UTC"),
    "span_name": pl.String(), "model": pl.String(), "messages": pl.List(_MESSAGE), "output": pl.String(),
    "passages": pl.List(pl.String()),
})
CONVERSATION_COLUMNS: Final = ("trace_id", "span_id", "created_at", "span_name", "model", "messages", "output",
                               "context")  # fmt: skip
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
    named: list[str] = field(default_factory=list)
    #: Lines of an export that held no trace request (other signals' requests, empty ones), by signal.
    skipped_lines: Counter[str] = field(default_factory=Counter)

    def lines(self) -> list[str]:
        out = [f"spans: {self.spans} read, {self.llm - self.duplicates} LLM span(s) became rows, {self.context} "
               f"retriever/tool span(s) gave context, {self.other} other span(s) hold no answer or context"]
        if self.duplicates:
            out.append(f"spans: {self.duplicates} LLM span(s) came more than once (same trace and span id) and are "
                       "one row each")
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
            if facts.problem is not None:
                count.unreadable += 1
                if len(count.named) < _NAMED:
                    count.named.append(f"{span.trace_id}/{span.span_id} {span.name!r}: {facts.problem}")
        else:
            count.context += 1
        rows.append({"trace_id": span.trace_id, "span_id": span.span_id, "role": facts.role,
                     "created_at": span.start, "span_name": span.name, "model": facts.model,
                     "messages": facts.messages, "output": facts.output, "passages": facts.passages})
    return pl.DataFrame(rows, schema=FACTS_SCHEMA)


def conversations(facts: pl.LazyFrame) -> pl.LazyFrame:
    """One conversation row per LLM span of ``facts`` (every span of a trace must be among them); a span read
    twice (an export retried by its Collector) counts once."""
    facts = facts.unique(subset=["trace_id", "span_id"], keep="first", maintain_order=True)
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
        .with_columns(pl.col("context").fill_null(pl.lit([], dtype=pl.List(pl.String))))
        .select(CONVERSATION_COLUMNS)
    )


def spans_to_conversations(spans: Iterable[Span]) -> tuple[pl.DataFrame, SpanCount]:
    """Conversation rows of spans held in memory (the Python API; a file is staged piece by piece instead)."""
    count = SpanCount()
    rows = conversations(span_facts(spans, count).lazy()).collect()
    count.duplicates = count.llm - rows.height
    return rows, count

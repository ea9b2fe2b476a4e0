"""Whole-row entries of the result store: one key and one value per judged row, for warm re-runs.

The store keeps each step's results (claims of an answer; verdicts of claims against passages), which
is what lets a re-run reuse claims when only the passages changed. But re-scoring rows whose results
are all stored then costs two keys, two lookups and two decodes a row, and the verdict key can only be
made after the claims are decoded. A row entry maps the row's own content (question, answer, passages)
straight to its finished result columns: one hash over bytes already in memory, one lookup, one decode.

Rows are written once both steps are done (:func:`encode_rows`), next to, not instead of, the step
entries; a row without an entry (a store filled by an older version, a damaged value) is served by the
step entries as before and gets its entry then.

Key content (hashed column-wise, never built per row in Python): a header
``r<question bytes | n>,<answer bytes>;<passage bytes>,<passage bytes>...\\x01`` with every length in
UTF-8 bytes, the question and the answer, then the passages back to back as Arrow already holds them.
The lengths make the layout unambiguous whatever the texts contain.

Value: UTF-8 bytes of a JSON object, one field per column so that polars parses it straight into typed columns:
``{"x": extraction usage, "v": verdict usage, "t": truncated, "c": claims, "l": "SCU..." (one letter
per verdict), "s": "010..." (speculative flags), "e": evidence indexes, "r": reasons}``; usage numbers
are kept as text, which casts back to the very same float. A usage list is in ``schema.USAGE_COLUMNS``
order; one written before cached prompt tokens were counted ends before that last number, and reads as 0
cached tokens (an older version reads a longer list as unreadable and serves the row the step-by-step way).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.arrays import lists_of_structs
from faithfulness_pipeline.judging.store.codec import LETTER_OF_VERDICT, VERDICT_OF_LETTER, usage_exprs
from faithfulness_pipeline.judging.store.keys import KeyMaker, list_spans, spans
from faithfulness_pipeline.judging.store.protocol import Value

#: A row's usage columns, each twice: prefixed ``x_`` (extraction) and ``v_`` (verdicts).
USAGE: Final = S.USAGE_COLUMNS
#: How many usage numbers a value stored before ``cached_prompt_tokens`` holds.
_OLD_USAGE: Final = USAGE.index("cached_prompt_tokens")
_TEXTS: Final = pl.List(pl.String)
_VALUE: Final = pl.Struct({
    "x": _TEXTS, "v": _TEXTS, "t": pl.Int8, "c": _TEXTS, "l": pl.String, "s": pl.String,
    "e": pl.List(pl.Int32), "r": _TEXTS,
})


def row_head(question: pl.Expr, answer: pl.Expr, passages: pl.Expr) -> pl.Expr:
    """The first part of a row's key content (see the module docstring); ``question`` null when absent."""
    lengths = passages.list.eval(pl.element().str.len_bytes().cast(pl.String)).list.join(",")
    return pl.concat_str([
        pl.lit("r"),
        pl.when(question.is_null()).then(pl.lit("n")).otherwise(question.str.len_bytes().cast(pl.String)),
        pl.lit(","), answer.str.len_bytes().cast(pl.String), pl.lit(";"), lengths, pl.lit("\x01"),
        question.fill_null(""), answer,
    ])


def row_keys(keys: KeyMaker, questions: pl.Series, answers: pl.Series, passages: pl.Series) -> list[bytes]:
    """The key of every row (no null answer or passage list; a null question is "no question")."""
    heads = pl.DataFrame({"q": questions, "a": answers, "p": passages}).select(
        row_head(pl.col("q"), pl.col("a"), pl.col("p"))
    ).to_series()
    return keys.keys_of_spans(spans(heads), list_spans(passages))


def encode_rows(results: pl.DataFrame) -> pl.Series:
    """One stored value per row of result columns: ``claims``, ``verdicts`` (the raw verdict structs),
    ``context_truncated`` and the usage columns prefixed ``x_`` (extraction) and ``v_`` (verdicts)."""
    verdicts = pl.col("verdicts")

    def field(name: str) -> pl.Expr:
        return verdicts.list.eval(pl.element().struct.field(name))

    def usage(prefix: str) -> pl.Expr:
        return pl.concat_list([pl.col(f"{prefix}_{name}").cast(pl.String) for name in USAGE])

    letters = verdicts.list.eval(
        pl.element().struct.field("verdict").replace_strict(LETTER_OF_VERDICT, return_dtype=pl.String)
    ).list.join("")
    flags = verdicts.list.eval(pl.element().struct.field("speculative").cast(pl.Int8).cast(pl.String)).list.join("")
    return results.select(
        pl.struct(
            usage("x").alias("x"), usage("v").alias("v"), pl.col("context_truncated").cast(pl.Int8).alias("t"),
            pl.col("claims").alias("c"), letters.alias("l"), flags.alias("s"),
            field("evidence_index").alias("e"), field("reason").alias("r"),
        ).struct.json_encode()
    ).to_series()


def decode_rows(values: Sequence[Value | None]) -> pl.DataFrame | None:
    """Stored row values (None = not stored) as result columns; ``verdicts`` is null where a value is
    absent or unreadable (that row is then served the step-by-step way). None when the column cannot be
    parsed at once (a damaged value): then every row goes the step-by-step way, which rewrites it."""
    try:
        parsed = pl.Series(values, dtype=pl.Binary).cast(pl.String).str.json_decode(_VALUE)
    except (TypeError, pl.exceptions.PolarsError):  # not bytes, not UTF-8, not JSON of this layout
        return None
    # Usage first: the same casts tell whether a value's usage is readable.
    frame = pl.DataFrame({"value": parsed}).unnest("value").with_columns(*_usage("x"), *_usage("v"))
    n = pl.col("c").list.len()
    fine = pl.all_horizontal(
        n > 0, pl.col("t").is_not_null(),
        pl.col("l").str.len_bytes() == n, pl.col("s").str.len_bytes() == n,
        pl.col("e").list.len() == n, pl.col("r").list.len() == n,
        pl.col("l").str.contains("^[SCU]*$"), pl.col("s").str.contains("^[01]*$"),
        pl.col("x").list.len().is_in([_OLD_USAGE, len(USAGE)]), pl.col("v").list.len().is_in([_OLD_USAGE, len(USAGE)]),
        # the cost may be null (unknown price); calls and tokens may not
        *[pl.col(f"{p}_{name}").is_not_null() for p in ("x", "v") for name in USAGE if name != "cost_usd"],
    ).fill_null(False)
    frame = frame.with_columns(fine.alias("fine"), pl.when(fine).then(n).otherwise(0).cast(pl.Int64).alias("n"))
    flat = frame.filter("fine").select(
        pl.col("l").str.split("").explode().replace_strict(VERDICT_OF_LETTER, return_dtype=pl.String).alias("verdict"),
        (pl.col("s").str.split("").explode() == "1").alias("speculative"),
        pl.col("r").explode().alias("reason"),
        pl.col("e").explode().alias("evidence_index"),
    )
    verdicts = lists_of_structs(S.VERDICTS, flat, frame.get_column("n"), ~frame.get_column("fine"))
    # Claims, flag and usage of a row whose verdicts are null mean nothing: callers go by the verdicts.
    return frame.select(
        pl.col("c").alias("claims"),
        (pl.col("t") != 0).alias("context_truncated"),
        *[f"{p}_{name}" for p in ("x", "v") for name in USAGE],
    ).with_columns(verdicts.alias("verdicts"))


def _usage(prefix: str) -> list[pl.Expr]:
    exprs = [expr.name.prefix(f"{prefix}_") for expr in usage_exprs(pl.col(prefix))]
    # Out of bounds only in a value from before cached tokens were counted: none were then.
    cached = f"{prefix}_cached_prompt_tokens"
    old = pl.col(prefix).list.len() == _OLD_USAGE
    return [pl.when(old).then(0).otherwise(e).alias(cached) if e.meta.output_name() == cached else e for e in exprs]

"""Verdicts -> counts, Mastra-exact scores and the published verdict column (SPEC §3c). Pure polars, no I/O.

Mastra vocabulary:
- faithfulness: ``yes`` = supported and not speculative; ``no`` = contradicted; ``unsure`` = unsupported or
  speculative. Score = yes / n_claims x scale.
- hallucination: ``yes`` = contradicted or unsupported; ``no`` = supported (hedging allowed).
  Score = yes / n_claims x scale.
Both are rounded like Mastra's ``roundToTwoDecimals``: ``floor((x + eps) * 100 + 0.5) / 100``.
"""

from __future__ import annotations

import math
import sys

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.arrays import lists_of_structs
from faithfulness_pipeline.core.config import ScoringConfig

_EPS = sys.float_info.epsilon


def round_half_up(x: float) -> float:
    """Mastra's rounding in plain Python (1/8 -> 0.13, where ``round`` gives 0.12)."""
    return math.floor((x + _EPS) * 100 + 0.5) / 100


def round_expr(x: pl.Expr) -> pl.Expr:
    """``round_half_up`` as a polars expression: how scores (and the BI percentiles of scores) are rounded."""
    return ((x + _EPS) * 100 + 0.5).floor() / 100


def _verdict_field(name: str) -> pl.Expr:
    return pl.col(S.VERDICTS).list.eval(pl.element().struct.field(name))


def _count(predicate: pl.Expr) -> pl.Expr:
    return pl.col(S.VERDICTS).list.eval(predicate.cast(pl.Int32)).list.sum().cast(pl.Int32)


def faithfulness_label(verdict: str, speculative: bool) -> str:
    if verdict == "contradicted":
        return "no"
    return "yes" if verdict == "supported" and not speculative else "unsure"


def hallucination_label(verdict: str) -> str:
    return "no" if verdict == "supported" else "yes"


def unscored(columns: list[str]) -> pl.Expr:
    """Rows that get null counts, scores and reasons, never 0: an error, or a row outside the sample."""
    failed = pl.col(S.ERROR).is_not_null()
    if S.RESULT_SOURCE in columns:
        failed = failed | (pl.col(S.RESULT_SOURCE) == S.SOURCE_NOT_SAMPLED).fill_null(False)
    return failed


def add_counts_and_scores(df: pl.DataFrame, config: ScoringConfig) -> pl.DataFrame:
    """Counts and both scores from ``_fp_verdicts``; error rows and rows outside the sample get nulls, never 0."""
    verdict = pl.element().struct.field("verdict")
    speculative = pl.element().struct.field("speculative").fill_null(False)
    failed = unscored(df.columns)
    counts = {
        "n_claims": pl.col(S.VERDICTS).list.len().cast(pl.Int32),
        "n_supported": _count(verdict == "supported"),
        "n_contradicted": _count(verdict == "contradicted"),
        "n_unsupported": _count(verdict == "unsupported"),
        "n_speculative": _count(speculative),
        "_fp_faithful_yes": _count((verdict == "supported") & ~speculative),
    }
    df = df.with_columns(
        pl.when(failed).then(None).otherwise(expr.fill_null(0)).alias(name) for name, expr in counts.items()
    )
    n = pl.col("n_claims")
    zero_value = pl.lit(0.0) if config.zero_claims == "zero" else pl.lit(None, dtype=pl.Float64)
    hallucinated = pl.col("n_contradicted") + pl.col("n_unsupported")

    def score(yes: pl.Expr) -> pl.Expr:
        ratio = yes.cast(pl.Float64) / n.cast(pl.Float64)
        return pl.when(failed).then(None).when(n == 0).then(zero_value).otherwise(round_expr(ratio * config.scale))

    return df.with_columns(
        score(hallucinated).alias("hallucination_score"),
        score(pl.col("_fp_faithful_yes")).alias("faithfulness_score"),
    ).drop("_fp_faithful_yes")


def _supported_reason() -> pl.Expr:
    """A supported claim's reason is built from its evidence, not paid for (SPEC §3b)."""
    passage = (pl.col("_fp_evidence_index") + 1).cast(pl.String)
    built = (
        pl.when(pl.col("_fp_evidence_index").is_not_null())
        .then(pl.format("Stated in context passage {}.", passage))
        .otherwise(pl.lit("Supported by the context."))
    )
    hedge = pl.when(pl.col("speculative").fill_null(False)).then(pl.lit(" Hedged in the answer.")).otherwise(pl.lit(""))
    reason = pl.col("reason")
    return (
        pl.when((pl.col("verdict") == "supported") & (reason.is_null() | (reason.str.strip_chars() == "")))
        .then(pl.concat_str(built, hedge))
        .otherwise(reason)
        .alias("reason")
    )


def published_verdicts(df: pl.DataFrame) -> pl.Series:
    """``verdicts`` as published: claim text zipped with its verdict, evidence index replaced by passage text.

    Built flat: every claim of every judged row in one column each, then cut back into rows by the
    verdict lists' own lengths (a row has one verdict per claim), without grouping rows back together.
    """
    verdicts = pl.col(S.VERDICTS)
    lengths = df.select(verdicts.list.len().fill_null(0).cast(pl.Int64)).to_series()
    judged = df.filter(lengths > 0)
    flat = judged.select(
        pl.col(S.CLAIMS).explode().alias("claim"),
        verdicts.explode().struct.unnest(),
        pl.col(S.CONTEXT).list.gather(_verdict_field("evidence_index"), null_on_oob=True).explode().alias("evidence"),
    ).rename({"evidence_index": "_fp_evidence_index"})
    flat = flat.select(
        "claim", "verdict", "speculative", _supported_reason(), "evidence"
    ).cast({name: dtype for name, dtype in S.VERDICT_STRUCT.to_schema().items()})
    missing = df.get_column(S.VERDICTS).is_null()
    return lists_of_structs("verdicts", flat, lengths, missing, pl.List(S.VERDICT_STRUCT))

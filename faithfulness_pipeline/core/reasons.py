"""Score reasons built in code from the verdicts (SPEC §3d): no LLM call, and never at odds with the score.

Mastra spends one LLM call per scorer on this prose; ours names the same things (which claims were
contradicted or unsupported, and why) deterministically, so a reason can never contradict its score.
Everything is a polars expression over the published ``verdicts`` column, so reasons cost microseconds.

Shapes (S = the score as JavaScript prints it: 0.4, 1, 0.13):
- faithfulness: ``The score is S because Y of N claims are supported by the context.`` then
  ``Contradicted: ...``, ``Not verifiable from the context: ...``, ``Hedged (counted as unsure): ...``;
- hallucination: ``The score is S because B of N claims are contradicted by or missing from the context.``
  then ``Contradicted: ...``, ``Unsupported: ...`` (or ``... because all N claims are supported``);
- no claims: ``The score is 0 because the answer makes no claims that can be checked.``
Each listing quotes up to 10 claims with their reasons and ends with ``; and K more``.
"""

from __future__ import annotations

import polars as pl

from faithfulness_pipeline.core.scoring import unscored

MAX_LISTED = 10
_MAX_CLAIM_CHARS = 200
_ROW = "_fp_reason_row"
_FRAGMENT = "_fp_fragment"
_DEFAULT_REASON = {
    "contradicted": "contradicted by the context",
    "unsupported": "not found in the context",
    "hedged": "stated speculatively",
}


def format_score(score: pl.Expr) -> pl.Expr:
    """0.4 -> "0.4", 1.0 -> "1", 0.13 -> "0.13" (scores are already rounded to two decimals)."""
    return score.cast(pl.String).str.strip_suffix(".0")


def _plural(n: pl.Expr) -> pl.Expr:
    return pl.concat_str(n.cast(pl.String), pl.when(n == 1).then(pl.lit(" claim")).otherwise(pl.lit(" claims")))


def _verb(n: pl.Expr, count: pl.Expr) -> pl.Expr:
    return pl.when((n == 1) | (count == 1)).then(pl.lit(" is")).otherwise(pl.lit(" are"))


def _fragments(df: pl.DataFrame) -> pl.DataFrame:
    """One row per claim: its category and its ``"claim" (reason)`` fragment."""
    claims = df.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias(_ROW), pl.col("verdicts")
    ).filter(pl.col("verdicts").list.len() > 0).explode("verdicts").unnest("verdicts")
    verdict = pl.col("verdict")
    category = (
        pl.when(verdict == "contradicted")
        .then(pl.lit("contradicted"))
        .when(verdict == "unsupported")
        .then(pl.lit("unsupported"))
        .when(pl.col("speculative").fill_null(False))
        .then(pl.lit("hedged"))
        .otherwise(pl.lit("supported"))
    )
    # Only the listed claims get a fragment: supported, unhedged claims (most of them) are never quoted.
    # Each cleaned text is computed once and then referred to by name (eager selects repeat shared
    # sub-expressions).
    claims = claims.with_columns(category.alias("category")).filter(pl.col("category") != "supported")
    claim = pl.col("claim").fill_null("")
    # Whitespace runs become one space; most claims have none to fold, and finding that is cheaper
    # than rewriting every claim.
    folded = pl.when(claim.str.contains(r"\s\s|[^\S ]")).then(claim.str.replace_all(r"\s+", " ")).otherwise(claim)
    claims = claims.with_columns(
        folded.str.strip_chars().alias("claim"),
        pl.col("reason").str.strip_chars().str.strip_chars_end(".").str.strip_chars().alias("reason"),
    )
    text, reason = pl.col("claim"), pl.col("reason")
    text = pl.when(text.str.len_chars() > _MAX_CLAIM_CHARS).then(
        pl.concat_str(text.str.slice(0, _MAX_CLAIM_CHARS - 1), pl.lit("…"))
    ).otherwise(text)
    default = pl.col("category").replace_strict(_DEFAULT_REASON, default=None, return_dtype=pl.String)
    reason = pl.when(reason.is_null() | (reason == "")).then(default).otherwise(reason)
    fragment = pl.concat_str(pl.lit('"'), text, pl.lit('" ('), reason, pl.lit(")"))
    return claims.select(_ROW, "category", fragment.alias(_FRAGMENT))


def _listing(category: str) -> list[pl.Expr]:
    chosen = pl.col(_FRAGMENT).filter(pl.col("category") == category)
    return [
        chosen.head(MAX_LISTED).str.join("; ").alias(f"{category}_text"),
        chosen.len().alias(f"{category}_n"),
    ]


def _section(label: str, category: str) -> pl.Expr:
    n = pl.col(f"{category}_n").fill_null(0)
    more = pl.when(n > MAX_LISTED).then(pl.format("; and {} more", n - MAX_LISTED)).otherwise(pl.lit(""))
    return pl.when(n > 0).then(
        pl.concat_str(pl.lit(f" {label}: "), pl.col(f"{category}_text"), more, pl.lit("."))
    ).otherwise(pl.lit(""))


def add_reasons(df: pl.DataFrame) -> pl.DataFrame:
    """Adds ``hallucination_reason`` and ``faithfulness_reason`` (null on error rows and rows outside the sample)."""
    listings = _fragments(df).group_by(_ROW).agg(
        *[expr for category in ("contradicted", "unsupported", "hedged") for expr in _listing(category)]
    )
    parts = df.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias(_ROW),
        "n_claims", "n_contradicted", "n_unsupported", "hallucination_score", "faithfulness_score",
        unscored(df.columns).alias("_failed"),
    ).join(listings, on=_ROW, how="left", maintain_order="left")

    n = pl.col("n_claims")
    bad = pl.col("n_contradicted") + pl.col("n_unsupported")
    # n_speculative counts hedged claims of every verdict; faithfulness "yes" needs supported AND not hedged.
    yes = pl.col("n_claims") - pl.col("n_contradicted") - pl.col("n_unsupported") - pl.col("hedged_n").fill_null(0)

    def no_claims(score: str) -> pl.Expr:
        return pl.when(pl.col(score).is_null()).then(
            pl.lit("No score: the answer makes no claims that can be checked (n_claims = 0).")
        ).otherwise(pl.format("The score is {} because the answer makes no claims that can be checked.",
                              format_score(pl.col(score))))

    faith = pl.concat_str(
        pl.lit("The score is "), format_score(pl.col("faithfulness_score")), pl.lit(" because "),
        yes.cast(pl.String), pl.lit(" of "), _plural(n), _verb(n, yes), pl.lit(" supported by the context."),
        _section("Contradicted", "contradicted"),
        _section("Not verifiable from the context", "unsupported"),
        _section("Hedged (counted as unsure)", "hedged"),
    )
    halluc_all_ok = pl.concat_str(
        pl.lit("The score is "), format_score(pl.col("hallucination_score")), pl.lit(" because all "),
        _plural(n), _verb(n, n), pl.lit(" supported by the context."),
    )
    halluc_bad = pl.concat_str(
        pl.lit("The score is "), format_score(pl.col("hallucination_score")), pl.lit(" because "),
        bad.cast(pl.String), pl.lit(" of "), _plural(n), _verb(n, bad),
        pl.lit(" contradicted by or missing from the context."),
        _section("Contradicted", "contradicted"),
        _section("Unsupported", "unsupported"),
    )
    failed = pl.col("_failed")
    reasons = parts.select(
        pl.when(failed).then(None).when(n == 0).then(no_claims("hallucination_score"))
        .when(bad == 0).then(halluc_all_ok).otherwise(halluc_bad).alias("hallucination_reason"),
        pl.when(failed).then(None).when(n == 0).then(no_claims("faithfulness_score"))
        .otherwise(faith).alias("faithfulness_reason"),
    )
    return df.with_columns(reasons)

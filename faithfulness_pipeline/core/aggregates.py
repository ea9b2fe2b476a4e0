"""Daily answer-quality aggregates for BI: one row per day x model (SPEC §4). Pure polars, no I/O.

Conventions (docs/report.md and docs/pipeline.md repeat them):

- ``answers`` counts every row of the table (every answer that landed); ``sampled_answers`` those in the
  run's sample (all of them unless ``sample_rate`` < 1; the others have ``status = not_sampled``), and
  ``sample_share`` their share. The score statistics use only rows with a score (``status = ok`` and,
  under the ``zero_claims = "null"`` policy, at least one claim). Error rows are counted in
  ``error_answers``, never averaged in as 0; ``error_rate`` is over the sampled answers.
- ``*_low`` / ``*_high`` bound 95 % intervals for what the day x model's whole population of answers
  would give: the means by the normal approximation with the finite-population correction
  ``sqrt((answers - sampled_answers) / (answers - 1))``, the share over the threshold by Wilson's
  interval with the same correction on ``z``. A census (every answer sampled) has zero-width intervals:
  its statistics are the population's. Mean bounds are kept within 0..scale. An interval is null where
  it is unknown (fewer than two scores in a sample).
- Percentiles are linear-interpolated (the same as SQL ``quantile_cont`` / ``percentile_cont``), then
  rounded like the scores (two decimals, half up): an interpolated p90 of two-decimal scores never shows
  float noise such as 0.9339999999999999.
- ``over_threshold_share`` = answers with ``hallucination_score > hallucination_threshold`` divided by
  answers with a hallucination score. The threshold is in score units (0..scale).
- Claim counts are summed, so a claim-weighted rate is exact: ``contradicted_claims / claims``.
- ``cost_usd`` sums the rows whose cost is known; ``cost_unknown_answers`` says how many were not
  (a model without a price), so an incomplete total is visible rather than silently low. It is what
  producing the day's results cost, in whichever run produced them (a result served from the store
  carries the cost of the request that first produced it).
- ``cached_prompt_tokens`` and ``billed_cached_prompt_tokens`` are the part of the prompt tokens the provider
  served from its prompt cache (priced at its cached price); 0 for rows scored before they were counted.
- ``billed_*`` is what the run that scored the day paid: results served from the store or copied from an
  identical answer of the same run cost nothing there. ``billed_cost_usd`` is the provider's bill for
  scoring the day (null when a model has no price). ``store_share`` and ``duplicate_share`` are the shares
  of sampled answers served from the result store and as copies of an identical answer (``result_source``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import polars as pl

from faithfulness_pipeline.core.scoring import round_expr

AGGREGATE_SCHEMA: dict[str, pl.DataType] = {
    "day": pl.Date(),
    "model": pl.String(),
    "answers": pl.Int64(),
    "sampled_answers": pl.Int64(),
    "sample_share": pl.Float64(),
    "scored_answers": pl.Int64(),
    "error_answers": pl.Int64(),
    "skipped_answers": pl.Int64(),
    "error_rate": pl.Float64(),
    "zero_claim_answers": pl.Int64(),
    "claims": pl.Int64(),
    "supported_claims": pl.Int64(),
    "contradicted_claims": pl.Int64(),
    "unsupported_claims": pl.Int64(),
    "speculative_claims": pl.Int64(),
    "hallucination_mean": pl.Float64(),
    "hallucination_mean_low": pl.Float64(),
    "hallucination_mean_high": pl.Float64(),
    "hallucination_p50": pl.Float64(),
    "hallucination_p90": pl.Float64(),
    "faithfulness_mean": pl.Float64(),
    "faithfulness_mean_low": pl.Float64(),
    "faithfulness_mean_high": pl.Float64(),
    "faithfulness_p50": pl.Float64(),
    "faithfulness_p90": pl.Float64(),
    "hallucination_threshold": pl.Float64(),
    "over_threshold_answers": pl.Int64(),
    "over_threshold_share": pl.Float64(),
    "over_threshold_share_low": pl.Float64(),
    "over_threshold_share_high": pl.Float64(),
    "llm_calls": pl.Float64(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "total_tokens": pl.Int64(),
    "cost_usd": pl.Float64(),
    "cost_unknown_answers": pl.Int64(),
    "cached_prompt_tokens": pl.Int64(),
    "billed_llm_calls": pl.Float64(),
    "billed_prompt_tokens": pl.Int64(),
    "billed_completion_tokens": pl.Int64(),
    "billed_cost_usd": pl.Float64(),
    "billed_cached_prompt_tokens": pl.Int64(),
    "store_answers": pl.Int64(),
    "duplicate_answers": pl.Int64(),
    "store_share": pl.Float64(),
    "duplicate_share": pl.Float64(),
}

_PERCENTILES = ("hallucination_p50", "hallucination_p90", "faithfulness_p50", "faithfulness_p90")
#: The normal quantile of a two-sided 95 % interval.
Z95 = 1.959963984540054
_BILLED = ("billed_llm_calls", "billed_prompt_tokens", "billed_completion_tokens", "billed_cost_usd")
#: Counted since issue 29: a table scored before has none, and what it was billed was billed uncached.
_CACHED = ("cached_prompt_tokens", "billed_cached_prompt_tokens")


def _ok(expr: pl.Expr) -> pl.Expr:
    """``expr`` only where the row was scored (so error rows never enter a sum or a percentile)."""
    return pl.when(pl.col("status") == "ok").then(expr)


def daily_aggregates(
    scored: pl.DataFrame,
    *,
    day_column: str = "day",
    model_column: str = "model",
    hallucination_threshold: float = 0.5,
    scale: float = 1.0,
) -> pl.DataFrame:
    """Aggregate a scored table (SPEC §4 columns plus a day column) per day x model.

    ``day_column`` must hold dates (or datetimes, truncated to their date). A missing ``model_column``
    gives one group with a null model. The same as :func:`finish_daily` of :func:`daily_parts`, which a
    reader of many chunks (the report over a month) merges instead of holding every row.

    >>> import datetime as dt
    >>> scored = pl.DataFrame({
    ...     "day": [dt.date(2026, 11, 24)] * 3, "model": ["m", "m", "m"], "status": ["ok", "ok", "error"],
    ...     "hallucination_score": [0.0, 1.0, None], "faithfulness_score": [1.0, 0.0, None],
    ...     "n_claims": [2, 1, 0], "n_supported": [2, 0, 0], "n_contradicted": [0, 1, 0],
    ...     "n_unsupported": [0, 0, 0], "n_speculative": [0, 0, 0], "llm_calls": [0.5, 0.5, 1.0],
    ...     "prompt_tokens": [10, 10, 20], "completion_tokens": [2, 2, 0], "cost_usd": [0.1, 0.1, None]})
    >>> row = daily_aggregates(scored).row(0, named=True)
    >>> (row["answers"], row["error_answers"], row["hallucination_mean"], row["over_threshold_share"])
    (3, 1, 0.5, 0.5)
    """
    parts = daily_parts(scored, day_column=day_column, model_column=model_column,
                        hallucination_threshold=hallucination_threshold)
    return finish_daily(parts, hallucination_threshold=hallucination_threshold, scale=scale)


#: The group keys of the daily parts.
DAY_MODEL: Final = ("__day", "__model")
_SCORES: Final = ("hallucination", "faithfulness")


@dataclass(frozen=True)
class DailyParts:
    """What :func:`daily_aggregates` reduces a table to before it derives rates and intervals: sums, counts
    and the scores' moments per day x model (``tallies``), and how many scored answers had each score value
    (``scores``: the percentiles are exact from them; scores have two decimals, so a day x model holds at
    most a few hundred rows of it however many answers it has). Parts of chunks merge (:func:`merge_parts`)
    into the parts of their union."""

    tallies: pl.DataFrame
    scores: pl.DataFrame


def daily_parts(
    scored: pl.DataFrame, *, day_column: str = "day", model_column: str = "model",
    hallucination_threshold: float = 0.5,
) -> DailyParts:
    """The :class:`DailyParts` of one chunk of a scored table (``day_column`` and ``model_column`` as for
    :func:`daily_aggregates`)."""
    frame = by_day_and_model(scored, day_column, model_column)
    return DailyParts(tally(frame, DAY_MODEL, hallucination_threshold), score_counts(frame, DAY_MODEL))


def merge_parts(parts: Iterable[DailyParts]) -> DailyParts:
    """The parts of the union of the chunks ``parts`` were made of."""
    listed = list(parts)
    if not listed:
        raise ValueError("merge_parts needs at least one part")
    return DailyParts(merge_tallies([p.tallies for p in listed], DAY_MODEL),
                      merge_score_counts([p.scores for p in listed], DAY_MODEL))


def finish_daily(parts: DailyParts, *, hallucination_threshold: float = 0.5, scale: float = 1.0) -> pl.DataFrame:
    """The aggregates (:data:`AGGREGATE_SCHEMA`, one row per day x model) of merged parts."""
    grouped = parts.tallies.join(percentiles(parts.scores, DAY_MODEL), on=list(DAY_MODEL), how="left",
                                 nulls_equal=True)
    with_fpc = grouped.with_columns(
        pl.when(pl.col("answers") > 1)
        .then(((pl.col("answers") - pl.col("sampled_answers")) / (pl.col("answers") - 1)).clip(0.0, 1.0).sqrt())
        .otherwise(0.0)
        .alias("__fpc"),
        pl.when(pl.col("__hallucination_n") > 0)
        .then(pl.col("over_threshold_answers") / pl.col("__hallucination_n"))
        .alias("over_threshold_share"),
        *[e for score in _SCORES for e in moment_expr(score)],
        *[pl.when(pl.col(f"__{c}_nulls") == 0).then(pl.col(c)).alias(c) for c in _BILLED],
    )
    result = with_fpc.with_columns(*_rates_and_intervals(hallucination_threshold, scale))
    return result.select([pl.col(n).cast(d) for n, d in AGGREGATE_SCHEMA.items()]).sort("day", "model", nulls_last=True)


def moment_expr(score: str) -> list[pl.Expr]:
    """``{score}_mean`` and ``__{score}_sd`` (sample standard deviation) of a tally's moments."""
    n, total, m2 = (pl.col(f"__{score}_{m}") for m in ("n", "sum", "m2"))
    return [
        pl.when(n > 0).then(total / n).alias(f"{score}_mean"),
        pl.when(n > 1).then((m2.clip(0.0) / (n - 1)).sqrt()).alias(f"__{score}_sd"),
    ]


def by_day_and_model(scored: pl.DataFrame, day_column: str, model_column: str) -> pl.DataFrame:
    """``scored`` with the group keys (``__day``, ``__model``) and every column the tallies read."""
    if day_column not in scored.columns:
        raise ValueError(f"daily_aggregates needs a day column {day_column!r}; columns: {scored.columns}")
    model = pl.col(model_column).cast(pl.String) if model_column in scored.columns else pl.lit(None, dtype=pl.String)
    day = pl.col(day_column)
    if isinstance(scored.schema[day_column], pl.Datetime):
        day = day.dt.date()
    return scored.with_columns(day.cast(pl.Date).alias("__day"), model.alias("__model"))


def _with_missing(frame: pl.DataFrame) -> pl.DataFrame:
    """A table scored before the bill, sources and cached tokens were recorded: its bill and sources are
    unknown, not zero; its cached tokens none."""
    return frame.with_columns(
        pl.lit(None, dtype=pl.String).alias("result_source") if "result_source" not in frame.columns else [],
        *[pl.lit(None, dtype=pl.Float64).alias(c) for c in _BILLED if c not in frame.columns],
        *[pl.lit(0, dtype=pl.Int64).alias(c) for c in _CACHED if c not in frame.columns],
    )


def tally(frame: pl.DataFrame, keys: Sequence[str], hallucination_threshold: float) -> pl.DataFrame:
    """Counts, sums and score moments per ``keys`` of a chunk of a scored table (``__``-columns are for the
    step after: ``__{score}_n`` / ``_sum`` / ``_m2`` the scores' count, sum and sum of squared deviations from
    the chunk's mean, ``__{billed}_nulls`` the rows whose bill is unknown)."""
    return _with_missing(frame).group_by(*keys).agg(*_tallies(hallucination_threshold))


def _tallies(hallucination_threshold: float) -> list[pl.Expr]:
    """What is counted and summed per group (every one of them adds up over chunks)."""
    ok = pl.col("status") == "ok"
    moments = []
    for score in _SCORES:
        x = _ok(pl.col(f"{score}_score"))
        moments += [x.count().cast(pl.Int64).alias(f"__{score}_n"), x.sum().alias(f"__{score}_sum"),
                    (x - x.mean()).pow(2).sum().alias(f"__{score}_m2")]
    return [
        pl.len().cast(pl.Int64).alias("answers"),
        (pl.col("status") != "not_sampled").sum().cast(pl.Int64).alias("sampled_answers"),
        ok.sum().cast(pl.Int64).alias("scored_answers"),
        (pl.col("status") == "error").sum().cast(pl.Int64).alias("error_answers"),
        (pl.col("status") == "skipped").sum().cast(pl.Int64).alias("skipped_answers"),
        (ok & (pl.col("n_claims") == 0)).sum().cast(pl.Int64).alias("zero_claim_answers"),
        *[
            _ok(pl.col(src)).sum().cast(pl.Int64).alias(dst)
            for src, dst in (
                ("n_claims", "claims"),
                ("n_supported", "supported_claims"),
                ("n_contradicted", "contradicted_claims"),
                ("n_unsupported", "unsupported_claims"),
                ("n_speculative", "speculative_claims"),
            )
        ],
        *moments,
        (_ok(pl.col("hallucination_score")) > hallucination_threshold).sum().cast(pl.Int64)
        .alias("over_threshold_answers"),
        pl.col("llm_calls").sum().cast(pl.Float64).alias("llm_calls"),
        pl.col("prompt_tokens").sum().cast(pl.Int64).alias("prompt_tokens"),
        pl.col("completion_tokens").sum().cast(pl.Int64).alias("completion_tokens"),
        pl.col("cost_usd").sum().cast(pl.Float64).alias("cost_usd"),
        pl.col("cost_usd").is_null().sum().cast(pl.Int64).alias("cost_unknown_answers"),
        *[pl.col(c).sum().cast(pl.Int64).alias(c) for c in _CACHED],
        # Unknown when any answer's bill is (a model without a price; a table from before billing).
        *[pl.col(c).sum().cast(pl.Float64).alias(c) for c in _BILLED],
        *[pl.col(c).null_count().cast(pl.Int64).alias(f"__{c}_nulls") for c in _BILLED],
        (pl.col("result_source") == "store").sum().cast(pl.Int64).alias("store_answers"),
        (pl.col("result_source") == "duplicate").sum().cast(pl.Int64).alias("duplicate_answers"),
    ]


def merge_tallies(tallies: Sequence[pl.DataFrame], keys: Sequence[str]) -> pl.DataFrame:
    """The tally of the union of the chunks ``tallies`` were made of (the moments merged by Chan's formula:
    exact, and stable where a sum of squares would cancel)."""
    stacked = pl.concat(tallies, how="vertical_relaxed")
    merged = []
    for score in _SCORES:
        n, total, m2 = (pl.col(f"__{score}_{m}") for m in ("n", "sum", "m2"))
        mean = total.sum() / n.sum()
        merged += [n.sum().alias(f"__{score}_n"), total.sum().alias(f"__{score}_sum"),
                   (m2.sum() + (n * (total / n - mean).pow(2)).filter(n > 0).sum()).alias(f"__{score}_m2")]
    moments = {f"__{s}_{m}" for s in _SCORES for m in ("n", "sum", "m2")}
    summed = [pl.col(c).sum() for c in stacked.columns if c not in moments and c not in keys]
    return stacked.group_by(*keys).agg(*summed, *merged).select(stacked.columns)  # merged again later: same order


def score_counts(frame: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Scored answers per ``keys``, score (hallucination / faithfulness) and score value."""
    parts = [
        frame.filter((pl.col("status") == "ok") & pl.col(f"{score}_score").is_not_null())
        .group_by(*keys, pl.col(f"{score}_score").cast(pl.Float64).alias("value")).len("answers")
        .with_columns(pl.lit(score).alias("score"), pl.col("answers").cast(pl.Int64))
        for score in _SCORES
    ]
    return pl.concat(parts, how="vertical_relaxed").select(*keys, "score", "value", "answers")


def merge_score_counts(counts: Sequence[pl.DataFrame], keys: Sequence[str]) -> pl.DataFrame:
    return pl.concat(counts, how="vertical_relaxed").group_by(*keys, "score", "value").agg(pl.col("answers").sum())


def percentiles(counts: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """``{score}_p50`` / ``_p90`` per ``keys`` from :func:`score_counts`, linear-interpolated between order
    statistics as polars' and SQL's ``quantile_cont`` are (exact: the order statistics are read off the
    counts)."""
    ordered = counts.sort(*keys, "score", "value", nulls_last=True).with_columns(
        pl.col("answers").cum_sum().over(*keys, "score").alias("__cum"))
    n = pl.col("answers").sum()

    def at(q: float) -> pl.Expr:
        h = (n - 1).cast(pl.Float64) * q
        low = pl.col("value").filter(pl.col("__cum") > h.floor()).first()
        high = pl.col("value").filter(pl.col("__cum") > h.ceil()).first()
        return low + (h - h.floor()) * (high - low)

    wide = ordered.group_by(*keys, "score").agg(at(0.5).alias("p50"), at(0.9).alias("p90"))
    out = pl.DataFrame({k: [] for k in keys}, schema={k: counts.schema[k] for k in keys})
    for score in _SCORES:
        part = wide.filter(pl.col("score") == score).select(
            *keys, pl.col("p50").alias(f"{score}_p50"), pl.col("p90").alias(f"{score}_p90"))
        out = out.join(part, on=list(keys), how="full", coalesce=True, nulls_equal=True)
    return out


def _rates_and_intervals(hallucination_threshold: float, scale: float) -> list[pl.Expr]:
    """The group's keys under their names, its rates and shares, the scores' confidence intervals and the
    percentiles rounded."""
    return [
        pl.col("__day").alias("day"),
        pl.col("__model").alias("model"),
        pl.when(pl.col("answers") > 0).then(pl.col("sampled_answers") / pl.col("answers")).alias("sample_share"),
        pl.when(pl.col("sampled_answers") > pl.col("skipped_answers"))
        .then(pl.col("error_answers") / (pl.col("sampled_answers") - pl.col("skipped_answers")))
        .alias("error_rate"),
        *_mean_interval("hallucination", scale),
        *_mean_interval("faithfulness", scale),
        *_wilson("over_threshold_share"),
        pl.lit(hallucination_threshold, dtype=pl.Float64).alias("hallucination_threshold"),
        (pl.col("prompt_tokens") + pl.col("completion_tokens")).alias("total_tokens"),
        pl.when(pl.col("sampled_answers") > 0).then(pl.col("store_answers") / pl.col("sampled_answers"))
        .alias("store_share"),
        *[round_expr(pl.col(c)).alias(c) for c in _PERCENTILES],
        pl.when(pl.col("sampled_answers") > 0).then(pl.col("duplicate_answers") / pl.col("sampled_answers"))
        .alias("duplicate_share"),
    ]


def _mean_interval(score: str, scale: float) -> list[pl.Expr]:
    """``{score}_mean_low`` / ``_high``: mean +- z x sd / sqrt(n) x the finite-population correction, within
    0..scale; the mean itself for a census, null for a sample of fewer than two scores."""
    n = pl.col(f"__{score}_n").cast(pl.Float64)
    mean = pl.col(f"{score}_mean")
    half = Z95 * pl.col(f"__{score}_sd") / n.sqrt() * pl.col("__fpc")
    half = pl.when(pl.col("__fpc") == 0).then(pl.lit(0.0)).when(n >= 2).then(half)
    return [
        pl.when(mean.is_not_null()).then((mean - half).clip(0.0, scale)).alias(f"{score}_mean_low"),
        pl.when(mean.is_not_null()).then((mean + half).clip(0.0, scale)).alias(f"{score}_mean_high"),
    ]


def _wilson(share: str) -> list[pl.Expr]:
    """``{share}_low`` / ``_high``: Wilson's score interval for a share of the answers with a hallucination score, its
    ``z`` scaled by the finite-population correction (so a census gives the share itself)."""
    n = pl.col("__hallucination_n").cast(pl.Float64)
    p = pl.col(share)
    z = Z95 * pl.col("__fpc")
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * (p * (1 - p) / n + z2 / (4 * n * n)).sqrt()
    return [
        pl.when(p.is_not_null()).then((centre - half).clip(0.0, 1.0)).alias(f"{share}_low"),
        pl.when(p.is_not_null()).then((centre + half).clip(0.0, 1.0)).alias(f"{share}_high"),
    ]

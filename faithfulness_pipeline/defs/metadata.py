"""Materialisation metadata: table shape, judge usage, score distribution and worst answers (markdown)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.port import JudgeStats
from faithfulness_pipeline.outputs import describe
from faithfulness_pipeline.outputs.markdown import cell
from faithfulness_pipeline.tables.storage import Place

if TYPE_CHECKING:
    from faithfulness_pipeline.report import Headline

_BINS = 5
#: Examples a check or a table of metadata names at most: enough to find the rest by.
EXAMPLES = 10


def md_list(items: Sequence[str]) -> dg.MetadataValue:
    """A markdown list for the UI; "-" when there is nothing to list."""
    return dg.MetadataValue.md("\n".join(f"- {i}" for i in items) or "-")


def table_metadata(schema: pl.Schema, table: str, rows: int | None = None) -> dict[str, Any]:
    """Row count (when given) and column schema, each column described (its output's entry, ``outputs.catalog``, as in
    DuckDB)."""
    columns = dg.TableSchema(columns=[
        dg.TableColumn(name, str(dtype), description=describe(table, name)) for name, dtype in schema.items()
    ])
    meta: dict[str, Any] = {"dagster/column_schema": columns}
    if rows is not None:
        meta["dagster/row_count"] = rows
    return meta


def version_metadata(table_format: str, committed: str | None) -> dict[str, Any]:
    """The table format and, where it keeps versions, the version a materialisation committed: reading the
    table as of it (``WarehouseResource.scan(..., as_of=)``) gives back what this materialisation published."""
    meta: dict[str, Any] = {"table_format": table_format}
    if committed is not None:
        meta["table_version"] = committed
    return meta


def judge_metadata(stats: JudgeStats, model: str, prompt_version: str) -> dict[str, Any]:
    """What one LLM step spent (cache hits are free) and which judge produced it."""
    meta: dict[str, Any] = {
        "judge_model": model,
        "prompt_version": prompt_version,
        "llm_requests": stats.requests,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "cost_usd": dg.MetadataValue.float(stats.cost_usd) if stats.cost_usd is not None else "unknown",
        "cached_items": stats.cached_items,
        "duplicate_items": stats.duplicate_items,
        "failed_items": stats.failed_items,
        "retries": stats.retries,
        "refused_usage": stats.refused_usage,
    }
    if stats.notes:
        meta["judge_notes"] = dg.MetadataValue.md("\n".join(f"- {cell(n, 400)}" for n in stats.notes))
    return meta


def usage_totals(scored: pl.DataFrame | pl.LazyFrame, prefix: str = "") -> dict[str, Any]:
    """Totals over the rows of a table with usage columns (both LLM steps; a packed request's usage is
    shared out), or with ``prefix="billed_"`` of what the run paid; one aggregation, lazy or not."""
    lazy = scored.lazy()
    if f"{prefix}llm_calls" not in lazy.collect_schema().names():
        return {}
    totals = lazy.select(
        pl.col(f"{prefix}llm_calls").sum().alias("llm_calls"),
        pl.col(f"{prefix}prompt_tokens").sum().alias("prompt_tokens"),
        pl.col(f"{prefix}completion_tokens").sum().alias("completion_tokens"),
        pl.col(f"{prefix}cost_usd").sum().alias("cost_usd"),
        pl.col(f"{prefix}cost_usd").null_count().alias("unknown"),
    ).collect().row(0, named=True)
    unknown = int(totals["unknown"])
    return {
        "llm_requests": round(float(totals["llm_calls"] or 0.0), 3),
        "prompt_tokens": int(totals["prompt_tokens"] or 0),
        "completion_tokens": int(totals["completion_tokens"] or 0),
        "cost_usd": float(totals["cost_usd"] or 0.0) if unknown == 0 else f"unknown for {unknown} row(s)",
    }


def score_distribution_md(scored: pl.DataFrame, scale: float) -> str:
    """Histogram of both scores in five equal bins over [0, scale], plus errors and rows without a score."""
    width = scale / _BINS
    labels = [f"[{i * width:g}, {(i + 1) * width:g}{']' if i == _BINS - 1 else ')'}" for i in range(_BINS)]

    def counts(column: str) -> list[int]:
        values = scored.get_column(column).drop_nulls().to_list()
        out = [0] * _BINS
        for v in values:
            out[min(int(v / width), _BINS - 1) if v >= 0 else 0] += 1
        return out

    halluc, faith = counts("hallucination_score"), counts("faithfulness_score")
    errors = scored.filter(pl.col("status") == S.STATUS_ERROR).height
    unsampled = scored.filter(pl.col("status") == S.STATUS_NOT_SAMPLED).height
    skipped = scored.filter(pl.col("status") == S.STATUS_SKIPPED).height
    no_score = scored.filter((pl.col("status") == "ok") & pl.col("hallucination_score").is_null()).height
    lines = ["| score | hallucination | faithfulness |", "|---|---:|---:|"]
    lines += [f"| {label} | {h} | {f} |" for label, h, f in zip(labels, halluc, faith, strict=True)]
    lines.append(f"| no score (no claims) | {no_score} | {no_score} |")
    lines.append(f"| error | {errors} | {errors} |")
    if unsampled:
        lines.append(f"| not sampled | {unsampled} | {unsampled} |")
    if skipped:
        lines.append(f"| skipped (spend cap) | {skipped} | {skipped} |")
    return "\n".join(lines)


def _flagged_claims(verdicts: list[dict[str, Any]] | None) -> str:
    flagged = [v for v in verdicts or [] if v["verdict"] == "contradicted"]
    flagged = flagged or [v for v in verdicts or [] if v["verdict"] == "unsupported"]
    parts = [f"**{v['verdict']}**: {cell(v['claim'], 120)} ({cell(v['reason'] or '', 120)})" for v in flagged[:3]]
    return "<br>".join(parts) or "-"


def worst_answers_md(scored: pl.LazyFrame, answer_column: str, limit: int = 5) -> str:
    """The answers with the highest hallucination scores, with the claims that made them so."""
    present = scored.collect_schema().names()
    answer = pl.col(answer_column) if answer_column in present else pl.lit("")
    # The worst keys from the score columns alone, then the answers and verdicts of those rows only: sorting
    # with the text columns along would hold every answer and verdict of the day at once.
    keys = (
        scored.filter(pl.col("hallucination_score").is_not_null())
        .select("row_key", "hallucination_score", "faithfulness_score")
        .sort(["hallucination_score", "faithfulness_score", "row_key"], descending=[True, False, False])
        .head(limit)
        .collect()
    )
    worst = (
        scored.filter(pl.col("row_key").is_in(keys.get_column("row_key").implode()))
        .select("row_key", answer.alias("__a"), "verdicts")
        .collect(engine="streaming")
    )
    worst = keys.join(worst, on="row_key", how="left", maintain_order="left")
    if worst.is_empty():
        return "_no scored answers in this partition_"
    lines = ["| row_key | hallucination | faithfulness | answer | flagged claims |", "|---|---:|---:|---|---|"]
    for row in worst.iter_rows(named=True):
        lines.append(
            f"| {cell(row['row_key'], 60)} | {row['hallucination_score']:g} | {row['faithfulness_score']:g} "
            f"| {cell(row['__a'] or '')} | {_flagged_claims(row['verdicts'])} |"
        )
    return "\n".join(lines)


#: What the scored table's metadata reads of it (the rest stays on disk).
_SUMMARISED = ("status", "judge_model", "prompt_version", "hallucination_score", "faithfulness_score",
               "llm_calls", "prompt_tokens", "completion_tokens", "cost_usd", "billed_llm_calls",
               "billed_prompt_tokens", "billed_completion_tokens", "billed_cost_usd")


def scored_metadata(scored: pl.DataFrame | pl.LazyFrame, *, scale: float, answer_column: str) -> dict[str, Any]:
    """What the UI shows of a scored table: judges, errors, spend, the score distribution, the worst answers.
    A lazy table is read only for the columns that needs."""
    lazy = scored.lazy()
    present = lazy.collect_schema().names()
    slim = lazy.select([c for c in _SUMMARISED if c in present]).collect()
    errors = slim.filter(pl.col("status") == S.STATUS_ERROR).height
    unsampled = slim.filter(pl.col("status") == S.STATUS_NOT_SAMPLED).height
    models = sorted({m for m in slim.get_column("judge_model").unique().to_list() if m})
    prompts = sorted({p for p in slim.get_column("prompt_version").unique().to_list() if p})
    meta: dict[str, Any] = {
        "judge_model": ", ".join(models) or "-",
        "prompt_version": ", ".join(prompts) or "-",
        "error_rows": errors,
        "sampled_rows": slim.height - unsampled,
        "skipped_rows": slim.filter(pl.col("status") == S.STATUS_SKIPPED).height,
        **usage_totals(slim),
        **{f"billed_{k}": v for k, v in usage_totals(slim, "billed_").items()},
        "score_distribution": dg.MetadataValue.md(score_distribution_md(slim, scale)),
        "worst_answers": dg.MetadataValue.md(worst_answers_md(lazy, answer_column)),
    }
    for column in ("hallucination_score", "faithfulness_score"):
        mean = slim.get_column(column).mean()
        if isinstance(mean, float):
            meta[f"mean_{column}"] = round(mean, 4)
    return meta


def report_metadata(place: Place, top: Headline, threshold: float) -> dict[str, Any]:
    """The report's file (a link in the UI) and its headline numbers, as values and as a preview."""
    rows = [f"| {label} | {cell(value, 80)} |" for label, value in top.items(threshold)]
    meta: dict[str, Any] = {
        "path": dg.MetadataValue.path(place.uri),
        "size_bytes": place.size(),
        "period": top.period,
        "judges": top.judges,
        "answers": top.answers,
        "error_rows": top.error_answers,
        "preview": dg.MetadataValue.md("\n".join(["| headline | value |", "|---|---:|", *rows])),
    }
    for name in ("hallucination_mean", "faithfulness_mean", "over_threshold_share", "billed_cost_usd"):
        value = getattr(top, name)
        if value is not None:
            meta[name] = dg.MetadataValue.float(round(value, 4))
    return meta

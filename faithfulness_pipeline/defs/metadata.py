"""Materialisation metadata: table shape, judge usage, score distribution and worst answers (markdown)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import polars as pl

from faithfulness_pipeline.core.descriptions import describe
from faithfulness_pipeline.core.port import JudgeStats

if TYPE_CHECKING:
    from faithfulness_pipeline.report import Headline

_BINS = 5
_TEXT_LIMIT = 160


def table_metadata(frame: pl.DataFrame, table: str) -> dict[str, Any]:
    """Row count and column schema, each column described (``core/descriptions.py``, as in DuckDB)."""
    schema = dg.TableSchema(columns=[
        dg.TableColumn(name, str(dtype), description=describe(table, name)) for name, dtype in frame.schema.items()
    ])
    return {"dagster/row_count": frame.height, "dagster/column_schema": schema}


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
    }
    if stats.notes:
        meta["judge_notes"] = dg.MetadataValue.md("\n".join(f"- {_cell(n, 400)}" for n in stats.notes))
    return meta


def _cell(text: Any, limit: int = _TEXT_LIMIT) -> str:
    """Text safe inside a markdown table cell: one line, pipes escaped, shortened."""
    value = " ".join(str(text).split())
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return value.replace("|", "\\|")


def usage_totals(scored: pl.DataFrame, prefix: str = "") -> dict[str, Any]:
    """Totals over the rows of a scored table (both LLM steps; a packed request's usage is shared out) of
    the usage columns, or with ``prefix="billed_"`` of what the run paid."""
    if f"{prefix}llm_calls" not in scored.columns:
        return {}
    scored = scored.select(pl.col(f"{prefix}{c}").alias(c) for c in ("llm_calls", "prompt_tokens",
                                                                      "completion_tokens", "cost_usd"))
    cost = scored.get_column("cost_usd")
    unknown = cost.null_count()
    return {
        "llm_requests": round(float(scored.get_column("llm_calls").sum() or 0.0), 3),
        "prompt_tokens": int(scored.get_column("prompt_tokens").sum() or 0),
        "completion_tokens": int(scored.get_column("completion_tokens").sum() or 0),
        "cost_usd": float(cost.sum() or 0.0) if unknown == 0 else f"unknown for {unknown} row(s)",
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
    errors = scored.filter(pl.col("status") != "ok").height
    no_score = scored.filter((pl.col("status") == "ok") & pl.col("hallucination_score").is_null()).height
    lines = ["| score | hallucination | faithfulness |", "|---|---:|---:|"]
    lines += [f"| {label} | {h} | {f} |" for label, h, f in zip(labels, halluc, faith, strict=True)]
    lines.append(f"| no score (no claims) | {no_score} | {no_score} |")
    lines.append(f"| error | {errors} | {errors} |")
    return "\n".join(lines)


def _flagged_claims(verdicts: list[dict[str, Any]] | None) -> str:
    flagged = [v for v in verdicts or [] if v["verdict"] == "contradicted"]
    flagged = flagged or [v for v in verdicts or [] if v["verdict"] == "unsupported"]
    parts = [f"**{v['verdict']}**: {_cell(v['claim'], 120)} ({_cell(v['reason'] or '', 120)})" for v in flagged[:3]]
    return "<br>".join(parts) or "-"


def worst_answers_md(scored: pl.DataFrame, answer_column: str, limit: int = 5) -> str:
    """The answers with the highest hallucination scores, with the claims that made them so."""
    ok = scored.filter(pl.col("hallucination_score").is_not_null())
    if ok.is_empty():
        return "_no scored answers in this partition_"
    worst = ok.sort(["hallucination_score", "faithfulness_score", "row_key"], descending=[True, False, False]).head(
        limit
    )
    answer = pl.col(answer_column) if answer_column in worst.columns else pl.lit("")
    lines = ["| row_key | hallucination | faithfulness | answer | flagged claims |", "|---|---:|---:|---|---|"]
    for row in worst.select(
        "row_key", "hallucination_score", "faithfulness_score", answer.alias("__a"), "verdicts"
    ).iter_rows(named=True):
        lines.append(
            f"| {_cell(row['row_key'], 60)} | {row['hallucination_score']:g} | {row['faithfulness_score']:g} "
            f"| {_cell(row['__a'] or '')} | {_flagged_claims(row['verdicts'])} |"
        )
    return "\n".join(lines)


def scored_metadata(scored: pl.DataFrame, *, scale: float, answer_column: str) -> dict[str, Any]:
    errors = scored.filter(pl.col("status") != "ok").height
    models = sorted({m for m in scored.get_column("judge_model").unique().to_list() if m})
    prompts = sorted({p for p in scored.get_column("prompt_version").unique().to_list() if p})
    meta: dict[str, Any] = {
        "judge_model": ", ".join(models) or "-",
        "prompt_version": ", ".join(prompts) or "-",
        "error_rows": errors,
        **usage_totals(scored),
        **{f"billed_{k}": v for k, v in usage_totals(scored, "billed_").items()},
        "score_distribution": dg.MetadataValue.md(score_distribution_md(scored, scale)),
        "worst_answers": dg.MetadataValue.md(worst_answers_md(scored, answer_column)),
    }
    for column in ("hallucination_score", "faithfulness_score"):
        mean = scored.get_column(column).mean()
        if isinstance(mean, float):
            meta[f"mean_{column}"] = round(mean, 4)
    return meta


def aggregates_md(table: pl.DataFrame) -> str:
    """The day's aggregates as a markdown table (the headline columns only)."""
    if table.is_empty():
        return "_no rows_"
    columns = [
        "model",
        "answers",
        "error_answers",
        "hallucination_mean",
        "hallucination_p90",
        "faithfulness_mean",
        "over_threshold_share",
        "billed_cost_usd",
        "store_share",
        "duplicate_share",
    ]
    lines = ["| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]
    for row in table.select(columns).iter_rows():
        cells = [f"{v:.3g}" if isinstance(v, float) else _cell("-" if v is None else v, 40) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report_metadata(path: Path, top: Headline, threshold: float) -> dict[str, Any]:
    """The report's file (a link in the UI) and its headline numbers, as values and as a preview."""
    rows = [f"| {label} | {_cell(value, 80)} |" for label, value in top.items(threshold)]
    meta: dict[str, Any] = {
        "path": dg.MetadataValue.path(str(path)),
        "size_bytes": path.stat().st_size,
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

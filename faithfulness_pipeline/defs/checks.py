"""Asset checks. Each failed check says which rows (or files, or columns) broke the rule, and why.

- ``raw_conversations``: the checks evaluated while loading are in ``defs.load_checks``.
- every later asset: ``no_rows_lost`` compares its rows with its upstream partition.
- ``scored_conversations``: ``scores_in_range``, ``error_rate``, ``llm_judge_used`` (a WARN when the rows were
  scored by the offline baseline because no model is set) and ``claims_found`` (a WARN when too many answers of
  a sentence or more came back without a claim: their 0 scores read as perfect) and ``within_spend_cap`` (a
  WARN naming how many rows the spend cap left unjudged).

The later checks read the stored partitions (footers and lazy scans: no whole day in memory), so they can be
re-run on their own from the UI. An output's entry names the checks that guard it (:data:`CHECKS`).
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Final

import dagster as dg
import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.claimless import MIN_WORDS, count_claimless
from faithfulness_pipeline.defs.label_checks import labels_agree_check, labels_cover_check
from faithfulness_pipeline.defs.metadata import EXAMPLES, md_list
from faithfulness_pipeline.defs.resources import ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.judging.catalog import baseline_judges, note_on

NO_ROWS_LOST = "no_rows_lost"
SCORES_IN_RANGE = "scores_in_range"
ERROR_RATE = "error_rate"
LLM_JUDGE_USED = "llm_judge_used"
CLAIMS_FOUND = "claims_found"
WITHIN_SPEND_CAP = "within_spend_cap"


def _key_diff(table: pl.LazyFrame, upstream: pl.LazyFrame) -> tuple[tuple[int, list[str]], tuple[int, list[str]], int]:
    """(keys lost: their count and a few, keys added: likewise, rows repeating a key) of two tables, from their
    key columns alone (anti-joins in polars' streaming engine)."""
    mine, theirs = table.select(S.ROW_KEY), upstream.select(S.ROW_KEY)

    def counted(rows: pl.LazyFrame) -> tuple[int, list[str]]:
        n = int(rows.select(pl.len()).collect().item())
        return n, rows.sort(S.ROW_KEY).head(EXAMPLES).collect().get_column(S.ROW_KEY).to_list() if n else []

    repeated = mine.select(pl.len() - pl.col(S.ROW_KEY).n_unique()).collect().item()
    return (counted(theirs.join(mine, on=S.ROW_KEY, how="anti")), counted(mine.join(theirs, on=S.ROW_KEY, how="anti")),
            int(repeated))


def rows_preserved_check(
    asset: str, upstream: str, partitions: dg.PartitionsDefinition[str]
) -> dg.AssetChecksDefinition:
    """One row per upstream row, same keys: nothing dropped, nothing added, nothing duplicated."""

    @dg.asset_check(
        asset=asset,
        name=NO_ROWS_LOST,
        partitions_def=partitions,
        additional_deps=[upstream],
        description=f"Same rows (row keys) as {upstream}: nothing dropped, added or duplicated.",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        day = context.partition_key
        (lost, lost_keys), (extra, extra_keys), duplicated = _key_diff(warehouse.scan(asset, [day]),
                                                                       warehouse.scan(upstream, [day]))
        rows, upstream_rows = warehouse.rows(asset, day), warehouse.rows(upstream, day)
        problems = []
        if lost:
            problems.append(f"{lost} row(s) of the upstream table are missing, e.g. {lost_keys}")
        if extra:
            problems.append(f"{extra} row(s) have keys the upstream table lacks, e.g. {extra_keys}")
        if duplicated:
            problems.append(f"{duplicated} row(s) repeat a key")
        return dg.AssetCheckResult(
            passed=not problems,
            metadata={"rows": rows, "upstream_rows": upstream_rows, "problems": md_list(problems)},
            description="; ".join(problems) or None,
        )

    return _check


def claims_preserved_check(
    asset: str, upstream: str, partitions: dg.PartitionsDefinition[str]
) -> dg.AssetChecksDefinition:
    """The claim table holds exactly n_claims rows for every scored answer."""

    @dg.asset_check(
        asset=asset,
        name=NO_ROWS_LOST,
        partitions_def=partitions,
        additional_deps=[upstream],
        description=f"Exactly n_claims rows per answer of {upstream} (answers with an error have none).",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        day = context.partition_key
        table = warehouse.scan(asset, [day])
        expected = warehouse.scan(upstream, [day]).filter(pl.col("status") == S.STATUS_OK).select(
            S.ROW_KEY, pl.col("n_claims").cast(pl.Int64).alias("expected")
        )
        got = table.group_by(S.ROW_KEY).agg(pl.len().cast(pl.Int64).alias("got"))
        joined = expected.join(got, on=S.ROW_KEY, how="full", coalesce=True).with_columns(
            pl.col("expected").fill_null(0), pl.col("got").fill_null(0)
        )
        wrong = joined.filter(pl.col("expected") != pl.col("got"))
        off = int(wrong.select(pl.len()).collect().item())
        examples = [
            f"`{r[S.ROW_KEY]}`: {r['got']} claim row(s), n_claims = {r['expected']}"
            for r in wrong.sort(S.ROW_KEY).head(EXAMPLES).collect().iter_rows(named=True)
        ]
        return dg.AssetCheckResult(
            passed=off == 0,
            metadata={"claim_rows": warehouse.rows(asset, day), "answers_off": off, "examples": md_list(examples)},
            description=f"{off} answer(s) have the wrong number of claim rows" if examples else None,
        )

    return _check


def aggregates_preserved_check(
    asset: str, upstream: str, partitions: dg.PartitionsDefinition[str]
) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=asset,
        name=NO_ROWS_LOST,
        partitions_def=partitions,
        additional_deps=[upstream],
        description=f"The aggregates count every row of {upstream}.",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        day = context.partition_key
        counted = int(warehouse.scan(asset, [day]).select(pl.col("answers").sum()).collect().item() or 0)
        scored = warehouse.rows(upstream, day)
        passed = counted == scored
        return dg.AssetCheckResult(
            passed=passed,
            metadata={"answers_counted": counted, "scored_rows": scored},
            description=None if passed else f"aggregates count {counted} answers, the scored table has {scored}",
        )

    return _check


def scores_in_range_check(asset: str, partitions: dg.PartitionsDefinition[str]) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=asset,
        name=SCORES_IN_RANGE,
        partitions_def=partitions,
        description="Both scores lie in [0, scale]; ok rows with claims have scores; error rows, rows outside "
        "the sample and rows the spend cap skipped have none.",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, scoring: ScoringResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        scale = scoring.scale
        table = warehouse.scan(asset, [context.partition_key])
        ok = pl.col("status") == S.STATUS_OK
        problems: list[str] = []
        bad_rows = 0
        for column in ("hallucination_score", "faithfulness_score"):
            score = pl.col(column)
            rules = (
                (score.is_not_null() & ((score < 0) | (score > scale)) | score.is_nan(),
                 f"{column} = {{}} outside [0, {scale:g}]"),
                (ok & (pl.col("n_claims") > 0) & score.is_null(), f"status ok with claims but {column} is null{{}}"),
                (~ok & ~pl.col("status").is_in(S.UNJUDGED_STATUSES) & score.is_not_null(),
                 f"status error but {column} = {{}}"),
                *(((pl.col("status") == status) & score.is_not_null(), f"status {status} but {column} = {{}}")
                  for status in S.UNJUDGED_STATUSES),
            )
            for rule, says in rules:
                broken = table.filter(rule)
                bad_rows += int(broken.select(pl.len()).collect().item())
                for key, value in broken.select(S.ROW_KEY, column).head(EXAMPLES).collect().rows():
                    problems.append(f"`{key}`: " + says.format("" if value is None else value))
        return dg.AssetCheckResult(
            passed=bad_rows == 0,
            metadata={"scale": scale, "bad_rows": bad_rows, "examples": md_list(problems[:EXAMPLES])},
            description=problems[0] if problems else None,
        )

    return _check


def error_rate_check(asset: str, partitions: dg.PartitionsDefinition[str]) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=asset,
        name=ERROR_RATE,
        partitions_def=partitions,
        description="At most max_error_rate (scoring resource) of the judged rows (not those outside the sample "
        "or skipped at the spend cap) have status 'error'.",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, scoring: ScoringResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        day = context.partition_key
        scan = warehouse.scan(asset, [day])
        rows, sampled, skipped = scan.select(
            pl.len(), (pl.col("status") != S.STATUS_NOT_SAMPLED).sum().alias("sampled"),
            (pl.col("status") == S.STATUS_SKIPPED).sum().alias("skipped"),
        ).collect().row(0)
        judged = sampled - skipped
        errors = scan.filter(pl.col("status") == S.STATUS_ERROR)
        failed = int(errors.select(pl.len()).collect().item())
        rate = failed / judged if judged else 0.0
        passed = rate <= scoring.max_error_rate
        examples = [f"`{k}`: {e}" for k, e in errors.select(S.ROW_KEY, "error").sort(S.ROW_KEY)
                    .head(EXAMPLES).collect().rows()]
        return dg.AssetCheckResult(
            passed=passed,
            metadata={
                "error_rows": failed,
                "rows": rows,
                "sampled_rows": sampled,
                "skipped_rows": skipped,
                "error_rate": rate,
                "max_error_rate": scoring.max_error_rate,
                "examples": md_list(examples),
            },
            description=None
            if passed
            else f"{failed} of {judged} judged rows failed ({rate:.1%} > {scoring.max_error_rate:.1%}), "
            f"e.g. {examples[0]}",
        )

    return _check


def offline_fallback_check(asset: str, partitions: dg.PartitionsDefinition[str]) -> dg.AssetChecksDefinition:
    """A deployment without a model scores its schedule with the offline baseline: say so where people look."""

    @dg.asset_check(
        asset=asset,
        name=LLM_JUDGE_USED,
        partitions_def=partitions,
        description="The rows were scored by an LLM judge, not by the offline baseline the pipeline falls back to "
        "when no model is set (FP_JUDGE_MODEL). Warns only: the baseline's scores are still written.",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        day = context.partition_key
        rows = warehouse.rows(asset, day)
        baselines = sorted(baseline_judges())
        offline = int(warehouse.scan(asset, [day]).filter(
            pl.col("judge_model").str.contains_any(baselines)).select(pl.len()).collect().item())
        reason = "; ".join(note for name in baselines if (note := note_on(name)))
        return dg.AssetCheckResult(
            passed=offline == 0,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"offline_rows": offline, "rows": rows, "reason": reason},
            description=f"{offline} of {rows} row(s) scored by the offline baseline judge: no model is set "
            f"(FP_JUDGE_MODEL); see the reason in the metadata" if offline else None,
        )

    return _check


def claims_found_check(asset: str, partitions: dg.PartitionsDefinition[str]) -> dg.AssetChecksDefinition:
    """A judge that extracts no claims scores every answer 0, the best score there is: warn where people look."""

    @dg.asset_check(
        asset=asset,
        name=CLAIMS_FOUND,
        partitions_def=partitions,
        description=f"At most max_zero_claim_share (scoring resource) of the ok answers of {MIN_WORDS}+ words came "
        "back without a claim. Warns only: such answers score 0, which reads as perfect, so a judge that "
        "extracts nothing would otherwise go unnoticed.",
    )
    def _check(
        context: dg.AssetCheckExecutionContext, scoring: ScoringResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        found = count_claimless(warehouse.scan(asset, [context.partition_key]), scoring.output_column)
        limit = scoring.max_zero_claim_share
        return dg.AssetCheckResult(
            passed=not found.too_many(limit),
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "long_answers": found.long_answers,
                "long_answers_without_claims": found.without_claims,
                "share": found.share,
                "max_zero_claim_share": limit,
                "min_words": MIN_WORDS,
            },
            description=found.warning(limit),
        )

    return _check


def spend_cap_check(asset: str, partitions: dg.PartitionsDefinition[str]) -> dg.AssetChecksDefinition:
    """A day the spend cap stopped short is written, but not all of it is judged: say how much is missing."""

    @dg.asset_check(
        asset=asset,
        name=WITHIN_SPEND_CAP,
        partitions_def=partitions,
        description="No row of the day was left unjudged by the spend cap (max_cost_usd, per judging step). "
        "Warns only: the skipped rows are in the table with null scores; materialise the day again with a "
        "larger cap to judge them (stored results are not paid again).",
    )
    def _check(context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource) -> dg.AssetCheckResult:
        scan = warehouse.scan(asset, [context.partition_key])
        rows, skipped = scan.select(pl.len(), (pl.col("status") == S.STATUS_SKIPPED).sum()).collect().row(0)
        examples = [f"`{k}`" for (k,) in scan.filter(pl.col("status") == S.STATUS_SKIPPED).select(S.ROW_KEY)
                    .sort(S.ROW_KEY).head(EXAMPLES).collect().rows()]
        return dg.AssetCheckResult(
            passed=skipped == 0,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"skipped_rows": skipped, "rows": rows, "examples": md_list(examples)},
            description=f"{skipped} of {rows} rows were left unjudged: the spend cap (max_cost_usd) was reached; "
            "they have status skipped and null scores" if skipped else None,
        )

    return _check


#: A check of an output table, built for (the table, the table it is made of, the partitions).
CheckBuilder = Callable[[str, str, dg.PartitionsDefinition[str]], dg.AssetChecksDefinition]

#: The checks an output's entry may name (``outputs.kinds.TableOutput.checks``), by name.
CHECKS: Final[Mapping[str, CheckBuilder]] = MappingProxyType({
    "same_rows_as_upstream": rows_preserved_check,
    "one_row_per_claim": claims_preserved_check,
    "counts_every_answer": aggregates_preserved_check,
    "scores_in_range": lambda asset, upstream, partitions: scores_in_range_check(asset, partitions),
    "error_rate": lambda asset, upstream, partitions: error_rate_check(asset, partitions),
    "llm_judge_used": lambda asset, upstream, partitions: offline_fallback_check(asset, partitions),
    "claims_found": lambda asset, upstream, partitions: claims_found_check(asset, partitions),
    "within_spend_cap": lambda asset, upstream, partitions: spend_cap_check(asset, partitions),
    "labels_cover_the_groups": lambda asset, upstream, partitions: labels_cover_check(asset, partitions),
    "labels_agree_with_the_window": lambda asset, upstream, partitions: labels_agree_check(asset, partitions),
})

"""The day's scored rows: scored_conversations is the scoring of the day's raw_conversations, extracted_claims
and judged_claims, read side by side (the same rows in the same order, chunk for chunk), through the core's
scoring. The asset itself is the list of outputs' scored table (``defs.outputs``): it carries what BI reads,
every input column but the heavy ones (the context column and the chat messages, which stay in
raw_conversations, joined by row_key where a query needs them: the DuckDB view ``raw_conversations``), and the
scores, claims, verdicts, reasons, status, judge and usage columns of the CLI's scored table.
"""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
from collections.abc import Iterator
from datetime import UTC, datetime

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.normalize import with_internals
from faithfulness_pipeline.core.pipeline import score_step
from faithfulness_pipeline.defs.names import CLAIMS, LEGACY_JUDGE_COLUMNS, RAW, VERDICTS
from faithfulness_pipeline.defs.resources import ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.tables.read import rechunked


def _judged_chunks(warehouse: WarehouseResource, day: str, rows: int) -> Iterator[pl.DataFrame]:
    """The day's rows with their claims and verdicts: the three tables read side by side, chunk for chunk."""
    def frames(table: str) -> Iterator[pl.DataFrame]:
        if warehouse.rows(table, day) == 0:  # an empty day: one empty chunk, so its schema flows through
            yield pl.DataFrame(schema=warehouse.table_schema(table, day))
            return
        yield from rechunked(warehouse.batches(table, day, rows), rows)

    for r, c, v in zip(frames(RAW), frames(CLAIMS), frames(VERDICTS), strict=True):
        if not (r.get_column(S.ROW_KEY).equals(c.get_column(S.ROW_KEY))
                and r.get_column(S.ROW_KEY).equals(v.get_column(S.ROW_KEY))):
            raise RuntimeError(f"the tables of {day} do not hold the same rows in the same order: materialise "
                               f"{CLAIMS} and {VERDICTS} again")
        # judged_claims of the former layout carried every column and both steps' usage summed already
        former = S.CLAIMS in v.columns
        c, v = _with_cached_counts(c), _with_cached_counts(v)
        usage = [(v.get_column(n) if former else c.get_column(n) + v.get_column(n)).alias(n) for n in S.USAGE_COLUMNS]
        legacy = [n for n in LEGACY_JUDGE_COLUMNS if n in r.columns]
        # judged_claims written before the settings hash existed: the hash is unknown, never guessed
        settings = (v.get_column(S.JUDGE_SETTINGS) if S.JUDGE_SETTINGS in v.columns
                    else pl.repeat(None, v.height, dtype=pl.String, eager=True).alias(S.JUDGE_SETTINGS))
        yield r.drop(legacy).with_columns(
            c.get_column(S.CLAIMS), v.get_column(S.ERROR), v.get_column(S.VERDICTS),
            v.get_column(S.CONTEXT_TRUNCATED), *usage, v.get_column(S.RESULT_SOURCE),
            *[v.get_column(n) for n in S.BILLED_COLUMNS], settings,
        )


#: Columns that tables written before cached prompt tokens were counted lack.
_CACHED_COUNTS = ("cached_prompt_tokens", "billed_cached_prompt_tokens")


def _with_cached_counts(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the cached prompt token counts a table judged before they existed lacks, as 0: none were
    counted then, and the day's other rows must still score."""
    missing = [n for n in _CACHED_COUNTS if n not in frame.columns]
    return frame.with_columns(pl.lit(0, dtype=pl.Int64).alias(n) for n in missing) if missing else frame


def scored_chunks(
    warehouse: WarehouseResource, day: str, scoring: ScoringResource, model: str, prompt: str, run_id: str
) -> Iterator[pl.DataFrame]:
    """The day scored chunk by chunk (``run_id``: the Dagster run's); a day without rows gives one empty chunk,
    so its schema flows through."""
    config = scoring.config()
    scored_at = datetime.now(UTC)
    for judged in _judged_chunks(warehouse, day, config.chunk_rows):
        yield score_step(with_internals(judged, config), config, judge_model=model, prompt_version=prompt,
                         scored_at=scored_at, scoring_run_id=run_id)

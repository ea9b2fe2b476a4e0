"""Whole rows in the result store: the row cache the core's flow asks before the port (``core.port.RowCache``).

A chunk's rows whose two steps are stored whole (``store.rows``) cost one key, one lookup and one decode a
row, column-wise; the flow sends the rest through the port, where each stored step result is still served
item by item, and hands the finished rows back here to be kept whole. Both calls run on a worker thread:
hashing, lookups and decoding release the GIL for long stretches, so another chunk's lookup, scoring or
preparation runs on the other core meanwhile.
"""

from __future__ import annotations

import threading

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.flow import INDEX, V_USAGE, X_USAGE
from faithfulness_pipeline.judging.dedup import RecentKeys
from faithfulness_pipeline.judging.store.keys import KeyMaker, questions_of
from faithfulness_pipeline.judging.store.protocol import Store
from faithfulness_pipeline.judging.store.rows import decode_rows, encode_rows, row_keys
from faithfulness_pipeline.judging.stored import StoredResults
from faithfulness_pipeline.judging.tally import Tally


class StoreRows:
    """The :class:`~faithfulness_pipeline.core.port.RowCache` of a result store. A row this run kept itself
    (an identical row of an earlier chunk) is a duplicate when it comes back, not a store hit."""

    def __init__(self, stored: StoredResults, keys: KeyMaker, tally: Tally) -> None:
        self._stored = stored
        self._keys = keys
        self._tally = tally
        self._kept = RecentKeys()
        self._lock = threading.Lock()  # find and keep of two chunks may run on two threads at once

    @property
    def store(self) -> Store:
        return self._stored.store

    def find(self, rows: pl.DataFrame) -> pl.DataFrame | None:
        if rows.height == 0 or self._stored.refresh:
            return None
        keys = self._row_keys(rows)
        decoded = decode_rows(self._stored.lookup(keys))
        if decoded is None:
            return None
        with self._lock:
            ours = pl.Series([key in self._kept for key in keys], dtype=pl.Boolean)
        whole = pl.concat([rows.select(INDEX), decoded], how="horizontal").with_columns(ours.alias("_ours")).filter(
            pl.col("verdicts").is_not_null()
        )
        duplicates = int(whole.get_column("_ours").sum())
        # A row is two step results.
        self._tally.count(cached=2 * (whole.height - duplicates), duplicates=2 * duplicates)
        return _result_columns(whole) if whole.height else None

    def keep(self, rows: pl.DataFrame, results: pl.DataFrame) -> None:
        """Keeps the rows finished in this run (both steps, judged against passages) whole; a row that cannot
        be kept costs a slower re-run, never this run."""
        new = (
            results.get_column(S.ERROR).is_null()
            & results.get_column(S.VERDICTS).is_not_null()
            & (results.get_column(S.CLAIMS).list.len() > 0)
            & (rows.get_column(S.CONTEXT).list.len() > 0)
        )
        if not new.any():
            return
        done, finished = rows.filter(new), results.filter(new)
        try:
            keys = self._row_keys(done)
            values = encode_rows(finished.select(
                pl.col(S.CLAIMS).alias("claims"), pl.col(S.VERDICTS).alias("verdicts"),
                pl.col(S.CONTEXT_TRUNCATED).alias("context_truncated"), *X_USAGE, *V_USAGE,
            )).cast(pl.Binary).to_list()
        except Exception as exc:
            self._tally.warn(f"whole rows could not be kept in the result store ({type(exc).__name__})", exc)
            return
        self._stored.save([(key, "row", value) for key, value in zip(keys, values, strict=True)])
        with self._lock:
            self._kept.add(keys)

    def _row_keys(self, rows: pl.DataFrame) -> list[bytes]:
        return row_keys(self._keys, questions_of(rows.get_column(S.QUESTION)), rows.get_column(S.ANSWER),
                        rows.get_column(S.CONTEXT))


def _result_columns(found: pl.DataFrame) -> pl.DataFrame:
    return found.select(
        INDEX,
        pl.col("claims").alias(S.CLAIMS),
        pl.lit(None, dtype=pl.String).alias(S.ERROR),
        *X_USAGE,
        pl.col("verdicts").alias(S.VERDICTS),
        pl.col("context_truncated").alias(S.CONTEXT_TRUNCATED),
        *V_USAGE,
        pl.when(pl.col("_ours")).then(pl.lit("duplicate")).otherwise(pl.lit("store")).alias(S.RESULT_SOURCE),
        *[pl.lit(0, dtype=dtype).alias(name) for name, dtype in S.BILLED_SCHEMA.items()],
    )

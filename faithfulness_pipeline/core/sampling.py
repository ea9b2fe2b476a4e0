"""Deterministic samples of a run's rows: which answers are judged when ``sample_rate`` is below 1.

A row is in the sample when a point drawn from its row key alone falls below the rate. The point is the
first 8 bytes of BLAKE2b over a fixed salt and the key, read as a number in [0, 1). So:

- a re-run (another day's run, another worker, another process) picks the same rows: nothing depends on
  the order, the chunking or the shard a row is read in;
- samples nest: raising the rate keeps every row a lower rate had and adds others, so the result store
  keeps serving what was judged already, and lowering it keeps a subset;
- every stratum (the answering model; a Dagster partition is one day, so day x model there) is sampled at
  the same rate without being counted first, since the key is independent of it: the expected share of a
  stratum is the rate, whatever its size;
- a cap per stratum (``sample_max_rows``) keeps the stratum's rows with the smallest points: a cutoff per
  capped stratum, found in one pass over the run's keys before anything is judged (:func:`plan_sample`).
  Raising the cap or the rate raises every cutoff, so capped samples nest too.

Rows outside the sample are never given to a judge (never billed) and stay in the scored table with
``status = "not_sampled"`` and null scores: no row is dropped, and the aggregates count them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import polars as pl

from faithfulness_pipeline.core import schema as S

#: Changing the salt draws a new, independent sample: it is part of what a sample means.
_SALT: Final = b"fp-sample-v1\x00"
_SCALE: Final = float(1 << 64)
#: The stratum of rows whose model column is null, or of a table without one.
NO_STRATUM: Final = "\x00"


def hashed_points(keys: pl.Series, salt: bytes, name: str) -> pl.Series:
    """Each key's point in [0, 1): the first 8 bytes of BLAKE2b over ``salt`` and the key (null keys get 0).
    Two salts give two independent draws from the same keys."""
    base = hashlib.blake2b(salt, digest_size=8)

    def point(key: str | None) -> float:
        if key is None:
            return 0.0
        h = base.copy()
        h.update(key.encode("utf-8", "surrogatepass"))
        return int.from_bytes(h.digest(), "big") / _SCALE

    return pl.Series(name, [point(k) for k in keys.to_list()], dtype=pl.Float64)


def sample_points(keys: pl.Series) -> pl.Series:
    """Each row key's point in [0, 1) (null keys get 0: prepared rows always have a key)."""
    return hashed_points(keys, _SALT, "sample_point")


def sample_keys(rows: pl.DataFrame) -> pl.Series:
    """What each row's point is drawn from: its trace id where the rows came from spans (every answer of a
    trace is in the sample or none is, so a sampled trace is whole), else its row key."""
    keys = rows.get_column(S.ROW_KEY)
    if S.TRACE_ID in rows.columns:
        keys = rows.get_column(S.TRACE_ID).cast(pl.String).fill_null(keys)
    return keys


def in_sample(keys: pl.Series, rate: float) -> pl.Series:
    """Whether each row key is in the sample at ``rate`` (all of them at 1, without hashing)."""
    if rate >= 1.0:
        return pl.Series("sampled", [True] * keys.len(), dtype=pl.Boolean)
    return (sample_points(keys) < rate).alias("sampled")


@dataclass(frozen=True, slots=True)
class Sample:
    """Which rows a run judges: those whose point is below ``rate``, or below their stratum's cutoff where a
    cap cut it lower (``cutoffs``: stratum -> point; strata are the values of ``stratum_column``)."""

    rate: float = 1.0
    stratum_column: str = "model"
    cutoffs: Mapping[str, float] = field(default_factory=dict)

    @property
    def everything(self) -> bool:
        """Whether every row is judged (then nothing is hashed)."""
        return self.rate >= 1.0 and not self.cutoffs

    def selects(self, rows: pl.DataFrame) -> pl.Series:
        """Whether each of ``rows`` (with the row key and, when cutoffs exist, the stratum column) is in."""
        if self.everything or not self.cutoffs:
            return in_sample(sample_keys(rows), self.rate)
        points = sample_points(sample_keys(rows))
        cutoff = strata(rows, self.stratum_column).replace_strict(dict(self.cutoffs), default=self.rate,
                                                                   return_dtype=pl.Float64)
        return (points < cutoff).alias("sampled")


#: The sample of a run that judges every row.
EVERY_ROW: Final = Sample()


def strata(rows: pl.DataFrame, column: str) -> pl.Series:
    """Each row's stratum: its value of ``column`` as text (:data:`NO_STRATUM` for null or no such column)."""
    if column not in rows.columns:
        return pl.Series("stratum", [NO_STRATUM] * rows.height, dtype=pl.String)
    return rows.get_column(column).cast(pl.String).fill_null(NO_STRATUM).alias("stratum")


def plan_sample(chunks: Iterable[pl.DataFrame], rate: float, max_rows: int | None, stratum_column: str) -> Sample:
    """The run's sample at ``rate`` with at most ``max_rows`` rows per stratum, from one pass over its
    prepared ``chunks`` (only their keys and strata are read): for a stratum with more rows below the rate
    than the cap, the cutoff just above its ``max_rows``-th smallest point. Memory: ``max_rows`` points per
    stratum."""
    if max_rows is None:
        return Sample(rate, stratum_column)
    smallest: dict[str, list[float]] = {}
    over: set[str] = set()
    for chunk in chunks:
        frame = pl.DataFrame([sample_points(sample_keys(chunk)).alias("point"),
                              strata(chunk, stratum_column)]).filter(pl.col("point") < rate)
        for stratum, points in frame.group_by("stratum").agg(pl.col("point").bottom_k(max_rows + 1)).iter_rows():
            merged = sorted([*smallest.get(stratum, []), *points])
            if len(merged) > max_rows:
                over.add(stratum)
            smallest[stratum] = merged[:max_rows]
    # The cap's last point is in, and nothing above it: the cutoff is the next number after it.
    cutoffs = {stratum: math.nextafter(smallest[stratum][-1], 1.0) for stratum in over}
    return Sample(rate, stratum_column, cutoffs)

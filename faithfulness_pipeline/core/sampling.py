"""Deterministic samples of a run's rows: which answers are judged when ``sample_rate`` is below 1.

A row is in the sample when a point drawn from its row key alone falls below the rate. The point is the
first 8 bytes of BLAKE2b over a fixed salt and the key, read as a number in [0, 1). So:

- a re-run (another day's run, another worker, another process) picks the same rows: nothing depends on
  the order, the chunking or the shard a row is read in;
- samples nest: raising the rate keeps every row a lower rate had and adds others, so the result store
  keeps serving what was judged already, and lowering it keeps a subset;
- every stratum (day x model) is sampled at the same rate without being counted first, since the key is
  independent of it: the expected share of a stratum is the rate, whatever its size.

Rows outside the sample are never given to a judge (never billed) and stay in the scored table with
``status = "not_sampled"`` and null scores: no row is dropped, and the aggregates count them.
"""

from __future__ import annotations

import hashlib
from typing import Final

import polars as pl

#: Changing the salt draws a new, independent sample: it is part of what a sample means.
_SALT: Final = b"fp-sample-v1\x00"
_SCALE: Final = float(1 << 64)


def sample_points(keys: pl.Series) -> pl.Series:
    """Each row key's point in [0, 1) (null keys get 0: prepared rows always have a key)."""
    base = hashlib.blake2b(_SALT, digest_size=8)

    def point(key: str | None) -> float:
        if key is None:
            return 0.0
        h = base.copy()
        h.update(key.encode("utf-8", "surrogatepass"))
        return int.from_bytes(h.digest(), "big") / _SCALE

    return pl.Series("sample_point", [point(k) for k in keys.to_list()], dtype=pl.Float64)


def in_sample(keys: pl.Series, rate: float) -> pl.Series:
    """Whether each row key is in the sample at ``rate`` (all of them at 1, without hashing)."""
    if rate >= 1.0:
        return pl.Series("sampled", [True] * keys.len(), dtype=pl.Boolean)
    return (sample_points(keys) < rate).alias("sampled")

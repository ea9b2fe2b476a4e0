"""Row keys: content hashes, stable keys for tables that carry no id column, and the registry of a run's keys
(:class:`KeyRegistry`) that catches a key met twice, across chunks and files, in 8 bytes a row."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import polars as pl


def content_key(question: str | None, answer: str | None, context: Sequence[str]) -> str:
    """A 16-hex-digit key from what is judged; the same row content gives the same key in every run."""
    payload = json.dumps([question, answer, list(context)], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


#: Exactly the characters of Python's ``str.isspace()`` (checked by a test), so that a blank test done by
#: polars over a whole column agrees with ``not text.strip()`` on every row.
PYTHON_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_BLANK_PATTERN = "^[" + "".join(f"\\x{{{ord(c):x}}}" for c in PYTHON_WHITESPACE) + "]*$"


def is_blank(text: pl.Expr) -> pl.Expr:
    """True where ``text`` is null or ``not text.strip()`` in Python (polars' own whitespace set differs)."""
    return text.is_null() | text.str.contains(_BLANK_PATTERN)


#: Seed of the 64-bit key hashes (any fixed value: hashes never leave the process).
_KEY_HASH_SEED = 0x5EED


class KeyHashes:
    """A set of 64-bit key hashes in a few sorted runs: 8 bytes a key, and batch lookups in C.

    A run is merged into the run before it whenever that one is at most twice its size (like a
    binary counter), so there are O(log n) runs and adding n hashes costs O(n log n) in all; a
    merge briefly holds both runs and their merge.
    """

    def __init__(self) -> None:
        self._runs: list[pl.Series] = []

    def __len__(self) -> int:
        return sum(run.len() for run in self._runs)

    def contains(self, hashes: pl.Series) -> pl.Series:
        """For each hash, whether it was added before."""
        found = pl.Series(values=[False] * hashes.len(), dtype=pl.Boolean)
        for run in self._runs:
            at = run.search_sorted(hashes, side="left")
            inside = at < run.len()
            hit = run.gather(at.clip(upper_bound=run.len() - 1)) == hashes
            found = found | (inside & hit)
        return found

    def add(self, hashes: pl.Series) -> None:
        """Adds hashes that are not in the set yet (callers look them up first)."""
        run = hashes.unique().sort().rename("hash")
        if run.is_empty():
            return
        while self._runs and self._runs[-1].len() <= 2 * run.len():
            # a linear merge of two sorted runs: one new buffer, no re-sort
            run = self._runs.pop().to_frame().merge_sorted(run.to_frame(), key="hash").to_series()
        self._runs.append(run.rechunk())


def key_hashes(keys: pl.Series) -> pl.Series:
    return keys.hash(seed=_KEY_HASH_SEED)


@dataclass
class KeyRegistry:
    """Row keys seen so far in one run, so duplicates are caught across chunks and files.

    It holds 64-bit hashes of the keys, not the keys, so memory grows by 8 bytes a row however long
    the keys are. Two different keys whose hashes collide would be reported as a duplicate; with a
    well-mixed 64-bit hash the odds for n rows are about n²/2⁶⁵: 3·10⁻⁸ for a million rows, 3·10⁻⁴ for
    a hundred million. Content-hash keys are counted the same way: a hash per distinct content, and
    a count only for contents that repeat.
    """

    seen: KeyHashes = field(default_factory=KeyHashes)
    contents: KeyHashes = field(default_factory=KeyHashes)
    content_repeats: dict[str, int] = field(default_factory=dict)

    def number_repeats(self, keys: pl.Series) -> pl.Series:
        """Content-hash keys of identical rows get ``~2``, ``~3``... in input order (stable, never dropped)."""
        rows = keys.to_frame("key").with_columns(pl.col("key").cum_count().over("key").alias("nth"))
        distinct = rows.group_by("key", maintain_order=True).agg(pl.len().alias("here"))
        hashes = key_hashes(distinct.get_column("key"))
        before = self.contents.contains(hashes)
        self.contents.add(hashes.filter(~before))
        # Only contents met in an earlier chunk need Python: their count so far.
        earlier = distinct.get_column("key").filter(before).to_list()
        prior = pl.DataFrame(
            {"key": earlier, "prior": [self.content_repeats.get(k, 1) for k in earlier]},
            schema={"key": pl.String, "prior": pl.Int64},
        )
        distinct = distinct.join(prior, on="key", how="left", maintain_order="left").with_columns(
            pl.col("prior").fill_null(0), (pl.col("prior").fill_null(0) + pl.col("here")).alias("total")
        )
        for key, total in distinct.filter(pl.col("total") > 1).select("key", "total").iter_rows():
            self.content_repeats[key] = total
        nth = rows.join(distinct.select("key", "prior"), on="key", how="left", maintain_order="left").select(
            "key", (pl.col("nth") + pl.col("prior")).alias("nth")
        )
        return nth.select(
            pl.when(pl.col("nth") == 1)
            .then(pl.col("key"))
            .otherwise(pl.format("{}~{}", pl.col("key"), pl.col("nth")))
            .alias(keys.name)
        ).to_series()

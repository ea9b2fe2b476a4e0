"""Step results in the result store: found before a judge is asked, kept the moment they validate.

:class:`StoredResults` is the only code that reads or writes step results (claims of an answer, verdicts
of claims against passages) for the judge stack (``judging.stack``); whole rows are ``judging.row_cache``'s.
Keys come from ``store.keys.ContentKeys``, values from ``store.codec``. A store that fails costs money
(results asked again, results not kept), never rows: the failure becomes a note (``judging.tally``).

``refresh`` ignores what earlier runs stored, never what this run stored: a bulk judge (provider batch jobs)
stores a whole run's results before the scoring pass, which must find them. What such a judge paid for
them is told to :meth:`StoredResults.prepaid`, so that the scoring pass bills each one once (``llm``) instead
of calling it a store hit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Final, TypeVar

from faithfulness_pipeline.core.flow import Rows, extract_items, verdict_items
from faithfulness_pipeline.core.port import ExtractItem, ExtractResult, Usage, VerdictItem, VerdictResult
from faithfulness_pipeline.judging.store.codec import decode_claims, decode_verdicts, encode_claims, encode_verdicts
from faithfulness_pipeline.judging.store.keys import ContentKeys
from faithfulness_pipeline.judging.store.protocol import Store, StoreError, Value
from faithfulness_pipeline.judging.tally import Tally
from faithfulness_pipeline.judging.write_behind import TryingStore, WriteBehind

R = TypeVar("R", ExtractResult, VerdictResult)
#: A write that waited this long for another process's lock is told in the run's notes.
LOCKED_NOTE_S: Final = 1.0
Item = ExtractItem | VerdictItem
T = TypeVar("T")


class StoredResults:
    """The result store as the stack sees it, for step results (``step`` is ``extract`` or ``verdict``)."""

    def __init__(self, store: Store, tally: Tally, *, refresh: bool = False) -> None:
        self.store = store
        self.refresh = refresh
        self._tally = tally
        self._prepaid: dict[tuple[str, bytes], Usage] = {}
        self._behind = WriteBehind(self._put_behind, self._write_failed) if isinstance(store, TryingStore) else None

    def found(self, step: str, keys: Mapping[str, bytes]) -> dict[str, ExtractResult] | dict[str, VerdictResult]:
        """The stored results of ``keys`` (item id -> key) by item id; those this run paid for outside the
        port (:meth:`prepaid`) as its own, once, the others counted as store hits."""
        if self.refresh:  # what this run stored itself still counts
            keys = {i: k for i, k in keys.items() if (step, k) in self._prepaid}
        if not keys:
            return {}
        decode = self._extract if step == "extract" else self._verdicts
        found: dict[str, ExtractResult | VerdictResult] = {}
        fresh = 0
        for (item_id, key), value in zip(keys.items(), self.lookup(list(keys.values())), strict=True):
            result = None if value is None else decode(item_id, value)
            if result is None:
                continue
            paid = self._prepaid.pop((step, key), None)
            if paid is not None:
                result = replace(result, cached=False, source="llm", billed=paid)
                fresh += 1
            found[item_id] = result
        self._tally.count(cached=len(found) - fresh)
        return found  # type: ignore[return-value]

    def stored(self, keys: Iterable[bytes]) -> set[bytes]:
        """Those of ``keys`` the store holds (none under refresh): what a bulk judge need not ask for."""
        if self.refresh:
            return set()
        ordered = list(keys)
        return {k for k, v in zip(ordered, self.lookup(ordered), strict=True) if v is not None}

    def claims(self, keys: Sequence[bytes | None]) -> list[tuple[str, ...] | None]:
        """The stored claims of extraction ``keys`` (None where absent), refresh or not: this run's own
        results, read back to build the verdict items of a bulk judge."""
        present = [k for k in keys if k is not None]
        values = dict(zip(present, self.lookup(present), strict=True))
        out: list[tuple[str, ...] | None] = []
        for key in keys:
            value = None if key is None else values.get(key)
            decoded = None if value is None else self._decoded(decode_claims, value)
            out.append(None if decoded is None else decoded[0])
        return out

    def prepaid(self, step: str, paid: Mapping[bytes, Usage]) -> None:
        """What this run paid for the results of ``paid``'s keys that a bulk judge stored itself."""
        self._prepaid.update(((step, key), usage) for key, usage in paid.items())

    def missing(self, step: str, rows: Rows, keys: ContentKeys) -> dict[bytes, Item]:
        """The distinct items of ``step`` in the run (``rows`` reads it; ``core.flow`` makes its items) that
        the store lacks, by content key (all of them under refresh). Verdict items get the claims this run
        stored for their answers."""
        wanted: dict[bytes, Item] = {}
        for chunk in rows():
            extract = extract_items(chunk)
            item_keys = keys.extract(extract)
            items: Sequence[Item] = extract
            if step == "verdict":
                items = verdict_items(extract, self.claims([item_keys.get(it.id) for it in extract]), chunk)
                item_keys = keys.verdict(items)
            found = self.stored({k for k in item_keys.values() if k not in wanted})
            for it in items:
                key = item_keys.get(it.id)
                if key is not None and key not in found and key not in wanted:
                    wanted[key] = it
        return wanted

    def keep(self, pairs: Iterable[tuple[bytes, ExtractResult | VerdictResult]]) -> None:
        """Stores the results (by key) that this run produced; failures and store hits are not kept."""
        rows: list[tuple[bytes, str, Value]] = []
        for key, result in pairs:
            value = None if result.cached else _encode(result)
            if value is not None:
                rows.append((key, "extract" if isinstance(result, ExtractResult) else "verdict", value))
        self.save(rows)

    def lookup(self, keys: list[bytes]) -> list[Value | None]:
        """The stored value of every key, in order (None where absent, or when the store cannot be read)."""
        try:
            values = self.store.get_aligned(keys) if keys else []
        except (sqlite3.Error, StoreError) as exc:  # an unreadable store costs money, never rows
            self._tally.warn(f"result store read failed ({type(exc).__name__}): stored results were not used", exc)
            values = [None] * len(keys)
        behind = self._behind
        if behind is not None and behind.busy:  # what waits for a locked store is this run's too
            values = [behind.get(key) if value is None else value for key, value in zip(keys, values, strict=True)]
        return values

    def save(self, rows: Sequence[tuple[bytes, str, Value]]) -> None:
        """Stores ``rows`` now, without ever waiting for another process's lock on the store: rows a locked
        store refuses are written behind (``judging.write_behind``)."""
        if not rows:
            return
        try:
            if self._behind is None:
                self.store.put_many(rows)
            elif self._behind.busy or not self._try_put(rows):
                self._behind.add(rows)
        except Exception as exc:  # a full disk must not cost the results themselves
            self._write_failed(exc)

    def _try_put(self, rows: Sequence[tuple[bytes, str, Value]]) -> bool:
        assert isinstance(self.store, TryingStore)
        return self.store.try_put_many(rows)

    def _put_behind(self, rows: Sequence[tuple[bytes, str, Value]]) -> None:
        """The writer thread's write: it waits for the lock; a wait worth telling is one note."""
        started = time.monotonic()
        self.store.put_many(rows)
        if time.monotonic() - started >= LOCKED_NOTE_S:  # two runs sharing a store wait milliseconds
            self._tally.note(f"the result store was locked by another process for {LOCKED_NOTE_S:g} s or more: "
                             "results waited in memory for it (a run killed meanwhile pays for them again)")

    def flush(self) -> None:
        """Returns once every result kept so far is in the store (or its write failed); blocks."""
        if self._behind is not None:
            self._behind.flush()

    def close(self) -> None:
        """Writes what waits for the store; blocks."""
        if self._behind is not None:
            self._behind.close()

    def _write_failed(self, exc: Exception) -> None:
        self._tally.warn(f"result store write failed ({type(exc).__name__}): results of this run may be paid again",
                         exc)

    def _extract(self, item_id: str, value: Value) -> ExtractResult | None:
        decoded = self._decoded(decode_claims, value)
        return None if decoded is None else ExtractResult(item_id, decoded[0], None, decoded[1], True)

    def _verdicts(self, item_id: str, value: Value) -> VerdictResult | None:
        decoded = self._decoded(decode_verdicts, value)
        if decoded is None:
            return None
        verdicts, usage, cut = decoded
        return VerdictResult(item_id, verdicts, None, usage, True, cut)

    def _decoded(self, decode: Callable[[str], T], value: Value) -> T | None:
        """A stored value decoded, or None when it is unreadable (then it is asked for again)."""
        try:
            if not isinstance(value, str):
                raise TypeError("not a step result")
            return decode(value)
        except (ValueError, TypeError, KeyError, IndexError):
            self._tally.note("unreadable results in the result store were asked for again")
            return None


def _encode(result: ExtractResult | VerdictResult) -> str | None:
    if isinstance(result, ExtractResult):
        return None if result.claims is None else encode_claims(result.claims, result.usage)
    return None if result.verdicts is None else encode_verdicts(result.verdicts, result.usage, result.context_truncated)

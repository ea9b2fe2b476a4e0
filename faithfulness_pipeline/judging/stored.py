"""The stored-judge wrapper around any judge: :class:`StoredJudge` is the only code that reads or writes
the result store, and the one that pays once per distinct content in a run.

``StoredJudge(inner, store)`` is itself a judge. It answers what the run already knows (``run_memory``:
identical items are asked once per run, with or without a store) and what the store holds, and hands only
the rest to the inner judge (offline, litellm, a test fake: anything that names what changes its results,
:class:`Storable`). Every result says where it came from and what this run paid for it
(``core.judge.source_of`` / ``billed_of``): copies and store hits cost nothing.

- whole rows (``judge_rows``, the pipeline's way in): a chunk's rows whose two steps are stored whole
  (``row_results``) cost one key, one lookup and one decode a row, column-wise; the rest go through the
  core's own flow (``core.flow.judge_rows``) with this wrapper as the judge, where each step result that
  is stored is still served, item by item; rows finished that way are then kept whole;
- single items (``extract_claims`` / ``judge_claims``): each item's stored step result, else the inner
  judge's. Each result is stored the moment the inner judge reports it valid (``Hooks.settled``), and
  the inner judge asks again right before a request leaves (``Hooks.recheck``), so that what another
  process stored meanwhile is not paid twice.

Workers sharing a store (two processes, two machines on PostgreSQL) do not pay for the same item: before
the inner judge is asked, the contents are leased to this wrapper (``Store.claim``: owner, expiry,
renewed while the call runs, given back after its results are stored); contents another worker holds
are awaited in the store and taken over when the lease runs out, or at once when its holder is a dead
process of this machine.

``refresh`` skips every lookup, never a write. A store that fails costs money (results asked again,
results not kept), never rows: the failure becomes a note in the judge's stats.

One inner judge also writes to the store: the batch judge (``judges.litellm_batch``) asks for a whole run
before it is scored (``core.judge.Prepaying``, forwarded by :meth:`StoredJudge.prepay`) and stores each
batch's results under these same keys as soon as the batch is read, since they must outlive the call
that asked for them. It tells the wrapper what this run paid for them (:class:`Prepaid`), so that the
scoring pass bills them once instead of calling them store hits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sqlite3
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.flow import BLANK, INDEX, V_USAGE, X_USAGE, RowProgress, judge_rows
from faithfulness_pipeline.core.keys import is_blank
from faithfulness_pipeline.core.port import (
    NO_USAGE,
    ExtractItem,
    ExtractResult,
    Hooks,
    Judge,
    JudgeStats,
    Prepaying,
    ResultSource,
    Usage,
    VerdictItem,
    VerdictResult,
    source_of,
)
from faithfulness_pipeline.judging.estimates import CostEstimate, Estimating
from faithfulness_pipeline.judging.run_memory import RUN_MEMORY_ITEMS, RecentKeys, RunMemory
from faithfulness_pipeline.judging.store.rows import decode_rows, encode_rows, row_keys
from faithfulness_pipeline.judging.store.sqlite import (
    KeyMaker,
    ResultStore,
    Store,
    StoreError,
    Value,
    decode_claims,
    decode_verdicts,
    encode_claims,
    encode_verdicts,
)

log = logging.getLogger(__name__)

R = TypeVar("R", ExtractResult, VerdictResult)
I = TypeVar("I", ExtractItem, VerdictItem)  # noqa: E741
T = TypeVar("T")

_ERROR_CHARS: Final = 300
#: How long a content another worker is asking for stays reserved to it without being renewed (a worker
#: renews its leases every third of it while its call runs), and how often a waiting worker looks.
DEFAULT_LEASE_S: Final = 60.0
LEASE_POLL_S: Final = 0.25


@dataclass(frozen=True, slots=True)
class ResultScope:
    """Everything besides an item's content that changes a judge's results, per step: the step name,
    prompt versions, model, endpoint and output-changing parameters. It goes into every result key, so a
    result is never served for settings that did not produce it. Timeouts, limits and packing stay out."""

    extract: tuple[str | None, ...]
    verdict: tuple[str | None, ...]
    row: tuple[str | None, ...]


class ContentKeys:
    """The result keys of step items: one definition for the wrapper and for judges that keep results
    outside the port (the batch judge records which contents its batches ask for)."""

    def __init__(self, scope: ResultScope) -> None:
        self._extract = KeyMaker(*scope.extract)
        self._verdict = KeyMaker(*scope.verdict)

    def extract(self, items: Sequence[ExtractItem]) -> dict[str, bytes]:
        """Item id -> key, for the items that have something to extract from."""
        make = self._extract.key
        return {it.id: make(_question(it.question), it.answer) for it in items if it.answer and it.answer.strip()}

    def verdict(self, items: Sequence[VerdictItem]) -> dict[str, bytes]:
        """Item id -> key, for the items with claims and passages."""
        keyed = [it for it in items if it.claims and it.context]
        pairs = [(it.claims, it.context) for it in keyed]
        return dict(zip([it.id for it in keyed], self._verdict.keys_of_pairs(pairs), strict=True))


@runtime_checkable
class Prepaid(Protocol):
    """An inner judge that pays for results outside the port (provider batch jobs, before the scoring
    pass) and keeps them in the result store: the wrapper serves such a result as this run's own
    (``llm``, billed) the first time, not as a store hit."""

    def paid_for(self, step: str, key: bytes) -> Usage | None:
        """What this run paid for the stored result of ``key``, once; None when this run did not pay."""
        ...


@runtime_checkable
class Storable(Protocol):
    """A judge whose results may be stored: it names what changes them."""

    def result_scope(self) -> ResultScope: ...


def open_store(spec: Path | str) -> Store:
    """The result store ``spec`` names, opened now so that a bad one fails before any work: a path or
    ``sqlite:///path`` (a SQLite file), or a ``postgresql://`` URL (a database several machines share)."""
    from faithfulness_pipeline.judging.store.postgres import PostgresStore, is_postgres_url

    text = str(spec)
    store: Store
    if is_postgres_url(text):
        store = PostgresStore(text)
    elif "://" in text and not text.startswith("sqlite://"):
        scheme = text.split("://", 1)[0]
        raise ConfigError(f"result store {text.split('@')[-1]!r}: unknown scheme {scheme!r}; use a file path, "
                          "sqlite:///path or postgresql://user@host/database")
    else:
        store = ResultStore(text.removeprefix("sqlite://") if text.startswith("sqlite://") else text)
    try:
        store.open()
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise ConfigError(f"cannot use the result store {store.location}: {exc}") from None
    except StoreError as exc:
        raise ConfigError(str(exc)) from None
    return store


class StoredJudge:
    """``inner`` with the run's memory and a result store (None: memory only) in front of it (see the
    module docstring). Closing it closes both."""

    def __init__(self, inner: Judge, store: Store | None, *, refresh: bool = False,
                 remember: int = RUN_MEMORY_ITEMS, lease_s: float = DEFAULT_LEASE_S) -> None:
        if not isinstance(inner, Storable):
            if store is not None:
                store.close()
            raise ConfigError(f"the judge {inner.model_name} cannot use a result store: it does not name what "
                              "changes its results (result_scope)")
        scope = inner.result_scope()
        self.inner = inner
        self.store = store
        self.refresh = refresh
        self.lease_s = lease_s
        # Who holds a lease: unique per wrapper, so two runs in one process do not take each other's.
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.model_name: str = inner.model_name
        self.prompt_version: str = inner.prompt_version
        self._keys = ContentKeys(scope)
        self._row_keys = KeyMaker(*scope.row)
        redact = getattr(inner, "redact", None)
        self._redact: Callable[[str], str] = redact if callable(redact) else str
        # Lookups run on worker threads (the pipeline keeps the event loop free) while per-item calls
        # count their hits on the loop: counting takes this lock.
        self._lock = threading.Lock()
        self._cached = 0
        self._duplicates = 0
        self._notes: list[str] = []
        self._memory: dict[str, RunMemory[Any]] = {"extract": RunMemory(remember), "verdict": RunMemory(remember)}
        self._kept_rows = RecentKeys()  # touched on worker threads: under self._lock

    @property
    def overlap_rows(self) -> int | None:
        value = getattr(self.inner, "overlap_rows", None)
        return value if isinstance(value, int) else None

    async def prepay(self, chunks: Callable[[], Iterable[pl.DataFrame]]) -> None:
        """``core.judge.Prepaying``, when the inner judge has it (the batch judge). What the run remembered
        while it ran is forgotten afterwards: the scoring pass must find the prepaid results in the store
        (billed once, by ``Prepaid``), not as copies of results this run made."""
        if isinstance(self.inner, Prepaying):
            await self.inner.prepay(chunks)
            self._memory = {step: RunMemory(memory.capacity) for step, memory in self._memory.items()}

    # ------------------------------------------------------------------------------- the port

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        keys = self._keys.extract(items)
        return await self._ask(items, keys, hooks or Hooks(), self.inner.extract_claims, self._stored_extract,
                               _encode_extract)

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        keys = self._keys.verdict(items)
        return await self._ask(items, keys, hooks or Hooks(), self.inner.judge_claims, self._stored_verdicts,
                               _encode_verdicts)

    async def _ask(
        self,
        items: Sequence[Any],
        keys: dict[str, bytes],
        hooks: Hooks[R],
        ask: Callable[[Sequence[Any], Hooks[R]], Awaitable[list[R]]],
        stored: Callable[[str, Value], R | None],
        encode: Callable[[R], str | None],
    ) -> list[R]:
        """Each distinct content once: what this run already knows or is asking for elsewhere, then what the
        store holds, then the inner judge for the rest, each result kept as soon as it validates."""
        memory: RunMemory[R] = self._memory["extract" if encode is _encode_extract else "verdict"]
        first: dict[bytes, str] = {}  # content key -> the item of this call that stands for it
        for it in items:
            key = keys.get(it.id)
            if key is not None:
                first.setdefault(key, it.id)
        results: dict[str, R] = {}
        waits: dict[bytes, asyncio.Future[R]] = {}
        look: dict[str, bytes] = {}
        for key, item_id in first.items():
            if (known := memory.known(key)) is not None:
                results[item_id] = _copy(known, item_id)
            elif (future := memory.asking(key)) is not None:
                waits[key] = future
            else:
                look[item_id] = key
        for item_id, result in self._found(look, stored).items():
            results[item_id] = result
            memory.finish(look[item_id], result)
        early = len(results)
        hooks.tick(early)
        asked = [it for it in items if it.id not in results and first.get(keys.get(it.id, b"")) in (it.id, None)
                 and keys.get(it.id) not in waits]
        asked_keys = [keys[it.id] for it in asked if it.id in keys]
        for key in asked_keys:
            memory.start(key)
        reported: set[str] = set()

        def settled(done: Sequence[R]) -> None:
            done = [r for r in done if r.id not in reported]
            reported.update(r.id for r in done)
            rows = []
            for result in done:
                key = keys.get(result.id)
                if key is not None:
                    memory.finish(key, result)
                value = None if key is None or result.cached or self.store is None else encode(result)
                if key is not None and value is not None:
                    rows.append((key, _step_of(result), value))
            self._save(rows)
            if hooks.settled is not None and done:
                hooks.settled(done)

        def recheck(ids: Sequence[str]) -> dict[str, R]:
            found = self._found({i: keys[i] for i in ids if i in keys}, stored)
            rest = [i for i in ids if i not in found]
            if hooks.recheck is not None and rest:
                found.update(hooks.recheck(rest))
            return found

        if asked:
            inner_hooks = Hooks(progress=hooks.progress, settled=settled, recheck=recheck)
            try:
                answered = await self._ask_leased(asked, keys, ask, inner_hooks, stored)
            except BaseException as exc:
                memory.abandon(asked_keys, exc)
                raise
            for item in asked:
                result = answered[item.id]
                results[item.id] = result
                if (key := keys.get(item.id)) is not None:
                    memory.finish(key, result)
        for key, future in waits.items():
            results[first[key]] = _copy(await future, first[key])
        copies: list[str] = [it.id for it in items if it.id not in results]
        for item_id in copies:  # identical to an item of this call: its result
            results[item_id] = _copy(results[first[keys[item_id]]], item_id)
        self._count_copies([results[i] for i in (*copies, *(first[k] for k in waits))])
        hooks.tick(len(items) - len(asked) - early)
        return [results[it.id] for it in items]

    async def _ask_leased(
        self,
        asked: Sequence[Any],
        keys: dict[str, bytes],
        ask: Callable[[Sequence[Any], Hooks[R]], Awaitable[list[R]]],
        hooks: Hooks[R],
        stored: Callable[[str, Value], R | None],
    ) -> dict[str, R]:
        """The inner judge's results for ``asked``, by item id; with a store, except for the contents another
        worker is asking for right now (it holds their lease): those are awaited in the store, and taken
        over when their lease runs out (that worker died). Own leases are renewed while the call runs and
        given back when it ends, after its results are stored."""
        leasing = self.store is not None and not self.refresh and self.lease_s > 0
        results: dict[str, R] = {}
        others: dict[bytes, Any] = {}
        mine = list(asked)
        if leasing:
            wanted = list(dict.fromkeys(keys[it.id] for it in asked if it.id in keys))
            held = await asyncio.to_thread(self._claim, wanted)
            others = {keys[it.id]: it for it in asked if it.id in keys and keys[it.id] not in held}
            mine = [it for it in asked if it.id not in keys or keys[it.id] in held]

        async def run(items: list[Any]) -> None:
            if not items:
                return
            held_keys = [keys[it.id] for it in items if it.id in keys]
            beat = asyncio.create_task(self._renew(held_keys)) if leasing else None
            try:
                answered = await ask(items, hooks)
                if [r.id for r in answered] != [it.id for it in items]:
                    raise RuntimeError(f"the judge {self.model_name} broke the port contract: results do not "
                                       "match items")
                # What the inner judge did not report as it went (one that answers all at once); failures are
                # no results to keep, but those waiting for the same content get them too.
                if hooks.settled is not None:
                    hooks.settled([r for r in answered if r.error is None])
                results.update((r.id, r) for r in answered)
            finally:
                if beat is not None:
                    beat.cancel()
                if leasing:
                    await asyncio.to_thread(self._release, held_keys)

        async def wait() -> None:
            while others:
                await asyncio.sleep(LEASE_POLL_S)
                found = await asyncio.to_thread(self._found, {it.id: key for key, it in others.items()}, stored)
                for item_id, result in found.items():
                    results[item_id] = result
                    others.pop(keys[item_id])
                hooks.tick(len(found))
                if others:
                    taken = await asyncio.to_thread(self._claim, list(others))
                    await run([others.pop(key) for key in list(others) if key in taken])

        await asyncio.gather(run(mine), wait())
        return results

    def _claim(self, keys: list[bytes]) -> set[bytes]:
        """The leases of ``keys`` this worker holds now; all of them when the store cannot lease (then two
        workers may pay for the same items, never lose them)."""
        if self.store is None or not keys:
            return set(keys)
        try:
            held = self.store.claim(keys, self._owner, self.lease_s)
            rest = [k for k in keys if k not in held]
            dead = [o for o in self.store.lease_owners(rest) if _dead_here(o)] if rest else []
            if dead:  # a run on this machine that was killed: no need to wait for its leases to run out
                held |= self.store.claim(rest, self._owner, self.lease_s, takeover=dead)
            return held
        except (sqlite3.Error, StoreError) as exc:
            self._warn(f"result store leases failed ({type(exc).__name__}): items may be paid by two workers", exc)
            return set(keys)

    def _release(self, keys: list[bytes]) -> None:
        if self.store is None or not keys:
            return
        try:
            self.store.release(keys, self._owner)
        except (sqlite3.Error, StoreError) as exc:  # the leases run out on their own
            self._warn(f"result store leases could not be given back ({type(exc).__name__})", exc)

    async def _renew(self, keys: list[bytes]) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            await asyncio.to_thread(self._claim, keys)

    def _count_copies(self, copies: list[R]) -> None:
        duplicates = sum(1 for r in copies if r.source == "duplicate")
        with self._lock:
            self._duplicates += duplicates
            self._cached += len(copies) - duplicates

    def _found(self, keys: dict[str, bytes], stored: Callable[[str, Value], R | None]) -> dict[str, R]:
        """Stored results by item id (counted as cached); empty under ``refresh`` or without a store."""
        if self.refresh or not keys or self.store is None:
            return {}
        found: dict[str, R] = {}
        paid_for = self.inner.paid_for if isinstance(self.inner, Prepaid) else None
        step = "extract" if stored == self._stored_extract else "verdict"
        fresh = 0
        for (item_id, key), value in zip(keys.items(), self._lookup_aligned(list(keys.values())), strict=True):
            result = None if value is None else stored(item_id, value)
            if result is None:
                continue
            paid = None if paid_for is None else paid_for(step, key)
            if paid is not None:
                result = replace(result, cached=False, source="llm", billed=paid)
                fresh += 1
            found[item_id] = result
        self._count_cached(len(found) - fresh)
        return found

    def _stored_extract(self, item_id: str, value: Value) -> ExtractResult | None:
        decoded = self._decoded(decode_claims, value)
        return None if decoded is None else ExtractResult(item_id, decoded[0], None, decoded[1], True)

    def _stored_verdicts(self, item_id: str, value: Value) -> VerdictResult | None:
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
            self._note("unreadable results in the result store were asked for again")
            return None

    # -------------------------------------------------------------------------- whole rows

    async def judge_rows(self, rows: pl.DataFrame, progress: RowProgress | None) -> pl.DataFrame:
        """``core.judge.RowJudge``: stored rows column-wise, the rest through the core's flow."""
        if self.store is None:
            return await judge_rows(rows, self, progress)
        # Off the event loop: hashing, lookups and decoding release the GIL for long stretches, so another
        # chunk's store lookup, scoring or preparation runs on the other core meanwhile.
        stored = await asyncio.to_thread(self._stored_rows, rows.filter(~pl.col(BLANK)))
        rest = rows
        if stored is not None:
            if progress is not None:
                progress(float(stored.height))
            if stored.height == rows.height:  # a warm re-run: nothing left to ask
                return stored
            rest = rows.filter(~pl.col(INDEX).is_in(stored.get_column(INDEX).implode()))
        fresh = (await judge_rows(rest, self, progress)).sort(INDEX)
        await asyncio.to_thread(self._keep_rows, rest, fresh)
        return fresh if stored is None else pl.concat([fresh, stored.select(fresh.columns)], how="vertical")

    def _stored_rows(self, sendable: pl.DataFrame) -> pl.DataFrame | None:
        """The rows kept whole in the store, as result columns (None when there are none). A row this run
        kept itself (an identical row of an earlier chunk) is a duplicate, not a store hit."""
        if sendable.height == 0 or self.refresh:
            return None
        keys = row_keys(self._row_keys, _questions(sendable.get_column(S.QUESTION)),
                        sendable.get_column(S.ANSWER), sendable.get_column(S.CONTEXT))
        decoded = decode_rows(self._lookup_aligned(keys))
        if decoded is None:
            return None
        with self._lock:
            ours = pl.Series([key in self._kept_rows for key in keys], dtype=pl.Boolean)
        whole = pl.concat([sendable.select(INDEX), decoded], how="horizontal").with_columns(ours.alias("_ours")).filter(
            pl.col("verdicts").is_not_null()
        )
        duplicates = int(whole.get_column("_ours").sum())
        with self._lock:
            self._cached += 2 * (whole.height - duplicates)  # a row is two step results
            self._duplicates += 2 * duplicates
        return _result_columns(whole) if whole.height else None

    def _keep_rows(self, rows: pl.DataFrame, found: pl.DataFrame) -> None:
        """Keeps the rows finished in this run (both steps, judged against passages) whole; never raises:
        a row that cannot be kept costs a slower re-run, never this run."""
        new = (
            found.get_column(S.ERROR).is_null()
            & found.get_column(S.VERDICTS).is_not_null()
            & (found.get_column(S.CLAIMS).list.len() > 0)
            & (rows.get_column(S.CONTEXT).list.len() > 0)
        )
        if not new.any():
            return
        done, results = rows.filter(new), found.filter(new)
        try:
            keys = row_keys(self._row_keys, _questions(done.get_column(S.QUESTION)), done.get_column(S.ANSWER),
                            done.get_column(S.CONTEXT))
            values = encode_rows(results.select(
                pl.col(S.CLAIMS).alias("claims"), pl.col(S.VERDICTS).alias("verdicts"),
                pl.col(S.CONTEXT_TRUNCATED).alias("context_truncated"), *X_USAGE, *V_USAGE,
            )).cast(pl.Binary).to_list()
        except Exception as exc:
            self._warn(f"whole rows could not be kept in the result store ({type(exc).__name__})", exc)
            return
        self._save([(key, "row", value) for key, value in zip(keys, values, strict=True)])
        with self._lock:
            self._kept_rows.add(keys)

    # ------------------------------------------------------------------------------ dry run

    def estimate(self, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem]) -> CostEstimate:
        """The inner judge's estimate for each distinct content the store lacks, once. A verdict item whose
        id is that of an extraction item with stored claims is estimated with those claims."""
        x_keys = self._keys.extract(extract)
        x_found = self._found(x_keys, self._stored_extract)
        claims = {item_id: result.claims for item_id, result in x_found.items()}
        verdict = [
            VerdictItem(it.id, claims[it.id] or (), it.context, it.question) if it.id in claims else it
            for it in verdict
        ]
        v_keys = self._keys.verdict(verdict)
        v_found = self._found(v_keys, self._stored_verdicts)
        x_rest = _distinct([it for it in extract if it.id not in x_found], x_keys)
        v_rest = _distinct([it for it in verdict if it.id not in v_found], v_keys)
        cached = len(x_found) + len(v_found)
        if not isinstance(self.inner, Estimating):
            return CostEstimate(0, 0, 0, 0.0, cached_items=cached)
        inner = self.inner.estimate(x_rest, v_rest)
        repeated = len(extract) - len(x_found) - len(x_rest) + len(verdict) - len(v_found) - len(v_rest)
        notes = list(inner.notes)
        if repeated:
            notes.append(f"{repeated} items repeat an identical item of the run: each content is asked once")
        return CostEstimate(inner.requests, inner.prompt_tokens, inner.completion_tokens, inner.cost_usd, notes, cached,
                            inner.batch_cost_usd)

    # ------------------------------------------------------------------------------ the store

    def _lookup_aligned(self, keys: list[bytes]) -> list[Value | None]:
        """The stored value of every key, in order (None where absent, or when the store cannot be read)."""
        if self.store is None:
            return [None] * len(keys)
        try:
            return self.store.get_aligned(keys) if keys else []
        except (sqlite3.Error, StoreError) as exc:  # an unreadable store costs money, never rows
            self._warn(f"result store read failed ({type(exc).__name__}): stored results were not used", exc)
            return [None] * len(keys)

    def _save(self, rows: Sequence[tuple[bytes, str, Value]]) -> None:
        if not rows or self.store is None:
            return
        try:
            self.store.put_many(rows)
        except Exception as exc:  # a full disk must not cost the results themselves
            self._warn(f"result store write failed ({type(exc).__name__}): results of this run may be paid again",
                       exc)

    def _warn(self, note: str, exc: BaseException) -> None:
        self._note(note)
        log.warning("%s: %s", note, self._redact(str(exc))[:_ERROR_CHARS])

    def _note(self, note: str) -> None:
        with self._lock:
            if note not in self._notes:
                self._notes.append(note)

    def _count_cached(self, n: int) -> None:
        with self._lock:
            self._cached += n

    # ------------------------------------------------------------------------------ lifecycle

    def stats(self) -> JudgeStats:
        inner = self.inner.stats()
        with self._lock:
            cached, duplicates = self._cached, self._duplicates
            notes = [*inner.notes, *(n for n in self._notes if n not in inner.notes)]
        return JudgeStats(
            requests=inner.requests,
            prompt_tokens=inner.prompt_tokens,
            completion_tokens=inner.completion_tokens,
            cost_usd=inner.cost_usd,
            cached_items=inner.cached_items + cached,
            duplicate_items=inner.duplicate_items + duplicates,
            failed_items=inner.failed_items,
            retries=inner.retries,
            notes=notes,
        )

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            if self.store is not None:
                self.store.close()


def _dead_here(owner: str) -> bool:
    """Whether a lease owner (``host:pid:tag``) is a process of this machine that no longer runs."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _copy(result: R, item_id: str) -> R:
    """An identical item's result, for another item: no request was sent for it, nothing billed. A copy of
    a store hit is served from the store; a copy of what this run produced is a duplicate."""
    source: ResultSource = "store" if source_of(result) == "store" else "duplicate"
    return replace(result, id=item_id, cached=True, source=source, billed=NO_USAGE)


def _step_of(result: ExtractResult | VerdictResult) -> str:
    return "extract" if isinstance(result, ExtractResult) else "verdict"


def _encode_extract(result: ExtractResult) -> str | None:
    return None if result.claims is None else encode_claims(result.claims, result.usage)


def _encode_verdicts(result: VerdictResult) -> str | None:
    return None if result.verdicts is None else encode_verdicts(result.verdicts, result.usage, result.context_truncated)


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


def _distinct(items: list[I], keys: dict[str, bytes]) -> list[I]:
    """The first item of each content key (items without a key are all kept)."""
    seen: set[bytes] = set()
    out = []
    for it in items:
        key = keys.get(it.id)
        if key is None or key not in seen:
            out.append(it)
            if key is not None:
                seen.add(key)
    return out


def _question(question: str | None) -> str | None:
    """A question as the keys see it: a blank question is no question."""
    return question if question is not None and question.strip() else None


def _questions(questions: pl.Series) -> pl.Series:
    """:func:`_question` over a column."""
    return questions.to_frame("q").select(
        pl.when(is_blank(pl.col("q"))).then(pl.lit(None, dtype=pl.String)).otherwise(pl.col("q"))
    ).to_series()

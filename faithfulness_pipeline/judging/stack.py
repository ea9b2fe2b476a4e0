"""The judge stack: one judge with everything any judge can use around it, put together once.

    JudgeStack(inner, store) = run memory (judging.dedup) -> result store (judging.stored)
                               -> leases (judging.leases) -> the inner judge
                               + the row cache for the core's flow (judging.row_cache)
                               + a bulk judge's prepay (provider batch jobs), before the scoring pass

The inner judge is anything that implements the port (offline, litellm, batch, a test's scripted judge).
Its optional capabilities (``core.port``: Storable, Overlapping, Estimating) are looked up here, once
(:attr:`JudgeStack.capabilities`); the stack is itself a judge, so ``make_judge`` returns one, and the
entry points hand the core its
:meth:`~JudgeStack.judging` (the port, the row cache, the overlap). Every result says where it came from
and what this run paid for it (``core.port.source_of`` / ``billed_of``): copies and store hits cost nothing.

Each distinct content is asked once per run: what the run already knows or is asking for in another call
is copied or awaited, what the store holds is served, and only the rest reaches the inner judge, each
result kept the moment the inner judge reports it valid (``Hooks.settled``); right before a request leaves
the inner judge asks again (``Hooks.recheck``), so what another process stored meanwhile is not paid twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.flow import Rows
from faithfulness_pipeline.core.port import (
    Capabilities,
    ExtractItem,
    ExtractResult,
    Hooks,
    Judge,
    JudgeStats,
    Judging,
    Usage,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.dedup import RUN_MEMORY_ITEMS, RunMemory, copy_of
from faithfulness_pipeline.judging.leases import DEFAULT_LEASE_S, Leases
from faithfulness_pipeline.judging.row_cache import StoreRows
from faithfulness_pipeline.judging.store.keys import ContentKeys
from faithfulness_pipeline.judging.store.protocol import Store
from faithfulness_pipeline.judging.stored import StoredResults
from faithfulness_pipeline.judging.tally import Tally

R = TypeVar("R", ExtractResult, VerdictResult)
Item = ExtractItem | VerdictItem
#: A bulk judge's prepay of one step: the items the store lacks, by content key, and the run's rows (for a
#: spend cap to be shared between the steps) in; what this run paid for each result it stored, by key, out
#: (``judging.llm.batch.judge.BatchJudge.prepay_step``).
Bulk = Callable[[str, Mapping[bytes, Item], Rows], Awaitable[Mapping[bytes, Usage]]]


class JudgeStack:
    """``inner`` with the run's memory and a result store (None: memory only) in front of it (see the
    module docstring). Closing it closes both. ``bulk`` (with a store) asks a whole run before it is scored."""

    def __init__(self, inner: Judge, store: Store | None = None, *, refresh: bool = False,
                 remember: int = RUN_MEMORY_ITEMS, lease_s: float = DEFAULT_LEASE_S,
                 redact: Callable[[str], str] = str, bulk: Bulk | None = None) -> None:
        #: the inner judge's optional capabilities, looked up here once
        self.capabilities = Capabilities.of(inner)
        if self.capabilities.scope is None and store is not None:
            store.close()
            raise ConfigError(f"the judge {inner.model_name} cannot use a result store: it does not name what "
                              "changes its results (result_scope)")
        self.inner = inner
        self.model_name: str = inner.model_name
        self.prompt_version: str = inner.prompt_version
        self.tally = Tally(redact)
        self.store = store
        #: the content keys of the inner judge's items (None: it names no result scope, nothing is kept)
        self.keys = None if self.capabilities.scope is None else ContentKeys(self.capabilities.scope)
        self._memory = {step: RunMemory[Any](remember) for step in ("extract", "verdict")}
        self._stored = None if store is None else StoredResults(store, self.tally, refresh=refresh)
        self._leases = (None if store is None or self._stored is None or refresh or lease_s <= 0
                        else Leases(store, lease_s, self.tally, stored=self._stored.flush))
        self._rows = (None if self._stored is None or self.keys is None
                      else StoreRows(self._stored, self.keys.rows, self.tally))
        self._bulk = bulk

    def judging(self) -> Judging:
        """What the core's flow is given: this stack as the port, its row cache, the inner judge's overlap."""
        return Judging(self, self._rows, self.capabilities.overlap_rows, self.capabilities.scope)

    # ------------------------------------------------------------------------------- the port

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        if self.keys is None:
            return await self.inner.extract_claims(items, hooks)
        return await self._ask("extract", items, self.keys.extract(items), hooks or Hooks(), self.inner.extract_claims)

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        if self.keys is None:
            return await self.inner.judge_claims(items, hooks)
        return await self._ask("verdict", items, self.keys.verdict(items), hooks or Hooks(), self.inner.judge_claims)

    async def _ask(self, step: str, items: Sequence[Any], keys: dict[str, bytes], hooks: Hooks[R],
                   ask: Callable[[Sequence[Any], Hooks[R]], Awaitable[list[R]]]) -> list[R]:
        """Each distinct content once: what this run already knows or is asking for elsewhere, then what the
        store holds, then the inner judge for the rest, each result kept as soon as it validates."""
        memory: RunMemory[R] = self._memory[step]
        first = _first_of_each(items, keys)
        results, waits, look = _what_this_run_knows(memory, first)
        for item_id, result in self.found(step, look).items():
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
            for result in done:
                if (key := keys.get(result.id)) is not None:
                    memory.finish(key, result)
            if self._stored is not None:
                self._stored.keep((keys[r.id], r) for r in done if r.id in keys)
            if hooks.settled is not None and done:
                hooks.settled(done)

        def recheck(ids: Sequence[str]) -> dict[str, R]:
            found = self.found(step, {i: keys[i] for i in ids if i in keys})
            rest = [i for i in ids if i not in found]
            if hooks.recheck is not None and rest:
                found.update(hooks.recheck(rest))
            return found

        if asked:
            try:
                answered = await self._ask_inner(step, asked, keys, ask, Hooks(hooks.progress, settled, recheck))
            except BaseException as exc:
                memory.abandon(asked_keys, exc)
                raise
            for item in asked:
                results[item.id] = answered[item.id]
                if (item_key := keys.get(item.id)) is not None:
                    memory.finish(item_key, answered[item.id])
        for key, future in waits.items():
            results[first[key]] = copy_of(await future, first[key])
        self._copy_to_the_rest(items, keys, first, waits, results)
        hooks.tick(len(items) - len(asked) - early)
        return [results[it.id] for it in items]

    def _copy_to_the_rest(self, items: Sequence[Any], keys: dict[str, bytes], first: dict[bytes, str],
                          waits: dict[bytes, asyncio.Future[R]], results: dict[str, R]) -> None:
        """Gives each item of this call identical to another its result, and counts the results that were
        copies (of the store's or of another item's)."""
        copies: list[str] = [it.id for it in items if it.id not in results]
        for item_id in copies:  # identical to an item of this call: its result
            results[item_id] = copy_of(results[first[keys[item_id]]], item_id)
        copied = [results[i] for i in (*copies, *(first[k] for k in waits))]
        duplicates = sum(1 for r in copied if r.source == "duplicate")
        self.tally.count(cached=sum(1 for r in copied if r.source == "store"), duplicates=duplicates)

    async def _ask_inner(self, step: str, asked: Sequence[Any], keys: dict[str, bytes],
                         ask: Callable[[Sequence[Any], Hooks[R]], Awaitable[list[R]]], hooks: Hooks[R]) -> dict[str, R]:
        """The inner judge's results for ``asked`` by item id, leased when workers share the store."""

        async def checked(items: Sequence[Any], hooks: Hooks[R]) -> list[R]:
            answered = await ask(items, hooks)
            if [r.id for r in answered] != [it.id for it in items]:
                raise RuntimeError(f"the judge {self.model_name} broke the port contract: results do not match items")
            # What the inner judge did not report as it went (one that answers all at once); failures are no
            # results to keep, but those waiting for the same content get them too.
            if hooks.settled is not None:
                hooks.settled([r for r in answered if r.error is None])
            return answered

        if self._leases is None:
            return {r.id: r for r in await checked(asked, hooks)}
        return await self._leases.ask(asked, keys, checked, hooks, lambda look: self.found(step, look))

    def found(self, step: str, look: Mapping[str, bytes]) -> dict[str, Any]:
        """The stored results of ``look`` (item id -> content key) by item id; none without a store."""
        return {} if self._stored is None or not look else dict(self._stored.found(step, look))

    # ------------------------------------------------------------------------------ bulk judges

    async def prepay(self, rows: Rows) -> None:
        """A bulk judge (provider batch jobs) asks for the whole run before it is scored: every distinct
        extraction item the store lacks, then the verdicts of the claims that came back. ``rows`` reads the
        run's rows (``core.flow.ROW_COLUMNS`` frames) again each time it is called. The run memory is
        forgotten afterwards: the scoring pass must find those results in the store, billed once as this
        run's own, not as copies. Nothing to do for any other judge."""
        if self._bulk is None or self._stored is None or self.keys is None:
            return
        for step in ("extract", "verdict"):
            wanted = await asyncio.to_thread(self._stored.missing, step, rows, self.keys)
            self._stored.prepaid(step, await self._bulk(step, wanted, rows))
        self._memory = {step: RunMemory(memory.capacity) for step, memory in self._memory.items()}

    # ------------------------------------------------------------------------------ lifecycle

    def stats(self) -> JudgeStats:
        return self.tally.added_to(self.inner.stats())

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            try:
                if self._stored is not None:  # what waits for a locked store, written before it is closed
                    await asyncio.to_thread(self._stored.close)
            finally:
                if self.store is not None:
                    self.store.close()


def stack_of(judge: Judge) -> JudgeStack:
    """``judge`` as a stack: itself when it is one, else with the run memory in front of it (identical items
    asked once) when it names its result scope, else as it is."""
    return judge if isinstance(judge, JudgeStack) else JudgeStack(judge)


def _first_of_each(items: Sequence[Any], keys: dict[str, bytes]) -> dict[bytes, str]:
    """Content key -> the item of this call that stands for it (the first with that content)."""
    first: dict[bytes, str] = {}
    for it in items:
        key = keys.get(it.id)
        if key is not None:
            first.setdefault(key, it.id)
    return first


def _what_this_run_knows(
    memory: RunMemory[R], first: dict[bytes, str]
) -> tuple[dict[str, R], dict[bytes, asyncio.Future[R]], dict[str, bytes]]:
    """The contents of a call by what the run knows of them: results already known (by item id), results
    another call is asking for (futures by content key), and the rest, to look up in the store (item id ->
    content key)."""
    results: dict[str, R] = {}
    waits: dict[bytes, asyncio.Future[R]] = {}
    look: dict[str, bytes] = {}
    for key, item_id in first.items():
        if (known := memory.known(key)) is not None:
            results[item_id] = copy_of(known, item_id)
        elif (future := memory.asking(key)) is not None:
            waits[key] = future
        else:
            look[item_id] = key
    return results, waits, look

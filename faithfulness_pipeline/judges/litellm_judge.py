"""The product's judge: every LLM call goes through litellm, packed, limited, retried, stored and costed.

Only the ``judges.litellm_*`` modules import litellm, only inside functions (the import costs seconds;
importing them must not) and only through ``litellm_config.import_litellm`` (which keeps litellm from
downloading its price map). The judge is split by what each part holds:

- ``litellm_judge`` (this module): :class:`LiteLLMJudge`, the port, the store look-ups, the pack runner
  and its retry policy; it re-exports the public names of the others;
- ``litellm_config``: the settings, their defaults, the model card and the offline token counter;
- ``litellm_secrets``: the API key, read from the environment, and the :class:`Redactor`;
- ``litellm_plans``: what a step's items become: packing entries, prompts, parsing, results;
- ``litellm_requests``: pack queue and tries, and the one place a request is sent (``_Sender``).

Per step (claims, then verdicts) a call to the judge:

1. answers what needs no request (empty answers, zero claims, empty context) and what the result
   store already holds (``refresh`` skips the lookups, never the writes). The pipeline first asks for
   whole columns of stored results (:meth:`LiteLLMJudge.stored_rows`, then ``stored_claims`` and
   ``stored_verdicts``), so that a warm re-run never builds per-item objects; only what is not stored
   comes through the port, and rows finished that way are handed back whole (``store_rows``);
2. counts every remaining item's tokens with litellm's offline tokenizer and packs the items into
   requests under ``pack_tokens`` (truncating the passages of an item only when it alone exceeds the
   model's window, and saying so on its result). Packs leave while later items are still counted
   (:meth:`_run`);
3. sends the packs concurrently through one shared :class:`RequestLimiter` (in-flight cap, RPM, TPM,
   429 pauses), with litellm's own retries off so that every 429 reaches the limiter;
4. validates each reply item by item, stores every valid item at once, and re-asks only for the items
   that failed, in smaller packs, until ``max_retries``; after that the item gets an error result.

Every item gets exactly one result. The usage of each request (tokens, a fractional call, cost), failed
attempts included, is shared out over the items that rode in it. The API key is read from the
environment once, handed to litellm and to nothing else, and scrubbed from every error text.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import polars as pl

from faithfulness_pipeline.core import prompts
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.judge import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    JudgeStats,
    ProgressCallback,
    Usage,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.core.keys import is_blank
from faithfulness_pipeline.core.packing import (
    REPLY_SLACK_TOKENS,
    Count,
    Entry,
    Limits,
    Packer,
    halves,
    largest_remainder,
    rough_sentences,
)
from faithfulness_pipeline.core.parsing import ParsedReply
from faithfulness_pipeline.judges.limits import Clock, RequestLimiter, Sleep
from faithfulness_pipeline.judges.litellm_config import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_ITEMS_PER_PACK,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_PACK_TOKENS,
    LiteLLMJudgeConfig,
    ModelCard,
    import_litellm,
    model_card,
    token_counter,
)
from faithfulness_pipeline.judges.litellm_plans import (
    R,
    _ExtractPlan,
    _Plan,
    _question,
    _stored_extract,
    _stored_verdicts,
    _VerdictPlan,
)
from faithfulness_pipeline.judges.litellm_requests import (
    _TURN_S,
    EXTRACTION_HEAD_START_S,
    HEAD_START_S_PER_TOKEN,
    RATE_LIMIT_RETRY_FACTOR,
    _PackQueue,
    _Reply,
    _RequestFailed,
    _Sender,
    _Tries,
    _Turns,
)
from faithfulness_pipeline.judges.litellm_secrets import MissingAPIKeyError, Redactor, resolve_api_key
from faithfulness_pipeline.judges.row_results import decode_rows, encode_rows, row_keys
from faithfulness_pipeline.judges.store import (
    KeyMaker,
    ResultStore,
    Value,
    decode_claims,
    decode_claims_column,
    decode_verdicts_column,
    extract_content,
    pair_content,
)

__all__ = [
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_MAX_ITEMS_PER_PACK",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "DEFAULT_PACK_TOKENS",
    "NO_CONTEXT_REASON",
    "RATE_LIMIT_RETRY_FACTOR",
    "CostEstimate",
    "LiteLLMJudge",
    "LiteLLMJudgeConfig",
    "MissingAPIKeyError",
    "ModelCard",
    "Redactor",
    "model_card",
    "resolve_api_key",
    "token_counter",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

NO_CONTEXT_REASON: Final = "No context was provided to check this claim against."
_ERROR_CHARS: Final = 300


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """What a run would send, from :meth:`LiteLLMJudge.estimate` (which calls nothing)."""

    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    notes: list[str] = field(default_factory=list)
    cached_items: int = 0  # step results already in the store: they cost nothing


def _open_store(path: Path | None) -> ResultStore | None:
    if path is None:
        return None
    store = ResultStore(path)
    try:
        store.open()
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise ConfigError(f"cannot use the result store {path}: {exc}") from None
    return store


# -------------------------------------------------------------------------------------- requests


class LiteLLMJudge:
    """The Judge port over litellm. Build it once per run (or process); ``await aclose()`` after a run."""

    def __init__(self, config: LiteLLMJudgeConfig, *, clock: Clock | None = None, sleep: Sleep | None = None) -> None:
        self.config = config
        self.model_name: str = config.model
        self.prompt_version: str = prompts.PROMPT_VERSION
        # The key comes first: a missing one must fail before anything else is done.
        self.api_key_env, api_key = resolve_api_key(config.model, config.api_key_env)
        self._redact = Redactor(api_key)
        litellm = import_litellm()
        litellm.suppress_debug_info = True
        self.card = model_card(config)
        self.count_tokens: Count = token_counter(config.model)
        _freeze_imports()
        timing: dict[str, Any] = {}
        if clock is not None:
            timing["clock"] = clock
        if sleep is not None:
            timing["sleep"] = sleep
        self.limiter = RequestLimiter(
            config.max_concurrency,
            config.rpm,
            config.tpm,
            backoff_base_s=config.backoff_base_s,
            backoff_max_s=max(config.backoff_max_s, config.backoff_base_s),
            **timing,
        )
        self.store = _open_store(config.store_path)
        self.limits = Limits(
            pack_tokens=config.pack_tokens,
            max_items=config.max_items_per_pack,
            context_window=self.card.context_window,
            max_output_tokens=self.card.max_output_tokens,
        )
        self.frame_tokens = {step: self._frame_tokens(step) for step in ("extract", "verdict")}
        # Everything that changes a reply is in the key; timeouts, concurrency and packing are not.
        api_base = (config.api_base or "").rstrip("/")
        mode = "schema" if self.card.json_schema else "prompt"
        common = (config.model, api_base, f"t={config.temperature}", f"seed={config.seed}", mode)
        self._extract_keys = KeyMaker("extract", prompts.EXTRACT_PROMPT_VERSION, *common)
        window = f"window={self.card.context_window}"
        self._verdict_keys = KeyMaker("verdict", prompts.VERDICT_PROMPT_VERSION, *common, window)
        self._row_keys = KeyMaker(
            "row", prompts.EXTRACT_PROMPT_VERSION, prompts.VERDICT_PROMPT_VERSION, *common, window
        )
        self._stats = JudgeStats(cost_usd=0.0 if self.card.priced else None, notes=list(self.card.notes))
        # stored_claims / stored_verdicts run on a worker thread (the pipeline keeps the event loop free)
        # while per-item calls count their hits on the loop: counting takes this lock.
        self._count_lock = threading.Lock()
        self._sender = _Sender(
            config,
            api_key=api_key,
            api_key_env=self.api_key_env,
            limiter=self.limiter,
            count_tokens=self.count_tokens,
            redact=self._redact,
            stats=self._stats,
        )
        self._turns: _Turns | None = None

    def _frame_tokens(self, step: str) -> int:
        text = prompts.frame_text(step)
        return self.count_tokens(text) + 2 * prompts.MESSAGE_OVERHEAD_TOKENS + prompts.REPLY_PRIMING_TOKENS

    # -------------------------------------------------------------------------------- the port

    async def extract_claims(
        self, items: Sequence[ExtractItem], progress: ProgressCallback | None = None
    ) -> list[ExtractResult]:
        results: list[ExtractResult | None] = [None] * len(items)
        todo: list[int] = []
        for i, item in enumerate(items):
            if item.answer is None or not item.answer.strip():
                results[i] = ExtractResult(id=item.id, claims=())  # nothing to extract: no call
            else:
                todo.append(i)
        keys: dict[int, bytes] = {}
        misses: list[int] = []
        with _gc_paused():
            if self.store is not None:  # keys only address the store: no store, no hashing
                make = self._extract_keys.key
                keys = {i: make(_question(items[i].question), items[i].answer) for i in todo}
            hits = self._lookup(list(keys.values()))
            for i in todo:
                stored = _stored_extract(self, items[i], hits.get(keys[i]) if hits else None)
                if stored is None:
                    misses.append(i)
                else:
                    results[i] = stored
        self._count_cached(len(todo) - len(misses))
        _tick(progress, len(items) - len(misses))
        if misses:
            plan = _ExtractPlan(self, items, misses, keys)
            await self._run(plan, progress)
            for i, result in plan.results.items():
                results[i] = result
        return _all_set(results)

    async def judge_claims(
        self, items: Sequence[VerdictItem], progress: ProgressCallback | None = None
    ) -> list[VerdictResult]:
        results: list[VerdictResult | None] = [None] * len(items)
        todo: list[int] = []
        for i, item in enumerate(items):
            if not item.claims:
                results[i] = VerdictResult(id=item.id, verdicts=())
            elif not item.context:
                none = ClaimVerdict(verdict="unsupported", reason=NO_CONTEXT_REASON)
                results[i] = VerdictResult(id=item.id, verdicts=tuple(none for _ in item.claims))
            else:
                todo.append(i)
        keys: dict[int, bytes] = {}
        misses: list[int] = []
        with _gc_paused():
            if self.store is not None:
                pairs = [(items[i].claims, items[i].context) for i in todo]
                keys = dict(zip(todo, self._verdict_keys.keys_of_pairs(pairs), strict=True))
            hits = self._lookup(list(keys.values()))
            for i in todo:
                stored = _stored_verdicts(self, items[i], hits.get(keys[i]) if hits else None)
                if stored is None:
                    misses.append(i)
                else:
                    results[i] = stored
        self._count_cached(len(todo) - len(misses))
        _tick(progress, len(items) - len(misses))
        if misses:
            plan = _VerdictPlan(self, items, misses, keys)
            await self._run(plan, progress)
            for i, result in plan.results.items():
                results[i] = result
        return _all_set(results)

    @property
    def overlap_rows(self) -> int:
        """Rows per extraction call when the pipeline overlaps steps (see ``core.judge.Overlapping``).

        Big enough that a call's last, partly filled packs cost little (~16 extraction packs and ~60
        verdict packs of typical rows), small enough that verdicts of the first answers are sent while
        later answers' claims are still being extracted.
        """
        return 16 * self.config.max_items_per_pack

    def stored_claims(self, answers: pl.Series, questions: pl.Series) -> pl.DataFrame | None:
        """Claims and usage already in the store for each answer, column-wise (null claims: not stored).

        None when there is no store to read (or ``refresh``): then every item goes the per-item way.
        """
        if self.store is None or self.config.refresh or answers.len() == 0:
            return None
        frame = pl.DataFrame({"q": _questions(questions), "a": answers})
        content = frame.select(extract_content(pl.col("q"), pl.col("a"))).to_series()
        with _gc_paused():
            keys = self._extract_keys.keys_of_texts(content)
            values = self._lookup_aligned(keys)
        # Not counted as cached here: a row is served from the store only if its verdicts are stored too
        # (counted by stored_verdicts); the rest goes through the per-item port, which counts its own hits.
        return decode_claims_column(pl.Series(values, dtype=pl.String))

    def stored_verdicts(self, claims: pl.Series, contexts: pl.Series) -> pl.DataFrame | None:
        """Verdicts, truncation flag and usage already in the store for each (claims, context) pair."""
        if self.store is None or self.config.refresh or claims.len() == 0:
            return None
        heads, tails = pair_content(pl.col("c"), pl.col("x"))
        content = pl.DataFrame({"c": claims, "x": contexts}).select(heads.alias("h"), tails.alias("t"))
        odd = content.get_column("h").is_null() | content.get_column("t").is_null()
        with _gc_paused():
            if odd.any():
                # Texts holding NUL: the general layout, item by item (Python strings, rarely needed).
                where = odd.arg_true().to_list()
                odd_keys = [
                    self._verdict_keys.key_of_lists(c, x)
                    for c, x in zip(claims.gather(where).to_list(), contexts.gather(where).to_list(), strict=True)
                ]
                keys: list[bytes] = [b""] * content.height
                plain = (~odd).arg_true().to_list()
                rows = content.filter(~odd)
                fresh = self._verdict_keys.keys_of_texts(rows.get_column("h"), rows.get_column("t"))
                for n, key in zip(plain, fresh, strict=True):
                    keys[n] = key
                for n, key in zip(where, odd_keys, strict=True):
                    keys[n] = key
            else:
                keys = self._verdict_keys.keys_of_texts(content.get_column("h"), content.get_column("t"))
            values = self._lookup_aligned(keys)
        decoded = decode_verdicts_column(pl.Series(values, dtype=pl.String), claims.list.len())
        if decoded is not None:
            # Each hit is a row served whole from the store: its claims and its verdicts, two step results.
            self._count_cached(2 * (decoded.height - decoded.get_column("verdicts").null_count()))
        return decoded

    def stored_rows(self, answers: pl.Series, questions: pl.Series, contexts: pl.Series) -> pl.DataFrame | None:
        """Whole rows already in the store (``core.judge.StoredRows``): null ``verdicts`` where not."""
        if self.store is None or self.config.refresh or answers.len() == 0:
            return None
        with _gc_paused():
            keys = row_keys(self._row_keys, _questions(questions), answers, contexts)
            values = self._lookup_aligned(keys)
        decoded = decode_rows(values)
        if decoded is not None:
            self._count_cached(2 * (decoded.height - decoded.get_column("verdicts").null_count()))
        return decoded

    def store_rows(
        self, answers: pl.Series, questions: pl.Series, contexts: pl.Series, results: pl.DataFrame
    ) -> None:
        """Keeps finished rows whole (also under ``refresh``, which rewrites what it asks again)."""
        if self.store is None or answers.len() == 0:
            return
        try:
            with _gc_paused():
                keys = row_keys(self._row_keys, _questions(questions), answers, contexts)
            values = encode_rows(results).cast(pl.Binary).to_list()
        except Exception as exc:  # a row that cannot be kept costs a slower re-run, never this run
            note = f"whole rows could not be kept in the result store ({type(exc).__name__})"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            log.warning("%s: %s", note, self._redact(str(exc))[:_ERROR_CHARS])
            return
        self._save([(key, "row", value) for key, value in zip(keys, values, strict=True)])

    def _count_cached(self, n: int) -> None:
        with self._count_lock:
            self._stats.cached_items += n

    def _decoded(self, decode: Callable[[str], T], value: str | None) -> T | None:
        """A stored value decoded, or None: absent, or unreadable (then it is asked for again)."""
        if value is None:
            return None
        try:
            return decode(value)
        except (ValueError, TypeError, KeyError, IndexError):
            note = "unreadable results in the result store were asked for again"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            return None

    def stats(self) -> JudgeStats:
        s = self._stats
        notes = list(s.notes)
        c = self.limiter.counters
        if c.rate_limited:
            notes.append(f"{c.rate_limited} rate-limited replies (429); in-flight cap went down to {c.min_cap_seen}")
        return JudgeStats(
            requests=s.requests,
            prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens,
            cost_usd=s.cost_usd,
            cached_items=s.cached_items,
            failed_items=s.failed_items,
            retries=s.retries,
            notes=notes,
        )

    async def aclose(self) -> None:
        from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

        try:
            await close_litellm_async_clients()  # type: ignore[no-untyped-call]
        finally:
            if self.store is not None:
                self.store.close()

    # -------------------------------------------------------------------------------- dry run

    def estimate(self, answers: Sequence[ExtractItem], contexts: Sequence[tuple[str, ...]]) -> CostEstimate:
        """Requests, tokens and cost that scoring these rows would spend, without calling anything.

        Results already in the store are free. Claims not yet extracted are estimated as the answer's
        sentences; replies as their typical size. Retries are not included.
        """
        if len(answers) != len(contexts):
            raise ValueError(f"{len(answers)} answers but {len(contexts)} contexts")
        todo = [i for i, a in enumerate(answers) if a.answer is not None and a.answer.strip()]
        x_keys = {i: self._extract_key(answers[i]) for i in todo}
        x_hits = self._lookup(list(x_keys.values()))
        x_miss = [i for i in todo if x_keys[i] not in x_hits]
        claims_of = {
            i: decode_claims(x_hits[x_keys[i]])[0] if x_keys[i] in x_hits else tuple(rough_sentences(answers[i].answer))
            for i in todo
        }
        v_items = [
            VerdictItem(id=answers[i].id, claims=claims_of[i], context=tuple(contexts[i]))
            for i in todo
            if claims_of[i] and contexts[i]
        ]
        v_keys = [self._verdict_key(v) for v in v_items]
        v_hits = self._lookup(v_keys)
        v_miss = [n for n, k in enumerate(v_keys) if k not in v_hits]
        requests = prompt = completion = 0
        plans: list[_Plan[Any]] = []
        if x_miss:
            plans.append(_ExtractPlan(self, answers, x_miss, {}))
        if v_miss:
            plans.append(_VerdictPlan(self, v_items, v_miss, {}))
        for plan in plans:
            for pack in plan.packs():
                requests += 1
                prompt += pack.prompt_tokens
                completion += sum(plan.expected_output(i) for i in pack.indices)
        priced = self.card.cost(prompt, completion)
        return CostEstimate(
            requests=requests,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=None if priced is None else priced[0] + priced[1],
            notes=[*self.card.notes, "claims not yet extracted are estimated as the answer's sentences"],
            cached_items=(len(todo) - len(x_miss)) + (len(v_items) - len(v_miss)),
        )

    # ------------------------------------------------------------------------------- store

    def _extract_key(self, item: ExtractItem) -> bytes:
        return self._extract_keys.key(_question(item.question), item.answer)

    def _verdict_key(self, item: VerdictItem) -> bytes:
        return self._verdict_keys.key_of_lists(item.claims, item.context)

    def _lookup(self, keys: list[bytes]) -> dict[bytes, str]:
        """Stored step results (text) of those keys that have one."""
        nothing: dict[bytes, Value] = {}
        found = self._read_store(lambda store: store.get_many(keys), nothing) if keys else nothing
        return {key: value for key, value in found.items() if isinstance(value, str)}

    def _lookup_aligned(self, keys: list[bytes]) -> list[Value | None]:
        nothing: list[Value | None] = [None] * len(keys)
        return self._read_store(lambda store: store.get_aligned(keys), nothing) if keys else nothing

    def _read_store(self, read: Callable[[ResultStore], T], nothing: T) -> T:
        """``read(store)``, or ``nothing`` without a store, under ``refresh`` or when the store fails."""
        if self.store is None or self.config.refresh:
            return nothing
        try:
            return read(self.store)
        except sqlite3.Error as exc:  # an unreadable store costs money, never rows
            note = f"result store read failed ({type(exc).__name__}): stored results were not used"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            log.warning("%s: %s", note, exc)
            return nothing

    def _save(self, rows: Sequence[tuple[bytes, str, Value]]) -> None:
        if self.store is None or not rows:
            return
        try:
            self.store.put_many(rows)
        except Exception as exc:  # a full disk must not cost the results themselves
            note = f"result store write failed ({type(exc).__name__}): results of this run may be paid again"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            log.warning("%s: %s", note, self._redact(str(exc))[:_ERROR_CHARS])

    # ------------------------------------------------------------------------------ running

    async def _run(self, plan: _Plan[Any], progress: ProgressCallback | None) -> None:
        """Counts, packs and sends one step's items, the first requests leaving while the rest are counted.

        Counting is the judge's main CPU cost (every passage goes through the tokenizer): done up front
        it would leave every request slot idle at the start of each step. So packs queue as they
        close, in item order, and workers send them in that order: twice as many packs under way as
        request slots (``_Turns.packs``), so that a pack sleeping out a back-off never leaves a slot idle.
        """
        queue = _PackQueue()
        workers = [
            asyncio.create_task(self._work(plan, queue, progress)) for _ in range(2 * self.config.max_concurrency)
        ]
        try:
            packer = Packer(self.frame_tokens[plan.step], self.limits)
            order = plan.order()
            turn = self._loop_bound().counting
            at = 0
            # One call packs at a time, in the order the calls came: the first answers' packs all leave
            # first, so their claims are back (and their verdicts can go) while later answers' are out.
            # Interleaved, every call's last extraction pack would come back at the end of the phase.
            async with turn:
                while at < len(order):
                    # Counted on a worker thread, a short turn at a time: the tokenizer lets go of the GIL
                    # while it encodes, so the event loop sends requests and reads replies meanwhile
                    # instead of leaving them to wait (and hold their slots) until the counting is done.
                    counted = await asyncio.to_thread(_count_turn, plan, order, at)
                    for i, entry in zip(order[at : at + len(counted)], counted, strict=True):
                        if entry is None:
                            self._finish_error(plan, i, plan.oversize[i], progress)
                        else:
                            closed = packer.push(entry)
                            if closed is not None:
                                queue.put(closed)
                    at += len(counted)
            last = packer.flush()
            if last is not None:
                queue.put(last)
        finally:
            queue.close()
            await asyncio.gather(*workers)

    async def _work(self, plan: _Plan[Any], queue: _PackQueue, progress: ProgressCallback | None) -> None:
        while (pack := await queue.get()) is not None:
            # Judge-wide, not per call: with calls running side by side (the pipeline overlaps them) at most
            # ``2 * max_concurrency`` packs are rendered and waiting for a slot or a reply at once.
            async with self._loop_bound().packs:
                await self._guarded(plan, pack.indices, progress)

    def _loop_bound(self) -> _Turns:
        loop = asyncio.get_running_loop()
        if self._turns is None or self._turns.loop is not loop:  # asyncio locks belong to one event loop
            self._turns = _Turns(loop, asyncio.Semaphore(2 * self.config.max_concurrency), asyncio.Lock())
        return self._turns

    async def _guarded(self, plan: _Plan[Any], indices: tuple[int, ...], progress: ProgressCallback | None) -> None:
        try:
            indices = self._not_stored_since(plan, indices, progress)
            if indices:
                await self._run_pack(plan, indices, _Tries(), progress)
        except Exception as exc:  # a bug must not lose the other items: they become error rows
            log.exception("litellm judge: unexpected failure")
            reason = f"internal error in the judge: {type(exc).__name__}: {self._redact(str(exc))[:200]}"
            for i in indices:
                if i not in plan.results:
                    self._finish_error(plan, i, reason, progress)

    def _not_stored_since(
        self, plan: _Plan[Any], indices: tuple[int, ...], progress: ProgressCallback | None
    ) -> tuple[int, ...]:
        """The pack's items still missing from the store (asked when the pack is taken off its queue, and
        again once its request holds a slot, right before it is sent).

        Another process scoring the same rows against the same store may have stored some of them since
        the step's lookup; taking those spares paying twice for everything but the requests in flight.
        """
        if not plan.keys:
            return indices
        hits = self._lookup([plan.keys[i] for i in indices])
        if not hits:
            return indices
        missing: list[int] = []
        for i in indices:
            value = hits.get(plan.keys[i])
            stored = None if value is None else plan.stored_result(i, value)
            if stored is None:
                missing.append(i)
            else:
                plan.results[i] = stored
        self._count_cached(len(indices) - len(missing))
        _tick(progress, len(indices) - len(missing))
        return tuple(missing)

    async def _run_pack(
        self, plan: _Plan[Any], indices: tuple[int, ...], tries: _Tries, progress: ProgressCallback | None
    ) -> None:
        retries = self.config.max_retries
        while True:
            if self._sender.fatal is not None:
                for i in indices:
                    self._finish_error(plan, i, self._sender.fatal, progress)
                return
            messages, id_map, context = plan.render(indices)
            entries = [plan.entries[i] for i in indices]
            max_tokens = min(self.limits.max_output_tokens, REPLY_SLACK_TOKENS + sum(e.output_tokens for e in entries))
            estimate = self.frame_tokens[plan.step] + sum(e.prompt_tokens for e in entries)
            response_format = plan.response_format(list(id_map)) if self.card.json_schema else None
            remaining = indices

            def still_needed(sending: tuple[int, ...] = indices) -> bool:
                # Checked while holding a request slot: a result another process stored while this pack
                # waited for one is not paid again (only requests already in flight can be).
                nonlocal remaining
                remaining = self._not_stored_since(plan, sending, progress)
                return remaining == sending

            retry, before = tries.sent > 0, tries
            tries = tries.sending()
            try:
                reply = await self._sender.send(
                    messages, response_format, max_tokens, estimate, still_needed, _head_start_s(plan.step, max_tokens)
                )
            except _RequestFailed as failure:
                if failure.kind == "stale":  # nothing was sent: the rest goes as a smaller pack
                    tries = before
                    if not remaining:
                        return
                    indices = remaining
                    continue
                if retry:
                    self._stats.retries += 1
                if failure.sent:
                    self._charge(plan, indices, None, None, id_map)
                tries = tries.failed(failure.kind == "rate_limit")
                alone = len(indices) == 1
                if failure.kind == "fatal" or (failure.kind == "isolate" and alone):
                    for i in indices:
                        self._finish_error(plan, i, failure.reason, progress)
                    return
                if tries.exhausted(retries) or (failure.kind == "too_big" and alone):
                    for i in indices:
                        self._finish_error(plan, i, tries.gave_up(failure.reason), progress)
                    return
                if failure.kind in ("transient", "timeout"):
                    await self.limiter.back_off(tries.errors)
                if failure.kind in ("too_big", "timeout", "isolate") and not alone:
                    # Too big for the window, too slow for the timeout, or holding an item the provider
                    # refuses: halve the pack so that the other items get through.
                    await self._split(plan, halves(indices), tries, progress)
                    return
                continue  # after a 429 the limiter's shared pause makes this attempt wait
            if retry:
                self._stats.retries += 1
            parsed = plan.parse(reply.text, context)
            self._charge(plan, indices, reply, parsed, id_map)
            rows: list[tuple[bytes, str, str]] = []
            for local, value in parsed.ok.items():
                i = id_map[local]
                usage = plan.usage[i]
                plan.results[i] = plan.ok_result(i, value, usage)
                if i in plan.keys:
                    rows.append((plan.keys[i], plan.step, plan.encode(i, value, usage)))
            self._save(rows)
            _tick(progress, len(parsed.ok))
            if parsed.unknown_ids:
                log.debug("reply named ids it was not asked for: %s", ",".join(parsed.unknown_ids[:5]))
            failed = [id_map[local] for local in parsed.failed]
            if not failed:
                return
            tries = tries.failed(False)
            if tries.exhausted(retries):
                for local, why in parsed.failed.items():
                    self._finish_error(plan, id_map[local], tries.gave_up(f"invalid reply: {why}"), progress)
                return
            # Re-ask only for what failed; a reply that was wholly unusable is re-asked in halves.
            groups = halves(failed) if len(failed) == len(indices) else [tuple(failed)]
            if len(groups) == 1:
                indices = groups[0]
                continue
            await self._split(plan, groups, tries, progress)
            return

    async def _split(
        self, plan: _Plan[Any], groups: list[tuple[int, ...]], tries: _Tries, progress: ProgressCallback | None
    ) -> None:
        await asyncio.gather(*(self._run_pack(plan, g, tries, progress) for g in groups))

    def _finish_error(self, plan: _Plan[Any], i: int, reason: str, progress: ProgressCallback | None) -> None:
        if i in plan.results:
            return
        plan.results[i] = plan.error_result(i, self._redact(reason)[:_ERROR_CHARS], plan.usage[i])
        self._stats.failed_items += 1
        _tick(progress, 1)

    def _charge(
        self,
        plan: _Plan[Any],
        indices: Sequence[int],
        reply: _Reply | None,
        parsed: ParsedReply[Any] | None,
        id_map: Mapping[str, int],
    ) -> None:
        """Shares one request's usage out over its items (tokens by largest remainder, cost pro rata)."""
        n = len(indices)
        prompt = reply.prompt_tokens if reply else 0
        completion = reply.completion_tokens if reply else 0
        prompt_weights = [float(plan.entries[i].prompt_tokens) for i in indices]
        completion_weights = prompt_weights
        if parsed is not None and parsed.weights:
            by_index = {id_map[local]: float(w) for local, w in parsed.weights.items()}
            completion_weights = [by_index.get(i, 0.0) for i in indices]
        p_shares = largest_remainder(prompt, prompt_weights)
        c_shares = largest_remainder(completion, completion_weights)
        priced = self.card.cost(prompt, completion)
        for i, p, c in zip(indices, p_shares, c_shares, strict=True):
            cost: float | None = None
            if priced is not None:
                cost = (priced[0] * p / prompt if prompt else 0.0) + (priced[1] * c / completion if completion else 0.0)
            share = Usage(llm_calls=1.0 / n, prompt_tokens=p, completion_tokens=c, cost_usd=cost)
            plan.usage[i] = plan.usage[i] + share
        self._stats.prompt_tokens += prompt
        self._stats.completion_tokens += completion
        if priced is not None and self._stats.cost_usd is not None:
            self._stats.cost_usd += priced[0] + priced[1]


def _count_turn(plan: _Plan[Any], order: Sequence[int], start: int) -> list[Entry | None]:
    """``plan.add`` for the items of ``order`` from ``start`` on, for about ``_TURN_S`` (one item at least).

    Only one call counts at a time (the judge's counting lock), so one thread at a time writes to a
    plan's per-item tables; the event loop reads only the entries of packs already closed.
    """
    until = time.perf_counter() + _TURN_S
    out: list[Entry | None] = []
    for at in range(start, len(order)):
        out.append(plan.add(order[at]))
        if time.perf_counter() >= until:
            break
    return out


_FROZEN: list[bool] = []


def _freeze_imports() -> None:
    """Moves what exists now (litellm's modules, the tokenizer) out of reach of the cyclic collector.

    ``import litellm`` leaves a heap of a few hundred thousand objects. Every full collection walked
    all of them: 0.3-0.4 s with the event loop stopped, several times a run, and every reply waiting
    meanwhile held its request slot (measured: a sixth of the slot-time at 64 requests in flight). Those
    objects live as long as the process anyway; the run's own garbage is still collected. Once a process.
    """
    if not _FROZEN:
        gc.collect()  # what is garbage already is freed, not frozen
        gc.freeze()
        _FROZEN.append(True)


def _head_start_s(step: str, max_tokens: int) -> float:
    extraction = EXTRACTION_HEAD_START_S if step == "extract" else 0.0
    return extraction + max_tokens * HEAD_START_S_PER_TOKEN


def _questions(questions: pl.Series) -> pl.Series:
    """Questions as the prompts see them: a blank question is no question."""
    return questions.to_frame("q").select(
        pl.when(is_blank(pl.col("q"))).then(pl.lit(None, dtype=pl.String)).otherwise(pl.col("q"))
    ).to_series()


_GC_LOCK = threading.Lock()
_gc_pausers = 0  # threads inside _gc_paused right now: the last one out turns the collector back on
_gc_was_enabled = False


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while keys are hashed and stored results decoded.

    Both build a few small objects per item, none in a cycle; with a big heap (a chunk of rows with
    their passages) every automatic collection walks all of it, which made decoding four times
    slower. The collector's previous state comes back when the last of overlapping callers (two
    chunks' lookups on worker threads) leaves.
    """
    global _gc_pausers, _gc_was_enabled
    with _GC_LOCK:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()


def _tick(progress: ProgressCallback | None, n: int) -> None:
    if progress is not None and n > 0:
        progress(n)


def _all_set(results: Sequence[R | None]) -> list[R]:
    out = [r for r in results if r is not None]
    if len(out) != len(results):  # a bug in this module, never a row outcome
        raise RuntimeError("the litellm judge left an item without a result")
    return out

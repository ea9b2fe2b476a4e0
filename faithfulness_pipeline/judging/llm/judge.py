"""The product's judge: every LLM call goes through litellm, packed, limited, retried and costed.

Only the ``judging.llm`` modules import litellm, only inside functions (the import costs seconds;
importing them must not) and only through ``card.import_litellm`` (which keeps litellm from downloading
its price map). The judge is split by what each part holds:

- ``judge`` (this module): :class:`LiteLLMJudge`, the port, the pack runner and its retry policy;
- ``card``: the model card (window, output limit, prices) and the offline token counter (the settings
  themselves are ``settings.judge``);
- ``secrets``: the API key, read from the environment, and the :class:`Redactor`;
- ``plans``: what a step's items become: packing entries, prompts (``prompts``), parsing (``parsing``),
  results; ``packing`` fits entries into requests;
- ``requests``: pack queue and tries, and the one place a request is sent (``Sender``); ``limits`` the
  shared request limiter.

A result store is not this judge's business: the judge stack (``judging.stack``) wraps it (as it wraps
any judge), and this judge tells it each result the moment it validates and asks it, right before a
request leaves, whether its items were stored meanwhile (``core.port.Hooks``).

Per step (claims, then verdicts) a call to the judge:

1. answers what needs no request (empty answers, zero claims, empty context);
2. counts every remaining item's tokens with litellm's offline tokenizer and packs the items into
   requests under ``pack_tokens`` (truncating the passages of an item only when it alone exceeds the
   model's window, and saying so on its result). Packs leave while later items are still counted
   (:meth:`LiteLLMJudge._run`);
3. sends the packs concurrently through one shared :class:`RequestLimiter` (in-flight cap, RPM, TPM,
   429 pauses), with litellm's own retries off so that every 429 reaches the limiter;
4. validates each reply item by item and re-asks only for the items that failed, never with the very
   same request (smaller packs, or a repair message quoting what was wrong), until ``max_retries``;
   after that the item gets an error result.

Every item gets exactly one result. The usage of each request (tokens, a fractional call, cost), failed
attempts included, is shared out over the items that rode in it. The API key is handed to litellm and to
nothing else, and scrubbed from every error text.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.port import (
    ERROR_CHARS,
    CostEstimate,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    ResultScope,
    VerdictItem,
    VerdictResult,
    billed_of,
)
from faithfulness_pipeline.judging.llm import prompts
from faithfulness_pipeline.judging.llm.card import import_litellm, model_card, token_counter
from faithfulness_pipeline.judging.llm.limits import Clock, RequestLimiter, Sleep
from faithfulness_pipeline.judging.llm.packing import (
    REPLY_SLACK_TOKENS,
    Entry,
    Limits,
    Pack,
    Packer,
    halves,
)
from faithfulness_pipeline.judging.llm.parsing import ParsedReply
from faithfulness_pipeline.judging.llm.plans import (
    ExtractPlan,
    Plan,
    R,
    Sizing,
    VerdictPlan,
    repair_messages,
    share_usage,
)
from faithfulness_pipeline.judging.llm.requests import (
    EXTRACTION_HEAD_START_S,
    HEAD_START_S_PER_TOKEN,
    TURN_S,
    Reply,
    RequestFailed,
    Sender,
    Tries,
    Turns,
)
from faithfulness_pipeline.judging.llm.secrets import (
    MissingAPIKeyError,
    Redactor,
    model_provider,
    resolve_api_key,
)
from faithfulness_pipeline.settings.judge import JudgeSettings

log = logging.getLogger(__name__)


def _tpm_warning(config: JudgeSettings, limits: Limits) -> str | None:
    """What a ``tpm`` below one full pack costs: such a request takes the whole minute's budget and more,
    so the next one waits until the bucket has refilled what it overdrew."""
    pack = min(config.pack_tokens, limits.usable_window)
    if config.tpm is None or config.tpm >= pack:
        return None
    wait_s = 60.0 * pack / config.tpm
    return (
        f"tpm {config.tpm} is below one full request of about {pack} prompt tokens (pack_tokens): each full "
        f"request waits about {wait_s:.0f} s ({wait_s / 60:.1f} min) for the tokens of the one before; raise "
        f"--tpm (FP_JUDGE_TPM) or lower --pack-tokens to at most {max(config.tpm, 256)}"
    )



class LiteLLMJudge:
    """The Judge port over litellm. Build it once per run (or process); ``await aclose()`` after a run.

    The API key is read from the environment variable the settings name (or the provider's usual one)
    unless it is given as ``api_key``. ``store`` and ``refresh`` are not this judge's business: the
    factory (``judging.factory``) puts a ``JudgeStack`` around it.
    """

    def __init__(
        self,
        config: JudgeSettings,
        *,
        api_key: str | None = None,
        need_key: bool = True,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        if not config.model or not config.model.strip():
            raise ConfigError("the litellm judge needs a model name (e.g. --model openai/gpt-4o-mini)")
        self.config = config
        self.model_name: str = config.model
        self.prompt_version: str = prompts.PROMPT_VERSION
        # The key comes first: a missing one must fail before anything else is done.
        if api_key:
            self.api_key_env: str | None = config.api_key_env
        else:
            try:
                self.api_key_env, api_key = resolve_api_key(self.model_name, config.api_key_env)
            except MissingAPIKeyError:
                # A judge that only estimates (the dry run) never sends a request, so it needs no key.
                if need_key:
                    raise
                self.api_key_env, api_key = None, None
        #: where requests go: the configured base, else the provider's default where litellm knows one
        self.endpoint: str | None = config.api_base or model_provider(self.model_name)[1]
        self.redact = Redactor(api_key)
        litellm = import_litellm()
        litellm.suppress_debug_info = True
        self.card = model_card(config, self.model_name)
        count_tokens = token_counter(self.model_name)
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
        limits = Limits(
            pack_tokens=config.pack_tokens,
            max_items=config.max_items_per_pack,
            context_window=self.card.context_window,
            max_output_tokens=self.card.max_output_tokens,
        )
        frame = {
            step: count_tokens(prompts.frame_text(step)) + 2 * prompts.MESSAGE_OVERHEAD_TOKENS
            + prompts.REPLY_PRIMING_TOKENS
            for step in ("extract", "verdict")
        }
        self.sizing = Sizing(count_tokens, limits, frame, self.card.priced)
        self._stats = JudgeStats(cost_usd=0.0 if self.card.priced else None, notes=list(self.card.notes))
        if (slow := _tpm_warning(config, limits)) is not None:
            log.warning("warning: %s", slow)
            self._stats.notes.append(slow)
        self._sender = Sender(
            config,
            api_key=api_key,
            api_key_env=self.api_key_env,
            limiter=self.limiter,
            count_tokens=count_tokens,
            redact=self.redact,
            stats=self._stats,
        )
        self._turns: Turns | None = None

    # -------------------------------------------------------------------------------- the port

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        free = [ExtractPlan.free(item) for item in items]
        plan = ExtractPlan(self.sizing, items, [i for i, r in enumerate(free) if r is None])
        return await self._call(plan, free, hooks or Hooks())

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        free = [VerdictPlan.free(item) for item in items]
        plan = VerdictPlan(self.sizing, items, [i for i, r in enumerate(free) if r is None])
        return await self._call(plan, free, hooks or Hooks())

    async def _call(self, plan: Plan[R], free: list[R | None], hooks: Hooks[R]) -> list[R]:
        hooks.tick(len(free) - len(plan.indices))
        if plan.indices:
            await self._run(plan, hooks)
        results = [plan.results.get(i) if r is None else r for i, r in enumerate(free)]
        out = [r for r in results if r is not None]
        if len(out) != len(results):  # a bug in this module, never a row outcome
            raise RuntimeError("the litellm judge left an item without a result")
        return out

    @property
    def overlap_rows(self) -> int:
        """Rows per extraction call when the pipeline overlaps steps (see ``core.port.Overlapping``).

        Big enough that a call's last, partly filled packs cost little (~16 extraction packs and ~60
        verdict packs of typical rows), small enough that verdicts of the first answers are sent while
        later answers' claims are still being extracted.
        """
        return 16 * self.config.max_items_per_pack

    def result_scope(self) -> ResultScope:
        """Everything that changes a reply is in the result keys; timeouts, concurrency and packing are not."""
        cfg = self.config
        mode = "schema" if self.card.json_schema else "prompt"
        common = (self.model_name, (cfg.api_base or "").rstrip("/"), f"t={cfg.temperature}", f"seed={cfg.seed}", mode)
        window = f"window={self.card.context_window}"
        return ResultScope(
            extract=("extract", prompts.EXTRACT_PROMPT_VERSION, *common),
            verdict=("verdict", prompts.VERDICT_PROMPT_VERSION, *common, window),
            row=("row", prompts.EXTRACT_PROMPT_VERSION, prompts.VERDICT_PROMPT_VERSION, *common, window),
        )

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
            failed_items=s.failed_items,
            retries=s.retries,
            notes=notes,
        )

    async def aclose(self) -> None:
        await import_litellm().close_litellm_async_clients()

    # -------------------------------------------------------------------------------- dry run

    def estimate(self, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem]) -> CostEstimate:
        """Requests, tokens and cost that these items would spend, without calling anything.

        Replies are estimated at their typical size; retries are not included.
        """
        plans: list[Plan[Any]] = [
            ExtractPlan(self.sizing, extract, [i for i, it in enumerate(extract) if ExtractPlan.free(it) is None]),
            VerdictPlan(self.sizing, verdict, [i for i, it in enumerate(verdict) if VerdictPlan.free(it) is None]),
        ]
        requests = prompt = completion = 0
        for plan in plans:
            for pack in plan.packs():
                requests += 1
                prompt += pack.prompt_tokens
                completion += sum(plan.expected_output(i) for i in pack.indices)
        priced = self.card.cost(prompt, completion)
        batch = self.card.for_batches().cost(prompt, completion)
        return CostEstimate(
            requests=requests,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=None if priced is None else priced[0] + priced[1],
            notes=[*self.card.notes, "claims not yet extracted are estimated as the answer's sentences"],
            batch_cost_usd=None if batch is None else batch[0] + batch[1],
        )

    # ------------------------------------------------------------------------------ running

    async def _run(self, plan: Plan[R], hooks: Hooks[R]) -> None:
        """Counts, packs and sends one step's items, the first requests leaving while the rest are counted.

        Counting is the judge's main CPU cost (every passage goes through the tokenizer): done up front
        it would leave every request slot idle at the start of each step. So packs queue as they
        close, in item order, and workers send them in that order: twice as many packs under way as
        request slots (``Turns.packs``), so that a pack sleeping out a back-off never leaves a slot idle.
        """
        queue: asyncio.Queue[Pack | None] = asyncio.Queue()  # packs in the order they closed; None: no more
        workers = [asyncio.create_task(self._work(plan, queue, hooks)) for _ in range(2 * self.config.max_concurrency)]
        try:
            packer = Packer(self.sizing.frame_tokens[plan.step], self.sizing.limits)
            order = plan.order()
            at = 0
            # One call packs at a time, in the order the calls came: the first answers' packs all leave
            # first, so their claims are back (and their verdicts can go) while later answers' are out.
            # Interleaved, every call's last extraction pack would come back at the end of the phase.
            async with self._loop_bound().counting:
                while at < len(order):
                    # Counted on a worker thread, a short turn at a time: the tokenizer lets go of the GIL
                    # while it encodes, so the event loop sends requests and reads replies meanwhile
                    # instead of leaving them to wait (and hold their slots) until the counting is done.
                    counted = await asyncio.to_thread(_count_turn, plan, order, at)
                    for i, entry in zip(order[at : at + len(counted)], counted, strict=True):
                        if entry is None:
                            self._finish_error(plan, i, plan.oversize[i], hooks)
                        else:
                            closed = packer.push(entry)
                            if closed is not None:
                                queue.put_nowait(closed)
                    at += len(counted)
            last = packer.flush()
            if last is not None:
                queue.put_nowait(last)
        finally:
            for _ in workers:
                queue.put_nowait(None)
            await asyncio.gather(*workers)

    async def _work(self, plan: Plan[R], queue: asyncio.Queue[Pack | None], hooks: Hooks[R]) -> None:
        while (pack := await queue.get()) is not None:
            # Judge-wide, not per call: with calls running side by side (the pipeline overlaps them) at most
            # ``2 * max_concurrency`` packs are rendered and waiting for a slot or a reply at once.
            async with self._loop_bound().packs:
                await self._guarded(plan, pack.indices, hooks)

    def _loop_bound(self) -> Turns:
        loop = asyncio.get_running_loop()
        if self._turns is None or self._turns.loop is not loop:  # asyncio locks belong to one event loop
            self._turns = Turns(loop, asyncio.Semaphore(2 * self.config.max_concurrency), asyncio.Lock())
        return self._turns

    async def _guarded(self, plan: Plan[R], indices: tuple[int, ...], hooks: Hooks[R]) -> None:
        try:
            indices = self._not_done_elsewhere(plan, indices, hooks)
            if indices:
                await self._run_pack(plan, indices, Tries(), hooks)
        except Exception as exc:  # a bug must not lose the other items: they become error rows
            log.exception("litellm judge: unexpected failure")
            reason = f"internal error in the judge: {type(exc).__name__}: {self.redact(str(exc))[:200]}"
            for i in indices:
                self._finish_error(plan, i, reason, hooks)

    def _not_done_elsewhere(self, plan: Plan[R], indices: tuple[int, ...], hooks: Hooks[R]) -> tuple[int, ...]:
        """The pack's items that the caller still needs (``Hooks.recheck``: asked when the pack is taken
        off its queue, and again once its request holds a slot, right before it is sent).

        Another process scoring the same rows against the same result store may have stored some of them
        since the call began; taking those spares paying twice for everything but the requests in flight.
        """
        if hooks.recheck is None:
            return indices
        found = hooks.recheck([plan.item_id(i) for i in indices])
        if not found:
            return indices
        missing: list[int] = []
        for i in indices:
            result = found.get(plan.item_id(i))
            if result is None:
                missing.append(i)
            else:
                # What this run already paid for the item (a failed attempt) stays on its bill.
                paid = plan.usage[i]
                plan.results[i] = replace(result, billed=billed_of(result) + paid) if paid.llm_calls else result
        hooks.tick(len(indices) - len(missing))
        return tuple(missing)

    async def _run_pack(self, plan: Plan[Any], indices: tuple[int, ...], tries: Tries, hooks: Hooks[Any]) -> None:
        retries = self.config.max_retries
        while True:
            if self._sender.fatal is not None:
                for i in indices:
                    self._finish_error(plan, i, self._sender.fatal, hooks)
                return
            rendered, id_map, context = plan.render(indices)
            repair = [] if tries.repair is None else repair_messages(*tries.repair, attempt=tries.sent + 1)
            messages = [*rendered, *repair]
            entries = [plan.entries[i] for i in indices]
            max_tokens = min(self.sizing.limits.max_output_tokens,
                             REPLY_SLACK_TOKENS + sum(e.output_tokens for e in entries))
            estimate = self.sizing.frame_tokens[plan.step] + sum(e.prompt_tokens for e in entries)
            estimate += sum(self.sizing.count_tokens(m["content"]) for m in repair)
            response_format = plan.response_format(list(id_map)) if self.card.json_schema else None
            remaining = indices

            def still_needed(sending: tuple[int, ...] = indices) -> bool:
                # Checked while holding a request slot: a result another process stored while this pack
                # waited for one is not paid again (only requests already in flight can be).
                nonlocal remaining
                remaining = self._not_done_elsewhere(plan, sending, hooks)
                return remaining == sending

            retry, before = tries.sent > 0, tries
            tries = tries.sending()
            try:
                reply = await self._sender.send(
                    messages, response_format, max_tokens, estimate, still_needed, _head_start_s(plan.step, max_tokens)
                )
            except RequestFailed as failure:
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
                        self._finish_error(plan, i, failure.reason, hooks)
                    return
                if tries.exhausted(retries) or (failure.kind == "too_big" and alone):
                    for i in indices:
                        self._finish_error(plan, i, tries.gave_up(failure.reason), hooks)
                    return
                if failure.kind in ("transient", "timeout"):
                    await self.limiter.back_off(tries.errors)
                if failure.kind in ("too_big", "timeout", "isolate") and not alone:
                    # Too big for the window, too slow for the timeout, or holding an item the provider
                    # refuses: halve the pack so that the other items get through.
                    await self._split(plan, halves(indices), tries, hooks)
                    return
                continue  # after a 429 the limiter's shared pause makes this attempt wait
            if retry:
                self._stats.retries += 1
            parsed = plan.parse(reply.text, context)
            self._charge(plan, indices, reply, parsed, id_map)
            done: list[Any] = []
            for local, value in parsed.ok.items():
                i = id_map[local]
                plan.results[i] = plan.ok_result(i, value, plan.usage[i])
                done.append(plan.results[i])
            if done and hooks.settled is not None:
                hooks.settled(done)
            hooks.tick(len(done))
            if parsed.unknown_ids:
                log.debug("reply named ids it was not asked for: %s", ",".join(parsed.unknown_ids[:5]))
            failed = [id_map[local] for local in parsed.failed]
            if not failed:
                return
            tries = tries.failed(False)
            if tries.exhausted(retries):
                for local, why in parsed.failed.items():
                    self._finish_error(plan, id_map[local], tries.gave_up(f"invalid reply: {why}"), hooks)
                return
            # Re-ask only for what failed, never with the same request: a wholly unusable reply of several
            # items is re-asked in halves, one of a single item with a message saying what was wrong.
            if len(failed) < len(indices):
                indices = tuple(failed)
                continue
            if len(indices) > 1:
                await self._split(plan, halves(indices), tries, hooks)
                return
            tries = tries.unusable_reply(reply.text, next(iter(parsed.failed.values())))

    async def _split(self, plan: Plan[R], groups: list[tuple[int, ...]], tries: Tries, hooks: Hooks[R]) -> None:
        await asyncio.gather(*(self._run_pack(plan, g, tries, hooks) for g in groups))

    def _finish_error(self, plan: Plan[R], i: int, reason: str, hooks: Hooks[R]) -> None:
        if i in plan.results:
            return
        plan.results[i] = plan.error_result(i, self.redact(reason)[:ERROR_CHARS], plan.usage[i])
        self._stats.failed_items += 1
        hooks.tick(1)

    def _charge(
        self,
        plan: Plan[R],
        indices: Sequence[int],
        reply: Reply | None,
        parsed: ParsedReply[Any] | None,
        id_map: Mapping[str, int],
    ) -> None:
        """Shares one request's usage out over its items (``plans.share_usage``) and counts it."""
        prompt = reply.prompt_tokens if reply else 0
        completion = reply.completion_tokens if reply else 0
        priced = share_usage(plan, indices, prompt, completion, parsed, id_map, self.card.cost)
        self._stats.prompt_tokens += prompt
        self._stats.completion_tokens += completion
        if priced is not None and self._stats.cost_usd is not None:
            self._stats.cost_usd += priced[0] + priced[1]


def _count_turn(plan: Plan[Any], order: Sequence[int], start: int) -> list[Entry | None]:
    """``plan.add`` for the items of ``order`` from ``start`` on, for about ``TURN_S`` (one item at least).

    Only one call counts at a time (the judge's counting lock), so one thread at a time writes to a
    plan's per-item tables; the event loop reads only the entries of packs already closed.
    """
    until = time.perf_counter() + TURN_S
    out: list[Entry | None] = []
    for at in range(start, len(order)):
        out.append(plan.add(order[at]))
        if time.perf_counter() >= until:
            break
    return out


def _head_start_s(step: str, max_tokens: int) -> float:
    extraction = EXTRACTION_HEAD_START_S if step == "extract" else 0.0
    return extraction + max_tokens * HEAD_START_S_PER_TOKEN

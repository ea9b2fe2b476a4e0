"""The litellm judge's pack runner: one step's items counted, packed and sent, retried until each has a result.

Kept apart from the judge (``judge``) because it holds the run's moving parts, not its setup: the judge
builds the limiter, the sender, the sizing and the card once and answers the port; :class:`PackRunner`
takes those it needs, explicitly, and runs a plan through them. What the runner decides (retry, split,
re-ask with a repair message, give up) is policy over :class:`Sender`'s classification of a failure; how a
request's usage is shared out over its items is ``plans.share_usage``. It imports no litellm: the sender is
the one place a request leaves.

For one step of one call the runner:

1. counts the items' tokens on a worker thread, a short turn at a time, and packs them under
   ``pack_tokens``; packs leave while later items are still counted (:meth:`PackRunner.run`);
2. sends the packs concurrently through the shared :class:`RequestLimiter`, at most twice as many packs
   under way as request slots, asking the result store (``Hooks.recheck``) right before a request leaves
   whether its items were stored meanwhile;
3. validates each reply item by item and re-asks only for the items that failed, never with the very
   same request (smaller packs, or a repair message quoting what was wrong), until ``max_retries``;
   after that the item gets an error result.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from faithfulness_pipeline.core.port import ERROR_CHARS, Hooks, JudgeStats, billed_of
from faithfulness_pipeline.judging.budget import Budget
from faithfulness_pipeline.judging.llm.card import ModelCard
from faithfulness_pipeline.judging.llm.chat import Chat, chat_of
from faithfulness_pipeline.judging.llm.evidence import EvidenceRepairs
from faithfulness_pipeline.judging.llm.failures import RequestFailed
from faithfulness_pipeline.judging.llm.format_breaker import FormatBreaker
from faithfulness_pipeline.judging.llm.limits import RequestLimiter
from faithfulness_pipeline.judging.llm.packing import Pack, Packer, halves
from faithfulness_pipeline.judging.llm.parsing import ParsedReply
from faithfulness_pipeline.judging.llm.plans import Plan, R, Sizing, share_usage
from faithfulness_pipeline.judging.llm.replies import Reply
from faithfulness_pipeline.judging.llm.requests import Sender
from faithfulness_pipeline.judging.llm.tries import SAME_REPLIES, Tries
from faithfulness_pipeline.judging.llm.turns import Turns, count_turn, head_start_s
from faithfulness_pipeline.judging.llm.valid_text import TextRepairs, valid_text

log = logging.getLogger(__name__)

#: What a request of a pack calls for next: these items again with these tries, or None (each has a result).
Next = tuple[tuple[int, ...], Tries] | None


class PackRunner:
    """Runs plans' packs through one judge's limiter and sender; every item of a plan ends with a result.

    One per judge: the calls running side by side share its pack bound and counting lock (``Turns``), and
    count into the judge's ``stats`` (the sender counts the requests, the runner retries, failed items,
    tokens and cost).
    """

    def __init__(
        self,
        *,
        sizing: Sizing,
        card: ModelCard,
        limiter: RequestLimiter,
        sender: Sender,
        stats: JudgeStats,
        redact: Callable[[str], str],
        max_retries: int,
        budget: Budget | None = None,
    ) -> None:
        self.sizing = sizing
        self.budget = budget
        self.card = card
        self.limiter = limiter
        self.sender = sender
        self.redact = redact
        self.max_retries = max_retries
        self._stats = stats
        self._turns: Turns | None = None
        #: results whose judge text was not valid Unicode (``valid_text``): one note of the run
        self.repairs = TextRepairs()
        #: evidence pointers that named no passage, read or dropped (``evidence``): one note of the run
        self.pointers = EvidenceRepairs()
        #: a model that writes no usable reply in a wave of requests is not asked more (``format_breaker``)
        self.format = FormatBreaker(sender.model, redact)

    async def run(self, plan: Plan[R], hooks: Hooks[R]) -> None:
        """Counts, packs and sends one step's items, the first requests leaving while the rest are counted.

        Counting is the judge's main CPU cost (every passage goes through the tokenizer): done up front
        it would leave every request slot idle at the start of each step. So packs queue as they
        close, in item order, and workers send them in that order: twice as many packs under way as
        request slots (``Turns.packs``), so that a pack sleeping out a back-off never leaves a slot idle.
        """
        queue: asyncio.Queue[Pack | None] = asyncio.Queue()  # packs in the order they closed; None: no more
        workers = [asyncio.create_task(self._work(plan, queue, hooks)) for _ in range(2 * self.limiter.max_in_flight)]
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
                    counted = await asyncio.to_thread(count_turn, plan, order, at)
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
        except BaseException:
            # Cancelled (Ctrl-C, a consumer that stopped) or failed while counting: the packs queued so far
            # are not sent. Handed a "no more" after them, the workers would send every one first.
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
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
            self._turns = Turns(loop, asyncio.Semaphore(2 * self.limiter.max_in_flight), asyncio.Lock())
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
        """Asks for ``indices`` until each has a result: one request at a time, each one followed by what
        its failure or its reply calls for (another try of some of the items, or none)."""
        next_try: Next = (indices, tries)
        while next_try is not None:
            next_try = await self._attempt(plan, *next_try, hooks)

    async def _attempt(self, plan: Plan[Any], indices: tuple[int, ...], tries: Tries, hooks: Hooks[Any]) -> Next:
        """One request of the pack; returns the items to ask again and their tries, or None when done."""
        if self.sender.fatal is not None:
            self._finish_all(plan, indices, self.sender.fatal, hooks)
            return None
        chat = chat_of(plan, indices, self.card, tries.repair, attempt=tries.sent + 1)
        estimate = self.sizing.frame_tokens[plan.step] + sum(plan.entries[i].prompt_tokens for i in indices)
        estimate += sum(self.sizing.count_tokens(m["content"]) for m in chat.repair)
        remaining = indices

        def still_needed(sending: tuple[int, ...] = indices) -> bool:
            # Checked while holding a request slot: a result another process stored while this pack
            # waited for one is not paid again (only requests already in flight can be).
            nonlocal remaining
            remaining = self._not_done_elsewhere(plan, sending, hooks)
            return remaining == sending

        hold = self._worst_cost(estimate, chat.max_tokens)
        if self.budget is not None and not self.budget.hold(hold):
            for i in indices:
                self._finish_skipped(plan, i, hooks)
            return None
        try:
            try:
                # The schema goes to the sender whatever the run's mode: it knows which format a request carries.
                reply = await self.sender.send(chat.messages, chat.schema, chat.max_tokens, estimate, still_needed,
                                               head_start_s(plan.step, chat.max_tokens))
            finally:
                # Let go as soon as the request is done: what it cost is spent by ``_charge`` right after,
                # before anything else can await, so the budget never counts a request twice or not at all.
                if self.budget is not None:
                    self.budget.release(hold)
        except RequestFailed as failure:
            return await self._after_failure(plan, indices, remaining, tries, failure, chat, hooks)
        return await self._after_reply(plan, indices, tries, reply, chat, hooks)

    async def _after_failure(self, plan: Plan[Any], indices: tuple[int, ...], remaining: tuple[int, ...],
                             before: Tries, failure: RequestFailed, chat: Chat, hooks: Hooks[Any]) -> Next:
        """What a request that brought no reply calls for (``before``: the pack's tries before it was sent)."""
        if failure.kind == "stale":  # nothing was sent: the rest goes as a smaller pack
            return (remaining, before) if remaining else None
        if failure.kind == "reformat":  # the run stepped down to another format: the same items again
            self._charge(plan, indices, None, None, chat.id_map)  # a request sent is a call billed
            return indices, before
        if before.sent > 0:
            self._stats.retries += 1
        if failure.sent:
            self._charge(plan, indices, None, None, chat.id_map)
        tries = before.sending()
        if failure.kind != "too_big":
            # A pack refused as too long is no failed try: it is halved, then an item alone has its
            # passages halved, and each step is smaller than the last, so the steps end by themselves.
            # Counted as tries, a 32-item pack over a slot's window ran out of them before it got
            # down to packs the slot holds.
            tries = tries.failed(failure.kind == "rate_limit")
        alone = len(indices) == 1
        if failure.kind in ("fatal", "give_up") or (failure.kind == "isolate" and alone):
            self._finish_all(plan, indices, failure.reason, hooks)
            return None
        too_big_alone = failure.kind == "too_big" and alone
        if too_big_alone and plan.shrink(indices[0]):
            self._window_note()
            return indices, tries  # the same item with half its passages: a different, smaller request
        if tries.exhausted(self.max_retries) or too_big_alone:
            reason = tries.gave_up(failure.reason)
            if failure.kind == "too_big":  # the hint first: the server's words may be long
                reason = f"too long for the server: {self._window_hint()}; {reason}"
            self._finish_all(plan, indices, reason, hooks)
            return None
        if failure.kind in ("transient", "timeout"):
            await self.limiter.back_off(tries.errors)
        if failure.kind in ("too_big", "timeout", "isolate") and not alone:
            # Too big for the window, too slow for the timeout, or holding an item the provider
            # refuses: halve the pack so that the other items get through.
            await self._split(plan, halves(indices), tries, hooks)
            return None
        return indices, tries  # after a 429 the limiter's shared pause makes this attempt wait

    async def _after_reply(self, plan: Plan[Any], indices: tuple[int, ...], before: Tries, reply: Reply,
                           chat: Chat, hooks: Hooks[Any]) -> Next:
        """The reply's valid items finished; what the rest calls for (``before``: the pack's tries before
        this request). Never the very same request again: smaller packs, or a repair message."""
        if before.sent > 0:
            self._stats.retries += 1
        tries = before.sending()
        if reply.unanswered is not None:
            # A refusal, no choices, null content: the same request would get the same reply. A lone item
            # ends with the reply's words; a pack is halved, so the other items get through.
            self._charge(plan, indices, reply, None, chat.id_map)
            if len(indices) == 1:
                self._finish_error(plan, indices[0], reply.unanswered, hooks)
                return None
            await self._split(plan, halves(indices), tries.failed(False), hooks)
            return None
        parsed = plan.parse(reply.text, chat.context)
        self._charge(plan, indices, reply, parsed, chat.id_map)
        self._finish_valid(plan, parsed, chat.id_map, hooks)
        failed = [chat.id_map[local] for local in parsed.failed]
        why = next(iter(parsed.failed.values()), "")
        if parsed.ok:
            self.format.usable(plan.step)
        elif failed and (stop := self.format.unusable_reply(plan.step, [plan.item_id(i) for i in failed],
                                                            reply.text, why)):
            self.sender.stop(stop, self.format.note() or stop)
        if self.sender.fatal is not None:  # no further request: the items left end with the reason
            self._finish_all(plan, failed, self.sender.fatal, hooks)
            return None
        if not failed:
            return None
        tries = tries.failed(False)
        lone = len(indices) == 1 and not parsed.ok
        if lone:  # the next request quotes this reply back (and counts a repeat of the one quoted last time)
            tries = tries.unusable_reply(reply.text, why)
        # An answer alone that got nothing usable, from a model that has not yet shown it can write the format,
        # is repaired twice at most (``format_breaker``); one that keeps giving the same reply word for word is
        # not repaired again (``tries.SAME_REPLIES``).
        if tries.exhausted(self.format.retries(plan.step, self.max_retries) if lone else self.max_retries) \
                or tries.repeated >= SAME_REPLIES:
            again = f" (the same reply {tries.repeated} times in a row)" if tries.repeated >= SAME_REPLIES else ""
            for local, why_not in parsed.failed.items():
                self._finish_error(plan, chat.id_map[local], tries.gave_up(f"invalid reply: {why_not}{again}"), hooks)
            return None
        # A wholly unusable reply of several items is re-asked in halves, one of a single item with a message
        # saying what was wrong.
        if len(failed) < len(indices):
            return tuple(failed), tries
        if len(indices) > 1:
            await self._split(plan, halves(indices), tries, hooks)
            return None
        return indices, tries

    def _finish_valid(self, plan: Plan[Any], parsed: ParsedReply[Any], id_map: Mapping[str, int],
                      hooks: Hooks[Any]) -> None:
        """The items a reply answered validly get their results, reported as they settle."""
        done: list[Any] = []
        for local, value in parsed.ok.items():
            i = id_map[local]
            plan.results[i] = plan.ok_result(i, value, plan.usage[i])
            done.append(plan.results[i])
            if local in parsed.replaced:
                self.repairs.add(plan.item_id(i))
            if local in parsed.pointers:
                self.pointers.add(plan.item_id(i), parsed.pointers[local])
        if done and hooks.settled is not None:
            hooks.settled(done)
        hooks.tick(len(done))
        if parsed.unknown_ids:
            log.debug("reply named ids it was not asked for: %s", ",".join(parsed.unknown_ids[:5]))

    def _window_hint(self) -> str:
        return (f"the server's context window is smaller than the {self.card.context_window} tokens the judge "
                f"assumes: set --context-window (FP_JUDGE_CONTEXT_WINDOW) to it")

    def _window_note(self) -> None:
        note = f"an item alone was too long for the server, so its passages were cut (context_truncated); " \
               f"{self._window_hint()}"
        if note not in self._stats.notes:
            self._stats.notes.append(note)

    async def _split(self, plan: Plan[R], groups: list[tuple[int, ...]], tries: Tries, hooks: Hooks[R]) -> None:
        await asyncio.gather(*(self._run_pack(plan, g, tries, hooks) for g in groups))

    def _worst_cost(self, prompt_tokens: int, max_tokens: int) -> float:
        """What a request can cost at most: its prompt as counted and a reply of ``max_tokens``."""
        priced = self.card.cost(prompt_tokens, max_tokens)
        return 0.0 if priced is None else priced[0] + priced[1]

    def _finish_skipped(self, plan: Plan[R], i: int, hooks: Hooks[R]) -> None:
        """The item is not sent: the spend cap was reached. What it already cost (a failed try) stays its own."""
        if i in plan.results or self.budget is None:
            return
        plan.results[i] = replace(plan.error_result(i, self.budget.reason(), plan.usage[i]), source="skipped")
        hooks.tick(1)

    def _finish_all(self, plan: Plan[R], indices: Sequence[int], reason: str, hooks: Hooks[R]) -> None:
        for i in indices:
            self._finish_error(plan, i, reason, hooks)

    def _finish_error(self, plan: Plan[R], i: int, reason: str, hooks: Hooks[R]) -> None:
        if i in plan.results:
            return
        # The reason may quote a provider's or a model's text: valid Unicode, or no row can be written.
        plan.results[i] = plan.error_result(i, valid_text(self.redact(reason))[:ERROR_CHARS], plan.usage[i])
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
        cached = reply.cached_prompt_tokens if reply else 0
        priced = share_usage(plan, indices, prompt, completion, parsed, id_map, self.card.cost, cached)
        self._stats.prompt_tokens += prompt
        self._stats.completion_tokens += completion
        self._stats.cached_prompt_tokens += cached
        if priced is not None and self._stats.cost_usd is not None:
            self._stats.cost_usd += priced[0] + priced[1]
        if priced is not None and self.budget is not None:
            self.budget.spend(priced[0] + priced[1])

"""The batch judge: a run's requests sent as provider batch jobs (OpenAI's Batch API and compatible ones) at
the batch price, instead of one by one as the run goes.

It is an inner judge of the judge stack (``judging.stack``), like the interactive one, and uses the same
packs: the same plans render the same prompts, the same parsers validate the replies, and results land in
the result store under the same keys, so a batch result serves a later interactive run and the other way
round. Where the interactive judge answers each port call as it comes, a batch takes hours: so the stack
asks the whole run first (its prepay: :meth:`BatchJudge.prepay_step`, once per step), step by step:

1. every distinct extraction item of the run that the store lacks, as far as a spend cap lets it
   (``batch.spend``), goes into batch files (``batch.files``: split at the provider's limits), uploaded
   and created as batches; each submission is recorded in the store's batch ledger (``batch.ledger``)
   before the batch is created, and its id right after, so that a killed run finds it, not pays twice;
2. the batches are polled (the pause grows by half each look) until each one ends; a finished batch's
   output is read, validated line by line and stored (``batch.ingest``); lines that failed, expired or
   did not validate are asked again in a follow-up batch (smaller packs; a lone item with a message
   saying what was wrong) or left to the interactive judge (``batch_fallback``), up to ``max_retries``;
3. the same for the verdicts, once the claims are back.

Each step returns what this run paid for every result it stored, by key. The scoring pass then runs as
usual: the stack finds every result in the store and bills each one this run paid for once (``llm``);
items that still failed are error rows (:meth:`BatchJudge.extract_claims` and ``judge_claims`` answer
them, and ask the interactive judge for content the batches never saw: a store that could not be written).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from faithfulness_pipeline.core.errors import ConfigError, FaithfulnessPipelineError
from faithfulness_pipeline.core.flow import Rows
from faithfulness_pipeline.core.port import (
    ERROR_CHARS,
    NO_USAGE,
    CostEstimate,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    ResultScope,
    Usage,
    VerdictItem,
    VerdictResult,
    settings_hash,
)
from faithfulness_pipeline.judging.llm.batch.api import TERMINAL, BatchAPI, BatchAPIError, BatchView
from faithfulness_pipeline.judging.llm.batch.files import PROVIDER_LIMITS, BatchLimits, batch_files
from faithfulness_pipeline.judging.llm.batch.ingest import Ingest
from faithfulness_pipeline.judging.llm.batch.ledger import BatchRecord, LineRecord
from faithfulness_pipeline.judging.llm.batch.lines import (
    Item,
    Pending,
    encode,
    error_result,
    plan_of,
    progress_line,
    serialise,
)
from faithfulness_pipeline.judging.llm.batch.open_ledger import ledger_of
from faithfulness_pipeline.judging.llm.batch.spend import BatchSpend, claims_share
from faithfulness_pipeline.judging.llm.chat import chat_body, chat_of
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.packing import Limits, pack_entries
from faithfulness_pipeline.judging.llm.part_settings import BatchPolicy, RequestSettings
from faithfulness_pipeline.judging.llm.plans import ExtractPlan, Plan, VerdictPlan
from faithfulness_pipeline.judging.llm.secrets import judge_key
from faithfulness_pipeline.judging.store.keys import ContentKeys
from faithfulness_pipeline.judging.store.protocol import Store
from faithfulness_pipeline.settings.judge import JudgeSettings

log = logging.getLogger(__name__)

#: The longest pause between two looks at running batches.
MAX_POLL_S: Final = 600.0

NEEDS_A_STORE: Final = ("batch mode needs a result store (--store PATH, or FP_JUDGE_STORE): it holds the batches "
                         "of a run until their results are back, hours later, maybe in another run")


class BatchFailed(FaithfulnessPipelineError):
    """A batch that failed validation, was cancelled, or outlived the run's wait; the message names it."""


class BatchJudge:
    """The Judge port whose requests go as provider batch jobs (see the module docstring). Needs the run's
    result store: the batches' records and their results live there."""

    def __init__(
        self,
        settings: JudgeSettings,
        store: Store | None,
        *,
        api_key: str | None = None,
        need_key: bool = True,
        limits: BatchLimits = PROVIDER_LIMITS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        report: Callable[[str], None] | None = None,
    ) -> None:
        if store is None:
            raise ConfigError(NEEDS_A_STORE)
        _, api_key = judge_key(settings.model or "", settings.api_key_env, api_key, need_key=need_key,
                              api_base=settings.api_base)
        self.interactive = LiteLLMJudge(settings, api_key=api_key, need_key=need_key)
        self.policy = BatchPolicy.of(settings)
        self.model_name: str = self.interactive.model_name
        self.prompt_version: str = self.interactive.prompt_version
        self.redact = self.interactive.redact
        self.sizing = self.interactive.sizing
        self.card = self.interactive.card.for_batches()
        self.store = store
        self.ledger = ledger_of(store)
        asked = RequestSettings.of(settings)
        #: what a batch line's body asks, as the interactive judge's requests ask it
        self.sampling = asked.sampling
        self.api = BatchAPI(asked.model, api_base=asked.api_base, retry_after_max_s=asked.retry_after_max_s,
                            api_key=api_key, redact=self.redact, sleep=sleep)
        self.limits = limits
        #: Where progress of the batches goes (the CLI prints it; Dagster logs it).
        self.report: Callable[[str], None] = report or log.info
        self._sleep = sleep
        self._clock = clock
        self._scope = self.result_scope()
        self._keys = ContentKeys(self._scope)
        self._paid: dict[bytes, Usage] = {}  # of the step being prepaid
        self._failed: dict[tuple[str, bytes], Pending] = {}
        self._stats = JudgeStats(cost_usd=0.0 if self.card.priced else None, notes=list(self.card.notes))
        self._batches: dict[str, str] = {}  # batch id -> last status seen, in the order they were met
        #: the run's spend cap, shared with the interactive judge (which holds at interactive prices)
        self.budget = self.interactive.budget
        self._spend = BatchSpend(self.budget, self.card, self._stats)
        self._read = Ingest(self.api, self.ledger, store, self.sizing, self.card, self._stats)

    def result_scope(self) -> ResultScope:
        """The interactive judge's: same prompts, same keys, one store for both modes."""
        return self.interactive.result_scope()

    # --------------------------------------------------------------------------- before the run

    async def prepay_step(
        self, step: str, wanted: Mapping[bytes, Item], rows: Rows | None = None
    ) -> dict[bytes, Usage]:
        """The stack's prepay of ``step``: ``wanted`` (content key -> item: the run's distinct items the store
        lacks) asked as batches; every result is stored as its batch is read. Returns what this run paid for
        each result it stored, by key (a killed run's batches that this run picked up included).

        Under a spend cap the claims step may use only its part of what is left (``rows``, the run's rows,
        estimate it), so that the claims it pays for still have money for their verdicts."""
        self._paid = {}
        self._spend.share = 1.0
        if step == "extract" and self.budget is not None and rows is not None:
            self._spend.share = await asyncio.to_thread(claims_share, rows, self.interactive.estimate)
        await self._complete(step, {key: Pending(item) for key, item in wanted.items()})
        paid, self._paid = self._paid, {}
        return paid

    async def _complete(self, step: str, wanted: dict[bytes, Pending]) -> None:
        """Submits what no batch is asking for yet, waits for every open batch of this judge's settings
        (a killed run's included), and asks again for what failed, until done or out of tries."""
        pending = await asyncio.to_thread(self.ledger.pending, list(wanted))
        records = self.ledger.open_batches(self._scope, step)
        if records:
            self.report(f"batch: {len(records)} {step} batches of an earlier run found; waiting for them")
        fresh = {k: p for k, p in wanted.items() if k not in pending}
        records += await self._submit(step, fresh)
        while records:
            retry = await self._wait(step, records, wanted)
            self._spend.settle()
            # max_retries: the tries of an item (the spend cap is self.budget)
            give_up = {k: p for k, p in retry.items() if p.out_of_tries(self.policy.max_retries)}
            for key, p in give_up.items():
                self._failed[(step, key)] = p
            retry = {k: p for k, p in retry.items() if k not in give_up}
            if self.policy.fallback == "interactive":
                await self._ask_interactively(step, retry)
                break
            records = await self._submit(step, retry)

    async def _ask_interactively(self, step: str, todo: dict[bytes, Pending]) -> None:
        """``batch_fallback = interactive``: what the batches could not answer, asked through the interactive
        judge now (so that the verdicts of the claims it extracts still go as a batch), stored like batch
        results and billed with what the batches already spent on them."""
        if not todo:
            return
        keys = list(todo)
        items = [todo[k].item for k in keys]
        self.report(f"batch: asking {len(items)} {step} items interactively")
        results: list[ExtractResult | VerdictResult] = []
        if step == "extract":
            results += await self.interactive.extract_claims([it for it in items if isinstance(it, ExtractItem)])
        else:
            results += await self.interactive.judge_claims([it for it in items if isinstance(it, VerdictItem)])
        rows: list[tuple[bytes, str, str]] = []
        for key, result in zip(keys, results, strict=True):
            spent = todo[key].spent + result.usage
            encoded = encode(result, spent)
            if encoded is None:
                self._failed[(step, key)] = replace(todo[key], spent=spent, reason=result.error or "no result")
                continue
            rows.append((key, step, encoded))
            self._paid[key] = spent
        await asyncio.to_thread(self.store.put_many, rows)

    # ------------------------------------------------------------------------------ submitting

    async def _submit(self, step: str, todo: dict[bytes, Pending]) -> list[BatchRecord]:
        """``todo`` packed as the interactive judge packs them and sent as batches; a retry round packs
        smaller (halved per round), so no line repeats a request that already failed."""
        if not todo:
            return []
        keys = list(todo)
        items = [todo[k].item for k in keys]
        plan = plan_of(self.sizing, step, items)
        rounds = max(p.sent for p in todo.values())
        limits = self.sizing.limits
        limits = Limits(limits.pack_tokens, max(1, limits.max_items >> rounds), limits.context_window,
                        limits.max_output_tokens)
        entries = await asyncio.to_thread(lambda: [e for e in (plan.add(i) for i in plan.order()) if e is not None])
        for i, why in plan.oversize.items():
            self._failed[(step, keys[i])] = replace(todo[keys[i]], reason=why)
        packs = self._spend.within(step, plan, keys, pack_entries(entries, self.sizing.frame_tokens[step], limits))
        requests = ((self._body(plan, pack.indices, [todo[keys[i]] for i in pack.indices]),
                     [serialise(keys[i], todo[keys[i]]) for i in pack.indices]) for pack in packs)
        records = []
        for file in batch_files(step, requests, self.limits):
            if file.lines:  # none when every item was too big to send (those are failures already)
                records.append(await self._create(step, file.tag, file.data(), file.records))
        self.report(f"batch: {len(packs)} {step} requests for {len(todo)} items sent as {len(records)} batches")
        return records

    def _body(self, plan: Plan[Any], indices: Sequence[int], pending: Sequence[Pending]) -> dict[str, Any]:
        repair = pending[0].repair if len(indices) == 1 else None
        chat = chat_of(plan, indices, self.interactive.card, repair, attempt=pending[0].tries + 1)
        # A batch line cannot step down on its own: it carries what the run's requests carry now.
        response_format = None if chat.schema is None else self.interactive.output.response_format(chat.schema)
        return chat_body(self.api.model, chat.messages, self.sampling, chat.max_tokens, response_format)

    async def _create(self, step: str, tag: str, data: bytes, lines: list[LineRecord]) -> BatchRecord:
        """Uploads one batch file and creates its batch, recorded before and after the create call."""
        file_id = await self._call(self.api.upload(data, f"{tag}.jsonl"))
        record = BatchRecord(tag, step, settings_hash(self._scope), file_id, None, "creating", None, len(lines),
                             time.time())
        await asyncio.to_thread(self.ledger.record_submission, record, lines)
        try:
            view = await self.api.create(file_id, tag)
        except BatchAPIError as exc:
            # A create whose answer was lost (a timeout, a dropped connection) may still have made the batch:
            # look for its tag before forgetting the submission, or the next run would pay for it again.
            found = None
            with contextlib.suppress(BatchAPIError):
                found = await self.api.find(tag)
            if found is None:
                await asyncio.to_thread(self.ledger.forget_submission, tag)
                raise BatchFailed(f"batch mode: {exc.reason}") from None
            view = found
        await asyncio.to_thread(self.ledger.record_created, tag, view.id, view.status)
        self._stats.requests += len(lines)
        self._batches[view.id] = view.status
        return replace(record, batch_id=view.id, state="submitted", provider_status=view.status)

    async def _call(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except BatchAPIError as exc:
            raise BatchFailed(f"batch mode: {exc.reason}") from None

    # -------------------------------------------------------------------------------- waiting

    async def _wait(
        self, step: str, records: list[BatchRecord], wanted: dict[bytes, Pending]
    ) -> dict[bytes, Pending]:
        """Polls ``records`` until each has ended and is ingested; returns the items to ask again."""
        deadline = self._clock() + self.policy.max_wait_s
        pause = self.policy.poll_s
        active = {r.submission: r for r in records}
        retry: dict[bytes, Pending] = {}
        while active:
            views: list[BatchView] = []
            for tag, record in list(active.items()):
                try:
                    if record.batch_id is None:
                        record = active[tag] = await self._adopt(record)
                    view = await self.api.retrieve(record.batch_id or "")
                except BatchAPIError as exc:
                    if exc.fatal:
                        raise BatchFailed(f"batch mode: {exc.reason}") from None
                    self.report(f"batch: {exc.reason}; looking again later")
                    continue
                views.append(view)
                self._batches[view.id] = view.status
                if view.status in TERMINAL:
                    retry.update(await self._ingest(step, record, view, wanted))
                    del active[tag]
                elif view.status != record.provider_status:
                    await asyncio.to_thread(self.ledger.record_status, tag, view.status)
                    active[tag] = replace(record, provider_status=view.status)
            self.report(progress_line(step, views, len(active)))
            if not active:
                break
            if self._clock() + pause > deadline:
                ids = ", ".join(r.batch_id or r.submission for r in active.values())
                raise BatchFailed(
                    f"batch mode: {len(active)} {step} batches still running after {self.policy.max_wait_s:g} s "
                    f"({ids}); they stay with the provider and are recorded in the store: run again to pick them up"
                )
            await self._sleep(pause)
            pause = min(pause * 1.5, MAX_POLL_S)
        return retry

    async def _adopt(self, record: BatchRecord) -> BatchRecord:
        """A submission whose batch id was never recorded (the run was killed around the create call): the
        provider's batch with its tag, else the batch created now (nothing was created before)."""
        found = await self.api.find(record.submission)
        view = found if found is not None else await self.api.create(record.input_file_id, record.submission)
        await asyncio.to_thread(self.ledger.record_created, record.submission, view.id, view.status)
        if found is None:
            self._stats.requests += record.lines
        return replace(record, batch_id=view.id, state="submitted", provider_status=view.status)

    # ------------------------------------------------------------------------------- ingesting

    async def _ingest(
        self, step: str, record: BatchRecord, view: BatchView, wanted: dict[bytes, Pending]
    ) -> dict[bytes, Pending]:
        """Stores what an ended batch answered (``batch.ingest``) and returns the items to ask again. A batch that
        failed validation or was cancelled stops the run, naming the batch, after what it finished is
        stored."""
        stored, retry = await self._call(self._read(step, record, view, self._paid))
        self.report(f"batch {view.id}: {view.status}; {stored} results stored, {len(retry)} items to ask again")
        if view.status == "failed":
            why = "; ".join(view.errors[:3]) or "no reason given"
            raise BatchFailed(f"batch {view.id} ({step}) failed validation at the provider: {why}")
        if view.status == "cancelled":
            raise BatchFailed(f"batch {view.id} ({step}) was cancelled at the provider; its {stored} finished "
                              "results are stored: run again to ask for the rest")
        # Items of a killed run's batch that this run does not need stay unasked.
        return {k: p for k, p in retry.items() if k in wanted}

    # --------------------------------------------------------------------------- the scoring pass

    async def extract_claims(
        self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
    ) -> list[ExtractResult]:
        return await self._answer("extract", items, self._keys.extract(items), hooks or Hooks(),
                                  self.interactive.extract_claims)

    async def judge_claims(
        self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
    ) -> list[VerdictResult]:
        return await self._answer("verdict", items, self._keys.verdict(items), hooks or Hooks(),
                                  self.interactive.judge_claims)

    async def _answer(self, step: str, items: Sequence[Any], keys: dict[str, bytes], hooks: Hooks[Any],
                      ask: Callable[..., Awaitable[list[Any]]]) -> list[Any]:
        """What the stack did not find in the store: items that failed in every try (error rows, billed what
        they cost), and for the rest the interactive judge (content the batches never saw: a store that could
        not be written)."""
        free = [ExtractPlan.free(it) if step == "extract" else VerdictPlan.free(it) for it in items]
        results: dict[int, Any] = {i: r for i, r in enumerate(free) if r is not None}
        ask_now: list[int] = []
        for i in (i for i in range(len(items)) if i not in results):
            failed = self._failed.get((step, keys[items[i].id]))
            if (skipped := self._spend.skipped(step, keys[items[i].id])) is not None:
                results[i] = replace(error_result(step, items[i].id, skipped, NO_USAGE), source="skipped")
            elif failed is not None:
                tries = f"gave up after {failed.tries} batch requests: " if failed.tries else ""
                results[i] = error_result(step, items[i].id, f"{tries}{failed.reason}"[:ERROR_CHARS], failed.spent)
                self._stats.failed_items += 1
            else:
                ask_now.append(i)
        hooks.tick(len(items) - len(ask_now))
        if ask_now:
            for i, result in zip(ask_now, await ask([items[i] for i in ask_now], hooks), strict=True):
                results[i] = result
        return [results[i] for i in range(len(items))]

    # ------------------------------------------------------------------------------ the rest

    def estimate(self, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem]) -> CostEstimate:
        return self.interactive.estimate(extract, verdict)

    def stats(self) -> JudgeStats:
        total = self._stats + self.interactive.stats()
        notes = total.notes
        if self._batches:
            listed = ", ".join(f"{b} ({status})" for b, status in list(self._batches.items())[:10])
            more = f" and {len(self._batches) - 10} more" if len(self._batches) > 10 else ""
            notes.append(f"batches: {listed}{more}")
        if (repaired := self._read.repairs.note()) is not None:
            notes.append(repaired)
        if (pointed := self._read.pointers.note()) is not None:
            notes.append(pointed)
        if self.budget is not None and (capped := self.budget.note()) is not None and capped not in notes:
            notes.append(capped)
        return total

    async def aclose(self) -> None:
        try:
            await self.interactive.aclose()
        finally:
            self.ledger.close()

"""The batch judge: a run's requests sent as provider batch jobs (OpenAI's Batch API and compatible ones) at
the batch price, instead of one by one as the run goes.

It is an inner judge under the stored-judge wrapper (``judges.stored``), like the interactive one, and
uses the same packs: the same plans render the same prompts, the same parsers validate the replies, and
results land in the result store under the same keys, so a batch result serves a later interactive run
and the other way round. Where the interactive judge answers each port call as it comes, a batch takes
hours: so the whole run is asked for first (``core.judge.Prepaying``), step by step:

1. every distinct extraction item of the run that the store lacks goes into batch files (split at the
   provider's limits), which are uploaded and created as batches; each submission is recorded in the
   store's batch ledger (``judges.batch_ledger``) before the batch is created, and its id right
   after, so that a run killed at any point finds its batches again instead of paying twice;
2. the batches are polled (the pause grows by half each look) until each one ends; a finished batch's
   output is read, validated line by line and stored; lines that failed, expired or did not validate are
   asked again in a follow-up batch (smaller packs; a lone item with a message saying what was wrong) or
   left to the interactive judge (``batch_fallback``), up to ``max_retries``;
3. the same for the verdicts, once the claims are back.

The scoring pass then runs as usual: the wrapper finds every result in the store and, through
``paid_for``, bills each one this run paid for once (``llm``); items that still failed are error rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError, FaithfulnessPipelineError
from faithfulness_pipeline.core.flow import BLANK
from faithfulness_pipeline.core.port import (
    NO_USAGE,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    Usage,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.judging.estimates import CostEstimate
from faithfulness_pipeline.judging.llm.batch.api import TERMINAL, BatchAPI, BatchAPIError, BatchView, request_line
from faithfulness_pipeline.judging.llm.batch.ledger import (
    BatchLedger,
    BatchRecord,
    LineRecord,
    SqliteBatchLedger,
    new_submission_tag,
)
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.judging.llm.packing import REPLY_SLACK_TOKENS, Limits, pack_entries
from faithfulness_pipeline.judging.llm.plans import ExtractPlan, Plan, VerdictPlan, repair_messages, share_usage
from faithfulness_pipeline.judging.llm.secrets import MissingAPIKeyError, resolve_api_key
from faithfulness_pipeline.judging.store.sqlite import (
    ResultStore,
    Store,
    decode_claims,
    decode_verdicts,
    encode_claims,
    encode_verdicts,
)
from faithfulness_pipeline.judging.stored import ContentKeys, ResultScope
from faithfulness_pipeline.settings.judge import JudgeSettings

log = logging.getLogger(__name__)

Item = ExtractItem | VerdictItem


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What one batch may hold (OpenAI: 50,000 requests and 200 MB per input file; a margin kept)."""

    max_lines: int = 50_000
    max_bytes: int = 190 * 1024 * 1024


#: The longest pause between two looks at running batches.
MAX_POLL_S: Final = 600.0
#: Sendings of an item at most, in retry budgets (unanswered lines do not count as failed tries).
MAX_ROUNDS_FACTOR: Final = 4
_ERROR_CHARS: Final = 300


NEEDS_A_STORE: Final = ("batch mode needs a result store (--store PATH, or FP_JUDGE_STORE): it holds the batches "
                         "of a run until their results are back, hours later, maybe in another run")


class BatchFailed(FaithfulnessPipelineError):
    """A batch that failed validation, was cancelled, or outlived the run's wait; the message names it."""


@dataclass(slots=True)
class _Pending:
    """An item this run still needs, how often it was sent and failed, and the last unusable reply of a
    lone item. Lines the provider left unanswered (expired, rate limited) are sent again without counting
    as a failed try, within :data:`MAX_ROUNDS_FACTOR` times the retry budget."""

    item: Item
    tries: int = 0  # failed tries: error lines and replies that did not validate
    sent: int = 0
    spent: Usage = NO_USAGE
    reason: str = ""
    repair: tuple[str, str] | None = None


class BatchJudge:
    """The Judge port whose requests go as provider batch jobs (see the module docstring). Needs the run's
    result store: the batches' records and their results live there."""

    def __init__(
        self,
        config: JudgeSettings,
        store: Store | None,
        *,
        api_key: str | None = None,
        need_key: bool = True,
        limits: BatchLimits = BatchLimits(),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if store is None:
            raise ConfigError(NEEDS_A_STORE)
        if not api_key:
            try:
                _, api_key = resolve_api_key(config.model or "", config.api_key_env)
            except MissingAPIKeyError:
                if need_key:  # a judge that only estimates (the dry run) sends nothing
                    raise
        self.interactive = LiteLLMJudge(config, api_key=api_key, need_key=need_key)
        self.config = config
        self.model_name: str = self.interactive.model_name
        self.prompt_version: str = self.interactive.prompt_version
        self.redact = self.interactive.redact
        self.sizing = self.interactive.sizing
        self.card = self.interactive.card.for_batches()
        self.store = store
        self.ledger = _ledger_of(store)
        self.api = BatchAPI(config, api_key=api_key, redact=self.redact, sleep=sleep)
        self.limits = limits
        #: Where progress of the batches goes (the CLI prints it; Dagster logs it).
        self.report: Callable[[str], None] = log.info
        self._sleep = sleep
        self._clock = clock
        scope = self.result_scope()
        self._keys = ContentKeys(scope)
        self._scope = hashlib.sha256(repr(scope).encode()).hexdigest()[:32]
        self._paid: dict[tuple[str, bytes], Usage] = {}
        self._failed: dict[tuple[str, bytes], _Pending] = {}
        self._stats = JudgeStats(cost_usd=0.0 if self.card.priced else None, notes=list(self.card.notes))
        self._batches: dict[str, str] = {}  # batch id -> last status seen, in the order they were met

    def result_scope(self) -> ResultScope:
        """The interactive judge's: same prompts, same keys, one store for both modes."""
        return self.interactive.result_scope()

    # --------------------------------------------------------------------------- before the run

    async def prepay(self, chunks: Callable[[], Iterable[pl.DataFrame]]) -> None:
        """``core.judge.Prepaying``: the run's missing claims, then its missing verdicts, as batches."""
        for step in ("extract", "verdict"):
            wanted = await asyncio.to_thread(self._missing, step, chunks)
            await self._complete(step, wanted)

    def _missing(self, step: str, chunks: Callable[[], Iterable[pl.DataFrame]]) -> dict[bytes, _Pending]:
        """The distinct items of ``step`` in the run that the store lacks (all of them under refresh)."""
        wanted: dict[bytes, _Pending] = {}
        for rows in chunks():
            rows = rows.filter(~pl.col(BLANK))
            extract = [ExtractItem(k, a, q) for k, a, q in rows.select(S.ROW_KEY, S.ANSWER, S.QUESTION).iter_rows()]
            keys = self._keys.extract(extract)
            items: Sequence[Item] = extract
            if step == "verdict":
                claims = self._claims_of([keys.get(it.id) for it in extract])
                items = [
                    VerdictItem(it.id, c, tuple(p), it.question)
                    for it, c, p in zip(extract, claims, rows.get_column(S.CONTEXT).to_list(), strict=True)
                    if c and p
                ]
                keys = self._keys.verdict(items)  # type: ignore[arg-type]
            found = set() if self.config.refresh else self._stored({k for k in keys.values() if k not in wanted})
            for it in items:
                key = keys.get(it.id)
                if key is not None and key not in found and key not in wanted:
                    wanted[key] = _Pending(it)
        return wanted

    def _stored(self, keys: set[bytes]) -> set[bytes]:
        ordered = list(keys)
        return {k for k, v in zip(ordered, self.store.get_aligned(ordered), strict=True) if v is not None}

    def _claims_of(self, keys: list[bytes | None]) -> list[tuple[str, ...] | None]:
        present = [k for k in keys if k is not None]
        values = dict(zip(present, self.store.get_aligned(present), strict=True))
        out: list[tuple[str, ...] | None] = []
        for key in keys:
            value = None if key is None else values.get(key)
            out.append(None if value is None else decode_claims(str(value))[0])
        return out

    async def _complete(self, step: str, wanted: dict[bytes, _Pending]) -> None:
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
            budget = self.config.max_retries
            give_up = {k: p for k, p in retry.items()
                       if p.tries > budget or p.sent >= MAX_ROUNDS_FACTOR * (budget + 1)}
            for key, p in give_up.items():
                self._failed[(step, key)] = p
            retry = {k: p for k, p in retry.items() if k not in give_up}
            if self.config.batch_fallback == "interactive":
                await self._ask_interactively(step, retry)
                break
            records = await self._submit(step, retry)

    async def _ask_interactively(self, step: str, todo: dict[bytes, _Pending]) -> None:
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
            encoded = _encode(result, spent)
            if encoded is None:
                self._failed[(step, key)] = replace(todo[key], spent=spent, reason=result.error or "no result")
                continue
            rows.append((key, step, encoded))
            self._paid[(step, key)] = spent
        await asyncio.to_thread(self.store.put_many, rows)

    # ------------------------------------------------------------------------------ submitting

    def _plan(self, step: str, items: Sequence[Item]) -> Plan[Any]:
        indices = range(len(items))
        if step == "extract":
            return ExtractPlan(self.sizing, items, indices)  # type: ignore[arg-type]
        return VerdictPlan(self.sizing, items, indices)  # type: ignore[arg-type]

    async def _submit(self, step: str, todo: dict[bytes, _Pending]) -> list[BatchRecord]:
        """``todo`` packed as the interactive judge packs them and sent as batches; a retry round packs
        smaller (halved per round), so no line repeats a request that already failed."""
        if not todo:
            return []
        keys = list(todo)
        items = [todo[k].item for k in keys]
        plan = self._plan(step, items)
        rounds = max(p.sent for p in todo.values())
        limits = self.sizing.limits
        limits = Limits(limits.pack_tokens, max(1, limits.max_items >> rounds), limits.context_window,
                        limits.max_output_tokens)
        entries = await asyncio.to_thread(lambda: [e for e in (plan.add(i) for i in plan.order()) if e is not None])
        for i, why in plan.oversize.items():
            self._failed[(step, keys[i])] = replace(todo[keys[i]], reason=why)
        packs = pack_entries(entries, self.sizing.frame_tokens[step], limits)
        files: list[tuple[list[bytes], list[LineRecord]]] = [([], [])]
        size = 0
        tags = [new_submission_tag()]
        for n, pack in enumerate(packs):
            indices = pack.indices
            body = self._body(plan, indices, [todo[keys[i]] for i in indices])
            custom_id = f"{tags[-1]}-{n}"
            line = request_line(custom_id, body)
            full = len(files[-1][0]) >= self.limits.max_lines or size + len(line) > self.limits.max_bytes
            if files[-1][0] and full:
                files.append(([], []))
                tags.append(new_submission_tag())
                size = 0
                custom_id = f"{tags[-1]}-{n}"
                line = request_line(custom_id, body)
            size += len(line)
            files[-1][0].append(line)
            files[-1][1].append(LineRecord(custom_id, tags[-1], step, [
                self._serialise(keys[i], todo[keys[i]]) for i in indices]))
        records = []
        for tag, (lines, line_records) in zip(tags, files, strict=True):
            if lines:  # none when every item was too big to send (those are failures already)
                records.append(await self._create(step, tag, b"".join(lines), line_records))
        self.report(f"batch: {len(packs)} {step} requests for {len(todo)} items sent as {len(records)} batches")
        return records

    def _body(self, plan: Plan[Any], indices: Sequence[int], pending: Sequence[_Pending]) -> dict[str, Any]:
        messages, id_map, _ = plan.render(indices)
        if len(indices) == 1 and pending[0].repair is not None:
            messages = [*messages, *repair_messages(*pending[0].repair, attempt=pending[0].tries + 1)]
        entries = [plan.entries[i] for i in indices]
        body: dict[str, Any] = {
            "model": self.api.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": min(self.sizing.limits.max_output_tokens,
                              REPLY_SLACK_TOKENS + sum(e.output_tokens for e in entries)),
        }
        if self.config.seed is not None:
            body["seed"] = self.config.seed
        if self.interactive.card.json_schema:
            body["response_format"] = plan.response_format(list(id_map))
        return body

    @staticmethod
    def _serialise(key: bytes, pending: _Pending) -> dict[str, Any]:
        item = pending.item
        out: dict[str, Any] = {"key": key.hex(), "id": item.id, "q": item.question, "tries": pending.tries,
                               "sent": pending.sent,
                               "spent": [pending.spent.llm_calls, pending.spent.prompt_tokens,
                                         pending.spent.completion_tokens, pending.spent.cost_usd]}
        if isinstance(item, ExtractItem):
            out["a"] = item.answer
        else:
            out["c"], out["p"] = list(item.claims), list(item.context)
        if pending.repair is not None:
            out["repair"] = list(pending.repair)
        return out

    async def _create(self, step: str, tag: str, data: bytes, lines: list[LineRecord]) -> BatchRecord:
        """Uploads one batch file and creates its batch, recorded before and after the create call."""
        file_id = await self._call(self.api.upload(data, f"{tag}.jsonl"))
        record = BatchRecord(tag, step, self._scope, file_id, None, "creating", None, len(lines), time.time())
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
        self, step: str, records: list[BatchRecord], wanted: dict[bytes, _Pending]
    ) -> dict[bytes, _Pending]:
        """Polls ``records`` until each has ended and is ingested; returns the items to ask again."""
        deadline = self._clock() + self.config.batch_max_wait_s
        pause = self.config.batch_poll_s
        active = {r.submission: r for r in records}
        retry: dict[bytes, _Pending] = {}
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
            self.report(_progress_line(step, views, len(active)))
            if not active:
                break
            if self._clock() + pause > deadline:
                ids = ", ".join(r.batch_id or r.submission for r in active.values())
                raise BatchFailed(
                    f"batch mode: {len(active)} {step} batches still running after {self.config.batch_max_wait_s:g} s "
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
        self, step: str, record: BatchRecord, view: BatchView, wanted: dict[bytes, _Pending]
    ) -> dict[bytes, _Pending]:
        """Reads an ended batch's output and error files, stores every valid result and returns the items
        to ask again. A batch that failed validation or was cancelled stops the run, naming the batch,
        after what it finished is stored."""
        replies: dict[str, dict[str, Any]] = {}
        for file_id in (view.output_file_id, view.error_file_id):
            if file_id:
                data = await self._call(self.api.content(file_id))
                for raw in data.splitlines():
                    if raw.strip():
                        entry = json.loads(raw)
                        replies[str(entry.get("custom_id"))] = entry
        lines = await asyncio.to_thread(self.ledger.lines_of, record.submission)
        rows, retry = await asyncio.to_thread(self._read_replies, step, lines, replies, view)
        await asyncio.to_thread(self.store.put_many, rows)
        await asyncio.to_thread(self.ledger.record_ingested, record.submission, view.status)
        self.report(f"batch {view.id}: {view.status}; {len(rows)} results stored, {len(retry)} items to ask again")
        if view.status == "failed":
            why = "; ".join(view.errors[:3]) or "no reason given"
            raise BatchFailed(f"batch {view.id} ({step}) failed validation at the provider: {why}")
        if view.status == "cancelled":
            raise BatchFailed(f"batch {view.id} ({step}) was cancelled at the provider; its {len(rows)} finished "
                              "results are stored: run again to ask for the rest")
        # Items of a killed run's batch that this run does not need stay unasked.
        return {k: p for k, p in retry.items() if k in wanted}

    def _read_replies(
        self, step: str, lines: dict[str, LineRecord], replies: dict[str, dict[str, Any]], view: BatchView
    ) -> tuple[list[tuple[bytes, str, str]], dict[bytes, _Pending]]:
        rows: list[tuple[bytes, str, str]] = []
        retry: dict[bytes, _Pending] = {}
        for custom_id, line in lines.items():
            pendings = [_deserialise(step, item) for item in line.items]
            keys = [bytes.fromhex(item["key"]) for item in line.items]
            plan = self._plan(step, [p.item for p in pendings])
            entries = [plan.add(i) for i in range(len(pendings))]
            entry = replies.get(custom_id)
            reason, text, usage, counts = _reply_of(entry, view)
            if reason is not None or any(e is None for e in entries):
                for key, p in zip(keys, pendings, strict=True):
                    retry[key] = replace(p, tries=p.tries + counts, sent=p.sent + 1,
                                         reason=reason or "the item no longer fits the model")
                continue
            indices = tuple(range(len(pendings)))
            _, id_map, context = plan.render(indices)
            parsed = plan.parse(text, context)
            priced = share_usage(plan, indices, usage[0], usage[1], parsed, id_map, self.card.cost)
            self._stats.prompt_tokens += usage[0]
            self._stats.completion_tokens += usage[1]
            if priced is not None and self._stats.cost_usd is not None:
                self._stats.cost_usd += priced[0] + priced[1]
            for local, value in parsed.ok.items():
                i = id_map[local]
                spent = pendings[i].spent + plan.usage[i]
                encoded = _encode(plan.ok_result(i, value, spent), spent)
                if encoded is not None:
                    rows.append((keys[i], step, encoded))
                    self._paid[(step, keys[i])] = spent
            for local, why in parsed.failed.items():
                i = id_map[local]
                p = pendings[i]
                repair = (text, why) if len(indices) == 1 else None
                retry[keys[i]] = replace(p, tries=p.tries + 1, sent=p.sent + 1, spent=p.spent + plan.usage[i],
                                         reason=f"invalid reply: {why}", repair=repair)
        return rows, retry

    # --------------------------------------------------------------------------- the scoring pass

    def paid_for(self, step: str, key: bytes) -> Usage | None:
        """``judges.stored.Prepaid``: what this run paid for the stored result of ``key``, once."""
        return self._paid.pop((step, key), None)

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
        """What the wrapper did not find in the store: results this run stored (when the wrapper skips the
        store: ``refresh``), items that failed in every try (error rows, billed what they cost), and for the
        rest the interactive judge (content the batches never saw: a store that could not be written)."""
        free = [ExtractPlan.free(it) if step == "extract" else VerdictPlan.free(it) for it in items]
        results: dict[int, Any] = {i: r for i, r in enumerate(free) if r is not None}
        todo = [i for i in range(len(items)) if i not in results]
        stored = self.store.get_aligned([keys[items[i].id] for i in todo])
        ask_now: list[int] = []
        for i, value in zip(todo, stored, strict=True):
            key = keys[items[i].id]
            failed = self._failed.get((step, key))
            if value is not None:
                results[i] = _decoded(step, items[i].id, str(value), self.paid_for(step, key))
            elif failed is not None:
                tries = f"gave up after {failed.tries} batch requests: " if failed.tries else ""
                results[i] = _error(step, items[i].id, f"{tries}{failed.reason}"[:_ERROR_CHARS], failed.spent)
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
        s, fallback = self._stats, self.interactive.stats()
        cost = None if s.cost_usd is None or fallback.cost_usd is None else s.cost_usd + fallback.cost_usd
        notes = [*s.notes, *(n for n in fallback.notes if n not in s.notes)]
        if self._batches:
            listed = ", ".join(f"{b} ({status})" for b, status in list(self._batches.items())[:10])
            more = f" and {len(self._batches) - 10} more" if len(self._batches) > 10 else ""
            notes.append(f"batches: {listed}{more}")
        return JudgeStats(
            requests=s.requests + fallback.requests,
            prompt_tokens=s.prompt_tokens + fallback.prompt_tokens,
            completion_tokens=s.completion_tokens + fallback.completion_tokens,
            cost_usd=cost,
            failed_items=s.failed_items + fallback.failed_items,
            retries=fallback.retries,
            notes=notes,
        )

    async def aclose(self) -> None:
        try:
            await self.interactive.aclose()
        finally:
            self.ledger.close()


def _ledger_of(store: Store) -> BatchLedger:
    """The batch ledger kept in ``store``: the same SQLite file, or the same PostgreSQL database."""
    from faithfulness_pipeline.judging.store.postgres import PostgresStore

    if isinstance(store, ResultStore):
        return SqliteBatchLedger(store)
    if isinstance(store, PostgresStore):
        from faithfulness_pipeline.judging.llm.batch.ledger_postgres import PostgresBatchLedger

        return PostgresBatchLedger(store)
    raise ConfigError(f"batch mode cannot keep its batch records in {type(store).__name__} stores (a SQLite file "
                      "or a postgresql:// URL can)")


def _progress_line(step: str, views: list[BatchView], running: int) -> str:
    states: dict[str, int] = {}
    for view in views:
        states[view.status] = states.get(view.status, 0) + 1
    done = sum(v.completed for v in views)
    failed = sum(v.failed for v in views)
    total = sum(v.total for v in views)
    listed = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return (f"batch ({step}): {listed or 'no answer yet'}; {done}/{total} requests done, {failed} failed; "
            f"{running} running")


def _reply_of(entry: dict[str, Any] | None, view: BatchView) -> tuple[str | None, str, tuple[int, int], int]:
    """(why the line has no usable reply or None, the reply text, (prompt, completion) tokens, 1 when the
    failure counts as a failed try, 0 when the provider left the line unanswered: expired, cancelled or
    rate limited)."""
    if entry is None:
        return f"no reply in batch {view.id} ({view.status})", "", (0, 0), 0
    error = entry.get("error")
    response = entry.get("response") or {}
    body = response.get("body") or {}
    status = response.get("status_code")
    if error or status != 200:
        detail = error or body.get("error") or f"status {status}"
        code = detail.get("code") if isinstance(detail, dict) else None
        text = detail.get("message") or code if isinstance(detail, dict) else detail
        unanswered = code == "batch_expired" or status == 429
        return f"batch line failed: {str(text)[:_ERROR_CHARS]}", "", (0, 0), 0 if unanswered else 1
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        content = None
    usage = body.get("usage") or {}
    tokens = (int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
    return None, content if isinstance(content, str) else "", tokens, 1


def _deserialise(step: str, data: dict[str, Any]) -> _Pending:
    item: Item
    if step == "extract":
        item = ExtractItem(data["id"], data["a"], data.get("q"))
    else:
        item = VerdictItem(data["id"], tuple(data["c"]), tuple(data["p"]), data.get("q"))
    calls, prompt, completion, cost = data.get("spent") or [0.0, 0, 0, 0.0]
    repair = data.get("repair")
    return _Pending(item, int(data.get("tries", 0)), int(data.get("sent", 0)), Usage(calls, prompt, completion, cost),
                    repair=None if repair is None else (repair[0], repair[1]))


def _encode(result: ExtractResult | VerdictResult, usage: Usage) -> str | None:
    """The stored value of a result, with ``usage`` (what producing it cost over all its tries)."""
    if isinstance(result, ExtractResult):
        return None if result.claims is None else encode_claims(result.claims, usage)
    return None if result.verdicts is None else encode_verdicts(result.verdicts, usage, result.context_truncated)


def _decoded(step: str, item_id: str, value: str, paid: Usage | None) -> ExtractResult | VerdictResult:
    """A stored result: this run's own when it paid for it (``paid``), else a store hit."""
    if step == "extract":
        claims, usage = decode_claims(value)
        if paid is None:
            return ExtractResult(item_id, claims, None, usage, cached=True, source="store")
        return ExtractResult(item_id, claims, None, usage, source="llm", billed=paid)
    verdicts, usage, cut = decode_verdicts(value)
    if paid is None:
        return VerdictResult(item_id, verdicts, None, usage, cached=True, context_truncated=cut, source="store")
    return VerdictResult(item_id, verdicts, None, usage, context_truncated=cut, source="llm", billed=paid)


def _error(step: str, item_id: str, reason: str, spent: Usage) -> ExtractResult | VerdictResult:
    if step == "extract":
        return ExtractResult(item_id, None, reason, spent, billed=spent)
    return VerdictResult(item_id, None, reason, spent, billed=spent)

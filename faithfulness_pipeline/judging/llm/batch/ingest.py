"""Reading an ended batch: its output and error files, matched to the lines the ledger recorded, validated
item by item into result rows (stored) and the items to ask again.

Kept apart from the judge (``batch.judge``), which decides what to submit, polls, and what an ended batch
means for the run (a failed or cancelled batch stops it): reading one needs only the batch's files, its
ledger lines and the plans that parse them, and it is the one place a batch's usage is charged, at the
batch prices.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any

from faithfulness_pipeline.core.port import JudgeStats, Usage
from faithfulness_pipeline.judging.llm.batch.api import BatchAPI, BatchView
from faithfulness_pipeline.judging.llm.batch.ledger import BatchLedger, BatchRecord, LineRecord
from faithfulness_pipeline.judging.llm.batch.lines import Pending, deserialise, encode, plan_of, reply_of
from faithfulness_pipeline.judging.llm.card import ModelCard
from faithfulness_pipeline.judging.llm.evidence import EvidenceRepairs
from faithfulness_pipeline.judging.llm.plans import Sizing, share_usage
from faithfulness_pipeline.judging.llm.valid_text import TextRepairs
from faithfulness_pipeline.judging.store.protocol import Store

Rows = list[tuple[bytes, str, str]]


@dataclass(frozen=True, slots=True)
class Ingest:
    """Reads ended batches of one batch judge: files from ``api``, lines from ``ledger``, rows into ``store``,
    usage priced by ``card`` (the batch prices) and counted into ``stats`` (the judge's)."""

    api: BatchAPI
    ledger: BatchLedger
    store: Store
    sizing: Sizing
    card: ModelCard
    stats: JudgeStats
    #: results whose judge text was not valid Unicode (``valid_text``): one note of the run
    repairs: TextRepairs = field(default_factory=TextRepairs)
    pointers: EvidenceRepairs = field(default_factory=EvidenceRepairs)

    async def __call__(
        self, step: str, record: BatchRecord, view: BatchView, paid: dict[bytes, Usage]
    ) -> tuple[int, dict[bytes, Pending]]:
        """Stores every valid result of ``record``'s ended batch (what each cost this run goes into ``paid``)
        and marks the batch ingested; returns how many results were stored and the items to ask again.
        A file that cannot be read raises ``BatchAPIError`` before anything is stored."""
        replies: dict[str, dict[str, Any]] = {}
        for file_id in (view.output_file_id, view.error_file_id):
            if file_id:
                data = await self.api.content(file_id)
                for raw in data.splitlines():
                    if raw.strip():
                        entry = json.loads(raw)
                        replies[str(entry.get("custom_id"))] = entry
        lines = await asyncio.to_thread(self.ledger.lines_of, record.submission)
        rows, retry = await asyncio.to_thread(self.read_replies, step, lines, replies, view, paid)
        await asyncio.to_thread(self.store.put_many, rows)
        await asyncio.to_thread(self.ledger.record_ingested, record.submission, view.status)
        return len(rows), retry

    def read_replies(
        self,
        step: str,
        lines: dict[str, LineRecord],
        replies: dict[str, dict[str, Any]],
        view: BatchView,
        paid: dict[bytes, Usage],
    ) -> tuple[Rows, dict[bytes, Pending]]:
        rows: Rows = []
        retry: dict[bytes, Pending] = {}
        for custom_id, line in lines.items():
            pendings = [deserialise(step, item) for item in line.items]
            keys = [bytes.fromhex(item["key"]) for item in line.items]
            plan = plan_of(self.sizing, step, [p.item for p in pendings])
            entries = [plan.add(i) for i in range(len(pendings))]
            entry = replies.get(custom_id)
            reason, text, usage, counts = reply_of(entry, view)
            fits = all(e is not None for e in entries)
            indices = tuple(range(len(pendings)))
            if reason is not None or not fits:
                if fits and any(usage):  # a reply without an answer (a refusal) is billed all the same
                    _, id_map, _ = plan.render(indices)
                    self._charge(plan, indices, usage, None, id_map)
                for i, (key, p) in enumerate(zip(keys, pendings, strict=True)):
                    retry[key] = replace(p, tries=p.tries + counts, sent=p.sent + 1, spent=p.spent + plan.usage[i],
                                         reason=reason or "the item no longer fits the model")
                continue
            _, id_map, context = plan.render(indices)
            parsed = plan.parse(text, context)
            self._charge(plan, indices, usage, parsed, id_map)
            for local, value in parsed.ok.items():
                i = id_map[local]
                spent = pendings[i].spent + plan.usage[i]
                encoded = encode(plan.ok_result(i, value, spent), spent)
                if encoded is not None:
                    rows.append((keys[i], step, encoded))
                    paid[keys[i]] = spent
                    if local in parsed.replaced:
                        self.repairs.add(pendings[i].item.id)
                    if local in parsed.pointers:
                        self.pointers.add(pendings[i].item.id, parsed.pointers[local])
            for local, why in parsed.failed.items():
                i = id_map[local]
                p = pendings[i]
                repair = (text, why) if len(indices) == 1 else None
                retry[keys[i]] = replace(p, tries=p.tries + 1, sent=p.sent + 1, spent=p.spent + plan.usage[i],
                                         reason=f"invalid reply: {why}", repair=repair)
        return rows, retry

    def _charge(self, plan: Any, indices: tuple[int, ...], usage: tuple[int, int, int], parsed: Any,
                id_map: dict[str, int]) -> None:
        """Shares a line's usage (prompt, completion, cached prompt tokens) out over its items (``plan.usage``)
        and counts it into the judge's stats."""
        priced = share_usage(plan, indices, usage[0], usage[1], parsed, id_map, self.card.cost, usage[2])
        self.stats.prompt_tokens += usage[0]
        self.stats.completion_tokens += usage[1]
        self.stats.cached_prompt_tokens += usage[2]
        if priced is not None and self.stats.cost_usd is not None:
            self.stats.cost_usd += priced[0] + priced[1]

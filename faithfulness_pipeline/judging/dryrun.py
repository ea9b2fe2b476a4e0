"""The dry run: what scoring the inputs would send and cost, from the judge stack, without sending anything."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.flow import row_frame
from faithfulness_pipeline.core.money import dollars
from faithfulness_pipeline.core.pipeline import SLICE_ROWS, prepared_chunks, sample_of
from faithfulness_pipeline.core.port import CostEstimate, ExtractItem, VerdictItem
from faithfulness_pipeline.judging.llm.packing import rough_sentences
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.sources.source import Part, Source


def estimate_cost(judge: JudgeStack, source: Source[Part], config: ScoringConfig, *, batch: bool = False,
                  max_cost_usd: float | None = None) -> str:
    """The dry-run report: what scoring ``source`` would send, without sending anything; the cost both
    interactively and as provider batches, ``batch`` marking the mode of this run, and whether the run's
    spend cap (``max_cost_usd``) is enough for it."""
    answers = 0
    estimates: list[CostEstimate] = []
    repeated = 0
    seen: set[bytes] = set()  # contents priced in an earlier call: the run's memory answers them again
    rows = sampled = 0
    overlap = judge.capabilities.overlap_rows
    sample = sample_of(config, prepared_chunks(source.chunks(), config))
    for prepared in prepared_chunks(source.chunks(), config):
        rows += prepared.height
        judged = row_frame(prepared, sample)  # only the sample is judged, so only it is priced
        sampled += judged.height
        # The calls the run makes (core.pipeline, core.flow.judge_rows): a chunk at a time, or with calls that
        # overlap in slices of SLICE_ROWS rows, each slice's answers in calls of `overlap`; each call is packed
        # on its own, so its last packs are partly filled and its instructions are paid again.
        for piece in _slices(judged, SLICE_ROWS if overlap else max(1, judged.height)):
            items = [(ExtractItem(id=key, answer=answer, question=question),
                      # Claims not extracted yet are estimated as the answer's sentences.
                      VerdictItem(key, tuple(rough_sentences(answer)), tuple(context or ()), question))
                     for key, answer, question, context in piece.select(
                         S.ROW_KEY, S.ANSWER, S.QUESTION, S.CONTEXT).iter_rows()
                     if answer is not None and answer.strip()]  # fmt: skip
            answers += len(items)
            size = max(1, overlap or len(items))
            for start in range(0, len(items), size):
                call = items[start : start + size]
                estimate, repeats = _call(judge, [x for x, _ in call], [v for _, v in call], seen)
                estimates.append(estimate)
                repeated += repeats
    # No answer to send still gets the judge's own figures and notes (its prices, its window).
    estimate = _with_repeats(_sum(estimates or [_call(judge, [], [], seen)[0]]), repeated)
    lines = [
        f"dry run with {judge.model_name} (prompt {judge.prompt_version}): {rows} rows, {answers} answers"
        + (f" ({sampled} rows in the sample)" if sampled < rows else ""),
        f"  requests: {estimate.requests}",
        f"  already in the result store: {estimate.cached_items} step results (free)",
        f"  prompt tokens: {estimate.prompt_tokens}",
        f"  completion tokens: {estimate.completion_tokens}",
        f"  estimated cost, interactive: {dollars(estimate.cost_usd)}{'' if batch else '   <- this run'}",
        f"  estimated cost, batch (--batch): {dollars(estimate.batch_cost_usd)}{'   <- this run' if batch else ''}",
    ]
    if max_cost_usd is not None:
        lines.append(cap_line(max_cost_usd, estimate.batch_cost_usd if batch else estimate.cost_usd))
    lines += [f"  note: {note}" for note in estimate.notes]
    return "\n".join(lines)


def cap_line(cap_usd: float, estimate_usd: float | None) -> str:
    """Whether the spend cap is enough for the estimated cost of the run's mode."""
    head = f"  spend cap (max_cost_usd): {dollars(cap_usd)}: "
    if estimate_usd is None:  # a cap with an unpriced model is refused before this
        return head + "the cost is unknown"
    if estimate_usd <= cap_usd:
        return head + (f"enough for the estimated {dollars(estimate_usd)} (requests in flight hold their worst "
                       "cost, so a cap within a few requests of the estimate may still stop the last ones)")
    share = cap_usd / estimate_usd if estimate_usd else 1.0
    return head + (f"NOT enough for the estimated {dollars(estimate_usd)}: about {share:.0%} of the run would be "
                   "judged, and the rows left would get status skipped (exit 3)")


def estimate_items(judge: JudgeStack, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem]) -> CostEstimate:
    """The inner judge's estimate for each distinct content the store lacks, once. A verdict item whose
    id is that of an extraction item with stored claims is estimated with those claims."""
    return _with_repeats(*_call(judge, extract, verdict, set()))


def _call(judge: JudgeStack, extract: Sequence[ExtractItem], verdict: Sequence[VerdictItem],
          seen: set[bytes]) -> tuple[CostEstimate, int]:
    """:func:`estimate_items` of one call of a run, and how many of its items repeat a content already priced;
    ``seen`` holds the content keys of the run's earlier calls (free here: the run's memory has them) and
    gains this call's."""
    x_keys = {} if judge.keys is None else judge.keys.extract(extract)
    claims = {item_id: r.claims for item_id, r in judge.found("extract", x_keys).items()}
    verdict = [VerdictItem(it.id, claims[it.id] or (), it.context, it.question) if it.id in claims else it
               for it in verdict]
    v_keys = {} if judge.keys is None else judge.keys.verdict(verdict)
    v_found = judge.found("verdict", v_keys)
    x_rest = _distinct([it for it in extract if it.id not in claims], x_keys, seen)
    v_rest = _distinct([it for it in verdict if it.id not in v_found], v_keys, seen)
    cached = len(claims) + len(v_found)
    estimating = judge.capabilities.estimating
    if estimating is None:
        return CostEstimate(0, 0, 0, 0.0, cached_items=cached), 0
    inner = estimating.estimate(x_rest, v_rest)
    repeated = len(extract) - len(claims) - len(x_rest) + len(verdict) - len(v_found) - len(v_rest)
    return CostEstimate(inner.requests, inner.prompt_tokens, inner.completion_tokens, inner.cost_usd,
                        list(inner.notes), cached, inner.batch_cost_usd), repeated


def _with_repeats(estimate: CostEstimate, repeated: int) -> CostEstimate:
    if repeated:
        estimate.notes.append(f"{repeated} items repeat an identical item of the run: each content is asked once")
    return estimate


def _distinct(items: list[Any], keys: dict[str, bytes], seen: set[bytes]) -> list[Any]:
    """The first item of each content key not in ``seen`` (items without a key are all kept); ``seen``
    gains the keys kept."""
    out = []
    for it in items:
        key = keys.get(it.id)
        if key is None or key not in seen:
            out.append(it)
            if key is not None:
                seen.add(key)
    return out


def _slices(frame: pl.DataFrame, rows: int) -> list[pl.DataFrame]:
    return [frame.slice(start, rows) for start in range(0, frame.height, rows)] or [frame]


def _sum(estimates: Sequence[CostEstimate]) -> CostEstimate:
    """The estimates of a run's calls (at least one) as one: a cost unknown where any call's is."""

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    notes = dict.fromkeys(note for e in estimates for note in e.notes)  # each once, in order
    return CostEstimate(sum(e.requests for e in estimates), sum(e.prompt_tokens for e in estimates),
                        sum(e.completion_tokens for e in estimates),
                        total([e.cost_usd for e in estimates]), list(notes), sum(e.cached_items for e in estimates),
                        total([e.batch_cost_usd for e in estimates]))  # fmt: skip

"""What ``score`` says when it is done: the run's summary, added up chunk by chunk while it runs."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.claimless import Claimless, count_claimless
from faithfulness_pipeline.core.money import dollars
from faithfulness_pipeline.core.port import Judge


@dataclass
class Summary:
    """What the run's summary says, added up chunk by chunk: the scored table itself is never held."""

    model_column: str = "model"  # per-model lines when the input has this column
    answer_column: str = "output"  # the judged answer (chat input gets it too), for the no-claims warning
    threshold: float = 0.5  # hallucination scores above it count as hallucinating
    run_id: str = ""  # the scoring_run_id of every row of the run
    sample_rate: float = 1.0  # the share of rows judged (core.sampling)
    sample_max_rows: int | None = None  # the most rows judged per model
    rows: int = 0
    ok: int = 0
    errors: int = 0
    not_sampled: int = 0
    skipped: int = 0  # left unjudged by the spend cap
    zero_claim_rows: int = 0
    hallucination_sum: float = 0.0
    faithfulness_sum: float = 0.0
    scored_rows: int = 0  # ok rows with a (non-null) score
    llm_calls: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = 0.0
    over_threshold: int = 0
    by_model: dict[str, tuple[int, int, float]] = field(default_factory=dict)  # rows, scored, hallucination sum
    billed_prompt_tokens: int = 0
    billed_cached_prompt_tokens: int = 0
    billed_completion_tokens: int = 0
    billed_cost_usd: float | None = 0.0
    by_source: dict[str, int] = field(default_factory=dict)
    first_errors: list[str] = field(default_factory=list)
    claimless: Claimless = field(default_factory=Claimless)
    input_notes: list[str] = field(default_factory=list)  # what reading the input found (span exports' counts)

    def add(self, scored: pl.DataFrame) -> None:
        self.rows += scored.height
        ok = scored.filter(pl.col("status") == S.STATUS_OK)
        self.ok += ok.height
        self.errors += scored.filter(pl.col("status") == S.STATUS_ERROR).height
        self.not_sampled += scored.filter(pl.col("status") == S.STATUS_NOT_SAMPLED).height
        self.skipped += scored.filter(pl.col("status") == S.STATUS_SKIPPED).height
        self.zero_claim_rows += ok.filter(pl.col("n_claims") == 0).height
        self.claimless += count_claimless(scored, self.answer_column)
        with_scores = ok.filter(pl.col("hallucination_score").is_not_null())
        self.scored_rows += with_scores.height
        self.hallucination_sum += float(with_scores.get_column("hallucination_score").sum())
        self.faithfulness_sum += float(with_scores.get_column("faithfulness_score").sum())
        self.over_threshold += with_scores.filter(pl.col("hallucination_score") > self.threshold).height
        if self.model_column in scored.columns:
            per_model = scored.group_by(pl.col(self.model_column).cast(pl.String).fill_null("(none)")).agg(
                pl.len().alias("rows"),
                ((pl.col("status") == "ok") & pl.col("hallucination_score").is_not_null()).sum().alias("scored"),
                pl.col("hallucination_score").filter(pl.col("status") == "ok").sum().alias("sum"),
            )
            for model, rows, n, total in per_model.iter_rows():
                before = self.by_model.get(model, (0, 0, 0.0))
                self.by_model[model] = (before[0] + rows, before[1] + n, before[2] + float(total or 0.0))
        self.llm_calls += float(scored.get_column("llm_calls").sum())
        self.prompt_tokens += int(scored.get_column("prompt_tokens").sum())
        self.completion_tokens += int(scored.get_column("completion_tokens").sum())
        cost = scored.get_column("cost_usd")
        if self.cost_usd is not None:
            self.cost_usd = None if cost.null_count() else self.cost_usd + float(cost.sum())
        self.billed_prompt_tokens += int(scored.get_column("billed_prompt_tokens").sum())
        self.billed_cached_prompt_tokens += int(scored.get_column("billed_cached_prompt_tokens").sum())
        self.billed_completion_tokens += int(scored.get_column("billed_completion_tokens").sum())
        billed = scored.get_column("billed_cost_usd")
        if self.billed_cost_usd is not None:
            self.billed_cost_usd = None if billed.null_count() else self.billed_cost_usd + float(billed.sum())
        for source, n in scored.group_by("result_source").len().iter_rows():
            self.by_source[source] = self.by_source.get(source, 0) + n
        if len(self.first_errors) < 3:
            failed = scored.filter(pl.col("status") == S.STATUS_ERROR)
            for key, error in failed.select("row_key", "error").iter_rows():
                if len(self.first_errors) < 3:
                    self.first_errors.append(f"{key}: {error}")

    def render(
        self, elapsed: float, outputs: list[str], judge: Judge, max_error_rate: float = 1.0,
        max_zero_claim_share: float = 1.0,
    ) -> str:
        def mean(total: float, n: int | None = None) -> str:
            n = self.scored_rows if n is None else n
            return f"{total / n:.3f}" if n else "n/a"

        stats = judge.stats()
        # Said only where a provider reported some, so that the line reads as before everywhere else.
        cached = f" ({self.billed_cached_prompt_tokens} cached)" if self.billed_cached_prompt_tokens else ""
        sources = ", ".join(f"{n} {_SOURCE_WORDS.get(s, s)}" for s, n in sorted(self.by_source.items()))
        lines = [
            f"scored {self.rows} rows in {elapsed:.1f}s with {judge.model_name} (prompt {judge.prompt_version})",
            f"  ok: {self.ok}   errors: {self.errors}   no claims: {self.zero_claim_rows}"
            + (f"   not sampled: {self.not_sampled}" if self.not_sampled else "")
            + (f"   skipped (spend cap): {self.skipped}" if self.skipped else ""),
            f"  mean hallucination: {mean(self.hallucination_sum)}   mean faithfulness: {mean(self.faithfulness_sum)}",
            f"  hallucination above {self.threshold:g}: {self.over_threshold} of {self.scored_rows} scored answers",
            *(f"  {note}" for note in self.input_notes),
            f"  results: {sources or 'none'}",
            f"  billed this run: {stats.requests} requests, {self.billed_prompt_tokens} prompt{cached} + "
            f"{self.billed_completion_tokens} completion tokens, {dollars(self.billed_cost_usd)}",
            f"  what producing the results cost (usage columns): {self.prompt_tokens} prompt + "
            f"{self.completion_tokens} completion tokens, {dollars(self.cost_usd)}",
        ]
        sampled = self.rows - self.not_sampled
        if self.sample_rate < 1 or self.sample_max_rows is not None:
            cap = "" if self.sample_max_rows is None else f", at most {self.sample_max_rows} per {self.model_column}"
            lines.insert(1, f"  sample: judged {sampled} of {self.rows} rows (sample_rate {self.sample_rate:g}{cap}, "
                            "picked by row key); the others have status not_sampled and null scores, and cost nothing")
        for model, (rows, n, total) in sorted(self.by_model.items()):
            lines.append(f"  {self.model_column} {model}: {rows} rows, mean hallucination {mean(total, n)}")
        lines += [f"  note: {note}" for note in stats.notes]
        judged = sampled - self.skipped
        if judged and self.errors / judged > max_error_rate:
            lines.append(f"  warning: {self.errors / judged:.1%} of the judged rows are errors, more than "
                         f"max_error_rate {max_error_rate:g}")
        if self.skipped:
            lines.append(f"  warning: {self.skipped} rows were not judged: the spend cap (max_cost_usd) was reached; "
                         "they have status skipped and null scores; run again with a larger --max-cost-usd to judge "
                         "them (stored results are not paid again)")
        if (claimless := self.claimless.warning(max_zero_claim_share)) is not None:
            lines.append(f"  warning: {claimless}")
        lines += [f"  error: {e}" for e in self.first_errors]
        if self.run_id:
            lines.append(f"  scoring run: {self.run_id} (the scoring_run_id of every row)")
        lines += [f"  wrote {path}" for path in outputs]
        return "\n".join(lines)


_SOURCE_WORDS = {
    "llm": "asked of the LLM", "store": "served from the store", "duplicate": "copied from an identical answer",
    "offline": "by the offline judge", "none": "with nothing to judge", "not_sampled": "left out of the sample",
    "skipped": "skipped at the spend cap",
}

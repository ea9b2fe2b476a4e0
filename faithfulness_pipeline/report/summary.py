"""What the answer-quality report shows, folded from the chunks of a scored table (pure polars).

Each chunk (``report.data.scored_chunks``) is reduced to what adds up — the daily tallies and score counts
(``core.aggregates``), tallies per model x language for the model comparison, the verdict mix, claims per
answer, the judges, the claimless count, and its worst answers — and merged into what the chunks before
gave. Memory follows the number of days x models and score values, never the number of rows: a month of
millions of answers is reported like a day.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import polars as pl

from faithfulness_pipeline.core.aggregates import (
    DAY_MODEL,
    DailyParts,
    by_day_and_model,
    finish_daily,
    merge_score_counts,
    merge_tallies,
    score_counts,
    tally,
)
from faithfulness_pipeline.core.claimless import Claimless, count_claimless
from faithfulness_pipeline.report.comparisons import LANGUAGE, MODEL, model_differences
from faithfulness_pipeline.report.data import ANSWER_SCRIPT, ANSWER_WORDS, DAY, MARK_COUNTS, light, script
from faithfulness_pipeline.settings.scoring import ScoringSettings

#: Chunks' parts held before they are merged into one (a merge costs a few group-bys of small frames).
_MERGE_EVERY: Final = 32
#: The keys of the one tally each chunk gives: per day x model for the daily table, per model x language
#: for the model comparison (whose MODEL key is DAY_MODEL's).
_TALLY_KEYS: Final = (*DAY_MODEL, LANGUAGE)


@dataclass(frozen=True)
class ReportData:
    """Everything the page shows, already reduced (its size does not grow with the rows beyond ``worst``)."""

    source: str
    scored_rows: int
    daily: pl.DataFrame  # core.aggregates schema: one row per day x model
    distribution: pl.DataFrame  # score (hallucination / faithfulness), value, answers: the scored answers' scores
    verdict_mix: pl.DataFrame  # language, mark, claims
    claims_per_answer: pl.DataFrame  # n_claims, answers (ok rows)
    worst: list[dict[str, Any]]  # the worst answers with their claims
    judges: list[tuple[str, str, int]]  # judge model, prompt version, rows
    threshold: float
    scale: float
    calibration: pl.DataFrame | None = None
    #: The figures corrected by people's labels, per day x model x language (``outputs.corrected``); None: none.
    corrected: pl.DataFrame | None = None
    warnings: list[str] = field(default_factory=list)  # one line each, shown above the numbers
    comparisons: list[str] = field(default_factory=list)  # the models against each other, in words



def _language(frame: pl.DataFrame, column: str, answer_column: str) -> pl.Expr:
    """The row's language column, else the answer's script (Hangul: ko, Han: zh, else other)."""
    if column in frame.columns:
        return pl.col(column).cast(pl.String).fill_null("(none)")
    if ANSWER_SCRIPT in frame.columns:
        return pl.col(ANSWER_SCRIPT)
    if answer_column not in frame.columns:
        return pl.lit("(unknown)")
    return script(pl.col(answer_column))


#: The rows of these keys with the named columns (``rows_of`` bound to the report's source).
FullRows = Callable[[list[str], Sequence[str]], dict[str, dict[str, Any]]]
_RANK: Final = (["hallucination_score", "faithfulness_score", "row_key"], [True, False, False])


def _top(frame: pl.DataFrame, limit: int) -> pl.DataFrame:
    # Lazy, so that sort + head is a top-k: sorting the frame itself would copy every row first. An answer
    # scored 0 (every claim supported, or none to judge) is no "worst" answer, however few the others are.
    return frame.lazy().filter(pl.col("hallucination_score") > 0).sort(
        _RANK[0], descending=_RANK[1], nulls_last=True).head(limit).collect()


def _text(frame: pl.DataFrame, column: str) -> pl.Expr:
    return pl.col(column).cast(pl.String) if column in frame.columns else pl.lit(None, dtype=pl.String)


@dataclass
class _Fold:
    """What the report keeps of the chunks read so far."""

    scoring: ScoringSettings
    language_column: str
    worst: int
    rows: int = 0
    tallies: list[pl.DataFrame] = field(default_factory=list)
    scores: list[pl.DataFrame] = field(default_factory=list)
    mix: list[pl.DataFrame] = field(default_factory=list)
    per_answer: list[pl.DataFrame] = field(default_factory=list)
    judges: list[pl.DataFrame] = field(default_factory=list)
    claimless: Claimless = field(default_factory=Claimless)
    ranked: pl.DataFrame | None = None

    def add(self, chunk: pl.DataFrame) -> None:
        scoring = self.scoring
        model_column, answer_column = scoring.model_column, scoring.output_column
        threshold = scoring.hallucination_threshold
        self.rows += chunk.height
        language = _language(chunk, self.language_column, answer_column)
        keyed = by_day_and_model(chunk, DAY, model_column).with_columns(
            _text(chunk, self.language_column).alias(LANGUAGE),
            language.alias("__fp_language"),
        )
        self.tallies.append(tally(keyed, _TALLY_KEYS, threshold))
        self.scores.append(score_counts(keyed, DAY_MODEL))
        ok = keyed.filter(pl.col("status") == "ok")
        self.mix.append(ok.group_by(pl.col("__fp_language").alias("language"))
                        .agg(pl.col(c).sum().cast(pl.Int64) for c in MARK_COUNTS.values()))
        self.per_answer.append(ok.group_by(pl.col("n_claims").cast(pl.Int64)).len("answers"))
        self.judges.append(keyed.group_by(pl.col("judge_model").cast(pl.String).fill_null("-"),
                                          pl.col("prompt_version").cast(pl.String).fill_null("-")).len("rows"))
        words = pl.col(ANSWER_WORDS) if ANSWER_WORDS in chunk.columns else None
        self.claimless += count_claimless(chunk, answer_column, words=words)
        light = keyed.select(
            "row_key", DAY, pl.col(MODEL).alias("model"), pl.col("__fp_language").alias("language"),
            _text(chunk, scoring.input_column).alias("question"), _text(chunk, answer_column).alias("answer"),
            "hallucination_score", "faithfulness_score",
        )
        candidates = light if self.ranked is None else pl.concat([self.ranked, light], how="vertical_relaxed")
        self.ranked = _top(candidates, self.worst)
        if len(self.tallies) >= _MERGE_EVERY:
            self._merge()

    def _merge(self) -> None:
        self.tallies = [merge_tallies(self.tallies, _TALLY_KEYS)]
        self.scores = [merge_score_counts(self.scores, DAY_MODEL)]
        self.mix = [pl.concat(self.mix).group_by("language").agg(pl.all().sum())]
        self.per_answer = [pl.concat(self.per_answer).group_by("n_claims").agg(pl.col("answers").sum())]
        self.judges = [pl.concat(self.judges).group_by("judge_model", "prompt_version").agg(pl.col("rows").sum())]


def summarise_chunks(
    chunks: Iterable[pl.DataFrame],
    *,
    source: str,
    scoring: ScoringSettings,
    language_column: str = "language",
    worst: int = 20,
    calibration: pl.DataFrame | None = None,
    full_rows: FullRows | None = None,
) -> ReportData:
    """Fold the chunks of a scored table (each with a ``day`` column) into what the report draws; ``scoring``
    names its columns, the hallucination threshold and the scale; ``full_rows`` reads the worst answers'
    verdicts and texts where the chunks hold only their light columns."""
    fold = _Fold(scoring, language_column, worst)
    for chunk in chunks:
        fold.add(chunk)
    if not fold.tallies:
        raise ValueError("summarise_chunks needs at least one chunk (an empty one gives an empty report)")
    fold._merge()
    tallies, counts = fold.tallies[0], fold.scores[0]
    parts = DailyParts(merge_tallies([tallies.drop(LANGUAGE)], DAY_MODEL), counts)
    daily = finish_daily(parts, hallucination_threshold=scoring.hallucination_threshold, scale=scoring.scale)
    assert fold.ranked is not None
    return ReportData(
        source=source,
        scored_rows=fold.rows,
        daily=daily,
        distribution=counts.group_by("score", "value").agg(pl.col("answers").sum()).sort("score", "value"),
        verdict_mix=_verdict_mix(fold.mix[0]),
        claims_per_answer=fold.per_answer[0].sort("n_claims").with_columns(pl.col("answers").cast(pl.UInt32)),
        worst=_worst(fold.ranked, scoring, full_rows),
        judges=[(str(m), str(p), int(n)) for m, p, n in fold.judges[0].sort("judge_model", "prompt_version").rows()],
        threshold=scoring.hallucination_threshold,
        scale=scoring.scale,
        calibration=calibration,
        warnings=[w for w in [fold.claimless.warning(scoring.max_zero_claim_share)] if w],
        comparisons=model_differences(merge_tallies([tallies.drop(DAY_MODEL[0])], (MODEL, LANGUAGE)),
                                      scoring.hallucination_threshold),
    )


def summarise(scored: pl.DataFrame, *, scoring: ScoringSettings, full_rows: FullRows | None = None,
              **kwargs: Any) -> ReportData:
    """:func:`summarise_chunks` of one frame already in memory (a scored table with a ``day`` column and its
    verdicts): the worst answers' verdicts and texts come from the frame itself."""

    def from_frame(keys: list[str], columns: Sequence[str]) -> dict[str, dict[str, Any]]:
        kept = [c for c in dict.fromkeys(columns) if c in scored.columns and c != "row_key"]
        found = scored.filter(pl.col("row_key").is_in(keys)).select("row_key", *kept).to_dicts()
        return {row.pop("row_key"): row for row in found}

    return summarise_chunks([light(scored, scoring.output_column)], scoring=scoring,
                            full_rows=full_rows or from_frame, **kwargs)


def _worst(ranked: pl.DataFrame, scoring: ScoringSettings, full: FullRows | None) -> list[dict[str, Any]]:
    """The worst answers with their claims, the verdicts and texts read now for these rows alone."""
    rows = ranked.with_columns(pl.lit(None).alias("verdicts")).to_dicts()
    answer_column, question_column = scoring.output_column, scoring.input_column
    if full is not None:
        complete = full([row["row_key"] for row in rows], ("verdicts", answer_column, question_column))
        for row in rows:
            found = complete.get(row["row_key"], {})
            row["verdicts"] = found.get("verdicts") or []
            for name, column in (("answer", answer_column), ("question", question_column)):
                if row[name] is None and found.get(column) is not None:
                    row[name] = str(found[column])
    for row in rows:
        claims = []
        for verdict in row.pop("verdicts") or []:
            mark = "contradicted" if verdict["verdict"] == "contradicted" else (
                "speculative" if verdict["speculative"] else verdict["verdict"])
            claims.append({**verdict, "mark": mark})
        row["claims"] = claims
    return rows


def _verdict_mix(summed: pl.DataFrame) -> pl.DataFrame:
    """Claims per language and mark, from the per-language sums of the rows' mark counts."""
    mix = (
        summed.unpivot(index="language", variable_name="mark", value_name="claims")
        .with_columns(pl.col("mark").replace({v: k for k, v in MARK_COUNTS.items()}),
                      pl.col("claims").cast(pl.UInt32))
        .filter(pl.col("claims") > 0)
        .sort("language", "mark")
    )
    return mix if mix.height else pl.DataFrame(schema={"language": pl.String, "mark": pl.String,
                                                        "claims": pl.UInt32})

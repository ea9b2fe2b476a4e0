"""Answers of some length in which the judge found no claim at all.

Both scores of an answer without claims are 0 (Mastra's rule), which reads as a perfect answer. A judge that
fails quietly, such as a small model that answers every extraction with an empty list, therefore looks like
the best judge there is. One answer of a few words without claims is normal ("Hello!", "I don't know"); most
answers of a sentence or more without any is a sign of the judge, not of the answers. The CLI summary, the
report and a Dagster check say so when the share of such answers passes ``max_zero_claim_share``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from faithfulness_pipeline.core import schema as S

#: An answer of this many words or more is expected to state something checkable.
MIN_WORDS = 8
# A word: a run of letters or digits, or one Han / kana character (Chinese and Japanese put no spaces between
# words; one character stands for about one word there, and 8 of them already make a sentence). Korean
# separates its words with spaces, like English.
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}"
_WORD = rf"[{_CJK}]|[^\s{_CJK}\p{{P}}\p{{S}}]+"


def answer_words(answer: pl.Expr) -> pl.Expr:
    """Words of each answer (see ``_WORD``); 0 for a null answer.

    >>> frame = pl.DataFrame({"a": ["Paris is the capital.", "巴黎是法国的首都", "파리는 프랑스의 수도입니다", None]})
    >>> frame.select(answer_words(pl.col("a"))).to_series().to_list()
    [4, 8, 3, 0]
    """
    return answer.cast(pl.String).str.count_matches(_WORD).fill_null(0).cast(pl.Int64)


@dataclass(frozen=True)
class Claimless:
    """Of the ok answers of ``MIN_WORDS`` words or more, how many came back without a claim."""

    long_answers: int = 0
    without_claims: int = 0

    def __add__(self, other: Claimless) -> Claimless:
        return Claimless(self.long_answers + other.long_answers, self.without_claims + other.without_claims)

    @property
    def share(self) -> float:
        return self.without_claims / self.long_answers if self.long_answers else 0.0

    def too_many(self, max_share: float) -> bool:
        return self.long_answers > 0 and self.share > max_share

    def warning(self, max_share: float) -> str | None:
        """One line for a run or a day with too many such answers, else None."""
        if not self.too_many(max_share):
            return None
        return (
            f"{self.without_claims} of {self.long_answers} answers of {MIN_WORDS}+ words ({self.share:.0%}) came "
            f"back with no claims, more than max_zero_claim_share {max_share:g}: their scores are 0, which reads "
            "as perfect; the judge is likely not extracting claims (a small or misconfigured model?)"
        )


def count_claimless(
    scored: pl.DataFrame | pl.LazyFrame, answer_column: str, *, words: pl.Expr | None = None
) -> Claimless:
    """:class:`Claimless` of a scored table whose answers are in ``answer_column``, or whose answers' word counts
    ``words`` gives (a table that has neither counts nothing: it cannot tell long answers from short ones)."""
    lazy = scored.lazy()
    if words is None:
        if answer_column not in lazy.collect_schema().names():
            return Claimless()
        words = answer_words(pl.col(answer_column))
    long = (pl.col("status") == S.STATUS_OK) & (words >= MIN_WORDS)
    # Streaming: a day's answers are read a morsel at a time, never held whole.
    row = lazy.select(
        long.sum().alias("long"), (long & (pl.col("n_claims") == 0)).sum().alias("without")
    ).collect(engine="streaming").row(0)
    return Claimless(int(row[0] or 0), int(row[1] or 0))

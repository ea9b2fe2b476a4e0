"""What a scored row says about its span, as OpenTelemetry GenAI evaluation results: one
``gen_ai.evaluation.result`` per scorer, with ``gen_ai.evaluation.name``, ``.score.value``, ``.score.label``,
``.explanation``, and ``error.type`` where the judge failed on the row. Pure: sending them is
``traces.otel_events``'s, and Phoenix's annotations can be made from the same records."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from faithfulness_pipeline.core import schema as S

EVENT_NAME: Final = "gen_ai.evaluation.result"
#: (evaluation name, score column, reason column) of each scorer.
SCORERS: Final = (("hallucination", "hallucination_score", "hallucination_reason"),
                  ("faithfulness", "faithfulness_score", "faithfulness_reason"))  # fmt: skip
#: The columns a scored table must have for its rows to become evaluation results.
COLUMNS: Final = (S.TRACE_ID, S.SPAN_ID, "status", "error",
                  *(column for _, score, reason in SCORERS for column in (score, reason)))
#: Read where a table has them: a span input's reason a row had nothing to judge.
OPTIONAL_COLUMNS: Final = (S.NOTHING_TO_JUDGE,)
#: ``error.type`` of a row the judge could not score (the row's ``error`` column says why).
JUDGE_ERROR: Final = "judge_error"
#: ``error.type`` of a row whose span held nothing to judge (no answer): the span's fault, not the judge's.
NOTHING_TO_JUDGE: Final = "nothing_to_judge"


def evaluation_columns(columns: Iterable[str]) -> list[str]:
    """The columns of a scored table its evaluation results are made from."""
    present = set(columns)
    return [*COLUMNS, *(c for c in OPTIONAL_COLUMNS if c in present)]


@dataclass(frozen=True, slots=True)
class Evaluation:
    trace_id: str
    span_id: str
    name: str
    score: float | None
    label: str | None
    explanation: str | None
    error_type: str | None

    def attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = {"gen_ai.evaluation.name": self.name}
        if self.score is not None:
            out["gen_ai.evaluation.score.value"] = self.score
        if self.label is not None:
            out["gen_ai.evaluation.score.label"] = self.label
        if self.explanation:
            out["gen_ai.evaluation.explanation"] = self.explanation
        if self.error_type is not None:
            out["error.type"] = self.error_type
        return out


def label(name: str, score: float | None, threshold: float, scale: float) -> str | None:
    """The verdict a score reads as: ``hallucinated`` above the hallucination threshold (score units, as the
    aggregates count), else ``not_hallucinated``; ``faithful`` when the faithfulness score is at least
    ``scale - threshold``, the same cut seen from the other side, else ``unfaithful``."""
    if score is None:
        return None
    if name == "hallucination":
        return "hallucinated" if score > threshold else "not_hallucinated"
    return "faithful" if score >= scale - threshold else "unfaithful"


def evaluations(row: Mapping[str, Any], threshold: float, scale: float) -> Iterator[Evaluation]:
    """The evaluation results of one scored row; none for a row that was not judged (not sampled, or left out
    by the spend cap): nothing was evaluated there."""
    status = row.get("status")
    if status not in (S.STATUS_OK, S.STATUS_ERROR):
        return
    for name, score_column, reason_column in SCORERS:
        if status == S.STATUS_ERROR:
            kind = NOTHING_TO_JUDGE if row.get(S.NOTHING_TO_JUDGE) else JUDGE_ERROR
            yield Evaluation(row[S.TRACE_ID], row[S.SPAN_ID], name, None, None, row.get("error"), kind)
            continue
        score = row.get(score_column)
        yield Evaluation(row[S.TRACE_ID], row[S.SPAN_ID], name, score, label(name, score, threshold, scale),
                         row.get(reason_column), None)

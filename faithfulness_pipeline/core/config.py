"""Scoring configuration: everything that changes what a row's scores mean, plus the input column mapping."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from faithfulness_pipeline.core.errors import ConfigError

#: A user hook that returns the context passages of one input row (Mastra's ``getContext``).
ContextHook = Callable[[Mapping[str, Any]], Sequence[str] | None]

ZeroClaimPolicy = Literal["zero", "null"]


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """Names of the input columns. Every name can be overridden (CLI: ``--output-col`` and friends)."""

    output: str = "output"
    input: str = "input"
    context: str = "context"
    messages: str = "messages"
    conversation_id: str = "conversation_id"
    turn: str = "turn"
    #: an explicit key column; when unset the key is conversation_id (+ turn), else a content hash
    key: str | None = None


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """How rows are read and scored. Defaults reproduce Mastra's scorers."""

    columns: ColumnMap = field(default_factory=ColumnMap)
    #: maximum score value (Mastra ``options.scale``); scores are ratio x scale, rounded half-up to 2 decimals
    scale: float = 1.0
    #: answers with no claims score 0 like Mastra ("zero"), or get null scores ("null")
    zero_claims: ZeroClaimPolicy = "zero"
    #: score every assistant turn of a chat conversation, not only the last one
    all_turns: bool = False
    #: static passages applied to every row (Mastra ``options.context``); beaten only by ``context_hook``
    static_context: tuple[str, ...] | None = None
    #: per-row context hook (Mastra ``options.getContext``); beats every other context source
    context_hook: ContextHook | None = None
    #: rows per chunk: bounds memory and is the unit of progress and of output writes. Each chunk also
    #: costs ~25 ms of fixed work (polars query set-up, thread hand-offs) whatever its size: at 5,000 rows
    #: that was a third of a warm re-run's time; 10,000 rows cost ~15-70 MB more peak memory (BENCHMARKS.md)
    chunk_rows: int = 10_000

    def __post_init__(self) -> None:
        if not isinstance(self.scale, int | float) or not math.isfinite(self.scale) or self.scale <= 0:
            raise ConfigError(f"scale must be a finite number > 0, got {self.scale!r} (e.g. --scale 1 or --scale 10)")
        if self.zero_claims not in ("zero", "null"):
            raise ConfigError(f"zero_claims must be 'zero' or 'null', got {self.zero_claims!r}")
        if self.chunk_rows < 1:
            raise ConfigError(f"chunk_rows must be >= 1, got {self.chunk_rows!r}")
        if self.static_context is not None and not all(isinstance(p, str) for p in self.static_context):
            raise ConfigError("static_context must be a list of strings")


_COLUMNS: Final = ColumnMap()
_SCORING: Final = ScoringConfig()


def _flag(name: str) -> dict[str, Any]:
    return {"cli": name}


class ScoringSettings(BaseModel):
    """The scoring settings users set: declared once here; the CLI flags, the Dagster resource fields and the
    ``FP_*`` variables are derived from these fields (``faithfulness_pipeline.settings``), and so is the
    README's table. Defaults are :class:`ScoringConfig`'s. ``cli`` in a field's ``json_schema_extra`` names
    its flag where the flag is not ``--`` and the field name with dashes."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    output_column: str = Field(default=_COLUMNS.output, description="column holding the answer (flat shape)",
                               json_schema_extra=_flag("--output-col"))
    input_column: str = Field(default=_COLUMNS.input, description="column holding the question (optional)",
                              json_schema_extra=_flag("--input-col"))
    context_column: str = Field(default=_COLUMNS.context, description="column of context passages (list or text)",
                                json_schema_extra=_flag("--context-col"))
    messages_column: str = Field(default=_COLUMNS.messages, description="column of OpenAI chat messages (chat shape)",
                                 json_schema_extra=_flag("--messages-col"))
    id_column: str = Field(default=_COLUMNS.conversation_id, description="conversation id: the row key (+ turn)",
                           json_schema_extra=_flag("--id-col"))
    turn_column: str = Field(default=_COLUMNS.turn, description="turn column added to the key when present",
                             json_schema_extra=_flag("--turn-col"))
    key_column: str | None = Field(default=_COLUMNS.key, description="unique key column instead of id (+ turn)",
                                   json_schema_extra=_flag("--key-col"))
    model_column: str = Field(default="model", description="column naming the answering model, for per-model totals",
                              json_schema_extra=_flag("--model-col"))
    all_turns: bool = Field(default=_SCORING.all_turns, description="score every assistant turn of a chat, not only "
                            "the last")
    scale: float = Field(default=_SCORING.scale, gt=0, allow_inf_nan=False,
                         description="maximum score (Mastra options.scale); scores are ratio x scale")
    zero_claims: ZeroClaimPolicy = Field(default=_SCORING.zero_claims,
                                         description="scores of answers without claims: 0 like Mastra, or null")
    chunk_rows: int = Field(default=_SCORING.chunk_rows, ge=1,
                            description="rows per processing chunk (bounds memory; each chunk costs fixed work)")
    hallucination_threshold: float = Field(
        default=0.5, ge=0, allow_inf_nan=False,
        description="answers with a hallucination score above this (in score units, 0..scale) count as "
        "hallucinating in the BI aggregates and summaries",
    )
    max_error_rate: float = Field(
        default=0.05, ge=0, le=1,
        description="largest share of error rows before the error-rate check fails (Dagster) or the summary warns",
    )

    def columns(self) -> ColumnMap:
        return ColumnMap(
            output=self.output_column, input=self.input_column, context=self.context_column,
            messages=self.messages_column, conversation_id=self.id_column, turn=self.turn_column,
            key=self.key_column,
        )

    def config(
        self, *, static_context: tuple[str, ...] | None = None, context_hook: ContextHook | None = None
    ) -> ScoringConfig:
        """The core's configuration; the context sources that are code or lists come from the caller."""
        return ScoringConfig(
            columns=self.columns(), scale=self.scale, zero_claims=self.zero_claims, all_turns=self.all_turns,
            static_context=static_context, context_hook=context_hook, chunk_rows=self.chunk_rows,
        )

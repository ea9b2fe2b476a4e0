"""The scoring settings users set (CLI flags, ``FP_*`` variables, the Dagster ``scoring`` resource)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from faithfulness_pipeline.core.config import (
    DEFAULT_COLUMNS,
    DEFAULT_SCORING,
    ChunkRows,
    ColumnMap,
    ContextHook,
    SampleMaxRows,
    SampleRate,
    Scale,
    ScoringConfig,
    ZeroClaimPolicy,
)
from faithfulness_pipeline.settings.fields import flag
from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG

# Short names: every field's default below reads one, and the long ones would not fit its line.
_COLUMNS = DEFAULT_COLUMNS
_SCORING = DEFAULT_SCORING


class ScoringSettings(BaseModel):
    """The scoring settings users set: declared once here; the CLI flags, the Dagster resource fields and the
    ``FP_*`` variables are derived from these fields (``faithfulness_pipeline.settings.derive``), and so is the
    table of docs/settings.md. Defaults are :class:`ScoringConfig`'s. ``cli`` in a field's ``json_schema_extra`` names
    its flag where the flag is not ``--`` and the field name with dashes."""

    model_config = SETTINGS_CONFIG

    output_column: str = Field(default=_COLUMNS.output, description="column holding the answer (flat shape)",
                               json_schema_extra=flag("--output-col"))
    input_column: str = Field(default=_COLUMNS.input, description="column holding the question (optional)",
                              json_schema_extra=flag("--input-col"))
    context_column: str = Field(default=_COLUMNS.context, description="column of context passages (list or text)",
                                json_schema_extra=flag("--context-col"))
    messages_column: str = Field(default=_COLUMNS.messages, description="column of OpenAI chat messages (chat shape)",
                                 json_schema_extra=flag("--messages-col"))
    id_column: str = Field(default=_COLUMNS.conversation_id, description="conversation id: the row key (+ turn)",
                           json_schema_extra=flag("--id-col"))
    turn_column: str = Field(default=_COLUMNS.turn, description="turn column added to the key when present",
                             json_schema_extra=flag("--turn-col"))
    key_column: str | None = Field(default=_COLUMNS.key, description="unique key column instead of id (+ turn)",
                                   json_schema_extra=flag("--key-col"))
    model_column: str = Field(default=_COLUMNS.model, description="column naming the answering model, for per-model "
                              "totals and the strata of a sample",
                              json_schema_extra=flag("--model-col"))
    all_turns: bool = Field(default=_SCORING.all_turns, description="score every assistant turn of a chat, not only "
                            "the last")
    scale: Scale = Field(default=_SCORING.scale,
                         description="maximum score (Mastra options.scale); scores are ratio x scale")
    zero_claims: ZeroClaimPolicy = Field(default=_SCORING.zero_claims,
                                         description="scores of answers without claims: 0 like Mastra, or null")
    chunk_rows: ChunkRows = Field(default=_SCORING.chunk_rows,
                                  description="rows per processing chunk (bounds memory; each chunk costs fixed work)")
    sample_rate: SampleRate = Field(
        default=_SCORING.sample_rate,
        description="share of rows judged, picked by row key (a re-run picks the same rows; a higher rate keeps "
        "them and adds others); the rest get status not_sampled and null scores and cost nothing",
    )
    sample_max_rows: SampleMaxRows = Field(
        default=_SCORING.sample_max_rows,
        description="most rows judged per answering model (per day x model in Dagster), those of the sample "
        "with the smallest draws: a cap on each stratum of the sample; unset: no cap",
    )
    hallucination_threshold: float = Field(
        default=0.5, ge=0, allow_inf_nan=False,
        description="answers with a hallucination score above this (in score units, 0..scale) count as "
        "hallucinating in the BI aggregates and summaries",
    )
    max_error_rate: float = Field(
        default=0.05, ge=0, le=1,
        description="largest share of error rows before the error-rate check fails (Dagster) or the summary warns",
    )
    max_zero_claim_share: float = Field(
        default=0.5, ge=0, le=1,
        description="largest share of ok answers of 8+ words with no claims before the summary, the report and "
        "the claims_found check (Dagster) warn: a judge that extracts nothing scores every answer 0",
    )

    def columns(self) -> ColumnMap:
        return ColumnMap(
            output=self.output_column, input=self.input_column, context=self.context_column,
            messages=self.messages_column, conversation_id=self.id_column, turn=self.turn_column,
            key=self.key_column, model=self.model_column,
        )

    def config(
        self, *, static_context: tuple[str, ...] | None = None, context_hook: ContextHook | None = None
    ) -> ScoringConfig:
        """The core's configuration; the context sources that are code or lists come from the caller."""
        return ScoringConfig(
            columns=self.columns(), scale=self.scale, zero_claims=self.zero_claims, all_turns=self.all_turns,
            static_context=static_context, context_hook=context_hook, chunk_rows=self.chunk_rows,
            sample_rate=self.sample_rate, sample_max_rows=self.sample_max_rows,
        )

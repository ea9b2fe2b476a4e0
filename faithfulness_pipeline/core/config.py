"""Scoring configuration: everything that changes what a row's scores mean, plus the input column mapping."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal, get_args

from pydantic import Field, TypeAdapter, ValidationError

from faithfulness_pipeline.core.errors import ConfigError

#: A user hook that returns the context passages of one input row (Mastra's ``getContext``).
ContextHook = Callable[[Mapping[str, Any]], Sequence[str] | None]

# The constrained settings of the core, declared once: ``ScoringSettings`` (CLI flags, variables, Dagster
# fields) uses these types for its fields, and ``ScoringConfig`` (the Python API) checks its values with them.
#: The maximum score: scores are ratio x scale, so it must be a finite number above 0.
Scale = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: What answers without claims score: 0 like Mastra ("zero"), or null.
ZeroClaimPolicy = Literal["zero", "null"]
#: Rows per processing chunk: one at least.
ChunkRows = Annotated[int, Field(ge=1)]
#: The share of rows judged (``core.sampling``): above 0, at most 1 (every row).
SampleRate = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]
#: The most rows judged per stratum (the answering model), or None for no cap.
SampleMaxRows = Annotated[int, Field(ge=1)] | None


@dataclass(frozen=True, slots=True)
class _Rule:
    """How ``ScoringConfig`` checks one field: the field's type, and what the one-line error says."""

    adapter: TypeAdapter[Any]
    must: str  # what the value must be
    hint: str = ""  # how to set a good one


_RULES: Final = {
    "scale": _Rule(TypeAdapter(Scale), "a finite number > 0", " (e.g. --scale 1 or --scale 10)"),
    "zero_claims": _Rule(TypeAdapter(ZeroClaimPolicy), " or ".join(repr(v) for v in get_args(ZeroClaimPolicy))),
    "chunk_rows": _Rule(TypeAdapter(ChunkRows), ">= 1"),
    "sample_rate": _Rule(TypeAdapter(SampleRate), "a number in (0, 1]", " (e.g. 0.1 to judge one answer in ten)"),
    "sample_max_rows": _Rule(TypeAdapter(SampleMaxRows), "a whole number >= 1, or None for no cap"),
}


@dataclass(frozen=True, slots=True)
class ColumnMap:
    """Names of the input columns. Every name can be overridden (CLI: ``--output-col`` and friends)."""

    output: str = "output"
    input: str = "input"
    context: str = "context"
    messages: str = "messages"
    conversation_id: str = "conversation_id"
    turn: str = "turn"
    #: the answering model: per-model totals, and the strata of a sample
    model: str = "model"
    #: an explicit key column; when unset the key is conversation_id (+ turn), else a content hash
    key: str | None = None

    def key_columns(self) -> frozenset[str]:
        """The columns the row key is made of when a table has them: read as text from a CSV, where an id
        ``00123`` must not become the number 123."""
        return frozenset({self.key} if self.key is not None else {self.conversation_id, self.turn})


@dataclass(frozen=True, slots=True)
class ScoringConfig:
    """How rows are read and scored. Defaults reproduce Mastra's scorers."""

    columns: ColumnMap = field(default_factory=ColumnMap)
    #: maximum score value (Mastra ``options.scale``); scores are ratio x scale, rounded half-up to 2 decimals
    scale: Scale = 1.0
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
    chunk_rows: ChunkRows = 10_000
    #: the share of rows judged, picked by their row key (``core.sampling``): the same rows on every run,
    #: and a higher rate keeps them all; the others get ``status = "not_sampled"`` and null scores
    sample_rate: SampleRate = 1.0
    #: the most rows judged per model (a Dagster partition is a day: per day x model there); the run's
    #: keys are read once before anything is judged to find which (``core.sampling.plan_sample``)
    sample_max_rows: SampleMaxRows = None

    def __post_init__(self) -> None:
        for name, rule in _RULES.items():
            value = getattr(self, name)
            try:
                # Strict: a dataclass keeps what it is given, so text such as "10" must not pass as a number.
                rule.adapter.validate_python(value, strict=True)
            except ValidationError:
                raise ConfigError(f"{name} must be {rule.must}, got {value!r}{rule.hint}") from None
        if self.static_context is not None and not all(isinstance(p, str) for p in self.static_context):
            raise ConfigError("static_context must be a list of strings")


#: The defaults, public so that the settings declared for users (``settings.scoring``) start from these
#: very values instead of restating them.
DEFAULT_COLUMNS: Final = ColumnMap()
DEFAULT_SCORING: Final = ScoringConfig()

"""Scoring configuration: everything that changes what a row's scores mean, plus the input column mapping."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

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

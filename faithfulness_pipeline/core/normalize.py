"""Input normalisation (SPEC §1, §2): any accepted input table -> one row per judged answer.

The result keeps every input column (passthrough, in order), adds ``row_key`` (and ``assistant_turn`` when
every turn is scored), the judged answer and question as columns when they came out of ``messages``, and
the internal ``_fp_answer`` / ``_fp_question`` / ``_fp_context`` columns the steps work on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ColumnMap, ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.core.keys import content_key
from faithfulness_pipeline.core.messages import (
    assistant_turn_indexes,
    message_text,
    question_before,
    tool_results_before,
)

_MAX_EXAMPLES = 5


@dataclass
class KeyRegistry:
    """Row keys seen so far in one run, so duplicates are caught across chunks and files."""

    seen: set[str] = field(default_factory=set)
    hash_repeats: dict[str, int] = field(default_factory=dict)

    def number_repeat(self, key: str) -> str:
        """Content-hash keys of identical rows get ``~2``, ``~3``... in file order (stable, never dropped)."""
        count = self.hash_repeats.get(key, 0) + 1
        self.hash_repeats[key] = count
        return key if count == 1 else f"{key}~{count}"


def _is_text(dtype: Any) -> bool:
    return dtype in (pl.String, pl.Null, pl.Categorical) or isinstance(dtype, pl.Enum | pl.Categorical)


def _columns_hint(df: pl.DataFrame) -> str:
    return ", ".join(f"{name} ({dtype})" for name, dtype in df.schema.items()) or "(none)"


def detect_shape(df: pl.DataFrame, columns: ColumnMap) -> str:
    """``flat`` when the answer column is there, ``chat`` when only messages are; otherwise a clear error."""
    if columns.output in df.columns:
        return "flat"
    if columns.messages in df.columns:
        return "chat"
    raise InputError(
        f"no answer column: expected a column {columns.output!r} (the answer, flat shape) or "
        f"{columns.messages!r} (OpenAI chat messages). Columns found: {_columns_hint(df)}. "
        f"Map yours with --output-col NAME or --messages-col NAME "
        f"(Python: ScoringConfig(columns=ColumnMap(output=..., messages=...)))."
    )


def _check_types(df: pl.DataFrame, columns: ColumnMap) -> None:
    schema = df.schema
    for role, name, flag in (("answer", columns.output, "--output-col"), ("input", columns.input, "--input-col")):
        if name in schema and not _is_text(schema[name]):
            raise InputError(
                f"column {name!r} ({role}) has type {schema[name]}, expected text (string). "
                f"Cast it to string, or map another column with {flag}."
            )
    if columns.context in schema:
        dtype = schema[columns.context]
        ok = _is_text(dtype) or (isinstance(dtype, pl.List) and _is_text(dtype.inner))
        if not ok:
            raise InputError(
                f"column {columns.context!r} (context) has type {dtype}, expected a list of strings "
                f"(or one string = one passage). Convert it, or map another column with --context-col."
            )
    if columns.messages in schema:
        dtype = schema[columns.messages]
        if not (dtype == pl.Null or (isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct | pl.Null))):
            raise InputError(
                f"column {columns.messages!r} (messages) has type {dtype}, expected "
                f"list<struct<role, content, ...>> in the OpenAI chat format. Map another column with --messages-col."
            )
    if columns.key is not None and columns.key not in schema:
        raise InputError(
            f"key column {columns.key!r} (--key-col) not found. Columns found: {_columns_hint(df)}."
        )


def _reserved_clash(df: pl.DataFrame) -> None:
    reserved = set(S.SCORED_COLUMNS) | set(S.INTERNAL_COLUMNS) | {S.ASSISTANT_TURN}
    clash = [c for c in df.columns if c in reserved]
    if clash:
        raise InputError(
            f"input columns {clash} have the names of columns the scorer writes. Rename or drop them before "
            f"scoring (for example, a table that was already scored: select the original columns)."
        )


def _as_passages(value: Any) -> list[str] | None:
    """A context cell as passages: a string is one passage; nulls inside a list are skipped."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value] if value.strip() else []
    return [p for p in value if isinstance(p, str) and p.strip()]


def _hook_passages(hook_value: Any, key_hint: str) -> list[str]:
    if hook_value is None:
        return []
    if isinstance(hook_value, str) or not isinstance(hook_value, Sequence):
        raise ConfigError(
            f"get_context hook returned {type(hook_value).__name__} for row {key_hint}; it must return a list "
            f"of strings"
        )
    return [str(p) for p in hook_value if p is not None and str(p).strip()]


@dataclass(frozen=True, slots=True)
class _Judged:
    source_row: int
    answer: str | None
    question: str | None
    tool_context: list[str]
    assistant_turn: int | None


def _judged_rows(df: pl.DataFrame, config: ScoringConfig, shape: str) -> list[_Judged]:
    columns = config.columns
    n = df.height
    messages: list[Any] = (
        df.get_column(columns.messages).to_list() if columns.messages in df.columns else [None] * n
    )
    outputs: list[Any] = df.get_column(columns.output).to_list() if shape == "flat" else [None] * n
    inputs: list[Any] = df.get_column(columns.input).to_list() if columns.input in df.columns else [None] * n
    rows: list[_Judged] = []
    for i in range(n):
        msgs = [m for m in (messages[i] or []) if isinstance(m, Mapping)]
        if shape == "flat":
            question = inputs[i] if inputs[i] is not None else (question_before(msgs, len(msgs)) if msgs else None)
            rows.append(_Judged(i, outputs[i], question, tool_results_before(msgs, len(msgs)), None))
            continue
        turns = assistant_turn_indexes(msgs)
        if not turns:
            # A conversation with no assistant answer is still a row: no claims, never dropped.
            rows.append(_Judged(i, None, inputs[i], tool_results_before(msgs, len(msgs)), None))
            continue
        chosen = list(enumerate(turns)) if config.all_turns else [(len(turns) - 1, turns[-1])]
        for ordinal, index in chosen:
            question = inputs[i] if inputs[i] is not None and not config.all_turns else None
            question = question if question is not None else question_before(msgs, index)
            rows.append(
                _Judged(
                    i,
                    message_text(msgs[index]),
                    question,
                    tool_results_before(msgs, index),
                    ordinal if config.all_turns else None,
                )
            )
    return rows


def _resolve_context(
    df: pl.DataFrame, config: ScoringConfig, judged: list[_Judged]
) -> list[list[str]]:
    """SPEC §2: hook > static > the row's context column > tool results; none of them = empty context."""
    if config.context_hook is not None:
        hook = config.context_hook
        originals = df.to_dicts()
        out = []
        for j in judged:
            try:
                value = hook(originals[j.source_row])
            except Exception as exc:
                raise ConfigError(
                    f"get_context hook failed on input row {j.source_row}: {type(exc).__name__}: {exc}"
                ) from exc
            out.append(_hook_passages(value, f"#{j.source_row}"))
        return out
    if config.static_context is not None:
        static = [p for p in config.static_context if p.strip()]
        return [list(static) for _ in judged]
    column: list[Any] = (
        df.get_column(config.columns.context).to_list()
        if config.columns.context in df.columns
        else [None] * df.height
    )
    out = []
    for j in judged:
        passages = _as_passages(column[j.source_row])
        # A null or empty context cell falls through to the conversation's tool results.
        out.append(passages if passages else list(j.tool_context))
    return out


def _keys(
    df: pl.DataFrame, config: ScoringConfig, judged: list[_Judged], contexts: list[list[str]], registry: KeyRegistry
) -> list[str]:
    columns = config.columns
    if columns.key is not None or columns.conversation_id in df.columns:
        name = columns.key if columns.key is not None else columns.conversation_id
        ids = df.get_column(name).cast(pl.String).to_list()
        turn_values = (
            df.get_column(columns.turn).cast(pl.String).to_list()
            if columns.key is None and columns.turn in df.columns
            else None
        )
        missing = [j.source_row for j in judged if ids[j.source_row] is None]
        if missing:
            raise InputError(
                f"key column {name!r} is null in {len(missing)} row(s) (first rows: {missing[:_MAX_EXAMPLES]}). "
                f"Fill it, or choose another key column with --key-col."
            )
        keys = []
        for j in judged:
            key = str(ids[j.source_row])
            if turn_values is not None and turn_values[j.source_row] is not None:
                key = f"{key}#{turn_values[j.source_row]}"
            if j.assistant_turn is not None:
                key = f"{key}@{j.assistant_turn}"
            keys.append(key)
        return keys
    return [
        registry.number_repeat(content_key(j.question, j.answer, ctx)) for j, ctx in zip(judged, contexts, strict=True)
    ]


def _check_unique(keys: list[str], registry: KeyRegistry, config: ScoringConfig) -> None:
    duplicates: list[str] = []
    local: set[str] = set()
    for key in keys:
        if key in registry.seen or key in local:
            duplicates.append(key)
        local.add(key)
    if duplicates:
        hint = config.columns.key or config.columns.conversation_id
        raise InputError(
            f"{len(duplicates)} duplicate row key(s), e.g. {sorted(set(duplicates))[:_MAX_EXAMPLES]}. Keys come "
            f"from {hint!r} (+ {config.columns.turn!r} when present). Deduplicate the input, add a "
            f"{config.columns.turn!r} column, or choose a unique column with --key-col."
        )
    registry.seen.update(local)


def prepare(df: pl.DataFrame, config: ScoringConfig, registry: KeyRegistry | None = None) -> pl.DataFrame:
    """Validate one input chunk and return it with one row per judged answer (see module docstring)."""
    registry = registry if registry is not None else KeyRegistry()
    columns = config.columns
    shape = detect_shape(df, columns)
    _check_types(df, columns)
    _reserved_clash(df)

    judged = _judged_rows(df, config, shape)
    contexts = _resolve_context(df, config, judged)
    keys = _keys(df, config, judged, contexts, registry)
    _check_unique(keys, registry, config)

    # detect_shape guarantees at least one column, so gathering keeps the row count right.
    base = df.select(pl.all().gather([j.source_row for j in judged]))
    added: dict[str, pl.Series] = {}
    answers = pl.Series(S.ANSWER, [j.answer for j in judged], dtype=pl.String)
    questions = pl.Series(S.QUESTION, [j.question for j in judged], dtype=pl.String)
    if shape == "chat":
        # Chat rows get the judged text as ordinary columns, so the scored table shows what was judged.
        if columns.output not in df.columns:
            added[columns.output] = answers.alias(columns.output)
        if columns.input not in df.columns:
            added[columns.input] = questions.alias(columns.input)
    added[S.ROW_KEY] = pl.Series(S.ROW_KEY, keys, dtype=pl.String)
    if config.all_turns:
        added[S.ASSISTANT_TURN] = pl.Series(S.ASSISTANT_TURN, [j.assistant_turn for j in judged], dtype=pl.Int32)
    added[S.ANSWER] = answers
    added[S.QUESTION] = questions
    added[S.CONTEXT] = pl.Series(S.CONTEXT, contexts, dtype=pl.List(pl.String))
    return base.with_columns(list(added.values()))

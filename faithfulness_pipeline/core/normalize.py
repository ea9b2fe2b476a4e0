"""Input normalisation (SPEC §1, §2): any accepted input table -> one row per judged answer.

The result keeps every input column (passthrough, in order), adds ``row_key`` (and ``assistant_turn`` when
every turn is scored), the judged answer and question as columns when they came out of ``messages``, and
the internal ``_fp_answer`` / ``_fp_question`` / ``_fp_context`` columns the steps work on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ColumnMap, ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.core.keys import KeyRegistry, content_key, key_hashes
from faithfulness_pipeline.core.messages import (
    assistant_turn_indexes,
    message_text,
    question_before,
    tool_results_before,
)

_MAX_EXAMPLES = 5


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
    _check_key_types(schema, columns)


def _is_scalar_key(dtype: pl.DataType) -> bool:
    """Types whose text is a stable key: text, whole numbers, dates and times, booleans."""
    return (
        _is_text(dtype) or dtype.is_numeric() or dtype.is_temporal() or dtype == pl.Boolean or dtype == pl.Null
        or isinstance(dtype, pl.Categorical | pl.Enum)
    )


def _check_key_types(schema: pl.Schema, columns: ColumnMap) -> None:
    if columns.key is not None:
        keys = [(columns.key, "key column", "--key-col")]
    else:
        keys = [(columns.conversation_id, "conversation id", "--id-col"), (columns.turn, "turn", "--turn-col")]
    for name, role, flag in keys:
        if name in schema and not _is_scalar_key(schema[name]):
            raise InputError(
                f"column {name!r} ({role}, part of the row key) has type {schema[name]}, expected text or a whole "
                f"number. Cast it to string, or name another column with {flag}."
            )


def _reserved_clash(df: pl.DataFrame) -> None:
    reserved = set(S.SCORED_COLUMNS) | set(S.INTERNAL_COLUMNS) | {S.ASSISTANT_TURN}
    clash = [c for c in df.columns if c in reserved]
    if clash:
        raise InputError(
            f"input columns {clash} have the names of columns the scorer writes. Rename or drop them before "
            f"scoring (for example, a table that was already scored: select the original columns)."
        )


def _hook_passages(hook_value: Any, key_hint: str) -> list[str]:
    if hook_value is None:
        return []
    if isinstance(hook_value, str) or not isinstance(hook_value, Sequence):
        raise ConfigError(
            f"get_context hook returned {type(hook_value).__name__} for row {key_hint}; it must return a list "
            f"of strings"
        )
    return [str(p) for p in hook_value if p is not None and str(p).strip()]


@dataclass(slots=True)
class _FromMessages:
    """What Python had to read out of the messages: one entry per judged row."""

    source_rows: list[int]
    answers: list[str | None]
    questions: list[str | None]
    tool_context: list[list[str]]
    assistant_turns: list[int | None]


def _read_messages(df: pl.DataFrame, config: ScoringConfig, shape: str) -> _FromMessages | None:
    """Per-row message parsing; None for flat tables without messages (then everything stays vectorised)."""
    columns = config.columns
    if columns.messages not in df.columns:
        return None
    messages: list[Any] = df.get_column(columns.messages).to_list()
    out = _FromMessages([], [], [], [], [])

    def add(row: int, answer: str | None, question: str | None, tools: list[str], turn: int | None) -> None:
        out.source_rows.append(row)
        out.answers.append(answer)
        out.questions.append(question)
        out.tool_context.append(tools)
        out.assistant_turns.append(turn)

    for i, raw in enumerate(messages):
        msgs = [m for m in (raw or []) if isinstance(m, Mapping)]
        if shape == "flat":
            add(i, None, question_before(msgs, len(msgs)) if msgs else None, tool_results_before(msgs, len(msgs)),
                None)
            continue
        turns = assistant_turn_indexes(msgs)
        if not turns:
            # A conversation with no assistant answer is still a row: no claims, never dropped.
            add(i, None, None, tool_results_before(msgs, len(msgs)), None)
            continue
        chosen = list(enumerate(turns)) if config.all_turns else [(len(turns) - 1, turns[-1])]
        for ordinal, index in chosen:
            add(i, message_text(msgs[index]), question_before(msgs, index), tool_results_before(msgs, index),
                ordinal if config.all_turns else None)
    return out


def _clean_passages(df: pl.DataFrame, name: str) -> pl.Expr:
    """A context cell as passages: a string is one passage; null and blank passages are skipped."""
    col, dtype = pl.col(name), df.schema[name]
    if isinstance(dtype, pl.List):
        as_text = col.cast(pl.List(pl.String))
        # Most tables hold no null or blank passage: one scan that finds none spares a filtering copy
        # of every passage (about half the cost of preparing a chunk of typical RAG rows).
        passages = df.select(as_text.explode()).to_series()
        if not (passages.has_nulls() or passages.str.contains(r"^\s*$").any()):
            return as_text
        element = pl.element()
        return as_text.list.eval(pl.element().filter(element.is_not_null() & (element.str.strip_chars() != "")))
    if dtype == pl.Null:
        return pl.lit(None, dtype=pl.List(pl.String))
    text = col.cast(pl.String)
    return pl.when(text.str.strip_chars() != "").then(pl.concat_list(text)).otherwise(pl.lit([], pl.List(pl.String)))


def _hook_context(df: pl.DataFrame, config: ScoringConfig, source_rows: list[int]) -> pl.Series:
    assert config.context_hook is not None
    originals = df.to_dicts()
    out = []
    for row in source_rows:
        try:
            value = config.context_hook(originals[row])
        except Exception as exc:
            raise ConfigError(
                f"get_context hook failed on input row {row}: {type(exc).__name__}: {exc}"
            ) from exc
        out.append(_hook_passages(value, f"#{row}"))
    return pl.Series(S.CONTEXT, out, dtype=pl.List(pl.String))


def _key_expr(df: pl.DataFrame, config: ScoringConfig) -> pl.Expr | None:
    """The row key from id columns, or None when the table has none (then content hashes are used)."""
    columns = config.columns
    if columns.key is None and columns.conversation_id not in df.columns:
        if S.TRACE_ID in df.columns and S.SPAN_ID in df.columns:
            # rows made of spans: the LLM span is the answer, and its ids are what a trace viewer finds it by
            return pl.concat_str(pl.col(S.TRACE_ID).cast(pl.String), pl.lit("/"), pl.col(S.SPAN_ID).cast(pl.String))
        return None
    name = columns.key if columns.key is not None else columns.conversation_id
    key = pl.col(name).cast(pl.String)
    if columns.key is None and columns.turn in df.columns:
        turn = pl.col(columns.turn).cast(pl.String)
        key = pl.when(turn.is_null()).then(key).otherwise(pl.concat_str(key, pl.lit("#"), turn))
    if config.all_turns:
        turn = pl.col(S.ASSISTANT_TURN).cast(pl.String)
        key = pl.when(turn.is_null()).then(key).otherwise(pl.concat_str(key, pl.lit("@"), turn))
    return key


def _check_null_keys(frame: pl.DataFrame, config: ScoringConfig, source_rows: pl.Series) -> None:
    missing = source_rows.filter(frame.get_column(S.ROW_KEY).is_null()).to_list()
    if missing:
        name = config.columns.key or config.columns.conversation_id
        raise InputError(
            f"key column {name!r} is null in {len(missing)} row(s) (first rows: {missing[:_MAX_EXAMPLES]}). "
            f"Fill it, or choose another key column with --key-col."
        )


def _content_keys(frame: pl.DataFrame, registry: KeyRegistry) -> pl.Series:
    rows = frame.select(S.QUESTION, S.ANSWER, S.CONTEXT).iter_rows()
    keys = pl.Series(S.ROW_KEY, [content_key(q, a, c or []) for q, a, c in rows], dtype=pl.String)
    return registry.number_repeats(keys)


def _check_unique(keys: pl.Series, registry: KeyRegistry, config: ScoringConfig) -> None:
    duplicates = keys.filter(keys.is_duplicated()).unique().to_list()
    hashes = key_hashes(keys)
    duplicates += keys.filter(registry.seen.contains(hashes)).to_list()
    if duplicates:
        hint = config.columns.key or config.columns.conversation_id
        raise InputError(
            f"{len(duplicates)} duplicate row key(s), e.g. {sorted(set(duplicates))[:_MAX_EXAMPLES]}. Keys come "
            f"from {hint!r} (+ {config.columns.turn!r} when present). Deduplicate the input, add a "
            f"{config.columns.turn!r} column, or choose a unique column with --key-col."
        )
    registry.seen.add(hashes)


def derives_flat(schema: Mapping[str, pl.DataType], config: ScoringConfig) -> bool:
    """Whether the judged columns of a table with ``schema`` follow from its own columns alone (flat, no
    messages, no context hook, no static context): then :func:`with_internals` rebuilds them, and a stored
    table need not keep them twice."""
    columns = config.columns
    return (columns.output in schema and columns.messages not in schema and config.context_hook is None
            and config.static_context is None)


def _flat_context(df: pl.DataFrame, columns: ColumnMap) -> pl.Expr:
    """A flat row's passages: its context column's, cleaned; none without one."""
    empty = pl.lit([], dtype=pl.List(pl.String))
    if columns.context not in df.columns:
        return empty
    return _clean_passages(df, columns.context).fill_null(empty)


def without_internals(prepared: pl.DataFrame) -> pl.DataFrame:
    """A prepared flat table without the judged columns :func:`with_internals` rebuilds (they copy the
    answer, question and context columns)."""
    return prepared.drop(S.ANSWER, S.QUESTION, S.CONTEXT)


def with_internals(frame: pl.DataFrame, config: ScoringConfig) -> pl.DataFrame:
    """``frame`` (prepared, maybe stored :func:`without_internals`) with the judged answer, question and
    context columns: as they are when it has them, else rebuilt from its flat columns exactly as
    :func:`prepare` made them (only when :func:`derives_flat`)."""
    if S.ANSWER in frame.columns:
        return frame
    columns = config.columns
    question = (pl.col(columns.input).cast(pl.String) if columns.input in frame.columns
                else pl.lit(None, dtype=pl.String))
    return frame.with_columns(
        pl.col(columns.output).cast(pl.String).alias(S.ANSWER), question.alias(S.QUESTION),
        _flat_context(frame, columns).alias(S.CONTEXT),
    )


def prepare(df: pl.DataFrame, config: ScoringConfig, registry: KeyRegistry | None = None) -> pl.DataFrame:
    """Validate one input chunk and return it with one row per judged answer (see module docstring).

    Flat tables stay vectorised end to end; only message lists are read row by row in Python.
    """
    registry = registry if registry is not None else KeyRegistry()
    columns = config.columns
    shape = detect_shape(df, columns)
    _check_types(df, columns)
    _reserved_clash(df)

    parsed = _read_messages(df, config, shape)
    source_rows = pl.Series("_fp_source_row", parsed.source_rows if parsed else range(df.height), dtype=pl.Int64)
    # detect_shape guarantees at least one column, so gathering keeps the row count right.
    base = df if parsed is None or parsed.source_rows == list(range(df.height)) else df[source_rows]

    if shape == "flat":
        answer = base.get_column(columns.output).cast(pl.String).alias(S.ANSWER)
    else:
        assert parsed is not None
        answer = pl.Series(S.ANSWER, parsed.answers, dtype=pl.String)
    derived_question = pl.Series(S.QUESTION, parsed.questions if parsed else [None] * base.height, dtype=pl.String)
    if columns.input in df.columns and not (shape == "chat" and config.all_turns):
        question = base.get_column(columns.input).cast(pl.String).fill_null(derived_question).alias(S.QUESTION)
    else:
        question = derived_question

    added: list[pl.Series | pl.Expr] = []
    if shape == "chat":
        # Chat rows get the judged text as ordinary columns, so the scored table shows what was judged.
        if columns.output not in df.columns:
            added.append(answer.alias(columns.output))
        if columns.input not in df.columns:
            added.append(question.alias(columns.input))
    if config.all_turns:
        turns = parsed.assistant_turns if parsed else [None] * base.height
        added.append(pl.Series(S.ASSISTANT_TURN, turns, dtype=pl.Int32))
    added += [answer, question]
    frame = base.with_columns(added)

    frame = _with_context(frame, df, config, parsed, source_rows)

    key = _key_expr(df, config)
    if key is not None:
        frame = frame.with_columns(key.alias(S.ROW_KEY))
        _check_null_keys(frame, config, source_rows)
    else:
        frame = frame.with_columns(_content_keys(frame, registry))
    _check_unique(frame.get_column(S.ROW_KEY), registry, config)

    return _ordered(frame)


def _with_context(
    frame: pl.DataFrame, df: pl.DataFrame, config: ScoringConfig, parsed: _FromMessages | None, source_rows: pl.Series
) -> pl.DataFrame:
    """``frame`` (the rows of ``df`` to judge) with each row's passages."""
    columns = config.columns
    # SPEC §2: hook > static > the row's context column > tool results; none of them = empty context.
    empty = pl.lit([], dtype=pl.List(pl.String))
    if config.context_hook is not None:
        frame = frame.with_columns(_hook_context(df, config, source_rows.to_list()))
    elif config.static_context is not None:
        static = [p for p in config.static_context if p.strip()]
        frame = frame.with_columns(pl.lit(static, dtype=pl.List(pl.String)).alias(S.CONTEXT))
    else:
        tools = (
            pl.lit(pl.Series(S.CONTEXT, parsed.tool_context, dtype=pl.List(pl.String)))
            if parsed is not None
            else empty
        )
        if parsed is None:  # a flat table without messages: the rule with_internals rebuilds
            context = _flat_context(df, columns)
        elif columns.context in df.columns:
            frame = frame.with_columns(_clean_passages(df, columns.context).alias(S.CONTEXT))
            cell = pl.col(S.CONTEXT)
            # A null or empty context cell falls through to the conversation's tool results.
            context = pl.when(cell.list.len() > 0).then(cell).otherwise(tools).fill_null(empty)
        else:
            context = tools.fill_null(empty)
        frame = frame.with_columns(context.alias(S.CONTEXT))
    return frame


def _ordered(frame: pl.DataFrame) -> pl.DataFrame:
    """The passthrough columns with ``row_key`` before ``assistant_turn`` (or last), then the internal ones."""
    internal = [S.ANSWER, S.QUESTION, S.CONTEXT]
    public = [c for c in frame.columns if c not in internal and c != S.ROW_KEY]
    at = public.index(S.ASSISTANT_TURN) if S.ASSISTANT_TURN in public else len(public)
    ordered = [*public[:at], S.ROW_KEY, *public[at:], *internal]
    return frame.select(ordered)

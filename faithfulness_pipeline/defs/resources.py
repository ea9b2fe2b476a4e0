"""Dagster resources: the judge, the scoring settings, the landing location and the warehouse.

Every field is described, so the Dagster UI (Deployment > Resources) documents them. Secrets come only
from the environment: set ``api_key`` with ``dg.EnvVar("OPENAI_API_KEY")`` (``definitions.py`` does when
``FP_JUDGE_API_KEY_ENV`` names the variable); Dagster then shows the variable's name, never its value.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field

from faithfulness_pipeline.core.config import ColumnMap, ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.io import atomic_path
from faithfulness_pipeline.core.judge import Judge
from faithfulness_pipeline.judges.factory import JudgeOptions, make_judge


class JudgeResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """The LLM judge. No ``model`` = the offline lexical judge (deterministic, no network, no key)."""

    model: str | None = Field(
        default=None,
        description="litellm model name (openai/gpt-4o-mini, anthropic/..., ollama/...). "
        "Unset: the offline lexical baseline judge.",
    )
    api_base: str | None = Field(default=None, description="Base URL of an OpenAI-compatible or self-hosted server.")
    api_key_env: str | None = Field(
        default=None,
        description="Name of the environment variable that holds the API key (default: the provider's usual one, "
        "e.g. OPENAI_API_KEY).",
    )
    api_key: str | None = Field(
        default=None,
        description="The API key itself. Set it only with dg.EnvVar('NAME') so it never appears in config or logs.",
    )
    max_concurrency: int | None = Field(default=None, description="Requests in flight at most, per LLM step.")
    rpm: int | None = Field(
        default=None,
        description="Requests per minute at most, per LLM step. Several steps may run at once (the 'llm_judge' "
        "pool limit in dagster.yaml): give each step the provider's limit divided by the pool limit.",
    )
    tpm: int | None = Field(default=None, description="Tokens per minute at most, per LLM step (see rpm).")
    timeout_s: float | None = Field(default=None, description="Timeout of one request, in seconds.")
    pack_tokens: int | None = Field(default=None, description="Prompt-token budget of one packed request.")
    store_path: str | None = Field(
        default=None,
        description="SQLite result store that makes re-runs pay only for what is missing. "
        "Default: <warehouse root>/_judge_store.sqlite.",
    )
    refresh: bool = Field(default=False, description="Ignore stored results (new results are still stored).")
    backoff_base_s: float | None = Field(
        default=None,
        description="First back-off after a failed request, and after a 429 without Retry-After, in seconds "
        "(default 1; it doubles per consecutive failure).",
    )
    backoff_max_s: float | None = Field(default=None, description="Longest back-off, in seconds (default 60).")

    def options(self, default_store: str | None = None) -> JudgeOptions:
        """The judge's options; the default store serves the litellm judge (the offline one needs no store
        unless one is set)."""
        return JudgeOptions(
            model=self.model or None,
            api_base=self.api_base,
            api_key_env=self.api_key_env,
            max_concurrency=self.max_concurrency,
            rpm=self.rpm,
            tpm=self.tpm,
            timeout_s=self.timeout_s,
            pack_tokens=self.pack_tokens,
            store_path=(self.store_path or default_store) if self.model else self.store_path,
            refresh=self.refresh,
            backoff_base_s=self.backoff_base_s,
            backoff_max_s=self.backoff_max_s,
        )

    def make(self, default_store: str | None = None) -> Judge:
        """A fresh judge for one step (close it with ``await judge.aclose()`` at the end of the step)."""
        return make_judge(self.options(default_store), api_key=self.api_key or None)


def judge_identity(model: str | None) -> tuple[str, str]:
    """(judge model, prompt version) without building a judge or importing litellm: for code versions."""
    if not model:
        from faithfulness_pipeline.judges.offline import OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION

        return OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION
    from faithfulness_pipeline.core.prompts import PROMPT_VERSION

    return model, PROMPT_VERSION


class ScoringResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """How rows are read and scored, and the thresholds of the checks and BI aggregates."""

    scale: float = Field(default=1.0, description="Maximum score (Mastra options.scale); scores are ratio x scale.")
    zero_claims: str = Field(
        default="zero", description="Answers without claims score 0 like Mastra ('zero') or get null ('null')."
    )
    all_turns: bool = Field(default=False, description="Score every assistant turn of a chat, not only the last.")
    output_column: str = Field(default="output", description="Answer column (flat shape).")
    input_column: str = Field(default="input", description="Question column (optional).")
    context_column: str = Field(default="context", description="Context column: list of passages or one string.")
    messages_column: str = Field(default="messages", description="OpenAI chat messages column (chat shape).")
    id_column: str = Field(default="conversation_id", description="Conversation id: the row key (+ turn).")
    turn_column: str = Field(default="turn", description="Turn column appended to the key when present.")
    key_column: str | None = Field(default=None, description="Explicit key column; overrides id (+ turn).")
    model_column: str = Field(default="model", description="Column the BI aggregates group by (the answering model).")
    hallucination_threshold: float = Field(
        default=0.5,
        description="BI aggregates count answers with hallucination_score above this (in score units, 0..scale).",
    )
    max_error_rate: float = Field(
        default=0.05, description="The error-rate check fails when more than this share of rows has status 'error'."
    )

    def config(self) -> ScoringConfig:
        if self.zero_claims not in ("zero", "null"):
            raise ConfigError(f"zero_claims must be 'zero' or 'null', got {self.zero_claims!r}")
        if not 0 <= self.max_error_rate <= 1:
            raise ConfigError(f"max_error_rate must be within [0, 1], got {self.max_error_rate!r}")
        columns = ColumnMap(
            output=self.output_column,
            input=self.input_column,
            context=self.context_column,
            messages=self.messages_column,
            conversation_id=self.id_column,
            turn=self.turn_column,
            key=self.key_column,
        )
        return ScoringConfig(
            columns=columns,
            scale=self.scale,
            zero_claims="null" if self.zero_claims == "null" else "zero",
            all_turns=self.all_turns,
        )


class LandingResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where raw conversations land: Parquet files of either input shape."""

    path: str = Field(
        default="sample_data",
        description="A Parquet file, a folder (every *.parquet below it) or a glob; local or an object-store URI. "
        "Relative paths resolve from the working directory.",
    )
    timestamp_column: str = Field(
        default="created_at",
        description="Column whose UTC date picks a row's daily partition (datetime, date or ISO-8601 text).",
    )
    required_columns: list[str] = Field(
        default_factory=list,
        description="Columns every landing file must have (the input_schema check fails otherwise).",
    )
    undated_day: str | None = Field(
        default=None,
        description="Day (YYYY-MM-DD) for rows without a timestamp. Default: the UTC date the file arrived "
        "(its modification time).",
    )

    def undated(self) -> date | None:
        if not self.undated_day:
            return None
        try:
            return date.fromisoformat(self.undated_day)
        except ValueError as exc:
            raise ConfigError(f"undated_day must be YYYY-MM-DD, got {self.undated_day!r}") from exc


def _one_component(value: str, what: str) -> None:
    if any(sep in value for sep in ("/", "\\", "\0")) or value in (".", ".."):
        raise ConfigError(f"{what} {value!r} would not be one folder name inside the warehouse")


def _inside(root: Path, relative: str, what: str) -> Path:
    """``root / relative``, refused when a key or name (``..``, an absolute path) would lead outside ``root``.

    Lexical on purpose: a table folder that is a symlink to another disk stays allowed."""
    path = Path(os.path.normpath(root / relative))
    if "\\" in relative or "\0" in relative or not path.is_relative_to(root) or path == root:
        raise ConfigError(f"{what} {relative!r} leads outside the warehouse root {str(root)!r}")
    return path


class WarehouseResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Where tables are written: ``<root>/<table>/ds=YYYY-MM-DD/data.parquet``, one file per day."""

    root: str = Field(
        default="warehouse",
        description="Warehouse folder (local or mounted). Relative paths resolve from the working directory.",
    )
    duckdb_path: str | None = Field(
        default=None, description="DuckDB file with the BI views. Default: <root>/answer_quality.duckdb."
    )

    def root_path(self) -> Path:
        return Path(self.root).expanduser().resolve()

    def duckdb_file(self) -> Path:
        if self.duckdb_path:
            return Path(self.duckdb_path).expanduser().resolve()
        return self.root_path() / "answer_quality.duckdb"

    def judge_store(self) -> str:
        return str(self.root_path() / "_judge_store.sqlite")

    def table_dir(self, table: str) -> Path:
        return _inside(self.root_path(), table, "table name")

    def partition_file(self, table: str, partition_key: str | None) -> Path:
        base = self.table_dir(table)
        if partition_key:
            _one_component(partition_key, "partition key")
            base = _inside(base, f"ds={partition_key}", "partition key")
        return base / "data.parquet"

    def write(self, table: str, partition_key: str | None, frame: pl.DataFrame) -> Path:
        """Replace exactly one partition: a complete new file swapped in, then any stray files removed."""
        target = self.partition_file(table, partition_key)
        with atomic_path(target, suffix=".parquet") as tmp:
            frame.write_parquet(tmp, compression="zstd", statistics=True)
        for other in target.parent.glob("*.parquet"):
            # Files another writer (or an older layout) left in this partition would duplicate its rows.
            if other.name != target.name:
                other.unlink(missing_ok=True)
        return target

    def read(self, table: str, partition_keys: list[str] | None) -> pl.DataFrame:
        keys: list[str | None] = list(partition_keys) if partition_keys else [None]
        frames = []
        for key in keys:
            path = self.partition_file(table, key)
            if not path.exists():
                raise FileNotFoundError(
                    f"{table} has no data for partition {key or '(unpartitioned)'} at {path}: materialise it first"
                )
            frames.append(pl.read_parquet(path))
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")

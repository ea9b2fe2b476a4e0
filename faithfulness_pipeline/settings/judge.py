"""The judge's settings: declared once here; the CLI flags, the Dagster resource fields and the ``FP_JUDGE_*``
variables are derived from these fields (``faithfulness_pipeline.settings.derive``), and so is the table
of docs/settings.md.

A field's description is what the CLI's ``--help``, the Dagster UI and docs/settings.md show. ``cli`` in a field's
``json_schema_extra`` names its flag where the flag is not ``--`` and the field name with dashes.
"""

from __future__ import annotations

import os
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from faithfulness_pipeline.settings.fields import flag, no_flag
from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG

#: Prompt tokens per request, instructions included. Chosen by measurement on typical RAG rows (3-6
#: sentence answers, 3-8 passages of 60-150 words; see BENCHMARKS.md and bench/overhead.py): ~8 answers'
#: verdicts a request. Fewer, bigger requests keep the client's own CPU per answer low; bigger still
#: lengthens the requests so much that short steps end on half-empty waves. A model's window caps it.
DEFAULT_PACK_TOKENS: Final = 16000
#: Items per request at most, but on a server of one's own (below). Binds for claim extraction (answers are
#: short): 32 answers' sentence numbers make a reply of ~400 tokens.
DEFAULT_MAX_ITEMS_PER_PACK: Final = 32
#: Items per request at most on a server of one's own that says what it is (llama.cpp, vLLM and Ollama
#: publish their window, ``judging.llm.server_limits``): one answer per request. On a real small model
#: (Qwen2.5-Coder-1.5B; bench/judge_quality.py, BENCHMARKS.md) packed verdicts flipped 3 of 20 claims that
#: two packed runs never flipped, and flagged no answer at all; packed extraction dropped sentences.
SELF_HOSTED_MAX_ITEMS_PER_PACK: Final = 1
#: For models litellm has no card for and whose server tells none (proxies): a window most of them have.
DEFAULT_CONTEXT_WINDOW: Final = 8192
DEFAULT_MAX_OUTPUT_TOKENS: Final = 4096
#: A streamed request's bound in all. Generous: a CPU server measured at 386 s for one pack's 652-token reply
#: (Qwen2.5-Coder-1.5B on 2 cores, 4 slots shared by 16 requests in flight) keeps up to three packs queued
#: ahead of a request, about 26 minutes before its reply is done; an hour leaves room for that and still
#: frees a slot from a server that trickles a token now and then, or hangs before its first.
DEFAULT_STREAM_MAX_S: Final = 3600.0


class JudgeSettings(BaseModel):
    """Which judge scores, how it is limited, what it costs and where its results are kept."""

    model_config = SETTINGS_CONFIG

    model: str | None = Field(
        default=None,
        description="litellm model (openai/gpt-4o-mini, anthropic/..., ollama/...); unset: the offline baseline judge",
    )
    api_base: str | None = Field(default=None, description="base URL of an OpenAI-compatible or self-hosted server")
    api_key_env: str | None = Field(
        default=None,
        description="environment variable holding the API key (default: the provider's usual one, e.g. "
        "OPENAI_API_KEY; none for local providers such as ollama)",
    )
    max_concurrency: int = Field(default=16, ge=1, description="requests in flight at most")
    rpm: int | None = Field(default=None, ge=1, description="requests per minute at most")
    tpm: int | None = Field(default=None, ge=1, description="tokens per minute at most (prompt + completion)")
    timeout_s: float = Field(
        default=60.0, gt=0, allow_inf_nan=False,
        description="seconds one request may take before it is retried; a streamed one (stream) may take longer "
        "while its reply keeps coming: for it, the seconds without a new piece once the server has begun its reply, "
        "the wait for the first piece included (on llama.cpp, a silence while its /slots says the server is "
        "working is waited out, up to stream_max_s)",
        json_schema_extra=flag("--timeout"),
    )
    stream: Literal["auto", "yes", "no"] = Field(
        default="auto", description="whether replies are streamed, so that a slow server's reply is waited for as "
        "long as it keeps coming and progress shows its tokens arriving. auto: streamed where litellm cannot vouch "
        "for the endpoint (an api_base, or a model litellm does not know: a server of one's own such as llama.cpp, "
        "vLLM or Ollama, or a proxy), whole at a vendor's own API",
    )
    stream_max_s: float = Field(
        default=DEFAULT_STREAM_MAX_S, gt=0, allow_inf_nan=False,
        description="seconds a streamed request may take in all, the wait for its first token (the server's "
        "queue, its reading of the prompt) included, before it is retried like a timeout",
        json_schema_extra=flag("--stream-max"),
    )
    max_retries: int = Field(default=6, ge=0, description="re-sends of an item after a failed request or reply")
    backoff_base_s: float = Field(
        default=1.0, ge=0, allow_inf_nan=False,
        description="first retry pause after a failed request or a 429 without Retry-After, "
        "in seconds; it doubles per consecutive failure", json_schema_extra=flag("--backoff-base"),
    )
    backoff_max_s: float = Field(default=60.0, ge=0, allow_inf_nan=False,
                                 description="longest retry pause, in seconds",
                                 json_schema_extra=flag("--backoff-max"))
    retry_after_max_s: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="longest Retry-After of a 429 that is waited out, in seconds (default: backoff_max_s); a "
        "longer one (a daily or hourly limit) fails the requests it holds back at once, naming the wait",
        json_schema_extra=flag("--retry-after-max"),
    )
    pack_tokens: int = Field(default=DEFAULT_PACK_TOKENS, ge=256, description="prompt-token budget of one request")
    max_items_per_pack: int | None = Field(
        default=None, ge=1, description=f"answers per request at most (default: {SELF_HOSTED_MAX_ITEMS_PER_PACK}, one "
        "answer per request, on a server of one's own that says what it is (llama.cpp, vLLM, Ollama), where packing "
        "was measured to cost a small model its agreement with people; elsewhere "
        f"{DEFAULT_MAX_ITEMS_PER_PACK}. faithfulness-pipeline packing-study measures yours)",
    )
    context_window: int | None = Field(
        default=None, ge=512, description="the model's window per request in tokens (default: litellm's model "
        "card, else what the api_base server reports of its own: llama.cpp per slot, vLLM, Ollama; else "
        f"{DEFAULT_CONTEXT_WINDOW})",
    )
    max_output_tokens: int | None = Field(
        default=None, ge=64, description="the model's output limit in tokens (default: litellm's model card, "
        f"else {DEFAULT_MAX_OUTPUT_TOKENS})",
    )
    input_cost_per_token: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="USD per prompt token (default: litellm's price map; unknown: null cost)"
    )
    output_cost_per_token: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="USD per completion token (default: litellm's price map; unknown: null cost)"
    )
    cached_input_cost_per_token: float | None = Field(
        default=None, ge=0, allow_inf_nan=False,
        description="USD per prompt token the provider served from its prompt cache (default: litellm's price "
        "map, unless input_cost_per_token is set; unknown: input_cost_per_token)"
    )
    max_cost_usd: float | None = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="spend cap in USD: per run (CLI, Python), per partition step (Dagster). Each request's cost "
        "is reserved before it leaves (its worst case; in batch mode its estimate, at batch prices); once the next "
        "would cross the cap nothing more is sent, and the rows left get status skipped and null scores (the CLI "
        "exits 3). Needs the model's price",
    )
    temperature: float = Field(default=0.0, ge=0, le=2, allow_inf_nan=False, description="sampling temperature")
    seed: int | None = Field(default=0, description="sampling seed, where the provider supports one")
    use_json_schema: Literal["auto", "yes", "no"] = Field(
        default="auto", description="JSON-schema response_format. auto: with an api_base, or a model litellm does "
        "not know, the schema, stepping down to JSON mode, then to the prompt alone, if the endpoint refuses it "
        "(once a run); else where litellm says the model supports it"
    )
    store: str | None = Field(
        default=None,
        description="result store that makes runs resumable and re-runs free: a SQLite file path, or a "
        "postgresql:// URL shared by workers on several machines (Dagster default: "
        "<warehouse>/_judge_store.sqlite for the litellm judge)",
    )
    refresh: bool = Field(default=False, description="ignore stored results (new results are still stored)")
    store_lease_s: float = Field(
        default=60.0, gt=0, description="seconds an item another worker sharing the store is asking for stays "
        "reserved to it (renewed while it works); then a waiting worker takes it over",
        json_schema_extra=flag("--store-lease"),
    )
    mode: Literal["interactive", "batch"] = Field(
        default="interactive",
        description="interactive: requests as the run goes; batch: the provider's Batch API (OpenAI's and "
        "compatible ones: half price, results within 24 h; needs a result store, which holds the batches)",
    )
    batch_poll_s: float = Field(
        default=30.0, gt=0, description="first pause between two looks at a running batch, in seconds; it grows "
        "by half each time, to 10 minutes at most", json_schema_extra=flag("--batch-poll"),
    )
    batch_max_wait_s: float = Field(
        default=86400.0, gt=0, description="how long a run waits for its batches, in seconds (default: the "
        "provider's 24 h window); then it stops, leaving them to a later run",
        json_schema_extra=flag("--batch-max-wait"),
    )
    shards: int = Field(
        default=1, ge=1, le=256,
        description="how many steps judge one day in Dagster, each in the llm_judge pool (rows go to a shard by a "
        "hash of their question and answer, so identical contents share one); the executor runs them side by "
        "side within the pool limit, and rows, scores and billing are those of one step",
        json_schema_extra=no_flag(),
    )
    batch_fallback: Literal["batch", "interactive"] = Field(
        default="batch", description="how items whose batch lines failed or did not validate are asked again: in a "
        "follow-up batch, or interactively",
    )

    @classmethod
    def from_env(cls, **given: Any) -> JudgeSettings:
        """The fields ``given``, then the ``FP_JUDGE_*`` variables set in this process's environment (as the CLI
        reads them), then the defaults: a notebook or script that names its model still takes the server
        address and key variable its shell or a wrapper sets (``FP_JUDGE_API_BASE``, ``FP_JUDGE_API_KEY_ENV``).
        A bad value is a ConfigError naming its variable."""
        from faithfulness_pipeline.settings.derive import from_env  # derive imports this module

        return from_env(cls, os.environ, given)

"""Settings of the litellm judge and what it learns of its model: window, output limit, prices, tokenizer.

Separate from the judge because it is what the judge is told and what it looks up before any request:
plain settings (the CLI options and the Dagster resource map onto them) and a few lookups in litellm's
model map, holding no state. litellm is imported inside the functions only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from faithfulness_pipeline.core.packing import Count

#: Prompt tokens per request, instructions included. Chosen by measurement on typical RAG rows (3-6
#: sentence answers, 3-8 passages of 60-150 words; see BENCHMARKS.md and bench/overhead.py): ~8 answers'
#: verdicts a request. Each request costs the client ~6 ms of CPU inside litellm, so fewer, bigger
#: requests are what keeps the client under 2 ms per answer; bigger still (32k) lengthens the requests
#: so much that short steps end on half-empty waves. A model's window caps it anyway (8k-window models
#: get packs of up to ~7k tokens).
DEFAULT_PACK_TOKENS: Final = 16000
#: Items per request at most. Binds for claim extraction (answers are short): 32 answers' sentence
#: numbers make a reply of ~400 tokens, a request of ~1 s at 2 ms per token.
DEFAULT_MAX_ITEMS_PER_PACK: Final = 32
#: For models litellm has no card for (local and proxy models): a window most of them have.
DEFAULT_CONTEXT_WINDOW: Final = 8192
DEFAULT_MAX_OUTPUT_TOKENS: Final = 4096


class LiteLLMJudgeConfig(BaseModel):
    """Settings of the litellm judge. The CLI options and the Dagster resource map onto these fields."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(description="litellm model name: openai/gpt-4o-mini, anthropic/..., ollama/...")
    api_base: str | None = Field(default=None, description="base URL of an OpenAI-compatible or self-hosted server")
    api_key_env: str | None = Field(
        default=None,
        description="environment variable holding the API key (default: the provider's usual one, e.g. "
        "OPENAI_API_KEY; none for local providers such as ollama)",
    )
    max_concurrency: int = Field(default=16, ge=1, description="requests in flight at most")
    rpm: int | None = Field(default=None, ge=1, description="requests per minute at most")
    tpm: int | None = Field(default=None, ge=1, description="tokens per minute at most (prompt + completion)")
    timeout_s: float = Field(default=60.0, gt=0, description="timeout of one request, in seconds")
    max_retries: int = Field(default=6, ge=0, description="re-sends of an item after a failed request or reply")
    pack_tokens: int = Field(default=DEFAULT_PACK_TOKENS, ge=256, description="prompt-token budget of one request")
    max_items_per_pack: int = Field(default=DEFAULT_MAX_ITEMS_PER_PACK, ge=1, description="items per request at most")
    seed: int | None = Field(default=0, description="sampling seed, where the provider supports one")
    temperature: float = Field(default=0.0, ge=0, description="sampling temperature")
    input_cost_per_token: float | None = Field(default=None, ge=0, description="USD per prompt token (override)")
    output_cost_per_token: float | None = Field(default=None, ge=0, description="USD per completion token (override)")
    context_window: int | None = Field(default=None, ge=512, description="the model's input window, in tokens")
    max_output_tokens: int | None = Field(default=None, ge=64, description="the model's output limit, in tokens")
    use_json_schema: Literal["auto"] | bool = Field(
        default="auto", description="JSON-schema response_format; auto = where litellm says the model supports it"
    )
    backoff_base_s: float = Field(default=1.0, ge=0, description="first back-off after a failed request, seconds")
    backoff_max_s: float = Field(default=60.0, ge=0, description="longest back-off, seconds")



# ------------------------------------------------------------------------------------- the model


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What the judge knows of its model, from litellm's model map or the config overrides."""

    context_window: int
    max_output_tokens: int
    json_schema: bool
    input_cost_per_token: float | None
    output_cost_per_token: float | None
    notes: tuple[str, ...] = ()

    @property
    def priced(self) -> bool:
        return self.input_cost_per_token is not None and self.output_cost_per_token is not None

    def cost(self, prompt_tokens: int, completion_tokens: int) -> tuple[float, float] | None:
        if self.input_cost_per_token is None or self.output_cost_per_token is None:
            return None
        return prompt_tokens * self.input_cost_per_token, completion_tokens * self.output_cost_per_token


def lenient(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # litellm raises assorted types for "unknown model"
        return None


#: What litellm reads when it is first imported, and our defaults: litellm fetches nothing on its own
#: (its price map, model catalogues, tokenizers); requests still go wherever the judge is pointed.
OFFLINE_DEFAULTS: Final = {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def import_litellm() -> Any:
    """``import litellm`` in offline mode unless the environment already says otherwise.

    Left alone, litellm downloads its price map from GitHub while it is imported: seconds on a good
    day, a hang where a warehouse network drops packets, and a connection nobody asked for. Offline, it
    prices calls from the map bundled with the installed (pinned) litellm. To let it fetch, set
    ``LITELLM_OFFLINE_MODE=false`` and ``LITELLM_LOCAL_MODEL_COST_MAP=False`` before the run.
    """
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)
    import litellm

    return litellm


def model_card(config: LiteLLMJudgeConfig) -> ModelCard:
    """Window, output limit, schema support and prices of the model (config overrides win)."""
    litellm = import_litellm()

    notes: list[str] = []
    info = lenient(lambda: litellm.get_model_info(config.model)) or {}
    window = config.context_window or info.get("max_input_tokens") or info.get("max_tokens")
    if not window:
        window = DEFAULT_CONTEXT_WINDOW
        notes.append(
            f"context window of {config.model} unknown to litellm: assuming {window} tokens "
            "(set context_window to change it)"
        )
    max_out = config.max_output_tokens or info.get("max_output_tokens") or DEFAULT_MAX_OUTPUT_TOKENS
    if config.use_json_schema == "auto":
        schema = bool(lenient(lambda: litellm.supports_response_schema(model=config.model)))
    else:
        schema = bool(config.use_json_schema)
    in_cost, out_cost = config.input_cost_per_token, config.output_cost_per_token
    if in_cost is None or out_cost is None:
        known = lenient(lambda: litellm.cost_per_token(model=config.model, prompt_tokens=1, completion_tokens=1))
        if known is not None:
            in_cost = float(known[0]) if in_cost is None else in_cost
            out_cost = float(known[1]) if out_cost is None else out_cost
        else:
            notes.append(
                f"no price known for {config.model}: cost_usd is null "
                "(set input_cost_per_token and output_cost_per_token to price it)"
            )
    return ModelCard(
        context_window=int(window),
        max_output_tokens=int(max_out),
        json_schema=schema,
        input_cost_per_token=in_cost,
        output_cost_per_token=out_cost,
        notes=tuple(notes),
    )


def token_counter(model: str) -> Count:
    """litellm's offline token count for ``model``, never a tokenizer download (tiktoken instead)."""
    litellm = import_litellm()

    name = model
    try:
        from litellm.utils import huggingface_tokenizer_kind

        # Llama and Cohere tokenizers would be fetched from the Hugging Face hub: approximate instead.
        if huggingface_tokenizer_kind(model) in ("llama2", "llama3", "cohere"):
            name = "gpt-4o"
    except ImportError:
        pass

    encoding = _tiktoken_encoding(name)
    if encoding is not None:
        # The encoding litellm's token_counter would use, called directly: token_counter spends
        # 0.1-0.3 ms per call resolving the model before it counts, and the judge counts every item.
        def count_directly(text: str) -> int:
            return len(encoding.encode(text, disallowed_special=()))

        return count_directly

    def count(text: str) -> int:
        return int(litellm.token_counter(model=name, text=text))

    return count


def _tiktoken_encoding(model: str) -> Any:
    """litellm's tiktoken encoding for ``model``, or None when litellm counts it another way."""
    try:
        from litellm.litellm_core_utils.token_counter import openai_tokenizer_encoding
        from litellm.utils import select_tokenizer

        if select_tokenizer(model)["type"] != "openai_tokenizer":
            return None
        encoding = openai_tokenizer_encoding(model)
    except Exception:  # a litellm without these helpers: its token_counter still works
        return None
    return encoding if callable(getattr(encoding, "encode", None)) else None

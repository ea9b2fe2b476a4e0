"""The product's judge: every LLM call goes through litellm, packed, limited, retried, stored and costed.

This is the only module that imports litellm, and only inside functions (``import litellm`` costs
seconds; importing this module must not).

Per step (claims, then verdicts) a call to the judge:

1. answers what needs no request (empty answers, zero claims, empty context) and what the result
   store already holds (``refresh`` skips the lookups, never the writes). The pipeline first asks for
   whole columns of stored results (:meth:`LiteLLMJudge.stored_claims`, ``stored_verdicts``), so that a
   warm re-run never builds per-item objects; only what is not stored comes through the port;
2. counts every remaining item's tokens with litellm's offline tokenizer and packs the items into
   requests under ``pack_tokens`` (truncating the passages of an item only when it alone exceeds the
   model's window, and saying so on its result). Packs leave while later items are still counted
   (:meth:`_run`);
3. sends the packs concurrently through one shared :class:`RequestLimiter` (in-flight cap, RPM, TPM,
   429 pauses), with litellm's own retries off so that every 429 reaches the limiter;
4. validates each reply item by item, stores every valid item at once, and re-asks only for the items
   that failed, in smaller packs, until ``max_retries``; after that the item gets an error result.

Every item gets exactly one result. The usage of each request (tokens, a fractional call, cost), failed
attempts included, is shared out over the items that rode in it. The API key is read from the
environment once, handed to litellm and to nothing else, and scrubbed from every error text.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import gc
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, Generic, Literal, TypeVar

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from faithfulness_pipeline.core import prompts
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.judge import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    JudgeStats,
    ProgressCallback,
    Usage,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.core.keys import is_blank
from faithfulness_pipeline.core.packing import (
    REPLY_SLACK_TOKENS,
    Count,
    Entry,
    Limits,
    Pack,
    Packer,
    extract_output_bound,
    halves,
    largest_remainder,
    pack_entries,
    rough_sentences,
    truncate_passages,
    verdict_output_bound,
)
from faithfulness_pipeline.core.parsing import ParsedReply, parse_extract_reply, parse_verdict_reply
from faithfulness_pipeline.judges.limits import Clock, RequestLimiter, Sleep, retry_after_from_headers
from faithfulness_pipeline.judges.store import (
    KeyMaker,
    ResultStore,
    decode_claims,
    decode_claims_column,
    decode_verdicts,
    decode_verdicts_column,
    encode_claims,
    encode_verdicts,
    extract_content,
    pair_content,
)

log = logging.getLogger(__name__)

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

NO_CONTEXT_REASON: Final = "No context was provided to check this claim against."
_ERROR_CHARS: Final = 300


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
    store_path: Path | None = Field(default=None, description="SQLite result store file; None = no store")
    refresh: bool = Field(default=False, description="ignore stored results (new results are still stored)")
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


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """What a run would send, from :meth:`LiteLLMJudge.estimate` (which calls nothing)."""

    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    notes: list[str] = field(default_factory=list)
    cached_items: int = 0  # step results already in the store: they cost nothing


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


def _lenient(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # litellm raises assorted types for "unknown model"
        return None


def model_card(config: LiteLLMJudgeConfig) -> ModelCard:
    """Window, output limit, schema support and prices of the model (config overrides win)."""
    import litellm

    notes: list[str] = []
    info = _lenient(lambda: litellm.get_model_info(config.model)) or {}
    window = config.context_window or info.get("max_input_tokens") or info.get("max_tokens")
    if not window:
        window = DEFAULT_CONTEXT_WINDOW
        notes.append(
            f"context window of {config.model} unknown to litellm: assuming {window} tokens "
            "(set context_window to change it)"
        )
    max_out = config.max_output_tokens or info.get("max_output_tokens") or DEFAULT_MAX_OUTPUT_TOKENS
    if config.use_json_schema == "auto":
        schema = bool(_lenient(lambda: litellm.supports_response_schema(model=config.model)))
    else:
        schema = bool(config.use_json_schema)
    in_cost, out_cost = config.input_cost_per_token, config.output_cost_per_token
    if in_cost is None or out_cost is None:
        known = _lenient(lambda: litellm.cost_per_token(model=config.model, prompt_tokens=1, completion_tokens=1))
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
    import litellm

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


# ----------------------------------------------------------------------------------------- secrets


class MissingAPIKeyError(ConfigError, ValueError):
    """The environment variable that should hold the API key is not set."""


#: Providers that serve without a key (local servers).
_KEYLESS: Final = frozenset(
    {"ollama", "ollama_chat", "lm_studio", "hosted_vllm", "vllm", "llamafile", "xinference", "oobabooga"}
)
_KEY_ENV: Final[Mapping[str, str]] = {
    "openai": "OPENAI_API_KEY",
    "text-completion-openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "azure": "AZURE_API_KEY",
    "gemini": "GEMINI_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "cohere": "COHERE_API_KEY",
    "cohere_chat": "COHERE_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY",
    "fireworks_ai": "FIREWORKS_AI_API_KEY",
    "xai": "XAI_API_KEY",
    "perplexity": "PERPLEXITYAI_API_KEY",
}


def _missing(name: str, model: str) -> MissingAPIKeyError:
    return MissingAPIKeyError(
        f"the API key for {model} is read from the environment variable {name}, which is not set or empty: "
        f"set {name}, or name another variable with --api-key-env (api_key_env)"
    )


def resolve_api_key(model: str, api_key_env: str | None) -> tuple[str | None, str | None]:
    """``(variable name, key)`` for ``model``; ``(None, None)`` when it needs none or litellm finds it.

    Raises :class:`MissingAPIKeyError` naming the variable when the key is not in the environment.
    """
    if api_key_env is not None:
        name = api_key_env.strip()
        if not name:
            raise ConfigError("api_key_env is empty: give the name of an environment variable")
        value = os.environ.get(name)
        if not value:
            raise _missing(name, model)
        return name, value
    import litellm

    try:
        provider = str(litellm.get_llm_provider(model)[1])
    except Exception as exc:
        raise ConfigError(
            f"litellm does not know which provider serves {model!r}: use a provider prefix such as "
            f"openai/, anthropic/ or ollama/ ({type(exc).__name__})"
        ) from None
    if provider in _KEYLESS:
        return None, None
    default = _KEY_ENV.get(provider)
    if default is not None:
        value = os.environ.get(default)
        if not value:
            raise _missing(default, model)
        return default, value
    check = _lenient(lambda: litellm.validate_environment(model=model)) or {}
    missing = [str(k) for k in check.get("missing_keys") or []]
    if missing and not check.get("keys_in_environment"):
        raise _missing(" and ".join(missing), model)
    guess = f"{provider.upper()}_API_KEY"
    value = os.environ.get(guess)
    return (guess, value) if value else (None, None)


class Redactor:
    """Removes a secret, and any 8-character piece of it, from text meant for humans or storage."""

    MASK: Final = "[REDACTED]"

    def __init__(self, secret: str | None) -> None:
        self._secret = secret or ""
        n = len(self._secret)
        self._pieces = {self._secret[i : i + 8] for i in range(n - 7)} if n >= 8 else set()

    def __call__(self, text: str) -> str:
        if not self._secret:
            return text
        text = text.replace(self._secret, self.MASK)
        for piece in self._pieces:
            if piece in text:
                text = text.replace(piece, self.MASK)
        return text


# ----------------------------------------------------------------------------------- step plans

R = TypeVar("R", ExtractResult, VerdictResult)
T = TypeVar("T")


class _Plan(Generic[R]):
    """One step's items of one call: their packing entries, prompts, parsing and results."""

    step: ClassVar[str]

    def __init__(self, judge: LiteLLMJudge, indices: Sequence[int], keys: Mapping[int, bytes]) -> None:
        self.judge: LiteLLMJudge = judge
        self.indices: list[int] = list(indices)
        self.keys: Mapping[int, bytes] = keys
        self.entries: dict[int, Entry] = {}
        self.oversize: dict[int, str] = {}  # items that cannot be sent at all, with the reason
        self.results: dict[int, R] = {}
        zero = Usage(cost_usd=0.0 if judge.card.priced else None)
        self.usage: dict[int, Usage] = dict.fromkeys(indices, zero)

    def order(self) -> list[int]:
        """The items in packing order (items that share passages next to each other)."""
        return self.indices

    def add(self, i: int) -> Entry | None:
        """Counts item ``i`` and returns its packing entry; None (and ``oversize[i]``) if it cannot go."""
        raise NotImplementedError

    def packs(self) -> list[Pack]:
        """Every item counted, then packed the way a run packs them (for the dry-run estimate)."""
        entries = [e for e in (self.add(i) for i in self.order()) if e is not None]
        return pack_entries(entries, self.judge.frame_tokens[self.step], self.judge.limits)

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        """``(messages, local id -> index, parse context)`` of one request."""
        raise NotImplementedError

    def response_format(self, ids: Sequence[str]) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        raise NotImplementedError

    def ok_result(self, i: int, value: Any, usage: Usage) -> R:
        raise NotImplementedError

    def error_result(self, i: int, reason: str, usage: Usage) -> R:
        raise NotImplementedError

    def encode(self, i: int, value: Any, usage: Usage) -> str:
        raise NotImplementedError

    def stored_result(self, i: int, value: str) -> R | None:
        """Item ``i``'s result from its stored value; None if the value is unreadable (then it is re-asked)."""
        raise NotImplementedError

    def expected_output(self, i: int) -> int:
        raise NotImplementedError


class _ExtractPlan(_Plan[ExtractResult]):
    step = "extract"

    def __init__(
        self,
        judge: LiteLLMJudge,
        items: Sequence[ExtractItem],
        indices: Sequence[int],
        keys: Mapping[int, bytes],
    ) -> None:
        super().__init__(judge, indices, keys)
        self.items = items
        self.sentences: dict[int, tuple[str, ...]] = {}
        self.lines: dict[int, str] = {}  # the data line under prompts.ID_SLOT, rendered once

    def add(self, i: int) -> Entry | None:
        judge = self.judge
        item = self.items[i]
        sentences = prompts.split_sentences(item.answer)
        line = prompts.extract_line(prompts.ID_SLOT, sentences, _question(item.question))
        prompt = judge.count_tokens(line) + 3
        # The data line is the answer plus a little JSON: bound the reply by it.
        bound = extract_output_bound(prompt)
        room = judge.limits.usable_window - judge.frame_tokens[self.step] - prompt - REPLY_SLACK_TOKENS
        if bound > room:
            # A long answer alone: the generous bound does not fit, a tight one may (claims restate
            # the answer, a little longer at most). An answer is never cut.
            if room < prompt * 5 // 4 + 16:
                self.oversize[i] = (
                    f"the answer ({prompt} tokens) is too long for the model's context window "
                    f"of {judge.limits.context_window} tokens"
                )
                return None
            bound = room
        self.sentences[i] = sentences
        self.lines[i] = line
        entry = Entry(index=i, prompt_tokens=prompt, output_tokens=bound)
        self.entries[i] = entry
        return entry

    def expected_output(self, i: int) -> int:
        # The dry-run estimate: every sentence given back by its number (rewritten claims cost more).
        return 2 * len(self.sentences[i]) + 4

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        ids = [prompts.local_id(n) for n in range(len(indices))]
        lines = [prompts.with_id(self.lines[i], local) for local, i in zip(ids, indices, strict=True)]
        sentences = {local: self.sentences[i] for local, i in zip(ids, indices, strict=True)}
        return prompts.extract_messages(lines, ids), dict(zip(ids, indices, strict=True)), sentences

    def response_format(self, ids: Sequence[str]) -> dict[str, Any]:
        return prompts.extract_response_format(ids)

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        return parse_extract_reply(text, context)

    def ok_result(self, i: int, value: Any, usage: Usage) -> ExtractResult:
        return ExtractResult(id=self.items[i].id, claims=value, usage=usage)

    def error_result(self, i: int, reason: str, usage: Usage) -> ExtractResult:
        return ExtractResult(id=self.items[i].id, claims=None, error=reason, usage=usage)

    def encode(self, i: int, value: Any, usage: Usage) -> str:
        return encode_claims(value, usage)

    def stored_result(self, i: int, value: str) -> ExtractResult | None:
        return _stored_extract(self.judge, self.items[i], value)


class _VerdictPlan(_Plan[VerdictResult]):
    step = "verdict"

    def __init__(
        self,
        judge: LiteLLMJudge,
        items: Sequence[VerdictItem],
        indices: Sequence[int],
        keys: Mapping[int, bytes],
    ) -> None:
        super().__init__(judge, indices, keys)
        self.items = items
        self.passages: dict[int, tuple[str, ...]] = {}
        self.lines: dict[int, str] = {}  # the data line with passages under prompts.ID_SLOT, rendered once
        self.truncated: set[int] = set()
        self.group_of: dict[int, int] = {}
        self.group_size: dict[int, int] = {}

    def order(self) -> list[int]:
        # Rows with equal passages (a static context) travel together: later ones refer back.
        groups: dict[tuple[str, ...], int] = {}
        members: dict[int, list[int]] = {}
        for i in self.indices:
            g = groups.setdefault(tuple(self.items[i].context), len(groups))
            self.group_of[i] = g
            members.setdefault(g, []).append(i)
        self.group_size = {g: len(m) for g, m in members.items()}
        if len(groups) == len(self.indices):
            return self.indices
        return [i for m in members.values() for i in m]

    def add(self, i: int) -> Entry | None:
        judge = self.judge
        count = judge.count_tokens
        frame = judge.frame_tokens[self.step]
        window = judge.limits.usable_window
        claims = self.items[i].claims
        passages = tuple(self.items[i].context)
        group = self.group_of.get(i)
        bound = verdict_output_bound(len(claims))
        tight = 12 * len(claims) + 8  # codes without many reasons: the least a reply can need
        line = prompts.verdict_line(prompts.ID_SLOT, claims, passages)
        cost = count(line) + 4
        room = window - frame - cost - REPLY_SLACK_TOKENS
        if bound > room and room >= tight:
            bound = room
        elif bound > room:
            # Only an item that alone exceeds the window is cut, and its result says so.
            bare = count(prompts.verdict_line(prompts.ID_SLOT, claims, ())) + 4
            budget = window - frame - bare - REPLY_SLACK_TOKENS - tight
            passages = truncate_passages(passages, budget, count) if budget > 0 else ()
            if not passages:
                self.oversize[i] = (
                    "the claims alone are too long for the model's context window "
                    f"of {judge.limits.context_window} tokens"
                )
                return None
            self.truncated.add(i)
            group = None  # its passages are its own now
            line = prompts.verdict_line(prompts.ID_SLOT, claims, passages)
            cost = count(line) + 4
            bound = max(tight, window - frame - cost - REPLY_SLACK_TOKENS)
        shared = None
        if group is not None and self.group_size.get(group, 1) > 1:
            shared = count(prompts.verdict_line(prompts.ID_SLOT, claims, None, passages_of=prompts.ID_SLOT)) + 4
        self.passages[i] = passages
        self.lines[i] = line
        entry = Entry(i, cost, bound, group, shared)
        self.entries[i] = entry
        return entry

    def expected_output(self, i: int) -> int:
        # A code is ~3 tokens; about one claim in five needs a reason of ~12 tokens.
        return 6 * len(self.items[i].claims) + 2

    def render(self, indices: Sequence[int]) -> tuple[list[dict[str, str]], dict[str, int], Any]:
        ids = [prompts.local_id(n) for n in range(len(indices))]
        lines: list[str] = []
        first_of: dict[tuple[str, ...], str] = {}
        expected: dict[str, tuple[int, int]] = {}
        for local, i in zip(ids, indices, strict=True):
            passages, claims = self.passages[i], self.items[i].claims
            ref = first_of.setdefault(passages, local)
            if ref == local:
                lines.append(prompts.with_id(self.lines[i], local))
            else:
                lines.append(prompts.verdict_line(local, claims, None, passages_of=ref))
            expected[local] = (len(claims), len(passages))
        counts = {local: n for local, (n, _) in expected.items()}
        return prompts.verdict_messages(lines, counts), dict(zip(ids, indices, strict=True)), expected

    def response_format(self, ids: Sequence[str]) -> dict[str, Any]:
        return prompts.verdict_response_format(ids)

    def parse(self, text: str, context: Any) -> ParsedReply[Any]:
        return parse_verdict_reply(text, context)

    def ok_result(self, i: int, value: Any, usage: Usage) -> VerdictResult:
        return VerdictResult(id=self.items[i].id, verdicts=value, usage=usage, context_truncated=i in self.truncated)

    def error_result(self, i: int, reason: str, usage: Usage) -> VerdictResult:
        return VerdictResult(
            id=self.items[i].id, verdicts=None, error=reason, usage=usage, context_truncated=i in self.truncated
        )

    def encode(self, i: int, value: Any, usage: Usage) -> str:
        return encode_verdicts(value, usage, i in self.truncated)

    def stored_result(self, i: int, value: str) -> VerdictResult | None:
        return _stored_verdicts(self.judge, self.items[i], value)


def _stored_extract(judge: LiteLLMJudge, item: ExtractItem, value: str | None) -> ExtractResult | None:
    decoded = judge._decoded(decode_claims, value)
    return None if decoded is None else ExtractResult(item.id, decoded[0], None, decoded[1], True)


def _stored_verdicts(judge: LiteLLMJudge, item: VerdictItem, value: str | None) -> VerdictResult | None:
    decoded = judge._decoded(decode_verdicts, value)
    if decoded is None:
        return None
    verdicts, usage, cut = decoded
    return VerdictResult(item.id, verdicts, None, usage, True, cut)


def _open_store(path: Path | None) -> ResultStore | None:
    if path is None:
        return None
    store = ResultStore(path)
    try:
        store.open()
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise ConfigError(f"cannot use the result store {path}: {exc}") from None
    return store


def _question(question: str | None) -> str | None:
    return question if question is not None and question.strip() else None


# -------------------------------------------------------------------------------------- requests


@dataclass(frozen=True, slots=True)
class _Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int


#: 429s are the server asking for patience, not a broken request: they get a larger retry budget.
RATE_LIMIT_RETRY_FACTOR: Final = 4


@dataclass(frozen=True, slots=True)
class _Tries:
    """How often the items of a pack have been sent and failed; sub-packs inherit it."""

    sent: int = 0
    errors: int = 0  # failed requests and invalid replies
    limited: int = 0  # 429 replies

    def sending(self) -> _Tries:
        return _Tries(self.sent + 1, self.errors, self.limited)

    def failed(self, rate_limited: bool) -> _Tries:
        if rate_limited:
            return _Tries(self.sent, self.errors, self.limited + 1)
        return _Tries(self.sent, self.errors + 1, self.limited)

    def exhausted(self, max_retries: int) -> bool:
        return self.errors > max_retries or self.limited > RATE_LIMIT_RETRY_FACTOR * max(1, max_retries)

    def gave_up(self, reason: str) -> str:
        return f"gave up after {self.sent} requests: {reason}"


class _RequestFailed(Exception):
    """A request that produced no usable reply. ``kind`` decides what happens next."""

    def __init__(
        self,
        kind: Literal["rate_limit", "transient", "timeout", "too_big", "isolate", "fatal"],
        reason: str,
        sent: bool = True,
    ) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.sent = sent


#: Counting time between two chances for the workers to run (replies that arrive meanwhile wait, holding
#: their request slots), ~20 verdict items. Only one call counts at a time, so this also bounds how fast
#: packs are made per pass of the event loop: 2 ms starved the packing on a busy machine (a quarter of
#: the slots idle at 64 in flight), 8 ms keeps the 99th percentile wait of the loop near 0.1 s.
_TURN_S: Final = 0.008


@dataclass(frozen=True, slots=True)
class _Turns:
    """What the calls of one judge share on one event loop."""

    loop: asyncio.AbstractEventLoop
    packs: asyncio.Semaphore  # packs between their last store check and their reply: 2 x max_concurrency
    counting: asyncio.Lock  # held by the call whose items are being counted and packed


class _PackQueue:
    """Packs waiting for a worker, first in first out."""

    def __init__(self) -> None:
        self._packs: collections.deque[Pack] = collections.deque()
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    def put(self, pack: Pack) -> None:
        self._packs.append(pack)
        self._wake(1)

    def close(self) -> None:
        self._closed = True
        self._wake(len(self._waiters))

    def _wake(self, n: int) -> None:
        while n > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1

    async def get(self) -> Pack | None:
        """The next pack, or None once the queue is closed and empty."""
        while not self._packs:
            if self._closed:
                return None
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        return self._packs.popleft()


class LiteLLMJudge:
    """The Judge port over litellm. Build it once per run (or process); ``await aclose()`` after a run."""

    def __init__(self, config: LiteLLMJudgeConfig, *, clock: Clock | None = None, sleep: Sleep | None = None) -> None:
        self.config = config
        self.model_name: str = config.model
        self.prompt_version: str = prompts.PROMPT_VERSION
        # The key comes first: a missing one must fail before anything else is done.
        self.api_key_env, self._api_key = resolve_api_key(config.model, config.api_key_env)
        self._redact = Redactor(self._api_key)
        import litellm

        litellm.suppress_debug_info = True
        self.card = model_card(config)
        self.count_tokens: Count = token_counter(config.model)
        _freeze_imports()
        timing: dict[str, Any] = {}
        if clock is not None:
            timing["clock"] = clock
        if sleep is not None:
            timing["sleep"] = sleep
        self.limiter = RequestLimiter(
            config.max_concurrency,
            config.rpm,
            config.tpm,
            backoff_base_s=config.backoff_base_s,
            backoff_max_s=max(config.backoff_max_s, config.backoff_base_s),
            **timing,
        )
        self.store = _open_store(config.store_path)
        self.limits = Limits(
            pack_tokens=config.pack_tokens,
            max_items=config.max_items_per_pack,
            context_window=self.card.context_window,
            max_output_tokens=self.card.max_output_tokens,
        )
        self.frame_tokens = {step: self._frame_tokens(step) for step in ("extract", "verdict")}
        # Everything that changes a reply is in the key; timeouts, concurrency and packing are not.
        api_base = (config.api_base or "").rstrip("/")
        mode = "schema" if self.card.json_schema else "prompt"
        common = (config.model, api_base, f"t={config.temperature}", f"seed={config.seed}", mode)
        self._extract_keys = KeyMaker("extract", prompts.EXTRACT_PROMPT_VERSION, *common)
        self._verdict_keys = KeyMaker(
            "verdict", prompts.VERDICT_PROMPT_VERSION, *common, f"window={self.card.context_window}"
        )
        self._stats = JudgeStats(cost_usd=0.0 if self.card.priced else None, notes=list(self.card.notes))
        self._fatal: str | None = None
        self._replies = 0  # successful requests so far
        self._turns: _Turns | None = None

    def _frame_tokens(self, step: str) -> int:
        text = prompts.frame_text(step)
        return self.count_tokens(text) + 2 * prompts.MESSAGE_OVERHEAD_TOKENS + prompts.REPLY_PRIMING_TOKENS

    # -------------------------------------------------------------------------------- the port

    async def extract_claims(
        self, items: Sequence[ExtractItem], progress: ProgressCallback | None = None
    ) -> list[ExtractResult]:
        results: list[ExtractResult | None] = [None] * len(items)
        todo: list[int] = []
        for i, item in enumerate(items):
            if item.answer is None or not item.answer.strip():
                results[i] = ExtractResult(id=item.id, claims=())  # nothing to extract: no call
            else:
                todo.append(i)
        keys: dict[int, bytes] = {}
        misses: list[int] = []
        with _gc_paused():
            if self.store is not None:  # keys only address the store: no store, no hashing
                make = self._extract_keys.key
                keys = {i: make(_question(items[i].question), items[i].answer) for i in todo}
            hits = self._lookup(list(keys.values()))
            for i in todo:
                stored = _stored_extract(self, items[i], hits.get(keys[i]) if hits else None)
                if stored is None:
                    misses.append(i)
                else:
                    results[i] = stored
        self._stats.cached_items += len(todo) - len(misses)
        _tick(progress, len(items) - len(misses))
        if misses:
            plan = _ExtractPlan(self, items, misses, keys)
            await self._run(plan, progress)
            for i, result in plan.results.items():
                results[i] = result
        return _all_set(results)

    async def judge_claims(
        self, items: Sequence[VerdictItem], progress: ProgressCallback | None = None
    ) -> list[VerdictResult]:
        results: list[VerdictResult | None] = [None] * len(items)
        todo: list[int] = []
        for i, item in enumerate(items):
            if not item.claims:
                results[i] = VerdictResult(id=item.id, verdicts=())
            elif not item.context:
                none = ClaimVerdict(verdict="unsupported", reason=NO_CONTEXT_REASON)
                results[i] = VerdictResult(id=item.id, verdicts=tuple(none for _ in item.claims))
            else:
                todo.append(i)
        keys: dict[int, bytes] = {}
        misses: list[int] = []
        with _gc_paused():
            if self.store is not None:
                pairs = [(items[i].claims, items[i].context) for i in todo]
                keys = dict(zip(todo, self._verdict_keys.keys_of_pairs(pairs), strict=True))
            hits = self._lookup(list(keys.values()))
            for i in todo:
                stored = _stored_verdicts(self, items[i], hits.get(keys[i]) if hits else None)
                if stored is None:
                    misses.append(i)
                else:
                    results[i] = stored
        self._stats.cached_items += len(todo) - len(misses)
        _tick(progress, len(items) - len(misses))
        if misses:
            plan = _VerdictPlan(self, items, misses, keys)
            await self._run(plan, progress)
            for i, result in plan.results.items():
                results[i] = result
        return _all_set(results)

    @property
    def overlap_rows(self) -> int:
        """Rows per extraction call when the pipeline overlaps steps (see ``core.judge.Overlapping``).

        Big enough that a call's last, partly filled packs cost little (~16 extraction packs and ~60
        verdict packs of typical rows), small enough that verdicts of the first answers are sent while
        later answers' claims are still being extracted.
        """
        return 16 * self.config.max_items_per_pack

    def stored_claims(self, answers: pl.Series, questions: pl.Series) -> pl.DataFrame | None:
        """Claims and usage already in the store for each answer, column-wise (null claims: not stored).

        None when there is no store to read (or ``refresh``): then every item goes the per-item way.
        """
        if self.store is None or self.config.refresh or answers.len() == 0:
            return None
        frame = pl.DataFrame({"q": questions, "a": answers})
        question = pl.when(is_blank(pl.col("q"))).then(pl.lit(None, dtype=pl.String)).otherwise(pl.col("q"))
        content = frame.select(extract_content(question, pl.col("a"))).to_series()
        with _gc_paused():
            keys = self._extract_keys.keys_of_texts(content)
            values = self._lookup_aligned(keys)
        decoded = decode_claims_column(pl.Series(values, dtype=pl.String))
        if decoded is not None:
            self._stats.cached_items += decoded.height - decoded.get_column("claims").null_count()
        return decoded

    def stored_verdicts(self, claims: pl.Series, contexts: pl.Series) -> pl.DataFrame | None:
        """Verdicts, truncation flag and usage already in the store for each (claims, context) pair."""
        if self.store is None or self.config.refresh or claims.len() == 0:
            return None
        heads, tails = pair_content(pl.col("c"), pl.col("x"))
        content = pl.DataFrame({"c": claims, "x": contexts}).select(heads.alias("h"), tails.alias("t"))
        odd = content.get_column("h").is_null() | content.get_column("t").is_null()
        with _gc_paused():
            if odd.any():
                # Texts holding NUL: the general layout, item by item (Python strings, rarely needed).
                where = odd.arg_true().to_list()
                odd_keys = [
                    self._verdict_keys.key_of_lists(c, x)
                    for c, x in zip(claims.gather(where).to_list(), contexts.gather(where).to_list(), strict=True)
                ]
                keys: list[bytes] = [b""] * content.height
                plain = (~odd).arg_true().to_list()
                rows = content.filter(~odd)
                fresh = self._verdict_keys.keys_of_texts(rows.get_column("h"), rows.get_column("t"))
                for n, key in zip(plain, fresh, strict=True):
                    keys[n] = key
                for n, key in zip(where, odd_keys, strict=True):
                    keys[n] = key
            else:
                keys = self._verdict_keys.keys_of_texts(content.get_column("h"), content.get_column("t"))
            values = self._lookup_aligned(keys)
        decoded = decode_verdicts_column(pl.Series(values, dtype=pl.String), claims.list.len())
        if decoded is not None:
            self._stats.cached_items += decoded.height - decoded.get_column("verdicts").null_count()
        return decoded

    def _decoded(self, decode: Callable[[str], T], value: str | None) -> T | None:
        """A stored value decoded, or None: absent, or unreadable (then it is asked for again)."""
        if value is None:
            return None
        try:
            return decode(value)
        except (ValueError, TypeError, KeyError, IndexError):
            note = "unreadable results in the result store were asked for again"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            return None

    def stats(self) -> JudgeStats:
        s = self._stats
        notes = list(s.notes)
        c = self.limiter.counters
        if c.rate_limited:
            notes.append(f"{c.rate_limited} rate-limited replies (429); in-flight cap went down to {c.min_cap_seen}")
        return JudgeStats(
            requests=s.requests,
            prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens,
            cost_usd=s.cost_usd,
            cached_items=s.cached_items,
            failed_items=s.failed_items,
            retries=s.retries,
            notes=notes,
        )

    async def aclose(self) -> None:
        from litellm.llms.custom_httpx.async_client_cleanup import close_litellm_async_clients

        try:
            await close_litellm_async_clients()  # type: ignore[no-untyped-call]
        finally:
            if self.store is not None:
                self.store.close()

    # -------------------------------------------------------------------------------- dry run

    def estimate(self, answers: Sequence[ExtractItem], contexts: Sequence[tuple[str, ...]]) -> CostEstimate:
        """Requests, tokens and cost that scoring these rows would spend, without calling anything.

        Results already in the store are free. Claims not yet extracted are estimated as the answer's
        sentences; replies as their typical size. Retries are not included.
        """
        if len(answers) != len(contexts):
            raise ValueError(f"{len(answers)} answers but {len(contexts)} contexts")
        todo = [i for i, a in enumerate(answers) if a.answer is not None and a.answer.strip()]
        x_keys = {i: self._extract_key(answers[i]) for i in todo}
        x_hits = self._lookup(list(x_keys.values()))
        x_miss = [i for i in todo if x_keys[i] not in x_hits]
        claims_of = {
            i: decode_claims(x_hits[x_keys[i]])[0] if x_keys[i] in x_hits else tuple(rough_sentences(answers[i].answer))
            for i in todo
        }
        v_items = [
            VerdictItem(id=answers[i].id, claims=claims_of[i], context=tuple(contexts[i]))
            for i in todo
            if claims_of[i] and contexts[i]
        ]
        v_keys = [self._verdict_key(v) for v in v_items]
        v_hits = self._lookup(v_keys)
        v_miss = [n for n, k in enumerate(v_keys) if k not in v_hits]
        requests = prompt = completion = 0
        plans: list[_Plan[Any]] = []
        if x_miss:
            plans.append(_ExtractPlan(self, answers, x_miss, {}))
        if v_miss:
            plans.append(_VerdictPlan(self, v_items, v_miss, {}))
        for plan in plans:
            for pack in plan.packs():
                requests += 1
                prompt += pack.prompt_tokens
                completion += sum(plan.expected_output(i) for i in pack.indices)
        priced = self.card.cost(prompt, completion)
        return CostEstimate(
            requests=requests,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=None if priced is None else priced[0] + priced[1],
            notes=[*self.card.notes, "claims not yet extracted are estimated as the answer's sentences"],
            cached_items=(len(todo) - len(x_miss)) + (len(v_items) - len(v_miss)),
        )

    # ------------------------------------------------------------------------------- store

    def _extract_key(self, item: ExtractItem) -> bytes:
        return self._extract_keys.key(_question(item.question), item.answer)

    def _verdict_key(self, item: VerdictItem) -> bytes:
        return self._verdict_keys.key_of_lists(item.claims, item.context)

    def _lookup(self, keys: list[bytes]) -> dict[bytes, str]:
        if self.store is None or self.config.refresh or not keys:
            return {}
        try:
            return self.store.get_many(keys)
        except sqlite3.Error as exc:  # an unreadable store costs money, never rows
            note = f"result store read failed ({type(exc).__name__}): stored results were not used"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            log.warning("%s: %s", note, exc)
            return {}

    def _lookup_aligned(self, keys: list[bytes]) -> list[str | None]:
        if self.store is None or self.config.refresh or not keys:
            return [None] * len(keys)
        try:
            return self.store.get_aligned(keys)
        except sqlite3.Error as exc:
            note = f"result store read failed ({type(exc).__name__}): stored results were not used"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            log.warning("%s: %s", note, exc)
            return [None] * len(keys)

    def _save(self, rows: list[tuple[bytes, str, str]]) -> None:
        if self.store is None or not rows:
            return
        try:
            self.store.put_many(rows)
        except Exception as exc:  # a full disk must not cost the results themselves
            note = f"result store write failed ({type(exc).__name__}): results of this run may be paid again"
            if note not in self._stats.notes:
                self._stats.notes.append(note)
            log.warning("%s: %s", note, self._redact(str(exc))[:_ERROR_CHARS])

    # ------------------------------------------------------------------------------ running

    async def _run(self, plan: _Plan[Any], progress: ProgressCallback | None) -> None:
        """Counts, packs and sends one step's items, the first requests leaving while the rest are counted.

        Counting is the judge's main CPU cost (every passage goes through the tokenizer): done up front
        it would leave every request slot idle at the start of each step. So packs queue as they
        close, in item order, and workers send them in that order: twice as many packs under way as
        request slots (``_Turns.packs``), so that a pack sleeping out a back-off never leaves a slot idle.
        """
        queue = _PackQueue()
        workers = [
            asyncio.create_task(self._work(plan, queue, progress)) for _ in range(2 * self.config.max_concurrency)
        ]
        try:
            packer = Packer(self.frame_tokens[plan.step], self.limits)
            order = plan.order()
            turn = self._loop_bound().counting
            clock = time.perf_counter
            at = 0
            # One call packs at a time, in the order the calls came: the first answers' packs all leave
            # first, so their claims are back (and their verdicts can go) while later answers' are out.
            # Interleaved, every call's last extraction pack would come back at the end of the phase.
            async with turn:
                while at < len(order):
                    until = clock() + _TURN_S
                    while at < len(order):
                        i = order[at]
                        at += 1
                        entry = plan.add(i)
                        if entry is None:
                            self._finish_error(plan, i, plan.oversize[i], progress)
                        else:
                            closed = packer.push(entry)
                            if closed is not None:
                                queue.put(closed)
                        if clock() >= until:
                            break
                    # Short turns: replies that arrive while we count wait unread, holding their slots.
                    await asyncio.sleep(0)
            last = packer.flush()
            if last is not None:
                queue.put(last)
        finally:
            queue.close()
            await asyncio.gather(*workers)

    async def _work(self, plan: _Plan[Any], queue: _PackQueue, progress: ProgressCallback | None) -> None:
        while (pack := await queue.get()) is not None:
            # Judge-wide, not per call: with calls running side by side (the pipeline overlaps them) only
            # ``2 * max_concurrency`` packs are between their last store check and their reply. More would
            # wait for a slot with a stale check: paid twice if another process stores them meanwhile.
            async with self._loop_bound().packs:
                await self._guarded(plan, pack.indices, progress)

    def _loop_bound(self) -> _Turns:
        loop = asyncio.get_running_loop()
        if self._turns is None or self._turns.loop is not loop:  # asyncio locks belong to one event loop
            self._turns = _Turns(loop, asyncio.Semaphore(2 * self.config.max_concurrency), asyncio.Lock())
        return self._turns

    async def _guarded(self, plan: _Plan[Any], indices: tuple[int, ...], progress: ProgressCallback | None) -> None:
        try:
            indices = self._not_stored_since(plan, indices, progress)
            if indices:
                await self._run_pack(plan, indices, _Tries(), progress)
        except Exception as exc:  # a bug must not lose the other items: they become error rows
            log.exception("litellm judge: unexpected failure")
            reason = f"internal error in the judge: {type(exc).__name__}: {self._redact(str(exc))[:200]}"
            for i in indices:
                if i not in plan.results:
                    self._finish_error(plan, i, reason, progress)

    def _not_stored_since(
        self, plan: _Plan[Any], indices: tuple[int, ...], progress: ProgressCallback | None
    ) -> tuple[int, ...]:
        """The pack's items still missing from the store just before it is sent.

        Another process scoring the same rows against the same store may have stored some of them since
        the step's lookup; taking those spares paying twice for everything but the requests in flight.
        """
        if not plan.keys:
            return indices
        hits = self._lookup([plan.keys[i] for i in indices])
        if not hits:
            return indices
        missing: list[int] = []
        for i in indices:
            value = hits.get(plan.keys[i])
            stored = None if value is None else plan.stored_result(i, value)
            if stored is None:
                missing.append(i)
            else:
                plan.results[i] = stored
        self._stats.cached_items += len(indices) - len(missing)
        _tick(progress, len(indices) - len(missing))
        return tuple(missing)

    async def _run_pack(
        self, plan: _Plan[Any], indices: tuple[int, ...], tries: _Tries, progress: ProgressCallback | None
    ) -> None:
        retries = self.config.max_retries
        while True:
            if self._fatal is not None:
                for i in indices:
                    self._finish_error(plan, i, self._fatal, progress)
                return
            messages, id_map, context = plan.render(indices)
            entries = [plan.entries[i] for i in indices]
            max_tokens = min(self.limits.max_output_tokens, REPLY_SLACK_TOKENS + sum(e.output_tokens for e in entries))
            estimate = self.frame_tokens[plan.step] + sum(e.prompt_tokens for e in entries)
            response_format = plan.response_format(list(id_map)) if self.card.json_schema else None
            if tries.sent > 0:
                self._stats.retries += 1
            tries = tries.sending()
            try:
                reply = await self._send(messages, response_format, max_tokens, estimate)
            except _RequestFailed as failure:
                if failure.sent:
                    self._charge(plan, indices, None, None, id_map)
                tries = tries.failed(failure.kind == "rate_limit")
                alone = len(indices) == 1
                if failure.kind == "fatal" or (failure.kind == "isolate" and alone):
                    for i in indices:
                        self._finish_error(plan, i, failure.reason, progress)
                    return
                if tries.exhausted(retries) or (failure.kind == "too_big" and alone):
                    for i in indices:
                        self._finish_error(plan, i, tries.gave_up(failure.reason), progress)
                    return
                if failure.kind in ("transient", "timeout"):
                    await self.limiter.back_off(tries.errors)
                if failure.kind in ("too_big", "timeout", "isolate") and not alone:
                    # Too big for the window, too slow for the timeout, or holding an item the provider
                    # refuses: halve the pack so that the other items get through.
                    await self._split(plan, halves(indices), tries, progress)
                    return
                continue  # after a 429 the limiter's shared pause makes this attempt wait
            parsed = plan.parse(reply.text, context)
            self._charge(plan, indices, reply, parsed, id_map)
            rows: list[tuple[bytes, str, str]] = []
            for local, value in parsed.ok.items():
                i = id_map[local]
                usage = plan.usage[i]
                plan.results[i] = plan.ok_result(i, value, usage)
                if i in plan.keys:
                    rows.append((plan.keys[i], plan.step, plan.encode(i, value, usage)))
            self._save(rows)
            _tick(progress, len(parsed.ok))
            if parsed.unknown_ids:
                log.debug("reply named ids it was not asked for: %s", ",".join(parsed.unknown_ids[:5]))
            failed = [id_map[local] for local in parsed.failed]
            if not failed:
                return
            tries = tries.failed(False)
            if tries.exhausted(retries):
                for local, why in parsed.failed.items():
                    self._finish_error(plan, id_map[local], tries.gave_up(f"invalid reply: {why}"), progress)
                return
            # Re-ask only for what failed; a reply that was wholly unusable is re-asked in halves.
            groups = halves(failed) if len(failed) == len(indices) else [tuple(failed)]
            if len(groups) == 1:
                indices = groups[0]
                continue
            await self._split(plan, groups, tries, progress)
            return

    async def _split(
        self, plan: _Plan[Any], groups: list[tuple[int, ...]], tries: _Tries, progress: ProgressCallback | None
    ) -> None:
        await asyncio.gather(*(self._run_pack(plan, g, tries, progress) for g in groups))

    def _finish_error(self, plan: _Plan[Any], i: int, reason: str, progress: ProgressCallback | None) -> None:
        if i in plan.results:
            return
        plan.results[i] = plan.error_result(i, self._redact(reason)[:_ERROR_CHARS], plan.usage[i])
        self._stats.failed_items += 1
        _tick(progress, 1)

    def _charge(
        self,
        plan: _Plan[Any],
        indices: Sequence[int],
        reply: _Reply | None,
        parsed: ParsedReply[Any] | None,
        id_map: Mapping[str, int],
    ) -> None:
        """Shares one request's usage out over its items (tokens by largest remainder, cost pro rata)."""
        n = len(indices)
        prompt = reply.prompt_tokens if reply else 0
        completion = reply.completion_tokens if reply else 0
        prompt_weights = [float(plan.entries[i].prompt_tokens) for i in indices]
        completion_weights = prompt_weights
        if parsed is not None and parsed.weights:
            by_index = {id_map[local]: float(w) for local, w in parsed.weights.items()}
            completion_weights = [by_index.get(i, 0.0) for i in indices]
        p_shares = largest_remainder(prompt, prompt_weights)
        c_shares = largest_remainder(completion, completion_weights)
        priced = self.card.cost(prompt, completion)
        for i, p, c in zip(indices, p_shares, c_shares, strict=True):
            cost: float | None = None
            if priced is not None:
                cost = (priced[0] * p / prompt if prompt else 0.0) + (priced[1] * c / completion if completion else 0.0)
            share = Usage(llm_calls=1.0 / n, prompt_tokens=p, completion_tokens=c, cost_usd=cost)
            plan.usage[i] = plan.usage[i] + share
        self._stats.prompt_tokens += prompt
        self._stats.completion_tokens += completion
        if priced is not None and self._stats.cost_usd is not None:
            self._stats.cost_usd += priced[0] + priced[1]

    async def _send(
        self,
        messages: list[dict[str, str]],
        response_format: dict[str, Any] | None,
        max_tokens: int,
        prompt_estimate: int,
    ) -> _Reply:
        import litellm

        cfg = self.config
        kwargs: dict[str, Any] = {
            "model": cfg.model,
            "messages": messages,
            "temperature": cfg.temperature,
            "max_tokens": max_tokens,
            "timeout": cfg.timeout_s,
            # Our limiter must see every 429: no retries inside litellm or the provider SDK.
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
        }
        if cfg.seed is not None:
            kwargs["seed"] = cfg.seed
        if cfg.api_base:
            kwargs["api_base"] = cfg.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        if response_format is not None:
            kwargs["response_format"] = response_format
        async with self.limiter.slot(prompt_estimate + max_tokens) as slot:
            if self._fatal is not None:  # learnt while this request waited for its slot
                raise _RequestFailed("fatal", self._fatal, sent=False)
            self._stats.requests += 1
            try:
                # The outer timeout is a backstop for providers that ignore ``timeout`` (a context
                # manager, not wait_for: no extra task and loop hop for every request).
                async with asyncio.timeout(cfg.timeout_s * 1.5 + 5):
                    response = await litellm.acompletion(**kwargs)
            except Exception as exc:
                raise self._classify(exc) from None
            text = _content(response)
            usage = getattr(response, "usage", None)
            prompt = _int(getattr(usage, "prompt_tokens", None)) or prompt_estimate
            completion = _int(getattr(usage, "completion_tokens", None)) or self.count_tokens(text)
            slot.settle(prompt + completion)
        self.limiter.on_success()
        self._replies += 1
        return _Reply(text=text, prompt_tokens=prompt, completion_tokens=completion)

    def _classify(self, exc: BaseException) -> _RequestFailed:
        from litellm import exceptions as litellm

        detail = self._redact(" ".join(str(exc).split()))[:200]
        name = type(exc).__name__
        if isinstance(exc, litellm.RateLimitError):
            headers = getattr(exc, "litellm_response_headers", None)
            response = getattr(exc, "response", None)
            if headers is None and response is not None:
                headers = getattr(response, "headers", None)
            pause = self.limiter.on_rate_limited(retry_after_from_headers(dict(headers) if headers else None))
            return _RequestFailed("rate_limit", f"rate limited (429; paused {pause:.3g} s)")
        if isinstance(exc, litellm.ContextWindowExceededError):
            return _RequestFailed("too_big", f"the request exceeds the model's context window: {detail}")
        if isinstance(exc, litellm.Timeout | TimeoutError | asyncio.TimeoutError):
            return _RequestFailed("timeout", f"timed out after {self.config.timeout_s:g} s")
        if isinstance(exc, litellm.AuthenticationError | litellm.PermissionDeniedError | litellm.NotFoundError):
            where = f" (key from {self.api_key_env})" if self.api_key_env else ""
            self._fatal = f"{name}{where}: {detail}"
            return _RequestFailed("fatal", self._fatal)
        if isinstance(exc, litellm.ContentPolicyViolationError):
            return _RequestFailed("isolate", f"the provider refused the content: {detail}")
        if isinstance(exc, litellm.APIConnectionError):
            return _RequestFailed("transient", f"connection error: {detail}")
        status = _int(getattr(exc, "status_code", None))
        if isinstance(exc, litellm.BadRequestError) or (status is not None and 400 <= status < 500 and status != 408):
            # Once requests have worked, a refused one is about its items: isolate them. Before that it is
            # most likely the setup (a parameter the server rejects): do not multiply the requests.
            return _RequestFailed("isolate" if self._replies else "fatal", f"{name}: {detail}")
        return _RequestFailed("transient", f"{name}{f' {status}' if status else ''}: {detail}")


_FROZEN: list[bool] = []


def _freeze_imports() -> None:
    """Moves what exists now (litellm's modules, the tokenizer) out of reach of the cyclic collector.

    ``import litellm`` leaves a heap of a few hundred thousand objects. Every full collection walked
    all of them: 0.3-0.4 s with the event loop stopped, several times a run, and every reply waiting
    meanwhile held its request slot (measured: a sixth of the slot-time at 64 requests in flight). Those
    objects live as long as the process anyway; the run's own garbage is still collected. Once a process.
    """
    if not _FROZEN:
        gc.collect()  # what is garbage already is freed, not frozen
        gc.freeze()
        _FROZEN.append(True)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while keys are hashed and stored results decoded.

    Both build a few small objects per item, none in a cycle; with a big heap (a chunk of rows with
    their passages) every automatic collection walks all of it, which made decoding four times
    slower. The collector's previous state comes back afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _content(response: Any) -> str:
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        return ""
    return content if isinstance(content, str) else ""


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tick(progress: ProgressCallback | None, n: int) -> None:
    if progress is not None and n > 0:
        progress(n)


def _all_set(results: Sequence[R | None]) -> list[R]:
    out = [r for r in results if r is not None]
    if len(out) != len(results):  # a bug in this module, never a row outcome
        raise RuntimeError("the litellm judge left an item without a result")
    return out

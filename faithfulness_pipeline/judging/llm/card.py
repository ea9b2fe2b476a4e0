"""What the litellm judge learns of its model before any request: window, output limit, prices, tokenizer.

A few lookups in litellm's model map (the settings that override them are ``settings.judge``), holding
no state; where the map knows no window, what the server says of its own (``server_limits``). litellm is
imported inside the functions only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any, Final

from faithfulness_pipeline.judging.llm.packing import Count
from faithfulness_pipeline.judging.llm.part_settings import CardSettings
from faithfulness_pipeline.judging.llm.server_limits import ServerWindow
from faithfulness_pipeline.settings.judge import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MAX_ITEMS_PER_PACK,
    DEFAULT_MAX_OUTPUT_TOKENS,
    SELF_HOSTED_MAX_ITEMS_PER_PACK,
)

# ------------------------------------------------------------------------------------- the model


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What the judge knows of its model, from litellm's model map or the settings that override it."""

    context_window: int
    max_output_tokens: int
    #: whether requests start with the JSON schema as their response_format
    json_schema: bool
    input_cost_per_token: float | None
    output_cost_per_token: float | None
    notes: tuple[str, ...] = ()
    #: What the provider's Batch API charges (litellm's ``*_cost_per_token_batches``); None: unknown
    batch_input_cost_per_token: float | None = None
    batch_output_cost_per_token: float | None = None
    #: whether a refused schema steps down to JSON mode, then to the prompt alone (``output_mode``): where
    #: ``use_json_schema`` is auto and litellm cannot vouch for the endpoint
    schema_fallback: bool = False
    #: What a prompt token served from the provider's prompt cache costs (litellm's
    #: ``cache_read_input_token_cost``); None: unknown, and such tokens cost ``input_cost_per_token``
    cached_input_cost_per_token: float | None = None
    batch_cached_input_cost_per_token: float | None = None
    #: whether the schema pins each item's number of verdict codes (``prompts.verdict_response_format``):
    #: where litellm cannot vouch for the endpoint, which is where servers compile schemas into grammars
    exact_schema: bool = False
    #: whether requests stream their replies (``requests.Sender``): ``stream`` yes, or auto where litellm cannot
    #: vouch for the endpoint, which is where a server of one's own may take minutes over a reply
    stream: bool = False
    #: answers per request at most: ``max_items_per_pack``, else one answer per request on a server that says it
    #: is a server of one's own (llama.cpp, vLLM, Ollama publish their window) and packed anywhere else
    #: (``settings.judge``)
    max_items_per_pack: int = DEFAULT_MAX_ITEMS_PER_PACK
    #: where the server says whether it is working (llama.cpp's ``/slots``): a stream silent past ``timeout_s``
    #: is waited for while it says so (``streams.read_stream``), up to ``stream_max_s``
    working_url: str | None = None

    @property
    def priced(self) -> bool:
        return self.input_cost_per_token is not None and self.output_cost_per_token is not None

    def cost(
        self, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0
    ) -> tuple[float, float] | None:
        """(prompt cost, completion cost); ``cached_prompt_tokens`` of the prompt tokens at the cached price.
        None when the price is unknown."""
        if self.input_cost_per_token is None or self.output_cost_per_token is None:
            return None
        cached_price = self.cached_input_cost_per_token
        if cached_price is None:  # never a made-up discount: what is not known is paid in full
            cached_price = self.input_cost_per_token
        uncached = prompt_tokens - cached_prompt_tokens
        return (uncached * self.input_cost_per_token + cached_prompt_tokens * cached_price,
                completion_tokens * self.output_cost_per_token)

    def for_batches(self) -> ModelCard:
        """The card as the Batch API prices it: batch prices where known, else the interactive ones (noted)."""
        if self.batch_input_cost_per_token is None or self.batch_output_cost_per_token is None:
            note = ("no batch price known for this model: batch usage is priced at the interactive prices "
                    "(set input_cost_per_token and output_cost_per_token to the batch prices)")
            return replace(self, notes=(*self.notes, note) if self.priced else self.notes)
        # A cached batch price only where the provider names one: a batch's cached tokens otherwise cost what
        # its other prompt tokens do.
        return replace(self, input_cost_per_token=self.batch_input_cost_per_token,
                       output_cost_per_token=self.batch_output_cost_per_token,
                       cached_input_cost_per_token=self.batch_cached_input_cost_per_token)


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


def import_litellm_in_background() -> threading.Thread:
    """Starts :func:`import_litellm` on a daemon thread and returns it; a later ``import_litellm()`` waits
    for it (the import lock) instead of importing again. For a program that knows early it will need
    litellm (the CLI with a model) and has input to read meanwhile; an import error is left for that later
    call to raise where it can be reported."""

    def run() -> None:
        try:
            import_litellm()
        except BaseException:  # reported by the caller's own import_litellm()
            return

    thread = threading.Thread(target=run, name="import-litellm", daemon=True)
    thread.start()
    return thread


def model_card(
    chosen: CardSettings, model: str, ask_server: Callable[[], ServerWindow | None] | None = None
) -> ModelCard:
    """Window, output limit, schema support and prices of the model (what ``chosen`` sets wins).

    ``ask_server`` (``server_limits.ask_server`` for the configured endpoint) is called only when neither the
    settings nor litellm know the window: then the server's own window, and its cap on a reply, are taken.
    """
    litellm = import_litellm()

    notes: list[str] = []
    info = lenient(lambda: litellm.get_model_info(model)) or {}
    window = chosen.context_window or info.get("max_input_tokens") or info.get("max_tokens")
    max_out = chosen.max_output_tokens or info.get("max_output_tokens")
    # litellm vouches for a model it has a card for, at its provider's own endpoint; anywhere else (a server
    # of one's own, a proxy) auto tries the schema and steps down if the endpoint refuses it.
    vouched = bool(info) and not chosen.api_base
    # The server is asked for its window when nobody else knows it, and whether it is a server of one's own
    # (llama.cpp, vLLM, Ollama say so by answering) when that decides the packing.
    served = None
    if ask_server is not None and (not window or (chosen.max_items_per_pack is None and not vouched)):
        served = ask_server()
    if not window:
        if served is not None:
            window = served.context_window
            if not max_out and served.max_output_tokens:
                max_out = min(served.max_output_tokens, DEFAULT_MAX_OUTPUT_TOKENS)
            notes.append(f"context window of {model} unknown to litellm: {window} tokens a request, as the "
                         f"server says ({served.source})")
        else:
            window = DEFAULT_CONTEXT_WINDOW
            notes.append(
                f"context window of {model} unknown to litellm: assuming {window} tokens "
                "(set context_window to change it)"
            )
    max_out = max_out or DEFAULT_MAX_OUTPUT_TOKENS
    fallback = chosen.use_json_schema == "auto" and not vouched
    if chosen.use_json_schema == "auto":
        schema = bool(lenient(lambda: litellm.supports_response_schema(model=model))) if vouched else True
    else:
        schema = chosen.use_json_schema == "yes"
    in_cost, out_cost = chosen.input_cost_per_token, chosen.output_cost_per_token
    if in_cost is None or out_cost is None:
        known = lenient(lambda: litellm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=1))
        if known is not None:
            in_cost = float(known[0]) if in_cost is None else in_cost
            out_cost = float(known[1]) if out_cost is None else out_cost
        else:
            notes.append(
                f"no price known for {model}: cost_usd is null "
                "(set input_cost_per_token and output_cost_per_token to price it)"
            )
    cached_cost = _cached_price(chosen, info, "cache_read_input_token_cost")
    if chosen.input_cost_per_token is not None and chosen.output_cost_per_token is not None:
        # Prices set by hand are what the user pays, in either mode.
        batch_in, batch_out = in_cost, out_cost
        batch_cached = cached_cost if chosen.cached_input_cost_per_token is not None else None
    else:
        batch_in, batch_out = info.get("input_cost_per_token_batches"), info.get("output_cost_per_token_batches")
        batch_cached = _cached_price(chosen, info, "cache_read_input_token_cost_batches")
    return ModelCard(
        cached_input_cost_per_token=cached_cost,
        batch_cached_input_cost_per_token=batch_cached,
        batch_input_cost_per_token=None if batch_in is None else float(batch_in),
        batch_output_cost_per_token=None if batch_out is None else float(batch_out),
        context_window=int(window),
        max_output_tokens=int(max_out),
        json_schema=schema,
        schema_fallback=fallback,
        exact_schema=schema and not vouched,
        stream=chosen.stream == "yes" or (chosen.stream == "auto" and not vouched),
        max_items_per_pack=chosen.max_items_per_pack or (SELF_HOSTED_MAX_ITEMS_PER_PACK if served is not None
                                                         else DEFAULT_MAX_ITEMS_PER_PACK),
        input_cost_per_token=in_cost,
        output_cost_per_token=out_cost,
        notes=tuple(notes),
        working_url=None if served is None else served.working_url,
    )


def _cached_price(chosen: CardSettings, info: dict[str, Any], key: str) -> float | None:
    """The price of a cached prompt token: the setting, else litellm's ``key``, only where the input price is
    litellm's too (a hand-set input price with litellm's cached one would mix two price lists)."""
    if chosen.cached_input_cost_per_token is not None:
        return chosen.cached_input_cost_per_token
    if chosen.input_cost_per_token is not None:
        return None
    known = info.get(key)
    return None if known is None else float(known)


#: The litellm version whose internal names :func:`token_counter` uses (litellm has no public way to get
#: the tiktoken encoding it counts a model with); tests/judging/test_private_litellm.py fails on any other
#: version, or when a name moved, so that the fast path is never lost without a word.
CHECKED_WITH_LITELLM: Final = "1.110.2"


def token_counter(model: str) -> Count:
    """litellm's offline token count for ``model``, never a tokenizer download (tiktoken instead).

    The encoding litellm's own ``token_counter`` would use, called directly: ``token_counter`` spends
    0.1-0.3 ms per call resolving the model before it counts, and the judge counts every item. Llama and
    Cohere tokenizers would be fetched from the Hugging Face hub: those are approximated by gpt-4o's.
    """
    litellm = import_litellm()
    name = "gpt-4o" if huggingface_kind(model) in ("llama2", "llama3", "cohere") else model
    encoding = tiktoken_encoding(name)
    if encoding is not None:
        return lambda text: len(encoding.encode(text, disallowed_special=()))
    return lambda text: int(litellm.token_counter(model=name, text=text))


def huggingface_kind(model: str) -> str | None:
    """Which Hugging Face tokenizer litellm would fetch for ``model`` (a litellm internal), or None."""
    try:
        from litellm.utils import huggingface_tokenizer_kind
    except ImportError:  # caught by tests/judging/test_private_litellm.py
        return None
    kind = huggingface_tokenizer_kind(model)
    return kind if isinstance(kind, str) else None


def tiktoken_encoding(model: str) -> Any:
    """litellm's tiktoken encoding for ``model`` (litellm internals), or None when litellm counts it another
    way; then litellm's public ``token_counter`` counts, more slowly."""
    try:
        from litellm.litellm_core_utils.token_counter import openai_tokenizer_encoding_name
        from litellm.rust_bridge.tokenizer import get_encoding
        from litellm.utils import select_tokenizer
    except ImportError:  # caught by tests/judging/test_private_litellm.py
        return None
    # select_tokenizer loads litellm's default encoding (cl100k_base) whatever it selects; it selects
    # tiktoken whenever litellm knows no Hugging Face tokenizer for the model, so only those ask it.
    if huggingface_kind(model) is not None and select_tokenizer(model)["type"] != "openai_tokenizer":
        return None
    name = openai_tokenizer_encoding_name(model)
    encoding = _python_encoding(name)
    if encoding is None:
        encoding = get_encoding(name)
    return encoding if callable(getattr(encoding, "encode", None)) else None


def _python_encoding(name: str) -> Any:
    """The tiktoken encoding ``name`` as litellm's pure-Python route loads it, but alone; None when litellm
    would take another route (its Rust tokenizer), or for cl100k_base, which litellm's route loads alone.

    That route imports litellm's default_encoding module first, which loads cl100k_base (its default) at
    import: for a gpt-4o judge a second encoding, about a second of start-up CPU, never used. The module's
    only other effect is pointing tiktoken at the files litellm ships (TIKTOKEN_CACHE_DIR, set for the
    whole process, as litellm sets it on its first count): done here the same way, nothing downloaded.
    tests/judging/test_private_litellm.py checks both against litellm's own."""
    try:
        from litellm.rust_bridge.catalog import decision
        from litellm.rust_bridge.configuration import Decision
        from litellm.rust_bridge.tokenizer import TIKTOKEN_CONTEXT
    except ImportError:  # caught by tests/judging/test_private_litellm.py
        return None
    if name == "cl100k_base" or decision(TIKTOKEN_CONTEXT) is not Decision.PYTHON:
        return None
    import tiktoken

    os.environ["TIKTOKEN_CACHE_DIR"] = litellm_tiktoken_dir()
    return tiktoken.get_encoding(name)


def litellm_tiktoken_dir() -> str:
    """Where litellm's default_encoding module points tiktoken: CUSTOM_TIKTOKEN_CACHE_DIR (created) if set,
    else the tokenizer files litellm ships."""
    custom = os.getenv("CUSTOM_TIKTOKEN_CACHE_DIR")
    if custom:
        os.makedirs(custom, exist_ok=True)
        return custom
    return str(resources.files("litellm").joinpath("litellm_core_utils/tokenizers"))

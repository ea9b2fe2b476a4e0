"""Tokens as OpenAI counts and bills them, for the fake server: the real cl100k BPE, the chat format's overhead
per message, and the automatic prefix cache (:class:`PromptCache`).

It never imports litellm: only the folder of litellm's bundled BPE files is looked up, so importing
this module stays cheap.
"""

from __future__ import annotations

import array
import functools
import hashlib
import importlib.util
import json
import os
import threading
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import tiktoken

_CL100K_URL: Final = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"


def _bundled_bpe_dir() -> str | None:
    """litellm's folder of BPE files, found without importing litellm (its import costs seconds)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "litellm_core_utils", "tokenizers")
        if os.path.isdir(candidate):
            return candidate
    return None


@functools.cache
def cl100k() -> tiktoken.Encoding:
    """The cl100k_base encoding, loaded from local files only (there is no network to download it)."""
    import tiktoken

    cache_file = hashlib.sha1(_CL100K_URL.encode()).hexdigest()
    current = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not (current and os.path.isfile(os.path.join(current, cache_file))):
        bundled = _bundled_bpe_dir()
        if bundled is None or not os.path.isfile(os.path.join(bundled, cache_file)):
            raise RuntimeError("no local cl100k_base BPE file: litellm's bundled tokenizers were not found")
        # The same setting litellm makes on import, so both agree on where the files are.
        os.environ["TIKTOKEN_CACHE_DIR"] = bundled
    return tiktoken.get_encoding("cl100k_base")


def count_tokens(text: str) -> int:
    # Special-token text inside user content (prompt injection tests) is counted as plain text.
    return len(cl100k().encode(text, disallowed_special=()))


def _content_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(p for p in parts if isinstance(p, str))
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def count_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens the way OpenAI bills chat models: 3 per message, 1 per name, 3 to prime the reply."""
    total = 3
    for message in messages:
        total += 3
        for key, value in message.items():
            total += count_tokens(_content_text(value))
            if key == "name":
                total += 1
    return total


#: Stand-ins for the chat format's tokens around messages (3 a message, 1 a name, 3 priming the reply):
#: outside cl100k's ids, so that they never equal a text token.
_FRAME_TOKEN: Final = -1
_NAME_TOKEN: Final = -2


def prompt_token_ids(messages: list[dict[str, Any]]) -> list[int]:
    """The prompt as a sequence of :func:`count_prompt_tokens` tokens, in order: what a prefix cache compares."""
    ids: list[int] = []
    for message in messages:
        ids += (_FRAME_TOKEN,) * 3
        for key, value in message.items():
            ids += cl100k().encode(_content_text(value), disallowed_special=())
            if key == "name":
                ids.append(_NAME_TOKEN)
    ids += (_FRAME_TOKEN,) * 3
    return ids


#: OpenAI's automatic prompt caching: a prompt that shares a prefix of 1,024 tokens or more with an earlier
#: one has that prefix served from the cache, counted in steps of 128 tokens.
PROMPT_CACHE_MIN_TOKENS: Final = 1024
PROMPT_CACHE_STEP_TOKENS: Final = 128


class PromptCache:
    """The prefixes of every prompt seen, at each :data:`PROMPT_CACHE_STEP_TOKENS` step from
    :data:`PROMPT_CACHE_MIN_TOKENS` on (as digests: a run's prompts would otherwise be held whole). It never
    evicts: a provider keeps a prefix minutes, a test or benchmark run lasts less."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self._lock = threading.Lock()

    def served(self, ids: list[int]) -> int:
        """How many of ``ids``' first tokens an earlier prompt shared (0 below the minimum); then ``ids``'
        prefixes are remembered, so the next prompt can share them."""
        step, digest = PROMPT_CACHE_STEP_TOKENS, hashlib.blake2b(digest_size=16)
        prefixes: list[tuple[int, bytes]] = []
        for end in range(step, len(ids) + 1, step):
            digest.update(array.array("i", ids[end - step : end]).tobytes())
            if end >= PROMPT_CACHE_MIN_TOKENS:
                prefixes.append((end, digest.copy().digest()))
        with self._lock:
            # Every step of a prompt is remembered, so the shared steps are the leading ones.
            shared = 0
            for end, key in prefixes:
                if key not in self._seen:
                    break
                shared = end
            self._seen.update(key for _, key in prefixes)
        return shared


def truncate_to_tokens(text: str, limit: int) -> str:
    # Decoding a token prefix can split a multi-byte character (CJK, Hangul): drop the broken tail.
    tokens = cl100k().encode(text, disallowed_special=())
    return cl100k().decode_bytes(tokens[:limit]).decode("utf-8", errors="ignore")


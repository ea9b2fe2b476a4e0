"""The API key: which environment variable holds it, reading it once, and scrubbing it from text.

Kept apart so that everything that touches the key is in one short module that can be reviewed on its
own. The judge hands the key to a :class:`Redactor` and to its request sender (and so to litellm)
only, and runs every error text through the redactor before it reaches a result, a log line or the store.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Iterator, Mapping
from typing import Final
from urllib.parse import quote, quote_plus, urlsplit

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.llm.card import import_litellm, lenient
from faithfulness_pipeline.judging.llm.reachability import shown


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


def model_provider(model: str) -> tuple[str, str | None]:
    """The litellm provider that serves ``model`` and its default base URL (None when litellm has none).
    Checked for every litellm judge, however its key is given (a variable, the provider's default one, a
    Dagster resource): an unknown model fails before any row, not as an error on every row."""
    litellm = import_litellm()
    litellm.suppress_debug_info = True  # else a failed lookup prints litellm's provider list to stdout
    try:
        found = litellm.get_llm_provider(model)
        return str(found[1]), (str(found[3]) if found[3] else None)
    except Exception as exc:
        raise ConfigError(
            f"litellm does not know which provider serves {model!r}: use a provider prefix such as "
            f"openai/, anthropic/ or ollama/ ({type(exc).__name__})"
        ) from None


#: What a shell accepts as a variable's name: anything else given as api_key_env is not one (a key, pasted).
VARIABLE_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def resolve_api_key(model: str, api_key_env: str | None) -> tuple[str | None, str | None]:
    """``(variable name, key)`` for ``model``; ``(None, None)`` when it needs none or litellm finds it.

    Raises :class:`MissingAPIKeyError` naming the variable when the key is not in the environment.
    """
    prefix = model.split("/", 1)[0] if "/" in model else ""
    # A provider prefix we know names the provider: no need to wait for litellm's import to find it.
    provider = prefix if prefix in _KEYLESS or prefix in _KEY_ENV else model_provider(model)[0]
    if api_key_env is not None:
        name = api_key_env.strip()
        if not name:
            raise ConfigError("api_key_env is empty: give the name of an environment variable")
        if not VARIABLE_NAME.fullmatch(name):
            # Most likely the key itself: never repeated, in this message or any other.
            raise ConfigError("api_key_env must name an environment variable (letters, digits and _, as "
                              "OPENAI_API_KEY), not hold the key: put the key in a variable and give its name")
        value = os.environ.get(name)
        if not value:
            raise _missing(name, model)
        return name, value
    if provider in _KEYLESS:
        return None, None
    default = _KEY_ENV.get(provider)
    if default is not None:
        value = os.environ.get(default)
        if not value:
            raise _missing(default, model)
        return default, value
    litellm = import_litellm()
    check = lenient(lambda: litellm.validate_environment(model=model)) or {}
    missing = [str(k) for k in check.get("missing_keys") or []]
    if missing and not check.get("keys_in_environment"):
        raise _missing(" and ".join(missing), model)
    guess = f"{provider.upper()}_API_KEY"
    value = os.environ.get(guess)
    return (guess, value) if value else (None, None)


class Redactor:
    """Removes a secret from text meant for humans or storage, in every form a provider or proxy has been
    seen to echo it: whole, reversed, base64 (standard and URL-safe, at each of the three byte alignments
    inside a longer encoded text), hex (either case), URL-encoded, and any piece of ``PIECE`` characters of
    each of these forms (a key cut short by a log line or a message limit)."""

    MASK: Final = "[REDACTED]"
    #: Shorter pieces of a random key are still guessable fragments; shorter still would start to match
    #: ordinary words and ids.
    PIECE: Final = 8

    def __init__(self, secret: str | None) -> None:
        self._secret = secret or ""
        forms = sorted(_forms(self._secret), key=len, reverse=True) if self._secret else []
        k = self.PIECE
        self._forms = [f for f in forms if len(f) >= k]
        # A key shorter than a piece ("k", "test") is masked only where it stands as a whole token: inside
        # a word it is a coincidence ("BrokenPipeError" holds "k"), and masking it there garbles the message.
        short = [re.escape(f) for f in forms if len(f) < k]
        self._short = re.compile(rf"(?<![\w-])(?:{'|'.join(short)})(?![\w-])") if short else None
        self._pieces = frozenset(form[i : i + k] for form in self._forms for i in range(len(form) - k + 1))

    def __call__(self, text: str) -> str:
        if not self._secret or not text:
            return text
        for form in self._forms:  # whole forms first: one mask for a whole key, not one per piece
            if form in text:
                text = text.replace(form, self.MASK)
        if self._short is not None:
            text = self._short.sub(self.MASK, text)
        return self._mask_pieces(text)

    def _mask_pieces(self, text: str) -> str:
        k, pieces = self.PIECE, self._pieces
        spans: list[list[int]] = []
        for i in range(len(text) - k + 1):
            if text[i : i + k] in pieces:
                if spans and i <= spans[-1][1]:
                    spans[-1][1] = i + k
                else:
                    spans.append([i, i + k])
        if not spans:
            return text
        out, at = [], 0
        for start, end in spans:
            out += [text[at:start], self.MASK]
            at = end
        out.append(text[at:])
        return "".join(out)


def refuse_credentials_in(api_base: str | None) -> None:
    """Raises :class:`ConfigError` for an ``api_base`` that carries a user name or password: the client would
    send them as Basic auth beside the key's bearer token, and servers refuse every such request (after
    retries, and billed as sent). The message shows the address without them."""
    if not api_base:
        return
    try:
        parts = urlsplit(api_base)
        userinfo = parts.username is not None or parts.password is not None
    except ValueError:  # a malformed address is for the reachability check to name
        return
    if userinfo:
        raise ConfigError(f"api_base {shown(api_base)!r} carries a user name or password (user:password@host): "
                          "give the address without them, and the key with api_key_env (--api-key-env)")


def judge_key(model: str, api_key_env: str | None, api_key: str | None, *, need_key: bool,
              api_base: str | None = None) -> tuple[str | None, str | None]:
    """``(variable name, key)`` a judge of ``model`` sends with: ``api_key`` when given (the settings' variable
    name kept for messages), else :func:`resolve_api_key`. A judge that only estimates (the dry run,
    ``need_key`` False) never sends a request, so a missing key is ``(None, None)`` for it, not an error.
    Credentials inside ``api_base`` are refused first (:func:`refuse_credentials_in`)."""
    refuse_credentials_in(api_base)
    if api_key:
        return api_key_env, api_key
    try:
        return resolve_api_key(model, api_key_env)
    except MissingAPIKeyError:
        if need_key:
            raise
        return None, None


def _b64_cores(data: bytes) -> Iterator[str]:
    """The characters of ``data``'s base64 that do not depend on what surrounds it, at each of the three
    positions ``data`` can start at within a longer encoded text."""
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            text = encode(b"\0" * pad + data).decode().rstrip("=")
            start = -(-8 * pad // 6)  # characters holding bits of the padding bytes before it
            end = (8 * (pad + len(data))) // 6  # characters made of whole data bits only
            yield text[start:end]


def _forms(secret: str) -> set[str]:
    raw = secret.encode()
    forms = {secret, secret[::-1], raw.hex(), raw.hex().upper(), quote(secret, safe=""), quote_plus(secret)}
    forms |= set(_b64_cores(raw)) | set(_b64_cores(secret[::-1].encode()))
    # A short form (of a short key) would mask ordinary text; the key itself is always masked.
    return {f for f in forms if len(f) >= Redactor.PIECE} | {secret}

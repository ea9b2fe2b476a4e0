"""The API key: which environment variable holds it, reading it once, and scrubbing it from text.

Kept apart so that everything that touches the key is in one short module that can be reviewed on its
own. The judge hands the key to a :class:`Redactor` and to its request sender (and so to litellm)
only, and runs every error text through the redactor before it reaches a result, a log line or the store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judges.litellm_config import import_litellm, lenient


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
    prefix = model.split("/", 1)[0] if "/" in model else ""
    if prefix in _KEYLESS or prefix in _KEY_ENV:
        provider = prefix  # a provider prefix litellm knows names the provider: no need to wait for its import
    else:
        litellm = import_litellm()
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
    litellm = import_litellm()
    check = lenient(lambda: litellm.validate_environment(model=model)) or {}
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


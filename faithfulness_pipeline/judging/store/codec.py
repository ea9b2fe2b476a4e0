"""How step results are kept in the store: compact JSON values, and their column-wise reading.

Values are flat JSON arrays (fewer objects to parse than nested ones: decoding is most of a warm
re-run): claims ``[calls, prompt, completion, cost, claim, ...]``; verdicts ``[calls, prompt,
completion, cost, truncated, letter, speculative, evidence, reason, letter, ...]``. The key prefix
(``fp-result-v2``) changed with this layout, so values of the older layout are never looked up.

Cached prompt tokens (``Usage.cached_prompt_tokens``) came later, without a new key prefix, so that results
stored before them are still served: where a result had some, its prompt slot holds ``[prompt, cached]``
instead of the prompt count alone. A value without cached tokens is byte for byte what it was, and reads
(as every older value does) as 0 cached tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import polars as pl

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.port import ClaimVerdict, Usage, Verdict

#: How verdicts are stored: one letter each.
LETTER_OF_VERDICT: Final[dict[str, str]] = {"supported": "S", "contradicted": "C", "unsupported": "U"}
VERDICT_OF_LETTER: Final[dict[str, Verdict]] = {"S": "supported", "C": "contradicted", "U": "unsupported"}


_DECODER: Final = json.JSONDecoder()
_VERDICT_FIELDS: Final = 4


def _dumps(value: list[Any]) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _decode(value: str) -> list[Any]:
    data, _ = _DECODER.raw_decode(value)  # values are ours: no surrounding whitespace to skip
    if not isinstance(data, list):
        raise ValueError("not a stored result")
    return data


def _usage_head(usage: Usage) -> list[Any]:
    prompt: int | list[int] = usage.prompt_tokens
    if usage.cached_prompt_tokens:
        prompt = [usage.prompt_tokens, usage.cached_prompt_tokens]
    return [usage.llm_calls, prompt, usage.completion_tokens, usage.cost_usd]


def _usage_of(data: list[Any]) -> Usage:
    prompt, cached = data[1], 0
    if isinstance(prompt, list):
        prompt, cached = prompt
    if not isinstance(prompt, int) or not isinstance(cached, int):
        raise ValueError("not a stored usage")
    return Usage(data[0], prompt, data[2], data[3], cached)


def encode_claims(claims: Sequence[str], usage: Usage) -> str:
    return _dumps([*_usage_head(usage), *claims])


def decode_claims(value: str) -> tuple[tuple[str, ...], Usage]:
    data = _decode(value)
    return tuple(data[4:]), _usage_of(data)


def encode_verdicts(verdicts: Sequence[ClaimVerdict], usage: Usage, truncated: bool) -> str:
    flat: list[Any] = [*_usage_head(usage), int(truncated)]
    for v in verdicts:
        flat += (LETTER_OF_VERDICT[v.verdict], int(v.speculative), v.evidence, v.reason)
    return _dumps(flat)


#: Verdicts without a reason repeat endlessly (``S0``, ``S1``...): one shared immutable object for each.
_PLAIN: dict[tuple[Any, ...], ClaimVerdict] = {}


def decode_verdicts(value: str) -> tuple[tuple[ClaimVerdict, ...], Usage, bool]:
    data = _decode(value)
    if (len(data) - 5) % _VERDICT_FIELDS:
        raise ValueError("not a stored verdict result")
    verdicts: list[ClaimVerdict] = []
    plain = _PLAIN
    for k in range(5, len(data), _VERDICT_FIELDS):
        letter, spec, evidence, reason = data[k : k + _VERDICT_FIELDS]
        if reason is None:
            shape = (letter, spec, evidence)
            verdict = plain.get(shape)
            if verdict is None:
                verdict = ClaimVerdict(VERDICT_OF_LETTER[letter], bool(spec), None, evidence)
                if len(plain) < 4096:
                    plain[shape] = verdict
        else:
            verdict = ClaimVerdict(VERDICT_OF_LETTER[letter], bool(spec), reason, evidence)
        verdicts.append(verdict)
    return tuple(verdicts), _usage_of(data), bool(data[4])


# ------------------------------------------------------------------------------ column-wise decoding


def usage_exprs(data: pl.Expr) -> list[pl.Expr]:
    """The usage columns from a stored list of usage numbers (as text): calls, prompt and completion
    tokens, cost, cached prompt tokens; null where a number is missing or unreadable (the caller makes
    the cached count of a list from before it 0)."""
    return [data.list.get(n, null_on_oob=True).cast(dtype, strict=False).alias(name)
            for n, (name, dtype) in enumerate(S.USAGE_SCHEMA.items())]

"""How step results are kept in the store: compact JSON values, and their column-wise reading.

Values are flat JSON arrays (fewer objects to parse than nested ones: decoding is most of a warm
re-run): claims ``[calls, prompt, completion, cost, claim, ...]``; verdicts ``[calls, prompt,
completion, cost, truncated, letter, speculative, evidence, reason, letter, ...]``. The key prefix
(``fp-result-v2``) changed with this layout, so values of the older layout are never looked up.
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


def encode_claims(claims: Sequence[str], usage: Usage) -> str:
    return _dumps([usage.llm_calls, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd, *claims])


def decode_claims(value: str) -> tuple[tuple[str, ...], Usage]:
    data = _decode(value)
    return tuple(data[4:]), Usage(data[0], data[1], data[2], data[3])


def encode_verdicts(verdicts: Sequence[ClaimVerdict], usage: Usage, truncated: bool) -> str:
    flat: list[Any] = [usage.llm_calls, usage.prompt_tokens, usage.completion_tokens, usage.cost_usd, int(truncated)]
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
    return tuple(verdicts), Usage(data[0], data[1], data[2], data[3]), bool(data[4])


# ------------------------------------------------------------------------------ column-wise decoding


def usage_exprs(data: pl.Expr) -> list[pl.Expr]:
    """The usage columns from a stored list of usage numbers (as text): calls, prompt and completion
    tokens, cost; null where a number is missing or unreadable."""
    return [data.list.get(n, null_on_oob=True).cast(dtype, strict=False).alias(name)
            for n, (name, dtype) in enumerate(S.USAGE_SCHEMA.items())]

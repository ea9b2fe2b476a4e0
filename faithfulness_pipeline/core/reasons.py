"""Score reasons built in code from the verdicts (SPEC §3d): no LLM call, and never at odds with the score.

Mastra spends one LLM call per scorer on this prose; ours names the same things (which claims were
contradicted or unsupported, and why) deterministically, so a reason can never contradict its score.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_MAX_LISTED = 10
_MAX_CLAIM_CHARS = 200


def format_score(score: float) -> str:
    """Scores as JavaScript prints them (0.4, 1, 0.13), so reasons read like Mastra's."""
    return f"{score:.2f}".rstrip("0").rstrip(".") if score != int(score) else str(int(score))


def _quote(claim: str) -> str:
    claim = " ".join(claim.split())
    if len(claim) > _MAX_CLAIM_CHARS:
        claim = claim[: _MAX_CLAIM_CHARS - 1] + "…"
    return f'"{claim}"'


def _listing(items: Sequence[Mapping[str, Any]], default_reason: str) -> str:
    shown = [f"{_quote(v['claim'])} ({(v.get('reason') or default_reason).strip().rstrip('.')})" for v in items]
    more = len(items) - _MAX_LISTED
    text = "; ".join(shown[:_MAX_LISTED])
    return text + (f"; and {more} more" if more > 0 else "")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def faithfulness_reason(score: float | None, verdicts: Sequence[Mapping[str, Any]]) -> str:
    n = len(verdicts)
    if n == 0:
        return _no_claims(score)
    assert score is not None
    yes = [v for v in verdicts if v["verdict"] == "supported" and not v.get("speculative")]
    contradicted = [v for v in verdicts if v["verdict"] == "contradicted"]
    hedged = [v for v in verdicts if v["verdict"] == "supported" and v.get("speculative")]
    unsupported = [v for v in verdicts if v["verdict"] == "unsupported"]
    text = f"The score is {format_score(score)} because {len(yes)} of {_plural(n, 'claim')} "
    text += "is supported by the context." if n == 1 or len(yes) == 1 else "are supported by the context."
    if contradicted:
        text += f" Contradicted: {_listing(contradicted, 'contradicted by the context')}."
    if unsupported:
        text += f" Not verifiable from the context: {_listing(unsupported, 'not found in the context')}."
    if hedged:
        text += f" Hedged (counted as unsure): {_listing(hedged, 'stated speculatively')}."
    return text


def hallucination_reason(score: float | None, verdicts: Sequence[Mapping[str, Any]]) -> str:
    n = len(verdicts)
    if n == 0:
        return _no_claims(score)
    assert score is not None
    contradicted = [v for v in verdicts if v["verdict"] == "contradicted"]
    unsupported = [v for v in verdicts if v["verdict"] == "unsupported"]
    bad = len(contradicted) + len(unsupported)
    if bad == 0:
        return (
            f"The score is {format_score(score)} because all {_plural(n, 'claim')} "
            f"{'is' if n == 1 else 'are'} supported by the context."
        )
    text = f"The score is {format_score(score)} because {bad} of {_plural(n, 'claim')} "
    text += "is" if n == 1 or bad == 1 else "are"
    text += " contradicted by or missing from the context."
    if contradicted:
        text += f" Contradicted: {_listing(contradicted, 'contradicted by the context')}."
    if unsupported:
        text += f" Unsupported: {_listing(unsupported, 'not found in the context')}."
    return text


def _no_claims(score: float | None) -> str:
    if score is None:
        return "No score: the answer makes no claims that can be checked (n_claims = 0)."
    return f"The score is {format_score(score)} because the answer makes no claims that can be checked."

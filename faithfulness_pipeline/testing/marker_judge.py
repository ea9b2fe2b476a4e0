"""An in-process scripted judge for core tests: verdicts are decided by markers the test writes.

Claims are the answer's sentences (split after . ! ? 。 ！ ？). A claim containing ``[C]`` is contradicted,
``[U]`` unsupported, anything else supported; ``[H]`` marks it speculative (hedged). The judge records every
item it was asked about, so tests can prove that no call was made.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from faithfulness_pipeline.core.port import (
    ClaimVerdict,
    ExtractItem,
    ExtractResult,
    Hooks,
    JudgeStats,
    Usage,
    VerdictItem,
    VerdictResult,
)

_SENTENCE = re.compile(r"[^.!?。！？]+[.!?。！？]?")


def split_claims(answer: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in _SENTENCE.findall(answer) if s.strip() and s.strip()[-1] not in "?？")


def scripted_verdict(claim: str) -> ClaimVerdict:
    speculative = "[H]" in claim
    if "[C]" in claim:
        return ClaimVerdict("contradicted", speculative, f"contradicts: {claim[:20]}", 0)
    if "[U]" in claim:
        return ClaimVerdict("unsupported", speculative, "not in the context", None)
    return ClaimVerdict("supported", speculative, None, 0)


class MarkerJudge:
    model_name = "scripted-test-judge"
    prompt_version = "scripted-1"

    def __init__(self, fail_extract: set[str] | None = None, fail_verdicts: set[str] | None = None,
                 usage: Usage | None = None) -> None:
        self.fail_extract = fail_extract or set()
        self.fail_verdicts = fail_verdicts or set()
        self.usage = usage or Usage(llm_calls=0.5, prompt_tokens=100, completion_tokens=10, cost_usd=0.001)
        self.extract_calls: list[ExtractItem] = []
        self.verdict_calls: list[VerdictItem] = []
        self.closed = 0

    async def extract_claims(self, items: Sequence[ExtractItem], hooks: Hooks[ExtractResult] | None = None
                             ) -> list[ExtractResult]:
        self.extract_calls.extend(items)
        out = []
        for item in items:
            if item.id in self.fail_extract:
                out.append(ExtractResult(item.id, None, "scripted failure", self.usage))
            else:
                out.append(ExtractResult(item.id, split_claims(item.answer), None, self.usage))
        if hooks is not None:
            hooks.tick(len(items))
        return out

    async def judge_claims(self, items: Sequence[VerdictItem], hooks: Hooks[VerdictResult] | None = None
                           ) -> list[VerdictResult]:
        self.verdict_calls.extend(items)
        out = []
        for item in items:
            if item.id in self.fail_verdicts:
                out.append(VerdictResult(item.id, None, "scripted failure", self.usage))
            else:
                out.append(VerdictResult(item.id, tuple(scripted_verdict(c) for c in item.claims), None, self.usage))
        if hooks is not None:
            hooks.tick(len(items))
        return out

    def stats(self) -> JudgeStats:
        return JudgeStats()

    async def aclose(self) -> None:
        self.closed += 1

"""What a model gets wrong in its replies, and what it costs (issue 52, regressions 2 and 3): an evidence
pointer that names no passage keeps its verdict, and a model that never follows the reply format is found out
in a wave of requests, not in seven per answer.

Real HTTP through litellm to the fake server, whose responder plays the model's slip.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from faithfulness_pipeline.core.port import ExtractItem, ExtractResult, VerdictItem, VerdictResult
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import ChatRequest, FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, script_verdicts, typical_rows

KEY_ENV = "FP_TEST_SLIPS_KEY"


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-slips")


def _judge(server: FakeLLMServer, **extra: Any) -> LiteLLMJudge:
    settings: dict[str, Any] = {"model": "openai/fake-judge", "api_base": server.base_url, "api_key_env": KEY_ENV,
                                "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 10.0, **extra}
    return LiteLLMJudge(JudgeSettings(**settings))


def _verdicts(judge: LiteLLMJudge, items: Sequence[VerdictItem]) -> list[VerdictResult]:
    async def main() -> list[VerdictResult]:
        try:
            return await judge.judge_claims(items)
        finally:
            await judge.aclose()

    return asyncio.run(main())


def _extract(judge: LiteLLMJudge, items: Sequence[ExtractItem]) -> list[ExtractResult]:
    async def main() -> list[ExtractResult]:
        try:
            return await judge.extract_claims(items)
        finally:
            await judge.aclose()

    return asyncio.run(main())


_POINTER = re.compile(r"^([SCUscu]\??)\d+")


class CountsPassagesFromOne:
    """The scripted judge's verdicts with every evidence pointer naming an item's last passage counted from 1
    (``S1`` for an item of one passage, ``S3`` for one of three): the slip Qwen2.5-Coder-1.5B made."""

    def __init__(self) -> None:
        self.script = ScriptedJudge()

    def __call__(self, request: ChatRequest) -> str:
        reply = json.loads(self.script(request))
        data = str(request.messages[-1]["content"]).split("<<<DATA>>>\n", 1)[1].split("\n<<<END DATA>>>", 1)[0]
        passages = {str(item["id"]): len(item.get("passages") or {}) for item in map(json.loads, data.splitlines())}
        if not all(isinstance(v, list) for v in reply.values()):
            return json.dumps(reply)  # an extraction reply: as the script wrote it
        return json.dumps({key: [_POINTER.sub(lambda m, n=passages[key]: f"{m.group(1)}{n}", code) for code in codes]
                           for key, codes in reply.items()}, ensure_ascii=False)


def test_a_model_counting_passages_from_one_keeps_every_verdict_and_asks_nothing_twice() -> None:
    rows = typical_rows(12, seed=8)
    # Half the items have one passage (issue 52's error rows: "evidence passage 1 does not exist (the item has
    # 1)"), half several, where a count from 1 cannot be told from a wrong number.
    items = [VerdictItem(f"r{k}", tuple(row.claims), tuple(row.context[:1]) if k % 2 == 0 else tuple(row.context))
             for k, row in enumerate(rows)]
    assert all(len(item.context) > 1 for item in items[1::2])
    with FakeLLMServer(CountsPassagesFromOne()) as server:
        judge = _judge(server, max_items_per_pack=1)  # one answer a request, as on a server of one's own
        verdicts = _verdicts(judge, items)
        requests = server.stats().requests
    assert requests == len(items) and judge.stats().retries == 0  # the slip was never asked about again
    for k, (item, result) in enumerate(zip(items, verdicts, strict=True)):
        assert result.error is None and result.verdicts is not None, result.error
        scripted = script_verdicts(list(item.claims))
        # The verdict, its speculative mark and its reason as the model gave them; the pointer read (the only
        # passage) or dropped, never guessed among several.
        assert [(v.verdict, v.speculative, v.reason) for v in result.verdicts] == [
            (verdict, spec, reason) for verdict, spec, _, reason in scripted]
        expected = [evidence if k % 2 == 0 else None for _, _, evidence, _ in scripted]
        assert [v.evidence for v in result.verdicts] == expected
    pointed = sum(1 for _, _, evidence, _ in (v for item in items for v in script_verdicts(list(item.claims)))
                  if evidence is not None)
    (note,) = [n for n in judge.stats().notes if "evidence pointers named no passage" in n]
    single = sum(1 for item in items[::2] for _, _, e, _ in script_verdicts(list(item.claims)) if e is not None)
    assert note.startswith(f"{pointed} evidence pointers named no passage of their item")
    assert f"{single} read as the item's only passage (the model counted from 1), {pointed - single} dropped" in note

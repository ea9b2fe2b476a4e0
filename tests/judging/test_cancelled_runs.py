"""A cancelled run sends nothing more (issue 52: after Ctrl-C cancelled every open request, new ones were still
sent). The packs already queued behind the request slots were handed on to the workers, which sent them one
after another while the run was being torn down; a run that ends by an exception now cancels its workers.

Real HTTP to the fake server through litellm; the cancel lands while the step's packs are still being counted
and queued (many one-answer packs, one slot, slow replies)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from faithfulness_pipeline.core.port import ExtractItem
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

KEY_ENV = "FP_TEST_CANCEL_KEY"
ROWS = 3000


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-cancel")


def _wait_for(condition: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_cancelled_step_sends_no_request_after_the_cancel() -> None:
    rows = typical_rows(ROWS)
    items = [ExtractItem(f"r{k}", row.answer, row.question) for k, row in enumerate(rows)]
    with FakeLLMServer(ScriptedJudge(), latency=Latency(base_s=0.3)) as server:
        judge = LiteLLMJudge(JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env=KEY_ENV,
                                           max_concurrency=1, max_items_per_pack=1))

        async def main() -> tuple[int, int]:
            step = asyncio.create_task(judge.extract_claims(items))
            while server.stats().requests == 0:
                await asyncio.sleep(0.005)
            step.cancel()
            at_cancel = server.stats().requests
            with pytest.raises(asyncio.CancelledError):
                await step
            await judge.aclose()
            return at_cancel, len(items)

        at_cancel, asked = asyncio.run(main())
        time.sleep(1.0)  # three reply latencies: a worker still sending would have sent again by now
        sent = server.stats().requests
    # the one slot's request may have been on its way as the cancel came; nothing queued behind it leaves
    assert sent <= at_cancel + 1 < asked, (at_cancel, sent)

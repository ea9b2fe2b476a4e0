"""Packing under token budgets, usage shares, truncation, and the requests-per-answer target."""

from __future__ import annotations

import asyncio
import itertools
import math

import pytest

from faithfulness_pipeline.judging.llm.packing import (
    REPLY_SLACK_TOKENS,
    Entry,
    Limits,
    Packer,
    halves,
    largest_remainder,
    pack_entries,
    rough_sentences,
    truncate_passages,
)

BIG = Limits(pack_tokens=1000, max_items=100, context_window=100_000, max_output_tokens=100_000)


def chars(text: str) -> int:
    return len(text)


def test_packs_stay_under_the_prompt_budget_in_input_order() -> None:
    entries = [Entry(i, prompt_tokens=100 + 10 * (i % 7), output_tokens=5) for i in range(50)]
    packs = pack_entries(entries, frame_tokens=200, limits=BIG)
    assert [i for p in packs for i in p.indices] == list(range(50))
    for p in packs:
        assert p.prompt_tokens == 200 + sum(entries[i].prompt_tokens for i in p.indices)
        assert p.prompt_tokens <= 1000
    # Greedy: the next pack's first item would not have fitted into the previous pack.
    for a, b in itertools.pairwise(packs):
        assert a.prompt_tokens + entries[b.indices[0]].prompt_tokens > 1000


def test_item_cap_output_limit_and_window_close_packs() -> None:
    entries = [Entry(i, prompt_tokens=10, output_tokens=100) for i in range(10)]
    capped = pack_entries(entries, 0, Limits(10_000, 3, 100_000, 100_000))
    assert [len(p.indices) for p in capped] == [3, 3, 3, 1]
    by_output = pack_entries(entries, 0, Limits(10_000, 100, 100_000, REPLY_SLACK_TOKENS + 250))
    assert [len(p.indices) for p in by_output] == [2, 2, 2, 2, 2]
    assert all(p.output_tokens <= REPLY_SLACK_TOKENS + 250 for p in by_output)
    by_window = pack_entries(entries, 0, Limits(10_000, 100, 500, 100_000))
    assert all(p.prompt_tokens + p.output_tokens <= Limits(1, 1, 500, 1).usable_window for p in by_window)
    assert len(by_window) > 1


def test_an_item_bigger_than_the_budget_travels_alone_uncut() -> None:
    entries = [Entry(0, 50, 5), Entry(1, 5000, 5), Entry(2, 50, 5)]
    packs = pack_entries(entries, 100, BIG)
    assert [p.indices for p in packs] == [(0,), (1,), (2,)]
    assert packs[1].prompt_tokens == 5100


def test_rows_with_equal_passages_are_packed_together_and_pay_once() -> None:
    entries = [
        Entry(0, 400, 5, group=0, shared_prompt_tokens=20),
        Entry(1, 300, 5, group=1),
        Entry(2, 400, 5, group=0, shared_prompt_tokens=20),
        Entry(3, 400, 5, group=0, shared_prompt_tokens=20),
    ]
    packs = pack_entries(entries, 100, BIG)
    assert [p.indices for p in packs] == [(0, 2, 3, 1)]
    assert packs[0].prompt_tokens == 100 + 400 + 20 + 20 + 300
    tight = pack_entries(entries, 100, Limits(700, 100, 100_000, 100_000))
    assert [p.indices for p in tight] == [(0, 2, 3), (1,)]


def test_halves() -> None:
    assert halves([1, 2, 3, 4, 5]) == [(1, 2, 3), (4, 5)]
    assert halves([7]) == [(7,)]


@pytest.mark.parametrize(
    ("total", "weights"),
    [(100, [1, 1, 1]), (7, [3.0, 1.0, 1.0, 1.0]), (0, [1, 2]), (5, [0, 0]), (1234, [0.1, 55, 3, math.nan, 7])],
)
def test_largest_remainder_adds_up_exactly(total: int, weights: list[float]) -> None:
    shares = largest_remainder(total, weights)
    assert sum(shares) == total
    assert all(s >= 0 for s in shares)
    assert len(shares) == len(weights)


def test_largest_remainder_is_proportional_and_deterministic() -> None:
    assert largest_remainder(100, [1, 1, 1]) == [34, 33, 33]
    assert largest_remainder(10, [3, 1, 1]) == [6, 2, 2]
    assert largest_remainder(9, [0, 1, 2]) == [0, 3, 6]
    assert largest_remainder(3, []) == []


def test_truncate_passages_keeps_a_prefix_and_cuts_the_last_one() -> None:
    passages = ["a" * 40, "b" * 40, "c" * 40]
    assert truncate_passages(passages, 1000, chars) == tuple(passages)
    cut = truncate_passages(passages, 44 + 20, chars)
    assert cut == ("a" * 40, "b" * 16)
    assert truncate_passages(passages, 3, chars) == ()


def test_rough_sentences_in_three_languages() -> None:
    assert rough_sentences("It costs 3.5 dollars. Really? Yes!") == ["It costs 3.5 dollars.", "Really?", "Yes!"]
    assert rough_sentences("台北很熱。高雄也很熱！真的嗎？") == ["台北很熱。", "高雄也很熱！", "真的嗎？"]
    assert rough_sentences("서울은 크다. 부산은 바다가 있다.") == ["서울은 크다.", "부산은 바다가 있다."]
    assert rough_sentences("  ") == []


# ------------------------------------------------------------------- the target, over real HTTP


def test_default_pack_budget_gives_at_most_half_a_request_per_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from faithfulness_pipeline.core.port import ExtractItem, VerdictItem
    from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
    from faithfulness_pipeline.settings.judge import DEFAULT_PACK_TOKENS, JudgeSettings
    from faithfulness_pipeline.testing.fakellm import FakeLLMServer
    from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows

    monkeypatch.setenv("FP_TEST_KEY", "sk-test-packing")
    rows = typical_rows(270, seed=11)
    totals: dict[str, tuple[int, int, int, int]] = {}

    async def run(judge: LiteLLMJudge, subset: list[int]) -> None:
        answers = [ExtractItem(str(k), rows[k].answer, rows[k].question) for k in subset]
        extracted = await judge.extract_claims(answers)
        await judge.judge_claims(
            [VerdictItem(str(k), r.claims or (), rows[k].context) for k, r in zip(subset, extracted, strict=True)]
        )
        await judge.aclose()

    with FakeLLMServer(ScriptedJudge()) as server:
        for lang in ("en", "zh", "ko"):
            subset = [k for k, r in enumerate(rows) if r.lang == lang]
            judge = LiteLLMJudge(
                JudgeSettings(model="openai/fake-judge", api_base=server.base_url, api_key_env="FP_TEST_KEY")
            )
            assert judge.settings.pack_tokens == DEFAULT_PACK_TOKENS
            server.reset_stats()
            asyncio.run(run(judge, subset))
            s = server.stats()
            assert s.requests == s.ok
            totals[lang] = (len(subset), s.requests, s.prompt_tokens, s.completion_tokens)
    totals["en+zh+ko"] = tuple(sum(t[i] for t in totals.values()) for i in range(4))  # type: ignore[assignment]
    report = {name: (r / n, p / n, c / n) for name, (n, r, p, c) in totals.items()}
    for name, (rpa, prompt, completion) in report.items():
        print(
            f"pack_tokens={DEFAULT_PACK_TOKENS} {name}: {rpa:.3f} requests/answer, "
            f"{prompt:.0f} prompt + {completion:.0f} completion tokens/answer (cl100k)"
        )
    assert report["en+zh+ko"][0] <= 0.5
    assert report["en"][0] <= 0.5 and report["zh"][0] <= 0.5
    assert report["en"][2] <= 150  # compact replies: claims plus short verdict codes


def test_streaming_packer_packs_like_pack_entries() -> None:
    entries = [Entry(i, prompt_tokens=50 + 37 * (i % 11), output_tokens=5 + i % 4) for i in range(300)]
    limits = Limits(pack_tokens=2000, max_items=12, context_window=100_000, max_output_tokens=100_000)
    packer = Packer(300, limits)
    streamed = [p for p in (packer.push(e) for e in entries) if p is not None]
    last = packer.flush()
    assert last is not None and packer.flush() is None
    assert [*streamed, last] == pack_entries(entries, 300, limits)

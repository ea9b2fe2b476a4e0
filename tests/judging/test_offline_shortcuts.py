"""The offline judge's shortcuts give what the plain computations give.

Each shortcut (a lazily computed negation hint, sentence weights sentence by sentence, stopping at a
passage that covers the whole claim, pieces that shrink where two processes meet) must change no
verdict: these tests compare each one with the computation it replaces, in English, Chinese and Korean.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from faithfulness_pipeline.core.port import VerdictItem
from faithfulness_pipeline.judging.offline import judge as offline
from faithfulness_pipeline.judging.offline.judge import OfflineJudge
from faithfulness_pipeline.judging.offline.rules import extract_claims, judge_claims
from faithfulness_pipeline.judging.offline.text import scripts
from faithfulness_pipeline.judging.offline.text.cues import cjk_may_negate
from faithfulness_pipeline.judging.offline.text.haystack import (
    Haystack,
    passage_content,
    passage_haystack,
    sentence_index,
)
from faithfulness_pipeline.judging.offline.text.scripts import fold_chinese, prepare
from faithfulness_pipeline.judging.offline.text.sentences import passage_sentences
from faithfulness_pipeline.judging.offline.text.units import features

PASSAGES = [
    "The museum opened in 1995. It did not open on Sundays. Visitors can't bring food.",
    "The bridge has 8 lanes. Nobody crossed it in 2019.",
    "这家公司成立于1995年。公司没有在北京设立办事处。它有二十三名员工。",
    "這家公司成立於1995年，員工不多。",
    "이 회사는 2018년에 서울에서 설립되었다. 직원은 많지 않다. 못 간다 하였다.",
    "도서관은 2008년 처음으로 야간 서비스를 채용했다. 이용자는 156명이다.",
    "Mixed 文本 with 한국어 words 不 and 1,000 items.",
    "plain ascii text without any negation at all",
    "٣ Arabic-Indic digit and ３ full-width digit, １２万人。",
]

CLAIMS = [
    "The museum opened in 1995.",
    "It opened on Sundays.",
    "这家公司成立于1996年。",
    "公司在北京设立办事处。",
    "이 회사는 2018년에 서울에서 설립되었다.",
    "직원은 많다.",
    "도서관은 2008년 야간 서비스를 채용했다.",
    "이용자는 156명이다.",
    "Mixed 文本 with 한국어 words.",
]


@pytest.mark.parametrize("text", PASSAGES)
def test_the_negation_hint_in_two_parts_is_the_whole_hint(text: str) -> None:
    haystack, numbers, latin_negation = passage_content(text)
    whole = passage_haystack(text)
    assert (haystack.latin, haystack.folded, numbers) == (whole[0].latin, whole[0].folded, whole[1])
    assert (latin_negation or cjk_may_negate(text)) == whole[2]


def test_folding_maps_han_characters_to_han_characters_only() -> None:
    # What lets a text without Han characters skip the fold and the numeral scan.
    table = scripts._T2S_PAIRS
    assert all(scripts.HAN_RE.fullmatch(ch) for ch in table)


@pytest.mark.parametrize("text", PASSAGES)
def test_korean_text_is_not_folded_and_needs_no_fold(text: str) -> None:
    haystack, _, _ = passage_content(text)
    prepared = prepare(text)
    assert haystack.folded == ("" if prepared.isascii() else fold_chinese(prepared))


@pytest.mark.parametrize("passage", PASSAGES)
@pytest.mark.parametrize("claim", CLAIMS)
def test_sentence_weights_are_each_sentences_own_weight(passage: str, claim: str) -> None:
    feats = features(claim)
    index = sentence_index(passage)
    expected = []
    for part in passage_sentences(prepare(passage)):
        haystack, _, _ = passage_content(part)
        # A sentence's haystack holds its own units: what the joined index must give it.
        expected.append(Haystack(haystack.latin, "" if part.isascii() else fold_chinese(part)).weight(feats))
    assert index.weights(feats) == expected


def test_a_claim_copied_in_two_passages_is_supported_by_the_first() -> None:
    for copied, other in [
        ("The bridge has 8 lanes.", "The museum opened in 1995."),
        ("这家公司成立于1995年。", "它有二十三名员工。"),
        ("이용자는 156명이다.", "직원은 많지 않다."),
    ]:
        verdicts = judge_claims([copied], [other, copied, copied + " " + other])
        assert verdicts[0].verdict == "supported"
        assert verdicts[0].evidence == 1


def _rows(n: int, seed: int) -> list[VerdictItem]:
    rng = random.Random(seed)
    items = []
    for k in range(n):
        context = rng.sample(PASSAGES, rng.randint(1, 4))
        answer = " ".join(rng.sample(CLAIMS + [p.split(". ")[0] + "." for p in context], 3))
        items.append(VerdictItem(f"r{k}", extract_claims(answer), tuple(context)))
    return items


def test_pieces_of_a_large_batch_shrink_where_the_ends_meet_and_cover_every_item() -> None:
    judge = OfflineJudge(processes=2)
    total = 5000
    sizes = []
    front, back = 0, total
    while front < back:  # the workers' end and this process's end, taking turns
        size = judge._piece(back - front, total, shared=True)
        front += size
        sizes.append(size)
        if front < back:
            size = judge._piece(back - front, total, shared=True)
            back -= size
            sizes.append(size)
    assert sum(sizes) == total
    assert max(sizes) == offline._CHUNK
    assert sizes[-1] <= offline._MIN_PIECE
    assert all(size >= offline._MIN_PIECE for size in sizes[:-2])
    assert judge._piece(600, 600, shared=True) == offline._CHUNK  # a small batch keeps whole pieces
    assert judge._piece(100, total, shared=False) == 100  # alone, this process takes whole pieces


def test_a_large_batch_shared_with_a_worker_gives_the_same_results() -> None:
    items = _rows(3000, 3)

    async def shared() -> tuple[list[object], int]:
        judge = OfflineJudge(processes=2, parallel_min_items=1)
        try:
            return list(await judge.judge_claims(items)), judge.worker_pieces
        finally:
            await judge.aclose()

    alone = asyncio.run(OfflineJudge(processes=1).judge_claims(items))
    results, worker_pieces = asyncio.run(shared())
    assert worker_pieces >= 1
    assert results == alone

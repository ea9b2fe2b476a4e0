"""The offline lexical judge: sentences, verdicts, cues and the Judge contract, in en / zh-CN / zh-TW / ko."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.port import (
    ExtractItem,
    ExtractResult,
    Hooks,
    Judge,
    VerdictItem,
    VerdictResult,
)
from faithfulness_pipeline.core.scoring import round_half_up
from faithfulness_pipeline.judging.offline.judge import (
    OFFLINE_MODEL_NAME,
    OFFLINE_PROMPT_VERSION,
    PROCESSES_ENV,
    OfflineJudge,
    default_processes,
)
from faithfulness_pipeline.judging.offline.rules import extract_claims, judge_claims
from faithfulness_pipeline.judging.offline.text.sentences import split_sentences
from faithfulness_pipeline.judging.offline.text.units import features, numbers, passage_units

REPO = Path(__file__).resolve().parents[2]


def run_judge(answers: list[str], contexts: list[list[str]]) -> tuple[list[ExtractResult], list[VerdictResult]]:
    judge = OfflineJudge()
    extracted = asyncio.run(judge.extract_claims([ExtractItem(f"r{i}", a) for i, a in enumerate(answers)]))
    items = [
        VerdictItem(e.id, e.claims or (), tuple(c)) for e, c in zip(extracted, contexts, strict=True)
    ]
    return extracted, asyncio.run(judge.judge_claims(items))


# --------------------------------------------------------------------------- the Judge contract


def test_is_a_judge_that_names_itself_a_lexical_baseline():
    judge = OfflineJudge()
    assert isinstance(judge, Judge)
    assert judge.model_name == OFFLINE_MODEL_NAME
    assert "offline" in judge.model_name and "lexical" in judge.model_name
    assert judge.prompt_version == OFFLINE_PROMPT_VERSION


def test_one_result_per_item_in_order_with_zero_usage_and_progress():
    answers = ["Paris is in France.", "", "Berlin is in Germany. Is it big?", "東京は日本にある。"]
    contexts = [["Paris is the capital of France."], ["x"], ["Berlin is the capital of Germany."], ["東京"]]
    judge = OfflineJudge()
    done: list[int] = []
    items = [ExtractItem(f"id-{i}", a) for i, a in enumerate(answers)]
    extracted = asyncio.run(judge.extract_claims(list(reversed(items)), Hooks(progress=done.append)))
    assert [e.id for e in extracted] == [f"id-{i}" for i in reversed(range(4))]
    assert sum(done) == 4
    assert all(e.error is None and e.claims is not None for e in extracted)
    by_id = {e.id: e.claims for e in extracted}
    assert by_id["id-1"] == ()
    assert by_id["id-2"] == ("Berlin is in Germany.",)

    v_items = [VerdictItem(f"v{i}", by_id[f"id-{i}"] or (), tuple(c)) for i, c in enumerate(contexts)]
    done.clear()
    judged = asyncio.run(judge.judge_claims(v_items, Hooks(progress=done.append)))
    assert [v.id for v in judged] == ["v0", "v1", "v2", "v3"]
    assert sum(done) == 4
    for item, result in zip(v_items, judged, strict=True):
        assert result.error is None and result.verdicts is not None
        assert len(result.verdicts) == len(item.claims)
        assert result.usage.llm_calls == 0 and result.usage.prompt_tokens == 0
        assert result.usage.completion_tokens == 0 and result.usage.cost_usd == 0.0
    assert all(e.usage.llm_calls == 0 and e.usage.cost_usd == 0.0 for e in extracted)
    assert judge.stats().requests == 0
    asyncio.run(judge.aclose())


@pytest.mark.parametrize("answer", ["", "   \n\t  ", "\n\n"])
def test_empty_answer_has_no_claims(answer):
    assert extract_claims(answer) == ()


def test_empty_context_makes_every_claim_unsupported_without_evidence():
    verdicts = judge_claims(["The sky is blue.", "天空是蓝色的。"], ["", "   "])
    assert [v.verdict for v in verdicts] == ["unsupported", "unsupported"]
    assert all(v.evidence is None and v.reason for v in verdicts)


# --------------------------------------------------------------------------- sentences


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Dr. Smith paid $3.5 million for the U.S. rights, i.e. all of them. It closed at 4 p.m. Sales rose.",
            ["Dr. Smith paid $3.5 million for the U.S. rights, i.e. all of them.", "It closed at 4 p.m.",
             "Sales rose."],
        ),
        (
            'He said "it works." Then it failed! Fruit, nuts, etc. were sold. We waited... Nothing came.',
            ['He said "it works."', "Then it failed!", "Fruit, nuts, etc. were sold.", "We waited...",
             "Nothing came."],
        ),
        ("It is well... fine. Version 2.0 shipped in Jan. 2020.", ["It is well... fine.",
                                                                   "Version 2.0 shipped in Jan. 2020."]),
        (
            "Summary:\n- First point here\n- Second point here.\n1. Third point\n**Bold** claim.",
            ["Summary:", "First point here", "Second point here.", "Third point", "Bold claim."],
        ),
        ("The ruling in Brown v. Board changed schools. Francis I. The king.",
         ["The ruling in Brown v. Board changed schools.", "Francis I.", "The king."]),
    ],
)
def test_english_sentences(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("公司成立于1995年。营收增长了3.5%！真的吗？是的；确实如此",
         ["公司成立于1995年。", "营收增长了3.5%！", "真的吗？", "是的；", "确实如此"]),
        ("公司成立於1995年。營收增長了3.5%！「真的嗎？」他問。",
         ["公司成立於1995年。", "營收增長了3.5%！", "「真的嗎？」", "他問。"]),
        ("他说……也许吧。好的", ["他说……也许吧。", "好的"]),
        ("회사는 1995년에 설립되었다. 매출은 3.5% 증가했다.정말인가? 그렇다.",
         ["회사는 1995년에 설립되었다.", "매출은 3.5% 증가했다.", "정말인가?", "그렇다."]),
    ],
)
def test_cjk_sentences(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    ("answer", "claims"),
    [
        ("Paris is the capital. Is it large? Hope this helps!", ("Paris is the capital.",)),
        ("Certainly, revenue grew 5%. Sure! Let me know if you need more.", ("Certainly, revenue grew 5%.",)),
        ("巴黎是首都。它大吗？希望对你有帮助！", ("巴黎是首都。",)),
        ("巴黎是首都。它大嗎？希望對你有幫助！謝謝", ("巴黎是首都。",)),
        ("파리는 수도이다. 크나요? 감사합니다.", ("파리는 수도이다.",)),
        ("Here is a summary:\nThe firm grew.\nOK.", ("The firm grew.",)),
    ],
)
def test_questions_pleasantries_and_lead_ins_are_not_claims(answer, claims):
    assert extract_claims(answer) == claims


# --------------------------------------------------------------------------- one of eight

ONE_OF_EIGHT = {
    "en": (
        "The Hubble Space Telescope was launched into low Earth orbit in 1990. It remains in operation and "
        "has made more than one million observations. Its successor is the James Webb telescope.",
        "The Hubble Space Telescope was launched into low Earth orbit in 1990.",
        [
            "Bananas grow quickly in tropical gardens.",
            "My grandmother bakes delicious apple pies.",
            "Penguins swim very well.",
            "Chess tournaments attract talented players.",
            "Volcanic islands form from cooling lava.",
            "Jazz musicians often improvise melodies.",
            "Fresh bread smells wonderful each morning.",
        ],
        " ",
    ),
    "zh-CN": (
        "哈勃空间望远镜于1990年被送入近地轨道。它至今仍在运行，已完成超过一百万次观测。",
        "哈勃空间望远镜于1990年被送入近地轨道。",
        ["香蕉喜欢热带气候。", "奶奶烤的苹果派很好吃。", "企鹅擅长游泳。", "象棋比赛吸引选手。",
         "火山岛由熔岩堆积。", "爵士乐手常即兴演奏。", "新鲜面包早晨很香。"],
        "",
    ),
    "zh-TW": (
        "哈勃太空望遠鏡於1990年被送入近地軌道。它至今仍在運行，已完成超過一百萬次觀測。",
        "哈勃太空望遠鏡於1990年被送入近地軌道。",
        ["香蕉喜歡熱帶氣候。", "奶奶烤的蘋果派很好吃。", "企鵝擅長游泳。", "象棋比賽吸引選手。",
         "火山島由熔岩堆積。", "爵士樂手常即興演奏。", "新鮮麵包早晨很香。"],
        "",
    ),
    "ko": (
        "허블 우주 망원경은 1990년에 지구 저궤도로 발사되었다. 이 망원경은 지금도 운용 중이며 백만 건 이상의 "
        "관측을 수행했다.",
        "허블 우주 망원경은 1990년에 지구 저궤도로 발사되었다.",
        ["바나나는 열대 기후를 좋아한다.", "할머니가 구운 사과 파이는 맛있다.", "펭귄은 수영을 잘한다.",
         "체스 대회에 선수들이 모였다.", "화산섬은 용암으로 만들어졌다.", "재즈 연주자들은 즉흥 연주를 즐긴다.",
         "신선한 빵 냄새가 아침을 채웠다."],
        " ",
    ),
}


@pytest.mark.parametrize("lang", list(ONE_OF_EIGHT))
def test_one_copied_sentence_of_eight_is_one_supported_and_seven_unsupported(lang):
    context, copied, unrelated, joiner = ONE_OF_EIGHT[lang]
    units = passage_units(context)[0]
    for sentence in unrelated:  # the premise of the case: nothing in common with the context
        assert not units & features(sentence).units.keys(), sentence
    answer = joiner.join([unrelated[0], unrelated[1], copied, *unrelated[2:]])
    claims = extract_claims(answer)
    assert len(claims) == 8
    verdicts = judge_claims(claims, [context])
    counts = Counter(v.verdict for v in verdicts)
    assert counts == {"supported": 1, "unsupported": 7}
    assert verdicts[2].verdict == "supported" and verdicts[2].evidence == 0
    assert all(v.reason for v in verdicts if v.verdict == "unsupported")
    assert round_half_up(counts["supported"] / 8) == 0.13
    assert round_half_up(counts["unsupported"] / 8) == 0.88


# --------------------------------------------------------------------------- numbers and negation


@pytest.mark.parametrize(
    ("claim", "context", "stated"),
    [
        ("Nickelback was formed in 1996 in Hanna.", "Nickelback was formed in 1995 in Hanna, Alberta.", "1995"),
        ("The bridge has 12 lanes for traffic.", "The bridge has 8 lanes for traffic.", "8"),
        ("这家公司成立于1996年。", "这家公司成立于1995年。", "1995"),
        ("這家公司成立於1996年。", "这家公司成立于1995年。", "1995"),
        ("이 회사는 2019년에 서울에서 설립되었다.", "이 회사는 2018년에 서울에서 설립되었다.", "2018"),
    ],
)
def test_a_conflicting_number_contradicts(claim, context, stated):
    (verdict,) = judge_claims([claim], [context])
    assert verdict.verdict == "contradicted"
    assert stated in (verdict.reason or "")
    assert verdict.evidence == 0


@pytest.mark.parametrize(
    ("claim", "context"),
    [
        ("They covered almost 7,000 miles in 2014.", "In 2014 they covered 6,850 miles."),
        ("She spends three euros each day.", "She spends 3 euros each day."),
        ("The deal was worth $1.2 billion.", "The deal was worth $1,200 million."),
        ("그들은 7000마일을 달렸다.", "그들은 7,000마일을 달렸다."),
    ],
)
def test_same_or_approximate_numbers_support(claim, context):
    assert judge_claims([claim], [context])[0].verdict == "supported"


def test_a_missing_number_without_a_rival_is_unsupported_not_contradicted():
    (verdict,) = judge_claims(["The museum has 40 rooms of paintings."], ["The museum has rooms of paintings."])
    assert verdict.verdict == "unsupported"
    assert "40" in (verdict.reason or "")


@pytest.mark.parametrize(
    ("claim", "context"),
    [
        ("The bridge is not open to cars.", "The bridge is open to cars."),
        ("The bridge is open to cars.", "The bridge isn't open to cars."),
        ("这座桥没有对汽车开放。", "这座桥对汽车开放。"),
        ("這座橋對汽車開放。", "这座桥不对汽车开放。"),
        ("그 다리는 자동차에 개방되지 않았다.", "그 다리는 자동차에 개방되었다."),
        ("그 다리는 자동차에 개방되었다.", "그 다리는 자동차에 개방되지 않았다."),
    ],
)
def test_a_negation_mismatch_contradicts(claim, context):
    (verdict,) = judge_claims([claim], [context])
    assert verdict.verdict == "contradicted"
    assert "negates" in (verdict.reason or "")


@pytest.mark.parametrize(
    ("claim", "context"),
    [
        ("The bridge is not open to cars.", "Since 2019 the bridge is not open to cars."),
        ("这座桥没有对汽车开放。", "目前这座桥没有对汽车开放。"),
        ("그 다리는 자동차에 개방되지 않았다.", "현재 그 다리는 자동차에 개방되지 않았다."),
        # an unrelated "not" elsewhere in a long passage decides nothing
        ("The bridge is open to cars.",
         "The bridge is open to cars. The ferry, however, does not run in winter and is not cheap."),
    ],
)
def test_agreeing_negations_support(claim, context):
    assert judge_claims([claim], [context])[0].verdict == "supported"


def test_added_absolute_quantifier_is_unsupported():
    (verdict,) = judge_claims(["The shop only sells coffee beans."], ["The shop sells coffee beans and tea."])
    assert verdict.verdict == "unsupported"


# --------------------------------------------------------------------------- hedges


@pytest.mark.parametrize(
    ("sentence", "hedged"),
    [
        ("The company might expand to Asia.", True),
        ("The merger could possibly close next year.", True),
        ("Perhaps the data is wrong.", True),
        ("It is likely to rain.", True),
        ("May the results hold.", True),
        ("The festival was held in May 2019.", False),
        ("The company expanded to Asia.", False),
        ("公司可能扩展到亚洲。", True),
        ("公司也許會擴展到亞洲。", True),
        ("公司或许会扩张。", True),
        ("公司扩展到亚洲。", False),
        ("회사는 아마 아시아로 확장할 것이다.", True),
        ("회사는 아시아로 확장할 수 있다.", True),
        ("회사가 확장한 것 같다.", True),
        ("회사는 아시아로 확장했다.", False),
    ],
)
def test_hedges(sentence, hedged):
    assert features(sentence).hedged is hedged
    (verdict,) = judge_claims([sentence], ["unrelated context words"])
    assert verdict.speculative is hedged


def test_hedged_claim_about_a_stated_fact_is_supported_and_speculative():
    verdicts = judge_claims(
        ["The bridge might be open to cars.", "这座桥可能对汽车开放。"],
        ["The bridge is open to cars.", "这座桥对汽车开放。"],
    )
    assert [(v.verdict, v.speculative) for v in verdicts] == [("supported", True), ("supported", True)]


# --------------------------------------------------------------------------- matching details


def test_traditional_claim_matches_simplified_context():
    (verdict,) = judge_claims(["這個國家的經濟發展很快。"], ["这个国家的经济发展很快。"])
    assert verdict.verdict == "supported"


def test_evidence_points_at_the_best_passage():
    passages = ["Cats sleep a lot.", "The Eiffel Tower is in Paris and opened in 1889.", "Tea is popular."]
    (verdict,) = judge_claims(["The Eiffel Tower opened in 1889 in Paris."], passages)
    assert verdict.verdict == "supported" and verdict.evidence == 1


def test_evidence_indexes_the_items_context_even_past_blank_passages():
    (verdict,) = judge_claims(["The Eiffel Tower opened in 1889."], ["", "  ", "The Eiffel Tower opened in 1889."])
    assert verdict.verdict == "supported" and verdict.evidence == 2


def test_a_bare_number_is_only_looked_up():
    verdicts = judge_claims(["42.", "7."], ["There were 7 apples in 1990."])
    assert [v.verdict for v in verdicts] == ["unsupported", "supported"]
    assert "42" in (verdicts[0].reason or "")


def test_absurd_digit_runs_do_not_break_numbers():
    assert numbers("id " + "9" * 400 + " and 12 more") == [12.0]
    assert judge_claims(["9" * 400 + " apples."], ["apples"])[0].verdict == "supported"


def test_unsupported_reason_names_what_is_missing():
    (verdict,) = judge_claims(["Nickelback won a Grammy in Canada."], ["Nickelback is a band from Canada."])
    assert verdict.verdict == "unsupported"
    assert "Grammy" in (verdict.reason or "")
    (zh,) = judge_claims(["他获得了诺贝尔奖。"], ["他是一名作家。"])
    assert zh.verdict == "unsupported" and "诺贝尔" in (zh.reason or "")


def test_numbers_in_all_scripts():
    assert numbers("It rose 3.5% to 7,000 units, twenty-five more, in 2019.") == [3.5, 7000.0, 2019.0, 25.0]
    assert numbers("近19个小时，三个人，1850만 부") == [19.0, 18_500_000.0, 3.0]


# --------------------------------------------------------------------------- determinism

_DETERMINISM_SCRIPT = """
import json, sys
from faithfulness_pipeline.judging.offline.rules import extract_claims, judge_claims
cases = json.loads(sys.stdin.read())
out = []
for answer, context in cases:
    claims = extract_claims(answer)
    out.append([list(claims), [[v.verdict, v.speculative, v.reason, v.evidence] for v in judge_claims(claims, context)]])
print(json.dumps(out, ensure_ascii=False))
"""


def _determinism_cases() -> list[tuple[str, list[str]]]:
    cases: list[tuple[str, list[str]]] = []
    for context, copied, unrelated, joiner in ONE_OF_EIGHT.values():
        cases.append((joiner.join([copied, *unrelated[:3]]), [context, "unrelated passage"]))
    cases.append(("Nickelback won a Grammy and sold 50 million records. They may tour.",
                  ["Nickelback sold 30 million records.", "They did not win a Grammy."]))
    return cases


def test_same_input_same_output_across_processes_and_hash_seeds():
    cases = _determinism_cases()
    outputs = []
    for seed in ("1", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run(
            [sys.executable, "-c", _DETERMINISM_SCRIPT],
            input=json.dumps(cases), capture_output=True, text=True, env=env, cwd=REPO, check=True,
        )
        outputs.append(json.loads(proc.stdout))
    assert outputs[0] == outputs[1]
    in_process = [
        [list(extract_claims(a)), [[v.verdict, v.speculative, v.reason, v.evidence]
                                   for v in judge_claims(extract_claims(a), c)]]
        for a, c in cases
    ]
    assert in_process == outputs[0]
    assert judge_claims(*_first_claims_and_context()) == judge_claims(*_first_claims_and_context())


def _first_claims_and_context() -> tuple[tuple[str, ...], list[str]]:
    answer, context = _determinism_cases()[-1]
    return extract_claims(answer), context


# --------------------------------------------------------------------------- speed (measured, not asserted)


def _synthetic_rows(lang: str, n: int, rng: random.Random) -> list[tuple[str, list[str]]]:
    """RAG-like rows: 3-8 passages of 60-150 words (or CJK equivalent), answers of 3-6 sentences,
    about 60 % copied from the passages and the rest invented; some numbers and negations."""
    if lang == "en":
        vocab = ["".join(rng.choice("bcdfghklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(2, 4)))
                 for _ in range(3000)]
        glue = ["the", "a", "of", "in", "and", "to", "is", "was", "for", "on", "with", "by", "as", "at", "not"]

        def sentence() -> str:
            words = [rng.choice(vocab) if rng.random() < 0.6 else rng.choice(glue) for _ in range(rng.randint(8, 20))]
            if rng.random() < 0.3:
                words.insert(rng.randrange(len(words)), str(rng.randint(1, 3000)))
            return " ".join(words).capitalize() + "."
    elif lang == "zh":
        chars = [chr(c) for c in range(0x4E00, 0x4E00 + 2500)]

        def sentence() -> str:
            s = "".join(rng.choice(chars) for _ in range(rng.randint(12, 30)))
            if rng.random() < 0.3:
                s = s[:5] + str(rng.randint(1, 3000)) + "年" + s[5:]
            return s + ("不" if rng.random() < 0.2 else "") + "。"
    else:
        syllables = [chr(c) for c in range(0xAC00, 0xAC00 + 1500)]

        def sentence() -> str:
            words = ["".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))) for _ in range(rng.randint(5, 12))]
            if rng.random() < 0.2:
                words.append("않았다")
            return " ".join(words) + "."

    rows = []
    for _ in range(n):
        passages = []
        for _ in range(rng.randint(3, 8)):
            sentences: list[str] = []
            while sum(len(s.split()) if lang != "zh" else len(s) // 2 for s in sentences) < rng.randint(60, 150):
                sentences.append(sentence())
            passages.append(sentences)
        answer = [rng.choice(rng.choice(passages)) if rng.random() < 0.6 else sentence()
                  for _ in range(rng.randint(3, 6))]
        joiner = "" if lang == "zh" else " "
        rows.append((joiner.join(answer), [joiner.join(p) for p in passages]))
    return rows


@pytest.mark.parametrize("lang", ["en", "zh", "ko"])
def test_throughput_is_measured(lang, capsys):
    rows = _synthetic_rows(lang, 600, random.Random(7))
    started = time.process_time()
    results = []
    for answer, context in rows:
        claims = extract_claims(answer)
        results.append((claims, judge_claims(claims, context)))
    elapsed = time.process_time() - started
    assert all(len(claims) == len(verdicts) for claims, verdicts in results)
    verdicts = Counter(v.verdict for _, judged in results for v in judged)
    assert verdicts["supported"] and verdicts["unsupported"]
    with capsys.disabled():
        print(f"\n[offline judge {lang}] {len(rows) / elapsed:,.0f} answers/s (CPU time, one core); verdicts {dict(verdicts)}")


# --------------------------------------------------------------------------- worker processes


def _mixed_items(per_language: int) -> list[VerdictItem]:
    rows = [row for lang in ("en", "zh", "ko") for row in _synthetic_rows(lang, per_language, random.Random(11))]
    return [VerdictItem(f"i{k}", extract_claims(answer), tuple(context)) for k, (answer, context) in enumerate(rows)]


async def _judged_by_two_processes(items: list[VerdictItem]) -> tuple[list[VerdictResult], int]:
    judge = OfflineJudge(processes=2, parallel_min_items=1)
    try:
        return await judge.judge_claims(items), judge.worker_pieces
    finally:
        await judge.aclose()


def test_a_worker_process_changes_no_result():
    items = _mixed_items(200)  # three pieces: the worker is sent the first two, this process takes the last
    alone = asyncio.run(OfflineJudge(processes=1).judge_claims(items))
    shared, worker_pieces = asyncio.run(_judged_by_two_processes(items))
    assert worker_pieces == 2
    assert shared == alone


class _Unpicklable(str):
    def __reduce__(self) -> str:
        raise TypeError("this passage cannot be sent to another process")


def test_a_piece_a_worker_cannot_take_is_judged_here():
    items = _mixed_items(200)
    first = items[0]
    items[0] = VerdictItem(first.id, first.claims, tuple(_Unpicklable(p) for p in first.context))
    alone = asyncio.run(OfflineJudge(processes=1).judge_claims(items))
    shared, _ = asyncio.run(_judged_by_two_processes(items))
    assert shared == alone


def _judge_in_daemon(out: multiprocessing.Queue[object]) -> None:
    """In a daemonic process (as a Celery prefork worker runs a step): the two-process judge's results."""
    shared, worker_pieces = asyncio.run(_judged_by_two_processes(_mixed_items(200)))
    out.put(([(r.id, r.verdicts) for r in shared], worker_pieces))


def test_a_daemonic_process_judges_everything_itself():
    """A daemonic process may not start children: a large batch there (a Dagster step on a Celery prefork
    worker) is judged in that process instead of failing, with the same results."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_judge_in_daemon, args=(out,), daemon=True)
    child.start()
    got, worker_pieces = out.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    alone = asyncio.run(OfflineJudge(processes=1).judge_claims(_mixed_items(200)))
    assert worker_pieces == 0 and got == [(r.id, r.verdicts) for r in alone]


def test_processes_come_from_the_environment(monkeypatch):
    monkeypatch.setenv(PROCESSES_ENV, "1")
    assert OfflineJudge().processes == 1
    monkeypatch.setenv(PROCESSES_ENV, " 3 ")
    assert default_processes() == 3
    for bad in ("two", "0"):
        monkeypatch.setenv(PROCESSES_ENV, bad)
        with pytest.raises(ConfigError, match=PROCESSES_ENV):
            default_processes()
    monkeypatch.delenv(PROCESSES_ENV)
    assert 1 <= default_processes() <= min(4, os.cpu_count() or 1)


def test_claims_extracted_by_a_worker_process_are_the_same():
    answers = [ExtractItem(f"a{k}", answer) for k, (answer, _) in
               enumerate(row for lang in ("en", "zh", "ko") for row in _synthetic_rows(lang, 200, random.Random(5)))]

    async def shared() -> tuple[list[ExtractResult], int]:
        judge = OfflineJudge(processes=2, parallel_min_items=1)
        try:
            return await judge.extract_claims(answers), judge.worker_pieces
        finally:
            await judge.aclose()

    alone = asyncio.run(OfflineJudge(processes=1).extract_claims(answers))
    results, worker_pieces = asyncio.run(shared())
    assert worker_pieces == 2
    assert results == alone

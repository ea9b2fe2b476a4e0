"""Generator of typical RAG rows for benchmarks: 3–6 sentence answers, 3–8 passages of 60–150 words.

English, Chinese and Korean in equal thirds. Each answer mixes sentences copied from a passage, sentences
with a changed number (contradictions) and invented sentences (unsupported), like real RAG traffic.
Deterministic for a given seed.
"""

from __future__ import annotations

import random

import polars as pl

_EN_SUBJECTS = ["The library", "Our warehouse", "The north bridge", "The city council", "The research team",
                "The new reactor", "The airline", "The museum", "The hospital", "The school district"]
_EN_VERBS = ["opened", "closed", "expanded", "reported", "approved", "completed", "funded", "moved", "hired",
             "replaced"]
_EN_OBJECTS = ["a second wing", "its oldest building", "the annual budget", "a solar roof", "two hundred staff",
               "the eastern terminal", "a public archive", "the cooling system", "a night service", "the old depot"]
_EN_TAILS = ["after a long review", "despite heavy rain", "with regional support", "ahead of schedule",
             "for the first time", "under a new director", "in the spring", "following public comments"]

_ZH_SUBJECTS = ["市图书馆", "我们的仓库", "北大桥", "市议会", "研究团队", "新反应堆", "航空公司", "博物馆", "医院", "学区"]
_ZH_VERBS = ["开放了", "关闭了", "扩建了", "报告了", "批准了", "完成了", "资助了", "搬迁了", "招聘了", "更换了"]
_ZH_OBJECTS = ["第二栋楼", "最老的建筑", "年度预算", "太阳能屋顶", "两百名员工", "东航站楼", "公共档案馆", "冷却系统",
               "夜间服务", "旧车库"]
_ZH_TAILS = ["经过长期审查", "尽管下着大雨", "在地区支持下", "提前完成", "第一次", "在新主任领导下", "在春季", "听取公众意见后"]

_KO_SUBJECTS = ["시립 도서관은", "우리 창고는", "북쪽 다리는", "시의회는", "연구팀은", "새 원자로는", "항공사는", "박물관은",
                "병원은", "교육청은"]
_KO_OBJECTS = ["두 번째 건물을", "가장 오래된 건물을", "연간 예산을", "태양광 지붕을", "직원 이백 명을", "동쪽 터미널을",
               "공공 기록관을", "냉각 시스템을", "야간 서비스를", "옛 차고를"]
_KO_VERBS = ["열었다", "닫았다", "확장했다", "보고했다", "승인했다", "완공했다", "지원했다", "옮겼다", "채용했다", "교체했다"]
_KO_TAILS = ["오랜 검토 끝에", "폭우에도 불구하고", "지역의 지원으로", "예정보다 빨리", "처음으로", "새 책임자 아래에서",
             "봄에", "공청회 후에"]


def _sentence(lang: str, rng: random.Random) -> str:
    year = rng.randint(1990, 2025)
    count = rng.randint(2, 900)
    if lang == "en":
        return (f"{rng.choice(_EN_SUBJECTS)} {rng.choice(_EN_VERBS)} {rng.choice(_EN_OBJECTS)} "
                f"{rng.choice(_EN_TAILS)} in {year}, serving {count} people.")
    if lang == "zh":
        return (f"{rng.choice(_ZH_SUBJECTS)}{rng.choice(_ZH_TAILS)}于{year}年{rng.choice(_ZH_VERBS)}"
                f"{rng.choice(_ZH_OBJECTS)}，服务{count}人。")
    return (f"{rng.choice(_KO_SUBJECTS)} {year}년 {rng.choice(_KO_TAILS)} {rng.choice(_KO_OBJECTS)} "
            f"{rng.choice(_KO_VERBS)}. 이용자는 {count}명이다.")


def _words(text: str, lang: str) -> int:
    # Chinese has no spaces: count ~1.5 characters as a word, as tokenisers roughly do.
    return int(len(text) / 1.5) if lang == "zh" else len(text.split())


def _passage(lang: str, rng: random.Random) -> str:
    target = rng.randint(60, 150)
    sentences: list[str] = []
    while _words(("" if lang == "zh" else " ").join(sentences), lang) < target:
        sentences.append(_sentence(lang, rng))
    return ("" if lang == "zh" else " ").join(sentences)


def _split(passage: str, lang: str) -> list[str]:
    if lang == "zh":
        return [s + "。" for s in passage.split("。") if s]
    return [s.strip() + "." for s in passage.split(".") if s.strip()]


def _mutate_number(sentence: str, rng: random.Random) -> str:
    import re

    return re.sub(r"\d+", lambda m: str(int(m.group()) + rng.randint(1, 9)), sentence, count=1)


def make_rows(n: int, seed: int = 0) -> pl.DataFrame:
    """``n`` rows with conversation_id, language, input, output, context (list of passages)."""
    rng = random.Random(seed)
    langs = ["en", "zh", "ko"]
    rows = []
    for i in range(n):
        lang = langs[i % 3]
        passages = [_passage(lang, rng) for _ in range(rng.randint(3, 8))]
        pool = [s for p in passages for s in _split(p, lang)]
        sentences = []
        for _ in range(rng.randint(3, 6)):
            roll = rng.random()
            base = rng.choice(pool)
            if roll < 0.6:
                sentences.append(base)
            elif roll < 0.8:
                sentences.append(_mutate_number(base, rng))
            else:
                sentences.append(_sentence(lang, rng))
        joiner = "" if lang == "zh" else " "
        rows.append({
            "conversation_id": f"rag-{seed}-{i:07d}",
            "language": lang,
            "input": {"en": "What happened?", "zh": "发生了什么？", "ko": "무슨 일이 있었나요?"}[lang],
            "output": joiner.join(sentences),
            "context": passages,
        })
    return pl.DataFrame(rows, schema={"conversation_id": pl.String, "language": pl.String, "input": pl.String,
                                      "output": pl.String, "context": pl.List(pl.String)})


if __name__ == "__main__":
    frame = make_rows(6)
    for row in frame.iter_rows(named=True):
        print(row["language"], len(row["context"]), row["output"][:160])

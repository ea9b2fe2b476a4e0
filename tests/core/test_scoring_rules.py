"""Every scoring rule of SPEC §3 through the scripted judge, in English, Chinese and Korean."""

from __future__ import annotations

import math

import polars as pl
import pytest

from faithfulness_pipeline import ScoringConfig, score_frame
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.scoring import round_half_up
from faithfulness_pipeline.testing.marker_judge import MarkerJudge

# Per language: a supported sentence, a contradicted one, an unsupported one, a hedged supported one.
SENTENCES = {
    "en": ("The tower is 330 metres tall.", "It opened in 1999 [C].", "It is painted gold [U].",
           "It may be the tallest [H]."),
    "zh": ("铁塔高330米。", "它于1999年开放[C]。", "它被漆成金色[U]。", "它可能是最高的[H]。"),
    "ko": ("탑의 높이는 330미터이다.", "1999년에 개장했다[C].", "금색으로 칠해져 있다[U].",
           "아마 가장 높을 것이다[H]."),
}
LANGS = list(SENTENCES)
CONTEXT = ["reference passage"]


def _score(answers: list[str | None], contexts: list[list[str]] | None = None, **config: object) -> pl.DataFrame:
    df = pl.DataFrame({
        "conversation_id": [f"r{i}" for i in range(len(answers))],
        "output": answers,
        "context": contexts if contexts is not None else [CONTEXT] * len(answers),
    }, schema={"conversation_id": pl.String, "output": pl.String, "context": pl.List(pl.String)})
    return score_frame(df, MarkerJudge(), ScoringConfig(**config))  # type: ignore[arg-type]


def _answer(lang: str, supported: int = 0, contradicted: int = 0, unsupported: int = 0, hedged: int = 0) -> str:
    s, c, u, h = SENTENCES[lang]
    sep = "" if lang == "zh" else " "
    return sep.join([s] * supported + [c] * contradicted + [u] * unsupported + [h] * hedged)


def test_round_half_up_matches_mastra_not_python_round() -> None:
    assert round(1 / 8, 2) == 0.12  # the trap Mastra's rounding avoids
    assert round_half_up(1 / 8) == 0.13
    assert round_half_up(5 / 8) == 0.63
    assert round_half_up(7 / 8) == 0.88
    assert round_half_up(1 / 3) == 0.33
    assert round_half_up(2 / 3) == 0.67


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize(("supported", "bad", "faith", "halluc"), [
    (1, 7, 0.13, 0.88), (5, 3, 0.63, 0.38), (7, 1, 0.88, 0.13), (3, 0, 1.0, 0.0), (0, 2, 0.0, 1.0),
])
def test_scores_are_ratios_rounded_half_up(lang: str, supported: int, bad: int, faith: float, halluc: float) -> None:
    row = _score([_answer(lang, supported=supported, unsupported=bad)]).row(0, named=True)
    assert row["n_claims"] == supported + bad
    assert row["faithfulness_score"] == faith
    assert row["hallucination_score"] == halluc
    assert row["status"] == "ok"


@pytest.mark.parametrize("lang", LANGS)
def test_vocabulary_mapping(lang: str) -> None:
    row = _score([_answer(lang, supported=2, contradicted=1, unsupported=1, hedged=1)]).row(0, named=True)
    assert (row["n_supported"], row["n_contradicted"], row["n_unsupported"], row["n_speculative"]) == (3, 1, 1, 1)
    # faithfulness: yes = supported and not hedged (2 of 5); hallucination: contradicted + unsupported (2 of 5)
    assert row["faithfulness_score"] == 0.4
    assert row["hallucination_score"] == 0.4


@pytest.mark.parametrize("lang", LANGS)
def test_hedged_supported_claim_is_not_a_hallucination_but_is_unsure(lang: str) -> None:
    row = _score([_answer(lang, hedged=1)]).row(0, named=True)
    assert row["hallucination_score"] == 0.0
    assert row["faithfulness_score"] == 0.0


@pytest.mark.parametrize("scale", [1, 10, 100, 2.5])
def test_scale_multiplies_before_rounding(scale: float) -> None:
    row = _score([_answer("en", supported=1, unsupported=2)], scale=scale).row(0, named=True)
    assert row["faithfulness_score"] == round_half_up(1 / 3 * scale)
    assert row["hallucination_score"] == round_half_up(2 / 3 * scale)


@pytest.mark.parametrize("scale", [0, -1, math.inf, math.nan])
def test_bad_scale_is_a_clear_error(scale: float) -> None:
    with pytest.raises(ConfigError, match="scale must be a finite number > 0"):
        ScoringConfig(scale=scale)


@pytest.mark.parametrize("answer", ["", "   ", None])
def test_empty_answer_scores_zero_with_no_call(answer: str | None) -> None:
    judge = MarkerJudge()
    df = pl.DataFrame({"output": [answer], "context": [CONTEXT]}, schema={"output": pl.String,
                                                                        "context": pl.List(pl.String)})
    row = score_frame(df, judge).row(0, named=True)
    assert (row["hallucination_score"], row["faithfulness_score"], row["n_claims"]) == (0.0, 0.0, 0)
    assert row["status"] == "ok" and row["llm_calls"] == 0
    assert judge.extract_calls == [] and judge.verdict_calls == []


def test_zero_claims_null_policy() -> None:
    row = _score(["Is it tall?"], zero_claims="null").row(0, named=True)  # a question makes no claim
    assert row["n_claims"] == 0
    assert row["hallucination_score"] is None and row["faithfulness_score"] is None
    assert "no claims" in row["hallucination_reason"]


@pytest.mark.parametrize("lang", LANGS)
def test_empty_context_short_circuits_to_unsupported_without_a_verdict_call(lang: str) -> None:
    judge = MarkerJudge()
    df = pl.DataFrame({"output": [_answer(lang, supported=2)], "context": [[]]},
                      schema={"output": pl.String, "context": pl.List(pl.String)})
    row = score_frame(df, judge).row(0, named=True)
    assert row["hallucination_score"] == 1.0 and row["faithfulness_score"] == 0.0
    assert row["n_unsupported"] == 2
    assert judge.verdict_calls == []
    assert len(judge.extract_calls) == 1


def test_failed_rows_are_errors_with_null_scores_never_zero() -> None:
    df = pl.DataFrame({"conversation_id": ["a", "b", "c"], "output": [_answer("en", supported=2)] * 3,
                       "context": [CONTEXT] * 3})
    judge = MarkerJudge(fail_extract={"a"}, fail_verdicts={"b"})
    out = score_frame(df, judge)
    assert out.height == 3
    a, b, c = out.rows(named=True)
    for row, step in ((a, "claim extraction"), (b, "claim verdicts")):
        assert row["status"] == "error"
        assert row["error"].startswith(f"{step} failed")
        assert row["hallucination_score"] is None and row["faithfulness_score"] is None
        assert row["n_claims"] is None
    assert b["claims"] == list(c["claims"])  # the extraction that worked is kept
    assert c["status"] == "ok" and c["faithfulness_score"] == 1.0


@pytest.mark.parametrize("lang", LANGS)
def test_reasons_name_the_bad_claims_and_agree_with_the_score(lang: str) -> None:
    row = _score([_answer(lang, supported=2, contradicted=1, unsupported=1)]).row(0, named=True)
    s, c, u, _ = SENTENCES[lang]
    assert row["hallucination_reason"].startswith("The score is 0.5 because 2 of 4 claims")
    assert row["faithfulness_reason"].startswith("The score is 0.5 because 2 of 4 claims")
    for reason in (row["hallucination_reason"], row["faithfulness_reason"]):
        assert c.rstrip(".。") in reason and u.rstrip(".。") in reason
        assert s.rstrip(".。") not in reason


def test_published_verdicts_carry_claim_and_evidence_text() -> None:
    df = pl.DataFrame({"output": ["A fact. Wrong [C]."], "context": [["passage zero", "passage one"]]})
    verdicts = score_frame(df, MarkerJudge()).row(0, named=True)["verdicts"]
    assert [v["claim"] for v in verdicts] == ["A fact.", "Wrong [C]."]
    assert [v["verdict"] for v in verdicts] == ["supported", "contradicted"]
    assert verdicts[0]["evidence"] == "passage zero"  # the judge returned index 0


def test_usage_is_summed_over_both_steps() -> None:
    row = _score([_answer("en", supported=1)]).row(0, named=True)
    assert row["llm_calls"] == 1.0 and row["prompt_tokens"] == 200 and row["completion_tokens"] == 20
    assert row["cost_usd"] == pytest.approx(0.002)


@pytest.mark.parametrize(("claim", "quoted"), [
    ("It is  painted\tgold.", '"It is painted gold." (not found in the context)'),
    ("它\u3000被漆成\n金色。", '"它 被漆成 金色。" (not found in the context)'),
    ("금색으로 칠해져 있다.", '"금색으로 칠해져 있다." (not found in the context)'),
    ("  plain  ", '"plain" (not found in the context)'),
])
def test_reasons_quote_claims_with_whitespace_folded_to_single_spaces(claim: str, quoted: str) -> None:
    from faithfulness_pipeline.core import schema as S
    from faithfulness_pipeline.core.reasons import add_reasons

    verdict = {"claim": claim, "verdict": "unsupported", "speculative": False, "reason": None, "evidence": None}
    df = pl.DataFrame({
        "verdicts": [[verdict]], "n_claims": [1], "n_contradicted": [0], "n_unsupported": [1],
        "hallucination_score": [1.0], "faithfulness_score": [0.0], S.ERROR: [None],
    }, schema_overrides={"verdicts": pl.List(S.VERDICT_STRUCT), S.ERROR: pl.String})
    reason = add_reasons(df).row(0, named=True)["hallucination_reason"]
    assert quoted in reason, reason

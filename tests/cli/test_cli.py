"""The command line, run as a real subprocess on real Parquet files (offline judge, no key, no network)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core.schema import CLAIM_TABLE_SCHEMA, SCORED_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    return subprocess.run(
        [sys.executable, "-m", "faithfulness_pipeline.cli", *args],
        capture_output=True, text=True, env=env, cwd=cwd or ROOT, timeout=120, check=False,
    )


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("cli")
    result = run_cli("score", str(SAMPLE / "flat"), "-o", str(out / "scored.parquet"),
                     "--claims-out", str(out / "claims.parquet"), "--mastra-out", str(out / "mastra.jsonl"))
    return out, result


def test_scores_sample_data_with_every_spec_column(sample_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, result = sample_run
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(out / "scored.parquet")
    source = pl.read_parquet(SAMPLE / "flat" / "conversations.parquet")
    assert scored.height == source.height
    assert scored.columns[: source.width] == source.columns  # passthrough first, in order
    for name, dtype in SCORED_COLUMNS.items():
        assert scored.schema[name] == dtype, name
    assert scored["row_key"].to_list() == source["conversation_id"].to_list()
    assert set(scored["status"]) == {"ok"}
    assert set(scored["judge_model"].to_list()) == {scored["judge_model"][0]}
    assert "offline" in scored["judge_model"][0]


def test_claims_and_mastra_outputs(sample_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, _ = sample_run
    scored = pl.read_parquet(out / "scored.parquet")
    claims = pl.read_parquet(out / "claims.parquet")
    assert dict(claims.schema) == CLAIM_TABLE_SCHEMA
    assert claims.height == int(scored["n_claims"].sum())
    records = [json.loads(line) for line in (out / "mastra.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(records) == 2 * scored.height
    assert {r["scorerId"] for r in records} == {"hallucination-scorer", "faithfulness-scorer"}
    first = records[0]
    assert set(first) == {"runId", "scorerId", "score", "reason", "preprocessStepResult", "analyzeStepResult"}
    assert first["preprocessStepResult"]["claims"] == scored["claims"][0].to_list()
    vocab = {v["verdict"] for r in records if r["scorerId"] == "faithfulness-scorer"
             for v in r["analyzeStepResult"]["verdicts"]}
    assert vocab <= {"yes", "no", "unsure"}


def test_summary_is_printed(sample_run: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    out, result = sample_run
    assert "scored 17 rows" in result.stderr
    assert "mean hallucination" in result.stderr and "errors: 0" in result.stderr
    # where the results came from, as the table says: the offline judge made them, nothing was billed
    scored = pl.read_parquet(out / "scored.parquet")
    counts = dict(scored.get_column("result_source").value_counts().iter_rows())
    assert set(counts) <= {"offline", "duplicate", "none"} and counts.get("offline", 0) > 0
    assert f"{counts['offline']} by the offline judge" in result.stderr
    assert "billed this run: 0 requests, 0 prompt + 0 completion tokens, $0.0000" in result.stderr
    assert scored.get_column("billed_cost_usd").sum() == 0
    # the run's id, printed, is every row's scoring_run_id
    printed = re.search(r"scoring run: ([0-9a-f]{32}) ", result.stderr)
    assert printed is not None, result.stderr
    assert set(scored.get_column("scoring_run_id")) == {printed.group(1)}


def test_a_sampled_run_says_what_it_judged_and_writes_every_row(
    sample_run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    full, _ = sample_run
    result = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "o.parquet"), "--sample-rate", "0.5")
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(tmp_path / "o.parquet")
    judged = scored.filter(pl.col("status") != "not_sampled")
    assert scored.height == 17 and 0 < judged.height < 17
    assert f"sample: judged {judged.height} of 17 rows (sample_rate 0.5" in result.stderr
    assert f"not sampled: {17 - judged.height}" in result.stderr
    # the judged rows score as in the full run; the dry run prices only them
    keep = ["row_key", "claims", "hallucination_score", "faithfulness_score", "status"]
    reference = pl.read_parquet(full / "scored.parquet").filter(pl.col("row_key").is_in(judged.get_column("row_key").implode()))
    assert judged.select(keep).sort("row_key").equals(reference.select(keep).sort("row_key"))
    dry = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "d.parquet"), "--sample-rate", "0.5", "--dry-run")
    assert f"({judged.height} rows in the sample)" in dry.stdout + dry.stderr


def test_a_capped_sample_judges_at_most_the_cap_per_model(tmp_path: Path) -> None:
    result = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "o.parquet"), "--sample-max-rows", "3")
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(tmp_path / "o.parquet")
    judged = scored.filter(pl.col("status") != "not_sampled").group_by("model").len()
    assert judged.get_column("len").to_list() == [3, 3], judged
    assert "sample: judged 6 of 17 rows (sample_rate 1, at most 3 per model" in result.stderr


@pytest.mark.parametrize("rate", ["0", "1.5"])
def test_a_sample_rate_outside_zero_to_one_is_one_line(tmp_path: Path, rate: str) -> None:
    result = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "o.parquet"), "--sample-rate", rate)
    assert result.returncode == 2 and "sample_rate" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_chat_sample_with_tool_results(tmp_path: Path) -> None:
    result = run_cli("score", str(SAMPLE / "chat" / "conversations.parquet"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(tmp_path / "o.parquet").sort("row_key")
    weather = scored.filter(pl.col("row_key") == "chat-000").row(0, named=True)
    assert weather["output"] == "It is 14 °C in Paris with light rain."
    assert weather["verdicts"][0]["evidence"].startswith('{"tool":"get_weather"')
    no_answer = scored.filter(pl.col("row_key") == "chat-008").row(0, named=True)
    assert no_answer["n_claims"] == 0 and no_answer["status"] == "ok"


def test_glob_input(tmp_path: Path) -> None:
    result = run_cli("score", str(SAMPLE / "*" / "flat*"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 2 and "matches no files" in result.stderr
    result = run_cli("score", str(SAMPLE / "fl*" / "*.parquet"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("lang", ["en", "zh-TW", "zh-CN", "ko"])
def test_one_copied_sentence_of_eight(tmp_path: Path, lang: str) -> None:
    context, copied, others = {
        "en": ("The museum opens at nine every morning.", "The museum opens at nine every morning.",
               ["Penguins waddle across icy beaches.", "Volcanic rocks cool slowly underground.",
                "Jazz drummers improvise complex rhythms.", "Submarines dive beneath polar glaciers.",
                "Bakers knead sourdough before sunrise.", "Hurricanes gather strength over warm oceans.",
                "Violinists tune strings carefully."]),
        "zh-TW": ("博物館每天早上九點開門。", "博物館每天早上九點開門。",
                  ["企鵝在冰灘上搖擺。", "火山岩在地底緩慢冷卻。", "爵士鼓手即興演奏節奏。", "潛艇潛入極地冰川下。",
                   "麵包師傅清晨揉麵團。", "颶風在溫暖洋面增強。", "小提琴手仔細調弦。"]),
        "zh-CN": ("博物馆每天早上九点开门。", "博物馆每天早上九点开门。",
                  ["企鹅在冰滩上摇摆。", "火山岩在地底缓慢冷却。", "爵士鼓手即兴演奏节奏。", "潜艇潜入极地冰川下。",
                   "面包师傅清晨揉面团。", "飓风在温暖洋面增强。", "小提琴手仔细调弦。"]),
        "ko": ("박물관은 매일 아침 아홉 시에 문을 연다.", "박물관은 매일 아침 아홉 시에 문을 연다.",
               ["펭귄이 얼음 해변을 뒤뚱거린다.", "화산암이 지하에서 천천히 식는다.", "재즈 드러머가 리듬을 즉흥 연주한다.",
                "잠수함이 극지 빙하 아래로 잠수한다.", "제빵사가 새벽에 반죽을 치댄다.", "허리케인이 따뜻한 바다에서 강해진다.",
                "바이올리니스트가 현을 조율한다."]),
    }[lang]
    sep = "" if lang.startswith("zh") else " "
    answer = sep.join([copied, *others])
    pl.DataFrame({"output": [answer, "", "Something is claimed here."],
                  "context": [[context], [context], []]}).write_parquet(tmp_path / "in.parquet")
    result = run_cli("score", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 0, result.stderr
    eight, empty, no_context = pl.read_parquet(tmp_path / "o.parquet").rows(named=True)
    assert eight["n_claims"] == 8
    assert (eight["faithfulness_score"], eight["hallucination_score"]) == (0.13, 0.88)
    assert (empty["faithfulness_score"], empty["hallucination_score"], empty["n_claims"]) == (0.0, 0.0, 0)
    assert (no_context["hallucination_score"], no_context["faithfulness_score"]) == (1.0, 0.0)


def test_missing_answer_column_fails_and_writes_nothing(tmp_path: Path) -> None:
    pl.DataFrame({"reply": ["x"], "docs": [["y"]]}).write_parquet(tmp_path / "in.parquet")
    result = run_cli("score", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "o.parquet"),
                     "--claims-out", str(tmp_path / "c.parquet"))
    assert result.returncode == 2
    assert "reply (String)" in result.stderr and "docs (List(String))" in result.stderr
    assert "--output-col" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.parquet"]


def test_mapped_columns_work(tmp_path: Path) -> None:
    pl.DataFrame({"reply": ["Paris is in France."], "docs": [["Paris is in France."]]}).write_parquet(
        tmp_path / "in.parquet")
    result = run_cli("score", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "o.parquet"),
                     "--output-col", "reply", "--context-col", "docs")
    assert result.returncode == 0, result.stderr
    assert pl.read_parquet(tmp_path / "o.parquet")["faithfulness_score"].to_list() == [1.0]


def test_empty_table_gives_empty_scored_table_with_full_schema(tmp_path: Path) -> None:
    pl.DataFrame(schema={"output": pl.String, "context": pl.List(pl.String)}).write_parquet(tmp_path / "in.parquet")
    result = run_cli("score", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(tmp_path / "o.parquet")
    assert scored.height == 0
    assert all(scored.schema[n] == d for n, d in SCORED_COLUMNS.items())


def test_corrupt_parquet_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really parquet")
    result = run_cli("score", str(tmp_path / "bad.parquet"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "Traceback" not in result.stderr


def test_a_file_among_several_that_cannot_be_scored_is_named(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    pl.DataFrame({"output": ["a"]}).write_parquet(tmp_path / "d" / "a.parquet")
    pl.DataFrame({"output": [1]}).write_parquet(tmp_path / "d" / "b.parquet")
    result = run_cli("score", str(tmp_path / "d"), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "b.parquet" in result.stderr and "'output'" in result.stderr and "Int64" in result.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_bad_scale(tmp_path: Path) -> None:
    result = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "o.parquet"), "--scale", "0")
    assert result.returncode == 2 and "--scale" in result.stderr and "greater than 0" in result.stderr


def test_scale_and_zero_claim_policy(tmp_path: Path) -> None:
    result = run_cli("score", str(SAMPLE / "flat"), "-o", str(tmp_path / "o.parquet"), "--scale", "10",
                     "--zero-claims", "null")
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(tmp_path / "o.parquet")
    assert scored["faithfulness_score"].max() == 10.0
    assert scored.filter(pl.col("n_claims") == 0)["faithfulness_score"].null_count() == 2

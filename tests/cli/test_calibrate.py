"""``faithfulness-pipeline calibrate`` as users run it: real subprocesses, real Parquet files, and for the
comparison of two judges the offline judge against the litellm judge on the fake server (real HTTP)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from sklearn.metrics import balanced_accuracy_score, cohen_kappa_score

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

ROOT = Path(__file__).resolve().parents[2]
LABELLED = ROOT / "sample_labelled" / "conversations_labelled.parquet"
DEV = ROOT.parent / "shared" / "datasets" / "dev" / "conversations_labeled.parquet"
KEY = "sk-calibrate-test-2c9d"


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, check=False, cwd=ROOT)


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedJudge(grounded=True), api_key=KEY) as srv:
        yield srv


def test_calibrate_scores_the_labelled_rows_and_agrees_with_scikit_learn_on_the_scores_it_wrote(
    tmp_path: Path,
) -> None:
    scored = _run("score", str(LABELLED), "-o", str(tmp_path / "scored.parquet"))
    assert scored.returncode == 0, scored.stderr
    assert "note: scored by the offline baseline judge" in scored.stderr  # the fallback is said in the summary
    out = tmp_path / "calibration.parquet"
    result = _run("calibrate", "--labelled", str(LABELLED), "-o", str(out), "--bootstrap", "200")
    assert result.returncode == 0, result.stderr
    assert "| offline-lexical-v1 | offline-lexical-2 | **all** | 21 |" in result.stdout
    assert "note: offline-lexical-v1: scored by the offline baseline judge" in result.stdout
    # prose fits a terminal; only the markdown table (to be pasted as it is) is wider (issue 54: 330 characters)
    assert max(len(line) for line in result.stdout.splitlines() if not line.startswith("|")) <= 120
    table = pl.read_parquet(out)
    groups = set(table.select("group_by", "group").rows())
    assert {("all", "all"), ("language", "en"), ("language", "zh"), ("language", "ko"), ("source", "support"),
            ("source", "facts")} <= groups
    assert {g for by, g in groups if by == "model"} == {"gpt-4o-mini", "claude-3-5-haiku"}
    # the overall numbers are those of the labels against the scores the score command writes
    rows = pl.read_parquet(tmp_path / "scored.parquet").sort("conversation_id")
    labels = rows.get_column("label_hallucinated").to_list()
    predicted = (rows.get_column("hallucination_score") > 0.5).to_list()
    overall = table.filter(pl.col("group_by") == "all").row(0, named=True)
    assert overall["n"] == 21
    assert overall["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(labels, predicted))
    assert overall["kappa"] == pytest.approx(cohen_kappa_score(labels, predicted))
    assert overall["balanced_accuracy_low"] <= overall["balanced_accuracy"] <= overall["balanced_accuracy_high"]
    # seeded: a second run gives the same intervals
    again = _run("calibrate", "--labelled", str(LABELLED), "-o", str(tmp_path / "again.parquet"), "--bootstrap", "200")
    assert again.returncode == 0
    ignored = ["calibrated_at"]
    assert pl.read_parquet(tmp_path / "again.parquet").drop(ignored).equals(table.drop(ignored))


def test_two_judges_on_the_same_labelled_rows_side_by_side_with_the_rows_where_they_disagree(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    offline, llm = tmp_path / "offline.parquet", tmp_path / "llm.parquet"
    assert _run("score", str(LABELLED), "-o", str(offline), "--quiet").returncode == 0
    llm_run = _run("score", str(LABELLED), "-o", str(llm), "--quiet", "--model", "openai/fake-judge",
                   "--api-base", server.base_url, "--api-key-env", "FP_TEST_KEY", env={"FP_TEST_KEY": KEY})
    assert llm_run.returncode == 0, llm_run.stderr
    table_path, split_path = tmp_path / "both.parquet", tmp_path / "disagree.parquet"
    result = _run("calibrate", "--labelled", str(LABELLED), "--scored", str(offline), "--scored", str(llm),
                  "-o", str(table_path), "--disagreements-out", str(split_path), "--bootstrap", "100")
    assert result.returncode == 0, result.stderr
    table = pl.read_parquet(table_path)
    assert table.filter(pl.col("group_by") == "all").get_column("judge").to_list() == [
        "offline-lexical-v1", "openai/fake-judge"]
    # the disagreements are exactly the rows whose predictions differ between the two scored tables
    a = pl.read_parquet(offline).select("conversation_id", (pl.col("hallucination_score") > 0.5).alias("a"))
    b = pl.read_parquet(llm).select("conversation_id", (pl.col("hallucination_score") > 0.5).alias("b"))
    expected = set(a.join(b, on="conversation_id").filter(pl.col("a") != pl.col("b")).get_column("conversation_id"))
    assert expected, "the two judges should disagree somewhere on the sample"
    split = pl.read_parquet(split_path)
    assert set(split.get_column("conversation_id")) == expected and split.height == 2 * len(expected)
    assert f"the judges disagree on {len(expected)} of 21 labelled rows" in result.stdout
    # and the difference in balanced accuracy, paired on the same rows, is in the same table
    first, second = table.filter(pl.col("group_by") == "all").iter_rows(named=True)
    assert first["balanced_accuracy_vs_first"] is None
    assert second["balanced_accuracy_vs_first"] == pytest.approx(
        second["balanced_accuracy"] - first["balanced_accuracy"])
    assert second["balanced_accuracy_vs_first_low"] <= second["balanced_accuracy_vs_first"] <= second[
        "balanced_accuracy_vs_first_high"]
    assert "balanced accuracy of openai/fake-judge minus offline-lexical-v1:" in result.stdout


def test_a_judge_below_the_floor_fails_when_asked_to(tmp_path: Path) -> None:
    result = _run("calibrate", "--labelled", str(LABELLED), "--bootstrap", "0", "--agreement-floor", "0.99",
                  "--below-floor", "fail")
    assert result.returncode == 1
    assert "below the agreement floor: offline-lexical-v1: balanced accuracy" in result.stdout
    warned = _run("calibrate", "--labelled", str(LABELLED), "--bootstrap", "0", "--agreement-floor", "0.99")
    assert warned.returncode == 0 and "below the agreement floor" in warned.stdout


def test_bad_calibration_input_is_one_line_and_status_2(tmp_path: Path) -> None:
    unlabelled = tmp_path / "unlabelled.parquet"
    pl.read_parquet(LABELLED).drop("label_hallucinated", "label_faithfulness").write_parquet(unlabelled)
    partial = tmp_path / "partial.parquet"
    pl.read_parquet(LABELLED).head(5).write_parquet(tmp_path / "five.parquet")
    assert _run("score", str(tmp_path / "five.parquet"), "-o", str(partial), "--quiet").returncode == 0
    cases = [
        (["calibrate"], "--labelled"),
        (["calibrate", "--labelled", str(unlabelled)], "label_hallucinated"),
        (["calibrate", "--labelled", str(tmp_path / "absent.parquet")], "absent.parquet"),
        (["calibrate", "--labelled", str(LABELLED), "--scored", str(partial)], "16 labelled row(s) have no row"),
        (["calibrate", "--labelled", str(LABELLED), "--scored", str(LABELLED)], "is not a scored table"),
    ]
    for args, needle in cases:
        result = _run(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert needle in result.stderr and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.skipif(not DEV.exists(), reason=f"the shared labelled dev set is absent ({DEV}); nothing to calibrate on")
def test_calibrate_on_the_shared_dev_set_reports_every_language_and_source(tmp_path: Path) -> None:
    out = tmp_path / "dev.parquet"
    # the dev set's own claim labels, reshaped at run time into a per-claim table (never stored in the repo)
    claims = (
        pl.read_parquet(DEV, columns=["conversation_id", "turn", "label_claims"])
        .explode("label_claims").drop_nulls("label_claims")
        .select("conversation_id", "turn", pl.col("label_claims").struct.field("claim"),
                pl.when(pl.col("label_claims").struct.field("supported")).then(pl.lit("supported"))
                .otherwise(pl.lit("unsupported")).alias("label_verdict"))
    )
    claims.write_parquet(tmp_path / "claims.parquet")
    result = _run("calibrate", "--labelled", str(DEV), "-o", str(out), "--bootstrap", "100",
                  "--hallucination-threshold", "0", "--claim-labelled", str(tmp_path / "claims.parquet"))
    assert result.returncode == 0, result.stderr
    table = pl.read_parquet(out)
    dev = pl.read_parquet(DEV, columns=["language", "source", "label_hallucinated"])
    for column in ("language", "source"):
        want = dict(dev.group_by(column).len().rows())
        got = dict(table.filter(pl.col("group_by") == column).select("group", "n").rows())
        assert got == want
    overall = table.filter(pl.col("group_by") == "all").row(0, named=True)
    assert overall["hallucinated"] == int(dev.get_column("label_hallucinated").sum())
    assert 0.5 < overall["balanced_accuracy"] < 1
    assert overall["claims_labelled"] == claims.height and 0 < overall["claims_matched"] <= claims.height


def test_calibrate_scores_the_labelled_rows_with_the_llm_judge_the_flags_name(
    server: FakeLLMServer, tmp_path: Path
) -> None:
    out = tmp_path / "llm.parquet"
    result = _run("calibrate", "--labelled", str(LABELLED), "-o", str(out), "--bootstrap", "0", "--model",
                  "openai/fake-judge", "--api-base", server.base_url, "--api-key-env", "FP_TEST_KEY",
                  env={"FP_TEST_KEY": KEY})
    assert result.returncode == 0, result.stderr
    assert server.stats().requests > 0
    assert "judges: openai/fake-judge" in result.stdout and "offline baseline" not in result.stdout
    assert KEY not in result.stdout + result.stderr
    overall = pl.read_parquet(out).filter(pl.col("group_by") == "all").row(0, named=True)
    assert overall["judge_model"] == "openai/fake-judge" and overall["n"] == 21

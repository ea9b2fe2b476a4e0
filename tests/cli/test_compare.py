"""`faithfulness-pipeline compare` on real Parquet files: two scorings of the sample conversations (en, zh, ko)
paired by row key, the groups of one table with --by, the comparison and the flips written as Parquet, and
bad input refused in one line."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from faithfulness_pipeline import score_frame
from tests.cli.test_cli import SAMPLE, run_cli
from tests.doc_blocks import activated, block, run_shell
from tests.reliability.support import child_env


@pytest.fixture(scope="module")
def scorings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sample scored as it is (baseline), and with every English answer made to contradict its context
    (candidate): the same rows, so they pair."""
    folder = tmp_path_factory.mktemp("compare")
    rows = pl.concat([pl.read_parquet(SAMPLE / "flat")] * 3).with_row_index("copy").with_columns(
        (pl.col("conversation_id") + "-" + pl.col("copy").cast(pl.String)).alias("conversation_id")).drop("copy")
    baseline = score_frame(rows)
    broken = rows.with_columns(pl.when(pl.col("language") == "en").then(pl.lit("The moon is made of green cheese."))
                               .otherwise(pl.col("output")).alias("output"))
    candidate = score_frame(broken)
    baseline.write_parquet(folder / "baseline.parquet")
    candidate.write_parquet(folder / "candidate.parquet")
    return folder / "baseline.parquet", folder / "candidate.parquet"


def test_two_scorings_pair_by_row_key_and_the_english_change_is_larger_than_noise(
    scorings: tuple[Path, Path], tmp_path: Path
) -> None:
    baseline, candidate = scorings
    out, flips = tmp_path / "comparison.parquet", tmp_path / "flips.parquet"
    result = run_cli("compare", str(baseline), str(candidate), "-o", str(out), "--flips-out", str(flips),
                     "--groups", "language")
    assert result.returncode == 0, result.stderr
    assert "51 row(s) paired on row_key" in result.stdout
    table = pl.read_parquet(out)
    assert set(table.get_column("group")) == {"all", "en", "ko", "zh-CN", "zh-TW"}
    def verdict(group: str) -> str:
        return table.filter((pl.col("group") == group) & (pl.col("score") == "faithfulness")).item(0, "verdict")
    assert verdict("en") == "larger than noise"  # 21 answers made up
    assert verdict("ko") == "within noise"  # unchanged: 12 pairs, no difference
    assert verdict("zh-CN") == "too few rows"  # 9 pairs
    crossed = pl.read_parquet(flips)
    assert crossed.height and set(crossed.get_column("row_key")) <= set(pl.read_parquet(baseline).get_column("row_key"))
    # the line says how many it lists of how many crossed (issue 54: "8 rows crossed" listed 5 without a word)
    flips_at = result.stdout.index("crossed the hallucination threshold")
    listed = [line for line in result.stdout[flips_at:].splitlines()[1:] if line.startswith("  ") and " -> " in line]
    assert crossed.height > len(listed) == 5
    assert (f"{crossed.height} row(s) crossed the hallucination threshold, the worst 5 shown (--flips-out writes "
            "them all):") in result.stdout
    # the claims and verdicts of both sides, read for the flipped rows only (the comparison itself never reads them)
    for side, path in (("baseline", baseline), ("candidate", candidate)):
        source = pl.read_parquet(path).select("row_key", "claims", "verdicts")
        shown = crossed.select("row_key", pl.col(f"claims_{side}_table").alias("claims"),
                               pl.col(f"verdicts_{side}_table").alias("verdicts"))
        assert_frame_equal(shown, source.join(shown.select("row_key"), on="row_key").sort("row_key"),
                           check_row_order=False)


def test_the_groups_of_one_table_compare_against_a_named_baseline(scorings: tuple[Path, Path]) -> None:
    baseline, _ = scorings
    result = run_cli("compare", str(baseline), "--by", "model", "--baseline-group", "gpt-4o-mini")
    assert result.returncode == 0, result.stderr
    assert "model=claude-3-5-haiku vs gpt-4o-mini" in result.stdout and "unpaired" not in result.stdout.split("\n")[0]


@pytest.mark.parametrize(("extra", "message"), [
    (["--pair-on", "input_text"], "has no column 'input_text' to pair on"),
    (["--by", "model"], "give BASELINE and CANDIDATE, or BASELINE and --by COLUMN"),
])
def test_bad_requests_are_refused_in_one_line(scorings: tuple[Path, Path], extra: list[str], message: str) -> None:
    baseline, candidate = scorings
    result = run_cli("compare", str(baseline), str(candidate), *extra)
    assert result.returncode == 2 and message in result.stderr


def test_a_table_that_is_not_scored_is_refused(tmp_path: Path) -> None:
    result = run_cli("compare", str(SAMPLE / "flat"), str(SAMPLE / "flat"))
    assert result.returncode == 2 and "no hallucination_score" in result.stderr.strip().splitlines()[-1]


def test_the_documented_command_runs_as_printed(scorings: tuple[Path, Path], tmp_path: Path) -> None:
    baseline, candidate = scorings
    (tmp_path / "out").mkdir()
    shutil.copy(baseline, tmp_path / "out" / "before.parquet")
    shutil.copy(candidate, tmp_path / "out" / "after.parquet")
    done = run_shell(block("docs/compare.md", "bash", "compare out/before.parquet"), tmp_path, activated(child_env()))
    assert done.returncode == 0, done.stderr[-3000:]
    assert pl.read_parquet(tmp_path / "out" / "comparison.parquet").height > 0
    assert (tmp_path / "out" / "flips.parquet").exists() and "larger than noise" in done.stdout


def test_two_judges_on_labelled_rows_show_their_calibration_beside_their_agreement(tmp_path: Path) -> None:
    """The labelled sample scored twice (as it is, and with every English answer made up): with --labelled,
    each table's calibration against the people's labels is printed beside the comparison's kappa."""
    labelled = Path(__file__).resolve().parents[2] / "sample_labelled" / "conversations_labelled.parquet"
    rows = pl.read_parquet(labelled).drop("label_hallucinated", "label_faithfulness")
    score_frame(rows).write_parquet(tmp_path / "a.parquet")
    made_up = rows.with_columns(pl.when(pl.col("language") == "en").then(pl.lit("The moon is made of green cheese."))
                                .otherwise(pl.col("output")).alias("output"))
    score_frame(made_up).write_parquet(tmp_path / "b.parquet")
    result = run_cli("compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), "--labelled", str(labelled),
                     "--min-rows", "5")
    assert result.returncode == 0, result.stderr
    assert "paired on row_key" in result.stdout and "kappa" in result.stdout
    assert "calibration on 21 labelled rows" in result.stdout
    assert str(tmp_path / "a.parquet") in result.stdout.split("calibration on", 1)[1]
    assert "balanced accuracy of" in result.stdout  # the second table against the first, on the people's labels
    assert "corrected by people's labels" in result.stdout  # both tables' figures, corrected by the same labels
    # the groups of one table, corrected by the labels of each group (issue 51: no longer refused)
    groups = run_cli("compare", str(tmp_path / "a.parquet"), "--by", "model", "--labelled", str(labelled))
    assert groups.returncode == 0, groups.stderr
    assert "corrected by people's labels" in groups.stdout and "labels) ->" in groups.stdout

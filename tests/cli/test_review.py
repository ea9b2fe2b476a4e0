"""`faithfulness-pipeline review sample` on real scored tables (the sample data scored offline: en, zh, ko): the
queue drawn by stratum with its probabilities, blind to the judge, the same however the tables are split and
the same as `score --review-out`; rows the judge did not score counted and never drawn; bad input refused in
one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.cli.review import _light_rows
from faithfulness_pipeline.outputs.kinds import OutputContext
from faithfulness_pipeline.outputs.review_queue import QUEUE_SCHEMA
from tests.cli.test_cli import ROOT, SAMPLE, run_cli
from tests.doc_blocks import activated, block, run_shell
from tests.reliability.support import child_env

#: What the review must not see.
JUDGED = {"claims", "verdicts", "hallucination_score", "faithfulness_score", "hallucination_reason",
          "faithfulness_reason", "n_claims", "status", "error", "output", "input", "context"}


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The flat sample data eight times over (136 answers over three days, two models, en / zh-CN / zh-TW / ko:
    16 strata, one of 16 answers and the others of 8), scored offline by the command line."""
    folder = tmp_path_factory.mktemp("review")
    rows = pl.concat([pl.read_parquet(SAMPLE / "flat").with_columns(
        (pl.col("conversation_id") + f"-{copy}").alias("conversation_id")) for copy in range(8)])
    rows.write_parquet(folder / "conversations.parquet")
    done = run_cli("score", str(folder / "conversations.parquet"), "-o", str(folder / "scored.parquet"), "--quiet")
    assert done.returncode == 0, done.stderr
    return folder / "scored.parquet"


def _strata(rows: pl.DataFrame) -> pl.DataFrame:
    """Scored answers per day x model x language, counted here from the scored table itself."""
    return (rows.filter(pl.col("status") == "ok")
            .group_by(pl.col("created_at").dt.date().alias("day"), "model", "language").len("eligible"))


def test_the_queue_is_a_stratified_sample_of_the_scored_answers(scored: Path, tmp_path: Path) -> None:
    rows = pl.read_parquet(scored)
    everything = tmp_path / "everything.parquet"
    done = run_cli("review", "sample", str(scored), "--size", "500", "-o", str(everything))
    assert done.returncode == 0, done.stderr
    queue = pl.read_parquet(everything)
    assert done.stdout.startswith("review queue: 136 of 136 scored answers drawn (size 500")
    assert queue.height == 136  # more than every scored answer: all of them, each surely
    assert (queue.get_column("inclusion_probability") == 1.0).all()
    assert set(queue.get_column("row_key")) == set(rows.get_column("row_key"))
    assert set(queue.columns) == {*QUEUE_SCHEMA, "conversation_id"} and not JUDGED & set(queue.columns)
    assert set(queue.get_column("language")) == {"en", "zh-CN", "zh-TW", "ko"}

    sample = tmp_path / "sample.parquet"
    done = run_cli("review", "sample", str(scored), "--size", "40", "-o", str(sample))
    assert done.returncode == 0, done.stderr
    small = pl.read_parquet(sample)
    assert small.height == 40
    drawn = small.group_by("day", "model", "language").agg(
        pl.len().alias("drawn"), pl.col("stratum_rows").first(), pl.col("stratum_sample").first(),
        pl.col("inclusion_probability").first())
    both = drawn.join(_strata(rows), on=["day", "model", "language"])
    assert both.height == drawn.height == 16  # every stratum gives rows
    assert (both.get_column("stratum_rows") == both.get_column("eligible")).all()
    assert (both.get_column("drawn") == both.get_column("stratum_sample")).all()
    assert (both.get_column("inclusion_probability") == both.get_column("drawn") / both.get_column("eligible")).all()
    # 2 each, and the 8 rows left in proportion: the stratum of 16 answers gets its share of 40 x 16 / 136 = 4.7
    # rounded, 5; five of the fifteen of 8 (2.35 each) get a third row
    assert (both.get_column("drawn") >= 2).all()
    assert both.filter(pl.col("eligible") == 16).get_column("drawn").to_list() == [5]
    assert sorted(both.filter(pl.col("eligible") == 8).get_column("drawn").to_list()) == [2] * 10 + [3] * 5
    assert small.equals(small.sort("stratum", "audit_point"))
    assert set(small.get_column("row_key")) < set(queue.get_column("row_key"))
    assert "review queue: 40 of 136 scored answers drawn (size 40" in done.stdout
    assert '["2026-11-24", "gpt-4o-mini", "en"]  5 of 16' in done.stdout and f"wrote {sample}" in done.stdout


def test_the_queue_is_the_same_however_the_tables_are_split_and_from_score(scored: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole.parquet"
    assert run_cli("review", "sample", str(scored), "--size", "40", "-o", str(whole)).returncode == 0
    parts = tmp_path / "parts"
    parts.mkdir()
    rows = pl.read_parquet(scored).reverse()
    rows.head(50).write_parquet(parts / "a.parquet")
    rows.slice(50).write_parquet(parts / "b.parquet")
    for spec in ([str(parts)], [str(parts / "b.parquet"), str(parts / "a.parquet")], [str(parts / "*.parquet")]):
        split = tmp_path / "split.parquet"
        done = run_cli("review", "sample", *spec, "--size", "40", "-o", str(split))
        assert done.returncode == 0, done.stderr
        assert pl.read_parquet(split).equals(pl.read_parquet(whole)), spec
    from_score = tmp_path / "from-score.parquet"
    done = run_cli("score", str(scored.parent / "conversations.parquet"), "-o", str(tmp_path / "again.parquet"),
                   "--quiet", "--review-out", str(from_score), "--review-sample-size", "40")
    assert done.returncode == 0, done.stderr
    again = pl.read_parquet(from_score)
    assert again.drop("scoring_run_id").equals(pl.read_parquet(whole).drop("scoring_run_id"))


def test_answers_the_judge_did_not_score_are_counted_and_never_drawn(scored: Path, tmp_path: Path) -> None:
    rows = pl.read_parquet(scored)
    marked = {"flat-001-0": "error", "flat-004-0": "not_sampled", "flat-007-0": "skipped"}
    statuses = rows.get_column("conversation_id").replace_strict(marked, default="ok")
    rows.with_columns(statuses.alias("status")).write_parquet(tmp_path / "mixed.parquet")
    done = run_cli("review", "sample", str(tmp_path / "mixed.parquet"), "--size", "500",
                   "-o", str(tmp_path / "q.parquet"))
    assert done.returncode == 0, done.stderr
    queue = pl.read_parquet(tmp_path / "q.parquet")
    assert queue.height == 133 and not set(marked) & set(queue.get_column("conversation_id"))
    assert "read 136 rows, 133 scored (ok), 1 error, 1 not_sampled, 1 skipped" in done.stdout
    assert "(1 error)" in done.stdout and "(1 not_sampled)" in done.stdout and "(1 skipped)" in done.stdout


def test_the_day_follows_the_time_zone(scored: Path, tmp_path: Path) -> None:
    """The sample's rows were written at 09:00-10:59 UTC: at UTC+14 those after 10:00 are the next day."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FP_")}
    for how in (["--timezone", "Pacific/Kiritimati"], []):
        out = tmp_path / f"q{len(how)}.parquet"
        done = subprocess.run(
            [sys.executable, "-m", "faithfulness_pipeline.cli", "review", "sample", str(scored), "-o", str(out),
             *how], capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
            env={**env, "FP_TIMEZONE": "Pacific/Kiritimati"} if not how else env)
        assert done.returncode == 0, done.stderr
        queue = pl.read_parquet(out).join(pl.read_parquet(scored).select("row_key", "created_at"), on="row_key")
        local = queue.get_column("created_at").dt.convert_time_zone("Pacific/Kiritimati").dt.date()
        assert queue.get_column("day").equals(local, check_names=False)
        utc = queue.get_column("created_at").dt.date()
        assert (queue.get_column("day") >= utc).all() and (queue.get_column("day") > utc).any()


def test_only_the_light_columns_are_read(scored: Path) -> None:
    read = _light_rows([str(scored)], OutputContext())
    assert read.height == 136
    assert set(read.columns) == {"row_key", "status", "conversation_id", "model", "language", "scoring_run_id",
                                 "judge_model", "prompt_version", "__fp_day"}


def _refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_bad_input_is_one_line_and_writes_nothing(scored: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.parquet"
    _refused(run_cli("review", "sample", str(SAMPLE / "flat"), "-o", str(out)), "no column row_key, status")
    _refused(run_cli("review", "sample", str(scored), "--size", "0", "-o", str(out)), "--review-sample-size",
             "FP_REVIEW_SAMPLE_SIZE")
    _refused(run_cli("review", "sample", str(scored), "-o", str(scored)), "is also an input file")
    (tmp_path / "folder").mkdir()
    _refused(run_cli("review", "sample", str(scored), "-o", str(tmp_path / "folder")), "is an existing folder")
    failed = pl.read_parquet(scored).with_columns(pl.lit("error").alias("status"))
    failed.write_parquet(tmp_path / "failed.parquet")
    _refused(run_cli("review", "sample", str(tmp_path / "failed.parquet"), "-o", str(out)),
             "was scored (status ok): 136 rows, 0 scored (ok), 136 error", "nothing to review")
    _refused(run_cli("review", "sample", str(scored), "--timezone", "Mars/Olympus", "-o", str(out)), "--timezone")
    _refused(run_cli("review", "sample", str(tmp_path / "missing.parquet"), "-o", str(out)), "missing.parquet")
    assert not out.exists()


def test_the_documented_commands_run_as_printed(tmp_path: Path) -> None:
    (tmp_path / "sample_data").symlink_to(SAMPLE)
    done = run_shell(block("docs/review.md", "bash", "review sample"), tmp_path, activated(child_env()))
    assert done.returncode == 0, done.stderr[-3000:]
    queue = pl.read_parquet(tmp_path / "out" / "review-queue.parquet")
    assert queue.height == 20 and "review queue: 20 of 26 scored answers drawn" in done.stdout
    shutil.rmtree(tmp_path / "out")

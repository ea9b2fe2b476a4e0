"""The CLI with s3:// inputs and outputs: real subprocesses of ``faithfulness-pipeline`` against moto's S3
server on 127.0.0.1 (the offline judge: no LLM needed for storage).

``score`` reads its input from the bucket and writes every output there, all appearing together when the
run is complete; outputs that could not be written are refused before any row is scored; a run that fails
leaves the previous outputs as they were. ``report`` reads a warehouse or a scored table from the bucket
and writes its HTML there. The secret key is a canary: it never shows in what the commands print.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket
from tests.doc_blocks import activated, block, run_shell
from tests.reliability.support import child_env, short_rows
from tests.warehouse_files import GOLDEN, upload, write_warehouse

CANARY = "fp-canary-secret-3c9d1e7a5f0b2468ace0"
OUTPUTS = ("out/claims.parquet", "out/mastra.jsonl", "out/scored.parquet")


def _cli(*args: str, fsize: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:  # in the child only
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    # The canary is the secret the child signs with (moto, without its IAM checks, takes any key).
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], capture_output=True, text=True,
                          env=child_env(AWS_SECRET_ACCESS_KEY=CANARY), timeout=300, check=False, preexec_fn=limit)


def _no_secret(done: subprocess.CompletedProcess[str]) -> None:
    assert CANARY not in done.stdout and CANARY not in done.stderr


def _one_line_error(done: subprocess.CompletedProcess[str], status: int, *words: str) -> None:
    _no_secret(done)
    assert done.returncode == status, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert all(w in lines[0] for w in words), (words, lines[0])


@pytest.fixture
def rows(tmp_path: Path, s3: S3Bucket) -> str:
    """40 rows in the bucket, as in/rows.parquet."""
    local = tmp_path / "rows.parquet"
    short_rows(40).write_parquet(local)
    Place.of(s3.uri("in/rows.parquet")).put_file(local)
    return s3.uri("in/rows.parquet")


def _score_to_s3(source: str, s3: S3Bucket, fsize: int | None = None, quiet: bool = True) -> subprocess.CompletedProcess[str]:
    claims, mastra, scored = (s3.uri(key) for key in OUTPUTS)
    return _cli("score", source, "-o", scored, "--claims-out", claims, "--mastra-out", mastra,
                *(["--quiet"] if quiet else []), fsize=fsize)


def test_score_reads_s3_and_writes_every_output_to_s3(rows: str, s3: S3Bucket, tmp_path: Path) -> None:
    done = _score_to_s3(rows, s3, quiet=False)
    assert done.returncode == 0, done.stderr
    _no_secret(done)
    assert s3.uri("out/scored.parquet") in done.stderr  # the summary names what it wrote
    assert s3.objects() == ["in/rows.parquet", *OUTPUTS]  # no staging object, no probe left
    local = tmp_path / "local"
    here = _cli("score", rows, "-o", str(local / "scored.parquet"), "--claims-out", str(local / "claims.parquet"),
                "--mastra-out", str(local / "mastra.jsonl"), "--quiet")
    assert here.returncode == 0, here.stderr
    # the same rows scored the same, wherever the outputs went
    run_columns = ["scored_at", "scoring_run_id"]
    remote_scored = pl.read_parquet(Place.of(s3.uri("out/scored.parquet")).read_bytes()).drop(run_columns)
    assert remote_scored.height == 40 and remote_scored.equals(pl.read_parquet(local / "scored.parquet").drop(run_columns))
    remote_claims = pl.read_parquet(Place.of(s3.uri("out/claims.parquet")).read_bytes()).drop("scored_at")
    assert remote_claims.height > 40 and remote_claims.equals(pl.read_parquet(local / "claims.parquet").drop("scored_at"))
    lines = Place.of(s3.uri("out/mastra.jsonl")).read_text().splitlines()
    assert len(lines) == len((local / "mastra.jsonl").read_text(encoding="utf-8").splitlines()) == 80


def test_outputs_in_a_missing_bucket_are_refused_before_any_row_is_scored(rows: str, s3: S3Bucket) -> None:
    done = _cli("score", rows, "-o", s3.uri("out/scored.parquet"), "--claims-out",
                "s3://fp-no-such-bucket/out/claims.parquet", "--quiet")
    _one_line_error(done, 1, "--claims-out", "s3://fp-no-such-bucket/out/claims.parquet", "bucket")
    assert s3.objects() == ["in/rows.parquet"]


@pytest.mark.parametrize(
    ("outputs", "words"),
    [
        (("-o", "{in}"), ("-o", "is also an input file")),
        (("-o", "{bucket}/a.parquet", "--claims-out", "{bucket}/a.parquet"), ("both name",)),
        (("-o", "{bucket}/in"), ("-o", "is an existing folder")),
        (("-o", "{bucket}"), ("names a bucket",)),
        (("-o", f"s3://key:{CANARY}@bucket/out.parquet"), ("credentials",)),
    ],
    ids=["the-input", "twice", "a-folder", "a-bucket", "credentials-in-the-uri"],
)
def test_s3_outputs_that_would_clash_are_refused_as_the_commands_fault(
    rows: str, s3: S3Bucket, outputs: tuple[str, ...], words: tuple[str, ...]
) -> None:
    args = [a.format(**{"in": rows, "bucket": s3.uri()}) for a in outputs]
    if "-o" not in args:
        args = ["-o", s3.uri("out/scored.parquet"), *args]
    done = _cli("score", rows, *args, "--quiet")
    _one_line_error(done, 2, *words)
    assert s3.objects() == ["in/rows.parquet"]


def test_a_run_that_fails_while_writing_leaves_the_previous_s3_outputs(rows: str, s3: S3Bucket) -> None:
    first = _score_to_s3(rows, s3)
    assert first.returncode == 0, first.stderr
    before = {key: Place.of(s3.uri(key)).read_bytes() for key in OUTPUTS}
    # more rows, and a file-size limit that the local temporary of the scored table hits
    with Place.of(rows).replace() as stream:
        short_rows(400).write_parquet(stream)
    second = _score_to_s3(rows, s3, fsize=60_000)
    _one_line_error(second, 1, "cannot write", "nothing was written")
    assert {key: Place.of(s3.uri(key)).read_bytes() for key in OUTPUTS} == before
    assert s3.objects() == ["in/rows.parquet", *OUTPUTS]


def test_report_reads_an_s3_warehouse_and_writes_its_html_to_s3(tmp_path: Path, s3: S3Bucket) -> None:
    local = tmp_path / "wh"
    upload(local, write_warehouse(local), s3.uri("wh"))
    done = _cli("report", s3.uri("wh"), "-o", s3.uri("wh/answer_quality_report.html"))
    assert done.returncode == 0, done.stderr
    _no_secret(done)
    assert f"wrote {s3.uri('wh/answer_quality_report.html')}" in done.stderr and "17 answers" in done.stderr
    page = Place.of(s3.uri("wh/answer_quality_report.html")).read_text()
    here = _cli("report", str(local), "-o", str(tmp_path / "local.html"))
    assert here.returncode == 0, here.stderr
    # the same page but for the source it names and when it was made
    assert len(page) > 10_000 and "2026-11-26" in page and s3.uri("wh") in page
    assert abs(len(page) - len((tmp_path / "local.html").read_text(encoding="utf-8"))) < 400


def test_report_reads_a_scored_table_from_s3(s3: S3Bucket) -> None:
    Place.of(s3.uri("runs/scored.parquet")).put_file(GOLDEN)
    done = _cli("report", s3.uri("runs/scored.parquet"), "-o", s3.uri("reports/r.html"))
    assert done.returncode == 0, done.stderr
    assert "17 answers" in done.stderr
    assert Place.of(s3.uri("reports/r.html")).read_text().lstrip().lower().startswith("<!doctype html")


def test_report_to_a_missing_bucket_is_one_line_without_the_secret(s3: S3Bucket) -> None:
    Place.of(s3.uri("runs/scored.parquet")).put_file(GOLDEN)
    done = _cli("report", s3.uri("runs/scored.parquet"), "-o", "s3://fp-no-such-bucket/r.html")
    _one_line_error(done, 2, "fp-no-such-bucket")


def test_the_documented_commands_run_against_a_bucket(rows: str, s3: S3Bucket, tmp_path: Path) -> None:
    """docs/object-storage.md's commands as printed, in an activated environment, with its bucket named
    ``bucket`` replaced by the test's: the score outputs and the report land in the bucket."""
    commands = block("docs/object-storage.md", "bash", "s3://bucket/in/rows.parquet")
    assert rows == s3.uri("in/rows.parquet")
    local = tmp_path / "warehouse"
    upload(local, write_warehouse(local), s3.uri("warehouse"))
    done = run_shell(commands.replace("s3://bucket/", s3.uri() + "/"), tmp_path, activated(child_env()))
    assert done.returncode == 0, done.stderr[-3000:]
    assert {*OUTPUTS, "warehouse/answer_quality_report.html"} <= set(s3.objects())
    scored = pl.read_parquet(Place.of(s3.uri("out/scored.parquet")).read_bytes())
    assert scored.height == 40

"""Every command that writes tables or a page checks its outputs before it reads or pays for anything, as
``score`` does: an output that names an input, an existing folder, or the same file as another output is
refused in one line (exit 2) and nothing is written; an ``s3://`` output lands in the bucket, not in a local
folder named ``s3:``. Real subprocesses on real Parquet files (the offline judge; the S3 server of the
suite). ``packing-study`` names a model on a closed port: a refusal before any request is the only way out."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.tables.storage import Place
from tests.cli.test_cli import ROOT, run_cli
from tests.conftest import S3Bucket

LABELLED = ROOT / "sample_labelled" / "conversations_labelled.parquet"
#: Each command, with {scored}, {labelled} and {out} (its -o) in its arguments.
COMMANDS = {
    "compare": ("compare", "{scored}", "{scored}", "-o", "{out}"),
    "calibrate": ("calibrate", "--scored", "{scored}", "--labelled", "{labelled}", "-o", "{out}"),
    "estimate": ("estimate", "{scored}", "--labels", "{labelled}", "-o", "{out}"),
    "report": ("report", "{scored}", "-o", "{out}"),
    "packing-study": ("packing-study", "--labelled", "{labelled}", "--model", "openai/fp-test",
                      "--api-base", "http://127.0.0.1:9/v1", "-o", "{out}"),
}


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The labelled sample (en, zh, ko) scored by the offline judge."""
    path = tmp_path_factory.mktemp("outputs") / "scored.parquet"
    score_frame(pl.read_parquet(LABELLED)).write_parquet(path)
    return path


def _run(command: str, scored: Path, out: str, *extra: str) -> subprocess.CompletedProcess[str]:
    values = {"scored": str(scored), "labelled": str(LABELLED), "out": out}
    return run_cli(*(a.format(**values) for a in COMMANDS[command]), *extra)


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert all(w in lines[0] for w in words), (words, lines[0])


@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_output_that_names_an_input_or_a_folder_is_refused_before_anything(
    command: str, scored: Path, tmp_path: Path
) -> None:
    before = scored.read_bytes()
    target = str(LABELLED) if command == "packing-study" else str(scored)
    _refused(_run(command, scored, target), "-o", "is also an input file")
    assert scored.read_bytes() == before
    folder = tmp_path / "a-folder"
    folder.mkdir()
    _refused(_run(command, scored, str(folder)), "-o", "is an existing folder")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize(("command", "other"), [("compare", "--flips-out"), ("calibrate", "--disagreements-out")])
def test_two_outputs_naming_one_file_are_refused(command: str, other: str, scored: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "one.parquet")
    _refused(_run(command, scored, out, other, out), "both name")
    assert not (tmp_path / "one.parquet").exists()


@pytest.mark.parametrize("command", ["compare", "calibrate", "estimate"])
def test_an_s3_output_lands_in_the_bucket_and_no_local_folder_is_made(
    command: str, scored: Path, s3: S3Bucket, tmp_path: Path
) -> None:
    done = _run(command, scored, s3.uri(f"results/{command}.parquet"))
    assert done.returncode == 0, done.stderr
    assert s3.objects() == [f"results/{command}.parquet"]
    table = pl.read_parquet(io.BytesIO(Place.of(s3.uri(f"results/{command}.parquet")).read_bytes()))
    assert table.height > 0
    assert not (ROOT / "s3:").exists()


@pytest.mark.parametrize("command", ["compare", "calibrate", "estimate", "report"])
def test_an_output_uri_with_credentials_is_refused_without_showing_them(command: str, scored: Path) -> None:
    # issue 52: compare's and calibrate's s3://key:secret@bucket/... output became a local folder named with it
    secret = "fp-canary-5e1d0a9c"
    done = _run(command, scored, f"s3://AKIAFPTEST:{secret}@bucket/out.parquet")
    _refused(done, "credentials")
    assert secret not in done.stdout + done.stderr
    assert not (ROOT / "s3:").exists()

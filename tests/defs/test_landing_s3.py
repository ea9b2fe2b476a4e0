"""A landing location in an object store (moto's S3 server on 127.0.0.1): listed, dated and read like a local
folder, with the same answers for the same files."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.sources.landing import LandingFile, day_batches, file_days, list_landing, rows_before
from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket
from tests.defs.conftest import SAMPLE

NAMES = ("chat.jsonl", "extra.csv", "flat.parquet")


def _landing(folder: Path) -> None:
    """The sample rows in all three formats (JSON has no datetime: ISO-8601 text; the CSV has no timestamp)."""
    folder.mkdir()
    pl.read_parquet(SAMPLE / "chat" / "conversations.parquet").write_ndjson(folder / "chat.jsonl")
    pl.read_parquet(SAMPLE / "flat" / "conversations.parquet").write_parquet(folder / "flat.parquet")
    pl.DataFrame({"conversation_id": ["csv-zh", "csv-ko"], "output": ["埃菲尔铁塔高330米。", "에펠탑은 파리에 있다."]}).write_csv(
        folder / "extra.csv")


@pytest.fixture
def both(tmp_path: Path, s3: S3Bucket) -> tuple[str, str]:
    """The same landing files in a local folder and under s3://<bucket>/landing/ (URI with a trailing slash,
    as users write a prefix)."""
    local = tmp_path / "landing"
    _landing(local)
    for name in NAMES:
        Place.of(s3.uri(f"landing/{name}")).put_file(local / name)
    return str(local), s3.uri("landing/")


def test_an_s3_landing_prefix_lists_its_files_with_size_and_upload_time(both: tuple[str, str], s3: S3Bucket) -> None:
    local, remote = both
    files = list_landing(remote)
    assert [f.path for f in files] == [s3.uri(f"landing/{n}") for n in NAMES]
    assert [f.size for f in files] == [f.size for f in list_landing(local)]
    assert all(f.mtime_ns > 0 for f in files)
    Place.of(s3.uri("landing/sub/.hidden.jsonl.tmp")).write_bytes(b"{}")  # a writer's staging object: no data
    assert [f.path for f in list_landing(remote)] == [f.path for f in files]
    assert [f.path for f in list_landing(s3.uri("landing/*.jsonl"))] == [s3.uri("landing/chat.jsonl")]


def test_an_empty_s3_prefix_is_an_empty_landing_but_a_missing_bucket_is_an_error(s3: S3Bucket) -> None:
    assert list_landing(s3.uri("landing/")) == []
    with pytest.raises(InputError, match="does not exist"):
        list_landing("s3://fp-no-such-bucket/landing/")


def test_days_and_rows_of_s3_landing_files_are_those_of_the_same_local_files(both: tuple[str, str]) -> None:
    local, remote = both
    pinned = date(2026, 11, 25)  # the CSV's rows (no timestamp) go to this day wherever the file is
    for here, there in zip(list_landing(local), list_landing(remote), strict=True):
        days = file_days(there, "created_at", pinned)
        assert days == file_days(here, "created_at", pinned) and days
        first = min(days)
        assert rows_before(there, date(2026, 11, 25), "created_at", pinned) == rows_before(
            here, date(2026, 11, 25), "created_at", pinned)
        assert rows_before(there, first, "created_at", pinned) == 0
    day = date(2026, 11, 25)

    def rows_of(file: LandingFile) -> pl.DataFrame:  # chunks of 7 rows: several per file, row groups split
        return pl.concat(list(day_batches(file, day, "created_at", pinned, "UTC", 7)), how="vertical")

    remote_rows = [(f, rows_of(f)) for f in list_landing(remote)]
    local_rows = [(f, rows_of(f)) for f in list_landing(local)]
    for (_, there_frame), (_, here_frame) in zip(remote_rows, local_rows, strict=True):
        assert there_frame.height > 0
        assert there_frame.sort("conversation_id").equals(here_frame.sort("conversation_id"))


def test_an_s3_landing_files_arrival_day_is_its_upload_day(both: tuple[str, str]) -> None:
    _, remote = both
    csv = next(f for f in list_landing(remote) if f.path.endswith(".csv"))
    assert file_days(csv, "created_at", None) == {csv.arrival_day()}

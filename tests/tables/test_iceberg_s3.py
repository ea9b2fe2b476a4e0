"""The iceberg format with its data in a bucket of the moto S3 server (tests/s3_server.py) and its SQLite catalog
on the local disk: a day written and read back, as of its snapshot, by this package, pyiceberg and polars; the
credentials come from the AWS_* environment and are stored nowhere."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket

DAY = "2026-11-24"


def test_a_day_in_a_bucket_is_written_and_read_back(s3: S3Bucket, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")  # polars' planner plugin is not installed
    catalog_file = tmp_path / "catalog.sqlite"
    warehouse = WarehouseResource(root=s3.uri("wh"), table_format="iceberg", iceberg_catalog=f"sqlite:///{catalog_file}")
    first = pl.DataFrame({"row_key": ["a", "b", "c"], "score": [0.1, 0.2, 0.3]})
    with warehouse.writer("scored_conversations", DAY) as sink:
        sink.write(first.head(2))
        sink.write(first.tail(1))
    version = sink.committed
    assert version is not None
    _, again = warehouse.write_committed("scored_conversations", DAY, first.with_columns(pl.col("score") * 10))
    assert warehouse.rows("scored_conversations", DAY) == 3
    assert_frame_equal(warehouse.scan("scored_conversations", [DAY], as_of=version).collect(), first)
    assert warehouse.scan("scored_conversations", [DAY], as_of=again).collect().get_column("score").sum() == 6.0
    assert_frame_equal(pl.concat(warehouse.batches("scored_conversations", DAY, 2, ["row_key"])), first.select("row_key"))
    location = warehouse.location("scored_conversations", DAY)
    assert location.startswith(f"s3://{s3.name}/wh/faithfulness/scored_conversations/data/ds={DAY}")
    keys = s3.objects()
    assert any(k.startswith("wh/faithfulness/scored_conversations/metadata/") for k in keys)
    assert len([k for k in keys if k.startswith(f"wh/faithfulness/scored_conversations/data/ds={DAY}/")]) == 2

    table = warehouse.tables().catalog().load_table(("faithfulness", "scored_conversations"))  # type: ignore[attr-defined]
    assert pl.scan_iceberg(table, snapshot_id=int(version)).collect().drop("ds").equals(first)
    secret = s3.env["AWS_SECRET_ACCESS_KEY"]
    assert secret.encode() not in catalog_file.read_bytes()  # the catalog keeps metadata locations, no credential
    metadata = [k for k in keys if k.endswith(".metadata.json")]
    place = Place.of(s3.uri())
    assert metadata and all(secret.encode() not in place.child(k).read_bytes() for k in metadata)

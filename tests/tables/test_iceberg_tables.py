"""The iceberg table format (``tables.iceberg_tables``) on a real SQLite SQL catalog in a temporary folder: a day
replaced in one snapshot, read back as of any snapshot, schema evolution, refusals, two writer processes at once,
retention; the tables read by pyiceberg and polars' own Iceberg reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.tables.iceberg_tables import PARTITION_PROPERTY, IcebergTables, iceberg_tables
from faithfulness_pipeline.tables.storage import Place

REPO = Path(__file__).resolve().parents[2]
DAY, OTHER = "2026-11-24", "2026-11-25"


@pytest.fixture(autouse=True)
def _polars_plans_with_pyiceberg(monkeypatch: pytest.MonkeyPatch) -> None:
    # polars' Iceberg reader warns that its optional planner plugin is not installed, then plans with pyiceberg
    monkeypatch.setenv("POLARS_ICEBERG_PLANNER", "pyiceberg")


def _tables(root: Path, retention_days: int = 30) -> IcebergTables:
    return iceberg_tables(WarehouseSettings(root=str(root), table_format="iceberg",
                                            version_retention_days=max(retention_days, 1))) \
        if retention_days else IcebergTables(Place.of(root), f"sqlite:///{root}/_iceberg_catalog.sqlite",
                                             "faithfulness", retention_days=0)


def _rows(n: int, start: int = 0, judge: str = "a") -> pl.DataFrame:
    return pl.DataFrame({"row_key": [f"k{i}" for i in range(start, start + n)],
                         "score": [i / 10 for i in range(start, start + n)], "judge": [judge] * n})


def _write(tables: IcebergTables, day: str | None, *frames: pl.DataFrame, table: str = "scored") -> str:
    with tables.writer(table, day) as sink:
        for frame in frames:
            sink.write(frame)
    assert sink.committed is not None
    return sink.committed


def test_a_day_written_in_chunks_is_one_snapshot_read_back_from_metadata_and_in_bounded_batches(tmp_path: Path) -> None:
    tables = _tables(tmp_path)
    version = _write(tables, DAY, _rows(5), _rows(5, 5), _rows(3, 10))
    _write(tables, OTHER, _rows(4, 100))
    table = tables.catalog().load_table(("faithfulness", "scored"))
    snapshot = table.metadata.snapshot_by_id(int(version))
    assert snapshot is not None and snapshot.summary is not None
    assert snapshot.summary[PARTITION_PROPERTY] == DAY and snapshot.summary["added-records"] == "13"
    assert len(table.snapshots()) == 2  # one snapshot per write, whatever the chunks
    assert [f.name for f in table.spec().fields] == ["ds"]
    assert (tables.rows("scored", DAY), tables.rows("scored", OTHER)) == (13, 4)
    assert tables.schema("scored", DAY) == pl.Schema({"row_key": pl.String, "score": pl.Float64, "judge": pl.String})
    batches = list(tables.batches("scored", DAY, 4, columns=["row_key"]))
    assert [b.height for b in batches] == [4, 4, 4, 1] and batches[0].columns == ["row_key"]
    assert_frame_equal(pl.concat(batches), _rows(13).select("row_key"))  # in the order written
    assert_frame_equal(tables.scan("scored", [DAY]).collect(), _rows(13))
    assert tables.scan("scored", [DAY, OTHER]).collect().height == 17
    # the engines: pyiceberg's scan and polars' Iceberg reader see the same day, ds a column of theirs
    assert table.scan(row_filter=f"ds == '{DAY}'").to_arrow().num_rows == 13
    read = pl.scan_iceberg(table).filter(pl.col("ds") == OTHER).collect()
    assert_frame_equal(read.drop("ds"), _rows(4, 100))
    assert tables.exists("scored", DAY) and not tables.exists("scored", "2026-11-30")
    assert not tables.exists("nothing", DAY)
    for read_it in (lambda: tables.rows("scored", "2026-11-30"), lambda: tables.scan("scored", ["2026-11-30"]),
                    lambda: tables.schema("nothing", DAY)):
        with pytest.raises(FileNotFoundError, match="materialise it first"):
            read_it()
    assert tables.location("scored", DAY).endswith("/faithfulness/scored/data/ds=2026-11-24")


def test_rewriting_a_day_replaces_exactly_it_and_every_snapshot_reads_back(tmp_path: Path) -> None:
    tables = _tables(tmp_path)
    first = _write(tables, DAY, _rows(6))
    other = _write(tables, OTHER, _rows(2, 50))
    second = _write(tables, DAY, _rows(3, judge="b"))
    assert len({first, other, second}) == 3
    assert_frame_equal(tables.scan("scored", [DAY]).collect(), _rows(3, judge="b"))
    assert_frame_equal(tables.scan("scored", [DAY], as_of=first).collect(), _rows(6))
    assert_frame_equal(tables.scan("scored", [OTHER]).collect(), _rows(2, 50))  # the other day untouched
    assert tables.rows("scored", DAY) == 3
    with pytest.raises(FileNotFoundError, match=r"2026-11-25.*materialise it first"):
        tables.scan("scored", [OTHER], as_of=first)  # that day did not exist yet at the first snapshot
    with pytest.raises(ConfigError, match=r"^scored: the iceberg table faithfulness.scored has no snapshot '123' ") as err:
        tables.scan("scored", [DAY], as_of="123")
    assert "\n" not in str(err.value)
    table = tables.catalog().load_table(("faithfulness", "scored"))
    assert pl.scan_iceberg(table, snapshot_id=int(first)).collect().height == 6


def test_an_error_inside_the_block_commits_nothing(tmp_path: Path) -> None:
    tables = _tables(tmp_path)
    version = _write(tables, DAY, _rows(4))
    def fail_midway() -> None:
        with tables.writer("scored", DAY) as sink:
            sink.write(_rows(9, judge="half"))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_midway()
    table = tables.catalog().load_table(("faithfulness", "scored"))
    current = table.current_snapshot()
    assert current is not None and str(current.snapshot_id) == version
    assert_frame_equal(tables.scan("scored", [DAY]).collect(), _rows(4))
    data_files = sorted((tmp_path / "faithfulness" / "scored" / "data").rglob("*.parquet"))
    assert len(data_files) == 1  # the failed write staged locally and left no data file in the table


def test_a_new_column_is_added_old_rows_read_null_and_a_type_change_is_refused(tmp_path: Path) -> None:
    tables = _tables(tmp_path)
    _write(tables, DAY, _rows(2))
    wider = _rows(2, 10).with_columns(pl.lit(7, dtype=pl.Int64).alias("tokens"))
    _write(tables, OTHER, wider)
    assert tables.scan("scored", [DAY]).collect().get_column("tokens").to_list() == [None, None]
    assert tables.schema("scored", DAY)["tokens"] == pl.Int64
    assert next(iter(tables.batches("scored", DAY, 10))).get_column("tokens").null_count() == 2
    # a column without any value (polars' Null type, which Iceberg v2 has not) waits for a day that has values
    _write(tables, OTHER, wider.with_columns(pl.lit(None).alias("note")))
    assert "note" not in tables.schema("scored", OTHER)
    _write(tables, OTHER, wider.with_columns(pl.lit("n").alias("note")))
    assert tables.scan("scored", [OTHER]).collect().get_column("note").to_list() == ["n", "n"]
    assert tables.scan("scored", [DAY]).collect().get_column("note").to_list() == [None, None]
    # a narrower integer is written into the long column as it is
    _write(tables, DAY, _rows(1).with_columns(pl.lit(3, dtype=pl.Int32).alias("tokens")))
    assert tables.scan("scored", [DAY]).collect().get_column("tokens").to_list() == [3]
    before = tables.catalog().load_table(("faithfulness", "scored")).metadata.current_snapshot_id
    with pytest.raises(ConfigError, match=r"^scored: column 'score' is double in the iceberg table faithfulness.scored "
                                          r"and would become string, a change Iceberg refuses: write it as double"):
        _write(tables, DAY, _rows(1).with_columns(pl.col("score").cast(pl.String)))
    assert tables.catalog().load_table(("faithfulness", "scored")).metadata.current_snapshot_id == before


def test_an_empty_day_and_an_unpartitioned_table(tmp_path: Path) -> None:
    tables = _tables(tmp_path)
    with tables.writer("scored", DAY, empty=pl.Schema({"row_key": pl.String, "score": pl.Float64})) as sink:
        pass
    assert sink.committed is not None
    assert tables.exists("scored", DAY) and tables.rows("scored", DAY) == 0
    assert tables.scan("scored", [DAY]).collect().columns == ["row_key", "score"]
    _write(tables, None, _rows(3), table="labels")
    _write(tables, None, _rows(2, 20), table="labels")  # replaces the whole table
    assert_frame_equal(tables.scan("labels", [None]).collect(), _rows(2, 20))
    assert tables.catalog().load_table(("faithfulness", "labels")).spec().is_unpartitioned()


_WRITER = """
import sys
import polars as pl
from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.tables.iceberg_tables import iceberg_tables
tables = iceberg_tables(WarehouseSettings(root=sys.argv[1], table_format="iceberg"))
for day in sys.argv[2:]:
    with tables.writer("scored", day) as sink:
        sink.write(pl.DataFrame({"row_key": [day] * 3, "n": [1, 2, 3]}))
"""


def test_two_processes_writing_days_at_once_all_land(tmp_path: Path) -> None:
    """Both create the table at once (one creates, the other loads it) and then commit over each other's
    snapshots: every day of both lands."""
    days = {name: [f"2026-11-{d:02d}" for d in range(first, first + 4)] for name, first in (("a", 1), ("b", 11))}
    workers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), *ds], cwd=REPO,
                                stderr=subprocess.PIPE, text=True) for ds in days.values()]
    for worker in workers:
        _, err = worker.communicate(timeout=120)
        assert worker.returncode == 0, err[-2000:]
    tables = _tables(tmp_path)
    for day in [*days["a"], *days["b"]]:
        assert tables.scan("scored", [day]).collect().get_column("row_key").to_list() == [day] * 3
    assert len(tables.catalog().load_table(("faithfulness", "scored")).snapshots()) == 8


def test_a_commit_another_writer_overtook_is_redone_or_rebased(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministically, another writer commits while this one is between loading the table and committing:
    when neither had created the table (this one finds it created: redone, loading it), on another day (pyiceberg's
    own retry rebases the snapshot onto theirs), on the same day (redone: the later writer's rows are the day)."""
    tables, other = _tables(tmp_path), _tables(tmp_path)
    original = IcebergTables._write_data_file
    overtake = {1: (OTHER, _rows(2, 50)), 4: ("2026-11-26", _rows(1, 70)), 6: (DAY, _rows(5, 200, judge="other"))}
    attempts: list[str] = []

    def overtaken(self: IcebergTables, *args: object) -> object:
        attempts.append(str(args[2]))
        if self is tables and len(attempts) in overtake:
            _write(other, *overtake[len(attempts)])
        return original(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(IcebergTables, "_write_data_file", overtaken)
    first = _write(tables, DAY, _rows(3))
    second = _write(tables, DAY, _rows(4))
    third = _write(tables, DAY, _rows(6))
    assert attempts == [DAY, OTHER, DAY, DAY, "2026-11-26", DAY, DAY, DAY]
    assert (tables.rows("scored", DAY), tables.rows("scored", OTHER), tables.rows("scored", "2026-11-26")) == (6, 2, 1)
    assert_frame_equal(tables.scan("scored", [DAY]).collect(), _rows(6))
    assert tables.scan("scored", [DAY], as_of=first).collect().height == 3
    assert tables.scan("scored", [DAY], as_of=second).collect().height == 4 and len({first, second, third}) == 3
    files = list((tmp_path / "faithfulness" / "scored" / "data" / f"ds={DAY}").glob("*.parquet"))
    assert len(files) == 4  # the three writes' and the other writer's: the redone attempts' files were removed


def test_snapshots_past_the_retention_are_expired_after_a_write(tmp_path: Path) -> None:
    tables = _tables(tmp_path, retention_days=0)  # everything before the newest write is past it
    first = _write(tables, DAY, _rows(2))
    last = _write(tables, DAY, _rows(1))
    snapshots = tables.catalog().load_table(("faithfulness", "scored")).snapshots()
    assert [str(s.snapshot_id) for s in snapshots] == [last]
    with pytest.raises(ConfigError, match="expired after FP_VERSION_RETENTION_DAYS"):
        tables.scan("scored", [DAY], as_of=first)
    kept = _tables(tmp_path / "kept")
    versions = [_write(kept, DAY, _rows(n)) for n in (1, 2)]
    assert [str(s.snapshot_id) for s in kept.catalog().load_table(("faithfulness", "scored")).snapshots()] == versions


def test_bad_settings_are_one_line_naming_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^FP_ICEBERG_CATALOG / warehouse.iceberg_catalog is unset and the warehouse "
                                          r"s3://bucket/wh is in an object store"):
        WarehouseSettings(root="s3://bucket/wh", table_format="iceberg")
    WarehouseSettings(root="s3://bucket/wh")  # the parquet format needs no catalog
    unreachable = WarehouseResource(root=str(tmp_path), table_format="iceberg",
                                    iceberg_catalog="postgresql://fp:hunter2-secret@127.0.0.1:9/catalog")
    with pytest.raises(ConfigError, match=r"^FP_ICEBERG_CATALOG / warehouse.iceberg_catalog postgresql\+psycopg://"
                                          r"\*\*\*@127.0.0.1:9/catalog: the Iceberg catalog cannot be reached") as err:
        unreachable.rows("scored", DAY)
    assert "hunter2" not in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="FP_ICEBERG_NAMESPACE"):
        WarehouseResource(root=str(tmp_path), table_format="iceberg", iceberg_namespace="a b").tables()
    def write_ds() -> None:
        with _tables(tmp_path).writer("t", DAY) as sink:
            sink.write(pl.DataFrame({"ds": [DAY]}))

    with pytest.raises(ConfigError, match="'ds' cannot be written"):
        write_ds()
    assert not _tables(tmp_path).exists("t", DAY)


def test_a_namespace_made_by_another_process_between_the_check_and_the_insert_is_taken_as_made(
        tmp_path: Path) -> None:
    """The SQL catalog checks, then inserts: a namespace another process inserted in between breaks the unique
    key (sqlalchemy's IntegrityError, seen in CI with two writer processes); it exists, so the write goes on."""
    from pyiceberg.catalog.sql import SqlCatalog

    from faithfulness_pipeline.tables.iceberg_tables import _ensure_namespace

    class Racing(SqlCatalog):
        """The other process's insert lands after this one's check: the first check does not see it."""

        checked = False

        def namespace_exists(self, namespace: Any) -> bool:
            if not Racing.checked:
                Racing.checked = True
                return False
            return bool(super().namespace_exists(namespace))

    uri = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    SqlCatalog("faithfulness", uri=uri, warehouse=tmp_path.as_uri()).create_namespace("ns")  # the other process
    _ensure_namespace(Racing("faithfulness", uri=uri, warehouse=tmp_path.as_uri()), "ns")
    assert Racing.checked

    class Broken(SqlCatalog):
        def create_namespace_if_not_exists(self, namespace: Any, properties: Any = None) -> None:
            raise RuntimeError("nope")

    broken = Broken("faithfulness", uri=uri, warehouse=tmp_path.as_uri())
    with pytest.raises(RuntimeError, match="nope"):  # a failure with no namespace behind it is still raised
        _ensure_namespace(broken, "other")

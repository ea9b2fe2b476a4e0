"""The delta table format on a local disk: a day replaced in one commit, versions read back, schema evolution and
its refusal, retention properties, and two writers of different days at once (the first creating the table)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import polars as pl
import pytest
from deltalake import DeltaTable
from polars.testing import assert_frame_equal

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.tables.delta_tables import DeltaTables
from faithfulness_pipeline.tables.formats import table_format
from faithfulness_pipeline.tables.storage import Place

REPO = Path(__file__).resolve().parents[2]


def _frame(n: int, day: str, start: int = 0) -> pl.DataFrame:
    return pl.DataFrame({"row_key": [f"{day}-{i}" for i in range(start, start + n)],
                         "score": [i / 10 for i in range(start, start + n)]})


def _write(tables: DeltaTables, table: str, day: str | None, *frames: pl.DataFrame) -> str:
    with tables.writer(table, day) as sink:
        for frame in frames:
            sink.write(frame)
    assert sink.committed is not None
    return sink.committed


def test_a_day_is_replaced_in_one_commit_and_every_version_reads_back(tmp_path: Path) -> None:
    tables = table_format("delta", WarehouseSettings(root=str(tmp_path / "wh")))
    assert isinstance(tables, DeltaTables)
    first = _write(tables, "scored", "2026-11-24", _frame(3, "a"), _frame(2, "a", 3))
    other = _write(tables, "scored", "2026-11-25", _frame(4, "b"))
    again = _write(tables, "scored", "2026-11-24", _frame(1, "c"))
    assert (first, other, again) == ("0", "1", "2")
    # the log of the table holds exactly one commit per write, each an overwrite of its own day
    history = sorted(DeltaTable(str(tmp_path / "wh" / "scored")).history(), key=lambda c: c["version"])
    assert [c["operationParameters"].get("predicate") for c in history] == [
        "ds = '2026-11-24'", "ds = '2026-11-25'", "ds = '2026-11-24'"]
    # rows come back as the Parquet format gives them: no day column, counted from the log
    assert tables.rows("scored", "2026-11-24") == 1 and tables.rows("scored", "2026-11-25") == 4
    assert tables.schema("scored", "2026-11-24") == pl.Schema({"row_key": pl.String, "score": pl.Float64})
    assert_frame_equal(tables.scan("scored", ["2026-11-24"]).collect(), _frame(1, "c"))
    assert_frame_equal(tables.scan("scored", ["2026-11-24"], as_of=first).collect(),
                       pl.concat([_frame(3, "a"), _frame(2, "a", 3)]))
    both = tables.scan("scored", ["2026-11-24", "2026-11-25"], as_of=other).collect()
    assert both.height == 9 and both.columns == ["row_key", "score"]
    # a version this table does not have, or no version at all, is one line naming it
    for bad in ("7", "snapshot-1", "-1"):
        with pytest.raises(ConfigError, match=rf"^scored: '{bad}' is not a version of the Delta table at .*"
                                              r"\(its versions are 0 to 2\)"):
            tables.scan("scored", ["2026-11-24"], as_of=bad)
    # a day not in the table (then, or at all) is refused as the Parquet format refuses it
    with pytest.raises(FileNotFoundError, match="materialise it first"):
        tables.scan("scored", ["2026-11-25"], as_of=first)
    with pytest.raises(FileNotFoundError, match="partition 2026-11-30"):
        tables.rows("scored", "2026-11-30")
    assert not tables.exists("scored", "2026-11-30") and not tables.exists("nothing", "2026-11-24")
    assert tables.exists("scored", "2026-11-25")


def test_batches_are_bounded_projected_and_of_one_day(tmp_path: Path) -> None:
    tables = DeltaTables(Place.of(tmp_path))
    _write(tables, "t", "2026-11-24", *[_frame(5, "a", 5 * i) for i in range(4)])
    _write(tables, "t", "2026-11-25", _frame(7, "b"))
    chunks = list(tables.batches("t", "2026-11-24", 6, ["score"]))
    assert all(c.height <= 6 and c.columns == ["score"] for c in chunks)
    assert pl.concat(chunks).get_column("score").to_list() == [i / 10 for i in range(20)]
    whole = pl.concat(tables.batches("t", "2026-11-25", 100))
    assert_frame_equal(whole, _frame(7, "b"))


def test_an_error_in_the_block_commits_nothing_and_an_empty_day_is_a_day(tmp_path: Path) -> None:
    tables = DeltaTables(Place.of(tmp_path))
    _write(tables, "t", "2026-11-24", _frame(2, "a"))
    sinks = []

    def broken() -> None:
        with tables.writer("t", "2026-11-24") as sink:
            sinks.append(sink)
            sink.write(_frame(5, "x"))
            raise RuntimeError("midway")

    with pytest.raises(RuntimeError, match="midway"):
        broken()
    assert sinks[0].committed is None
    assert DeltaTable(str(tmp_path / "t")).version() == 0
    assert_frame_equal(tables.scan("t", ["2026-11-24"]).collect(), _frame(2, "a"))
    # a day without rows is written (a commit that names it), with its columns
    with tables.writer("t", "2026-11-25", pl.Schema({"row_key": pl.String, "score": pl.Float64})) as sink:
        pass
    assert sink.committed == "1"
    assert tables.exists("t", "2026-11-25") and tables.rows("t", "2026-11-25") == 0
    assert tables.scan("t", ["2026-11-25"]).collect().is_empty()
    assert list(tables.batches("t", "2026-11-25", 10)) == []


def test_a_new_column_is_merged_and_a_changed_type_refused(tmp_path: Path) -> None:
    tables = DeltaTables(Place.of(tmp_path))
    _write(tables, "t", "2026-11-24", _frame(2, "a"))
    _write(tables, "t", "2026-11-25", _frame(2, "b").with_columns(pl.lit("v2").alias("app_version")))
    old = tables.scan("t", ["2026-11-24"]).collect()
    assert old.get_column("app_version").to_list() == [None, None]
    with pytest.raises(ConfigError, match=r"^t: column 'score' is double in the Delta table at .* and string in the "
                                          r"rows written now: a column's type cannot change; write it under a new "
                                          r"name, or move the table away"), \
            tables.writer("t", "2026-11-26") as sink:
        sink.write(_frame(2, "c").with_columns(pl.col("score").cast(pl.String)))
    assert DeltaTable(str(tmp_path / "t")).version() == 1
    with pytest.raises(ConfigError, match="the Delta table's day column: rename it"), tables.writer("t", "2026-11-26") \
            as sink:
        sink.write(_frame(1, "c").with_columns(pl.lit("x").alias("ds")))


def test_a_table_without_days_is_replaced_whole(tmp_path: Path) -> None:
    tables = DeltaTables(Place.of(tmp_path))
    _write(tables, "labels", None, _frame(3, "a"))
    second = _write(tables, "labels", None, _frame(1, "b"))
    assert second == "1" and tables.rows("labels", None) == 1
    assert_frame_equal(tables.scan("labels", [None]).collect(), _frame(1, "b"))
    assert_frame_equal(tables.scan("labels", [None], as_of="0").collect(), _frame(3, "a"))
    with pytest.raises(ConfigError, match="is a Delta table without days; this write is of one day"), \
            tables.writer("labels", "2026-11-24") as sink:
        sink.write(_frame(1, "c"))


def test_retention_maps_to_the_table_properties_and_follows_the_setting(tmp_path: Path) -> None:
    _write(DeltaTables(Place.of(tmp_path), retention_days=7), "t", "2026-11-24", _frame(1, "a"))
    properties = DeltaTable(str(tmp_path / "t")).metadata().configuration
    assert properties["delta.logRetentionDuration"] == "interval 7 days"
    assert properties["delta.deletedFileRetentionDuration"] == "interval 7 days"
    committed = _write(DeltaTables(Place.of(tmp_path), retention_days=45), "t", "2026-11-25", _frame(1, "b"))
    table = DeltaTable(str(tmp_path / "t"))
    assert table.metadata().configuration["delta.deletedFileRetentionDuration"] == "interval 45 days"
    # the property change is its own commit; the write reports the version of its own
    assert committed == "2" and table.history(1)[0]["operation"] == "WRITE"


WRITER = textwrap.dedent("""
    import sys, time
    import polars as pl
    from faithfulness_pipeline.tables.delta_tables import DeltaTables
    from faithfulness_pipeline.tables.storage import Place
    root, day, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    time.sleep(max(0.0, start - time.time()))  # both processes commit at the same moment
    tables = DeltaTables(Place.of(root))
    for round in range(3):
        with tables.writer("t", day) as sink:
            sink.write(pl.DataFrame({"day": [day] * 50, "round": [round] * 50}))
        print(sink.committed, flush=True)
""")


def test_two_processes_writing_other_days_at_once_both_land(tmp_path: Path) -> None:
    import time

    start = time.time() + 3.0  # past both interpreters' imports
    days = ("2026-11-24", "2026-11-25")
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), day, str(start)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for day in days]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    committed = [int(v) for out, _ in outputs for v in out.split()]
    # six commits, every one its own version: none lost, none reported twice
    assert sorted(committed) == list(range(6))
    tables = DeltaTables(Place.of(tmp_path))
    history = {c["version"]: c for c in DeltaTable(str(tmp_path / "t")).history()}
    for (out, _), day in zip(outputs, days, strict=True):
        for round_, version in enumerate(int(v) for v in out.split()):
            assert history[version]["faithfulness_pipeline.partition"] == day
            seen = tables.scan("t", [day], as_of=str(version)).collect()
            assert seen.get_column("round").unique().to_list() == [round_] and seen.height == 50
    for day in days:
        assert tables.scan("t", [day]).collect().get_column("round").unique().to_list() == [2]


def test_a_folder_of_another_format_and_a_missing_library_are_refused_up_front(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parquet = table_format("parquet", WarehouseSettings(root=str(tmp_path)))
    with parquet.writer("t", "2026-11-24") as sink:
        sink.write(_frame(1, "a"))
    with pytest.raises(ConfigError, match=r"^t: .* holds Parquet files but no Delta table \(another table format "
                                          r"wrote it\): move the folder away"), \
            DeltaTables(Place.of(tmp_path)).writer("t", "2026-11-25") as delta:
        delta.write(_frame(1, "b"))
    assert not (tmp_path / "t" / "_delta_log").exists()

    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "deltalake" else real(name, *a))
    with pytest.raises(ConfigError, match=r"^FP_TABLE_FORMAT / warehouse.table_format 'delta' needs the deltalake "
                                          r"library, which is not installed: pip install "
                                          r"'faithfulness-pipeline\[delta\]'$"):
        WarehouseSettings(table_format="delta")

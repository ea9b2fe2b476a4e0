"""The postgres table format against a real PostgreSQL cluster: rows and dtypes as the parquet format gives them
back, a day replaced in one transaction, loads read back as of their id, concurrent days, schema evolution,
retention, and the refusals."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
import pytest
from polars.testing import assert_frame_equal

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.postgres_tables import SCAN_BATCH, PostgresTables
from faithfulness_pipeline.tables.storage import Place
from tests.postgres_cluster import PASSWORD, Cluster

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "offline_sample" / "scored.parquet"
CHAT = Path(__file__).resolve().parents[2] / "sample_data" / "chat" / "conversations.parquet"
DAY, NEXT = "2026-11-24", "2026-11-25"
_DATABASES = itertools.count()


@pytest.fixture
def database(postgres: Cluster) -> str:
    """A new, empty database of the worker's cluster, as its URL (with the password)."""
    name = f"tables_{next(_DATABASES)}"
    postgres.psql(f"CREATE DATABASE {name}")
    return postgres.url(database=name)


def scored() -> pl.DataFrame:
    """A scored table with every column the scorer writes (lists of structs, instants, Chinese and Korean text)."""
    frame = pl.read_parquet(GOLDEN)
    missing = [pl.lit(None, dtype).alias(name) for name, dtype in S.SCORED_COLUMNS.items() if name not in frame.columns]
    frame = frame.with_columns(missing).with_columns(pl.col("prompt_tokens").alias("billed_prompt_tokens"))
    assert set(frame.get_column("language")) == {"en", "zh-TW", "zh-CN", "ko"}
    return frame


def test_a_day_reads_back_with_the_columns_and_dtypes_the_parquet_format_gives(database: str, tmp_path: Path) -> None:
    pg, parquet = PostgresTables(database), ParquetTables(Place.of(str(tmp_path)))
    for table, frame in (("scored_conversations", scored()), ("raw_conversations", pl.read_parquet(CHAT))):
        for tables in (pg, parquet):
            with tables.writer(table, DAY) as sink:
                for chunk in frame.iter_slices(5):  # chunk by chunk, as the assets write
                    sink.write(chunk)
        assert pg.schema(table, DAY) == parquet.schema(table, DAY) == frame.schema
        assert pg.rows(table, DAY) == frame.height
        assert_frame_equal(pl.concat(pg.batches(table, DAY, 4)), pl.concat(parquet.batches(table, DAY, 4)))
        assert [b.height for b in pg.batches(table, DAY, 4)] == [4] * (frame.height // 4) + [frame.height % 4]
        assert_frame_equal(pg.scan(table, [DAY]).collect(), frame)
    some = ["row_key", "verdicts", "scored_at"]
    assert_frame_equal(pl.concat(pg.batches("scored_conversations", DAY, 100, some)), scored().select(some))
    lazy = pg.scan("scored_conversations", [DAY]).filter(pl.col("language") == "ko").select("output", "n_claims")
    assert_frame_equal(lazy.collect(), scored().filter(pl.col("language") == "ko").select("output", "n_claims"))


def test_a_re_load_replaces_the_day_and_each_load_reads_back_as_of_its_id(database: str) -> None:
    tables = PostgresTables(database)
    first, second = pl.DataFrame({"a": [1, 2, 3]}), pl.DataFrame({"a": [10, 20]})
    with tables.writer("t", DAY) as one:
        one.write(first)
    with tables.writer("t", NEXT) as other_day:
        other_day.write(pl.DataFrame({"a": [7]}))
    with tables.writer("t", DAY) as two:
        two.write(second)
    assert one.committed and two.committed and int(two.committed) > int(one.committed)
    assert_frame_equal(tables.scan("t", [DAY]).collect(), second)
    assert tables.rows("t", DAY) == 2
    assert_frame_equal(tables.scan("t", [DAY], as_of=one.committed).collect(), first)
    assert_frame_equal(tables.scan("t", [DAY], as_of=two.committed).collect(), second)
    # As of the first load, the next day was not written yet; as of the second, it was.
    with pytest.raises(FileNotFoundError, match="materialise it first"):
        tables.scan("t", [NEXT], as_of=one.committed)
    assert tables.scan("t", [DAY, NEXT], as_of=two.committed).collect().get_column("a").to_list() == [10, 20, 7]
    with psycopg.connect(database) as conn:
        loads = conn.execute("SELECT load_id, ds::text, rows, replaced_by FROM faithfulness._loads "
                             "WHERE table_name = 't' ORDER BY load_id").fetchall()
    assert loads == [(int(one.committed), DAY, 3, int(two.committed)), (loads[1][0], NEXT, 1, None),
                     (int(two.committed), DAY, 2, None)]


def test_an_error_inside_the_block_leaves_the_day_as_it_was(database: str) -> None:
    tables = PostgresTables(database)
    with tables.writer("t", DAY) as sink:
        sink.write(pl.DataFrame({"a": [1, 2]}))
    with pytest.raises(RuntimeError, match="step failed"):
        _fail(tables, "t", pl.DataFrame({"a": [3, 4, 5]}))
    assert tables.scan("t", [DAY]).collect().get_column("a").to_list() == [1, 2]
    assert tables.rows("t", DAY) == 2
    with pytest.raises(RuntimeError):
        _fail(tables, "never", pl.DataFrame({"a": [1]}))
    assert not tables.exists("never", DAY)
    with pytest.raises(FileNotFoundError, match=r"never has no data for partition 2026-11-24 .*materialise it first"):
        tables.rows("never", DAY)


def _fail(tables: PostgresTables, table: str, frame: pl.DataFrame) -> None:
    """A step that writes ``frame`` into the day and then fails inside the block."""
    with tables.writer(table, DAY) as sink:
        sink.write(frame)
        raise RuntimeError("step failed")


def test_two_workers_creating_a_table_with_two_days_at_once_both_land(database: str) -> None:
    barrier, errors = threading.Barrier(4), []

    def write(day: str, value: int) -> None:
        try:
            tables = PostgresTables(database)  # each its own connection: its own server process
            barrier.wait()
            with tables.writer("new_table", day) as sink:
                sink.write(pl.DataFrame({"a": [value] * 1000, "extra": [str(value)] * 1000}))
        except Exception as exc:  # collected, and asserted empty below
            errors.append(exc)

    workers = [threading.Thread(target=write, args=(day, n)) for n, day in
               enumerate(("2026-11-01", "2026-11-02", "2026-11-03", "2026-11-01"))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    tables = PostgresTables(database)
    days = ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert [tables.rows("new_table", d) for d in days] == [1000, 1000, 1000]
    # The day two workers wrote holds one of them whole, never both.
    assert tables.scan("new_table", ["2026-11-01"]).collect().get_column("a").unique().len() == 1


def test_a_new_column_is_added_and_a_type_change_refused(database: str) -> None:
    tables = PostgresTables(database)
    with tables.writer("t", DAY) as sink:
        sink.write(pl.DataFrame({"a": [1]}))
    with tables.writer("t", NEXT) as sink:
        sink.write(pl.DataFrame({"a": [2], "b": ["新"]}))
    assert tables.schema("t", DAY) == pl.Schema({"a": pl.Int64})  # the old day's own columns, as parquet has
    both = tables.scan("t", [DAY, NEXT]).collect()
    assert both.to_dict(as_series=False) == {"a": [1, 2], "b": [None, "新"]}
    with pytest.raises(ConfigError) as info, tables.writer("t", DAY) as sink:
        sink.write(pl.DataFrame({"a": ["one"]}))
    message = str(info.value)
    assert "t.a is bigint" in message and "String (text)" in message and "cast it back" in message
    assert "\n" not in message
    assert tables.rows("t", DAY) == 1  # refused before anything was written


def test_loads_replaced_longer_ago_than_the_retention_are_deleted(database: str) -> None:
    tables = PostgresTables(database, retention_days=7)
    with tables.writer("t", DAY) as old:
        old.write(pl.DataFrame({"a": [1]}))
    with tables.writer("t", DAY) as new:
        new.write(pl.DataFrame({"a": [2]}))
    assert tables.scan("t", [DAY], as_of=old.committed).collect().item() == 1
    with psycopg.connect(database) as conn:
        conn.execute("UPDATE faithfulness._loads SET replaced_at = now() - interval '8 days' WHERE load_id = %s",
                     (int(old.committed or 0),))
    with tables.writer("t", NEXT) as sink:  # the next write of the table removes what is past retention
        sink.write(pl.DataFrame({"a": [3]}))
    with pytest.raises(FileNotFoundError, match="FP_VERSION_RETENTION_DAYS"):
        tables.scan("t", [DAY], as_of=old.committed)
    with psycopg.connect(database) as conn:
        kept = conn.execute('SELECT a FROM faithfulness."t__versions" ORDER BY a').fetchall()
    assert kept == [(2,), (3,)]
    assert tables.scan("t", [DAY]).collect().item() == 2


def test_an_empty_day_keeps_its_schema(database: str) -> None:
    tables = PostgresTables(database)
    with tables.writer("t", DAY, empty=pl.Schema({"a": pl.Int32, "l": pl.List(pl.String)})):
        pass
    assert tables.rows("t", DAY) == 0
    assert tables.scan("t", [DAY]).collect().schema == pl.Schema({"a": pl.Int32, "l": pl.List(pl.String)})
    assert list(tables.batches("t", DAY, 10)) == []


@pytest.mark.parametrize("make", [
    lambda cluster: None,
    lambda cluster: cluster.url(password="wrong-" + PASSWORD),
    lambda cluster: cluster.url(database="no_such_database"),
])
def test_a_database_that_cannot_be_used_is_one_line_naming_the_setting(
        postgres: Cluster, make: Callable[[Cluster], str | None]) -> None:
    with pytest.raises(ConfigError) as info:
        PostgresTables(make(postgres)).exists("t", DAY)
    message = str(info.value)
    assert "FP_POSTGRES_URL" in message and "\n" not in message
    assert PASSWORD not in message


def test_as_of_an_unknown_load_and_reserved_columns_are_refused(database: str) -> None:
    tables = PostgresTables(database)
    with tables.writer("t", DAY) as sink:
        sink.write(pl.DataFrame({"a": [1]}))
    with pytest.raises(ConfigError, match="no committed load 999"):
        tables.scan("t", [DAY], as_of="999")
    with pytest.raises(ConfigError, match="no load id"):
        tables.scan("t", [DAY], as_of="v3")
    with pytest.raises(ConfigError, match=r"'ds'.*rename"), tables.writer("t", DAY) as sink:
        sink.write(pl.DataFrame({"ds": [1]}))


def test_a_table_without_partitions_is_replaced_whole(database: str) -> None:
    tables = PostgresTables(database)
    with tables.writer("judge_calibration", None) as first:
        first.write(pl.DataFrame({"judge": ["a"], "agreement": [0.5]}))
    with tables.writer("judge_calibration", None) as second:
        second.write(pl.DataFrame({"judge": ["b", "c"], "agreement": [0.7, 0.9]}))
    assert tables.partitions("judge_calibration") == [None]
    assert tables.rows("judge_calibration", None) == 2
    assert tables.scan("judge_calibration", [None]).collect().get_column("judge").to_list() == ["b", "c"]
    assert tables.scan("judge_calibration", [None], as_of=first.committed).collect().get_column("judge").to_list() == ["a"]
    where = tables.location("judge_calibration", None)
    assert "judge_calibration" in where and PASSWORD not in where and PASSWORD in database


def test_batches_hold_at_most_the_rows_asked_for(database: str) -> None:
    tables = PostgresTables(database)
    frame = pl.DataFrame({"i": range(5_000), "l": [[str(i)] for i in range(5_000)]})
    with tables.writer("t", DAY) as sink:
        sink.write(frame)
    # fetched a few thousand rows at a time (FETCH_ROWS), gathered into batches of the size asked for
    assert [b.height for b in tables.batches("t", DAY, 3_000)] == [3_000, 2_000]
    assert_frame_equal(pl.concat(tables.batches("t", DAY, 3_000)), frame)


def test_a_scan_reads_at_most_scan_batch_rows_at_a_time_whatever_polars_asks(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # polars hints batches of 100,000 rows to an IO source: a whole typical day, held at once with its nested
    # columns decoded (the scored step's peak grew with the day: BENCHMARKS.md, table formats)
    tables = PostgresTables(database)
    frame = pl.DataFrame({"k": [f"k{i}" for i in range(2 * SCAN_BATCH + 1)], "l": [[i] for i in range(2 * SCAN_BATCH + 1)]})
    with tables.writer("t", DAY) as sink:
        sink.write(frame)
    asked: list[int] = []
    read = PostgresTables._load_batches

    def recorded(self: PostgresTables, *args: Any) -> Iterator[pl.DataFrame]:
        asked.append(args[-1])
        yield from read(self, *args)

    monkeypatch.setattr(PostgresTables, "_load_batches", recorded)
    lazy = tables.scan("t", [DAY])
    assert_frame_equal(lazy.collect(), frame)
    assert_frame_equal(lazy.filter(pl.col("k") == "k7").collect(engine="streaming"), frame.slice(7, 1))
    assert asked and max(asked) <= SCAN_BATCH

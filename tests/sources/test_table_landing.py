"""A landing table read without Dagster: the day's filter reaches the engine (files pruned, a parameterised
WHERE), chunks stay within the size asked for, days come from the table, and what cannot work is refused in
one line without a password. The tables are real: deltalake, pyiceberg with a SQLite catalog, and the worker's
throwaway PostgreSQL cluster (the Dagster runs over them: tests/defs/test_landing_tables.py)."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import polars as pl
import psycopg
import pytest
from deltalake import write_deltalake

from faithfulness_pipeline.core.errors import ConfigError, InputError
from faithfulness_pipeline.defs import DefsSettings
from faithfulness_pipeline.defs.resources import LandingResource
from faithfulness_pipeline.settings.landing import LandingSettings
from faithfulness_pipeline.sources.landing import LandingDay
from faithfulness_pipeline.sources.open import open_source
from faithfulness_pipeline.sources.table_landing import (
    LANDING_KINDS,
    TableSettings,
    landing_days,
    landing_kind,
    open_table,
)
from faithfulness_pipeline.tables import postgres_landing
from faithfulness_pipeline.tables.day_window import day_window
from faithfulness_pipeline.tables.delta_landing import DeltaLanding
from faithfulness_pipeline.tables.delta_tables import storage_options
from faithfulness_pipeline.tables.iceberg_landing import IcebergLanding, _between
from faithfulness_pipeline.tables.storage import Place
from tests.conftest import S3Bucket
from tests.defs.test_landing_tables import ROWS, Landing, delta_landing, iceberg_landing, postgres_table
from tests.doc_blocks import block
from tests.postgres_cluster import PASSWORD, Cluster

DAY = date(2026, 11, 25)
OF_DAY = {"en-25", "zh-25", "ko-25"}


def _settings(landing: Landing) -> TableSettings:
    fields = landing.fields
    return TableSettings(fields["path"], fields.get("query"), fields.get("iceberg_catalog"))


@pytest.fixture(params=["delta", "iceberg", "postgres"])
def landing(request: pytest.FixtureRequest, tmp_path: Path) -> Landing:
    if request.param == "delta":
        return delta_landing(tmp_path)
    if request.param == "iceberg":
        return iceberg_landing(tmp_path)
    return postgres_table(request.getfixturevalue("postgres"))


def test_the_kinds_are_declared_once_and_told_apart(landing: Landing, tmp_path: Path) -> None:
    kind = landing_kind(landing.fields["path"])
    assert kind is not None and kind in LANDING_KINDS
    assert {k.name for k in LANDING_KINDS} == {"delta", "iceberg", "postgres"}
    (tmp_path / "files").mkdir()
    assert landing_kind(str(tmp_path / "files")) is None  # a folder of files without a Delta log


def test_a_day_arrives_whole_in_bounded_chunks_and_only_that_day(landing: Landing) -> None:
    day = LandingDay(landing.fields["path"], DAY, "created_at", query=landing.fields.get("query"),
                     iceberg_catalog=landing.fields.get("iceberg_catalog"))
    source = open_source(day, rows=1)
    chunks = list(source.chunks())
    assert all(chunk.height <= 1 for chunk in chunks) and len(chunks) == 3
    rows = pl.concat(chunks)
    assert set(rows.get_column("conversation_id")) == OF_DAY
    assert dict(zip(rows["conversation_id"], rows["output"], strict=True))["ko-25"] == "에펠탑은 파리에 있습니다."
    assert rows.schema["context"] == pl.List(pl.String)
    assert source.parts[0].rows_before(DAY) == 1  # en-24, a second before midnight, counted by the engine
    # the days come from the table, in the landing's time zone: 23:59:59 UTC on the 25th is the 26th in Seoul
    assert landing_days(_settings(landing), "created_at", "UTC", None) == {date(2026, 11, d) for d in (24, 25, 26)}
    seoul = LandingDay(day.location, DAY, "created_at", timezone="Asia/Seoul", query=day.query,
                       iceberg_catalog=day.iceberg_catalog)
    in_seoul = pl.concat(list(open_source(seoul, rows=100).chunks())).get_column("conversation_id")
    # Seoul's 25th is 15:00 UTC on the 24th to 15:00 UTC on the 25th: en-24 (23:59:59 UTC) is 08:59:59 there
    assert set(in_seoul) == {"en-24", "en-25", "zh-25"}


def test_a_day_without_rows_still_has_every_column(landing: Landing) -> None:
    day = LandingDay(landing.fields["path"], date(2026, 11, 30), "created_at", query=landing.fields.get("query"),
                     iceberg_catalog=landing.fields.get("iceberg_catalog"))
    chunks = list(open_source(day, rows=10).chunks())
    assert [c.height for c in chunks] == [0] and "output" in chunks[0].columns


def test_delta_opens_only_the_files_that_may_hold_the_day(tmp_path: Path) -> None:
    table = DeltaLanding(delta_landing(tmp_path).fields["path"])
    low, high = day_window(DAY, "UTC").bounds("instant")
    assert len(table._dataset("created_at", None, None).files) == 3  # a commit per day
    assert len(table._dataset("created_at", low, high).files) == 1


def test_iceberg_plans_only_the_files_that_may_hold_the_day(tmp_path: Path) -> None:
    landing = iceberg_landing(tmp_path)
    table = IcebergLanding(landing.fields["path"], landing.fields["iceberg_catalog"])
    low, high = day_window(DAY, "UTC").bounds("instant")
    scan = table._table.scan(row_filter=_between("created_at", low, high, False))
    assert len(list(table._table.scan().plan_files())) == 3 and len(list(scan.plan_files())) == 1


def test_postgres_sends_the_day_as_parameters_through_a_server_side_cursor(
    postgres: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    landing = postgres_table(postgres)
    sent: list[tuple[str, Any]] = []
    execute = psycopg.ServerCursor.execute

    def recording(cursor: psycopg.ServerCursor[Any], query: Any, params: Any = None, **kwargs: Any) -> Any:
        sent.append((query.as_string(cursor.connection), params))
        return execute(cursor, query, params, **kwargs)

    monkeypatch.setattr(psycopg.ServerCursor, "execute", recording)
    day = LandingDay(landing.fields["path"], DAY, "created_at", query=landing.fields["query"])
    assert set(pl.concat(list(open_source(day, rows=2).chunks()))["conversation_id"]) == OF_DAY
    [(sql, params)] = sent
    assert 'WHERE ("created_at" >= %(low)s AND "created_at" < %(high)s)' in sql and "2026" not in sql
    assert params == {"low": day_window(DAY, "UTC").start, "high": day_window(DAY, "UTC").end}


def test_a_postgres_query_without_the_timestamp_column_is_refused_naming_both_settings(postgres: Cluster) -> None:
    url = postgres_table(postgres).fields["path"]
    kind = landing_kind(url)
    assert kind is not None
    with pytest.raises(InputError) as refused:
        open_table(kind, TableSettings(url, "SELECT conversation_id, output FROM app.conversations"), "created_at")
    message = str(refused.value)
    assert "FP_TIMESTAMP_COLUMN" in message and "FP_LANDING_QUERY" in message and "\n" not in message
    assert PASSWORD not in message


def test_a_text_timestamp_column_is_refused_naming_the_fix(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "t"), ROWS.with_columns(pl.col("created_at").cast(pl.String)).to_arrow())
    kind = landing_kind(str(tmp_path / "t"))
    assert kind is not None and kind.name == "delta"
    with pytest.raises(InputError, match="timestamp or a date"):
        open_table(kind, TableSettings(str(tmp_path / "t")), "created_at")


@pytest.mark.parametrize(("fields", "names"), [
    ({"path": "mysql://fp:hunter2-secret@db/app"}, "no landing kind"),
    ({"path": "postgresql://fp:hunter2-secret@db/app"}, "FP_LANDING_QUERY"),
    ({"path": "postgresql://fp:hunter2-secret@db/app", "query": "a.b.c"}, "neither a table"),
    ({"path": "iceberg://logs.conversations"}, "FP_LANDING_ICEBERG_CATALOG"),
    ({"path": "iceberg://conversations", "iceberg_catalog": "sqlite:////tmp/c.sqlite"}, "iceberg://NAMESPACE.TABLE"),
])
def test_bad_settings_are_refused_when_they_load(fields: dict[str, str], names: str) -> None:
    for make in (LandingSettings, LandingResource):
        with pytest.raises(ConfigError, match=names) as refused:
            make(**fields)  # type: ignore[arg-type]
        assert "hunter2-secret" not in str(refused.value) and "\n" not in str(refused.value)
    env = {"FP_" + ("LANDING" if k == "path" else f"LANDING_{k.upper()}"): v for k, v in fields.items()}
    with pytest.raises(ConfigError, match=names):
        DefsSettings.from_env(env)


def test_an_unreachable_database_or_catalog_is_one_line_without_its_password(postgres: Cluster) -> None:
    wrong = postgres.url(password="not-the-password-9f2")
    with pytest.raises(ConfigError, match="cannot be reached") as refused:
        landing_days(TableSettings(wrong, "app.conversations"), "created_at", "UTC", None)
    assert "not-the-password-9f2" not in str(refused.value) and "\n" not in str(refused.value)
    catalog = "postgresql://fp:catalog-secret-77@127.0.0.1:9/catalog"  # nothing listens on port 9
    with pytest.raises(ConfigError, match="FP_LANDING_ICEBERG_CATALOG") as refused:
        landing_days(TableSettings("iceberg://logs.conversations", None, catalog), "created_at", "UTC", None)
    assert "catalog-secret-77" not in str(refused.value)


def test_the_docs_snippet_lists_the_days_of_a_postgres_landing_table(postgres: Cluster) -> None:
    """docs/table-formats.md's block, run as printed with ``url`` the test table's database."""
    code = block("docs/table-formats.md", "python", "landing_days(TableSettings(url")
    namespace: dict[str, Any] = {"url": postgres_table(postgres).fields["path"]}
    exec(compile(code, "docs/table-formats.md", "exec"), namespace)
    # in Seoul, en-24 (23:59:59 UTC on the 24th) is the morning of the 25th: no row is on the 24th there
    assert namespace["days"] == {date(2026, 11, 25), date(2026, 11, 26)}


def test_postgres_jsonb_chat_messages_arrive_as_the_list_of_structs_a_chat_row_is(
    postgres: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_table(postgres).fields["path"]
    chat = [{"role": "user", "content": "에펠탑은 어디에 있나요?"}, {"role": "assistant", "content": "파리에 있습니다."}]
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE app.chats (conversation_id text, created_at timestamptz, messages jsonb, "
                     "extra jsonb)")
        conn.execute("INSERT INTO app.chats VALUES ('chat-ko', '2026-11-25T08:00:00Z', %s, NULL)",
                     (psycopg.types.json.Jsonb(chat),))
    day = LandingDay(url, DAY, "created_at", query="app.chats")
    [rows] = list(open_source(day, rows=10).chunks())
    assert rows.schema["messages"] == pl.List(pl.Struct({"role": pl.String, "content": pl.String}))
    assert rows.get_column("messages").to_list() == [chat]
    assert rows.schema["extra"] == pl.String  # never a value to learn its type from: kept as its JSON text
    with psycopg.connect(url) as conn:  # a later row of another shape than the sample's is one line, not a panic
        conn.execute("INSERT INTO app.chats VALUES ('chat-2', '2026-11-25T09:00:00Z', '\"just text\"', NULL)")
    in_order = LandingDay(url, DAY, "created_at", query="SELECT * FROM app.chats ORDER BY created_at")
    with pytest.raises(InputError, match=r"more than one shape.*column::text"):
        open_source(in_order, rows=10)  # the sample holds both shapes
    monkeypatch.setattr(postgres_landing, "JSON_SAMPLE", 1)  # the sample sees the chat only; a later chunk differs
    with pytest.raises(InputError, match=r"differs from the first 1 rows'.*column::text"):
        list(open_source(in_order, rows=10).chunks())


def test_a_delta_landing_in_an_object_store_gives_its_day(s3: S3Bucket) -> None:
    """The moto server of the tests: a Delta table written to a bucket is found by its log and read by the day."""
    uri = s3.uri("logs/conversations")
    for day in (24, 25, 26):
        write_deltalake(uri, ROWS.filter(pl.col("created_at").dt.day() == day).to_arrow(), mode="append",
                        storage_options=storage_options(Place.of(uri)))
    kind = landing_kind(uri)
    assert kind is not None and kind.name == "delta"
    rows = pl.concat(list(open_source(LandingDay(uri, DAY, "created_at"), rows=2).chunks()))
    assert set(rows.get_column("conversation_id")) == OF_DAY
    assert landing_days(TableSettings(uri), "created_at", "UTC", None) == {date(2026, 11, d) for d in (24, 25, 26)}

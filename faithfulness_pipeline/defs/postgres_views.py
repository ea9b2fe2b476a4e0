"""The BI views of a warehouse in the postgres table format: the DuckDB file's views (``defs.duckdb_views``), as
PostgreSQL views in the format's schema, so Metabase, Superset or psql point at the database itself.

Each BI table gets a view of its name over its current rows (those of loads no later load replaced;
``tables.postgres_tables``), without the format's own columns, with one day column ``day`` (the partition day,
or the ``day`` the rows carry), described by the outputs' entries (``COMMENT ON``). The claim table's view takes
each claim's passage from the scored rows' verdicts (``jsonb``), as the DuckDB view does. The views are rebuilt
on each materialisation of ``answer_quality_duckdb``, in one transaction: a column a later version added shows.

    SELECT day, model, answers, hallucination_mean FROM faithfulness.daily_answer_quality ORDER BY day, model;
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from faithfulness_pipeline.defs.duckdb_views import BI_TABLES
from faithfulness_pipeline.outputs import describe, table_descriptions
from faithfulness_pipeline.outputs.claim_table import CLAIM_TABLE
from faithfulness_pipeline.tables.postgres_connect import connect
from faithfulness_pipeline.tables.postgres_tables import DAY, LOAD_ID, LOADS, RESERVED, PostgresTables

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql

SCORED = "scored_conversations"


def _columns(conn: psycopg.Connection[Any], tables: PostgresTables, table: str) -> list[str]:
    """The table's own columns in the database (none when it was never written)."""
    found = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped "
        "ORDER BY attnum", (tables.rows_table(table),)).fetchall()
    return [str(r[0]) for r in found if r[0] not in RESERVED]


def _current(tables: PostgresTables, table: str, alias: str) -> sql.Composed:
    """``table``'s rows as ``alias``, only those of current loads."""
    from psycopg import sql

    load = sql.Identifier(f"{alias}_load")
    return sql.SQL("{rows} {alias} JOIN {loads} {load} ON {load}.load_id = {alias}.{load_id} AND {load}.replaced_by "
                   "IS NULL AND {load}.version IS NOT NULL").format(
        rows=tables.rows_identifier(table), alias=sql.Identifier(alias), loads=tables.qualified(LOADS), load=load,
        load_id=sql.Identifier(LOAD_ID))


def view_sql(tables: PostgresTables, table: str, columns: list[str], scored: bool) -> sql.Composed:
    """The view of ``table`` (``columns``: its own); ``scored``: the scored rows are there to join passages from."""
    from psycopg import sql

    own = [sql.SQL("r.{}").format(sql.Identifier(c)) for c in columns if c != "evidence" or not scored]
    if table == CLAIM_TABLE.name and scored:
        # Each claim's passage from its answer's verdicts (jsonb arrays are 0-based, as claim_index is).
        passage: sql.Composable = sql.SQL("s.verdicts -> r.claim_index ->> 'evidence'")
        if "evidence" in columns:
            passage = sql.SQL("coalesce(r.evidence, {})").format(passage)
        own.append(sql.SQL("{} AS evidence").format(passage))
    if "day" not in columns:
        own.append(sql.SQL("r.{} AS day").format(sql.Identifier(DAY)))
    source = _current(tables, table, "r")
    if table == CLAIM_TABLE.name and scored:
        source = sql.SQL("{} LEFT JOIN (SELECT x.row_key, x.{} AS ds, x.verdicts FROM {}) s ON s.row_key = r.row_key "
                         "AND s.ds = r.{}").format(source, sql.Identifier(DAY), _current(tables, SCORED, "x"),
                                                  sql.Identifier(DAY))
    return sql.SQL("CREATE VIEW {} AS SELECT {} FROM {}").format(
        tables.qualified(table), sql.SQL(", ").join(own), source)


def build_views(tables: PostgresTables) -> dict[str, int]:
    """(Re)creates a view per BI table that has rows, in one transaction; returns the current rows per view
    (from ``_loads``, no row is counted)."""
    from psycopg import sql

    rows: dict[str, int] = {}
    conn = connect(tables.url)
    try:
        present = {t: _columns(conn, tables, t) for t in BI_TABLES}
        scored = bool(present.get(SCORED)) and "verdicts" in present[SCORED]
        for table, columns in present.items():
            conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(tables.qualified(table)))
            if not columns:
                continue
            conn.execute(view_sql(tables, table, columns, scored))
            conn.execute(sql.SQL("COMMENT ON VIEW {} IS {}").format(
                tables.qualified(table), sql.Literal(table_descriptions()[table])))
            for column in dict.fromkeys([*columns, "day"]):
                text = describe(table, column)
                if text:
                    conn.execute(sql.SQL("COMMENT ON COLUMN {}.{} IS {}").format(
                        tables.qualified(table), sql.Identifier(column), sql.Literal(text)))
            count = conn.execute(sql.SQL("SELECT coalesce(sum(rows), 0) FROM {} WHERE table_name = %s AND "
                                         "replaced_by IS NULL AND version IS NOT NULL").format(tables.qualified(LOADS)),
                                 (table,)).fetchone()
            rows[table] = int(count[0]) if count else 0
        conn.commit()
    finally:
        conn.close()
    return rows

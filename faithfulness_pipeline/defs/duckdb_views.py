"""The BI database: one DuckDB file whose views read the warehouse's Parquet tables.

Any SQL BI tool opens answer quality with one connection string (Metabase, Superset, Evidence or
DuckDB's own UI). The views hold no data: they read ``<table>/ds=*/data.parquet`` at query time, so every
newly materialised day shows up without touching the database. The file is rebuilt atomically (a new
file swapped in), so a BI tool never sees it half-written.

Paths are relative to the warehouse root, so the warehouse (with the file inside it) can be moved, copied
or mounted anywhere. DuckDB resolves a relative path from its ``file_search_path`` setting, else from the
working directory: open the file from the warehouse folder (``cd warehouse && duckdb answer_quality.duckdb``)
or set ``SET file_search_path = '/where/the/warehouse/is'`` (a BI tool's init SQL; in Python
``duckdb.connect(path, config={"file_search_path": root})``).

Every view has one day column, ``day`` (DATE): the partition day of ``scored_conversations`` (its folder
name, renamed), the ``day`` column that ``claim_table`` and ``daily_answer_quality`` carry. Views and
columns carry comments (``COMMENT ON``) from ``core/descriptions.py``, the text Dagster's column schema
shows too: ``SELECT * FROM duckdb_columns() WHERE table_name = 'claim_table'``.

Queries (from the warehouse folder: ``duckdb answer_quality.duckdb``)::

    -- hallucination trend per model
    SELECT day, model, answers, hallucination_mean, hallucination_p90, over_threshold_share, billed_cost_usd
    FROM daily_answer_quality ORDER BY day, model;

    -- contradicted claims with the judge's reason and evidence: no join needed
    SELECT day, model, conversation_id, claim, reason, evidence FROM claim_table WHERE verdict = 'contradicted';
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from faithfulness_pipeline.core.descriptions import TABLE_DESCRIPTIONS, describe
from faithfulness_pipeline.core.io import atomic_path

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

#: The tables exposed as views, in the order they are created.
BI_TABLES = ("scored_conversations", "claim_table", "daily_answer_quality")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


#: Tables whose files carry their own ``day`` column; the others get it from the partition folder.
_DAY_IN_FILE = ("claim_table", "daily_answer_quality")


def view_sql(table: str) -> str:
    """The view of ``table``, reading its partitions by a path relative to the warehouse root."""
    pattern = _quote(f"{table}/ds=*/data.parquet")
    if table in _DAY_IN_FILE:
        return (
            f'CREATE OR REPLACE VIEW "{table}" AS SELECT * FROM read_parquet({pattern}, '
            f"hive_partitioning = false, union_by_name = true)"
        )
    return (
        f'CREATE OR REPLACE VIEW "{table}" AS SELECT * EXCLUDE (ds), ds AS day FROM read_parquet({pattern}, '
        f"hive_partitioning = true, hive_types = {{'ds': DATE}}, union_by_name = true)"
    )


def comment_sql(con: DuckDBPyConnection, table: str) -> list[str]:
    """``COMMENT ON`` statements for the view and every column that has a description."""
    columns = [row[0] for row in con.execute(f'DESCRIBE "{table}"').fetchall()]
    statements = [f'COMMENT ON VIEW "{table}" IS {_quote(TABLE_DESCRIPTIONS[table])}']
    for column in columns:
        text = describe(table, column)
        if text:
            name = column.replace('"', '""')
            statements.append(f'COMMENT ON COLUMN "{table}"."{name}" IS {_quote(text)}')
    return statements


def build_database(target: Path, root: Path) -> dict[str, int]:
    """Rebuild the DuckDB file at ``target`` with a view per BI table that has data; returns rows per view."""
    import duckdb  # lazily: importing the code location stays fast

    present = [t for t in BI_TABLES if any((root / t).glob("ds=*/data.parquet"))]
    rows: dict[str, int] = {}
    with atomic_path(target, suffix=".duckdb") as tmp:
        tmp.unlink()  # duckdb creates its own file; an empty placeholder is not a database
        con = duckdb.connect(str(tmp), config={"file_search_path": str(root)})
        try:
            for table in present:
                con.execute(view_sql(table))
                for statement in comment_sql(con, table):
                    con.execute(statement)
                count = con.execute(f'SELECT count(*) FROM "{table}"').fetchone()
                rows[table] = int(count[0]) if count else 0
            con.execute("CHECKPOINT")
        finally:
            con.close()
    return rows

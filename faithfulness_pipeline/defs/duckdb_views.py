"""The BI database: one DuckDB file whose views read the warehouse's Parquet tables.

Any SQL BI tool opens answer quality with one connection string (Metabase, Superset, Evidence or
DuckDB's own UI). The views hold no data: they read ``<table>/ds=*/data.parquet`` at query time, so every
newly materialised day shows up without touching the database. The file is rebuilt atomically (a new
file swapped in), so a BI tool never sees it half-written.

Paths are relative to a local warehouse root, so the warehouse (with the file inside it) can be moved,
copied or mounted anywhere. DuckDB resolves a relative path from its ``file_search_path`` setting, else from
the working directory: open the file from the warehouse folder (``cd warehouse && duckdb answer_quality.duckdb``)
or set ``SET file_search_path = '/where/the/warehouse/is'`` (a BI tool's init SQL; in Python
``duckdb.connect(path, config={"file_search_path": root})``).

A warehouse in an object store gets views over absolute URIs (``s3://bucket/warehouse/claim_table/ds=*/...``),
which a BI tool's DuckDB reads with its httpfs extension and its own credentials (``CREATE SECRET``). Building
the file here needs no extension: the connection reads the store through the warehouse's own pyarrow
filesystem, wrapped for fsspec (``register_filesystem``), to describe the views and count their rows. The
file is built locally, then put where it belongs (uploaded, atomically, when that is a URI).

Every view has one day column, ``day`` (DATE): the partition day of ``scored_conversations`` (its folder
name, renamed), the ``day`` column that ``claim_table`` and ``daily_answer_quality`` carry. Views and
columns carry comments (``COMMENT ON``) from the outputs' entries (``outputs.catalog``), the text Dagster's
column schema shows too: ``SELECT * FROM duckdb_columns() WHERE table_name = 'claim_table'``.

Queries (from the warehouse folder: ``duckdb answer_quality.duckdb``)::

    -- hallucination trend per model
    SELECT day, model, answers, hallucination_mean, hallucination_p90, over_threshold_share, billed_cost_usd
    FROM daily_answer_quality ORDER BY day, model;

    -- the passages an answer was judged against live in raw_conversations (the scored table leaves them there)
    SELECT s.row_key, s.hallucination_score, r.context FROM scored_conversations s
    JOIN raw_conversations r USING (row_key, day) WHERE s.status = 'ok' ORDER BY s.hallucination_score DESC;

    -- which model differences were larger than their noise, day by day
    SELECT day, segment, score, group_by, "group", difference, low, high FROM daily_model_comparison
    WHERE verdict = 'larger than noise' ORDER BY day;

    -- contradicted claims with the judge's reason and evidence: the view brings the passage along
    SELECT day, model, conversation_id, claim, reason, evidence FROM claim_table WHERE verdict = 'contradicted';

The claim table's files hold no passage (a passage decides several claims, and each claim's row repeated it:
it was most of the file). Its view takes each claim's ``evidence`` from ``scored_conversations``' verdicts,
which hold it once, by row key, day and claim index; files written before keep theirs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from faithfulness_pipeline.outputs import describe, table_descriptions, tables
from faithfulness_pipeline.outputs.catalog import RAW_TABLE
from faithfulness_pipeline.outputs.claim_table import CLAIM_TABLE
from faithfulness_pipeline.tables.delta_tables import live_files
from faithfulness_pipeline.tables.parquet_tables import DATA_FILE, PARTITION_PREFIX
from faithfulness_pipeline.tables.storage import Place

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection

#: The tables exposed as views, in the order they are created: every output table that wants a view, and the
#: landed rows (their passages).
BI_TABLES = (*(t.name for t in tables() if t.view), RAW_TABLE)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


#: Tables whose files carry their own ``day`` column; the others get it from the partition folder.
_DAY_IN_FILE = tuple(t.name for t in tables() if t.day_in_rows)


#: A table's data files where the format lists them (``iceberg``: its current snapshot's), not the Parquet layout.
Listed = Mapping[str, Sequence[Place]]


def _read(table: str, root: Place | None, listed: Listed | None = None) -> str:
    """``read_parquet`` of ``table``'s partitions, by a path relative to the warehouse root, or below the URI
    of ``root`` when that is in an object store; ``listed``: of those files (they carry the day as ``ds``). A
    Delta table's are the files of its latest version, listed (its folder keeps those of replaced versions too):
    the view is rewritten at each materialisation of the file."""
    if listed is not None:
        local = root is not None and not root.remote
        names = [_quote(os.path.relpath(f.path, root.path) if local and root is not None else f.uri)
                 for f in listed[table]]
        return f"read_parquet([{', '.join(names)}], hive_partitioning = false, union_by_name = true)"
    prefix = f"{root.uri}/" if root is not None and root.remote else ""
    live = None if root is None else live_files(root.child(table))
    if live:
        base = root.child(table).path if root is not None else ""
        pattern = "[" + ", ".join(_quote(f"{prefix}{table}/{f.path[len(base):].lstrip('/')}") for f in live) + "]"
    else:
        pattern = _quote(f"{prefix}{table}/{PARTITION_PREFIX}*/{DATA_FILE}")
    if table in _DAY_IN_FILE:
        return f"read_parquet({pattern}, hive_partitioning = false, union_by_name = true)"
    return f"read_parquet({pattern}, hive_partitioning = true, hive_types = {{'ds': DATE}}, union_by_name = true)"


def view_sql(table: str, root: Place | None = None, *, with_evidence: bool = False,
             listed: Listed | None = None) -> str:
    """The view of ``table``. ``with_evidence``: the claim table's files (some of them) still hold passages;
    ``listed``: the format's files, whose ``ds`` is text (the Parquet layout's is the folder's DATE)."""
    day = "CAST(ds AS DATE)"
    if table == CLAIM_TABLE.name:
        # Each claim's passage from the verdicts of its answer (the claim index is 0-based, lists 1-based).
        passage = "s.verdicts[c.claim_index + 1].evidence"
        drop = ["evidence"] if with_evidence else []
        drop += ["ds"] if listed is not None else []
        kept = f"c.* EXCLUDE ({', '.join(drop)})" if drop else "c.*"
        columns = f"{kept}, coalesce(c.evidence, {passage})" if with_evidence else f"{kept}, {passage}"
        return (
            f'CREATE OR REPLACE VIEW "{table}" AS SELECT {columns} AS evidence FROM {_read(table, root, listed)} c '
            f"LEFT JOIN (SELECT row_key, {day} AS day, verdicts FROM "
            f"{_read('scored_conversations', root, listed)}) s ON s.row_key = c.row_key AND s.day = c.day"
        )
    if table in _DAY_IN_FILE:
        kept = "* EXCLUDE (ds)" if listed is not None else "*"
        return f'CREATE OR REPLACE VIEW "{table}" AS SELECT {kept} FROM {_read(table, root, listed)}'
    return f'CREATE OR REPLACE VIEW "{table}" AS SELECT * EXCLUDE (ds), {day} AS day FROM {_read(table, root, listed)}'


def comment_sql(con: DuckDBPyConnection, table: str) -> list[str]:
    """``COMMENT ON`` statements for the view and every column that has a description."""
    columns = [row[0] for row in con.execute(f'DESCRIBE "{table}"').fetchall()]
    statements = [f'COMMENT ON VIEW "{table}" IS {_quote(table_descriptions()[table])}']
    for column in columns:
        text = describe(table, column)
        if text:
            name = column.replace('"', '""')
            statements.append(f'COMMENT ON COLUMN "{table}"."{name}" IS {_quote(text)}')
    return statements


def _partitions(root: Place, table: str) -> bool:
    folder = root.child(table)
    live = live_files(folder)
    if live is not None:
        return bool(live)
    return any(f.name == DATA_FILE and f.parent().name.startswith(PARTITION_PREFIX) for f in folder.files(".parquet"))


def store_filesystem(place: Place) -> Any:
    """The fsspec filesystem DuckDB reads ``place``'s object store through (``register_filesystem``): its
    pyarrow filesystem, so the same credentials; under the scheme the views' URIs use."""
    from fsspec.implementations.arrow import ArrowFSWrapper

    class StoreFileSystem(ArrowFSWrapper):  # type: ignore[misc]
        # ArrowFSWrapper names itself after pyarrow's type ("gcs" for gs:// URIs): DuckDB routes by this name.
        @property
        def protocol(self) -> tuple[str, ...]:
            return (place.scheme,)

    # No fsspec instance cache: a cached wrapper could outlive the environment (endpoint, keys) of its fs.
    return StoreFileSystem(place.fs, skip_instance_cache=True)


def build_database(target: str | os.PathLike[str] | Place, root: str | os.PathLike[str] | Place,
                   listed: Listed | None = None) -> dict[str, int]:
    """Rebuild the DuckDB file at ``target`` (a local path or a URI) with a view per BI table of the warehouse
    at ``root`` that has data; returns rows per view. ``listed``: the tables' data files, where the table format
    lists them (the views then read those files, and are rebuilt by each materialisation that changes them)."""
    import duckdb  # lazily: importing the code location stays fast

    warehouse, destination = Place.of(root), Place.of(target)
    present = [t for t in BI_TABLES if (listed.get(t) if listed is not None else _partitions(warehouse, t))]
    rows: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="fp-duckdb-") as scratch:
        built = Path(scratch) / "answer_quality.duckdb"
        config: dict[str, Any] = {} if warehouse.remote else {"file_search_path": warehouse.path}
        con = duckdb.connect(str(built), config=config)
        try:
            if warehouse.remote:
                con.register_filesystem(store_filesystem(warehouse))
            con.execute("BEGIN TRANSACTION")  # one commit: each statement on its own was a commit and an fsync
            for table in present:
                described = con.execute(f"DESCRIBE SELECT * FROM {_read(table, warehouse, listed)}").fetchall()
                con.execute(view_sql(table, warehouse, listed=listed, with_evidence=table == CLAIM_TABLE.name
                                     and "evidence" in [row[0] for row in described]))
                for statement in comment_sql(con, table):
                    con.execute(statement)
                # Counted from the files (their footers), not the view: the claim table's view joins the verdicts
                # of every day, whose memory grows with the month; it has a row per file row all the same.
                count = con.execute(f"SELECT count(*) FROM {_read(table, warehouse, listed)}").fetchone()
                rows[table] = int(count[0]) if count else 0
            con.execute("COMMIT")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        destination.put_file(built)  # whole, atomically: a BI tool never opens half a file
    return rows

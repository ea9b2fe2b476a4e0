"""A day read from a landing table (Delta, Iceberg in a SQLite catalog, PostgreSQL): peak memory and time for a
small and a large day, the chunks taken as fast as they come (``sources.table_landing``, 10,000 rows a chunk).

Each table holds one day, in files of 100,000 rows for Delta and Iceberg (a commit each), so the large day has
more files, not larger ones; PostgreSQL's table has an index on the timestamp column, on a throwaway cluster
(``tests/postgres_cluster.py``). Each read runs in a process of its own (``--read``): its ``ru_maxrss`` is its
own peak, from which the import baseline is shown apart.

    .venv/bin/python bench/landing_tables.py [--small 200000] [--large 1000000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, machine, machine_line

DAY = dt.date(2026, 11, 25)
FILE_ROWS = 100_000
CHUNK_ROWS = 10_000


def _frame(start: int, count: int) -> Any:
    import polars as pl

    index = pl.int_range(start, start + count, eager=True)
    midnight = dt.datetime.combine(DAY, dt.time(), dt.UTC)
    return pl.DataFrame({
        "conversation_id": "c" + index.cast(pl.String),
        "created_at": [midnight + dt.timedelta(seconds=i % 86_400) for i in range(start, start + count)],
        "model": ["gpt-4o-mini"] * count,
        "output": "The Eiffel Tower is 330 metres tall, answer " + index.cast(pl.String) + " of the day's many.",
        "context": [["The Eiffel Tower is 330 metres tall and stands in Paris, on the Champ de Mars."]] * count,
    })


def _make(kind: str, rows: int, where: str) -> dict[str, str]:
    """Writes the table; the landing fields that read it."""
    parts = [(start, min(FILE_ROWS, rows - start)) for start in range(0, rows, FILE_ROWS)]
    if kind == "delta":
        from deltalake import write_deltalake

        for start, count in parts:
            write_deltalake(where, _frame(start, count).to_arrow(), mode="append")
        return {"location": where}
    if kind == "iceberg":
        from pyiceberg.catalog.sql import SqlCatalog

        os.makedirs(where)
        catalog = SqlCatalog("faithfulness", uri=f"sqlite:///{where}/catalog.sqlite", warehouse=Path(where).as_uri())
        catalog.create_namespace("logs")
        table = None
        for start, count in parts:
            arrow = _frame(start, count).to_arrow()
            table = table or catalog.create_table(("logs", "conversations"), schema=arrow.schema)
            table.append(arrow)
        return {"location": "iceberg://logs.conversations", "iceberg_catalog": f"sqlite:///{where}/catalog.sqlite"}
    import psycopg

    with psycopg.connect(where) as conn, conn.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS conversations; CREATE TABLE conversations (conversation_id text, "
                       "created_at timestamptz, model text, output text, context text[])")
        for start, count in parts:
            with cursor.copy("COPY conversations FROM STDIN") as copy:
                for row in _frame(start, count).iter_rows():
                    copy.write_row(row)
        cursor.execute("CREATE INDEX ON conversations (created_at)")
    return {"location": where, "query": "conversations"}


def _read(fields: dict[str, str]) -> None:
    """In a process of its own: reads the day, prints rows, seconds, the import baseline and the peak (MB)."""
    from faithfulness_pipeline.sources.landing import LandingDay
    from faithfulness_pipeline.sources.open import open_source

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.monotonic()
    day = LandingDay(fields["location"], DAY, "created_at", query=fields.get("query"),
                     iceberg_catalog=fields.get("iceberg_catalog"))
    rows = sum(chunk.height for chunk in open_source(day, rows=CHUNK_ROWS).chunks())
    print(json.dumps({"rows": rows, "seconds": time.monotonic() - started, "base_mb": base,
                      "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def _child(*args: str) -> Any:
    """This script in a process of its own, its last line of output read as JSON. The tables are made in one too:
    a child's ``ru_maxrss`` starts at its parent's RSS, which must stay small."""
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--read", help=argparse.SUPPRESS)
    parser.add_argument("--make", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.read:
        _read(json.loads(args.read))
        return
    if args.make:
        kind, rows, where = args.make
        print(json.dumps(_make(kind, int(rows), where)))
        return
    from tests.postgres_cluster import postgres_cluster

    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp, postgres_cluster() as cluster:
        for kind in ("delta", "iceberg", "postgres"):
            for rows in (args.small, args.large):
                where = cluster.url() if kind == "postgres" else f"{tmp}/{kind}-{rows}"
                measured = _child("--read", json.dumps(_child("--make", kind, str(rows), where)))
                assert measured["rows"] == rows, (kind, measured)
                results.setdefault(kind, []).append(measured)
    print("# A day read from a landing table\n")
    print(f"One day of {args.small:,} and of {args.large:,} rows read with its filter pushed down, {CHUNK_ROWS:,} "
          f"rows a chunk (Delta and Iceberg: files of {FILE_ROWS:,} rows). Peak RSS of the reading process; "
          f"importing the package alone takes the baseline.\n")
    print(f"| table | {args.small:,} rows: peak | wall | {args.large:,} rows: peak | wall | baseline |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind, (small, large) in results.items():
        print(f"| {kind} | {small['peak_mb']:.0f} MB | {small['seconds']:.1f} s | {large['peak_mb']:.0f} MB | "
              f"{large['seconds']:.1f} s | {large['base_mb']:.0f} MB |")
    print()
    print(machine_line({"machine": machine(), "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()

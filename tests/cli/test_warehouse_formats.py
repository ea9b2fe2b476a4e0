"""The commands that read a warehouse (``report``, ``compare``, ``estimate``) on real tables of every table format:
the scored sample written through each format's own writer (a Delta table, an Iceberg table in a SQLite catalog,
PostgreSQL tables in the tests' throwaway cluster), read by the real command line in a child process, and every
figure equal to the one the same rows give in the Parquet layout; a re-scored day read as of the version it
replaced (``--as-of``); an unknown format, an unreachable database or catalog and a missing table refused in one
line that names the fix and no secret."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from faithfulness_pipeline.tables.delta_tables import DeltaTables
from faithfulness_pipeline.tables.iceberg_tables import iceberg_tables
from faithfulness_pipeline.tables.parquet_tables import ParquetTables
from faithfulness_pipeline.tables.postgres_tables import PostgresTables
from faithfulness_pipeline.tables.storage import Place
from faithfulness_pipeline.tables.table_format import TableFormat
from tests.postgres_cluster import PASSWORD, Cluster

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "offline_sample" / "scored.parquet"
#: The day re-scored in the tests of versions.
RESCORED = "2026-11-25"
_DATABASES = itertools.count()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FP_") and not k.endswith("_API_KEY")}
    return subprocess.run([sys.executable, "-m", "faithfulness_pipeline.cli", *args], capture_output=True, text=True,
                          env={**clean, **(env or {})}, cwd=ROOT, timeout=180, check=False)


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def golden() -> pl.DataFrame:
    return pl.read_parquet(GOLDEN)


def rescored(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the day :data:`RESCORED` scored again by another judge: every answer of it hallucinating."""
    again = pl.col("created_at").dt.date().cast(pl.String) == RESCORED
    return frame.with_columns(
        pl.when(again).then(pl.lit(1.0)).otherwise(pl.col("hallucination_score")).alias("hallucination_score"),
        pl.when(again).then(pl.lit(0.0)).otherwise(pl.col("faithfulness_score")).alias("faithfulness_score"),
        pl.when(again).then(pl.lit("another-judge")).otherwise(pl.col("judge_model")).alias("judge_model"),
    )


def write(tables: TableFormat, frame: pl.DataFrame, days: list[str] | None = None) -> dict[str, str | None]:
    """The rows into the warehouse's ``scored_conversations``, a partition per day of ``created_at`` (``days``:
    those only), as the assets write them (chunk by chunk); the version each day's write committed."""
    committed: dict[str, str | None] = {}
    day_of = pl.col("created_at").dt.date().cast(pl.String)
    for day in sorted(set(frame.select(day_of).to_series())):
        if days is not None and day not in days:
            continue
        with tables.writer("scored_conversations", day) as sink:
            for chunk in frame.filter(day_of == day).iter_slices(4):
                sink.write(chunk)
        committed[day] = sink.committed
    return committed


class Warehouse:
    """A warehouse in one format: its tables, and what the command line needs to read it."""

    def __init__(self, name: str, root: Path, tables: TableFormat, env: dict[str, str] | None = None) -> None:
        self.name, self.root, self.tables, self.env = name, root, tables, env or {}

    def run(self, command: str, *args: str, root: Path | None = None) -> subprocess.CompletedProcess[str]:
        return _cli(command, str(root or self.root), "--table-format", self.name, *args, env=self.env)


class _Settings:
    """What ``iceberg_tables`` reads of the warehouse settings."""

    def __init__(self, root: Path) -> None:
        self.root, self.iceberg_catalog, self.iceberg_namespace = str(root), None, "faithfulness"
        self.version_retention_days, self.postgres_url, self.postgres_schema = 30, None, "faithfulness"

    def root_place(self) -> Place:
        return Place.of(self.root)


@pytest.fixture(params=["delta", "iceberg", "postgres"])
def make_warehouse(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Warehouse]:
    """Makes empty warehouses of one format (a test asking for it runs once per format that keeps versions)."""
    fmt = str(request.param)

    def make(name: str) -> Warehouse:
        root = tmp_path / name
        root.mkdir()
        if fmt == "delta":
            return Warehouse(fmt, root, DeltaTables(Place.of(str(root))))
        if fmt == "iceberg":
            return Warehouse(fmt, root, iceberg_tables(_Settings(root)))
        cluster: Cluster = request.getfixturevalue("postgres")
        database = f"cli_formats_{next(_DATABASES)}"
        cluster.psql(f"CREATE DATABASE {database}")
        url = cluster.url(database=database)
        # the URL with its password in the variable, never on the command line
        return Warehouse(fmt, root, PostgresTables(url), env={"FP_POSTGRES_URL": url})

    return make


def parquet_warehouse(root: Path, frame: pl.DataFrame) -> Path:
    root.mkdir()
    write(ParquetTables(Place.of(str(root))), frame)
    return root


def page(path: Path, root: Path) -> str:
    """The report's page without what names where it came from and when it was made."""
    text = path.read_text(encoding="utf-8").replace(str(root), "<warehouse>")
    return re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "generated <when>", text)


def test_report_compare_and_estimate_read_each_format_as_the_parquet_layout_gives_the_same_rows(
    make_warehouse: Callable[[str], Warehouse], tmp_path: Path
) -> None:
    rows = golden()
    warehouse = make_warehouse("wh")
    write(warehouse.tables, rows)
    reference = parquet_warehouse(tmp_path / "parquet", rows)
    labels = tmp_path / "labels.parquet"
    rows.select("conversation_id", (pl.col("n_contradicted") > 0).alias("label_hallucinated")).write_parquet(labels)

    # the report: every figure, chart and worst answer of the page
    made = _ok(warehouse.run("report", "-o", str(tmp_path / "format.html")))
    assert "17 answers over 2026-11-24 .. 2026-11-26" in made.stderr
    plain = _ok(_cli("report", str(reference), "-o", str(tmp_path / "parquet.html")))
    assert made.stderr.split(": ", 1)[1] == plain.stderr.split(": ", 1)[1]
    assert page(tmp_path / "format.html", warehouse.root) == page(tmp_path / "parquet.html", reference)

    # compare: the groups of one warehouse, with the flipped rows' claims
    for source, out, extra in ((warehouse, "format", ()), (None, "parquet", ())):
        args = ("--by", "model", "--groups", "language", "-o", str(tmp_path / f"{out}-by.parquet"), *extra)
        done = _ok(source.run("compare", *args) if source else _cli("compare", str(reference), *args))
        assert "model=" in done.stdout
    assert_frame_equal(pl.read_parquet(tmp_path / "format-by.parquet"), pl.read_parquet(tmp_path / "parquet-by.parquet"))

    # estimate: the figures corrected by labels
    est = [_ok(warehouse.run("estimate", "--labels", str(labels), "--by", "language", "-o", str(tmp_path / "e1.parquet"))),
           _ok(_cli("estimate", str(reference), "--labels", str(labels), "--by", "language",
                    "-o", str(tmp_path / "e2.parquet")))]
    assert est[0].stdout == est[1].stdout and "17 of 17 labelled answer(s)" in est[0].stderr
    assert_frame_equal(pl.read_parquet(tmp_path / "e1.parquet"), pl.read_parquet(tmp_path / "e2.parquet"))


def test_a_re_scored_day_reads_as_of_the_version_it_replaced(
    make_warehouse: Callable[[str], Warehouse], tmp_path: Path
) -> None:
    rows = golden()
    warehouse = make_warehouse("wh")
    first = write(warehouse.tables, rows)
    write(warehouse.tables, rescored(rows), days=[RESCORED])
    published = first["2026-11-26"]  # the last day of the first materialisations: every day as first published
    assert published is not None

    # the report as of the first publication is the report of the first rows; now, of the re-scored ones
    _ok(warehouse.run("report", "-o", str(tmp_path / "then.html"), "--as-of", published))
    _ok(_cli("report", str(parquet_warehouse(tmp_path / "first", rows)), "-o", str(tmp_path / "first.html")))
    assert page(tmp_path / "then.html", warehouse.root) == page(tmp_path / "first.html", tmp_path / "first")
    _ok(warehouse.run("report", "-o", str(tmp_path / "now.html")))
    _ok(_cli("report", str(parquet_warehouse(tmp_path / "second", rescored(rows))), "-o", str(tmp_path / "second.html")))
    assert page(tmp_path / "now.html", warehouse.root) == page(tmp_path / "second.html", tmp_path / "second")

    # compare: the warehouse as published against itself now, as the two scored tables compare
    rows.write_parquet(tmp_path / "a.parquet")
    rescored(rows).write_parquet(tmp_path / "b.parquet")
    versions = _ok(warehouse.run("compare", str(warehouse.root), "--as-of", published, "-o", str(tmp_path / "v.parquet"),
                                 "--flips-out", str(tmp_path / "vf.parquet")))
    files = _ok(_cli("compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"), "-o",
                     str(tmp_path / "f.parquet"), "--flips-out", str(tmp_path / "ff.parquet")))
    assert versions.stdout == files.stdout and "17 row(s) paired on row_key" in versions.stdout
    assert_frame_equal(pl.read_parquet(tmp_path / "v.parquet"), pl.read_parquet(tmp_path / "f.parquet"))
    flips = pl.read_parquet(tmp_path / "vf.parquet")
    assert flips.height and flips.columns == pl.read_parquet(tmp_path / "ff.parquet").columns
    assert_frame_equal(flips, pl.read_parquet(tmp_path / "ff.parquet"), check_row_order=False)

    # a version that is none is one line
    bad = warehouse.run("report", "-o", str(tmp_path / "x.html"), "--as-of", "987654321")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "987654321" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "x.html").exists()


def _one_line(done: subprocess.CompletedProcess[str], *says: str) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for text in says:
        assert text in lines[0], lines[0]
    return lines[0]


def test_an_unknown_format_a_missing_table_and_a_version_of_no_version_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = str(tmp_path / "r.html")
    _one_line(_cli("report", str(empty), "--table-format", "orc", "-o", out),
              "--table-format / FP_TABLE_FORMAT", "'orc' is unknown", "delta, iceberg, parquet, postgres")
    for fmt in ("parquet", "delta", "iceberg"):
        _one_line(_cli("report", str(empty), "--table-format", fmt, "-o", out), "no scored_conversations table",
                  f"{fmt} table format", "materialise it first")
    assert not list(empty.iterdir())  # a reader makes no file: no Iceberg catalog where there was none
    _one_line(_cli("compare", str(empty), "--by", "model", "--table-format", "delta"), "materialise it first")
    reference = parquet_warehouse(tmp_path / "parquet", golden())
    _one_line(_cli("report", str(reference), "--as-of", "1", "-o", out), "parquet table format", "keeps no versions")
    _one_line(_cli("report", str(GOLDEN), "--as-of", "1", "-o", out), "is a scored table (files) with no versions")
    # without the flag, the variable names the format of a folder given
    delta = tmp_path / "delta"
    write(DeltaTables(Place.of(str(delta))), golden())
    assert "17 answers" in _ok(_cli("report", str(delta), "-o", out, env={"FP_TABLE_FORMAT": "delta"})).stderr
    assert "17 answers" in _ok(_cli("report", str(delta), "-o", out)).stderr  # a Delta log is recognised


def test_an_unreachable_database_or_catalog_is_one_line_without_its_password(postgres: Cluster, tmp_path: Path) -> None:
    out = str(tmp_path / "r.html")
    wrong = postgres.url(password="not-the-password-93f1")
    line = _one_line(_cli("report", "--table-format", "postgres", "-o", out, env={"FP_POSTGRES_URL": wrong}),
                     "FP_POSTGRES_URL")
    assert "not-the-password-93f1" not in line and PASSWORD not in line
    nowhere = f"postgresql://fp:{PASSWORD}@/fp?host={tmp_path / 'no-socket'}"
    line = _one_line(_cli("report", str(tmp_path), "--table-format", "postgres", "-o", out,
                          env={"FP_POSTGRES_URL": nowhere}), "FP_POSTGRES_URL", "cannot be reached")
    assert PASSWORD not in line
    # the flag too (a URL with its password in the process list is the user's choice; never in a message)
    line = _one_line(_cli("estimate", str(tmp_path), "--labels", str(GOLDEN), "--table-format", "postgres",
                          "--postgres-url", nowhere), "FP_POSTGRES_URL", "cannot be reached")
    assert PASSWORD not in line
    catalog = f"postgresql://fp:{PASSWORD}@/fp?host={tmp_path / 'no-socket'}"
    line = _one_line(_cli("compare", str(tmp_path), "--by", "model", "--table-format", "iceberg",
                          "--iceberg-catalog", catalog), "FP_ICEBERG_CATALOG", "cannot be reached")
    assert PASSWORD not in line
    # a database that holds no warehouse yet: the table is missing, not the database
    fresh = "cli_formats_empty"
    postgres.psql(f"CREATE DATABASE {fresh}")
    line = _one_line(_cli("report", "--table-format", "postgres", "-o", out,
                          env={"FP_POSTGRES_URL": postgres.url(database=fresh)}),
                     "no scored_conversations table", "materialise it first")
    assert PASSWORD not in line and not Path(out).exists()


def test_the_documented_commands_run_as_printed(tmp_path: Path) -> None:
    """docs/table-formats.md's commands, in a folder whose ``warehouse`` holds the sample in Delta tables, its days
    published as versions 0 to 2, then one day re-scored (version 3)."""
    from tests.doc_blocks import activated, block, run_shell
    from tests.reliability.support import child_env

    tables = DeltaTables(Place.of(str(tmp_path / "warehouse")))
    assert write(tables, golden())["2026-11-26"] == "2"
    assert write(tables, rescored(golden()), days=[RESCORED]) == {RESCORED: "3"}
    code = block("docs/table-formats.md", "bash", "--table-format delta --as-of 2")
    done = run_shell(code, tmp_path, activated(child_env()))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "17 answers over 2026-11-24 .. 2026-11-26" in done.stderr
    assert (tmp_path / "out" / "report.html").stat().st_size > 10_000 < (tmp_path / "out" / "published.html").stat().st_size
    compared = pl.read_parquet(tmp_path / "out" / "re-scored.parquet")
    overall = compared.filter(pl.col("group") == "all", pl.col("score") == "hallucination").row(0, named=True)
    assert overall["mean_candidate"] > overall["mean_baseline"]
    assert "17 row(s) paired on row_key" in done.stdout

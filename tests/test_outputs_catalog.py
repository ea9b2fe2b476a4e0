"""The list of outputs is the one place an output is declared: the command line's options, the Dagster assets,
their checks, the BI views and the docs' table all follow it, and a new entry is all a new output takes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import date
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.cli.score import score
from faithfulness_pipeline.defs import build_defs
from faithfulness_pipeline.defs.checks import CHECKS
from faithfulness_pipeline.defs.duckdb_views import BI_TABLES
from faithfulness_pipeline.outputs import (
    ChunkLines,
    ChunkTable,
    DayTable,
    Sent,
    TableOutput,
    describe,
    entries,
    tables,
)
from faithfulness_pipeline.outputs.docs_table import markdown_table
from faithfulness_pipeline.outputs.kinds import DAY, OutputContext

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_data" / "flat"


def test_the_docs_hold_the_table_printed_from_the_list() -> None:
    page = (ROOT / "docs" / "tables.md").read_text(encoding="utf-8")
    assert markdown_table() in page, (
        "docs/tables.md does not hold the table of outputs derived from outputs/catalog.py: replace the table "
        "under 'Every output' with what `python -m faithfulness_pipeline.outputs` prints"
    )


def test_every_entry_has_one_name_and_every_named_check_exists() -> None:
    names = [e.name for e in entries()]
    assert len(names) == len(set(names))
    for table in tables():
        assert set(table.checks) <= set(CHECKS), table.name
        assert table.description and table.columns, table.name


def test_the_command_line_offers_exactly_the_entries_with_an_option() -> None:
    given = {opt for param in score.params for opt in param.opts}
    for entry in entries():
        if entry.option is not None:
            assert entry.option in given, entry.name
    outputs_offered = {o for o in given if o.endswith("-out")} | {"-o", "--output"}
    declared = {n for e in entries() for n in (e.option, e.short_option) if n}
    assert outputs_offered == declared


def test_the_code_location_has_an_asset_per_table_and_per_sent_output_whose_place_is_set(tmp_path: Path) -> None:
    from faithfulness_pipeline.defs import DefsSettings
    from faithfulness_pipeline.defs.resources import TracesResource
    from faithfulness_pipeline.defs.warehouse import WarehouseResource

    quiet = build_defs(DefsSettings(warehouse=WarehouseResource(root=str(tmp_path))))
    keys = {k.to_user_string() for a in quiet.assets or [] for k in a.keys}  # type: ignore[union-attr]
    assert {t.name for t in tables()} <= keys
    assert not {e.name for e in entries() if isinstance(e, Sent | ChunkLines)} & keys
    traces = TracesResource(otel_endpoint="http://127.0.0.1:9/v1/logs", phoenix_endpoint="http://127.0.0.1:9")
    loud = build_defs(DefsSettings(warehouse=WarehouseResource(root=str(tmp_path)), traces=traces))
    keys = {k.to_user_string() for a in loud.assets or [] for k in a.keys}  # type: ignore[union-attr]
    assert {e.name for e in entries() if isinstance(e, Sent)} <= keys
    assert set(BI_TABLES) == {t.name for t in tables() if t.view} | {"raw_conversations"}


def test_a_column_is_described_by_its_own_table_else_by_the_scored_table() -> None:
    assert describe("daily_model_comparison", "verdict") is not None
    assert describe("judged_claims", "verdicts") == describe("scored_conversations", "verdicts")
    assert describe("scored_conversations", "a_column_of_the_users_own") is None


def test_the_day_tables_of_the_command_line_match_the_warehouses(tmp_path: Path) -> None:
    """--daily-out and --comparison-out hold what the Dagster day tables hold for the same rows."""
    scored, daily, comparison = tmp_path / "s.parquet", tmp_path / "d.parquet", tmp_path / "c.parquet"
    done = subprocess.run(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(SAMPLE), "-o", str(scored),
         "--daily-out", str(daily), "--comparison-out", str(comparison), "--quiet"],
        capture_output=True, text=True, timeout=180, check=False, cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("FP_")},
    )
    assert done.returncode == 0, done.stderr
    rows = pl.read_parquet(scored)
    days = rows.get_column("created_at").dt.date()
    assert days.n_unique() >= 2  # the sample spans days: each is a group of its own
    context = OutputContext()
    for entry, written in ((_entry("daily_answer_quality"), daily), (_entry("daily_model_comparison"), comparison)):
        assert isinstance(entry, DayTable)
        expected = entry.build(rows.select(entry.reads(rows.columns, context)).with_columns(days.alias(DAY)), context)
        got = pl.read_parquet(written)
        assert got.height == expected.height and got.height > 0
        assert got.equals(expected.select(got.columns)), entry.name
    assert pl.read_parquet(daily).get_column("day").unique().sort().to_list() == sorted(set(days.to_list()))


def _entry(name: str) -> TableOutput:
    entry = next(e for e in entries() if e.name == name)
    assert isinstance(entry, TableOutput)
    return entry


#: A new output, declared in a child process: one entry appended to the list, nothing else changed.
_NEW_OUTPUT = textwrap.dedent("""
    import json, sys
    import polars as pl
    from faithfulness_pipeline.outputs import catalog
    from faithfulness_pipeline.outputs.kinds import ChunkTable

    ANSWER_LENGTHS = ChunkTable(
        name="answer_lengths", description="One row per answer: its row key and its length in characters.",
        columns={"row_key": "Key of the answer.", "characters": "Characters of the answer."},
        option="--lengths-out", option_help="Also write each answer's length.", checks=("same_rows_as_upstream",),
        build=lambda scored, context: scored.select(
            "row_key", pl.col(context.answer_column).str.len_chars().alias("characters")),
        reads=lambda present, context: ["row_key", context.answer_column],
    )
    catalog.OUTPUTS = (*catalog.OUTPUTS, ANSWER_LENGTHS)

    from faithfulness_pipeline.cli import main
    from faithfulness_pipeline.defs import build_defs
    from faithfulness_pipeline.defs.duckdb_views import BI_TABLES
    from faithfulness_pipeline.outputs import describe
    from faithfulness_pipeline.outputs.docs_table import markdown_table

    defs = build_defs()
    seen = {
        "assets": sorted(k.to_user_string() for a in defs.assets for k in a.keys),
        "checks": sorted(f"{k.asset_key.to_user_string()}:{k.name}" for c in defs.asset_checks for k in c.check_keys),
        "views": list(BI_TABLES),
        "described": describe("answer_lengths", "characters"),
        "docs": "`answer_lengths`" in markdown_table(),
    }
    print(json.dumps(seen))
    sys.stdout.flush()
    main(["score", sys.argv[1], "-o", sys.argv[2], "--lengths-out", sys.argv[3], "--quiet"])
""")


def test_a_new_output_is_one_entry_of_the_list(tmp_path: Path) -> None:
    scored, lengths = tmp_path / "scored.parquet", tmp_path / "lengths.parquet"
    done = subprocess.run(
        [sys.executable, "-c", _NEW_OUTPUT, str(SAMPLE), str(scored), str(lengths)],
        capture_output=True, text=True, timeout=180, check=False, cwd=tmp_path,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("FP_")},
             "FP_WAREHOUSE": str(tmp_path / "wh"), "FP_LANDING": str(SAMPLE)},
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[0])
    assert "answer_lengths" in seen["assets"]
    assert "answer_lengths:no_rows_lost" in seen["checks"]
    assert "answer_lengths" in seen["views"]
    assert seen["described"] == "Characters of the answer." and seen["docs"]
    table = pl.read_parquet(lengths)
    answers = pl.read_parquet(scored).select("row_key", pl.col("output").str.len_chars().alias("characters"))
    assert table.sort("row_key").equals(answers.sort("row_key"))


@pytest.mark.parametrize("entry", [e for e in entries() if isinstance(e, TableOutput)], ids=lambda e: e.name)
def test_every_table_output_builds_an_empty_table_with_its_columns(entry: TableOutput) -> None:
    """A run without rows still writes each table with every column (the empty day's schema flows through)."""
    from faithfulness_pipeline.core.config import ScoringConfig
    from faithfulness_pipeline.core.pipeline import scored_schema

    schema = scored_schema([("x.parquet", pl.Schema({"output": pl.String(), "context": pl.List(pl.String)}))],
                           ScoringConfig())
    context = OutputContext(day=date(2026, 11, 25), views_join=True)
    empty = pl.DataFrame(schema=schema)
    if isinstance(entry, DayTable):
        built = entry.build(empty.select(entry.reads(empty.columns, context)).with_columns(
            pl.lit(None, dtype=pl.Date).alias(DAY)), context)
        assert built.schema == entry.schema(context)
    else:
        assert isinstance(entry, ChunkTable)
        built = entry.build(empty, context)
        assert built.height == 0 and built.width > 0



def _score(tmp_path: Path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(SAMPLE), "-o", str(tmp_path / "s.parquet"),
         "--quiet", *extra],
        capture_output=True, text=True, timeout=180, check=False, cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("FP_")}, **(env or {})},
    )


def test_a_wrong_dagster_variable_stops_only_a_run_that_writes_day_tables(tmp_path: Path) -> None:
    wrong = {"FP_TIMEZONE": "Mars/Olympus_Mons"}
    assert _score(tmp_path, env=wrong).returncode == 0
    refused = _score(tmp_path, "--daily-out", str(tmp_path / "d.parquet"), env=wrong)
    assert refused.returncode == 2
    assert "FP_TIMEZONE" in refused.stderr and "Traceback" not in refused.stderr
    assert not (tmp_path / "d.parquet").exists()


def test_the_command_lines_day_follows_the_time_zone(tmp_path: Path) -> None:
    """A row's day is its timestamp's date where the day boundary is: the same rows, other days at UTC+14 (the
    sample's rows were written at 09:00-10:59 UTC, so some of them are already the next day there)."""
    utc = _score(tmp_path, "--daily-out", str(tmp_path / "utc.parquet"))
    east = _score(tmp_path, "--daily-out", str(tmp_path / "east.parquet"), env={"FP_TIMEZONE": "Pacific/Kiritimati"})
    assert utc.returncode == 0 and east.returncode == 0, utc.stderr + east.stderr
    times = pl.read_parquet(tmp_path / "s.parquet").get_column("created_at")
    aware = times if times.dtype.time_zone else times.dt.replace_time_zone("UTC")  # type: ignore[attr-defined]
    days = {}
    for name, zone in (("utc", "UTC"), ("east", "Pacific/Kiritimati")):
        daily = pl.read_parquet(tmp_path / f"{name}.parquet")
        expected = aware.dt.convert_time_zone(zone).dt.date().value_counts().sort("created_at")
        got = daily.group_by("day").agg(pl.col("answers").sum()).sort("day")
        assert got.get_column("day").to_list() == expected.get_column("created_at").to_list(), name
        assert got.get_column("answers").to_list() == expected.get_column("count").to_list(), name
        days[name] = got
    assert not days["utc"].equals(days["east"])

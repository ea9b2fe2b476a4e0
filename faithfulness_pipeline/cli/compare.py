"""``faithfulness-pipeline compare``: two scored tables (or the groups of one) side by side, each difference
with its interval, and whether it is larger than its noise (``core.compare``)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click
import polars as pl

from faithfulness_pipeline.cli.compare_corrected import corrected_segments, corrected_tables
from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.cli.warehouse import as_of_option, open_warehouse, scored_scan, warehouse_options
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.compare import (
    LARGER,
    SCORES,
    TOO_FEW,
    CompareConfig,
    Comparison,
    compare,
    compare_segments,
)
from faithfulness_pipeline.core.errors import FaithfulnessPipelineError
from faithfulness_pipeline.report.data import WarehouseTables
from faithfulness_pipeline.review.labels import read_labels
from faithfulness_pipeline.review.store import is_store, shown
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.tables.command_outputs import check_command_outputs, write_frames
from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.read import read_all, scan_input
from faithfulness_pipeline.traces.urls import scrubbed

_SHOWN_FLIPS = 5
#: What the flips table shows of each side besides its scores.
_CLAIMS = ("claims", "verdicts")


def _num(value: Any, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _line(row: dict[str, Any]) -> str:
    where = "all rows" if row["group_by"] == "all" else f"{row['group_by']}={row['group']}"
    text = (f"  {row['score']:<13} {where:<22} n={row['n_baseline']}/{row['n_candidate']}  "
            f"{_num(row['mean_baseline'])} -> {_num(row['mean_candidate'])}  ")
    if row["verdict"] == TOO_FEW:
        return text + "too few rows for an interval"
    text += f"difference {_num(row['difference'], 3)} [{_num(row['low'])}, {_num(row['high'])}]: {row['verdict']}"
    if row.get("share_over_baseline") is not None and row["group_by"] == "all":
        text += (f"\n  {'':13} {'':22} over the threshold {_num(row['share_over_baseline'])} -> "
                 f"{_num(row['share_over_candidate'])} ({row['share_test']} p={_num(row['share_p_value'])})")
        if row.get("kappa") is not None:
            text += f", agreement kappa {_num(row['kappa'])}, correlation {_num(row['correlation'])}"
    return text


def render(result: Comparison | pl.DataFrame) -> str:
    table = result.table if isinstance(result, Comparison) else result
    lines = []
    if isinstance(result, Comparison):
        lines.append(f"{result.pairs} row(s) paired on {result.key}" if result.paired
                     else "no row pairs (no shared key): the tables are compared unpaired (Welch)")
    segments = table.get_column("segment").unique(maintain_order=True).to_list() if "segment" in table.columns \
        else [None]
    for segment in segments:
        part = table if segment is None else table.filter(pl.col("segment") == segment)
        if segment is not None:
            lines.append(segment)
        lines += [_line(row) for row in part.iter_rows(named=True)]
    larger = table.filter(pl.col("verdict") == LARGER).height
    lines.append(f"{larger} difference(s) larger than their noise (95 % intervals that exclude 0)")
    if isinstance(result, Comparison) and result.flips.height:
        shown = ("worst first" if result.flips.height <= _SHOWN_FLIPS
                 else f"the worst {_SHOWN_FLIPS} shown (--flips-out writes them all)")
        lines.append(f"{result.flips.height} row(s) crossed the hallucination threshold, {shown}:")
        for row in result.flips.head(_SHOWN_FLIPS).iter_rows(named=True):
            lines.append(f"  {row[result.key]}: {_num(row['hallucination_score_baseline_table'])} -> "
                         f"{_num(row['hallucination_score_candidate_table'])}")
    return "\n".join(lines)


@click.command()
@click.argument("baseline")
@click.argument("candidate", required=False)
@click.option("-o", "--output", default=None, help="Write the comparison table (Parquet).")
@click.option("--flips-out", default=None, help="Write the paired rows that crossed the threshold (Parquet).")
@click.option("--pair-on", default=None, help="Pair rows on this column (default: the row key when shared).")
@click.option("--by", default=None, help="Compare the groups of this column of BASELINE (no CANDIDATE then).")
@click.option("--baseline-group", default=None, help="With --by: the group the others are compared against.")
@click.option("--groups", default="language,model", show_default=True,
              help="Columns compared group by group besides all rows (comma-separated; missing ones skipped).")
@click.option("--min-rows", default=10, show_default=True, type=click.IntRange(min=2),
              help="Fewer rows (or pairs) in a group: 'too few rows' instead of an interval.")
@click.option("--labelled", default=None, help="Rows labelled by people (as for calibrate --labelled, or a label "
              "store: docs/review.md): with two tables, each one's calibration against them is printed beside the "
              "comparison; with two tables or --by, the differences corrected by them (docs/corrected.md).")
@as_of_option("--as-of", help_text="Read BASELINE, a warehouse, as of this table_version a materialisation "
              "recorded (a Delta version, an Iceberg snapshot id, a PostgreSQL load id): a day as it was published "
              "against the same warehouse now.")
@as_of_option("--candidate-as-of", help_text="Read CANDIDATE, a warehouse, as of this table_version.")
@warehouse_options
def compare_command(baseline: str, candidate: str | None, output: str | None, flips_out: str | None,
                    pair_on: str | None, by: str | None, baseline_group: str | None, groups: str,
                    min_rows: int, labelled: str | None, as_of: str | None, candidate_as_of: str | None,
                    **options: Any) -> None:
    """Compare two scored tables (files, folders, globs, s3:// URIs, or warehouses in any table format:
    --table-format): BASELINE and CANDIDATE, or with --by the groups of one. The hallucination threshold is
    FP_HALLUCINATION_THRESHOLD's (default 0.5)."""
    with unfailing_streams():
        try:
            scoring = from_env(ScoringSettings, os.environ)
            config = CompareConfig(threshold=scoring.hallucination_threshold, min_rows=min_rows)
            columns = [g.strip() for g in groups.split(",") if g.strip()]
            if (by is None) == (candidate is None):
                raise click.UsageError("give BASELINE and CANDIDATE, or BASELINE and --by COLUMN")
            result: Comparison | pl.DataFrame
            flips = pl.DataFrame()
            calibration = corrected = ""
            if candidate is None and candidate_as_of is not None:
                raise click.UsageError("--candidate-as-of reads CANDIDATE: give BASELINE and CANDIDATE")
            sides = [open_warehouse(baseline, options, os.environ, as_of)]
            if candidate is not None:
                sides.append(open_warehouse(candidate, options, os.environ, candidate_as_of))
            check_command_outputs({"-o": output, "--flips-out": flips_out},
                                [*(spec for spec, tables in sides if tables is None),
                                 None if labelled is None or is_store(labelled) else labelled])
            wanted, few = _columns(scoring, pair_on, by, columns, labelled is not None)
            if by is not None:
                whole = _read(*sides[0], wanted, few)
                result = compare_segments(whole, by, baseline=baseline_group, pair_on=pair_on,
                                          groups=columns, config=config)
                table = result
                if labelled:
                    corrected = corrected_segments(whole, by, baseline_group, read_labels(labelled), scoring)
            else:
                assert candidate is not None
                tables = (_read(*sides[0], wanted, few), _read(*sides[1], wanted, few))
                result = compare(*tables, pair_on=pair_on, groups=columns, config=config)
                if labelled:
                    calibration = _calibration(labelled, [(baseline, tables[0]), (candidate, tables[1])], scoring)
                    corrected = corrected_tables(tables, read_labels(labelled), scoring)
                table = result.table
                if flips_out:
                    flips = with_claims(result.flips, result.key, (sides[0], sides[1]))
            write_frames({"-o": (output, table), "--flips-out": (flips_out, flips)})
        except FaithfulnessPipelineError as exc:
            click.echo(f"error: {scrubbed(str(exc))}", err=True)
            sys.exit(2)
        click.echo(render(result))
        for text in (corrected, calibration):
            if text:
                click.echo("\n" + text)


def _read(spec: str, warehouse: WarehouseTables | None, wanted: frozenset[str],
          few: frozenset[str]) -> pl.DataFrame:
    """The ``wanted`` columns of a scored table, or of a warehouse's scored rows (every day, in its table format),
    the text columns of ``few`` as categoricals."""
    if warehouse is None:
        return read_all(spec, columns=wanted, categorical=few)
    scan = scored_scan(spec, warehouse)
    schema = scan.collect_schema()
    kept = [c for c in schema.names() if c in wanted]
    return scan.select([pl.col(c).cast(pl.Categorical()) if c in few and schema[c] == pl.String else pl.col(c)
                        for c in kept]).collect(engine="streaming")


def _scans(spec: str, warehouse: WarehouseTables | None) -> list[pl.LazyFrame]:
    if warehouse is not None:
        return [scored_scan(spec, warehouse)]
    return [scan_input(path) for path in resolve_inputs(spec)]


def with_claims(flips: pl.DataFrame, key: str,
                sides: tuple[tuple[str, WarehouseTables | None], tuple[str, WarehouseTables | None]]) -> pl.DataFrame:
    """The flipped rows with each side's claims and verdicts, read for those rows only: a scored table's claims
    and verdicts weigh more than its scores many times over, and a comparison needs them for the flips alone."""
    if flips.is_empty():
        return flips
    wanted = flips.select(pl.col(key).cast(pl.String))
    for (spec, warehouse), suffix in zip(sides, ("_baseline_table", "_candidate_table"), strict=True):
        parts = []
        for lazy in _scans(spec, warehouse):
            present = [c for c in _CLAIMS if c in lazy.collect_schema().names()]
            if present:
                parts.append(lazy.select(pl.col(key).cast(pl.String), *present)
                             .join(wanted.lazy(), on=key, how="semi").collect(engine="streaming"))
        if parts:
            side = pl.concat(parts, how="diagonal_relaxed").unique(key, keep="first")
            flips = flips.with_columns(pl.col(key).cast(pl.String)).join(
                side.rename({c: c + suffix for c in side.columns if c != key}), on=key, how="left")
    return flips


def _columns(scoring: ScoringSettings, pair_on: str | None, by: str | None, groups: list[str],
             labelled: bool) -> tuple[frozenset[str], frozenset[str]]:
    """The columns a comparison reads of a scored table (keys, scores, status and groups), and those of them
    with a few values each (held as categoricals). Its texts (the question, the context, the answer) are most
    of a scored table and none of a comparison: left unread, a month compares in the memory of its keys and
    scores. The id columns and the judge's name only tie people's labels to rows (``--labelled``)."""
    few = {"status", *groups, *([by] if by else [])}
    keys: tuple[str | None, ...] = (S.ROW_KEY, pair_on)
    if labelled:
        more = ("judge_model", "prompt_version", *from_env(CalibrationSettings, os.environ).groups())
        keys += (scoring.id_column, scoring.turn_column, scoring.key_column, *more)
    wanted = frozenset(c for c in (*keys, *SCORES, *few) if c is not None)
    # labels join the scored rows on these columns as text: with labels, every column stays text
    return wanted, frozenset() if labelled else frozenset(few - {pair_on})


def _calibration(labelled: str, scored: list[tuple[str, pl.DataFrame]], scoring: ScoringSettings) -> str:
    """Both tables calibrated against the labelled rows, as ``calibrate --scored A --scored B`` prints it."""
    from faithfulness_pipeline.api import calibration as cal

    settings = from_env(CalibrationSettings, os.environ, {"labelled": labelled})
    if is_store(labelled):
        rows = read_labels(labelled, scoring.columns().key_columns())
        shared = rows.filter(pl.col("row_key").is_duplicated()).get_column("row_key").n_unique()
        if shared:
            return (f"calibration left out: {shared} answer(s) of {shown(labelled)} have labels of several "
                    "reviewers, and a calibration takes one label an answer (`review agreement` says how far the "
                    "reviewers agree)")
    else:
        rows = cal.read_table(labelled, scoring.columns().key_columns())
    return cal.report(cal.run(rows, scored, scoring, settings))

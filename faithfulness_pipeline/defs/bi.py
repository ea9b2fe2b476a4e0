"""What BI tools open over every day of the warehouse: the DuckDB file of views and the HTML report."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import tempfile
from contextlib import ExitStack

import dagster as dg

from faithfulness_pipeline.defs.duckdb_views import BI_TABLES, build_database
from faithfulness_pipeline.defs.metadata import report_metadata
from faithfulness_pipeline.defs.names import DUCKDB, DUCKDB_REVISION, GROUP, REPORT, REPORT_REVISION
from faithfulness_pipeline.defs.resources import ScoringResource
from faithfulness_pipeline.defs.warehouse import WarehouseResource
from faithfulness_pipeline.outputs import tables
from faithfulness_pipeline.tables.postgres_connect import shown
from faithfulness_pipeline.tables.postgres_tables import PostgresTables


@dg.asset(
    name=DUCKDB,
    group_name=GROUP,
    code_version=DUCKDB_REVISION,
    kinds={"duckdb"},
    deps=list(BI_TABLES),
    description="DuckDB file with views over the BI tables (all days). Open it from any SQL BI tool. In the "
    "postgres table format: the same views in the database (docs/table-formats.md).",
)
def answer_quality_duckdb(warehouse: WarehouseResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
    tables = warehouse.tables()
    if isinstance(tables, PostgresTables):  # the views go into the database, beside the tables they read
        from faithfulness_pipeline.defs.postgres_views import build_views

        views = build_views(tables)
        return dg.MaterializeResult(metadata={
            **{f"rows_{t}": n for t, n in views.items()},
            "connect": f"{shown(tables.url)} schema {tables.pg_schema} (views {', '.join(views)})",
        })
    target = warehouse.duckdb_place()
    rows = build_database(target, warehouse.root_place(), warehouse.listed_files(BI_TABLES))
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(target.uri),
            **{f"rows_{t}": n for t, n in rows.items()},
            "connect": f"duckdb {target.uri}",
        }
    )


@dg.asset(
    name=REPORT,
    group_name=GROUP,
    code_version=REPORT_REVISION,
    kinds={"html"},
    # After every table of the day: the report is the last thing a day's run makes.
    deps=[table.name for table in tables()],
    description="The answer-quality report over every day of the warehouse: one self-contained HTML file "
    "(charts, per day x model table, the worst answers with their claims marked, the judge and its "
    "calibration when the warehouse has one). Opens offline; small enough to mail.",
)
def answer_quality_report(warehouse: WarehouseResource, scoring: ScoringResource) -> dg.MaterializeResult:  # type: ignore[type-arg]
    from faithfulness_pipeline.judging.catalog import baseline_judges
    from faithfulness_pipeline.report import build_report_to, headline
    from faithfulness_pipeline.report.data import CALIBRATION_TABLES, CORRECTED_TABLE

    tables = warehouse.tables()
    # A format that lists its tables' current data files (iceberg) hands the report those; the Parquet layout
    # is read by its folders; PostgreSQL's tables are copied out to Parquet for it.
    listed = warehouse.listed_files(["scored_conversations", CORRECTED_TABLE, *CALIBRATION_TABLES])
    with ExitStack() as stack:
        source = warehouse.root_place().uri
        if isinstance(tables, PostgresTables):
            from faithfulness_pipeline.defs.report_copy import parquet_copy

            source = parquet_copy(tables, stack.enter_context(tempfile.TemporaryDirectory(prefix="fp-report-")))
        place, data = build_report_to(
            source,
            warehouse.report_place(),
            baseline_judges=baseline_judges(),
            scoring=scoring,
            listed=listed,
        )
    return dg.MaterializeResult(metadata=report_metadata(place, headline(data), data.threshold))

"""Automation: the scoring job, a daily schedule for yesterday, and a sensor for new landing files."""

# No `from __future__ import annotations`: Dagster reads these annotations at runtime.
import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

import dagster as dg

from faithfulness_pipeline.defs.names import GROUP
from faithfulness_pipeline.defs.resources import LandingResource
from faithfulness_pipeline.sources.landing import LandingFile, file_days, list_landing
from faithfulness_pipeline.sources.table_landing import landing_kind
from faithfulness_pipeline.traces.urls import scrubbed

if TYPE_CHECKING:
    # Dagster exports no public name for what define_asset_job and build_schedule_from_partitioned_job
    # return. Imported for the type checker only, so the code location itself runs on public API alone;
    # tests/defs/test_private_dagster.py fails if these names move (checked with CHECKED_WITH_DAGSTER in
    # defs/preload.py). The annotations that use them are strings: they exist only while type checking.
    from dagster._core.definitions.partitions.partitioned_schedule import UnresolvedPartitionedAssetScheduleDefinition
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition

JOB = "score_conversations"
SCHEDULE = "daily_scoring"
SENSOR = "new_landing_files"


def build_job() -> "UnresolvedAssetJobDefinition":
    # Partitioned like its assets (daily): Dagster infers it from the selection.
    return dg.define_asset_job(
        JOB,
        # The daily group only: the calibration assets are unpartitioned and have their own job.
        selection=dg.AssetSelection.groups(GROUP),
        description="Every asset and check for one day: load, claims, verdicts, scores, claim table, BI "
        "aggregates; then the DuckDB views and the HTML report over every day.",
    )


def build_schedule(
    job: "UnresolvedAssetJobDefinition",
) -> "dg.ScheduleDefinition | UnresolvedPartitionedAssetScheduleDefinition":
    # The last partition of a daily partitioning is yesterday: at 01:30 UTC the day is complete.
    return dg.build_schedule_from_partitioned_job(
        job,
        name=SCHEDULE,
        hour_of_day=1,
        minute_of_hour=30,
        description="Scores yesterday's conversations every day at 01:30, both in the partitions' time zone "
        "(FP_TIMEZONE, UTC by default).",
    )


def _load_cursor(raw: str | None) -> dict[str, str]:
    if not raw:
        return {}
    loaded = json.loads(raw)
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, Mapping) else {}


def _stamp(file: LandingFile) -> str:
    return f"{file.mtime_ns}:{file.size}"


def new_files(files: list[LandingFile], cursor: dict[str, str]) -> list[LandingFile]:
    """Files the sensor has not seen in this exact version (a rewritten file counts as new)."""
    return [f for f in files if cursor.get(f.path) != _stamp(f)]


def build_sensor(job: "UnresolvedAssetJobDefinition", partitions: dg.PartitionsDefinition[str]) -> dg.SensorDefinition:
    @dg.sensor(
        name=SENSOR,
        job=job,
        minimum_interval_seconds=60,
        description="Requests a run for every day that a new or rewritten landing Parquet file has rows for. "
        "Days without a partition yet (today) are left to the daily schedule.",
    )
    def new_landing_files(
        context: dg.SensorEvaluationContext, landing: LandingResource
    ) -> dg.SensorResult | dg.SkipReason:
        # The cursor maps every seen file to its mtime and size: exact even when a copy keeps an old mtime.
        cursor = _load_cursor(context.cursor)
        kind = landing_kind(landing.path)
        if kind is not None:  # a table has no new files to watch: each day is read from it whole
            return dg.SkipReason(f"the landing is a {kind.name} table ({scrubbed(landing.path)}), which has no "
                                 f"files to watch: the {SCHEDULE} schedule scores each day")
        files = list_landing(landing.path)
        fresh = new_files(files, cursor)
        if not fresh:
            return dg.SkipReason(f"no new Parquet files in {scrubbed(landing.path)}")
        existing = set(partitions.get_partition_keys())
        first = min(existing) if existing else None
        too_early: set[str] = set()
        by_day: dict[str, list[str]] = {}
        for file in fresh:
            for day in file_days(file, landing.timestamp_column, landing.undated(), landing.zone()):
                key = day.isoformat()
                if key in existing:
                    by_day.setdefault(key, []).append(file.fingerprint)
                elif first is not None and key < first:
                    too_early.add(file.path)
                    context.log.warning(
                        f"{file.path}: rows of {key} are dated before the first partition {first} and will never be "
                        f"scored; set FP_PARTITIONS_START to {key} or earlier to score them"
                    )
                else:
                    context.log.info(f"{file.path}: rows of {key} wait for that day's partition to exist")
        requests = [
            dg.RunRequest(
                partition_key=key,
                run_key=f"{key}:{hashlib.sha256(chr(10).join(sorted(prints)).encode()).hexdigest()[:16]}",
                tags={"faithfulness/trigger": "new_landing_files"},
            )
            for key, prints in sorted(by_day.items())
        ]
        seen = {f.path: _stamp(f) for f in files}
        skip = None
        if too_early and not requests:  # said where the UI shows it: the tick's skip reason
            skip = (
                f"rows of {len(too_early)} new file(s) ({', '.join(sorted(too_early)[:3])}) are dated before the first "
                f"partition {first} and will never be scored; set FP_PARTITIONS_START to score them"
            )
        return dg.SensorResult(run_requests=requests, cursor=json.dumps(seen, sort_keys=True), skip_reason=skip)

    return new_landing_files

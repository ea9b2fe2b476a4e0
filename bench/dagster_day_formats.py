"""One day through `dg launch` once per table format: each process's peak, wall time and bytes, against Parquet.

The same landing file (typical RAG rows, every ``created_at`` on one day: ``bench/day_landing.py``, kept in
``--work``) is scored by ``dg launch --assets group:answer_quality --partition DAY`` with the offline judge, once
per format (``FP_TABLE_FORMAT``), each in a fresh DAGSTER_HOME and a fresh warehouse, run and sampled as
``bench/dagster_day.py`` runs its days (``bench/dagster_runs.py``, ``bench/process_sampling.py``: every process of
the run's session read from /proc every 0.2 s, its VmHWM while alive). Iceberg gets a SQLite catalog in the run's
folder (``FP_ICEBERG_CATALOG``); PostgreSQL a throwaway cluster on a Unix socket (``tests/postgres_cluster.py``:
initdb and pg_ctl of the Debian package, run as the ``postgres`` user when this runs as root), stopped and
removed at the end. The database server's own processes are not in the run's session: their memory is not
counted (a production server is a machine of its own).

Per format: the largest process's peak (and which), its ratio to Parquet's (issue 53's target: at most 1.1×),
each step's peak and its ratio to the same step under Parquet (the steps that write a table marked), the run's
wall time, and the bytes of each table (files under the warehouse; for PostgreSQL the relations' total size,
``pg_total_relation_size``). Each table's rows for the day are read back through the format, in a child process.

    .venv/bin/python bench/dagster_day_formats.py [--rows 100000] [--formats parquet delta iceberg postgres]
        [--work DIR] [--kill-above-gb 15] [--json out.json] [--smaller small.json]
    .venv/bin/python bench/dagster_day_formats.py --report-from out.json [--smaller small.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, machine, machine_line
from dagster_runs import Plan, base_env, run_day, sizes
from day_landing import CHUNK_ROWS, DAY, landing_file
from process_sampling import POLL_S

FORMATS = ("parquet", "delta", "iceberg", "postgres")
TARGET_VS_PARQUET = 1.1  # issue 53: each format's largest-process peak / Parquet's
NAMESPACE = "faithfulness"  # the Iceberg namespace and the PostgreSQL schema
MB = 2**20
#: The step that writes each table of the day, where it is not the table's own asset.
WRITTEN_BY = {"extracted_claims": "claims_and_verdicts.combine", "judged_claims": "claims_and_verdicts.combine"}


# ---------------------------------------------------------------------------------------------- runs


def _settings(fmt: str, run_dir: Path, postgres_url: str | None) -> dict[str, str]:
    """The ``FP_*`` variables of a format's day."""
    env = {"FP_TABLE_FORMAT": fmt}
    if fmt == "iceberg":
        env.update(FP_ICEBERG_CATALOG=f"sqlite:///{run_dir / 'iceberg_catalog.sqlite'}?timeout=30",
                   FP_ICEBERG_NAMESPACE=NAMESPACE)
    elif fmt == "postgres":
        assert postgres_url is not None
        env.update(FP_POSTGRES_URL=postgres_url, FP_POSTGRES_SCHEMA=NAMESPACE)
    return env


def _inspect(env: dict[str, str]) -> dict[str, Any]:
    """The day's rows of every table, read through the format by a child process (this one stays small), and
    where that process imported the package from."""
    done = subprocess.run([sys.executable, __file__, "--inspect"], env=env, cwd=ROOT, capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"reading the tables back failed: {done.stderr[-3000:]}")
    return dict(json.loads(done.stdout))


def inspect_tables() -> dict[str, Any]:
    """(--inspect) Rows of the day in each table the day writes, through the format the ``FP_*`` variables name."""
    import faithfulness_pipeline
    from faithfulness_pipeline.defs.names import CLAIMS, RAW, VERDICTS
    from faithfulness_pipeline.defs.warehouse import WarehouseResource
    from faithfulness_pipeline.outputs import TableOutput, entries

    fields = {"root": "FP_WAREHOUSE", "table_format": "FP_TABLE_FORMAT", "postgres_url": "FP_POSTGRES_URL",
              "postgres_schema": "FP_POSTGRES_SCHEMA", "iceberg_catalog": "FP_ICEBERG_CATALOG",
              "iceberg_namespace": "FP_ICEBERG_NAMESPACE"}
    warehouse = WarehouseResource(**{k: os.environ[v] for k, v in fields.items() if v in os.environ})
    tables = [RAW, CLAIMS, VERDICTS, *(e.name for e in entries() if isinstance(e, TableOutput))]
    return {"package": str(Path(faithfulness_pipeline.__file__).parent),
            "rows": {t: warehouse.rows(t, DAY) for t in tables if warehouse.exists(t, DAY)}}


def _file_bytes(fmt: str, warehouse: Path) -> dict[str, int]:
    """Bytes under the warehouse by table (an Iceberg namespace's folder by its tables) or file."""
    found = sizes(warehouse)
    if fmt == "iceberg" and (warehouse / NAMESPACE).is_dir():
        del found[NAMESPACE]
        found.update(sizes(warehouse / NAMESPACE))
    return found


def _postgres_bytes(cluster: Any) -> dict[str, int]:
    """``pg_total_relation_size`` of each table of the schema (a table's rows are ``<table>__versions``)."""
    text = cluster.psql("SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n "
                        f"ON n.oid = c.relnamespace WHERE n.nspname = '{NAMESPACE}' AND c.relkind = 'r'")
    found = {}
    for line in text.splitlines():
        name, size = line.rsplit("|", 1)
        found[name.removesuffix("__versions")] = int(size)
    return found


def _drop_schema(cluster: Any) -> None:
    cluster.psql(f"DROP SCHEMA IF EXISTS {NAMESPACE} CASCADE")


def run(rows: int, formats: list[str], work: Path | None, kill_above_gb: float, timeout_s: float,
        chunk_rows: int = CHUNK_ROWS, save: Path | None = None) -> dict[str, Any]:
    """Every format's day; ``save``: the figures so far are written there after each day."""
    started = time.perf_counter()
    result: dict[str, Any] = {"machine": machine(), "day": DAY, "rows": rows, "chunk_rows": chunk_rows,
                              "formats": {}, "loads": []}
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fp-formatbench-")))
        work.mkdir(parents=True, exist_ok=True)
        landing = landing_file(work, rows, chunk_rows)
        result["landing_bytes"] = landing.stat().st_size
        cluster = None
        if "postgres" in formats:
            from tests.postgres_cluster import missing_reason, postgres_cluster

            if (why := missing_reason()) is not None:
                raise RuntimeError(f"no PostgreSQL cluster for the postgres day: {why}")
            cluster = stack.enter_context(postgres_cluster())
        for fmt in formats:
            run_dir = work / f"run-{fmt}-{rows}"
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.mkdir()
            settings = _settings(fmt, run_dir, cluster.url() if cluster is not None else None)
            if fmt == "postgres":
                _drop_schema(cluster)  # a fresh schema, as every other format gets a fresh warehouse
            print(f"dg launch: {fmt}, {rows:,} rows ...", file=sys.stderr, flush=True)
            day = run_day(Plan(rows, "offline", landing=landing), run_dir, None, None, kill_above_gb, timeout_s,
                          settings, failed_is_error=False)  # a format that fails is a finding: the next one runs
            env = {**base_env(), **settings, "FP_WAREHOUSE": str(run_dir / "warehouse")}
            day.update(_inspect(env))
            day["scored_rows"] = day["rows"].get("scored_conversations", 0)
            day["files"] = _file_bytes(fmt, run_dir / "warehouse")
            if fmt == "iceberg":
                day["files"]["iceberg_catalog.sqlite"] = (run_dir / "iceberg_catalog.sqlite").stat().st_size
            day["database"] = _postgres_bytes(cluster) if fmt == "postgres" else {}
            result["formats"][fmt] = day
            result["loads"].append(os.getloadavg()[0])
            print(f"  {day['wall_s']:.0f} s, largest {day['largest_gb']:.2f} GB ({day['largest_role']}), "
                  f"{day['scored_rows']:,} scored rows, package from {day['package']}"
                  + (f"; FAILED: {day['failure']}" if day.get("failure") else ""), file=sys.stderr, flush=True)
            result["load"], result["total_s"] = os.getloadavg(), time.perf_counter() - started  # so far
            if save is not None:
                save.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
            shutil.rmtree(run_dir / "warehouse", ignore_errors=True)  # the logs stay
            shutil.rmtree(run_dir / "dagster_home", ignore_errors=True)
    result["load"] = os.getloadavg()
    result["total_s"] = time.perf_counter() - started
    return result


# -------------------------------------------------------------------------------------------- report


def _tables(day: dict[str, Any]) -> dict[str, int]:
    """Bytes of each table the day wrote (in the files, or in the database)."""
    where = day["database"] if day["database"] else day["files"]
    return {t: where.get(t, 0) for t in day["rows"]}


def _other(day: dict[str, Any]) -> dict[str, int]:
    """Bytes of what is no table: the DuckDB file, the report, the Iceberg catalog, PostgreSQL's ``_loads``."""
    tables = set(day["rows"])
    found = {k: v for k, v in day["files"].items() if k not in tables and k != "store"}
    found.update({k: v for k, v in day["database"].items() if k not in tables})
    return found


def _step_peaks(day: dict[str, Any]) -> dict[str, float]:
    return {role.removeprefix("step "): max(gbs) for role, gbs in day["by_role"].items() if role.startswith("step ")}


def _writes(step: str, tables: set[str]) -> list[str]:
    return sorted(t for t in tables if WRITTEN_BY.get(t, t) == step)


def _ratio(value: float, base: float | None) -> str:
    return "" if not base else f" ({value / base:.2f}×)"


def _grew(day: dict[str, Any], small: dict[str, Any] | None) -> str:
    """The smaller day's largest process and what the largest grew by from it."""
    if small is None or not small["ok"]:
        return " |"
    return f" {small['largest_gb']:.2f} (+{day['largest_gb'] - small['largest_gb']:.2f}) |"


def _mark(ok: bool) -> str:
    return "MET" if ok else "NOT met"


def report(result: dict[str, Any], command: str, smaller: dict[str, Any] | None = None) -> str:
    """The section of BENCHMARKS.md; ``smaller``: the figures of a smaller day, to show what grew with the day."""
    days = result["formats"]
    small = smaller["formats"] if smaller else {}
    small_head = f" | at {smaller['rows']:,} rows GB (grew)" if smaller else ""
    base = days.get("parquet")
    base_gb = base["largest_gb"] if base and base["ok"] else None
    lines = [
        f"## Table formats: a {result['rows']:,}-answer Dagster day per format (issue 53)",
        "",
        f"`{command or '.venv/bin/python bench/dagster_day_formats.py'}` — one landing file of {result['rows']:,} "
        f"typical RAG rows ({result['landing_bytes'] / MB:.0f} MB; `bench/day_landing.py`, every `created_at` on "
        f"{result['day']}) scored by `dg launch --assets group:answer_quality --partition {result['day']}` with the "
        "offline judge, once per table format (`FP_TABLE_FORMAT`), each in a fresh DAGSTER_HOME and warehouse; "
        "Iceberg with a SQLite catalog in the run's folder, PostgreSQL in a throwaway local cluster on a Unix "
        "socket (`tests/postgres_cluster.py`; the server's own processes are not counted). Peak RSS: every process "
        f"of the run's session read from /proc every {POLL_S:g} s (VmHWM while alive), as in `bench/dagster_day.py`. "
        "GB = 2^30, MB = 2^20 bytes. Table bytes: the day's tables' files under the warehouse, or for PostgreSQL "
        "their relations' `pg_total_relation_size` (rows of the table's loads with its indexes and TOAST).",
        "",
        f"| format | wall s | largest process GB (which) | / Parquet's (target ≤ {TARGET_VS_PARQUET}×) | at once GB "
        f"| scored rows | tables MB | other MB{small_head} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if smaller else ""),
    ]
    for fmt, d in days.items():
        state = f" ({d['killed']})" if d["killed"] else (" (**failed**)" if d.get("failure") else "")
        ratio = f"**{d['largest_gb'] / base_gb:.2f}×**" if base_gb and d["ok"] else "n/a"
        lines.append(f"| {fmt} | {d['wall_s']:.0f}{state} | **{d['largest_gb']:.2f}** ({d['largest_role']}) | "
                     f"{ratio} | {d['at_once_gb']:.2f} | {d['scored_rows']:,} | "
                     f"{sum(_tables(d).values()) / MB:.0f} | {sum(_other(d).values()) / MB:.1f} |"
                     + (_grew(d, small.get(fmt)) if smaller else ""))
    steps: dict[str, float] = {}
    for d in days.values():
        for step, gb in _step_peaks(d).items():
            steps[step] = max(steps.get(step, 0.0), gb)
    tables = set().union(*(d["rows"] for d in days.values())) if days else set()
    base_steps = _step_peaks(base) if base else {}
    lines += [
        "",
        "Peak of each step's process, GB (its ratio to the same step under Parquet); a step that writes a table "
        "names it:",
        "",
        "| step (writes) | " + " | ".join(days) + " |",
        "|---|" + "---:|" * len(days),
    ]
    for step in sorted(steps, key=lambda s: -steps[s]):
        writes = _writes(step, tables)
        label = f"{step} ({', '.join(writes)})" if writes else step
        cells = []
        for fmt, d in days.items():
            gb = _step_peaks(d).get(step)
            cells.append("" if gb is None else f"{gb:.2f}" + ("" if fmt == "parquet" else
                                                             _ratio(gb, base_steps.get(step))))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Bytes per table, MB (rows of the day read back through the format):",
        "",
        "| table | rows | " + " | ".join(days) + " |",
        "|---|---:|" + "---:|" * len(days),
    ]
    for table in sorted(tables):
        counts = {d["rows"][table] for d in days.values() if table in d["rows"]}  # a failed day lacks some
        shown = f"{counts.pop():,}" if len(counts) == 1 else " / ".join(
            f"{fmt} {d['rows'][table]:,}" for fmt, d in days.items() if table in d["rows"])
        lines.append(f"| {table} | {shown} | " + " | ".join(
            f"{_tables(d)[table] / MB:.1f}" if table in d["rows"] else "not written" for d in days.values()) + " |")
    for fmt, d in days.items():
        other = ", ".join(f"{k} {v / MB:.1f}" for k, v in sorted(_other(d).items()))
        lines.append(f"\n- {fmt}, not tables (MB): {other or 'none'}")
    lines += ["", "Target: each format's largest-process peak within "
              f"{TARGET_VS_PARQUET}× of Parquet's ({base_gb or 0:.2f} GB):", ""]
    for fmt, d in days.items():
        if fmt == "parquet":
            continue
        if not (base_gb and d["ok"]):
            why = d["killed"] or d.get("failure") or "no Parquet day to compare with"
            lines.append(f"- {fmt}: **not measured**: the day did not complete ({why})" if d.get("failure") or
                         d["killed"] else f"- {fmt}: **not measured** ({why})")
            continue
        ratio = d["largest_gb"] / base_gb
        over = [f"{s} {gb / base_steps[s]:.2f}×" for s, gb in _step_peaks(d).items()
                if s in base_steps and _writes(s, tables) and gb / base_steps[s] > TARGET_VS_PARQUET]
        steps_note = (f"; steps writing a table above {TARGET_VS_PARQUET}× their Parquet peak: {', '.join(over)}"
                      if over else f"; no step writing a table above {TARGET_VS_PARQUET}× its Parquet peak")
        lines.append(f"- {fmt}: {d['largest_gb']:.2f} / {base_gb:.2f} GB = **{ratio:.2f}×**: "
                     f"**{_mark(ratio <= TARGET_VS_PARQUET)}**{steps_note}")
    lost = [f"{fmt} {d['scored_rows']:,}" for fmt, d in days.items() if d["ok"] and d["scored_rows"] != result["rows"]]
    if lost:
        lines.append(f"- Every answer scored: **NOT met**: {'; '.join(lost)} scored rows of {result['rows']:,}")
    loads = ", ".join(f"{fmt} {load:.1f}" for fmt, load in zip(days, result["loads"], strict=True))
    lines += ["", f"This run took {result['total_s']:.0f} s; 1-minute load average after each day: {loads}.", "",
              machine_line({"machine": result["machine"], "load_average": result["load"][0]})]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000, help="answers in the day")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS),
                        help="table formats, in this order (parquet first: the others compare with it)")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep the landing file and the runs' logs here and reuse the file (default: a temp dir)")
    parser.add_argument("--kill-above-gb", type=float, default=15.0, help="stop a run whose processes hold more")
    parser.add_argument("--timeout-s", type=float, default=3600, help="stop a run that takes longer")
    parser.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS, help="rows per generated chunk and row group")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write the raw figures here (after each format's day, and at the end)")
    parser.add_argument("--report-from", type=Path, default=None,
                        help="print the report of a run's --json figures again, running nothing")
    parser.add_argument("--smaller", type=Path, default=None,
                        help="the --json figures of a smaller day: the report shows what the largest process grew by")
    parser.add_argument("--inspect", action="store_true", help=argparse.SUPPRESS)  # the child of _inspect
    args = parser.parse_args()
    if args.inspect:
        print(json.dumps(inspect_tables()))
        sys.exit(0)
    smaller = json.loads(args.smaller.read_text(encoding="utf-8")) if args.smaller else None
    if args.report_from:
        figures = json.loads(args.report_from.read_text(encoding="utf-8"))
        print(report(figures, figures.get("command", ""), smaller))
        sys.exit(0)
    figures = run(args.rows, args.formats, args.work, args.kill_above_gb, args.timeout_s, args.chunk_rows, args.json)
    figures["command"] = ".venv/bin/python bench/dagster_day_formats.py " + " ".join(sys.argv[1:])
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    print(report(figures, figures["command"], smaller))

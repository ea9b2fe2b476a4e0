"""One day of typical RAG rows through the Dagster graph (`dg launch`), against the CLI on the same file.

Every row of one landing Parquet file (typical RAG rows from ``bench/rag_rows.py``, every ``created_at`` on
one day) is scored by ``dg launch --assets group:answer_quality --partition DAY`` in a fresh DAGSTER_HOME
(a copy of the repository's dagster_home/dagster.yaml, pool limit included) and a fresh warehouse, then by
``faithfulness-pipeline score landing.parquet -o out.parquet`` with the same judge: the offline judge, and
the litellm judge against the fake OpenAI server (``faithfulness_pipeline.testing.fakellm``, its own
process, no latency) with a result store.

Memory: every process of the run's session (the run process, the fork server, each step process, the
offline judge's worker pool, Dagster's log capture) is read from /proc every ~0.2 s; a process's peak
is its VmHWM while it is alive. The run process's ``ru_maxrss`` from ``wait4`` is reported beside it: it is
that process's own peak only, as the fork server that starts the steps outlives the run process (it ends
when the run process's end closes its pipe) and is never reaped by it, so no step's peak reaches it. A run
whose processes hold more than ``--kill-above-gb`` at once (or that leaves the machine under 1.5 GB
available) is killed. The sampling is bench/process_sampling.py's, the runs bench/dagster_runs.py's.

The litellm judge scores cold (an empty store: every request sent) up to ``--cold-max`` rows. Above that
a cold day takes as long as its requests do (BENCHMARKS.md has what a cold 100,000 took here: a cold
million would take hours for the pair). The larger days are therefore scored from a warm store: their rows
repeat the contents of the ``--cold-max`` file under distinct conversation ids and timestamps, and the
store is the one the cold CLI run on that file filled (no request at all). The ``--cold-max`` file is then
scored warm as well, the like-for-like baseline of the growth target.

Landing files are built in a child process (bench/day_landing.py; this one stays small: a child's
``ru_maxrss`` starts at its parent's RSS), ``--chunk-rows`` rows at a time, one row group per chunk; chunk k
always holds the same rows, so a smaller file is a prefix of a larger one and a larger one is built on a kept
smaller one (``--work DIR`` keeps them between runs).

    .venv/bin/python bench/dagster_day.py [--rows 100000 1000000] [--judges offline litellm]
        [--llm-rows N ...] [--cold-max 100000] [--work DIR] [--kill-above-gb 15] [--json out.json]
        [--celery] [--month-days 30]

``--celery`` adds the largest day on Dagster's Celery executor (two workers, four shards: bench/celery_day.py)
and ``--month-days`` the report over that many such days in one scored table (bench/report_month.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import machine, machine_line
from dagster_runs import Plan, copy_store, parquet_rows, run_cli, run_day
from day_landing import CHUNK_ROWS, DAY, landing_file, repeat_landing_file
from overhead import BENCH_MODEL, ServerProcess
from process_sampling import POLL_S, status_kb

#: The targets of the streaming rewrite (issue 26).
TARGET_LARGEST_GB = 1.0  # no process above this at TARGET_ROWS answers
TARGET_ROWS = 1_000_000
TARGET_GROWTH = 1.3  # largest-process peak at 1,000,000 / at 100,000
TARGET_WALL_VS_CLI = 1.3  # the day's wall time / the CLI's on the same file
TARGET_WAREHOUSE = 2.5  # warehouse bytes / landing bytes
MB = 2**20  # as the issue and bench/memory.py count them
TABLES = ("raw_conversations", "extracted_claims", "judged_claims", "scored_conversations", "claim_table",
          "daily_answer_quality")


# ---------------------------------------------------------------------------------------------- runs


def _plans(rows: list[int], judges: list[str], llm_rows: list[int], cold_max: int) -> list[Plan]:
    plans: list[Plan] = []
    llm_sizes = sorted(n for n in rows if n in llm_rows) if "litellm" in judges else []
    warm_above = any(n > cold_max for n in llm_sizes)
    for n in sorted(rows):
        if "offline" in judges:
            plans.append(Plan(n, "offline"))
        if n in llm_sizes:
            if n <= cold_max:
                plans.append(Plan(n, "litellm", "cold"))
            if n > cold_max or (n == cold_max and warm_above):  # the warm runs' like-for-like baseline
                plans.append(Plan(n, "litellm", "warm"))
    return plans


def _projected_gb(done: list[dict[str, Any]], plan: Plan) -> float:
    """The largest process of ``plan``'s day if it grew in proportion to the rows (the worst case) from the
    largest day of the same judge measured so far; 0 when none was."""
    same = [r for r in done if r["judge"] == plan.judge and r["rows"] < plan.rows and r["day"]["ok"]]
    if not same:
        return 0.0
    last = max(same, key=lambda r: r["rows"])
    return float(last["day"]["largest_gb"]) * plan.rows / last["rows"]


def run(rows: list[int], judges: list[str], llm_rows: list[int] | None, cold_max: int, work: Path | None,
        kill_above_gb: float, timeout_s: float, chunk_rows: int = CHUNK_ROWS) -> dict[str, Any]:
    started = time.perf_counter()
    plans = _plans(rows, judges, rows if llm_rows is None else llm_rows, cold_max)
    result: dict[str, Any] = {"machine": machine(), "day": DAY, "chunk_rows": chunk_rows, "cold_max": cold_max,
                              "kill_above_gb": kill_above_gb, "runs": [], "landing": {}, "parent_rss_mb": 0.0}
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fp-daybench-")))
        work.mkdir(parents=True, exist_ok=True)
        server = stack.enter_context(ServerProcess()) if any(p.judge == "litellm" for p in plans) else None
        filled: dict[int, Path] = {}  # rows -> a store holding every result of landing-<rows>.parquet
        result["generate_s"] = 0.0
        for plan in plans:
            name = f"{plan.judge}{'-' + plan.store if plan.store else ''}-{plan.rows}"
            entry: dict[str, Any] = {"rows": plan.rows, "judge": plan.judge, "store": plan.store}
            result["runs"].append(entry)
            projected = _projected_gb(result["runs"][:-1], plan)
            if projected > kill_above_gb:  # known before its landing file is built: that takes minutes too
                why = (f"skipped: its largest process would reach ~{projected:.0f} GB if it grew with the rows, "
                       f"beyond the {kill_above_gb:g} GB limit")
                entry["day"], entry["cli"] = {"ok": False, "skipped": why}, {"ok": False, "skipped": why}
                print(f"{name}: {why}", file=sys.stderr, flush=True)
                continue
            generating = time.perf_counter()  # between runs: no part of any measurement
            if plan.store == "warm" and plan.rows > cold_max:
                plan.landing = repeat_landing_file(work, landing_file(work, cold_max, chunk_rows), cold_max, plan.rows)
            else:
                plan.landing = landing_file(work, plan.rows, chunk_rows)
            result["generate_s"] += time.perf_counter() - generating
            result["landing"][plan.landing.name] = {"rows": parquet_rows(plan.landing), "bytes": plan.landing.stat().st_size}
            entry.update(landing=plan.landing.name, landing_bytes=plan.landing.stat().st_size)
            run_dir = work / f"run-{name}"
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.mkdir()
            judge_server = server if plan.judge == "litellm" else None
            warm = None
            if plan.store == "warm":
                warm = filled.get(cold_max) or _fill(work, cold_max, chunk_rows, judge_server, filled,
                                                     kill_above_gb, timeout_s)
                entry["filled_from"] = warm.name
            result["parent_rss_mb"] = max(result["parent_rss_mb"], _rss_mb())
            print(f"dg launch: {name} ...", file=sys.stderr, flush=True)
            entry["day"] = run_day(plan, run_dir, judge_server, warm, kill_above_gb, timeout_s)
            print(f"  {entry['day']['wall_s']:.0f} s, largest {entry['day']['largest_gb']:.2f} GB",
                  file=sys.stderr, flush=True)
            cli_store = None
            if plan.judge == "litellm":
                cli_store = run_dir / "cli-store.sqlite"
                if warm is not None:
                    copy_store(warm, cli_store)
            print(f"CLI: {name} ...", file=sys.stderr, flush=True)
            entry["cli"] = run_cli(plan, run_dir, judge_server, cli_store, kill_above_gb, timeout_s)
            print(f"  {entry['cli']['wall_s']:.0f} s, largest {entry['cli']['largest_gb']:.2f} GB", file=sys.stderr,
                  flush=True)
            if plan.store == "cold" and cli_store is not None and entry["cli"]["ok"]:
                filled[plan.rows] = _keep_store(cli_store, work / f"store-{plan.rows}.sqlite")
            _tidy(run_dir)
        result["load"] = os.getloadavg()
    result["total_s"] = time.perf_counter() - started
    return result


def _keep_store(store: Path, target: Path) -> Path:
    copy_store(store, target)
    return target


def _fill(work: Path, rows: int, chunk_rows: int, server: ServerProcess | None, filled: dict[int, Path],
          kill_above_gb: float, timeout_s: float) -> Path:
    """A store holding every result of the ``rows`` file: the CLI scores it once (not measured)."""
    path = work / f"store-{rows}.sqlite"
    plan = Plan(rows, "litellm", "cold", landing_file(work, rows, chunk_rows))
    run_dir = work / f"fill-{rows}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir()
    print(f"filling the store from {rows:,} rows ...", file=sys.stderr, flush=True)
    done = run_cli(plan, run_dir, server, run_dir / "store.sqlite", kill_above_gb, timeout_s)
    if not done["ok"]:
        raise RuntimeError(f"filling the store failed: {done['killed']}")
    filled[rows] = _keep_store(run_dir / "store.sqlite", path)
    shutil.rmtree(run_dir, ignore_errors=True)
    return path


def _tidy(run_dir: Path) -> None:
    """A day's warehouse at a million rows is gigabytes: keep the logs, drop the tables once measured."""
    for name in ("warehouse", "dagster_home", "cli-out.parquet", "cli-store.sqlite"):
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists():
            path.unlink()


def _rss_mb() -> float:
    return status_kb(Path("/proc/self/status").read_text(), "VmRSS:") / 1024


# -------------------------------------------------------------------------------------------- report


def _warehouse_bytes(day: dict[str, Any]) -> int:
    return sum(v for k, v in day["tables"].items() if k != "store")


def _mark(ok: bool) -> str:
    return "MET" if ok else "NOT met"


def _label(r: dict[str, Any]) -> str:
    return r["judge"] + (f" ({r['store']} store)" if r["store"] else "")


def _day_row(r: dict[str, Any]) -> str:
    d = r["day"]
    if not d.get("wall_s") and d.get("skipped"):
        return f"| {r['rows']:,} | {_label(r)} | {d['skipped']} | | | | | | | |"
    requests = "" if d["requests"] is None else f"{d['requests']:,}"
    state = f" ({d['killed']})" if d["killed"] else ""
    ratio = _warehouse_bytes(d) / r["landing_bytes"]
    return (f"| {r['rows']:,} | {_label(r)} | {requests} | {d['wall_s']:.0f}{state} | **{d['largest_gb']:.2f}** "
            f"({d['largest_role']}) | {d['root_maxrss_gb']:.2f} | **{d['all_gb']:.2f}** ({d['processes']}) | "
            f"{d['at_once_gb']:.2f} | "
            f"{r['landing_bytes'] / MB:.0f} | {_warehouse_bytes(d) / MB:.0f} ({ratio:.1f}×) |")


def _cli_row(r: dict[str, Any]) -> str:
    c, d = r["cli"], r["day"]
    if c.get("skipped"):
        return f"| {r['rows']:,} | {_label(r)} | skipped with its day | | | | | |"
    requests = "" if c["requests"] is None else f"{c['requests']:,}"
    workers = c["by_role"].get("worker pool", [])
    pool = f"{len(workers)} × {max(workers):.2f}" if workers else "none"
    vs = f"**{d['wall_s'] / c['wall_s']:.2f}×**" if d.get("ok") else "n/a"
    state = f" ({c['killed']})" if c["killed"] else ""
    return (f"| {r['rows']:,} | {_label(r)} | {requests} | {c['wall_s']:.0f}{state} | "
            f"{c['by_role'].get('run process', [0.0])[0]:.2f} | {pool} | {c['all_gb']:.2f} | {vs} |")


def _tables_row(r: dict[str, Any]) -> str:
    t = r["day"]["tables"]
    others = sum(v for k, v in t.items() if k not in TABLES and k != "store")
    store = f"{t['store'] / MB:.0f}" if "store" in t else "none"
    return (f"| {r['rows']:,} | {_label(r)} | " + " | ".join(f"{t.get(name, 0) / MB:.1f}" for name in TABLES)
            + f" | {others / MB:.1f} | **{_warehouse_bytes(r['day']) / MB:.0f}** | {store} |")


def _roles_line(r: dict[str, Any], shown: int = 6) -> str:
    """The largest few processes by what they were, then what the rest add up to."""
    peaks = sorted(((max(p), role, len(p)) for role, p in r["day"]["by_role"].items()), reverse=True)
    parts = [f"{role} {gb:.2f}" if n == 1 else f"{role} {n} × ≤ {gb:.2f}" for gb, role, n in peaks[:shown]]
    rest = [role for _, role, _ in peaks[shown:]]
    if rest:
        total = sum(sum(r["day"]["by_role"][role]) for role in rest)
        parts.append(f"{len(rest)} more ({total:.2f} together)")
    return f"- {r['rows']:,}, {_label(r)}: " + "; ".join(parts)


def _unmeasured(within: bool) -> str:
    """A target whose sizes this run did not score: neither met nor missed, with what the proxy shows."""
    return f"**not measured** (at these sizes: {'within' if within else 'beyond'} the target)"


def _targets(result: dict[str, Any]) -> list[str]:
    runs = result["runs"]
    done = [r for r in runs if r["day"].get("wall_s")]
    sizes = {r["rows"] for r in runs}
    lines = []
    # 1. no process above 1 GB at a million answers (shown at the largest day run when that is fewer)
    top = max(sizes, default=0)
    at_top = [r for r in runs if r["rows"] == top]
    worst = max((r["day"]["largest_gb"] if r["day"].get("ok") else float("inf") for r in at_top), default=0.0)
    figures = ", ".join(f"{_label(r)} {r['day']['largest_gb']:.2f} GB" if r["day"].get("ok")
                        else f"{_label(r)} {r['day'].get('killed') or r['day'].get('skipped')}" for r in at_top)
    proxy = "" if top == TARGET_ROWS else f" (largest day of this run: {top:,})"
    mark = f"**{_mark(worst <= TARGET_LARGEST_GB)}**" if top == TARGET_ROWS else _unmeasured(worst <= TARGET_LARGEST_GB)
    lines.append(f"- No process above {TARGET_LARGEST_GB:g} GB at {TARGET_ROWS:,} answers{proxy}: {figures}: {mark}")
    # 2. the largest process grows at most 1.3x from 100,000 to 1,000,000 answers, like with like (judge, store)
    growth = []
    for key in sorted({(r["judge"], r["store"]) for r in runs}):
        same = sorted((r for r in runs if (r["judge"], r["store"]) == key), key=lambda r: r["rows"])
        if len(same) < 2:
            continue
        small, large = same[0], same[-1]
        if small["day"].get("ok") and large["day"].get("ok"):
            ratio = large["day"]["largest_gb"] / small["day"]["largest_gb"]
            growth.append((ratio, f"{_label(small)} {large['day']['largest_gb']:.2f} / "
                                  f"{small['day']['largest_gb']:.2f} GB = **{ratio:.2f}×**"))
        else:
            growth.append((float("inf"), f"{_label(small)}: the {large['rows']:,} day did not finish "
                                         f"({large['day'].get('killed') or large['day'].get('skipped')})"))
    if growth:
        within = all(g <= TARGET_GROWTH for g, _ in growth)
        exact = {100_000, TARGET_ROWS} <= sizes
        pair = "" if exact else f" (this run: {max(sizes):,} / {min(sizes):,})"
        mark = f"**{_mark(within)}**" if exact else _unmeasured(within)
        lines.append(f"- Largest-process peak at {TARGET_ROWS:,} / at 100,000 ≤ {TARGET_GROWTH}×{pair}: "
                     + "; ".join(text for _, text in growth) + f": {mark}")
    # 3. the day's wall time within 1.3x of the CLI's on the same file
    walls = [(r["day"]["wall_s"] / r["cli"]["wall_s"], r) for r in done if r["day"]["ok"] and r["cli"].get("ok")]
    if walls:
        met = all(x <= TARGET_WALL_VS_CLI for x, _ in walls) and len(walls) == len(runs)
        lines.append(f"- Wall time of the day ≤ {TARGET_WALL_VS_CLI}× the CLI's on the same file: "
                     + "; ".join(f"{r['rows']:,} {_label(r)} {r['day']['wall_s']:.0f} / {r['cli']['wall_s']:.0f} s "
                                 f"= **{x:.2f}×**" for x, r in walls) + f": **{_mark(met)}**")
    # not a target, the condition of every figure: each day and each CLI run scored every answer of its file
    lost = [f"{r['rows']:,} {_label(r)} {what} {r[what]['scored_rows']:,}" for r in done for what in ("day", "cli")
            if r[what].get("ok") and r[what]["scored_rows"] != r["rows"]]
    if lost:
        lines.append("- Every answer scored: **NOT met**: " + "; ".join(lost) + " rows scored")
    # 4. warehouse bytes within 2.5x of the landing bytes
    ratios = [(_warehouse_bytes(r["day"]) / r["landing_bytes"], r) for r in done if r["day"]["ok"]]
    if ratios:
        met = all(x <= TARGET_WAREHOUSE for x, _ in ratios) and len(ratios) == len(runs)
        lines.append(f"- Warehouse bytes ≤ {TARGET_WAREHOUSE}× landing bytes: "
                     + "; ".join(f"{r['rows']:,} {_label(r)} **{x:.1f}×**" for x, r in ratios) + f": **{_mark(met)}**")
    return lines


def report(result: dict[str, Any]) -> str:
    runs = result["runs"]
    done = [r for r in runs if r["day"].get("wall_s")]
    cold = [r for r in done if r["store"] == "cold"]
    landings = ", ".join(f"`{name}` {v['rows']:,} rows, {v['bytes'] / MB:.0f} MB"
                         for name, v in result["landing"].items())
    warm_note = ""
    if any(r["store"] == "warm" for r in runs):
        warm_note = (f" Above {result['cold_max']:,} rows the litellm judge runs from a warm store (a cold day is "
                     "as long as its requests take: see the cold rows): those days repeat the contents of the "
                     f"{result['cold_max']:,}-row file under their own ids and timestamps, and the store is the one "
                     f"the cold CLI run of that file filled (every result stored: no request). The "
                     f"{result['cold_max']:,}-row day is run warm too, the baseline those days compare with.")
    lines = [
        "## Dagster: one day through `dg launch`",
        "",
        "`.venv/bin/python bench/dagster_day.py` — one landing Parquet file of typical RAG rows "
        f"(`bench/rag_rows.py`; every `created_at` on {result['day']}; row groups of {result['chunk_rows']:,} rows, "
        "zstd) scored by `dg launch --assets group:answer_quality --partition DAY` in a fresh DAGSTER_HOME (the "
        "repository's dagster.yaml, pool limit included) and a fresh warehouse, then by `faithfulness-pipeline "
        "score landing.parquet -o out.parquet` with the same judge (`FP_JUDGE_*`): the offline judge as "
        f"shipped, and the litellm judge (`{BENCH_MODEL}`) against the fake server (its own process, no latency) "
        "with a result store (`<warehouse>/_judge_store.sqlite`; the CLI's `--store`)." + warm_note,
        "",
        "Peak RSS: every process of the run's session (run process, fork server, step processes, the offline "
        f"judge's worker pool, Dagster's log capture) read from /proc every {POLL_S:g} s, VmHWM while it is alive. "
        "*Run process (wait4)* is the `ru_maxrss` of `dg launch` itself (its own peak: the fork server that "
        "starts the steps is never reaped by it). *All processes* adds every process's peak (an upper bound: "
        "each step process is forked from the fork server and counts the pages it shares with it, and steps do "
        "not all run at once); *at once* is the largest sum of VmRSS seen at one sample, what the machine had "
        "to hold. GB = 2^30 and MB = 2^20 bytes. Warehouse bytes: "
        "every file the run wrote under the warehouse (the six tables, the DuckDB file, the HTML report), the "
        f"result store not included. Landing files: {landings}; built (or found in `--work`) in "
        f"{result['generate_s']:.0f} s by a child process, between runs.",
        "",
        "| answers | judge | requests | wall s | largest process GB (which) | run process GB (wait4) "
        "| all processes GB (count) | at once GB | landing MB | warehouse MB (× landing) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(_day_row(r) for r in runs),
        "",
        "The CLI on the same file (`--quiet`; a warm run starts from a copy of the same store):",
        "",
        "| answers | judge | requests | wall s | CLI process GB | worker pool GB | all processes GB | day / CLI wall |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
        *(_cli_row(r) for r in runs),
        "",
        "Warehouse files per day (MB):",
        "",
        "| answers | judge | " + " | ".join(TABLES) + " | DuckDB + report | total | result store |",
        "|---:|---|" + "---:|" * (len(TABLES) + 3),
        *(_tables_row(r) for r in done),
        "",
        "Peak RSS by process (GB):",
        "",
        *(_roles_line(r) for r in done),
        "",
        "Targets:",
        "",
        *_targets(result),
        "",
    ]
    if cold:
        lines += [
            "Cold litellm days here: " + "; ".join(
                f"{r['rows']:,} rows: day {r['day']['wall_s']:.0f} s, CLI {r['cli']['wall_s']:.0f} s, "
                f"{r['day']['requests']:,} requests" for r in cold) + ".",
            "",
        ]
    lines.append(f"This run took {result['total_s']:.0f} s (landing files included); this process stayed at "
                 f"{result['parent_rss_mb']:.0f} MB (a child's `ru_maxrss` starts there).")
    lines += ["", machine_line({"machine": result["machine"], "load_average": result["load"][0]})]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000], help="answers per day")
    parser.add_argument("--judges", nargs="+", choices=("offline", "litellm"), default=["offline", "litellm"])
    parser.add_argument("--llm-rows", type=int, nargs="+", default=None,
                        help="days (of --rows) the litellm judge scores (default: all)")
    parser.add_argument("--cold-max", type=int, default=100_000,
                        help="the litellm judge scores cold up to this many rows, from a warm store above")
    parser.add_argument("--work", type=Path, default=None,
                        help="keep landing files, logs and filled stores here and reuse them (default: a temp dir)")
    parser.add_argument("--kill-above-gb", type=float, default=15.0, help="stop a run whose processes hold more")
    parser.add_argument("--timeout-s", type=float, default=3 * 3600, help="stop a run that takes longer")
    parser.add_argument("--chunk-rows", type=int, default=CHUNK_ROWS, help="rows per generated chunk and row group")
    parser.add_argument("--json", type=Path, default=None, help="also write the raw figures here")
    parser.add_argument("--celery", action="store_true",
                        help="also the largest --rows day in four shards on two Celery workers (bench/celery_day.py)")
    parser.add_argument("--month-days", type=int, default=0,
                        help="also the report over this many days of the largest --rows answers each "
                        "(bench/report_month.py)")
    args = parser.parse_args()
    if args.cold_max % args.chunk_rows:
        parser.error("--cold-max must be a multiple of --chunk-rows (warm days repeat its row groups)")
    figures = run(args.rows, args.judges, args.llm_rows, args.cold_max, args.work, args.kill_above_gb,
                  args.timeout_s, args.chunk_rows)
    # The fleet and the month are scripts of their own (each runs alone too), run here after the day.
    if args.celery:
        import celery_day

        with tempfile.TemporaryDirectory(prefix="fp-celery-landing-") as scratch:
            figures["celery"] = celery_day.run(max(args.rows), 4, args.work or Path(scratch))
    if args.month_days:
        import report_month

        figures["month"] = report_month.run(20_000, max(args.rows), args.month_days, None)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1, default=str), encoding="utf-8")
    print(report(figures))
    if "celery" in figures:
        print("\n" + celery_day.report(figures["celery"]))
    if "month" in figures:
        print("\n" + report_month.report(figures["month"]))

"""One day on Dagster's Celery executor (two workers, four shards) against the same day on the multiprocess
executor, on this machine: wall time and every process's peak.

The landing file is ``bench/dagster_day.py``'s (typical RAG rows, one day: ``bench/day_landing.py``). The
broker is Debian's ``redis-server`` on 127.0.0.1 (a free port, an append-only file, its own folder); the two
workers are ``celery -A faithfulness_pipeline.defs.celery_app worker -Q dagster -c 1`` (docs/scaling-out.md),
each in a session and folder of its own; the instance is one SQLite DAGSTER_HOME they share (one machine: the
tests run the fleet on PostgreSQL and S3). Both days score with the offline judge in ``--shards`` shards into a
warehouse of their own. Peaks: every process of the run's session and of each worker's session, read from
/proc every 0.2 s (VmHWM while alive), as ``bench/dagster_day.py`` reads them (``bench/process_sampling.py``).

    .venv/bin/python bench/celery_day.py [--rows 100000] [--shards 4] [--work DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import machine, machine_line
from dagster_runs import base_env, home, sizes
from day_landing import CHUNK_ROWS, DAY, landing_file
from process_sampling import GB, POLL_S, run_sampled, session, status_kb

from faithfulness_pipeline.testing.processes import free_port

WORKERS = 2
START_LIMIT_S = 180.0


class _Sessions(threading.Thread):
    """Samples the peak (VmHWM) of every process of some sessions until stopped."""

    def __init__(self, sids: list[int]) -> None:
        super().__init__(daemon=True)
        self.sids = sids
        self.peaks: dict[tuple[int, int], tuple[int, str]] = {}  # (pid, start) -> (kB, session name)
        self._stop_event = threading.Event()

    def run(self) -> None:
        foreign: list[set[int]] = [set() for _ in self.sids]  # per session: another's pids are foreign to it
        while not self._stop_event.is_set():
            for index, sid in enumerate(self.sids):
                for pid, (_, start, status) in session(sid, foreign[index]).items():
                    kb = status_kb(status, "VmHWM:")
                    old = self.peaks.get((pid, start), (0, ""))[0]
                    self.peaks[(pid, start)] = (max(old, kb), f"worker {index + 1}")
            time.sleep(POLL_S)

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def _wait_ready(logs: list[Path], processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + START_LIMIT_S
    while not all(" ready." in log.read_text(errors="replace") for log in logs if log.exists()) or not all(
            log.exists() for log in logs):
        if any(p.poll() is not None for p in processes) or time.monotonic() > deadline:
            raise RuntimeError("a Celery worker did not start:\n" + "\n".join(
                log.read_text(errors="replace")[-2000:] for log in logs if log.exists()))
        time.sleep(0.2)


def _stop(process: subprocess.Popen[Any]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def _day(env: dict[str, str], folder: Path) -> dict[str, Any]:
    command = [str(Path(sys.executable).parent / "dg"), "launch", "--assets", "group:answer_quality",
               "--partition", DAY]
    seen = run_sampled(command, env, folder / "dg.log", kill_above_gb=15.0, timeout_s=3600)
    text = (folder / "dg.log").read_text(errors="replace")
    if seen.returncode != 0 or "RUN_SUCCESS" not in text:
        raise RuntimeError(f"dg launch failed ({seen.returncode}):\n{text[-3000:]}")
    peaks = sorted((p.peak_kb for p in seen.procs.values()), reverse=True)
    return {"wall_s": seen.wall_s, "run_session_largest_gb": (peaks[0] if peaks else 0) * 1024 / GB,
            "run_session_processes": len(peaks), "at_once_gb": seen.at_once_kb * 1024 / GB}


def run(rows: int, shards: int, work: Path) -> dict[str, Any]:
    landing = landing_file(work, rows, CHUNK_ROWS)
    result: dict[str, Any] = {"rows": rows, "shards": shards, "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="fp-celery-bench-") as tmp:
        folder = Path(tmp)
        redis_dir = folder / "redis"
        redis_dir.mkdir()
        port = free_port()
        redis = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--dir",
                                  str(redis_dir), "--appendonly", "yes", "--save", ""],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        workers: list[subprocess.Popen[bytes]] = []
        try:
            broker = f"redis://127.0.0.1:{port}/0"
            base = {**base_env(), "FP_LANDING": str(landing), "FP_PARTITIONS_START": DAY,
                    "FP_JUDGE_SHARDS": str(shards)}
            celery_env = {**base, "DAGSTER_HOME": str(home(folder / "celery_home")),
                          "FP_WAREHOUSE": str(folder / "celery_warehouse"), "FP_CELERY_BROKER": broker,
                          "FP_CELERY_BACKEND": f"redis://127.0.0.1:{port}/1"}
            logs = []
            for index in range(WORKERS):
                own = folder / f"worker-{index + 1}"
                own.mkdir()
                logs.append(own / "worker.log")
                with logs[-1].open("wb") as log:
                    workers.append(subprocess.Popen(
                        [str(Path(sys.executable).parent / "celery"), "-A", "faithfulness_pipeline.defs.celery_app",
                         "worker", "-Q", "dagster", "-c", "1", "-n", f"w{index + 1}@%h", "-l", "INFO",
                         "--without-mingle", "--without-gossip"],
                        cwd=own, env=celery_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
            _wait_ready(logs, workers)
            sampler = _Sessions([w.pid for w in workers])
            sampler.start()
            celery = _day(celery_env, folder)
            sampler.stop()
            by_worker: dict[str, int] = {}
            for kb, name in sampler.peaks.values():
                by_worker[name] = max(by_worker.get(name, 0), kb)
            celery["worker_largest_gb"] = {name: kb * 1024 / GB for name, kb in sorted(by_worker.items())}
            # the steps each worker ran: Celery logs one "Task execute_plan[...] succeeded" per step
            celery["worker_steps"] = [log.read_text(errors="replace").count("succeeded in") for log in logs]
            celery["warehouse_mb"] = sum(sizes(folder / "celery_warehouse").values()) / 2**20
            result["celery"] = celery
            local_env = {**base, "DAGSTER_HOME": str(home(folder / "local_home")),
                         "FP_WAREHOUSE": str(folder / "local_warehouse")}
            local = _day(local_env, folder / "local_home")
            local["warehouse_mb"] = sum(sizes(folder / "local_warehouse").values()) / 2**20
            result["local"] = local
        finally:
            for worker in workers:
                _stop(worker)
            _stop(redis)
            shutil.rmtree(redis_dir, ignore_errors=True)
    result["load_average"] = os.getloadavg()[0]
    return result


def report(result: dict[str, Any]) -> str:
    celery, local = result["celery"], result["local"]
    workers = ", ".join(f"{name} {gb:.2f} GB ({steps} steps)" for (name, gb), steps in
                        zip(celery["worker_largest_gb"].items(), celery["worker_steps"], strict=False))
    return "\n".join([
        "# Dagster: a day on the Celery executor",
        "",
        f"`.venv/bin/python bench/celery_day.py --rows {result['rows']} --shards {result['shards']}`: "
        f"{result['rows']:,} typical answers (bench/dagster_day.py's landing file), offline judge, "
        f"{result['shards']} shards; `dg launch` with FP_CELERY_BROKER set (two Celery workers, Redis on "
        "127.0.0.1, a shared SQLite instance) and without (the multiprocess executor). Peaks per process "
        "(VmHWM, sampled every 0.2 s): the run's session, and each worker's session (the worker and the "
        "processes that run its steps).",
        "",
        "| executor | wall s | run session: largest process GB | largest process of each worker | "
        "run session at once GB | warehouse MB |",
        "|---|---:|---:|---|---:|---:|",
        f"| Celery, 2 workers | {celery['wall_s']:.0f} | {celery['run_session_largest_gb']:.2f} | {workers} | "
        f"{celery['at_once_gb']:.2f} | {celery['warehouse_mb']:.0f} |",
        f"| multiprocess | {local['wall_s']:.0f} | {local['run_session_largest_gb']:.2f} | - | "
        f"{local['at_once_gb']:.2f} | {local['warehouse_mb']:.0f} |",
        "",
        f"Celery wall / multiprocess wall: {celery['wall_s'] / local['wall_s']:.2f}× (one machine of 2 cores: "
        "the workers share its cores with the run; the fleet's gain is on machines of their own).",
        "",
        machine_line(result),
    ])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--work", type=Path, default=None, help="keep the landing file here between runs")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="fp-celery-landing-"))
    work.mkdir(parents=True, exist_ok=True)
    print(report(run(args.rows, args.shards, work)))
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)

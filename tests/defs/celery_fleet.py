"""A fleet for the Celery tests: Celery workers as machines, a ``dg launch`` run sending them a day's steps.

A worker here is a process group of its own (``celery -A faithfulness_pipeline.defs.celery_app worker``, the
command of docs/scaling-out.md) with a working folder, TMPDIR and DAGSTER_HOME of its own and, where a UTS
namespace can be made, a host name of its own. What the workers share is what machines share: the broker
(Redis), the Dagster instance and the result store (PostgreSQL) and the bucket (S3 on moto's server).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
from dagster import DagsterEventType

from tests.defs.pg_instance import postgres_home
from tests.doc_blocks import block
from tests.reliability.support import REPO, TO_SCORED, child_env, dg_launch

#: Seconds a worker may take to start on a loaded 2-core machine (it imports Celery and dagster-celery).
WORKER_START_S = 120.0
#: The worker command of docs/scaling-out.md, as the page prints it.
WORKER_COMMAND = shlex.split(block("docs/scaling-out.md", "bash", "celery -A faithfulness_pipeline"), comments=True)
assert WORKER_COMMAND[:4] == ["celery", "-A", "faithfulness_pipeline.defs.celery_app", "worker"], WORKER_COMMAND


def _own_host_name_reason() -> str | None:
    probe = subprocess.run(["unshare", "--uts", "--", "hostname", "probe-host"], capture_output=True, text=True,
                           check=False)  # fmt: skip
    return None if probe.returncode == 0 else probe.stderr.strip() or "unshare --uts failed"


#: Whether each worker can have a host name of its own (root: unshare --uts); without, they share this one.
OWN_HOST_NAMES = _own_host_name_reason() is None


def worker_command(name: str, queues: str = "dagster", concurrency: int = 1) -> list[str]:
    """The page's worker command for worker ``name``, listening on ``queues`` with ``concurrency`` processes."""
    command = [str(Path(sys.executable).parent / "celery"), *WORKER_COMMAND[1:]]
    command[command.index("-Q") + 1] = queues
    command[command.index("-c") + 1] = str(concurrency)
    command[command.index("-n") + 1] = f"{name}@%h"
    return command


@dataclass
class Worker:
    name: str
    folder: Path
    process: subprocess.Popen[bytes]

    @property
    def log(self) -> Path:
        return self.folder / "worker.log"

    def log_tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-4000:]

    def ready(self) -> bool:
        """Whether the worker consumes (Celery logs ``<name>@<host> ready.``); fails if it exited."""
        if self.process.poll() is not None:
            raise AssertionError(f"worker {self.name} exited with {self.process.returncode}:\n{self.log_tail()}")
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return f"{self.name}@" in text and " ready." in text

    def kill(self) -> None:
        """SIGKILL the worker's whole process group: its main process and the process running the step."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Fleet:
    """``env``: the code location's settings every machine shares; ``operator``: the DAGSTER_HOME of the
    machine that launches runs (the instance itself is the PostgreSQL database)."""

    root: Path
    env: dict[str, str]
    operator: Path
    workers: list[Worker] = field(default_factory=list)

    def machine_env(self, folder: Path, **extra: str) -> dict[str, str]:
        home = postgres_home(folder / "dagster_home")
        tmp = folder / "tmp"
        tmp.mkdir(exist_ok=True)
        return {**self.env, "DAGSTER_HOME": str(home), "TMPDIR": str(tmp), **extra}

    def start_worker(self, name: str, queues: str = "dagster", concurrency: int = 1) -> Worker:
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        command = worker_command(name, queues, concurrency)
        if OWN_HOST_NAMES:  # the host name is set in a new UTS namespace, then the worker replaces the shell
            command = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', f"host-{name}", *command]
        with (folder / "worker.log").open("wb") as log:
            process = subprocess.Popen(command, cwd=folder, env=self.machine_env(folder), stdout=log,
                                       stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        worker = Worker(name, folder, process)
        self.workers.append(worker)
        return worker

    def wait_ready(self) -> None:
        deadline = time.monotonic() + WORKER_START_S
        while not all(w.ready() for w in self.workers):
            assert time.monotonic() < deadline, f"the workers did not start within {WORKER_START_S} s"
            time.sleep(0.1)

    def launch(self, day: str, assets: str = TO_SCORED, **extra: str) -> subprocess.Popen[str]:
        """``dg launch`` of ``day`` from the operator's machine: the run's process orchestrates, the workers run
        its steps."""
        env = {**self.env, "DAGSTER_HOME": str(self.operator), **extra}
        return subprocess.Popen(dg_launch(day, assets), cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()
        self.workers.clear()


def fleet_env(**settings: str) -> dict[str, str]:
    return child_env(**settings)


def step_workers(instance: dg.DagsterInstance, run_id: str) -> dict[str, list[str]]:
    """For each step of the run, the Celery workers (node names, ``name@host``) that began executing it, in
    order: dagster-celery's engine event "Executing steps ... in celery worker" names the worker."""
    out: dict[str, list[str]] = {}
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        if event is None or event.step_key is None or "in celery worker" not in entry.message:
            continue
        metadata = event.engine_event_data.metadata
        out.setdefault(event.step_key, []).append(str(metadata["Celery worker"].value))
    return out


@contextlib.contextmanager
def running(fleet: Fleet) -> Iterator[Fleet]:
    try:
        yield fleet
    finally:
        fleet.close()

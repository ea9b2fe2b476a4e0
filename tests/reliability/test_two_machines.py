"""Two run workers on two "machines" backfill four days at once against one Dagster instance and one
result store, both in a real PostgreSQL server (dagster_home/postgres/dagster.yaml, FP_JUDGE_STORE=postgresql://).

A machine here is a set of ``dg launch`` processes (one run per day) with a local folder of its own
(DAGSTER_HOME with the documented PostgreSQL dagster.yaml, TMPDIR) and, through a UTS namespace, a host
name of its own: a lease one machine holds is foreign to the other, as between two Kubernetes pods, so
the other waits for it to run out instead of seeing its holder die. What the machines share is what
machines share in production: the instance database, the result store, the landing folder and the
warehouse (object storage there, a folder here).

The days repeat most of their contents (the same questions answered alike every day), so runs of
different days ask for the same items at the same moment: what one worker pays for, the other must not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.defs.pg_instance import POOL_LIMIT, postgres_home, set_up_instance
from tests.defs.pool_events import POOL, pool_use
from tests.postgres_cluster import Cluster
from tests.reliability.support import (
    KEY_ENV,
    MODEL,
    REPO,
    STEPS,
    TO_SCORED,
    as_dagster_scores,
    child_env,
    comparable,
    dg_launch,
    short_rows,
    step_items,
    wait_for,
)

KEY = "sk-two-machines-3b8e1f0a6c2d4975"
DAYS = ("2026-11-21", "2026-11-22", "2026-11-23", "2026-11-24")
MACHINES = {"machine-a": DAYS[:2], "machine-b": DAYS[2:]}
SHARED = 40  # contents every day repeats
OWN = 12  # contents only that day has
LEASE_S = 3.0  # short, so a worker waiting for a dead machine's leases takes them over within the test


def _unshare_reason() -> str | None:
    probe = subprocess.run(["unshare", "--uts", "--", "hostname", "probe-host"], capture_output=True, text=True,
                           check=False)  # fmt: skip
    if probe.returncode != 0:
        return f"cannot give a worker a host name of its own (unshare --uts needs root): {probe.stderr.strip()}"
    return None


def _day_rows(k: int, day: str) -> pl.DataFrame:
    """Day ``k``: the SHARED contents every day has, then OWN contents of its own, each row a new conversation."""
    rows = pl.concat([short_rows(SHARED, day=day), short_rows(OWN, start=1000 * (k + 1), day=day)])
    return rows.with_columns(conversation_id=pl.lit(f"{day}/") + pl.col("conversation_id"))


def _own_texts(days: tuple[str, ...]) -> set[str]:
    """Answers only the given days hold: a request carrying one of them comes from their worker."""
    out: set[str] = set()
    for k, day in enumerate(DAYS):
        if day in days:
            out |= set(short_rows(OWN, start=1000 * (k + 1), day=day).get_column("output").to_list())
    return out - {""}


@dataclass(frozen=True)
class Alone:
    """One worker scoring some days alone in one run (no other worker to share with): what each step asks
    once, and the rows it gives."""

    items: dict[str, int]
    scored: pl.DataFrame


@dataclass
class World:
    root: Path
    landing: Path
    warehouse: Path
    dagster_url: str
    store_url: str
    alone: Callable[[tuple[str, ...]], Alone]


@pytest.fixture(scope="module")
def landing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("landing")
    for k, day in enumerate(DAYS):
        _day_rows(k, day).write_parquet(folder / f"{day}.parquet")
    return folder


@pytest.fixture(scope="module")
def alone(landing: Path) -> Callable[[tuple[str, ...]], Alone]:
    """The lone worker's run over the given days (in-process, against a fake server of its own)."""
    done: dict[tuple[str, ...], Alone] = {}

    def run(days: tuple[str, ...]) -> Alone:
        if days not in done:
            frame = pl.concat([pl.read_parquet(landing / f"{day}.parquet") for day in days])
            judge = ScriptedJudge()
            with pytest.MonkeyPatch.context() as mp, FakeLLMServer(judge) as server:
                mp.setenv(KEY_ENV, KEY)
                settings = JudgeSettings(model=MODEL, api_base=server.base_url, api_key_env=KEY_ENV)
                scored = score_frame(frame, make_judge(settings))
            done[days] = Alone(_asked(judge), scored)
        return done[days]

    return run


@pytest.fixture
def world(postgres: Cluster, tmp_path: Path, landing: Path, alone: Callable[[tuple[str, ...]], Alone]) -> World:
    reason = _unshare_reason()
    if reason is not None:
        pytest.skip(reason)
    tag = tmp_path.name.replace("-", "_").lower()
    for db in ("dagster", "results"):
        postgres.psql(f"CREATE DATABASE {db}_{tag}")
    return World(
        root=tmp_path, landing=landing, warehouse=tmp_path / "warehouse",
        dagster_url=postgres.url(database=f"dagster_{tag}").replace("postgresql://", "postgresql+psycopg2://"),
        store_url=postgres.url(database=f"results_{tag}"), alone=alone,
    )  # fmt: skip


@dataclass
class Machine:
    """One machine's run processes: one ``dg launch`` per day, each in its own process group."""

    name: str
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def _log(self, day: str) -> Path:
        return Path(self.env["TMPDIR"]) / f"{day}.log"

    def _log_tail(self, day: str) -> str:
        return self._log(day).read_text(encoding="utf-8", errors="replace")[-3000:]

    def launch(self, days: tuple[str, ...]) -> None:
        for day in days:
            # the host name is set inside a new UTS namespace, then the run process replaces the shell
            cmd = ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', self.name, *dg_launch(day, TO_SCORED)]
            log = self._log(day).open("wb")
            self.procs[day] = subprocess.Popen(cmd, env=self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True)  # fmt: skip
            log.close()

    def wait(self, timeout: float = 300) -> None:
        for day, proc in self.procs.items():
            code = proc.wait(timeout=timeout)
            assert code == 0, f"{self.name} {day}: exit {code}\n{self._log_tail(day)}"
        self.procs.clear()

    def ended(self) -> str | None:
        """Why the machine cannot get on: a run process that has already exited (with its log's end)."""
        for day, proc in self.procs.items():
            if proc.poll() is not None:
                return f"{self.name} {day} ended early with exit {proc.returncode}\n{self._log_tail(day)}"
        return None

    def kill(self) -> None:
        """SIGKILL every process of the machine: its runs, their step processes, their fork servers."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        self.procs.clear()


def _machine(world: World, name: str, server: FakeLLMServer, tmp: Path, shards: int = 1) -> Machine:
    """``tmp`` is short on purpose: multiprocessing's fork server puts its Unix socket there, and a path
    over 107 bytes cannot be bound (under pytest-xdist a tmp_path-based TMPDIR is longer than that)."""
    home = postgres_home(world.root / name / "dagster_home")
    env = child_env(
        DAGSTER_HOME=str(home), TMPDIR=str(tmp), FP_DAGSTER_PG_URL=world.dagster_url,
        FP_LANDING=str(world.landing), FP_WAREHOUSE=str(world.warehouse), FP_JUDGE_STORE=world.store_url,
        FP_JUDGE_STORE_LEASE_S=str(LEASE_S), FP_JUDGE_MODEL=MODEL, FP_JUDGE_API_BASE=server.base_url,
        FP_JUDGE_API_KEY_ENV=KEY_ENV, FP_JUDGE_MAX_CONCURRENCY="2", FP_PARTITIONS_START=DAYS[0],
        FP_JUDGE_SHARDS=str(shards), **{KEY_ENV: KEY},
    )  # fmt: skip
    return Machine(name, env)


@contextlib.contextmanager
def _instance(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    """The shared instance, set up as docs/scaling-out.md's recipe says (``dagster instance migrate``, then
    the pool's limit set in the instance: :func:`tests.defs.pg_instance.set_up_instance` runs the page's
    commands), and seen as the test (an operator) sees it."""
    home = postgres_home(world.root / "operator")
    set_up_instance(home, world.dagster_url, child_env())
    monkeypatch.setenv("FP_DAGSTER_PG_URL", world.dagster_url)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        yield instance


def _store_counts(world: World) -> dict[str, int]:
    with psycopg.connect(world.store_url) as conn:
        rows = conn.execute("SELECT step, count(*) FROM fp_results GROUP BY step").fetchall()
    counts = {str(step): int(n) for step, n in rows}
    return {step: counts.get(step, 0) for step in STEPS}


def _leases_of(world: World, machine: str) -> int:
    with psycopg.connect(world.store_url) as conn:
        row = conn.execute("SELECT count(*) FROM fp_leases WHERE owner LIKE %s", (f"{machine}:%",)).fetchone()
    return int(row[0]) if row else 0


def _wait(condition: Callable[[], bool], machines: Iterable[Machine], what: str, limit: float = 240) -> None:
    """:func:`wait_for` of ``condition``, failing at once, with the log, if a run process of a machine ends first."""

    def ready() -> bool:
        for machine in machines:
            ended = machine.ended()
            assert ended is None, f"before {what}: {ended}"
        return condition()

    wait_for(ready, None, what, limit)


def _asked(judge: ScriptedJudge) -> dict[str, int]:
    return {step: step_items(judge, step) for step in STEPS}


def _assert_every_row_once(world: World, days: tuple[str, ...]) -> None:
    """Each day's scored table holds each of that day's conversations exactly once, scored as the lone
    worker scored them."""
    reference = as_dagster_scores(world.alone(days).scored)
    tables = []
    for day in days:
        scored = pl.read_parquet(world.warehouse / "scored_conversations" / f"ds={day}" / "data.parquet")
        ids = scored.get_column("conversation_id")
        assert ids.n_unique() == scored.height, day
        expected = pl.read_parquet(world.landing / f"{day}.parquet").get_column("conversation_id")
        assert set(ids.to_list()) == set(expected.to_list()), day
        tables.append(scored.select(reference.columns))
    assert comparable(pl.concat(tables)).equals(comparable(reference))


def _runs_by_day(instance: dg.DagsterInstance) -> dict[str, list[dg.DagsterRun]]:
    out: dict[str, list[dg.DagsterRun]] = {}
    for run in instance.get_runs():
        out.setdefault(run.tags["dagster/partition"], []).append(run)
    return out


@pytest.fixture
def short_tmp() -> Iterator[Callable[[str], Path]]:
    """Makes short temporary folders (a machine's TMPDIR), removed after the test."""
    made: list[Path] = []

    def make(name: str) -> Path:
        made.append(Path(tempfile.mkdtemp(prefix=f"fp-{name}-", dir="/tmp")))
        return made[-1]

    yield make
    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


# Eight Dagster steps in four run processes on two cores: on a loaded machine it took 300 s here.
@pytest.mark.timeout(600)
def test_two_machines_backfill_four_days_at_once_within_the_pool_paying_each_item_once(
    world: World, short_tmp: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every day in two shard steps: eight LLM steps, still at most the pool's limit at once, the items and
    rows of one lone worker judging each day in one step. (One shard per day ran here too; it proved nothing
    the two-shard case and tests/defs/test_postgres_instance.py do not, for about three minutes of the suite.)"""
    shards = 2
    judge = ScriptedJudge()
    with _instance(world, monkeypatch) as instance, FakeLLMServer(judge, latency=Latency(base_s=0.3)) as server:
        storage = instance.event_log_storage
        # Both pool slots held by the test until all four runs wait for the pool: the runs of both machines
        # then reach their LLM steps together, and the pool, not the timing, decides who goes first.
        for i in range(POOL_LIMIT):
            assert storage.claim_concurrency_slot(POOL, "test-holder", f"hold-{i}").is_claimed
        machines = [_machine(world, name, server, short_tmp(name), shards) for name in MACHINES]
        for machine in machines:
            machine.launch(MACHINES[machine.name])
        _wait(lambda: len(storage.get_concurrency_info(POOL).pending_run_ids) == len(DAYS), machines,
              "every run of both machines to wait for the pool")
        released_at = time.time()
        for i in range(POOL_LIMIT):
            storage.free_concurrency_slot_for_step("test-holder", f"hold-{i}")
        for machine in machines:
            machine.wait()
        runs = [run for day_runs in _runs_by_day(instance).values() for run in day_runs]
        assert sorted(run.tags["dagster/partition"] for run in runs) == list(DAYS)
        assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
        use = pool_use(instance, [run.run_id for run in runs])
        assert storage.get_concurrency_info(POOL).claimed_slots == []
    assert not use.unfinished and len(use.intervals) == len(DAYS) * shards
    assert min(start for start, _ in use.intervals) >= released_at
    # both slots were used at once and never more: two of the four runs waited for a slot
    assert use.peak() == POOL_LIMIT, use.intervals
    asked, one = _asked(judge), world.alone(DAYS).items
    print(f"one worker asks {one}; two machines at once asked {asked}; "
          f"{use.blocked_events} 'waiting for the pool' events")  # fmt: skip
    for step in STEPS:
        assert one[step] <= asked[step] <= 1.05 * one[step], (step, asked, one)
    _assert_every_row_once(world, DAYS)


def test_a_machine_killed_mid_step_is_re_executed_paying_only_for_what_is_missing(
    world: World, short_tmp: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    days = {"machine-a": DAYS[:1], "machine-b": DAYS[2:3]}  # a day each: the pool of two lets both ask at once
    one = world.alone((*days["machine-a"], *days["machine-b"])).items
    judge = ScriptedJudge()
    a_texts = _own_texts(days["machine-a"])
    with _instance(world, monkeypatch) as instance, FakeLLMServer(judge, latency=Latency(base_s=0.4)) as server:
        a, b = (_machine(world, name, server, short_tmp(name)) for name in days)
        a.launch(days[a.name])
        b.launch(days[b.name])

        def a_mid_step() -> bool:
            # a request of machine A's own contents has reached the provider, and A holds leases: its LLM
            # step is asking right now
            seen = any(text in a_texts for call in list(judge.calls) for text in call.texts)
            return seen and _leases_of(world, a.name) > 0

        _wait(a_mid_step, (a, b), "machine A's LLM step in flight")
        a.kill()
        killed_with = _leases_of(world, a.name)
        assert killed_with > 0
        # What Dagster's run monitoring does for a run worker that died, and forced termination or "free
        # concurrency slots" in the UI do by hand: the run ends, its pool slot comes back.
        by_day = _runs_by_day(instance)
        killed = [run for day in days[a.name] for run in by_day[day] if not run.is_finished]
        assert len(killed) == len(days[a.name])
        for run in killed:
            instance.report_run_failed(run)
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        b.wait()  # B takes over the dead machine's leases when they run out (LEASE_S), and finishes
        kept, before = _store_counts(world), _asked(judge)
        assert all(kept[s] <= one[s] for s in STEPS) and kept != one, kept

        # machine A comes back (same host name, same local folder) and executes its day again
        a_again = _machine(world, a.name, server, short_tmp(a.name))
        a_again.launch(days[a.name])
        a_again.wait()
        asked_again = {step: _asked(judge)[step] - before[step] for step in STEPS}
        runs = _runs_by_day(instance)
        assert all(any(r.status == dg.DagsterRunStatus.SUCCESS for r in runs[day]) for day_list in days.values()
                   for day in day_list)  # fmt: skip
        use = pool_use(instance, [r.run_id for day_runs in runs.values() for r in day_runs])
    print(f"killed with {killed_with} leases held; store then held {kept} of {one}; "
          f"the day executed again asked {asked_again}")  # fmt: skip
    # the re-execution paid exactly for what the store lacked, each item once
    assert asked_again == {step: one[step] - kept[step] for step in STEPS}
    assert use.peak() <= POOL_LIMIT
    _assert_every_row_once(world, (*days["machine-a"], *days["machine-b"]))

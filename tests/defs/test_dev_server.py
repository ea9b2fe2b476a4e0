"""`dagster dev` on 127.0.0.1 answers GraphQL, and a backfill runs in parallel processes within the pool.

One `dagster dev` (webserver + daemon) serves both tests: it starts from the repository root with a
temporary DAGSTER_HOME holding the repository's dagster.yaml. The `dg dev` of the README's tour is started
by tests/defs/test_demo.py; here the older command stays, because the backfill below is submitted with
`dagster job backfill -m faithfulness_pipeline.definitions`, and under `dg dev` (whose code location is named
after the project folder) the daemon did not launch that backfill's runs within the test's 180 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml

from tests.defs.conftest import (
    ASSETS,
    CALIBRATION_ASSETS,
    DAYS,
    LABEL_ASSETS,
    REPO,
    SAMPLE,
    free_port,
    make_home,
    sample_ids,
    subprocess_env,
)
from tests.defs.pool_events import POOL, pool_use


@dataclass
class DevServer:
    url: str
    home: Path
    warehouse: Path
    env: dict[str, str]
    started_in: float


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except (urllib.error.URLError, OSError):
        return 0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stops the process group started for this test (dagster dev, its webserver, daemon, code server)."""
    for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
    # the children may outlive the parent: end whatever is left of the group
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    root = tmp_path_factory.mktemp("dev")
    home = make_home(root / "dagster_home")
    landing = root / "landing"
    shutil.copytree(SAMPLE, landing, ignore=shutil.ignore_patterns("*.py"))
    warehouse = root / "warehouse"
    env = subprocess_env(home, warehouse, landing)
    port = free_port()
    dagster = Path(sys.executable).parent / "dagster"
    log = (root / "dagster_dev.log").open("wb")
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(dagster), "dev", "-h", "127.0.0.1", "-p", str(port)],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while _get(f"{url}/server_info") != 200:
            assert proc.poll() is None, (root / "dagster_dev.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "dagster dev did not answer within 120 s"
            time.sleep(0.5)
        yield DevServer(url, home, warehouse, env, time.monotonic() - started)
    finally:
        _stop(proc)
        log.close()


def _graphql(url: str, query: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"{url}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        payload = json.loads(response.read())
    assert "errors" not in payload, payload
    data = payload["data"]
    assert isinstance(data, dict)
    return data


def test_dagster_dev_lists_every_asset_over_graphql(dev: DevServer) -> None:
    print(f"dagster dev answered after {dev.started_in:.1f} s")
    data = _graphql(dev.url, "{ assetNodes { assetKey { path } groupName jobNames isPartitioned } }")
    nodes = data["assetNodes"]
    assert isinstance(nodes, list)
    assert {"/".join(n["assetKey"]["path"]) for n in nodes} == ASSETS | CALIBRATION_ASSETS | LABEL_ASSETS
    daily = [n for n in nodes if "/".join(n["assetKey"]["path"]) in ASSETS]
    assert all("score_conversations" in n["jobNames"] for n in daily)
    # one file each over every day: the BI database and the report are not daily partitions
    unpartitioned = {"answer_quality_duckdb", "answer_quality_report"}
    assert {"/".join(n["assetKey"]["path"]) for n in daily if not n["isPartitioned"]} == unpartitioned
    calibration = [n for n in nodes if "/".join(n["assetKey"]["path"]) in CALIBRATION_ASSETS]
    assert calibration and all(not n["isPartitioned"] and "calibrate_judge" in n["jobNames"]
                               and "score_conversations" not in n["jobNames"] for n in calibration)
    labels = [n for n in nodes if "/".join(n["assetKey"]["path"]) in LABEL_ASSETS]
    assert labels and all(not n["isPartitioned"] and "read_labels" in n["jobNames"]
                          and "score_conversations" not in n["jobNames"] for n in labels)
    automation = _graphql(
        dev.url,
        "{ repositoriesOrError { ... on RepositoryConnection { nodes { schedules { name } sensors { name } } } } }",
    )
    repos = automation["repositoriesOrError"]["nodes"]  # type: ignore[index]
    assert [s["name"] for s in repos[0]["schedules"]] == ["daily_scoring"]
    assert sorted(s["name"] for s in repos[0]["sensors"]) == ["new_labels", "new_landing_files"]


def _pool_limit() -> int:
    config = yaml.safe_load((REPO / "dagster_home" / "dagster.yaml").read_text(encoding="utf-8"))
    return int(config["concurrency"]["pools"]["default_limit"])


def _wait(predicate: object, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_backfill_runs_in_parallel_processes_within_the_pool_limit(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = _pool_limit()
    monkeypatch.setenv("DAGSTER_HOME", str(dev.home))
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        # Hold every slot of the pool, so all three runs must reach the pool and wait there: contention is
        # certain, not a matter of timing. Released once every run is blocked on it.
        storage.initialize_concurrency_limit_to_default(POOL)
        for i in range(limit):
            assert storage.claim_concurrency_slot(POOL, "test-holder", f"hold-{i}").is_claimed

        t0 = time.monotonic()
        backfill = subprocess.run(
            [
                str(Path(sys.executable).parent / "dagster"),
                "job",
                "backfill",
                "-m",
                "faithfulness_pipeline.definitions",
                "-j",
                "score_conversations",
                "--partitions",
                ",".join(DAYS),
                "--noprompt",
            ],
            cwd=REPO,
            env=dev.env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert backfill.returncode == 0, backfill.stderr[-3000:]

        def runs() -> list[dg.DagsterRun]:
            return [r for r in instance.get_runs() if r.tags.get("dagster/backfill")]

        print(f"backfill submitted in {time.monotonic() - t0:.1f}s")
        _wait(lambda: len(runs()) == len(DAYS), "the backfill's runs", 60)
        _wait(
            lambda: len(storage.get_concurrency_info(POOL).pending_run_ids) == len(DAYS),
            "every run to wait for the pool",
            180,
        )
        blocked_runs = {r.run_id for r in runs() if r.status == dg.DagsterRunStatus.STARTED}
        assert len(blocked_runs) == len(DAYS)  # three run processes alive at once: the backfill is parallel
        print(f"all runs blocked on the pool after {time.monotonic() - t0:.1f}s")
        released_at = time.time()
        for i in range(limit):
            storage.free_concurrency_slot_for_step("test-holder", f"hold-{i}")

        _wait(lambda: all(r.is_finished for r in runs()), "the backfill to finish", 240)
        print(f"all runs finished after {time.monotonic() - t0:.1f}s")
        finished = runs()
        assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in finished), [r.status for r in finished]
        assert sorted(r.tags["dagster/partition"] for r in finished) == list(DAYS)

        use = pool_use(instance, [run.run_id for run in finished])
        assert not use.unfinished
        intervals = use.intervals
        assert len(intervals) == len(DAYS)
        # no LLM step ran while the test held the pool, and never more than the limit at once afterwards
        assert min(start for start, _ in intervals) >= released_at
        peak = use.peak()
        print(f"pool limit {limit}: at most {peak} LLM step(s) at once; {use.blocked_events} 'blocked by pool' events")
        assert 1 <= peak <= limit
        assert use.blocked_events >= len(DAYS)
        assert storage.get_concurrency_info(POOL).claimed_slots == []  # every slot given back

    # every sample row scored, each day once
    for day, ids in sample_ids().items():
        scored = dev.warehouse / "scored_conversations" / f"ds={day}" / "data.parquet"
        assert scored.is_file()
        assert set(pl.read_parquet(scored).get_column("row_key").to_list()) == ids

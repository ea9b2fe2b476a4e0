"""An endpoint that cannot be reached: at the start the run stops before any row (CLI: exit 2 naming the
URL; Dagster: the LLM step fails naming it, nothing stored); an endpoint that dies mid-run trips the
circuit breaker after a few connection failures in a row, so the run ends in seconds instead of retrying
every pack for minutes (hours for large tables). Rows not scored by then are error rows saying so, every
result finished before is kept in the store, and the re-run pays only for the rest.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import JudgeResource, LandingResource, WarehouseResource
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.defs.conftest import Lake
from tests.reliability.support import (
    DAY,
    KEY_ENV,
    MODEL,
    STEPS,
    Reference,
    child_env,
    cli_command,
    comparable,
    run_cli,
    short_rows,
    step_items,
    store_counts,
    wait_for,
)

KEY = "sk-unreachable-2b4d6f8a0c1e3579"


def closed_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Closed:
    """Stands in for a server in ``cli_command``: only its URL is used."""

    def __init__(self) -> None:
        self.base_url = f"http://127.0.0.1:{closed_port()}/v1"


def test_a_closed_port_stops_the_cli_before_any_row(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(40).write_parquet(src)
    closed = Closed()
    done = run_cli(cli_command(closed, src, tmp_path / "out.parquet", "--store", str(tmp_path / "s.sqlite")),  # type: ignore[arg-type]
                   KEY, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0] and closed.base_url in lines[0], done.stderr
    assert "--api-base" in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_a_closed_port_fails_the_dagster_step_before_any_row(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    short_rows(20).write_parquet(landing / "rows.parquet")
    closed = Closed()
    settings = DefsSettings(
        judge=JudgeResource(model=MODEL, api_base=closed.base_url, api_key=KEY),
        landing=LandingResource(path=str(landing)),
        warehouse=WarehouseResource(root=str(tmp_path / "warehouse")),
    )
    lake = Lake(landing, tmp_path / "warehouse", build_defs(settings))
    result = lake.materialize(DAY, instance)
    assert not result.success
    failures = []
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE":
            error = event.event_specific_data.error  # type: ignore[union-attr]
            while error is not None:
                failures.append(error.message)
                error = error.cause
    assert any("cannot connect" in m and closed.base_url in m for m in failures), failures
    assert not (tmp_path / "warehouse" / "extracted_claims").exists()
    assert not (tmp_path / "warehouse" / "scored_conversations").exists()


def test_an_endpoint_that_dies_mid_run_trips_the_breaker_and_keeps_what_was_done(
    reference: Reference, tmp_path: Path
) -> None:
    store = tmp_path / "store.sqlite"
    judge = ScriptedJudge()
    server = FakeLLMServer(judge, latency=Latency(base_s=0.05)).start()
    port = server.port
    cmd = cli_command(server, reference.src, tmp_path / "out.parquet", "--store", str(store),
                      "--max-concurrency", "2", "--quiet")  # fmt: skip
    proc = subprocess.Popen(cmd, env=child_env(**{KEY_ENV: KEY}), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        wait_for(lambda: step_items(judge, "extract") >= 4 * 32, proc, "some results")  # type: ignore[arg-type]
        server.stop()  # the endpoint dies: requests in flight are cut, new ones refused
        # Without the breaker each remaining pack would be retried with back-off for about a minute:
        # the run would take many minutes. The limit is a hang detector, not a timing check.
        _, stderr = proc.communicate(timeout=180)
    finally:
        server.stop()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    scored = pl.read_parquet(tmp_path / "out.parquet")
    assert scored.height == reference.scored.height  # no row lost
    errors = scored.filter(pl.col("status") == "error")
    assert errors.height > 0 and scored.filter(pl.col("status") == "ok").height > 0
    broken = errors.filter(pl.col("error").str.contains("circuit breaker"))
    assert broken.height > 0 and all(server_url_named(e, port) for e in broken.get_column("error").to_list())
    assert errors.get_column("hallucination_score").null_count() == errors.height  # null scores, never 0
    kept = store_counts(store)
    assert sum(kept.values()) > 0

    judge2 = ScriptedJudge()
    with FakeLLMServer(judge2, port=port):  # back on the same address: the store's results apply
        again = run_cli(cmd, KEY)
    assert again.returncode == 0, again.stderr
    for step in STEPS:
        assert step_items(judge2, step) == reference.items[step] - kept[step], (step, kept)
    assert comparable(pl.read_parquet(tmp_path / "out.parquet")).equals(comparable(reference.scored))


def server_url_named(error: str, port: int) -> bool:
    return f"127.0.0.1:{port}" in error

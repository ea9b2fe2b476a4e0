"""The CLI with the litellm judge against the fake server: faults, SIGKILL and resume, dry run, secrets.

Every run is a real subprocess talking real HTTP to a FakeLLMServer on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, FaultPlan, Latency, ServedLimits
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame

ROOT = Path(__file__).resolve().parents[2]
CANARY = "sk-canary-7f3a9c1e5b2d4e6f"
IGNORED = list(S.RUN_COLUMNS)


def _rows(n: int, seed: int = 1) -> pl.DataFrame:
    return typical_frame(n, seed=seed, ids="c{:05d}")


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedJudge(), api_key=CANARY) as srv:
        yield srv


def _cli(server: FakeLLMServer, src: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(out),
            "--model", "openai/fake-judge", "--api-base", server.base_url, "--api-key-env", "FP_TEST_KEY",
            "--timeout", "2", *extra]


#: Retry pauses for the runs with injected faults: the default 1 s doubling to 60 s is for real providers, and
#: these tests are about which rows survive the faults, not how long the pauses are (tests/judging/test_limits.py).
QUICK_RETRIES = ("--backoff-base", "0.01", "--backoff-max", "0.2")


def _env() -> dict[str, str]:
    return {**os.environ, "FP_TEST_KEY": CANARY}


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=300, check=False)


def _comparable(path: Path) -> pl.DataFrame:
    return pl.read_parquet(path).drop(IGNORED).sort("row_key")


def test_sigkill_halfway_then_resume_pays_only_for_the_rest(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(240).write_parquet(src)
    # Reference: an uninterrupted run in its own store.
    reference = _run(_cli(server, src, tmp_path / "ref.parquet", "--store", str(tmp_path / "ref.sqlite")))
    assert reference.returncode == 0, reference.stderr
    full_requests = server.stats().requests
    assert full_requests > 4

    server.reset_stats()
    server.set_latency(Latency(base_s=0.3))  # slow enough to kill it halfway
    store = tmp_path / "store.sqlite"
    out = tmp_path / "out.parquet"
    cmd = _cli(server, src, out, "--store", str(store), "--max-concurrency", "2", "--quiet")
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while server.stats().ok < full_requests // 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    paid_before_kill = server.stats().ok
    assert not out.exists()  # no partial output is ever visible
    assert not any(p.suffix == ".parquet" for p in tmp_path.iterdir() if p.name.startswith("out"))

    server.set_latency(Latency())
    server.reset_stats()
    resumed = _run(cmd)
    assert resumed.returncode == 0, resumed.stderr
    resumed_requests = server.stats().requests
    # At most what was left, plus what was in flight when it died (2 at a time).
    assert resumed_requests <= full_requests - paid_before_kill + 2, (resumed_requests, paid_before_kill)
    assert resumed_requests > 0
    assert _comparable(out).equals(_comparable(tmp_path / "ref.parquet"))

    server.reset_stats()
    again = _run(cmd)
    assert again.returncode == 0, again.stderr
    assert server.stats().requests == 0


def test_faults_lose_no_row_and_change_no_ok_row(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(150, seed=2).write_parquet(src)
    clean = _run(_cli(server, src, tmp_path / "clean.parquet", "--quiet"))
    assert clean.returncode == 0, clean.stderr
    server.set_faults(FaultPlan(rate_429=0.3, retry_after_s=0.05, rate_5xx=0.1, rate_malformed=0.1, rate_hang=0.02,
                                seed=5))
    # Streamed (auto: an api_base), a hang sends not even its first token: --stream-max cuts it.
    faulty = _run(_cli(server, src, tmp_path / "faulty.parquet", "--quiet", "--timeout", "0.5", "--stream-max", "1",
                       *QUICK_RETRIES))
    assert faulty.returncode == 0, faulty.stderr
    a, b = _comparable(tmp_path / "clean.parquet"), _comparable(tmp_path / "faulty.parquet")
    assert b["row_key"].to_list() == a["row_key"].to_list()  # every input row, exactly once
    errors = b.filter(pl.col("status") == "error")
    assert errors["error"].null_count() == 0
    assert errors["hallucination_score"].null_count() == errors.height
    ok = b.filter(pl.col("status") == "ok")
    assert ok.height > 0
    same = a.join(ok.select("row_key"), on="row_key", how="semi").drop(list(USAGE))
    assert same.equals(ok.drop(list(USAGE)))


USAGE = ("llm_calls", "prompt_tokens", "completion_tokens", "cost_usd")


def test_a_slow_servers_replies_are_waited_for_and_progress_shows_their_tokens(tmp_path: Path) -> None:
    """A server that takes seconds over each reply, a token every 40 ms, and --timeout 1: no flag for streaming.
    Every reply is longer than the timeout and none is cut; the progress lines (stderr is no terminal here:
    a line every 5 s) show the tokens arriving while the rows are not done."""
    src = tmp_path / "in.parquet"
    _rows(3, seed=3).write_parquet(src)
    with FakeLLMServer(ScriptedJudge(), api_key=CANARY, latency=Latency(per_output_token_s=0.04)) as srv:
        result = _run(_cli(srv, src, tmp_path / "out.parquet", "--timeout", "1"))
        stats = srv.stats()
    assert result.returncode == 0, result.stderr
    assert stats.by_outcome == {"ok": stats.requests} and stats.modelled_latency_s > stats.requests * 1.0
    lines = [line for line in result.stderr.splitlines() if line.startswith("scoring: ")]
    assert lines and all(re.fullmatch(r"scoring: \d+/3 rows \(\d+%\); receiving: [\d,]+ tokens \([\d.]+/s\)", line)
                         for line in lines), result.stderr
    assert (pl.read_parquet(tmp_path / "out.parquet")["status"] == "ok").all()


def test_dry_run_estimates_within_15_percent_and_calls_nothing(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(90, seed=3).write_parquet(src)
    dry = _run(_cli(server, src, tmp_path / "o.parquet", "--dry-run"))
    assert dry.returncode == 0, dry.stderr
    assert server.stats().requests == 0 and not (tmp_path / "o.parquet").exists()
    estimate = {k: int(v) for k, v in re.findall(r"(requests|prompt tokens|completion tokens): (\d+)", dry.stdout)}
    real = _run(_cli(server, src, tmp_path / "o.parquet", "--quiet"))
    assert real.returncode == 0, real.stderr
    stats = server.stats()
    assert abs(estimate["prompt tokens"] - stats.prompt_tokens) <= 0.15 * stats.prompt_tokens
    assert abs(estimate["completion tokens"] - stats.completion_tokens) <= 0.15 * stats.completion_tokens


def test_on_the_sample_data_the_dry_run_counts_the_requests_the_run_sends(server: FakeLLMServer,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    """Two files (flat and chat), each a chunk judged on its own: the dry run prices the calls the run makes,
    each packed on its own (it once priced the run as one call: 2 requests where 4 were sent)."""
    dry = _run(_cli(server, ROOT / "sample_data", tmp_path / "o.parquet", "--dry-run"))
    assert dry.returncode == 0, dry.stderr
    estimate = {k: int(v) for k, v in re.findall(r"(requests|prompt tokens): (\d+)", dry.stdout)}
    real = _run(_cli(server, ROOT / "sample_data", tmp_path / "o.parquet", "--quiet"))
    assert real.returncode == 0, real.stderr
    stats = server.stats()
    assert estimate["requests"] == stats.requests == 4
    assert abs(estimate["prompt tokens"] - stats.prompt_tokens) <= 0.10 * stats.prompt_tokens
    assert "replies are longer where most claims are unsupported or contradicted" in dry.stdout


def test_a_spend_cap_that_is_reached_writes_every_row_and_exits_3(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(60, seed=4).write_parquet(src)
    prices = ("--input-cost-per-token", "1e-6", "--output-cost-per-token", "4e-6", "--max-concurrency", "2",
              "--pack-tokens", "3000", "--max-items-per-pack", "4")
    dry = _run(_cli(server, src, tmp_path / "o.parquet", *prices, "--dry-run", "--max-cost-usd", "0.0001"))
    assert dry.returncode == 0, dry.stderr
    assert "spend cap (max_cost_usd): $0.0001: NOT enough" in dry.stdout
    found = re.search(r"estimated cost, interactive: \$([0-9.]+)", dry.stdout)
    assert found is not None, dry.stdout
    cap = float(found.group(1)) * 0.4
    out, claims = tmp_path / "o.parquet", tmp_path / "claims.parquet"
    run = _run(_cli(server, src, out, *prices, "--max-cost-usd", f"{cap:.6f}", "--claims-out", str(claims)))
    assert run.returncode == 3, run.stderr
    scored = pl.read_parquet(out)
    assert claims.exists() and scored.height == 60
    skipped = scored.filter(pl.col("status") == S.STATUS_SKIPPED).height
    assert 0 < skipped < 60 and set(scored.get_column("status")) == {S.STATUS_OK, S.STATUS_SKIPPED}
    assert f"skipped (spend cap): {skipped}" in run.stderr
    assert f"warning: {skipped} rows were not judged: the spend cap (max_cost_usd) was reached" in run.stderr
    assert float(scored.get_column("billed_cost_usd").sum()) <= cap


def test_the_key_appears_nowhere(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(30, seed=4).write_parquet(src)
    server.set_faults(FaultPlan(rate_5xx=0.3, seed=1))
    result = _run(_cli(server, src, tmp_path / "o.parquet", "--store", str(tmp_path / "s.sqlite"),
                       "--claims-out", str(tmp_path / "c.parquet"), "--mastra-out", str(tmp_path / "m.jsonl"),
                       *QUICK_RETRIES))
    assert result.returncode == 0, result.stderr
    assert CANARY not in result.stdout + result.stderr
    for path in tmp_path.iterdir():
        assert CANARY.encode() not in path.read_bytes(), path.name
    wrong = subprocess.run(_cli(server, src, tmp_path / "x.parquet"), capture_output=True, text=True, timeout=120,
                           env={**os.environ, "FP_TEST_KEY": "sk-wrong-" + CANARY[::-1]}, check=False)
    assert CANARY not in wrong.stdout + wrong.stderr and CANARY[::-1] not in wrong.stdout + wrong.stderr


def test_missing_key_fails_before_any_row(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(3).write_parquet(src)
    env = {k: v for k, v in os.environ.items() if k != "FP_TEST_KEY"}
    result = subprocess.run(_cli(server, src, tmp_path / "o.parquet"), capture_output=True, text=True, env=env,
                            timeout=120, check=False)
    assert result.returncode == 2
    assert "FP_TEST_KEY" in result.stderr and "Traceback" not in result.stderr
    assert server.stats().requests == 0 and not (tmp_path / "o.parquet").exists()


def test_a_dry_run_needs_no_key(server: FakeLLMServer, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(12).write_parquet(src)
    env = {k: v for k, v in os.environ.items() if k not in ("FP_TEST_KEY", "OPENAI_API_KEY")}
    for extra in ((), ("--api-key-env", "FP_TEST_KEY")):  # the provider's usual variable, and a named one
        cmd = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(tmp_path / "o.parquet"),
               "--model", "openai/gpt-4o-mini", "--api-base", server.base_url, "--dry-run", *extra]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        assert "dry run with openai/gpt-4o-mini" in result.stdout and "estimated cost, interactive: $" in result.stdout
    assert server.stats().requests == 0 and not (tmp_path / "o.parquet").exists()


def test_a_judge_that_extracts_nothing_is_a_warning_not_a_perfect_score(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    _rows(30).write_parquet(src)
    with FakeLLMServer(ScriptedJudge(extracts_nothing=True), api_key=CANARY) as quiet:
        run = _run(_cli(quiet, src, tmp_path / "out.parquet"))
        assert run.returncode == 0, run.stderr
        scored = pl.read_parquet(tmp_path / "out.parquet")
        assert scored.get_column("n_claims").to_list() == [0] * 30  # every answer "perfect"...
        assert "warning: 30 of 30 answers of 8+ words (100%) came back with no claims" in run.stderr  # ...said so
        loose = _run(_cli(quiet, src, tmp_path / "loose.parquet", "--max-zero-claim-share", "1"))
        assert loose.returncode == 0 and "no claims, more than" not in loose.stderr
    with FakeLLMServer(ScriptedJudge(), api_key=CANARY) as normal:
        run = _run(_cli(normal, src, tmp_path / "normal.parquet"))
    assert run.returncode == 0 and "no claims, more than" not in run.stderr


def test_a_lone_surrogate_from_the_model_is_u_fffd_in_the_written_table(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    frame = _rows(12, seed=3)
    frame.write_parquet(src)
    out = tmp_path / "out.parquet"
    with FakeLLMServer(ScriptedJudge(misbehave={"[C]": "surrogate"}, times=10_000), api_key=CANARY) as srv:
        result = _run(_cli(srv, src, out, "--store", str(tmp_path / "store.sqlite")))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "not valid Unicode" in result.stderr
    scored = pl.read_parquet(out)
    assert scored.height == frame.height and (scored["status"] == "ok").all()
    hit = scored.filter(pl.col("output").str.contains("[C]", literal=True))
    assert hit.height > 0
    assert all(c.endswith(" \ufffd") for cs in hit["claims"].to_list() for c in cs)


def test_a_self_hosted_server_refusing_the_schema_is_judged_in_json_mode_packed_to_its_slots(tmp_path: Path) -> None:
    """llama.cpp-like: no JSON-schema grammar in this build, 4096 tokens a slot. No schema or window flag."""
    src = tmp_path / "in.parquet"
    frame = _rows(30, seed=4)
    frame.write_parquet(src)
    limits = ServedLimits("llama.cpp", 4096, slots=2)
    with FakeLLMServer(ScriptedJudge(), api_key=CANARY, refuse_formats=["json_schema"], limits=limits) as srv:
        dry = _run(_cli(srv, src, tmp_path / "dry.parquet", "--dry-run"))
        assert dry.returncode == 0, dry.stderr
        assert srv.stats().requests == 0 and srv.probes_log == ["GET /props"]  # the dry run packs as the run will
        result = _run(_cli(srv, src, tmp_path / "out.parquet"))
        stats = srv.stats()
    assert result.returncode == 0, result.stderr
    assert stats.by_outcome["format_refused"] == 1 and "context_exceeded" not in stats.by_outcome
    assert "note: the endpoint refused response_format json_schema" in result.stderr
    assert "JSON mode (json_object) for the rest of the run" in result.stderr
    assert "4096 tokens a request, as the server says (llama.cpp /props" in result.stderr
    scored = pl.read_parquet(tmp_path / "out.parquet")
    assert scored.height == frame.height and (scored["status"] == "ok").all()
    assert CANARY not in result.stderr + result.stdout

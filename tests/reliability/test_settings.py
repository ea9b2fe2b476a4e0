"""The back-off settings the soaks rely on: CLI flags, else the environment (read by the CLI's judge factory;
the Dagster resource reads the same variables), refused with a clear error when they are not seconds."""

from __future__ import annotations

from pathlib import Path

import pytest

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.reliability.support import cli_command, run_cli, short_rows


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_back_off_that_is_not_seconds_fails_before_any_row(value: str, tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(5).write_parquet(src)
    with FakeLLMServer(ScriptedJudge()) as server:
        done = run_cli(cli_command(server, src, tmp_path / "out.parquet"), "sk-settings", FP_JUDGE_BACKOFF_BASE_S=value)
        assert server.stats().requests == 0
    assert done.returncode == 2, done.stderr
    assert "FP_JUDGE_BACKOFF_BASE_S" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_the_back_off_flags_beat_the_environment_and_refuse_negative_seconds(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    short_rows(5).write_parquet(src)
    out = tmp_path / "out.parquet"
    with FakeLLMServer(ScriptedJudge()) as server:
        base = cli_command(server, src, out)
        # The variables hold nonsense: reading them would fail the run, so the flags must have reached the judge.
        flagged = run_cli([*base, "--backoff-base", "0.01", "--backoff-max", "0.05"], "sk-settings",
                          FP_JUDGE_BACKOFF_BASE_S="soon", FP_JUDGE_BACKOFF_MAX_S="later")  # fmt: skip
        assert flagged.returncode == 0, flagged.stderr
        assert out.exists()
        out.unlink()
        sent = server.stats().requests
        negative = run_cli([*base, "--backoff-base", "-1"], "sk-settings")
        assert server.stats().requests == sent
    assert negative.returncode == 2
    assert "--backoff-base" in negative.stderr and "Traceback" not in negative.stderr
    assert not out.exists()

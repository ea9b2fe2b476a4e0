"""Judge settings out of range are one line and exit 2 wherever they are set (a CLI flag, its FP_JUDGE_
variable, a Dagster resource field or the launchpad's run config), never a pydantic report; a tpm below one
pack's size warns how long a request will wait; the store applies to every judge and an empty model name
is refused."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pydantic
import pytest
from click.testing import CliRunner

from faithfulness_pipeline.cli import main
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs.resources import JudgeResource
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.settings.derive import settings
from faithfulness_pipeline.settings.judge import JudgeSettings
from tests.reliability.support import child_env, short_rows

RANGED = {s.name: s for s in settings(JudgeSettings)
          if s.name in ("max_concurrency", "rpm", "tpm", "pack_tokens", "timeout_s")}  # fmt: skip
BAD = ("0", "-1", "nan")
CASES = [(name, raw) for name in RANGED for raw in BAD]


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("ranges") / "in.parquet"
    short_rows(8).write_parquet(path)
    return path


def _one_line(result_output: str, *words: str) -> None:
    lines = result_output.strip().splitlines()
    assert len(lines) == 1, result_output
    assert lines[0].startswith("error: invalid setting") and all(w in lines[0] for w in words), lines[0]


@pytest.mark.parametrize(("name", "raw"), CASES)
def test_a_bad_flag_or_variable_is_one_line_and_exit_2(name: str, raw: str, src: Path, tmp_path: Path) -> None:
    setting = RANGED[name]
    runner = CliRunner()
    out = str(tmp_path / "out.parquet")
    for args, env in (([setting.flag, raw], {}), ([], {setting.env: raw})):
        result = runner.invoke(main, ["score", str(src), "-o", out, "--quiet", *args], env=env)
        assert result.exit_code == 2, (args, env, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit)
        _one_line(result.output, setting.flag, setting.env, f"judge.{name}")
    assert not Path(out).exists()


@pytest.mark.parametrize(("name", "raw"), CASES)
def test_a_bad_resource_field_is_the_same_one_line_error(name: str, raw: str) -> None:
    value: float = float(raw) if RANGED[name].kind is float or raw == "nan" else int(raw)
    with pytest.raises(ConfigError) as info:
        JudgeResource(**{name: value})
    message = str(info.value)
    assert "\n" not in message and f"judge.{name}" in message and RANGED[name].env in message


@pytest.mark.parametrize("name", list(RANGED))
def test_a_bad_field_in_the_launchpad_fails_the_run_naming_the_setting(name: str) -> None:
    @dg.asset
    def uses_the_judge(judge: JudgeResource) -> int:
        return judge.max_concurrency

    result = dg.materialize([uses_the_judge], resources={"judge": JudgeResource()},
                            run_config={"resources": {"judge": {"config": {name: 0}}}}, raise_on_error=False)  # fmt: skip
    assert not result.success
    failure = next(e for e in result.all_events if e.is_failure)
    error = failure.event_specific_data.error  # type: ignore[union-attr]
    causes = [error.message] + ([error.cause.message] if error.cause is not None else [])
    assert any(f"invalid setting {RANGED[name].flag} / {RANGED[name].env} / judge.{name}" in c for c in causes), causes


def test_infinite_seconds_are_refused_too() -> None:
    with pytest.raises(ConfigError, match="finite"):
        JudgeResource(timeout_s=math.inf)


def test_a_tpm_below_one_pack_warns_how_long_a_request_waits(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FP_RANGES_KEY", "sk-ranges-1234567890")
    base = {"model": "openai/fake-judge", "api_base": "http://127.0.0.1:9/v1", "api_key_env": "FP_RANGES_KEY",
            "context_window": 32768, "pack_tokens": 6000}  # fmt: skip
    caplog.set_level(logging.WARNING)
    slow = LiteLLMJudge(JudgeSettings(**base, tpm=1000))
    notes = [n for n in slow.stats().notes if "tpm 1000" in n]
    assert len(notes) == 1 and "360 s" in notes[0] and "--pack-tokens" in notes[0], slow.stats().notes
    assert any("tpm 1000" in r.getMessage() for r in caplog.records)
    for fine in (6000, None):
        assert not [n for n in LiteLLMJudge(JudgeSettings(**base, tpm=fine)).stats().notes if "tpm" in n]


def test_the_cli_prints_the_tpm_warning_before_anything_is_sent(src: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(tmp_path / "o.parquet"),
         "--model", "openai/fake-judge", "--api-base", "http://127.0.0.1:9/v1", "--api-key-env", "FP_RANGES_KEY",
         "--tpm", "500", "--dry-run"],
        capture_output=True, text=True, env=child_env(FP_RANGES_KEY="sk-ranges-1234567890"), timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tpm 500 is below one full request" in done.stderr and "min" in done.stderr


def test_the_store_works_with_the_offline_judge_and_garbage_is_one_line(src: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    store = tmp_path / "store.sqlite"
    first = runner.invoke(main, ["score", str(src), "-o", str(tmp_path / "a.parquet"), "--store", str(store)])
    assert first.exit_code == 0, first.output
    assert store.stat().st_size > 0
    again = runner.invoke(main, ["score", str(src), "-o", str(tmp_path / "b.parquet"), "--store", str(store)])
    assert again.exit_code == 0 and f"{8} served from the store" in again.output, again.output
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_text("this is not a database, 这不是数据库, 데이터베이스가 아닙니다")
    bad = runner.invoke(main, ["score", str(src), "-o", str(tmp_path / "c.parquet"), "--store", str(garbage)])
    assert bad.exit_code == 2
    lines = bad.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "garbage.sqlite" in lines[0], bad.output
    assert not (tmp_path / "c.parquet").exists()


@pytest.mark.parametrize("model", ["", " "])
def test_an_empty_model_name_is_refused(model: str, src: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["score", str(src), "-o", str(tmp_path / "o.parquet"), "--model", model])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "model" in lines[0], result.output
    assert not (tmp_path / "o.parquet").exists()


@pytest.mark.parametrize("key_flags", [[], ["--api-key-env", "FP_RANGES_KEY"]], ids=["default key", "api-key-env"])
@pytest.mark.parametrize("model", ["no-such-model-xyz", "nosuchprovider/some-model"])
def test_an_unknown_model_is_refused_the_same_way_with_or_without_api_key_env(
    model: str, key_flags: list[str], src: Path, tmp_path: Path
) -> None:
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(
        main, ["score", str(src), "-o", str(out), "--model", model, "--api-base", "http://127.0.0.1:9/v1", *key_flags],
        env={"FP_RANGES_KEY": "sk-ranges-1234567890"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "does not know which provider" in lines[0] and model in lines[0], result.output
    assert not out.exists()


def test_an_unknown_model_is_refused_when_dagster_passes_the_key_itself() -> None:
    resource = JudgeResource(model="no-such-model-xyz", api_key="sk-ranges-1234567890")
    with pytest.raises(ConfigError, match="does not know which provider"):
        resource.make()


FLOATS = [s for s in settings() if s.kind is float]


@pytest.mark.parametrize("setting", FLOATS, ids=[f"{s.model.__name__}.{s.name}" for s in FLOATS])
@pytest.mark.parametrize("raw", [math.inf, -math.inf, math.nan])
def test_no_setting_takes_an_infinite_or_not_a_number_value(setting: Any, raw: float) -> None:
    """One rule for every float setting (issue 40: --batch-poll inf and --store-lease inf were accepted where
    --timeout inf was refused, and the first then stopped after about 10 s)."""
    with pytest.raises(pydantic.ValidationError, match="finite"):
        setting.model.model_validate({setting.name: raw})


def test_a_window_too_small_for_the_instructions_is_refused_before_any_row(src: Path) -> None:
    """issue 40: --context-window 512 (the setting's own floor) failed every row as "the answer (49 tokens) is
    too long", naming no flag, and the summary said rows were asked of the LLM while no request went out."""
    with pytest.raises(ConfigError, match=r"cannot hold the judge's instructions .* --context-window"):
        LiteLLMJudge(JudgeSettings(model="openai/fake-judge", api_base="http://127.0.0.1:9/v1", context_window=512),
                     api_key="sk-window")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(src.parent / "o.parquet"),
         "--model", "openai/fake-judge", "--api-base", "http://127.0.0.1:9/v1", "--api-key-env", "FP_RANGES_KEY",
         "--context-window", "512"],
        capture_output=True, text=True, env=child_env(FP_RANGES_KEY="sk-window"), timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--context-window" in done.stderr and "Traceback" not in done.stderr
    assert not (src.parent / "o.parquet").exists()

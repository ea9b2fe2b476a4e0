"""Every setting is reachable from all three places users set things: a CLI flag, its FP_ variable and a
Dagster resource field; bad values are one clear error wherever they come from; the README's table is the
one derived from the settings models. A field added to JudgeSettings, ScoringSettings or CalibrationSettings is
checked here without touching this file (the calibration settings are flags of ``calibrate`` only)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from faithfulness_pipeline.api.calibration import calibration_settings
from faithfulness_pipeline.cli.calibrate import calibrate
from faithfulness_pipeline.cli.options import resolve_settings
from faithfulness_pipeline.cli.score import score
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs import DefsSettings
from faithfulness_pipeline.defs.resources import CalibrationResource, JudgeResource, ScoringResource
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.derive import Setting, markdown_table, settings
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings

README = Path(__file__).resolve().parents[1] / "README.md"
SETTINGS = settings()
SCORE_SETTINGS = [s for s in SETTINGS if s.model is not CalibrationSettings]
CALIBRATION_SETTINGS = settings(CalibrationSettings)
RESOURCES: dict[str, type[Any]] = {"judge": JudgeResource, "scoring": ScoringResource,
                                   "calibration": CalibrationResource}


def _other_value(setting: Setting) -> tuple[str, Any]:
    """A value other than the default, as text (flag or variable) and as the field holds it."""
    if setting.kind is bool:
        return "true", not setting.default
    if setting.choices is not None:
        choice = next(c for c in setting.choices if c != setting.default)
        return choice, choice
    if setting.kind is int:
        return "1000", 1000
    if setting.kind is float:
        return "0.75", 0.75
    return f"x-{setting.name}", f"x-{setting.name}"


def _field(models: tuple[JudgeSettings, ScoringSettings], setting: Setting) -> Any:
    judge, scoring = models
    return getattr(judge if setting.model is JudgeSettings else scoring, setting.name)


def test_the_models_declare_every_setting_the_issue_asks_for() -> None:
    names = {s.name for s in SETTINGS}
    wanted = {
        "model", "api_base", "api_key_env", "max_concurrency", "rpm", "tpm", "timeout_s", "backoff_base_s",
        "backoff_max_s", "pack_tokens", "context_window", "input_cost_per_token", "output_cost_per_token",
        "max_output_tokens", "temperature", "seed", "store", "output_column", "input_column", "context_column",
        "messages_column", "id_column", "turn_column", "key_column", "scale", "zero_claims",
        "hallucination_threshold", "max_error_rate", "labelled", "group_columns", "bootstrap", "bootstrap_seed",
        "agreement_floor", "below_floor",
    }
    assert wanted <= names, wanted - names
    assert len({s.flag for s in SETTINGS}) == len(SETTINGS) and len({s.env for s in SETTINGS}) == len(SETTINGS)
    assert all(s.description for s in SETTINGS)


@pytest.mark.parametrize("setting", SCORE_SETTINGS, ids=lambda s: s.name)
def test_a_cli_flag_sets_it(setting: Setting) -> None:
    raw, value = _other_value(setting)
    args = ["in.parquet", "-o", "out.parquet", setting.flag] + ([] if setting.kind is bool else [raw])
    params = score.make_context("score", args).params
    assert _field(resolve_settings(params, {}), setting) == value
    # calibrate scores labelled rows with the same judge and scoring settings
    params = calibrate.make_context("calibrate", [setting.flag] + ([] if setting.kind is bool else [raw])).params
    assert _field(resolve_settings(params, {}), setting) == value


def _calibration(options: dict[str, Any], env: dict[str, str]) -> CalibrationSettings:
    env = {"FP_CALIBRATION_LABELLED": "labels.parquet", **env}  # calibrate refuses to run without labels
    return calibration_settings(options, env)


@pytest.mark.parametrize("setting", CALIBRATION_SETTINGS, ids=lambda s: s.name)
def test_a_calibrate_flag_sets_a_calibration_setting_and_score_has_none(setting: Setting) -> None:
    raw, value = _other_value(setting)
    params = calibrate.make_context("calibrate", [setting.flag] + ([] if setting.kind is bool else [raw])).params
    assert getattr(_calibration(params, {}), setting.name) == value
    assert setting.flag not in {o for p in score.params for o in p.opts}


def test_calibrate_without_labelled_rows_names_the_flag_and_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"--labelled.*FP_CALIBRATION_LABELLED"):
        calibration_settings({}, {})


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_its_variable_sets_it_for_the_cli_and_for_dagster(setting: Setting) -> None:
    raw, value = _other_value(setting)
    env = {setting.env: raw}
    if setting.model is CalibrationSettings:
        assert getattr(_calibration({}, env) if setting.name != "labelled" else calibration_settings({}, env),
                       setting.name) == value
    else:
        assert _field(resolve_settings({}, env), setting) == value
    defs = DefsSettings.from_env(env)
    assert getattr(getattr(defs, setting.resource), setting.name) == value


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_the_dagster_resource_has_it_with_the_same_default(setting: Setting) -> None:
    resource = RESOURCES[setting.resource]
    assert setting.name in resource.model_fields
    assert resource.model_fields[setting.name].default == setting.default
    _, value = _other_value(setting)
    assert getattr(resource(**{setting.name: value}), setting.name) == value


def test_a_flag_beats_the_variable() -> None:
    params = score.make_context("score", ["in.parquet", "-o", "o.parquet", "--rpm", "7", "--scale", "10"]).params
    judge, scoring = resolve_settings(params, {"FP_JUDGE_RPM": "999", "FP_SCALE": "nonsense"})
    assert judge.rpm == 7 and scoring.scale == 10


def _resolve_all(given: dict[str, Any], variables: dict[str, str]) -> None:
    resolve_settings(given, variables)
    _calibration(given, variables)


@pytest.mark.parametrize(
    ("flag", "raw", "env"),
    [("--max-concurrency", "0", "FP_JUDGE_MAX_CONCURRENCY"), ("--timeout", "nan", "FP_JUDGE_TIMEOUT_S"),
     ("--tpm", "-1", "FP_JUDGE_TPM"), ("--scale", "0", "FP_SCALE"), ("--max-error-rate", "1.5", "FP_MAX_ERROR_RATE"),
     ("--pack-tokens", "0", "FP_JUDGE_PACK_TOKENS"), ("--agreement-floor", "1.5", "FP_CALIBRATION_AGREEMENT_FLOOR"),
     ("--bootstrap", "-1", "FP_CALIBRATION_BOOTSTRAP")],
)
def test_a_bad_value_is_one_error_naming_the_flag_and_the_variable(flag: str, raw: str, env: str) -> None:
    params = calibrate.make_context("calibrate", [flag, raw]).params
    for given, variables in ((params, {}), ({}, {env: raw})):
        with pytest.raises(ConfigError) as info:
            _resolve_all(given, variables)
        message = str(info.value)
        assert flag in message and env in message and "\n" not in message
    with pytest.raises(ConfigError, match=env):
        DefsSettings.from_env({env: raw})


def test_a_variable_that_is_not_a_number_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="FP_JUDGE_RPM"):
        DefsSettings.from_env({"FP_JUDGE_RPM": "many"})
    assert math.isclose(DefsSettings.from_env({"FP_JUDGE_TIMEOUT_S": " 2.5 "}).judge.timeout_s, 2.5)


def test_the_readme_holds_the_derived_table() -> None:
    text = README.read_text(encoding="utf-8")
    assert markdown_table() in text, (
        "README's settings table is not the one derived from the settings models: replace it with the output of "
        "`python -m faithfulness_pipeline.settings`"
    )

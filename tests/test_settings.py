"""Every setting is reachable from all three places users set things: a CLI flag, its FP_ variable and a
Dagster resource field; bad values are one clear error wherever they come from; the docs' settings table is the
one derived from the settings models. A field added to any registered settings model is checked here without
touching this file (the calibration settings are flags of ``calibrate`` only; the Dagster layer's landing,
warehouse and partition settings are no flags, but for the report's time zone and the warehouse's table format
and place, which the commands that read a warehouse take; the first partition is no resource field)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from faithfulness_pipeline.api.calibration import calibration_settings
from faithfulness_pipeline.cli.calibrate import calibrate
from faithfulness_pipeline.cli.options import resolve_settings
from faithfulness_pipeline.cli.report import report as report_command
from faithfulness_pipeline.cli.score import score
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs import DefsSettings
from faithfulness_pipeline.defs.partitions import DEFAULT_START
from faithfulness_pipeline.defs.resources import (
    CalibrationResource,
    JudgeResource,
    LabelsResource,
    LandingResource,
    ReviewResource,
    ScoringResource,
    TracesResource,
    WarehouseResource,
)
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.celery import CelerySettings
from faithfulness_pipeline.settings.derive import Setting, markdown_table, settings
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.labels import LabelSettings
from faithfulness_pipeline.settings.landing import WarehouseSettings
from faithfulness_pipeline.settings.review import ReviewSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.settings.traces import TraceExportSettings
from faithfulness_pipeline.tables.formats import TABLE_FORMATS

SETTINGS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
SETTINGS = settings()
SCORE_SETTINGS = [s for s in SETTINGS if s.model in (JudgeSettings, ScoringSettings) and s.cli_flag is not None]
CALIBRATION_SETTINGS = settings(CalibrationSettings)
RESOURCES: dict[str, type[Any]] = {"judge": JudgeResource, "scoring": ScoringResource,
                                   "calibration": CalibrationResource, "landing": LandingResource,
                                   "warehouse": WarehouseResource, "traces": TracesResource,
                                   "labels": LabelsResource, "review": ReviewResource}  # fmt: skip
#: Settings whose other value must mean something to the code location (it checks the time zone on load).
OTHER_TEXT: dict[str, str] = {"timezone": "Asia/Seoul", "undated_day": "2026-01-02", "partitions_start": "2026-01-01"}


def _other_value(setting: Setting) -> tuple[str, Any]:
    """A value other than the default, as text (flag or variable) and as the field holds it."""
    if setting.name in OTHER_TEXT:
        return OTHER_TEXT[setting.name], OTHER_TEXT[setting.name]
    if setting.name == "table_format":
        others = [name for name in TABLE_FORMATS if name != setting.default]
        if not others:
            pytest.skip("one table format only: no other value of table_format to set")
        return others[0], others[0]
    if setting.kind is list:
        return "first, second", ["first", "second"]
    if setting.kind is bool:
        return "true", not setting.default
    if setting.choices is not None:
        choice = next(c for c in setting.choices if c != setting.default)
        return choice, choice
    if setting.kind is int:
        # shards are at most 256, a label window and a version's retention at most a year or ten
        other = {"shards": ("4", 4), "label_window_days": ("40", 40), "version_retention_days": ("7", 7)}
        return other.get(setting.name, ("1000", 1000))
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
        "agreement_floor", "below_floor", "path", "timestamp_column", "required_columns", "undated_day", "timezone",
        "root", "duckdb_path", "report_path", "partitions_start",
    }
    assert wanted <= names, wanted - names
    flags = [s.cli_flag for s in SETTINGS if s.cli_flag is not None]
    assert len(set(flags)) == len(flags) and len({s.env for s in SETTINGS}) == len(SETTINGS)
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
    elif setting.model in (JudgeSettings, ScoringSettings):
        assert _field(resolve_settings({}, env), setting) == value
    defs = DefsSettings.from_env(env)
    # the Celery executor's settings are fixed when the code location loads, and kept together
    holder = defs.celery if setting.model is CelerySettings else defs
    assert getattr(getattr(defs, setting.resource) if setting.resource else holder, setting.name) == value


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.resource], ids=lambda s: s.name)
def test_the_dagster_resource_has_it_with_the_same_default(setting: Setting) -> None:
    assert setting.resource is not None
    resource = RESOURCES[setting.resource]
    assert setting.name in resource.model_fields
    assert resource.model_fields[setting.name].get_default(call_default_factory=True) == setting.default
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


DAGSTER_LAYER = [s for s in SETTINGS if s.model not in (JudgeSettings, ScoringSettings, CalibrationSettings,
                                                         TraceExportSettings, ReviewSettings, CelerySettings,
                                                         LabelSettings)]


def test_shards_shape_the_dagster_day_only() -> None:
    """A day's shard steps are Dagster's business: a variable and a resource field, no flag of the CLI."""
    (shards,) = [s for s in SETTINGS if s.name == "shards"]
    assert shards.cli_flag is None and shards.env == "FP_JUDGE_SHARDS" and shards.resource == "judge"
    assert not [o for p in score.params for o in p.opts if "shard" in o]
    assert DefsSettings.from_env({"FP_JUDGE_SHARDS": "3"}).judge.shards == 3
    with pytest.raises(ConfigError, match="FP_JUDGE_SHARDS"):
        DefsSettings.from_env({"FP_JUDGE_SHARDS": "0"})


def test_the_dagster_layer_keeps_its_variables_and_defaults() -> None:
    """The variables users set before these settings joined the registry keep their names."""
    got = {f"{s.resource}.{s.name}" if s.resource else s.name: (s.env, s.default) for s in DAGSTER_LAYER}
    assert got == {
        "landing.path": ("FP_LANDING", "sample_data"),
        "landing.query": ("FP_LANDING_QUERY", None),
        "landing.iceberg_catalog": ("FP_LANDING_ICEBERG_CATALOG", None),
        "landing.timestamp_column": ("FP_TIMESTAMP_COLUMN", "created_at"),
        "landing.required_columns": ("FP_REQUIRED_COLUMNS", []),
        "landing.undated_day": ("FP_UNDATED_DAY", None),
        "landing.timezone": ("FP_TIMEZONE", "UTC"),
        "warehouse.root": ("FP_WAREHOUSE", "warehouse"),
        "warehouse.duckdb_path": ("FP_DUCKDB", None),
        "warehouse.report_path": ("FP_REPORT", None),
        "warehouse.segment_columns": ("FP_SEGMENT_COLUMNS", ["app_version"]),
        "warehouse.table_format": ("FP_TABLE_FORMAT", "parquet"),
        "warehouse.version_retention_days": ("FP_VERSION_RETENTION_DAYS", 30),
        "warehouse.iceberg_catalog": ("FP_ICEBERG_CATALOG", None),
        "warehouse.iceberg_namespace": ("FP_ICEBERG_NAMESPACE", "faithfulness"),
        "warehouse.postgres_url": ("FP_POSTGRES_URL", None),
        "warehouse.postgres_schema": ("FP_POSTGRES_SCHEMA", "faithfulness"),
        # defs.partitions keeps its own copy of the first day (its daily_partitions default): they must agree
        "partitions_start": ("FP_PARTITIONS_START", DEFAULT_START),
    }
    defaults = DefsSettings.from_env({})
    assert defaults.landing == LandingResource() and defaults.warehouse == WarehouseResource()
    assert defaults.partitions_start == DefsSettings().partitions_start == DEFAULT_START


class _Recording(dict[str, str]):
    """An environment that remembers which variables were looked up."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return super().__contains__(key)


def test_the_code_location_reads_every_registered_variable_and_no_other() -> None:
    env = _Recording()
    DefsSettings.from_env(env)
    assert env.read == {s.env for s in SETTINGS}


@pytest.mark.parametrize("setting", DAGSTER_LAYER, ids=lambda s: s.name)
def test_the_table_shows_no_flag_of_the_dagster_layer_that_no_command_has(setting: Setting) -> None:
    options = {o for command in (score, calibrate, report_command) for p in command.params for o in p.opts}
    assert not {o for p in score.params for o in p.opts} & {s.cli_flag for s in DAGSTER_LAYER}
    row = next(line for line in markdown_table().splitlines() if f"`{setting.env}`" in line)
    if setting.cli_flag is None:
        with pytest.raises(LookupError, match=setting.env):
            _ = setting.flag
        derived = "--" + setting.name.replace("_", "-")
        # unless that option is another setting's flag (landing.iceberg_catalog has none; warehouse's is the flag)
        assert derived not in options or any(s.cli_flag == derived for s in SETTINGS)
        assert row.startswith(f"| {setting.name} | none | ")
    else:  # a flag of the report command (its own --timezone; the warehouse's, derived: cli/warehouse.py)
        assert setting.cli_flag in {o for p in report_command.params for o in p.opts}
        assert row.startswith(f"| {setting.name} | `{setting.cli_flag}` | ")


#: The warehouse settings that are flags of the commands that read a warehouse (report, compare, estimate).
WAREHOUSE_FLAGS = {"table_format": "--table-format", "postgres_url": "--postgres-url",
                   "postgres_schema": "--postgres-schema", "iceberg_catalog": "--iceberg-catalog",
                   "iceberg_namespace": "--iceberg-namespace"}


def test_only_the_report_s_time_zone_and_the_warehouse_s_format_are_flags_of_the_dagster_layer() -> None:
    assert {s.name: s.cli_flag for s in DAGSTER_LAYER if s.cli_flag} == {"timezone": "--timezone", **WAREHOUSE_FLAGS}


@pytest.mark.parametrize("setting", [s for s in DAGSTER_LAYER if s.model is WarehouseSettings and s.name in WAREHOUSE_FLAGS],
                         ids=lambda s: s.name)
def test_the_warehouse_s_format_is_a_flag_of_every_command_that_reads_a_warehouse(setting: Setting) -> None:
    """One declaration (settings.landing.WarehouseSettings): the flag of report, compare and estimate, the variable
    and the resource field; the flag beats the variable."""
    from faithfulness_pipeline.cli.compare import compare_command
    from faithfulness_pipeline.cli.estimate import estimate
    from faithfulness_pipeline.cli.options import resolved

    raw, value = _other_value(setting)
    if setting.name == "iceberg_catalog":
        raw = value = "sqlite:////tmp/catalog.sqlite"
    for command, args in ((report_command, ["wh", "-o", "r.html"]), (compare_command, ["wh", "--by", "model"]),
                          (estimate, ["wh"])):
        params = command.make_context(command.name, [*args, setting.flag, raw]).params
        built = resolved(WarehouseSettings, params, {setting.env: "ignored"})
        assert getattr(built, setting.name) == value, command.name
    assert not {o for c in (score, calibrate) for p in c.params for o in p.opts} & set(WAREHOUSE_FLAGS.values())


def test_the_first_partition_is_no_resource_field() -> None:
    (start,) = [s for s in SETTINGS if s.name == "partitions_start"]
    assert start.resource is None
    assert not any(start.name in resource.model_fields for resource in RESOURCES.values())
    assert "| none (fixed when the code location loads) |" in markdown_table()


def test_the_code_location_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("FP_LANDING", "/data/landing"), ("FP_WAREHOUSE", "/data/warehouse"),
                        ("FP_PARTITIONS_START", "2026-02-01"), ("FP_TIMEZONE", "Europe/Berlin")):  # fmt: skip
        monkeypatch.setenv(name, value)
    defs = DefsSettings.from_env()
    assert (defs.landing.path, defs.warehouse.root) == ("/data/landing", "/data/warehouse")
    assert (defs.partitions_start, defs.landing.zone()) == ("2026-02-01", "Europe/Berlin")


def test_required_columns_are_comma_separated_in_their_variable() -> None:
    landing = DefsSettings.from_env({"FP_REQUIRED_COLUMNS": " conversation_id, tenant,, "}).landing
    assert landing.required_columns == ["conversation_id", "tenant"]
    assert DefsSettings.from_env({"FP_REQUIRED_COLUMNS": " , "}).landing.required_columns == []


def test_a_bad_time_zone_stops_the_code_location_with_one_line() -> None:
    with pytest.raises(ConfigError, match="FP_TIMEZONE") as info:
        DefsSettings.from_env({"FP_TIMEZONE": "Mars/Olympus"})
    assert "\n" not in str(info.value)


def test_the_settings_page_holds_the_derived_table() -> None:
    text = SETTINGS_PAGE.read_text(encoding="utf-8")
    assert text.rstrip("\n").endswith("## Every setting\n\n" + markdown_table()), (
        "docs/settings.md does not end with the table derived from the settings models: replace the table under "
        "'## Every setting' with the output of `python -m faithfulness_pipeline.settings`"
    )


@pytest.mark.parametrize(
    ("name", "bad"),
    [("scale", 0), ("scale", -1.0), ("scale", math.inf), ("scale", math.nan), ("zero_claims", "none"),
     ("chunk_rows", 0), ("chunk_rows", -5)],
)
def test_the_scoring_config_and_the_scoring_settings_refuse_the_same_values(name: str, bad: Any) -> None:
    """One declaration of each constraint (``core.config``): the Python API's ScoringConfig and the settings
    users set refuse the same values, each with one line naming the setting."""
    with pytest.raises(ConfigError, match=rf"^{name} must be ") as info:
        ScoringConfig(**{name: bad})
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match=f"scoring.{name}"):
        ScoringResource(**{name: bad})


def test_the_scoring_config_takes_what_the_settings_take() -> None:
    config = ScoringSettings(scale=10, zero_claims="null", chunk_rows=1).config()
    assert (config.scale, config.zero_claims, config.chunk_rows) == (10, "null", 1)
    with pytest.raises(ConfigError, match="scale must be a finite number > 0"):
        ScoringConfig(scale="10")  # type: ignore[arg-type]  # text is no number to the Python API


def test_the_label_settings_are_flags_of_estimate() -> None:
    from faithfulness_pipeline.cli.estimate import estimate

    given = {o for p in estimate.params for o in p.opts}
    flagged = [s for s in settings(LabelSettings) if s.cli_flag is not None]
    assert flagged and {s.cli_flag for s in flagged} <= given
    assert not {o for p in score.params for o in p.opts} & {s.cli_flag for s in flagged}


def test_an_unknown_table_format_stops_the_code_location_naming_the_setting_and_the_choices() -> None:
    with pytest.raises(ConfigError, match=r"^FP_TABLE_FORMAT / warehouse.table_format 'orc' is unknown: use one of ") \
            as info:
        DefsSettings.from_env({"FP_TABLE_FORMAT": "orc"})
    assert "parquet" in str(info.value) and "\n" not in str(info.value)

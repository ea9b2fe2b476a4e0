"""The day boundary's time zone is one setting (FP_TIMEZONE / landing.timezone, UTC by default)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs import DefsSettings
from tests.defs.conftest import make_lake

# 23:30 UTC on the 24th is 08:30 on the 25th in Seoul; 01:00 UTC on the 25th is 10:00 there.
STAMPS = [datetime(2026, 11, 24, 23, 30, tzinfo=UTC), datetime(2026, 11, 25, 1, 0, tzinfo=UTC)]


def _landing(tmp_path: Path) -> Path:
    landing = tmp_path / "landing"
    landing.mkdir()
    pl.DataFrame({
        "conversation_id": ["late", "early"], "created_at": STAMPS, "model": ["m", "m"],
        "output": ["배터리 용량은 5000mAh입니다.", "电池容量是4000毫安时。"],
        "context": [["배터리 용량은 5000mAh입니다."], ["电池容量是5000毫安时。"]],
    }).write_parquet(landing / "a.parquet")
    return landing


def test_rows_fall_into_the_day_of_the_configured_zone(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    landing = _landing(tmp_path)
    utc = make_lake(landing, tmp_path / "utc")
    seoul = make_lake(landing, tmp_path / "seoul", timezone="Asia/Seoul")
    selection = dg.AssetSelection.assets("raw_conversations", "extracted_claims", "judged_claims",
                                         "scored_conversations", "daily_answer_quality")
    assert utc.materialize("2026-11-25", instance, selection=selection).success
    assert utc.read("scored_conversations", "2026-11-25").get_column("row_key").to_list() == ["early"]
    assert seoul.materialize("2026-11-25", instance, selection=selection).success
    assert sorted(seoul.read("scored_conversations", "2026-11-25").get_column("row_key").to_list()) == [
        "early", "late"]
    assert seoul.read("daily_answer_quality", "2026-11-25").get_column("answers").to_list() == [2]
    partitions = next(a for a in seoul.defs.assets or [] if isinstance(a, dg.AssetsDefinition)).partitions_def
    assert isinstance(partitions, dg.DailyPartitionsDefinition) and partitions.timezone == "Asia/Seoul"


def test_a_bad_zone_is_one_line_naming_the_variable() -> None:
    with pytest.raises(ConfigError, match="FP_TIMEZONE"):
        DefsSettings.from_env({"FP_TIMEZONE": "Mars/Olympus"})
    assert DefsSettings.from_env({}).landing.timezone == "UTC"

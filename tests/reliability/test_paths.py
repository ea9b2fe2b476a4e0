"""Keys, partition values, column values and file names never become path components outside the
warehouse root: every file a run writes stays under the root (or the Dagster instance's home)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.defs.resources import WarehouseResource
from tests.reliability.support import DAY

EVIL_KEYS = [
    "../../etc/passwd",
    "/tmp/absolute",
    "..\\..\\windows",
    "a/b/../../../c",
    "ds=2026-11-25",
    "%2e%2e%2fencoded",
    "..",
    "\u202e../rtl",
]


def _files(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


def test_evil_keys_values_and_names_stay_inside_the_warehouse(tmp_path: Path, instance: dg.DagsterInstance) -> None:
    noon = datetime(2026, 11, 25, 12, tzinfo=UTC)
    n = len(EVIL_KEYS)
    rows = pl.DataFrame({
        "conversation_id": EVIL_KEYS,
        # a far-future day (no partition exists), an offset that stays on the day, and a plain timestamp
        "created_at": ["9999-12-31T00:00:00Z", "2026-11-25T20:00:00-02:00"] + [noon.isoformat()] * (n - 2),
        "model": ["../../model", "/etc", *["m/../../x"] * (n - 2)],
        "path": EVIL_KEYS[::-1],
        "output": [f"Answer {i} is short." for i in range(n)],
        "context": [[f"Answer {i} is short."] for i in range(n)],
    })
    # odd folder names: "..", spaces, a quote, Korean and Chinese
    landing = tmp_path / "in" / "sub..dir"
    landing.mkdir(parents=True)
    rows.write_parquet(landing / "..evil..parquet")
    warehouse = tmp_path / "out" / "skip" / ".." / "창고 仓库's wh"
    settings = DefsSettings.from_env({
        "FP_LANDING": str(tmp_path / "in" / "sub..dir" / ".." / "sub..dir"),
        "FP_WAREHOUSE": str(warehouse),
    })
    defs = build_defs(settings)
    before = _files(tmp_path)
    result = dg.materialize(
        [*(defs.assets or []), *(defs.asset_checks or [])],  # type: ignore[list-item]
        partition_key=DAY, instance=instance, resources=defs.resources, raise_on_error=False,
        selection=dg.AssetSelection.groups("answer_quality"),  # the unpartitioned calibration has its own job
    )  # fmt: skip
    assert result.success
    root = (tmp_path / "out" / "창고 仓库's wh").resolve()
    home = Path(instance.root_directory).resolve()
    written = _files(tmp_path) - before
    assert written
    outside = [p for p in written if not (p.resolve().is_relative_to(root) or p.resolve().is_relative_to(home))]
    assert outside == []
    # the keys were scored as data (every row of the day, none dropped), not used as paths
    scored = pl.read_parquet(root / "scored_conversations" / f"ds={DAY}" / "data.parquet")
    assert sorted(scored.get_column("row_key").to_list()) == sorted(EVIL_KEYS[1:])
    assert set(scored.get_column("status").to_list()) == {"ok"}
    # the BI views work under the odd root name
    with duckdb.connect(str(root / "answer_quality.duckdb"), read_only=True,
                        config={"file_search_path": str(root)}) as con:
        assert con.execute("SELECT count(*) FROM scored_conversations").fetchone() == (n - 1,)


def test_a_partition_key_that_is_not_a_day_is_refused_before_anything_is_written(
    tmp_path: Path, instance: dg.DagsterInstance
) -> None:
    landing = tmp_path / "landing"
    landing.mkdir()
    pl.DataFrame({"conversation_id": ["a"], "created_at": [datetime(2026, 11, 25, tzinfo=UTC)], "output": ["A."]}) \
        .write_parquet(landing / "a.parquet")
    defs = build_defs(DefsSettings.from_env({"FP_LANDING": str(landing), "FP_WAREHOUSE": str(tmp_path / "wh")}))
    before = _files(tmp_path)
    for key in ("../../escaped", "2026-11-25/../../escaped", "/tmp/escaped"):
        with pytest.raises(dg.DagsterUnknownPartitionError):
            dg.materialize(defs.assets or [], partition_key=key, instance=instance, resources=defs.resources)  # type: ignore[arg-type]
    assert _files(tmp_path) == before


@pytest.mark.parametrize("key", ["../../escaped", "..", "a/b", "/abs", "x\\..\\y", "nul\0byte"])
def test_the_warehouse_refuses_keys_and_names_that_would_leave_its_root(key: str, tmp_path: Path) -> None:
    """Defence in depth below Dagster's own partition validation: the resource checks what it joins."""
    warehouse = WarehouseResource(root=str(tmp_path / "wh"))
    frame = pl.DataFrame({"a": [1]})
    with pytest.raises(ConfigError, match="warehouse"):
        warehouse.write("scored_conversations", key, frame)
    with pytest.raises(ConfigError, match="warehouse"):
        warehouse.write(key if key not in ("a/b",) else "../a", DAY, frame)
    assert _files(tmp_path) == set()
    written = Path(warehouse.write("scored_conversations", DAY, frame))
    assert written.is_relative_to(tmp_path / "wh")

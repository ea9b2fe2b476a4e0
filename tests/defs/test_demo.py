"""The quickstart job runner: every asset, every sample day, offline judge, then a summary."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import duckdb
import pytest

from faithfulness_pipeline.demo import main
from tests.defs.conftest import instance_yaml


def test_demo_scores_every_sample_row_and_says_where_the_tables_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "dagster_home"  # does not exist yet: the demo creates it with the repository's settings
    warehouse = tmp_path / "warehouse"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("FP_WAREHOUSE", str(warehouse))
    monkeypatch.setenv("FP_JUDGE_MODEL", "openai/gpt-4o-mini")  # ignored: the demo always judges offline
    monkeypatch.delenv("FP_LANDING", raising=False)
    monkeypatch.chdir(tmp_path)  # the sample data is found from anywhere

    assert main() == 0
    assert (home / "dagster.yaml").read_text(encoding="utf-8") == instance_yaml()
    out = capsys.readouterr().out
    assert "Scored 26 answers over 3 day(s) (2026-11-24 .. 2026-11-26) with offline-lexical-v1" in out
    assert str(warehouse) in out and str(home) in out
    for line in ("scored_conversations       26 rows", "claim_table", "daily_answer_quality"):
        assert line in out
    assert "By language:" in out and "ko n=" in out and "zh-TW n=" in out
    report = warehouse / "answer_quality_report.html"
    assert f"Report (self-contained HTML, open it in a browser): {report}" in out and report.is_file()
    con = duckdb.connect(str(warehouse / "answer_quality.duckdb"), read_only=True,
                         config={"file_search_path": str(warehouse)})
    try:
        assert con.execute("SELECT count(DISTINCT row_key) FROM scored_conversations").fetchone() == (26,)
    finally:
        con.close()
    # the runs are recorded in the instance, so `dagster dev` shows them afterwards
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs()
    assert sorted(r.tags["dagster/partition"] for r in runs) == ["2026-11-24", "2026-11-25", "2026-11-26"]
    assert {r.job_name for r in runs} == {"score_conversations"}
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)

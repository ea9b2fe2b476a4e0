"""The quickstart job runner: every asset, every sample day, offline judge, then a summary and next steps
whose commands run as printed."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from faithfulness_pipeline.cli.demo import main
from tests.defs.conftest import free_port, instance_yaml
from tests.user_shell import user_env


@dataclass
class Demo:
    home: Path
    warehouse: Path
    out: str
    code: int


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    root = tmp_path_factory.mktemp("demo")
    home = root / "dagster_home"  # does not exist yet: the demo creates it with the repository's settings
    warehouse = root / "warehouse"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DAGSTER_HOME", str(home))
        mp.setenv("FP_WAREHOUSE", str(warehouse))
        mp.setenv("FP_JUDGE_MODEL", "openai/gpt-4o-mini")  # ignored: the demo always judges offline
        mp.delenv("FP_LANDING", raising=False)
        mp.chdir(root)  # the sample data is found from anywhere
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            code = main()
        yield Demo(home, warehouse, printed.getvalue(), code)


def test_demo_scores_every_sample_row_and_says_where_the_tables_are(demo: Demo) -> None:
    assert demo.code == 0
    assert (demo.home / "dagster.yaml").read_text(encoding="utf-8") == instance_yaml()
    out = demo.out
    assert ("Scored 26 rows (23 answers judged, 3 with no answer to judge) over 3 day(s) (2026-11-24 .. 2026-11-26) "
            "with offline-lexical-v1") in out
    assert str(demo.warehouse) in out and str(demo.home) in out
    for line in ("scored_conversations       26 rows", "claim_table", "daily_answer_quality"):
        assert line in out
    assert "By language:" in out and "ko n=" in out and "zh-TW n=" in out
    # the fallback is said, and the demo calibrated the judge on the project's own labelled sample
    assert "Judge: scored by the offline baseline judge" in out
    assert "Calibration (21 labelled rows): offline-lexical-v1 agrees with people at balanced accuracy 0." in out
    assert "scored_conversations.llm_judge_used: 9 of 9 row(s) scored by the offline baseline judge" in out
    assert (demo.warehouse / "judge_calibration" / "data.parquet").exists()
    report = demo.warehouse / "answer_quality_report.html"
    assert f"Report (self-contained HTML, open it in a browser): {report}" in out and report.is_file()
    con = duckdb.connect(str(demo.warehouse / "answer_quality.duckdb"), read_only=True,
                         config={"file_search_path": str(demo.warehouse)})
    try:
        assert con.execute("SELECT count(DISTINCT row_key) FROM scored_conversations").fetchone() == (26,)
    finally:
        con.close()
    # the runs are recorded in the instance, so `dg dev` shows them afterwards
    with dg.DagsterInstance.from_config(str(demo.home)) as instance:
        runs = instance.get_runs()
    scoring_runs = [r for r in runs if r.job_name == "score_conversations"]
    assert sorted(r.tags["dagster/partition"] for r in scoring_runs) == ["2026-11-24", "2026-11-25", "2026-11-26"]
    assert {r.job_name for r in runs} == {"score_conversations", "calibrate_judge"} and len(runs) == 4
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)


def _hint(out: str, label: str) -> str:
    found = re.findall(rf"^  {re.escape(label)}\s+(.+)$", out, flags=re.MULTILINE)
    assert len(found) == 1, out
    return found[0]


def _clean_env() -> dict[str, str]:
    """A user's shell: no test-run variables, no activated virtualenv (the hint must find its own)."""
    return user_env()


def test_the_query_hint_runs_as_printed(demo: Demo, tmp_path: Path) -> None:
    command = _hint(demo.out, "Query:")
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hallucination_mean" in done.stdout and "2026-11-26" in done.stdout


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def test_the_ui_hint_starts_the_dagster_ui_as_printed(demo: Demo, tmp_path: Path) -> None:
    command = _hint(demo.out, "UI:")
    assert command.endswith("-p 3000") and " dagster dev" not in command
    port = free_port()  # the printed port may be taken on a shared machine; everything else runs as printed
    proc = subprocess.Popen(["bash", "-c", command.removesuffix("3000") + str(port)], cwd=tmp_path,
                            env=_clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _answers(f"http://127.0.0.1:{port}/server_info"):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
            assert time.monotonic() < deadline, "the UI did not answer within 120 s"
            time.sleep(0.5)
    finally:
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(grace)
                break


def test_the_readme_query_command_runs_as_printed(demo: Demo) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.DOTALL) if "import duckdb" in b]
    assert len(blocks) == 1
    # "From the repository root", whose warehouse/ is the demo's here: uv is pointed at the repository.
    env = {**_clean_env(), "UV_PROJECT": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(["bash", "-c", blocks[0]], cwd=demo.warehouse.parent, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hallucination_mean" in done.stdout and "2026-11-24" in done.stdout

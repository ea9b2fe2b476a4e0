"""Scores written back to remotes that misbehave (issue 52): each write-back runs on its own and is reported,
the command exits 1 once the table is written when any failed (docs/cli.md), and what the input's columns or
the URL alone rule out is refused before a judge is paid, dry run included."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.traces.fault_server import FaultServer, Reply
from tests.traces.otlp_files import write_export
from tests.traces.otlp_receiver import OtlpReceiver
from tests.traces.test_phoenix_faults import run_cli
from tests.traces.test_spans_in import _export

SAMPLE_FLAT = Path(__file__).resolve().parents[2] / "sample_data" / "flat" / "conversations.parquet"


@pytest.mark.parametrize(("reply", "said"), [
    (Reply(204, content_type=None), "answered POST /v1/span_annotations with HTTP 204 and no body"),
    (Reply(200, b"<html>Welcome</html>", "text/html"), "answered POST /v1/span_annotations with text/html, not JSON"),
    (Reply(500, b"boom: Authorization: Bearer s3cret-key", "text/plain"), "refused POST /v1/span_annotations: "
                                                                          "HTTP 500 boom: Authorization: Bearer ***"),
])
def test_a_phoenix_that_refuses_annotations_leaves_the_table_and_the_events_and_exits_1(
    reply: Reply, said: str, tmp_path: Path,
) -> None:
    src = write_export(tmp_path / "traces.jsonl", _export())
    out = tmp_path / "scored.parquet"
    with FaultServer(lambda asked: reply) as phoenix, OtlpReceiver() as collector:
        result = run_cli("score", str(src), "-o", str(out), "--phoenix-endpoint", phoenix.url,
                         "--otel-endpoint", collector.endpoint, env={"PHOENIX_API_KEY": "s3cret-key"})
    assert result.returncode == 1, result.stderr
    assert out.exists() and "Traceback" not in result.stderr and "s3cret" not in result.stderr
    assert "scored 4 rows" in result.stderr  # the summary is printed
    assert f"phoenix annotations: 0 written to {phoenix.url}, then stopped: Phoenix at {phoenix.url} {said}" \
        in result.stderr
    assert "evaluation events: 8 of 8 sent" in result.stderr and len(collector.records) == 8  # it still ran


@pytest.mark.parametrize(("args", "said"), [
    ([str(SAMPLE_FLAT), "--otel-endpoint", "http://127.0.0.1:9"], "evaluation events need rows made of spans"),
    ([str(SAMPLE_FLAT), "--phoenix-endpoint", "http://127.0.0.1:9"], "Phoenix annotations need rows made of spans"),
    (["TRACES", "--otel-endpoint", "ftp://user:pw@collector:21"], "the OTLP endpoint must be an http(s) URL"),
    (["TRACES", "--phoenix-endpoint", "ftp://user:pw@phoenix:21"], "the Phoenix endpoint must be an http(s) URL"),
])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_write_back_the_input_or_the_url_rules_out_is_refused_before_scoring(
    args: list[str], said: str, dry_run: bool, tmp_path: Path,
) -> None:
    traces = write_export(tmp_path / "traces.jsonl", _export())
    out = tmp_path / "scored.parquet"
    args = [str(traces) if a == "TRACES" else a for a in args]
    result = run_cli("score", *args, "-o", str(out), *(["--dry-run"] if dry_run else []))
    assert result.returncode == 2, result.stderr
    assert said in result.stderr.strip().splitlines()[-1] and "pw@" not in result.stderr
    assert not out.exists()  # refused before a row was scored

"""Damaged span inputs stop the run in one line naming the file, the line (or row) and what is wrong (issue 52):
values of the wrong type, nesting past the bound, times that are none, a truncated gzip, a gzip bomb, a span
table's cells; lines of other OTLP signals are skipped and counted, never silently. Real files, real gzip, real
CLI subprocesses."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.traces.spans import otlp_spans
from tests.cli.test_cli import run_cli
from tests.traces.otlp_files import oi_llm, request, span, write_export

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _good() -> dict[str, Any]:
    return request([span(TRACE, "00f067aa0ba902b7", "llm", oi_llm("首尔有多少人口？", "서울의 인구는 약 940만 명입니다."), 0.0)])


def _with(**fields: Any) -> dict[str, Any]:
    """A request of one LLM span with ``fields`` put over the span's own."""
    line = _good()
    line["resourceSpans"][0]["scopeSpans"][0]["spans"][0].update(fields)
    return line


def _nested_value(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "底"}
    for _ in range(levels):
        value = {"kvlistValue": {"values": [{"key": "k", "value": value}]}}
    return value


def _refusal(tmp_path: Path, second: str) -> str:
    src = tmp_path / "traces.jsonl"
    src.write_text(json.dumps(_good(), ensure_ascii=False) + "\n" + second + "\n", encoding="utf-8")
    with pytest.raises(InputError) as caught:
        [s for piece in otlp_spans(str(src)) for s in piece]
    return str(caught.value)


@pytest.mark.parametrize(("fields", "why"), [
    ({"attributes": [{"key": "llm.model_name", "value": "gpt-4o"}]}, "attribute 'llm.model_name' is not an OTLP AnyValue object"),
    ({"attributes": [{"key": "n", "value": {"intValue": "열둘"}}]}, "attribute 'n' is not an OTLP AnyValue"),
    ({"attributes": [{"key": "b", "value": {"bytesValue": "!!"}}]}, "attribute 'b' is not an OTLP AnyValue"),
    ({"attributes": [{"key": "a", "value": {"arrayValue": {"values": 5}}}]}, "attribute 'a' is not an OTLP AnyValue"),
    ({"attributes": {"llm.model_name": "gpt-4o"}}, "the attributes are not a list"),
    ({"attributes": ["llm.model_name"]}, "is not a {key, value} object"),
    ({"attributes": [{"key": "deep", "value": _nested_value(100)}]}, "nests deeper than 64 levels"),
    ({"attributes": [{"key": "a." * 100 + "b", "value": {"stringValue": "x"}}]}, "nests deeper than 64 levels"),
    ({"startTimeUnixNano": "1e30"}, "startTimeUnixNano '1e30' is not a whole number of nanoseconds"),
    ({"startTimeUnixNano": 1e30}, "is not a whole number of nanoseconds"),
    ({"startTimeUnixNano": "-5"}, "is not a whole number of nanoseconds"),
    ({"startTimeUnixNano": "300000000000000000000"}, "is not a time between 1970 and the year 9999"),
    ({"name": ["chat"]}, "name is not text"),
    ({"spanId": 7}, "spanId is not text"),
    ({"events": {"name": "gen_ai.choice"}}, "events is not a list of objects"),
])
def test_a_span_value_of_the_wrong_shape_is_refused_naming_its_line(tmp_path: Path, fields: dict, why: str) -> None:
    message = _refusal(tmp_path, json.dumps(_with(**fields), ensure_ascii=False))
    assert "traces.jsonl: line 2 is no OTLP trace request" in message and why in message, message


def test_json_nested_50000_levels_deep_stops_the_cli_in_one_line(tmp_path: Path) -> None:
    """Past Python's own JSON recursion: the CLI says which line, with no traceback."""
    src = tmp_path / "deep.jsonl"
    deep = '{"key": "x", "value": {"arrayValue": {"values": [' + "[" * 50_000 + "]" * 50_000 + "]}}}"
    line = json.dumps(_good())[:-1] + ', "other": ' + deep + "}"
    src.write_text(json.dumps(_good()) + "\n" + line + "\n", encoding="utf-8")
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "deep.jsonl: line 2 is no OTLP trace request (it nests deeper than JSON can be read)" in last


def test_lines_of_other_signals_are_skipped_and_counted_and_unknown_ones_refused(tmp_path: Path) -> None:
    """A Collector whose pipelines share one file exporter mixes logs and metrics into the traces' file."""
    logs = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": {"stringValue": "로그"}}]}]}]}
    metrics = {"resourceMetrics": [{"scopeMetrics": []}]}
    src = write_export(tmp_path / "mixed.jsonl", [logs, _good(), metrics, {}, logs])
    out = tmp_path / "scored.parquet"
    result = run_cli("score", str(src), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert pl.read_parquet(out).get_column("output").to_list() == ["서울의 인구는 약 940만 명입니다."]
    assert ("4 line(s) of the export(s) held no trace request and were skipped (1 of empty, 2 of logs, 1 of "
            "metrics)") in result.stderr
    skipped: Counter[str] = Counter()
    assert len([s for piece in otlp_spans(str(src), skipped=skipped) for s in piece]) == 1
    assert skipped == Counter({"logs": 2, "metrics": 1, "empty": 1})
    message = _refusal(tmp_path, '{"data": [1, 2]}')
    assert "line 2 is no OTLP trace request (the line holds none of resourceSpans" in message


@pytest.mark.parametrize("name", ["traces.jsonl.gz", "traces.bin"])
def test_a_truncated_gzip_is_refused_naming_the_file(tmp_path: Path, name: str) -> None:
    """Cut after its first line inflates (the sniff still sees an export): pyarrow inflates a *.gz by its name,
    gzip under another name is ours to inflate; both say the same."""
    lines = [_good()] * 2_000
    packed = gzip.compress("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in lines).encode())
    src = tmp_path / name
    src.write_bytes(packed[: len(packed) // 2])
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"{src}: truncated/corrupt gzip after line" in last and "Traceback" not in result.stderr
    src.write_bytes(packed[:40])  # cut within its first line: still named as a cut gzip, not a compressed table
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2 and f"{src}: truncated/corrupt gzip after line 0" in result.stderr, result.stderr


_MEASURE = """
import resource, sys
from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.traces.spans import otlp_spans
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    for _ in otlp_spans(sys.argv[1]):
        pass
except InputError as why:
    print(why)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_a_gzip_bomb_is_refused_at_the_line_cap_without_holding_the_line(tmp_path: Path) -> None:
    """1 MB of gzip whose second line inflates to 1 GiB of blanks: refused naming line 2, the reader's memory
    growing by about the cap (64 MiB), not by the gibibyte (2.2 GB before)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
    src = tmp_path / "bomb.jsonl.gz"
    with src.open("wb") as out:
        out.write(squeeze.compress((json.dumps(_good()) + "\n").encode()))
        blanks = b" " * (1 << 20)
        for _ in range(1024):
            out.write(squeeze.compress(blanks))
        out.write(squeeze.compress(b"\n") + squeeze.flush())
    assert src.stat().st_size < 2 << 20
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(src)], capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ})
    assert done.returncode == 0, done.stderr
    message, grew_mib = done.stdout.strip().splitlines()
    assert "bomb.jsonl.gz: line 2 is longer than 67108864 bytes (MAX_LINE_BYTES)" in message
    assert int(grew_mib) < 300, grew_mib


def test_a_span_table_cell_that_cannot_be_read_stops_the_run_naming_its_row(tmp_path: Path) -> None:
    base = {"trace_id": [TRACE] * 3, "span_id": ["a" * 16, "b" * 16, "c" * 16], "name": ["llm"] * 3,
            "attributes": [json.dumps({"openinference.span.kind": "LLM", "output.value": "부산"}, ensure_ascii=False)] * 3}
    not_a_time = pl.DataFrame({**base, "start_time": ["2025-12-05T00:00:00Z", "2025-12-05T00:00:01Z", "어제"]})
    with pytest.raises(InputError, match=r"row 3 \(span .*/cccccccccccccccc\) cannot be read: start_time '어제' is not a time"):
        score_frame(not_a_time)
    numbers = pl.DataFrame({**base, "start_time": [1, 2, 3]})
    with pytest.raises(InputError, match=r"row 1 .* start_time '1' is not a time"):
        score_frame(numbers)
    table = tmp_path / "spans.parquet"
    pl.DataFrame({**base, "start_time": ["2025-12-05T00:00:00Z"] * 3}).with_columns(
        pl.when(pl.int_range(3) == 1).then(pl.lit("{not json")).otherwise(pl.col("attributes")).alias("attributes"),
    ).write_parquet(table)
    result = run_cli("score", str(table), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert f"{table}: row 2 (span {TRACE}/bbbbbbbbbbbbbbbb) cannot be read: attributes is not JSON" in last

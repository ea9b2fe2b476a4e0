"""Span exports read as conversations (issue 41, item 1): an OTLP JSON Lines export (plain and gzip) in both
conventions through the CLI, a Phoenix-shaped spans frame through the Python API, one sampling decision per
trace, and bad input refused in one line. Real files, real CLI subprocesses, the offline judge."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.sampling import Sample
from faithfulness_pipeline.traces.conversations import spans_to_conversations
from faithfulness_pipeline.traces.spans import otlp_spans, table_spans
from tests.cli.test_cli import run_cli
from tests.doc_blocks import activated, block, run_shell
from tests.reliability.support import child_env
from tests.traces.otlp_files import genai_chat, genai_tool, oi_llm, oi_retriever, request, span, write_export

TRACE_EN, TRACE_ZH, TRACE_KO, TRACE_BAD = "0af7651916cd43dd8448eb211c80319c", "1" * 32, "2" * 32, "3" * 32


def _export() -> list[dict]:
    """Four traces: OpenInference RAG in English; GenAI chat with a tool in Chinese; an LLM span without an
    answer in Korean; a GenAI span whose output messages are not JSON. Two requests, as a Collector batches."""
    en = [span(TRACE_EN, "b7ad6b7169203331", "retrieve", oi_retriever(
              "The Eiffel Tower is 330 metres tall.", "It opened in 1889."), 0.0),
          span(TRACE_EN, "00f067aa0ba902b7", "ChatOpenAI", oi_llm(
              "How tall is the Eiffel Tower?", "The Eiffel Tower is 330 metres tall. It opened in 1925."), 1.0),
          span(TRACE_EN, "aaaaaaaaaaaaaaaa", "after", oi_retriever("A passage retrieved after the answer."), 5.0)]
    zh = [span(TRACE_ZH, "1111111111111111", "execute_tool weather", genai_tool("weather", {"城市": "台北", "气温": "30度"}), 0.0),
          span(TRACE_ZH, "1111111111111112", "chat", genai_chat("台北今天多热？", "台北今天气温30度。"), 1.0),
          span(TRACE_ZH, "1111111111111113", "http GET", {"http.method": "GET"}, 0.5)]
    ko = [span(TRACE_KO, "2222222222222222", "llm", oi_llm("서울의 인구는?", None), 0.0)]
    bad = [span(TRACE_BAD, "3333333333333333", "chat", {"gen_ai.operation.name": "chat",
                                                         "gen_ai.output.messages": "[{not json"}, 0.0)]
    return [request(en + zh), request(ko + bad)]


@pytest.mark.parametrize("packed", [False, True], ids=["jsonl", "gzip"])
def test_an_otlp_export_scores_one_row_per_llm_span_keyed_by_its_ids(tmp_path: Path, packed: bool) -> None:
    src = write_export(tmp_path / ("traces.jsonl.gz" if packed else "traces.jsonl"), _export(), packed)
    out = tmp_path / "scored.parquet"
    result = run_cli("score", str(src), "-o", str(out))
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(out).sort("created_at", "trace_id")
    assert scored.height == 4  # every LLM span, the one without an answer and the unreadable one included
    rows = {r["span_id"]: r for r in scored.iter_rows(named=True)}
    en = rows["00f067aa0ba902b7"]
    assert en["row_key"] == f"{TRACE_EN}/00f067aa0ba902b7" and en["trace_id"] == TRACE_EN
    # the retriever before the answer is its context, the one after it is not
    assert en["context"] == ["The Eiffel Tower is 330 metres tall.", "It opened in 1889."]
    assert en["model"] == "gpt-4o-mini" and en["status"] == "ok" and en["hallucination_score"] > 0
    zh = rows["1111111111111112"]
    assert zh["context"] == [json.dumps({"tool": "weather", "result": {"城市": "台北", "气温": "30度"}},
                                        ensure_ascii=False, separators=(",", ":"))]
    assert zh["output"] == "台北今天气温30度。" and zh["model"] == "claude-x-001" and zh["status"] == "ok"
    assert [m["content"] for m in zh["messages"]] == ["台北今天多热？"]
    for empty in ("2222222222222222", "3333333333333333"):  # nothing to judge: an error row saying why, never a 0
        assert rows[empty]["output"] is None and rows[empty]["status"] == "error"
        assert rows[empty]["hallucination_score"] is None and rows[empty]["n_claims"] is None
    assert rows["2222222222222222"]["error"] == "the span holds no answer (none in its attributes or its events)"
    assert rows["3333333333333333"]["error"].startswith("gen_ai.output.messages is not JSON")
    assert "4 LLM span(s) became rows" in result.stderr and "1 other span(s)" in result.stderr
    assert "1 LLM span(s) could not be read" in result.stderr and f"{TRACE_BAD}/3333333333333333 'chat'" in result.stderr


def test_a_phoenix_spans_frame_scores_through_the_python_api() -> None:
    """Phoenix's spans dataframe: context.* ids, span_kind, nested attributes in one column."""
    frame = pl.DataFrame({
        "context.trace_id": ["4" * 32, "4" * 32], "context.span_id": ["4" * 16, "5" * 16],
        "parent_id": [None, "4" * 16], "name": ["retriever", "llm"], "span_kind": ["RETRIEVER", "LLM"],
        "start_time": ["2025-12-05T00:00:00+00:00", "2025-12-05T00:00:01+00:00"],
        "attributes": [
            json.dumps({"openinference": {"span": {"kind": "RETRIEVER"}},
                        "retrieval": {"documents": [{"document": {"content": "부산은 한국에서 두 번째로 큰 도시이다."}}]}},
                       ensure_ascii=False),
            json.dumps({"openinference": {"span": {"kind": "LLM"}}, "llm": {
                "model_name": "m1", "input_messages": [{"message": {"role": "user", "content": "부산은 어떤 도시인가요?"}}],
                "output_messages": [{"message": {"role": "assistant", "content": "부산은 한국에서 두 번째로 큰 도시이다."}}]}},
                       ensure_ascii=False)],
    })
    scored = score_frame(frame)
    assert scored.height == 1
    row = scored.row(0, named=True)
    assert row["row_key"] == f"{'4' * 32}/{'5' * 16}" and row["context"] == ["부산은 한국에서 두 번째로 큰 도시이다."]
    assert row["status"] == "ok" and row["hallucination_score"] == 0.0 and row["faithfulness_score"] == 1.0


def test_flattened_and_nested_attributes_read_the_same(tmp_path: Path) -> None:
    flat_src = write_export(tmp_path / "a.jsonl", _export())
    flat_rows, _ = spans_to_conversations(s for piece in otlp_spans(str(flat_src)) for s in piece)
    nested = pl.DataFrame({
        "trace_id": [TRACE_EN, TRACE_EN], "span_id": ["b7ad6b7169203331", "00f067aa0ba902b7"], "name": ["r", "l"],
        "start_time": ["2025-12-05T00:00:00Z", "2025-12-05T00:00:01Z"],
        "attributes": [json.dumps({"openinference.span.kind": "RETRIEVER", "retrieval.documents": [
            {"document.content": "The Eiffel Tower is 330 metres tall."}, {"document.content": "It opened in 1889."}]}),
            json.dumps({"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini", "llm.input_messages": [
                {"message.role": "system", "message.content": "Answer from the documents."},
                {"message.role": "user", "message.content": "How tall is the Eiffel Tower?"}],
                "llm.output_messages": [{"message.role": "assistant", "message.content":
                                         "The Eiffel Tower is 330 metres tall. It opened in 1925."}]})],
    })
    nested_rows, _ = spans_to_conversations(table_spans(nested))
    cols = ["trace_id", "span_id", "model", "messages", "output", "context"]
    assert nested_rows.select(cols).equals(flat_rows.filter(pl.col("trace_id") == TRACE_EN).select(cols))


def test_sampling_over_spans_keeps_or_leaves_whole_traces() -> None:
    traces = [f"{i:032x}" for i in range(400)]
    rows = pl.DataFrame({"trace_id": [t for t in traces for _ in range(3)],
                         "row_key": [f"{t}/{j}" for t in traces for j in range(3)]})
    picked = rows.with_columns(Sample(rate=0.5).selects(rows).alias("in"))
    per_trace = picked.group_by("trace_id").agg(pl.col("in").n_unique().alias("decisions"), pl.col("in").first())
    assert per_trace.get_column("decisions").max() == 1  # one trace, one decision
    assert 150 < per_trace.get_column("in").sum() < 250  # and still about half of the traces


def test_a_file_that_is_neither_a_table_nor_a_span_export_is_refused_in_one_line(tmp_path: Path) -> None:
    odd = tmp_path / "traces.json"
    odd.write_text('{"data": [1, 2, 3]}\n', encoding="utf-8")
    result = run_cli("score", str(odd), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]
    assert "neither a table" in line and "OTLP ExportTraceServiceRequest" in line
    packed = write_export(tmp_path / "rows.jsonl.gz", [{"output": "a table, not spans"}], packed=True)
    result = run_cli("score", str(packed), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2 and "gzip-compressed" in result.stderr


def test_scoring_config_defaults_key_span_rows_by_their_ids() -> None:
    """A table with trace_id and span_id but no conversation_id is keyed by them, whatever made it."""
    frame = pl.DataFrame({"trace_id": ["t1", "t1"], "span_id": ["s1", "s2"], "output": ["A.", "B."]})
    scored = score_frame(frame, config=ScoringConfig())
    assert scored.get_column("row_key").to_list() == ["t1/s1", "t1/s2"]


def test_the_documented_collector_recipe_scores_its_folder(tmp_path: Path) -> None:
    """docs/traces.md's command, on a folder the Collector rotated into (the page's /var/spans/ moved here):
    a gzip of yesterday and today's plain file, both read, every LLM span a row."""
    spans = tmp_path / "spans"
    spans.mkdir()
    first, second = _export()
    write_export(spans / "traces-2025-12-04.jsonl.gz", [first], packed=True)
    write_export(spans / "traces.jsonl", [second])
    code = block("docs/traces.md", "bash", "score /var/spans/").replace("/var/spans/", f"{spans}/")
    done = run_shell(code, tmp_path, activated(child_env()))
    assert done.returncode == 0, done.stderr[-3000:]
    scored = pl.read_parquet(tmp_path / "scored.parquet")
    assert sorted(scored.get_column("trace_id").unique().to_list()) == sorted([TRACE_EN, TRACE_ZH, TRACE_KO, TRACE_BAD])
    assert scored.height == 4


def test_spans_made_by_the_opentelemetry_sdk_read_as_the_collector_writes_them(tmp_path: Path) -> None:
    """Spans recorded by the real SDK (GenAI attributes), encoded as OTLP and written with protobuf's JSON
    mapping, whose ids are base64 where the Collector writes hex: both read the same."""
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import set_span_in_context

    memory = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    root = tracer.start_span("agent")
    inside = set_span_in_context(root)
    tool = tracer.start_span("execute_tool lookup", context=inside, attributes=genai_tool("lookup", {"거리": "5km"}))
    tool.end()
    chat = tracer.start_span("chat", context=inside, attributes=genai_chat("거리가 얼마나 되나요?", "거리는 5km입니다."))
    chat.end()
    root.end()
    provider.shutdown()
    request = json_format.MessageToJson(encode_spans(memory.get_finished_spans()), indent=None)
    src = tmp_path / "sdk.jsonl"
    src.write_text(request + "\n", encoding="utf-8")
    rows, count = spans_to_conversations(s for piece in otlp_spans(str(src)) for s in piece)
    assert (count.spans, count.llm, count.context, count.other) == (3, 1, 1, 1)
    row = rows.row(0, named=True)
    assert row["trace_id"] == format(chat.get_span_context().trace_id, "032x")
    assert row["span_id"] == format(chat.get_span_context().span_id, "016x")
    assert row["output"] == "거리는 5km입니다." and row["model"] == "claude-x-001"
    assert row["context"] == ['{"tool":"lookup","result":{"거리":"5km"}}']


def test_an_export_retried_by_its_collector_gives_each_span_one_row(tmp_path: Path) -> None:
    """The same request twice (a Collector retries an export it thinks failed): one row per LLM span, and the
    summary says how many came twice."""
    first, second = _export()
    src = write_export(tmp_path / "retried.jsonl", [first, second, first])
    out = tmp_path / "scored.parquet"
    result = run_cli("score", str(src), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert pl.read_parquet(out).height == 4
    assert "4 LLM span(s) became rows" in result.stderr and "2 LLM span(s) came more than once" in result.stderr


@pytest.mark.parametrize(("line", "why"), [
    ("[1, 2, 3]", "the line is not a JSON object"),
    ('{"resourceSpans": {"scopeSpans": []}}', "resourceSpans is not a list of objects"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "chat"}]}]}]}', "span 'chat' has no traceId or spanId"),
    ('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "' + "a" * 32 + '", "spanId": "' + "b" * 16
     + '", "startTimeUnixNano": "soon"}]}]}]}', "is not a whole number of nanoseconds"),
    ('{"resourceSpans": [], "cut', "char 26"),
])
def test_a_damaged_export_is_refused_naming_its_line(tmp_path: Path, line: str, why: str) -> None:
    src = tmp_path / "traces.jsonl"
    src.write_text(json.dumps(request([])) + "\n" + line + "\n", encoding="utf-8")
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"), "--quiet")
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "line 2 is no OTLP trace request" in last and why in last

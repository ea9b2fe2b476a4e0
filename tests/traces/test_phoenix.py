"""Phoenix as the source and the place scores go back to (issue 41, items 2b, 3, 4): a real Phoenix server
(its own SQLite) receives spans from the real OpenTelemetry SDK with OpenInference attributes in three
languages; the CLI pulls the project, scores it with the offline judge and writes span annotations back; they
are read back through Phoenix's API, and a re-run updates them instead of adding more."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import polars as pl
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_span_in_context

from faithfulness_pipeline.testing.phoenix_server import Phoenix, PhoenixUnavailable, phoenix
from faithfulness_pipeline.traces.phoenix import PhoenixClient
from tests.cli.test_cli import run_cli
from tests.doc_blocks import activated, block, run_shell
from tests.reliability.support import child_env

PROJECT = "rag-assistant"
#: (question, retrieved passage, answer) per language: the English answer contradicts its passage.
TURNS = {
    "en": ("When did the bridge open?", "The bridge opened in 1932.", "The bridge opened in 1950."),
    "zh": ("这座桥什么时候通车？", "这座桥于1932年通车。", "这座桥于1932年通车。"),
    "ko": ("다리는 언제 개통했나요?", "그 다리는 1932년에 개통했다.", "그 다리는 1932년에 개통했다."),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    try:
        with phoenix(tmp_path_factory.mktemp("phoenix")) as up:
            yield up
    except PhoenixUnavailable as why:
        pytest.fail(f"the Phoenix tests cannot run here: {why}")


def _send_traces(url: str, project: str = PROJECT) -> dict[str, str]:
    """One trace per language (a chain, its retriever, its LLM call) through the SDK; language -> trace id."""
    provider = TracerProvider(resource=Resource.create({"openinference.project.name": project}),
                              shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces")))
    tracer = provider.get_tracer("test")
    traces = {}
    # a day ago: the daily partitions end with yesterday, the last whole day
    at = time.time_ns() - 86_400 * 10**9
    for language, (question, passage, answer) in TURNS.items():
        root = tracer.start_span("rag", attributes={"openinference.span.kind": "CHAIN"}, start_time=at)
        traces[language] = format(root.get_span_context().trace_id, "032x")
        parent = set_span_in_context(root)
        retrieve = tracer.start_span("retrieve", context=parent, start_time=at + 1000, attributes={
            "openinference.span.kind": "RETRIEVER", "retrieval.documents.0.document.content": passage})
        retrieve.end(end_time=at + 2000)
        llm = tracer.start_span("llm", context=parent, start_time=at + 3000, attributes={
            "openinference.span.kind": "LLM", "llm.model_name": f"model-{language}",
            "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": question,
            "llm.output_messages.0.message.role": "assistant", "llm.output_messages.0.message.content": answer})
        llm.end(end_time=at + 4000)
        root.end(end_time=at + 5000)
    provider.shutdown()
    return traces


def _annotations(url: str, span_ids: list[str], project: str = PROJECT) -> list[dict[str, Any]]:
    reply = httpx.get(f"{url}/v1/projects/{project}/span_annotations", params={"span_ids": span_ids, "limit": 1000})
    reply.raise_for_status()
    return list(reply.json()["data"])


def _wait_for_spans(url: str, count: int, project: str = PROJECT) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply = httpx.get(f"{url}/v1/projects/{project}/spans", params={"limit": 100})
        if reply.status_code == 200 and len(reply.json()["data"]) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"Phoenix did not keep the {count} spans sent")


def test_a_project_pulled_from_phoenix_is_scored_and_annotated_once(server: Phoenix, tmp_path: Path) -> None:
    traces = _send_traces(server.url)
    _wait_for_spans(server.url, 3 * len(TURNS))
    source = f"phoenix+{server.url}/projects/{PROJECT}"
    out = tmp_path / "scored.parquet"
    with PhoenixClient(server.url) as client:  # pages of two spans: the cursor is followed to the end
        pages = list(client.spans(PROJECT, None, None, page=2))
    assert [len(p) for p in pages] == [2, 2, 2, 2, 1]
    assert {s.trace_id for p in pages for s in p} == set(traces.values())
    first = run_cli("score", source, "-o", str(out), "--phoenix-endpoint", server.url)
    assert first.returncode == 0, first.stderr
    scored = pl.read_parquet(out)
    assert scored.height == len(TURNS)  # one row per LLM span, chains and retrievers give context
    assert set(scored.get_column("trace_id")) == set(traces.values())
    by_trace = {r["trace_id"]: r for r in scored.iter_rows(named=True)}
    for language, (_, passage, _) in TURNS.items():
        assert by_trace[traces[language]]["context"] == [passage]
    assert by_trace[traces["en"]]["hallucination_score"] > 0.5 >= by_trace[traces["zh"]]["hallucination_score"]
    assert "phoenix annotations: 6 written" in first.stderr

    span_ids = scored.get_column("span_id").to_list()
    kept = _annotations(server.url, span_ids)
    assert len(kept) == 2 * len(span_ids)
    for annotation in kept:
        row = scored.filter(pl.col("span_id") == annotation["span_id"]).row(0, named=True)
        name = annotation["name"]
        assert name in ("hallucination", "faithfulness") and annotation["annotator_kind"] == "CODE"  # offline judge
        assert annotation["result"]["score"] == row[f"{name}_score"]
        assert annotation["result"]["explanation"] == row[f"{name}_reason"]
    labels = {(a["span_id"], a["name"]): a["result"]["label"] for a in kept}
    en_span = by_trace[traces["en"]]["span_id"]
    assert labels[(en_span, "hallucination")] == "hallucinated"

    again = run_cli("score", source, "-o", str(tmp_path / "again.parquet"), "--phoenix-endpoint", server.url)
    assert again.returncode == 0, again.stderr
    after = _annotations(server.url, span_ids)
    assert len(after) == len(kept)  # updated, never duplicated
    assert {a["id"] for a in after} == {a["id"] for a in kept}


def test_an_unknown_project_is_refused_in_one_line(server: Phoenix, tmp_path: Path) -> None:
    result = run_cli("score", f"phoenix+{server.url}/projects/no-such-project", "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 2
    assert "no such project" in result.stderr.strip().splitlines()[-1]


def test_the_dagster_day_writes_its_annotations_from_the_phoenix_annotations_asset(
    server: Phoenix, tmp_path: Path, dagster_home: Path
) -> None:
    """A Phoenix project as the landing: the day's spans pulled by the raw step, through the daily graph; the
    phoenix_annotations asset exists because FP_PHOENIX_ENDPOINT is set, and writes two annotations a span."""
    import dagster as dg

    from faithfulness_pipeline.defs import DefsSettings, build_defs
    from faithfulness_pipeline.defs.resources import LandingResource, TracesResource
    from faithfulness_pipeline.defs.warehouse import WarehouseResource

    traces = _send_traces(server.url, "dagster-day")
    _wait_for_spans(server.url, 3 * len(TURNS), "dagster-day")
    day = [(datetime.now(UTC) - timedelta(days=1)).date()]  # when _send_traces dates its spans
    settings = DefsSettings(partitions_start=str(day[0]),
                            landing=LandingResource(path=f"phoenix+{server.url}/projects/dagster-day"),
                            warehouse=WarehouseResource(root=str(tmp_path / "warehouse")),
                            traces=TracesResource(phoenix_endpoint=server.url))
    defs = build_defs(settings)
    with dg.instance_for_test() as instance:
        result = dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key=str(day[0]),
                                instance=instance, resources=dict(defs.resources or {}),
                                selection=dg.AssetSelection.groups("answer_quality"), raise_on_error=False)
    assert result.success
    done = [e for e in result.get_asset_materialization_events()
            if e.asset_key and e.asset_key.to_user_string() == "phoenix_annotations"]
    assert len(done) == 1 and done[0].materialization.metadata["annotations"].value == 2 * len(TURNS)
    scored = pl.read_parquet(tmp_path / "warehouse" / "scored_conversations" / f"ds={day[0]}" / "data.parquet")
    assert set(scored.get_column("trace_id")) == set(traces.values())
    kept = _annotations(server.url, scored.get_column("span_id").to_list(), "dagster-day")
    assert len(kept) == 2 * len(TURNS) and {a["annotator_kind"] for a in kept} == {"CODE"}


def test_the_documented_phoenix_command_runs_as_printed(server: Phoenix, tmp_path: Path) -> None:
    """docs/traces.md's Phoenix command, its server and day moved to this test's."""
    traces = _send_traces(server.url)
    _wait_for_spans(server.url, 3 * len(TURNS))
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date()
    code = (block("docs/traces.md", "bash", 'score "phoenix+http').replace("http://127.0.0.1:6006", server.url)
            .replace("start=2026-12-04&end=2026-12-05", f"start={yesterday}&end={yesterday + timedelta(days=1)}"))
    done = run_shell(code, tmp_path, activated(child_env()))
    assert done.returncode == 0, done.stderr[-3000:]
    scored = pl.read_parquet(tmp_path / "scored.parquet")
    assert set(traces.values()) <= set(scored.get_column("trace_id"))
    assert f"phoenix annotations: {2 * scored.height} written" in done.stderr

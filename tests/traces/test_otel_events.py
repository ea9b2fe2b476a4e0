"""Scores back to OpenTelemetry (issue 41, item 2a): a span export scored by the CLI with --otel-endpoint
sends one gen_ai.evaluation.result event per scorer per judged row, parented to the evaluated span, through
the real OpenTelemetry SDK to a receiver that decodes the real OTLP protobuf."""

from __future__ import annotations

import socket
from pathlib import Path

import polars as pl

from faithfulness_pipeline.traces.otel_events import logs_url, send_evaluation_events
from tests.cli.test_cli import run_cli
from tests.traces.otlp_files import write_export
from tests.traces.otlp_receiver import OtlpReceiver
from tests.traces.test_spans_in import TRACE_BAD, TRACE_EN, TRACE_KO, TRACE_ZH, _export


def test_the_cli_sends_one_event_per_scorer_per_judged_span(tmp_path: Path) -> None:
    src = write_export(tmp_path / "traces.jsonl", _export())
    out = tmp_path / "scored.parquet"
    with OtlpReceiver() as receiver:
        result = run_cli("score", str(src), "-o", str(out), "--otel-endpoint", receiver.endpoint)
    assert result.returncode == 0, result.stderr
    scored = pl.read_parquet(out)
    # the two spans without an answer (none, unreadable) are error rows saying why (issue 52), sent as errors
    assert scored.height == 4 and scored.get_column("status").value_counts().sort("status").rows() == [
        ("error", 2), ("ok", 2)]
    assert len(receiver.records) == 2 * scored.height
    assert f"evaluation events: 8 of 8 sent to {receiver.endpoint}/v1/logs" in result.stderr
    for row in scored.iter_rows(named=True):
        mine = {r.attributes["gen_ai.evaluation.name"]: r for r in receiver.records
                if (r.trace_id, r.span_id) == (row["trace_id"], row["span_id"])}
        assert set(mine) == {"hallucination", "faithfulness"}
        for name, record in mine.items():
            assert record.event_name == "gen_ai.evaluation.result" and record.service == "faithfulness-pipeline"
            assert record.attributes.get("gen_ai.evaluation.score.value") == row[f"{name}_score"]
            assert record.attributes.get("gen_ai.evaluation.explanation") == (
                row["error"] if row["status"] == "error" else row[f"{name}_reason"])
        if row["status"] == "error":
            # the span held nothing to judge: its fault, not the judge's
            assert row["nothing_to_judge"] is not None
            assert all(r.attributes["error.type"] == "nothing_to_judge" for r in mine.values())
            continue
        hallucinated = row["hallucination_score"] > 0.5  # the default threshold, in score units
        assert mine["hallucination"].attributes["gen_ai.evaluation.score.label"] == (
            "hallucinated" if hallucinated else "not_hallucinated")
        assert mine["faithfulness"].attributes["gen_ai.evaluation.score.label"] == (
            "faithful" if row["faithfulness_score"] >= 0.5 else "unfaithful")
    by_span = {(r.trace_id, r.attributes["gen_ai.evaluation.name"]): r.attributes for r in receiver.records}
    assert by_span[(TRACE_EN, "hallucination")]["gen_ai.evaluation.score.value"] > 0  # 1925, where it says 1889
    assert by_span[(TRACE_ZH, "faithfulness")]["gen_ai.evaluation.score.label"] == "faithful"
    assert {TRACE_KO, TRACE_BAD} <= {t for t, _ in by_span}


def test_error_rows_carry_error_type_and_rows_not_judged_send_nothing() -> None:
    frame = pl.DataFrame({
        "trace_id": ["a" * 32, "b" * 32, "c" * 32, None], "span_id": ["1" * 16, "2" * 16, "3" * 16, None],
        "status": ["error", "not_sampled", "ok", "ok"], "error": ["judge reply was cut: 서울", None, None, None],
        "hallucination_score": [None, None, 0.0, 1.0], "faithfulness_score": [None, None, 1.0, 0.0],
        "hallucination_reason": [None, None, "모든 주장이 근거가 있다", "x"], "faithfulness_reason": [None, None, "ok", "x"],
    })
    with OtlpReceiver() as receiver:
        sent = send_evaluation_events([frame], receiver.endpoint, threshold=0.5, scale=1.0, timeout_s=10)
    assert (sent.rows, sent.events, sent.failed, sent.without_ids) == (4, 4, 0, 1)
    errors = [r for r in receiver.records if r.trace_id == "a" * 32]
    assert len(errors) == 2 and all(r.attributes["error.type"] == "judge_error" for r in errors)
    assert all("gen_ai.evaluation.score.value" not in r.attributes for r in errors)
    assert errors[0].attributes["gen_ai.evaluation.explanation"] == "judge reply was cut: 서울"
    ok = {r.attributes["gen_ai.evaluation.name"]: r.attributes for r in receiver.records if r.trace_id == "c" * 32}
    assert ok["hallucination"]["gen_ai.evaluation.score.label"] == "not_hallucinated"
    assert ok["hallucination"]["gen_ai.evaluation.explanation"] == "모든 주장이 근거가 있다"
    assert not [r for r in receiver.records if r.trace_id == "b" * 32]


def test_an_endpoint_that_does_not_answer_is_counted_and_fails_the_command(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    src = write_export(tmp_path / "traces.jsonl", _export())
    out = tmp_path / "scored.parquet"
    result = run_cli("score", str(src), "-o", str(out), "--otel-endpoint", f"http://127.0.0.1:{port}",
                     "--otel-timeout-s", "1")
    assert result.returncode == 1
    assert out.exists()  # the scores are written all the same
    assert "evaluation events: 0 of 8 sent" in result.stderr and "8 not delivered" in result.stderr
    assert logs_url("http://h:4318/") == "http://h:4318/v1/logs" == logs_url("http://h:4318/v1/logs")


def test_an_endpoint_carrying_a_key_is_refused_before_the_judge_is_paid(tmp_path: Path) -> None:
    """The exporter's own log lines quote the URL's path and query (a refused connection), out of reach of our
    scrubber: a key in the URL is refused up front, pointing at the headers variable, and shown nowhere."""
    src = write_export(tmp_path / "traces.jsonl", _export())
    out = tmp_path / "scored.parquet"
    for endpoint in ("http://127.0.0.1:9/v1/logs?api_key=s3cret-key", "http://admin:s3cret-pw@127.0.0.1:9"):
        result = run_cli("score", str(src), "-o", str(out), "--otel-endpoint", endpoint)
        assert result.returncode == 2, result.stderr
        assert "OTEL_EXPORTER_OTLP_HEADERS" in result.stderr and "s3cret" not in result.stderr + result.stdout
        assert not out.exists()


def test_the_dagster_day_sends_its_events_from_the_evaluation_events_asset(tmp_path: Path, dagster_home: Path) -> None:
    """A Collector's export landed as it is (gzip), through the whole daily graph; the evaluation_events asset
    exists because an endpoint is set."""
    import dagster as dg

    from faithfulness_pipeline.defs import DefsSettings, build_defs
    from faithfulness_pipeline.defs.resources import LandingResource, TracesResource
    from faithfulness_pipeline.defs.warehouse import WarehouseResource

    landing = tmp_path / "landing"
    landing.mkdir()
    write_export(landing / "traces.jsonl.gz", _export(), packed=True)
    without = build_defs(DefsSettings()).resolve_asset_graph().get_all_asset_keys()
    assert dg.AssetKey("evaluation_events") not in without  # no endpoint set: no asset that could only fail
    with OtlpReceiver() as receiver:
        settings = DefsSettings(partitions_start="2025-12-01", landing=LandingResource(path=str(landing)),
                                warehouse=WarehouseResource(root=str(tmp_path / "warehouse")),
                                traces=TracesResource(otel_endpoint=receiver.endpoint))
        defs = build_defs(settings)
        with dg.instance_for_test() as instance:
            result = dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key="2025-12-05",
                                    instance=instance, resources=dict(defs.resources or {}),
                                    selection=dg.AssetSelection.groups("answer_quality"), raise_on_error=False)
    assert result.success
    events = [e for e in result.get_asset_materialization_events()
              if e.asset_key and e.asset_key.to_user_string() == "evaluation_events"]
    assert len(events) == 1 and events[0].materialization.metadata["events"].value == 8
    assert len(receiver.records) == 8 and {r.trace_id for r in receiver.records} == {TRACE_EN, TRACE_ZH, TRACE_KO, TRACE_BAD}
    scored = pl.read_parquet(tmp_path / "warehouse" / "scored_conversations" / "ds=2025-12-05" / "data.parquet")
    assert scored.height == 4 and set(scored.get_column("row_key")) == {f"{r.trace_id}/{r.span_id}" for r in receiver.records}
    claims = pl.read_parquet(tmp_path / "warehouse" / "claim_table" / "ds=2025-12-05" / "data.parquet")
    assert set(claims.get_column("conversation_id")) <= {TRACE_EN, TRACE_ZH}  # the trace is the conversation


def test_credentials_in_an_endpoint_url_reach_no_message() -> None:
    """A user may write a password into the URL: the summaries and errors name host and port only."""
    import pytest

    from faithfulness_pipeline.core.errors import ConfigError, InputError
    from faithfulness_pipeline.traces.phoenix import PhoenixClient

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with PhoenixClient(f"http://admin:s3cret-pw@127.0.0.1:{port}/?token=s3cret-tk") as client, \
            pytest.raises(InputError) as refused:
        list(client.spans("default", None, None))
    assert "s3cret" not in str(refused.value) and f"127.0.0.1:{port}" in str(refused.value)
    frame = pl.DataFrame({"trace_id": ["a" * 32], "span_id": ["b" * 16], "status": ["ok"], "error": [None],
                          "hallucination_score": [0.0], "faithfulness_score": [1.0],
                          "hallucination_reason": ["r"], "faithfulness_reason": ["r"]})
    # an OTLP endpoint with user info is refused whole (the exporter's own log lines would quote it), unshown
    with pytest.raises(ConfigError) as otlp:
        send_evaluation_events([frame], f"http://admin:s3cret-pw@127.0.0.1:{port}", threshold=0.5, scale=1.0,
                               timeout_s=1)
    assert "s3cret" not in str(otlp.value) and "OTEL_EXPORTER_OTLP_HEADERS" in str(otlp.value)


def _rows(n: int, span_ids: list[str] | None = None) -> pl.DataFrame:
    return pl.DataFrame({
        "trace_id": [f"{i + 1:032x}" for i in range(n)], "span_id": span_ids or [f"{i + 1:016x}" for i in range(n)],
        "status": ["ok"] * n, "error": [None] * n, "hallucination_score": [0.0] * n, "faithfulness_score": [1.0] * n,
        "hallucination_reason": ["r"] * n, "faithfulness_reason": ["r"] * n,
    })


def test_a_slow_collector_gets_every_event_and_only_acknowledged_ones_count() -> None:
    """Issue 52: a Collector that takes 0.15 s a request got 3,072 of 6,000 events while the summary said
    6000 of 6000 (the SDK's queue dropped the rest). Batches are sent one after the other and waited for."""
    with OtlpReceiver(delay_s=0.15) as receiver:
        sent = send_evaluation_events([_rows(3000)], receiver.endpoint, threshold=0.5, scale=1.0, timeout_s=10)
    assert (sent.events, sent.delivered, sent.failed) == (6000, 6000, 0)
    assert len(receiver.records) == 6000 and receiver.requests == 12  # batches of 512
    assert "evaluation events: 6000 of 6000 sent" in sent.line()


def test_a_closed_port_counts_nothing_as_sent() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    sent = send_evaluation_events([_rows(3000)], f"http://127.0.0.1:{port}", threshold=0.5, scale=1.0, timeout_s=1)
    assert (sent.events, sent.delivered, sent.failed) == (6000, 0, 6000)
    assert "evaluation events: 0 of 6000 sent" in sent.line() and "6000 not delivered" in sent.line()


def test_span_ids_that_are_not_hex_are_skipped_and_counted() -> None:
    """A span table's own ids (``s1``) cannot name an OpenTelemetry span: counted, never a traceback."""
    frame = _rows(3, ["s1", "0" * 16, "a" * 16])  # all zeros is no valid span id either
    with OtlpReceiver() as receiver:
        sent = send_evaluation_events([frame], receiver.endpoint, threshold=0.5, scale=1.0, timeout_s=10)
    assert (sent.rows, sent.events, sent.delivered, sent.bad_ids) == (3, 2, 2, 2)
    assert "2 row(s) have ids that are not OpenTelemetry hex ids" in sent.line()
    assert {r.span_id for r in receiver.records} == {"a" * 16}

"""Spans that come more than once keep their answer, and answers recorded only in span events are read; an LLM
span with no answer anywhere is an error row saying so, never a perfect score (issue 52). Real export files
through the CLI and the Python reader."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from faithfulness_pipeline import score_frame
from faithfulness_pipeline.traces.conversations import spans_to_conversations
from faithfulness_pipeline.traces.spans import otlp_spans
from tests.cli.test_cli import run_cli
from tests.traces.otlp_files import oi_llm, oi_retriever, request, span, write_export

TRACE = "5" * 32
ANSWER_ZH = "长城全长约两万一千公里。"


def _rows(path: Path) -> pl.DataFrame:
    rows, _ = spans_to_conversations(s for piece in otlp_spans(str(path)) for s in piece)
    return rows


def test_a_span_exported_before_its_answer_and_again_with_it_keeps_the_answer(tmp_path: Path) -> None:
    """Whichever copy comes first, the one with the answer is the row, and it is judged (keeping the first
    copy made it an empty row scored 0.0, a perfect score)."""
    empty = span(TRACE, "5" * 16, "llm", oi_llm("长城有多长？", None), 1.0)
    full = span(TRACE, "5" * 16, "llm", oi_llm("长城有多长？", ANSWER_ZH), 1.0)
    retriever = span(TRACE, "6" * 16, "retrieve", oi_retriever("长城全长约两万一千公里。"), 0.0)
    for order in ([empty, full], [full, empty]):
        src = write_export(tmp_path / "copies.jsonl", [request([retriever, order[0]]), request([order[1]])])
        rows = _rows(src)
        assert rows.height == 1 and rows.row(0, named=True)["output"] == ANSWER_ZH
        assert rows.row(0, named=True)["nothing_to_judge"] is None
    out = tmp_path / "scored.parquet"
    result = run_cli("score", str(src), "-o", str(out))
    assert result.returncode == 0, result.stderr
    row = pl.read_parquet(out).row(0, named=True)
    assert row["status"] == "ok" and row["output"] == ANSWER_ZH and row["n_claims"] >= 1
    assert "1 LLM span(s) came more than once" in result.stderr and "different answers" not in result.stderr


def test_copies_with_different_answers_keep_the_later_and_are_named(tmp_path: Path) -> None:
    first = span(TRACE, "7" * 16, "llm", oi_llm("부산은 어디에 있나요?", "부산은 한국의 남동쪽에 있습니다."), 1.0)
    later = span(TRACE, "7" * 16, "llm", oi_llm("부산은 어디에 있나요?", "부산은 한국 남동쪽 해안의 항구 도시입니다."), 1.0)
    src = write_export(tmp_path / "differ.jsonl", [request([first]), request([later])])
    assert _rows(src).get_column("output").to_list() == ["부산은 한국 남동쪽 해안의 항구 도시입니다."]
    result = run_cli("score", str(src), "-o", str(tmp_path / "o.parquet"))
    assert result.returncode == 0, result.stderr
    assert (f"1 LLM span(s) came in copies with different answers; the later answered copy is kept: "
            f"{TRACE}/{'7' * 16}") in result.stderr


def test_answers_recorded_only_in_span_events_are_read(tmp_path: Path) -> None:
    """OpenLLMetry's gen_ai.content.prompt / completion events, and gen_ai.choice with its body in
    gen_ai.event.content (JSON) or in its own attributes; the attributes say nothing of the messages."""
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    openllmetry = span(TRACE, "a" * 16, "chat", chat, 1.0, events=[
        ("gen_ai.content.prompt", {"gen_ai.prompt": json.dumps([{"role": "user", "content": "长城有多长？"}],
                                                                 ensure_ascii=False)}),
        ("gen_ai.content.completion", {"gen_ai.completion": json.dumps(
            [{"role": "assistant", "content": ANSWER_ZH}], ensure_ascii=False)})])
    choice_json = span(TRACE, "b" * 16, "chat", chat, 2.0, events=[
        ("gen_ai.user.message", {"gen_ai.event.content": json.dumps({"content": "서울의 인구는?"}, ensure_ascii=False)}),
        ("gen_ai.choice", {"gen_ai.event.content": json.dumps(
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "약 940만 명입니다."}},
            ensure_ascii=False)})])
    choice_attributes = span(TRACE, "c" * 16, "chat", chat, 3.0, events=[
        ("gen_ai.choice", {"index": 0, "message": {"role": "assistant", "content": "It is 21,196 km long."}})])
    nothing = span(TRACE, "d" * 16, "chat", chat, 4.0, events=[("gen_ai.choice", {"index": 0})])
    src = write_export(tmp_path / "events.jsonl", [request([openllmetry, choice_json, choice_attributes, nothing])])
    rows = {r["span_id"]: r for r in _rows(src).iter_rows(named=True)}
    assert rows["a" * 16]["output"] == ANSWER_ZH
    assert [m["content"] for m in rows["a" * 16]["messages"]] == ["长城有多长？"]
    assert rows["b" * 16]["output"] == "약 940만 명입니다."
    assert [(m["role"], m["content"]) for m in rows["b" * 16]["messages"]] == [("user", "서울의 인구는?")]
    assert rows["c" * 16]["output"] == "It is 21,196 km long."
    assert rows["d" * 16]["output"] is None and rows["d" * 16]["nothing_to_judge"].startswith("the span holds no answer")
    out = tmp_path / "scored.parquet"
    result = run_cli("score", str(src), "-o", str(out))
    assert result.returncode == 0, result.stderr
    scored = {r["span_id"]: r for r in pl.read_parquet(out).iter_rows(named=True)}
    assert [scored[s * 16]["status"] for s in "abc"] == ["ok", "ok", "ok"]
    unjudged = scored["d" * 16]
    assert unjudged["status"] == "error" and unjudged["hallucination_score"] is None
    assert unjudged["error"] == "the span holds no answer (none in its attributes or its events)"
    assert "1 LLM span row(s) have nothing to judge" in result.stderr


def test_a_phoenix_frame_reads_answers_from_its_events_column() -> None:
    frame = pl.DataFrame({
        "context.trace_id": [TRACE], "context.span_id": ["e" * 16], "name": ["llm"],
        "start_time": ["2025-12-05T00:00:01+00:00"],
        "attributes": [json.dumps({"openinference": {"span": {"kind": "LLM"}}})],
        "events": [json.dumps([{"name": "gen_ai.content.completion", "attributes": {"gen_ai.completion": ANSWER_ZH}}],
                              ensure_ascii=False)],
    })
    row = score_frame(frame).row(0, named=True)
    assert row["output"] == ANSWER_ZH and row["status"] == "ok"

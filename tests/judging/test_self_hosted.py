"""The litellm judge against self-hosted servers (the fake server playing llama.cpp, vLLM, Ollama), over real
HTTP through litellm: structured output by default, stepping down once when the endpoint refuses it."""

from __future__ import annotations

import pytest

from faithfulness_pipeline.core.port import ExtractResult, VerdictResult
from faithfulness_pipeline.judging.llm.card import model_card
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_rows
from tests.judging.test_litellm_judge import KEY_ENV, assert_scripted, make_judge, run


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-fp-self-hosted-test")


def _formats(server: FakeLLMServer) -> list[str | None]:
    return [None if r.response_format is None else r.response_format["type"] for r in server.requests_log]


def _calls(results: tuple[list[ExtractResult], list[VerdictResult]]) -> float:
    return sum(r.usage.llm_calls for r in [*results[0], *results[1]])


# ------------------------------------------------------------------------------------ structured output


def test_auto_sends_the_json_schema_to_a_custom_endpoint() -> None:
    rows = typical_rows(9, seed=2)
    with FakeLLMServer(ScriptedJudge(), capture=True) as srv:
        judge = make_judge(srv)
        assert_scripted(rows, *run(judge, rows))
        assert set(_formats(srv)) == {"json_schema"}
    assert not [n for n in judge.stats().notes if "refused" in n]


def test_a_refused_schema_steps_down_to_json_mode_once_for_all_requests_in_flight() -> None:
    rows = typical_rows(120, seed=4)
    # Slow replies and many slots: without the turn, every pack in flight would be refused on its own.
    with FakeLLMServer(ScriptedJudge(), capture=True, refuse_formats=["json_schema"],
                       latency=Latency(base_s=0.05)) as srv:
        judge = make_judge(srv, max_concurrency=16, max_items_per_pack=4)
        results = run(judge, rows)
        formats, stats = _formats(srv), srv.stats()
    assert_scripted(rows, *results)
    assert stats.by_outcome["format_refused"] == 1 and formats[0] == "json_schema"
    assert set(formats[1:]) == {"json_object"} and len(formats) > 40
    notes = [n for n in judge.stats().notes if "refused" in n]
    assert len(notes) == 1 and "json_schema" in notes[0] and "JSON mode (json_object)" in notes[0]
    assert judge.stats().failed_items == 0 and judge.stats().retries == 0
    assert _calls(results) == pytest.approx(stats.requests)  # the refused request is billed too


def test_an_endpoint_refusing_both_formats_gets_the_json_in_the_prompt() -> None:
    rows = typical_rows(30, seed=5)
    with FakeLLMServer(ScriptedJudge(), capture=True, refuse_formats=["json_schema", "json_object"]) as srv:
        judge = make_judge(srv)
        results = run(judge, rows)
        formats, stats = _formats(srv), srv.stats()
    assert_scripted(rows, *results)
    assert formats[:2] == ["json_schema", "json_object"] and set(formats[2:]) == {None}
    assert stats.by_outcome["format_refused"] == 2
    notes = [n for n in judge.stats().notes if "refused" in n]
    assert len(notes) == 2 and "in the prompt alone" in notes[1]
    # the scope is the one the run started with: a re-run steps down alike and finds these results
    assert "schema" in judge.result_scope().extract


def test_a_schema_asked_for_explicitly_does_not_step_down() -> None:
    rows = typical_rows(6, seed=6)
    with FakeLLMServer(ScriptedJudge(), capture=True, refuse_formats=["json_schema"]) as srv:
        judge = make_judge(srv, use_json_schema="yes")
        extracted, _ = run(judge, rows)
        formats = _formats(srv)
    assert set(formats) == {"json_schema"}
    assert all(e.error is not None and "response_format" in e.error for e in extracted)


def test_litellm_vouches_only_for_a_model_it_knows_at_its_own_endpoint() -> None:
    known = model_card(JudgeSettings(), "gpt-4o-mini")
    assert known.json_schema and not known.schema_fallback
    proxied = model_card(JudgeSettings(api_base="http://127.0.0.1:9/v1"), "gpt-4o-mini")
    assert proxied.json_schema and proxied.schema_fallback
    unknown = model_card(JudgeSettings(), "openai/some-local-model")
    assert unknown.json_schema and unknown.schema_fallback
    chosen = model_card(JudgeSettings(api_base="http://127.0.0.1:9/v1", use_json_schema="no"), "openai/x")
    assert not chosen.json_schema and not chosen.schema_fallback

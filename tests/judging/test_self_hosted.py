"""The litellm judge against self-hosted servers (the fake server playing llama.cpp, vLLM, Ollama), over real
HTTP through litellm: structured output by default, stepping down once when the endpoint refuses it, and
packing to the window the server reports of its own."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from faithfulness_pipeline.core.port import ExtractResult, VerdictResult
from faithfulness_pipeline.judging.llm.card import model_card
from faithfulness_pipeline.judging.llm.part_settings import CardSettings
from faithfulness_pipeline.judging.llm.server_limits import OLLAMA_DEFAULT_NUM_CTX, ask_server
from faithfulness_pipeline.settings.judge import DEFAULT_CONTEXT_WINDOW, DEFAULT_MAX_ITEMS_PER_PACK, JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer, Latency, ServedLimits, count_prompt_tokens
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
        schemas = [r.response_format["json_schema"] for r in srv.requests_log if r.response_format is not None]
    # each verdict request's schema pins every id's number of codes (what the grammar of such a server holds)
    verdicts = [js["schema"]["properties"] for js in schemas if js["name"] == "verdicts"]
    assert verdicts and all(v["minItems"] == v["maxItems"] >= 1 for props in verdicts for v in props.values())
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
    known = model_card(CardSettings.of(JudgeSettings()), "gpt-4o-mini")
    assert known.json_schema and not known.schema_fallback
    proxied = model_card(CardSettings.of(JudgeSettings(api_base="http://127.0.0.1:9/v1")), "gpt-4o-mini")
    assert proxied.json_schema and proxied.schema_fallback
    unknown = model_card(CardSettings.of(JudgeSettings()), "openai/some-local-model")
    assert unknown.json_schema and unknown.schema_fallback
    no_schema = JudgeSettings(api_base="http://127.0.0.1:9/v1", use_json_schema="no")
    chosen = model_card(CardSettings.of(no_schema), "openai/x")
    assert not chosen.json_schema and not chosen.schema_fallback
    # the verdict counts are pinned in the schema only where litellm cannot vouch (grammar-enforcing servers)
    assert not known.exact_schema and proxied.exact_schema and unknown.exact_schema and not chosen.exact_schema


# ----------------------------------------------------------------------------------- the server's window


def _fits(server: FakeLLMServer, window: int) -> bool:
    return all(count_prompt_tokens(r.messages) + (r.max_tokens or 0) <= window for r in server.requests_log)


def test_packs_follow_the_window_llama_cpp_reports_per_slot() -> None:
    rows = typical_rows(24, seed=7)
    limits = ServedLimits("llama.cpp", 4096, slots=2, max_output_tokens=1500)
    with FakeLLMServer(ScriptedJudge(), capture=True, limits=limits) as srv:
        # packed as asked (a server of its own is judged one answer per request by default)
        judge = make_judge(srv, max_items_per_pack=32)
        assert judge.card.context_window == 4096 and judge.card.max_output_tokens == 1500
        results = run(judge, rows)
        assert _fits(srv, 4096) and srv.stats().by_outcome.get("context_exceeded", 0) == 0
        assert srv.probes_log == ["GET /props"]  # asked once, and nothing else once llama.cpp answered
        assert all((r.max_tokens or 0) <= 1500 for r in srv.requests_log)
        assert_scripted(rows, *results)
        note = next(n for n in judge.stats().notes if "as the server says" in n)
        assert "llama.cpp /props" in note and "2 slots" in note
        # the same rows packed to the 8192 tokens assumed before: the server refuses the bigger packs
        srv.reset_stats()
        blind = make_judge(srv, context_window=DEFAULT_CONTEXT_WINDOW, max_items_per_pack=32)
        run(blind, rows)
        assert srv.stats().by_outcome["context_exceeded"] > 0 and srv.probes_log == []


def test_packs_refused_as_too_long_are_halved_however_often_without_using_up_retries() -> None:
    """A window the judge overestimates 16 times (a wrong --context-window, or a model whose tokenizer counts
    more than ours): the 32-item packs are halved four or five times before a slot holds them. Each halving
    is a smaller request, not a failed try: with one retry allowed, every item still gets its result."""
    rows = typical_rows(64, seed=12)
    with FakeLLMServer(ScriptedJudge(), limits=ServedLimits("llama.cpp", 2048)) as srv:
        judge = make_judge(srv, context_window=32_768, pack_tokens=32_000, max_retries=1)
        results = run(judge, rows)
        refused = srv.stats().by_outcome["context_exceeded"]
    assert refused >= 8
    assert_scripted(rows, *results)
    assert judge.stats().failed_items == 0


def test_an_older_llama_cpp_reporting_the_whole_context_is_shared_out_over_its_slots() -> None:
    limits = ServedLimits("llama.cpp", 2048, slots=4, whole_context=True)
    with FakeLLMServer(limits=limits) as srv:
        assert make_judge(srv).card.context_window == 2048


def test_vllm_max_model_len_is_the_window() -> None:
    rows = typical_rows(12, seed=8)
    with FakeLLMServer(ScriptedJudge(), capture=True, limits=ServedLimits("vllm", 4096)) as srv:
        judge = make_judge(srv)
        assert judge.card.context_window == 4096
        results = run(judge, rows)
        assert _fits(srv, 4096) and "context_exceeded" not in srv.stats().by_outcome
        assert srv.probes_log == ["GET /props", "GET /v1/models"]
    assert_scripted(rows, *results)


def test_ollama_num_ctx_is_the_window_and_without_it_its_smallest_default() -> None:
    with FakeLLMServer(limits=ServedLimits("ollama", 3000)) as srv:
        assert make_judge(srv).card.context_window == 3000
        assert srv.probes_log == ["GET /props", "GET /v1/models", "POST /api/show"]
        srv.set_limits(ServedLimits("ollama", 3000, ollama_num_ctx=False))
        judge = make_judge(srv)
    assert judge.card.context_window == OLLAMA_DEFAULT_NUM_CTX
    assert any("no num_ctx set" in n for n in judge.stats().notes)


def test_the_setting_wins_and_a_server_that_tells_nothing_leaves_the_default() -> None:
    with FakeLLMServer(limits=ServedLimits("llama.cpp", 2048)) as srv:
        assert make_judge(srv, context_window=3000, max_items_per_pack=8).card.context_window == 3000
        assert srv.probes_log == []  # nothing to ask
        # unless the packing depends on it: a server of one's own is judged one answer per request
        judge = make_judge(srv, context_window=3000)
        assert judge.card.context_window == 3000 and judge.card.max_items_per_pack == 1
        assert srv.probes_log == ["GET /props"]
    with FakeLLMServer() as srv:
        judge = make_judge(srv)
        assert judge.card.context_window == DEFAULT_CONTEXT_WINDOW
        assert judge.card.max_items_per_pack == DEFAULT_MAX_ITEMS_PER_PACK  # it said nothing of itself: packed
        assert len(srv.probes_log) == 3
    assert any("assuming 8192 tokens" in n for n in judge.stats().notes)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]


def test_probes_that_fail_fall_back_quietly_with_one_log_line(
    silent_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]  # closed again when the block ends: nothing listens there
    caplog.set_level(logging.INFO, logger="faithfulness_pipeline.judging.llm.server_limits")
    for port in (dead, silent_port):
        caplog.clear()
        found = ask_server(f"http://127.0.0.1:{port}/v1", "openai/gemma", api_key="k", timeout_s=0.3)
        assert found is None
        assert len(caplog.records) == 1 and "using the setting" in caplog.records[0].getMessage()
        assert caplog.records[0].levelno == logging.INFO


def test_a_probe_does_not_follow_a_redirect_to_another_host() -> None:
    with FakeLLMServer(limits=ServedLimits("llama.cpp", 2048)) as elsewhere:
        target = f"http://127.0.0.1:{elsewhere.port}"

        class Redirect(http.server.BaseHTTPRequestHandler):
            def _go(self) -> None:
                self.send_response(302)
                self.send_header("Location", target + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _go

            def log_message(self, *args: Any) -> None:
                pass

        redirector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        thread = threading.Thread(target=redirector.serve_forever, daemon=True)
        thread.start()
        try:
            found = ask_server(f"http://127.0.0.1:{redirector.server_address[1]}/v1", "openai/gemma", api_key="k",
                               timeout_s=2)
        finally:
            redirector.shutdown()
            redirector.server_close()
        assert found is None and elsewhere.probes_log == []


def test_replies_cut_by_the_servers_own_limit_are_re_asked_like_any_cut_reply() -> None:
    rows = typical_rows(20, seed=9)
    # vLLM publishes no output cap: the judge asks for more than the server lets a reply have.
    with FakeLLMServer(ScriptedJudge(), limits=ServedLimits("vllm", 16384, max_output_tokens=200)) as srv:
        judge = make_judge(srv, max_retries=8, max_items_per_pack=32)  # packs, whose replies are long
        results = run(judge, rows)
        cut = srv.stats().by_outcome.get("max_tokens", 0)
    assert cut > 0
    assert_scripted(rows, *results)

"""The real self-hosted tier: llama.cpp's server (PyPI's prebuilt ``xllamacpp``) on 127.0.0.1 with Gemma 3 270M,
and with Qwen2.5-Coder-1.5B-Instruct, a model that really extracts and judges
(``faithfulness_pipeline.testing.llama_cpp``). One module, so that its two servers never compete for the
cores on two test workers at once.

The model is tiny and its verdicts are not judged here: these tests prove the plumbing against a real
server, its tokenizer and its grammar. No schema flag and no window flag is given anywhere: the judge must
find both on its own. Every request crosses a recording proxy (``testing.recording_proxy``), so what the product billed
is held to the usage the server reported, request by request.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import date
from pathlib import Path
from typing import Any

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.port import VerdictItem, VerdictResult
from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.llama_cpp import MODEL_ALIAS, LlamaCppUnavailable, Server, serve
from faithfulness_pipeline.testing.recording_proxy import Call, Recorder
from faithfulness_pipeline.testing.scripted import typical_rows
from tests.defs.conftest import free_port
from tests.doc_blocks import block, run_shell, shell_env
from tests.reliability.support import child_env

pytestmark = [pytest.mark.llama_server, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
SAMPLE = REPO / "sample_data"
MODEL = f"openai/{MODEL_ALIAS}"
KEY_ENV = "FP_LLAMA_TEST_KEY"  # llama-server checks no key; litellm's openai provider wants one
SLOTS = 4
CONTEXT = 8192  # 2,048 tokens a slot, as the recipe: -c 8192 -np 4
#: A CPU server answers slowly, and requests wait in its queue for a free slot.
TIMEOUT_S = "300"
#: Gemma rarely writes a valid claims reply (it loops inside a claim until its reply is cut): every retry of an
#: answer is another cut reply. One retry shows the retry path without spending minutes on replies that fail.
MAX_RETRIES = "1"
#: Gemma's rows per language in the CLI runs: each of its answers costs a cut reply of hundreds of tokens on two
#: cores, and the plumbing these tests prove does not grow with the rows (sample_data/flat has 17).
ROWS_PER_LANGUAGE = 1
#: Rows the docs' recipe scores: what it proves (its own server, the window read from /props, the CLI as printed,
#: the server gone with ``kill %1``) does not grow with the rows, and the languages are the CLI test's above.
RECIPE_ROWS = 1


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    try:
        with serve(context_size=CONTEXT, parallel=SLOTS, log_dir=tmp_path_factory.mktemp("llama")) as running:
            yield running
    except LlamaCppUnavailable as why:
        pytest.fail(f"the real llama-server tier cannot run here: {why}")


@pytest.fixture
def recorder(server: Server) -> Iterator[Recorder]:
    with Recorder(server.root) as proxy:
        yield proxy


def _cli(recorder: Recorder, src: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "faithfulness_pipeline.cli", "score", str(src), "-o", str(out), "--model", MODEL,
               "--api-base", recorder.base_url, "--api-key-env", KEY_ENV, "--timeout", TIMEOUT_S,
               "--max-concurrency", str(SLOTS), "--max-retries", MAX_RETRIES, *extra]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, env=child_env(**{KEY_ENV: "none"}), timeout=600,
                          check=False)  # fmt: skip


def _sample(folder: Path, rows: int | None = None) -> Path:
    """The first rows of each language of sample_data/flat (or its first ``rows`` rows), as a folder of Parquet
    the CLI reads like the original."""
    flat = pl.read_parquet(SAMPLE / "flat")
    flat = flat.filter(pl.int_range(pl.len()).over("language") < ROWS_PER_LANGUAGE) if rows is None else flat.head(rows)
    folder.mkdir(parents=True)
    flat.write_parquet(folder / "conversations.parquet")
    return folder


def _day_landing(folder: Path, day: str) -> Path:
    """The first row of each language of ``day`` in each of sample_data's files (flat and chat), as a landing
    folder of the same shape: both landing shapes and every language reach the Dagster day, with a few answers
    of Gemma's cut replies instead of every answer of the day."""
    for part in ("flat", "chat"):
        rows = pl.read_parquet(SAMPLE / part).filter(pl.col("created_at").dt.date() == date.fromisoformat(day))
        rows = rows.filter(pl.int_range(pl.len()).over("language") < ROWS_PER_LANGUAGE)
        (folder / part).mkdir(parents=True)
        rows.write_parquet(folder / part / "conversations.parquet")
    return folder


def _billed(frame: pl.DataFrame) -> tuple[int, int, int]:
    return tuple(int(frame.get_column(f"billed_{c}").sum()) for c in ("prompt_tokens", "completion_tokens",  # type: ignore[return-value]
                                                                       "cached_prompt_tokens"))  # fmt: skip


def _reported(calls: list[Call]) -> tuple[int, int, int]:
    return (sum(c.prompt_tokens for c in calls), sum(c.completion_tokens for c in calls),
            sum(c.cached_tokens for c in calls))  # fmt: skip


def _every_row_ok_or_a_visible_error(frame: pl.DataFrame) -> None:
    assert set(frame.get_column("status").unique().to_list()) <= {"ok", "error"}
    errors = frame.filter(pl.col("status") == "error")
    assert errors.get_column("error").null_count() == 0 and (errors.get_column("error").str.len_chars() > 0).all()
    ok = frame.filter(pl.col("status") == "ok")
    assert ok.get_column("hallucination_score").null_count() == 0


def test_the_cli_scores_the_sample_data_with_no_schema_or_window_flag(recorder: Recorder, tmp_path: Path) -> None:
    out = tmp_path / "scored.parquet"
    flat = _sample(tmp_path / "flat")
    first = _cli(recorder, flat, out)
    assert first.returncode == 0, first.stderr
    scored = pl.read_parquet(out)
    source = pl.read_parquet(flat)
    assert scored.height == source.height and scored.get_column("conversation_id").to_list() == \
        source.get_column("conversation_id").to_list()  # fmt: skip
    _every_row_ok_or_a_visible_error(scored)

    calls = recorder.chat_calls()
    assert calls and {c.response_format for c in calls} == {"json_schema"}  # auto sends the schema to an api_base
    assert all(c.status == 200 for c in calls)
    assert "GET /props" in recorder.other_paths  # the window was asked of the server
    assert "2048 tokens a request, as the server says (llama.cpp /props" in first.stderr
    # what the product billed is what the server reported, token for token
    assert _billed(scored) == _reported(calls)
    assert scored.get_column("billed_llm_calls").sum() == pytest.approx(len(calls))


def test_a_dagster_day_end_to_end(recorder: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "none")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    warehouse = tmp_path / "warehouse"
    day = "2026-11-25"
    landing = _day_landing(tmp_path / "landing", day)
    settings = DefsSettings.from_env({
        "FP_JUDGE_MODEL": MODEL, "FP_JUDGE_API_BASE": recorder.base_url, "FP_JUDGE_API_KEY_ENV": KEY_ENV,
        "FP_JUDGE_TIMEOUT_S": TIMEOUT_S, "FP_JUDGE_MAX_CONCURRENCY": str(SLOTS), "FP_JUDGE_MAX_RETRIES": MAX_RETRIES,
        # Gemma's cut replies make most rows error rows: the error_rate check would fail on the model, not on
        # the plumbing this test is about; every other ERROR check still must pass.
        "FP_MAX_ERROR_RATE": "1",
        "FP_LANDING": str(landing), "FP_WAREHOUSE": str(warehouse),
    })  # fmt: skip
    defs = build_defs(settings)
    everything = [*(defs.assets or []), *(defs.asset_checks or [])]
    with dg.instance_for_test() as instance:
        result = dg.materialize(everything, partition_key=day, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                                selection=dg.AssetSelection.groups("answer_quality"))  # fmt: skip
        assert result.success
        checks = result.get_asset_check_evaluations()
        # errors may be WARNs (a tiny model), never a failed ERROR check: no row lost, schema, keys, ranges
        assert not [c.check_name for c in checks if not c.passed and c.severity == dg.AssetCheckSeverity.ERROR]
        notes = {e.asset_key.to_user_string(): e.materialization.metadata for e in
                 result.get_asset_materialization_events()}  # fmt: skip
    judge_notes = str(notes["judged_claims"].get("judge_notes"))
    assert "as the server says (llama.cpp /props" in judge_notes

    scored = pl.read_parquet(warehouse / "scored_conversations" / f"ds={day}" / "data.parquet")
    raw = pl.read_parquet(warehouse / "raw_conversations" / f"ds={day}" / "data.parquet")
    assert scored.height == raw.height > 0
    _every_row_ok_or_a_visible_error(scored)
    calls = recorder.chat_calls()
    assert calls and {c.response_format for c in calls} == {"json_schema"}
    daily = pl.read_parquet(warehouse / "daily_answer_quality" / f"ds={day}" / "data.parquet")
    assert _billed(daily) == _reported(calls)
    # No price was set: a judged answer's cost is null, not 0, and the day counts the answers of unknown cost.
    judged = scored.filter(pl.col("result_source") == "llm")
    assert judged.height > 0 and judged.get_column("cost_usd").null_count() == judged.height
    assert int(daily.get_column("cost_unknown_answers").sum()) == scored.get_column("cost_usd").null_count()


def test_batch_mode_ends_in_one_clear_line(recorder: Recorder, tmp_path: Path) -> None:
    done = _cli(recorder, SAMPLE / "flat", tmp_path / "batch.parquet", "--store", str(tmp_path / "s.sqlite"),
                "--mode", "batch")  # fmt: skip
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "has no Batch API" in lines[0] and "--mode interactive" in lines[0]
    assert recorder.chat_calls() == [] and not (tmp_path / "batch.parquet").exists()


def _verdicts(recorder: Recorder, items: list[VerdictItem], **settings: Any) -> list[VerdictResult]:
    judge = LiteLLMJudge(JudgeSettings(model=MODEL, api_base=recorder.base_url, api_key_env=KEY_ENV,
                                       timeout_s=float(TIMEOUT_S), max_concurrency=SLOTS, **settings))  # fmt: skip

    async def main() -> list[VerdictResult]:
        try:
            return await judge.judge_claims(items)
        finally:
            await judge.aclose()

    return asyncio.run(main())


def test_verdict_packs_larger_than_a_slots_window_are_split_not_failed(
    recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verdict step at the port, with claims of our own: what the tiny model extracts varies with its
    prompt cache, and is often nothing. The judge is told of a window eight times a slot's, as when
    ``--context-window`` is set wrong or the model's tokenizer counts more than ours: its first packs are
    more than a slot holds, and the server refuses them."""
    monkeypatch.setenv(KEY_ENV, "none")
    rows = typical_rows(6, seed=11)
    items = [VerdictItem(f"r{k}", row.claims, row.context, row.question) for k, row in enumerate(rows)]
    results = _verdicts(recorder, items, context_window=16_000, max_retries=2)
    calls = recorder.chat_calls()
    refused = [c for c in calls if c.status == 400]
    assert refused and all("context" in (c.error or "") for c in refused), refused
    assert [r.id for r in results] == [i.id for i in items]
    for result in results:
        # judged, or failed for what the model said; never for the window, never a code too few or too many:
        # the schema pins each item's count, and the server's grammar holds the model to it
        assert (result.verdicts is None) == (result.error is not None)
        assert result.error is None or "context" not in result.error, result.error
        assert result.error is None or " verdicts for " not in result.error, result.error
    judged = [r for r in results if r.verdicts is not None]
    assert judged, [r.error for r in results]
    # what the run counted as used is what the server reported, request for request
    assert sum(r.usage.prompt_tokens for r in results) == sum(c.prompt_tokens for c in calls)
    assert sum(r.usage.completion_tokens for r in results) == sum(c.completion_tokens for c in calls)


def test_the_documented_llama_cpp_commands_run_as_printed(tmp_path: Path) -> None:
    """docs/self-hosted.md's try: a server of its own in the background, the CLI against it, the server
    stopped by ``kill %1`` (its port is the page's 8080, moved to a free one for the test)."""
    port = free_port()
    code = block("docs/self-hosted.md", "bash", "llama_cpp serve").replace("8080", str(port))
    flat = _sample(tmp_path / "sample_data" / "flat", rows=RECIPE_ROWS)
    done = run_shell(code, tmp_path, shell_env(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2048 tokens a request, as the server says" in done.stderr
    scored = pl.read_parquet(tmp_path / "out" / "llama.parquet")
    assert scored.height == pl.read_parquet(flat).height
    _every_row_ok_or_a_visible_error(scored)
    # the server went with `kill %1` (uv passes the signal on, the command stops the server): nothing answers
    deadline = time.monotonic() + 30
    while _answers(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _answers(port)


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


# ------------------------------------------------------------------ a real model: Qwen2.5-Coder-1.5B-Instruct
# What its verdicts are worth is measured by bench/judge_quality.py, not asserted here: these tests check that a
# model that really extracts and judges goes through the judge in every language, billed as the server
# reports, and that without a grammar a wrong number of verdicts is an error or a retry, never a score.

QWEN = "openai/qwen"
QWEN_SLOTS = 2
#: Two answers of two or three sentences per language (en, zh-TW, zh-CN, ko), each with its context.
ROWS = ["flat-000", "flat-002", "flat-007", "flat-010", "flat-013", "flat-015"]
LANGUAGE = {"flat-000": "en", "flat-002": "en", "flat-007": "zh", "flat-010": "zh", "flat-013": "ko",
            "flat-015": "ko"}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    try:
        with serve(model="qwen", context_size=8192, parallel=QWEN_SLOTS, log_dir=tmp_path_factory.mktemp("qwen")) as up:
            yield up
    except LlamaCppUnavailable as why:
        pytest.fail(f"the real-model tier cannot run here: {why}")


@pytest.fixture
def qwen_recorder(qwen: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorder]:
    monkeypatch.setenv(KEY_ENV, "none")
    with Recorder(qwen.root) as proxy:
        yield proxy


def _qwen_settings(recorder: Recorder, **extra: object) -> JudgeSettings:
    # A CPU server answers slowly, and requests wait for a free slot: the one setting given besides the
    # endpoint is a timeout that fits it.
    return JudgeSettings(model=QWEN, api_base=recorder.base_url, api_key_env=KEY_ENV, timeout_s=600,
                         max_concurrency=QWEN_SLOTS, **extra)  # type: ignore[arg-type]


def test_a_real_model_finds_claims_and_verdicts_in_every_language_billed_as_the_server_reports(
    qwen_recorder: Recorder, tmp_path: Path
) -> None:
    rows = pl.read_parquet(REPO / "sample_data" / "flat").filter(pl.col("conversation_id").is_in(ROWS))
    store = str(tmp_path / "store.sqlite")
    scored = score_frame(rows, make_judge(_qwen_settings(qwen_recorder, store=store)))
    assert scored.get_column("conversation_id").to_list() == rows.get_column("conversation_id").to_list()
    errors = scored.filter(pl.col("status") != "ok")
    assert (errors.get_column("error").str.len_chars() > 0).all()  # never an error without its reason
    ok = scored.filter(pl.col("status") == "ok")
    for row in ok.iter_rows(named=True):
        assert row["n_claims"] == len(row["claims"]) == len(row["verdicts"])  # one verdict per claim, parsed
    found = ok.filter(pl.col("n_claims") > 0).get_column("conversation_id").to_list()
    assert {LANGUAGE[key] for key in found} == {"en", "zh", "ko"}, scored.select("conversation_id", "claims", "error")
    calls = qwen_recorder.chat_calls()
    assert calls and all(c.status == 200 for c in calls)
    billed = (int(scored.get_column("billed_prompt_tokens").sum()), int(scored.get_column(
        "billed_completion_tokens").sum()))  # fmt: skip
    assert billed == (sum(c.prompt_tokens for c in calls), sum(c.completion_tokens for c in calls))

    # A re-run from the store pays only for what the store lacks (the rows that failed, if any): every row that
    # was ok comes back from the store unchanged and unbilled.
    again = score_frame(rows, make_judge(_qwen_settings(qwen_recorder, store=store)))
    if errors.is_empty():
        assert len(qwen_recorder.chat_calls()) == len(calls)
    kept = [c for c in scored.columns if c not in S.RUN_COLUMNS]
    was_ok = pl.col("conversation_id").is_in(ok.get_column("conversation_id").to_list())
    assert again.filter(was_ok).select(kept).equals(ok.select(kept))
    assert _billed(again.filter(was_ok)) == (0, 0, 0)
    assert set(again.filter(was_ok).get_column("result_source")) <= {"store", "none"}


def test_without_a_grammar_a_wrong_number_of_verdicts_is_never_a_score(qwen_recorder: Recorder) -> None:
    """The prompt alone (``use_json_schema no``): nothing holds the model to one code per claim. Every item
    ends with exactly one verdict per claim or an error naming why; none is short of verdicts."""
    context = ("The Eiffel Tower is 330 metres tall.", "It was completed in 1889 for the World's Fair.")
    claims = ("The Eiffel Tower is 330 metres tall.", "The Eiffel Tower was completed in 1889.",
              "The Eiffel Tower is painted every seven years.", "The Eiffel Tower is in Berlin.")
    items = [VerdictItem(f"r{k}", claims[: 1 + k % 4], context) for k in range(8)]
    judge = LiteLLMJudge(_qwen_settings(qwen_recorder, use_json_schema="no", max_retries=1))

    async def main() -> list[VerdictResult]:
        try:
            return await judge.judge_claims(items)
        finally:
            await judge.aclose()

    results = asyncio.run(main())
    assert [r.id for r in results] == [i.id for i in items]
    for item, result in zip(items, results, strict=True):
        assert (result.verdicts is None) != (result.error is None)
        assert result.verdicts is None or len(result.verdicts) == len(item.claims), result
    assert [c.response_format for c in qwen_recorder.chat_calls()] == [None] * len(qwen_recorder.chat_calls())

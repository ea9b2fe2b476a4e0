"""The graph with the litellm judge against the fake OpenAI-compatible server on 127.0.0.1.

Real HTTP through litellm; the key comes from the environment through dg.EnvVar and never shows up in
metadata, logs or tables; the result store under the warehouse makes a re-run free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from faithfulness_pipeline.core.sampling import plan_sample
from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION
from faithfulness_pipeline.testing.fakellm.selfhosted import ServedLimits
from faithfulness_pipeline.testing.fakellm.server import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge as ScriptedResponder
from tests.defs.conftest import SAMPLE

KEY_ENV = "FP_TEST_DAGSTER_JUDGE_KEY"
CANARY = "sk-fp-canary-dagster-4Hq8TzW1"
DAY = "2026-11-25"


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer(ScriptedResponder()) as srv:
        yield srv


def _meta(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, object]:
    for event in result.get_asset_materialization_events():
        if event.asset_key == dg.AssetKey(asset):
            return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}
    raise AssertionError(f"{asset} was not materialised")


def test_litellm_judge_scores_through_dagster_without_leaking_the_key(
    server: FakeLLMServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    monkeypatch.setenv(KEY_ENV, CANARY)
    for name, value in {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}.items():
        monkeypatch.setenv(name, value)
    warehouse = tmp_path / "warehouse"
    settings = DefsSettings.from_env(
        {
            "FP_JUDGE_MODEL": "openai/fake-judge",
            "FP_JUDGE_API_BASE": server.base_url,
            "FP_JUDGE_API_KEY_ENV": KEY_ENV,
            "FP_JUDGE_TIMEOUT_S": "10",
            "FP_JUDGE_INPUT_COST_PER_TOKEN": "1e-6",  # the fake model has no price: give it one
            "FP_JUDGE_OUTPUT_COST_PER_TOKEN": "2e-6",
            "FP_LANDING": str(SAMPLE),
            "FP_WAREHOUSE": str(warehouse),
        }
    )
    defs = build_defs(settings)
    everything = [*(defs.assets or []), *(defs.asset_checks or [])]
    day_graph = dg.AssetSelection.groups("answer_quality")  # the unpartitioned calibration has its own job

    first = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                           selection=day_graph)
    assert first.success
    assert all(e.passed for e in first.get_asset_check_evaluations())
    claims = _meta(first, "extracted_claims")
    assert claims["judge_model"] == "openai/fake-judge" and claims["prompt_version"] == PROMPT_VERSION
    assert isinstance(claims["extraction_prompt_tokens"], int) and claims["extraction_prompt_tokens"] > 0
    scored = _meta(first, "scored_conversations")
    assert scored["judge_model"] == "openai/fake-judge" and scored["prompt_version"] == PROMPT_VERSION

    # claims and verdicts are one step: what it sent is on judged_claims, the extraction's share on claims
    sent = server.stats().requests
    daily = warehouse / "daily_answer_quality" / f"ds={DAY}" / "data.parquet"
    first_day = pl.read_parquet(daily)  # what scoring the day was billed: every token the server billed
    assert int(first_day.get_column("billed_prompt_tokens").sum()) == server.stats().billed_prompt_tokens > 0
    assert math.isclose(first_day.get_column("billed_llm_calls").sum(), sent)
    bill = server.stats().billed_prompt_tokens * 1e-6 + server.stats().billed_completion_tokens * 2e-6
    assert math.isclose(first_day.get_column("billed_cost_usd").sum(), bill, rel_tol=1e-9)
    verdicts = _meta(first, "judged_claims")
    assert verdicts["judge_model"] == "openai/fake-judge"
    assert isinstance(verdicts["llm_requests"], int) and 2 <= verdicts["llm_requests"] < 18  # packed, not per row
    assert sent == verdicts["llm_requests"]
    assert 1 <= claims["extraction_llm_requests"] < sent  # type: ignore[operator]

    # a re-run is served by the result store under the warehouse: no request at all
    second = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                           selection=day_graph)
    assert second.success
    again = _meta(second, "judged_claims")
    assert again["llm_requests"] == 0 and isinstance(again["cached_items"], int) and again["cached_items"] > 0
    assert server.stats().requests == sent
    assert (warehouse / "_judge_store.sqlite").is_file()
    again_day = pl.read_parquet(daily)  # the re-run was free: its day is billed nothing, served from the store
    assert again_day.get_column("billed_llm_calls").sum() == 0 and again_day.get_column("billed_cost_usd").sum() == 0
    assert math.isclose(again_day.get_column("cost_usd").sum(), first_day.get_column("cost_usd").sum())
    assert again_day.get_column("billed_cost_usd").null_count() == 0
    assert (again_day.get_column("store_share") + again_day.get_column("duplicate_share")).min() > 0.5

    # the key is nowhere: metadata, event log, tables, result store
    seen = [
        str(_meta(r, a)) for r in (first, second) for a in ("extracted_claims", "judged_claims", "scored_conversations")
    ]
    seen += [str(e.message) + str(e.dagster_event) for r in (first, second) for e in instance.all_logs(r.run_id)]
    assert not [s for s in seen if CANARY in s]
    for path in warehouse.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


def test_a_day_scored_in_batch_mode_and_its_step_re_executed_pays_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    """The schedule's job in batch mode: the LLM step submits and waits; run again, it finds everything in
    the warehouse's store (batch results are stored like interactive ones) and creates no batch."""
    from faithfulness_pipeline.testing.fakellm.faults import BatchTiming

    monkeypatch.setenv(KEY_ENV, CANARY)
    warehouse = tmp_path / "warehouse"
    with FakeLLMServer(ScriptedResponder(), batch_timing=BatchTiming(0.01, 0.001, 0.01)) as srv:
        settings = DefsSettings.from_env({
            "FP_JUDGE_MODEL": "openai/gpt-4o-mini", "FP_JUDGE_API_BASE": srv.base_url,
            "FP_JUDGE_API_KEY_ENV": KEY_ENV, "FP_JUDGE_MODE": "batch", "FP_JUDGE_BATCH_POLL_S": "0.05",
            "FP_LANDING": str(SAMPLE), "FP_WAREHOUSE": str(warehouse),
        })
        defs = build_defs(settings)
        everything = [*(defs.assets or []), *(defs.asset_checks or [])]
        day_graph = dg.AssetSelection.groups("answer_quality")  # the calibration has its own job
        first = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                               selection=day_graph)
        assert first.success
        st = srv.stats()
        assert st.requests == 0 and st.batches_created == 2
        notes = str(_meta(first, "judged_claims").get("judge_notes", ""))
        assert "batches: batch_" in notes
        day = pl.read_parquet(warehouse / "daily_answer_quality" / f"ds={DAY}" / "data.parquet")
        bill = st.batch_billed_prompt_tokens * 7.5e-8 + st.batch_billed_completion_tokens * 3e-7
        assert math.isclose(day.get_column("billed_cost_usd").sum(), bill, rel_tol=1e-9)
        again = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                               selection=day_graph)
        assert again.success and srv.stats().batches_created == 2 and srv.stats().requests == 0
    again_day = pl.read_parquet(warehouse / "daily_answer_quality" / f"ds={DAY}" / "data.parquet")
    assert again_day.get_column("billed_cost_usd").sum() == 0
    assert CANARY not in notes


def test_a_day_in_four_shards_scores_and_bills_as_one_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    """Shards against the fake server: the same rows and scores as one step, every shard's spend billed to its
    rows (the day's billed columns add up to what the server billed), and a re-run of the sharded day free."""
    monkeypatch.setenv(KEY_ENV, CANARY)
    tables: dict[int, pl.DataFrame] = {}
    for shards in (1, 4):
        warehouse = tmp_path / f"warehouse-{shards}"
        with FakeLLMServer(ScriptedResponder()) as srv:
            settings = DefsSettings.from_env({
                "FP_JUDGE_MODEL": "openai/fake-judge", "FP_JUDGE_API_BASE": srv.base_url, "FP_JUDGE_API_KEY_ENV": KEY_ENV,
                "FP_JUDGE_TIMEOUT_S": "10", "FP_JUDGE_SHARDS": str(shards), "FP_JUDGE_INPUT_COST_PER_TOKEN": "1e-6",
                "FP_JUDGE_OUTPUT_COST_PER_TOKEN": "2e-6", "FP_LANDING": str(SAMPLE), "FP_WAREHOUSE": str(warehouse),
            })
            defs = build_defs(settings)
            everything = [*(defs.assets or []), *(defs.asset_checks or [])]
            run = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                                 selection=dg.AssetSelection.groups("answer_quality"))
            assert run.success
            st = srv.stats()
            day = pl.read_parquet(warehouse / "daily_answer_quality" / f"ds={DAY}" / "data.parquet")
            assert int(day.get_column("billed_prompt_tokens").sum()) == st.billed_prompt_tokens > 0
            assert math.isclose(day.get_column("billed_llm_calls").sum(), st.requests)
            assert _meta(run, "judged_claims")["llm_requests"] == st.requests
            again = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                                   selection=dg.AssetSelection.groups("answer_quality"))
            assert again.success and srv.stats().requests == st.requests  # the store serves the re-run
        scored = pl.read_parquet(warehouse / "scored_conversations" / f"ds={DAY}" / "data.parquet")
        tables[shards] = scored.select("row_key", "claims", "verdicts", "hallucination_score", "faithfulness_score",
                                       "status")
    assert tables[4].equals(tables[1])


def _judge_sample_day(srv: FakeLLMServer, tmp_path: Path, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    """The sample landing's day, every answer_quality asset and check, judged by ``srv``."""
    settings = DefsSettings.from_env({
        "FP_JUDGE_MODEL": "openai/fake-judge", "FP_JUDGE_API_BASE": srv.base_url, "FP_JUDGE_API_KEY_ENV": KEY_ENV,
        "FP_LANDING": str(SAMPLE), "FP_WAREHOUSE": str(tmp_path / "warehouse"),
    })
    defs = build_defs(settings)
    return dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key=DAY,  # type: ignore[arg-type]
                          instance=instance, resources=defs.resources,
                          selection=dg.AssetSelection.groups("answer_quality"))


def test_a_day_whose_judge_extracts_nothing_warns_on_the_scored_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    monkeypatch.setenv(KEY_ENV, CANARY)
    with FakeLLMServer(ScriptedResponder(extracts_nothing=True)) as srv:
        result = _judge_sample_day(srv, tmp_path, instance)
    assert result.success  # a warning, not a failed run: the scores are still written
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    found = evaluations["claims_found"]
    assert not found.passed and found.severity == dg.AssetCheckSeverity.WARN
    meta = {k: getattr(v, "value", v) for k, v in found.metadata.items()}
    long_answers = meta["long_answers"]
    assert isinstance(long_answers, int) and long_answers > 0 and meta["long_answers_without_claims"] == long_answers
    assert found.description is not None and "came back with no claims" in found.description
    assert all(e.passed for name, e in evaluations.items() if name not in ("claims_found",))


def test_a_day_judged_by_a_self_hosted_server_says_what_it_learnt_of_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    """A llama.cpp-like server that refuses JSON schemas and has 4096 tokens a slot, with no schema or window
    setting: the step's metadata notes the step down to JSON mode and the window the server reported."""
    monkeypatch.setenv(KEY_ENV, CANARY)
    limits = ServedLimits("llama.cpp", 4096, slots=4)
    with FakeLLMServer(ScriptedResponder(), refuse_formats=["json_schema"], limits=limits) as srv:
        result = _judge_sample_day(srv, tmp_path, instance)
        st = srv.stats()
    assert result.success
    assert st.by_outcome["format_refused"] == 1 and "context_exceeded" not in st.by_outcome
    notes = str(_meta(result, "judged_claims").get("judge_notes", ""))
    assert "refused response_format json_schema" in notes and "JSON mode (json_object)" in notes
    assert "4096 tokens a request, as the server says" in notes and "4 slots" in notes


def test_a_sampled_day_judges_its_sample_only_keeps_every_row_and_a_higher_rate_pays_only_for_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    """FP_SAMPLE_RATE and FP_SAMPLE_MAX_ROWS through the Dagster resource, in two shards: the day's every row
    is in the scored table, those outside the sample with status not_sampled and null scores, never sent;
    each model gets at most the cap, the same rows whichever shard reads them; the daily table counts both;
    the checks pass; and the same day at rate 1 without a cap asks only for the rows the sample left out
    (the store serves the rest, the samples being nested)."""
    monkeypatch.setenv(KEY_ENV, CANARY)
    warehouse = tmp_path / "warehouse"
    judge = ScriptedResponder()
    with FakeLLMServer(judge) as srv:
        def day_at(rate: str, cap: str = "") -> tuple[dg.ExecuteInProcessResult, pl.DataFrame, pl.DataFrame]:
            settings = DefsSettings.from_env({
                "FP_JUDGE_MODEL": "openai/fake-judge", "FP_JUDGE_API_BASE": srv.base_url, "FP_JUDGE_API_KEY_ENV": KEY_ENV,
                "FP_JUDGE_SHARDS": "2", "FP_SAMPLE_RATE": rate, "FP_SAMPLE_MAX_ROWS": cap, "FP_LANDING": str(SAMPLE),
                "FP_WAREHOUSE": str(warehouse),
            })
            defs = build_defs(settings)
            run = dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key=DAY,  # type: ignore[arg-type]
                                 instance=instance, resources=defs.resources,
                                 selection=dg.AssetSelection.groups("answer_quality"))
            assert run.success
            read = lambda table: pl.read_parquet(warehouse / table / f"ds={DAY}" / "data.parquet")  # noqa: E731
            return run, read("scored_conversations"), read("daily_answer_quality")

        run, scored, daily = day_at("0.8", cap="2")
        raw = pl.read_parquet(warehouse / "raw_conversations" / f"ds={DAY}" / "data.parquet")
        landed = raw.height
        outside = scored.filter(pl.col("status") == "not_sampled")
        inside = scored.filter(pl.col("status") != "not_sampled")
        assert scored.height == landed and 0 < outside.height < landed
        # per model: the cap, or fewer where fewer rows drew below the rate; the rows the whole day's plan picks
        expected = plan_sample([raw], 0.8, 2, "model").selects(raw)
        assert set(inside.get_column("row_key")) == set(raw.filter(expected).get_column("row_key"))
        per_model = inside.group_by("model").len()
        assert per_model.get_column("len").max() == 2, per_model
        assert outside.select("hallucination_score", "faithfulness_score").null_count().row(0) == (outside.height,) * 2
        sent = {text for call in judge.calls if call.step == "extract" for text in call.texts}
        judged = {a for a in inside.get_column("output").to_list() if a and a.strip()}
        assert judged <= sent
        assert not (set(outside.get_column("output").to_list()) - judged) & sent  # the others were never sent
        assert int(daily.get_column("answers").sum()) == landed
        assert int(daily.get_column("sampled_answers").sum()) == inside.height
        checks = {e.check_name: e.passed for e in run.get_asset_check_evaluations()
                  if e.asset_key == dg.AssetKey("scored_conversations")}
        assert checks["error_rate"] and checks["scores_in_range"], checks

        requests = srv.stats().requests
        _, everything, _ = day_at("1")
        assert set(everything.get_column("status")) == {"ok"}
        was_sampled = everything.filter(pl.col("row_key").is_in(inside.get_column("row_key").implode()))
        assert set(was_sampled.get_column("result_source")) <= {"store", "none"}
        assert set(everything.filter(pl.col("result_source") == "llm").get_column("row_key")) <= set(outside.get_column("row_key"))
        assert srv.stats().requests > requests


def test_a_day_the_spend_cap_stops_short_is_written_whole_with_a_warn_check_and_a_rerun_judges_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    """FP_JUDGE_MAX_COST_USD through the resource: the day's rows are all written, those past the cap with status
    skipped and null scores; the within_spend_cap check warns naming how many (the run still succeeds and
    error_rate, which does not count them, passes); the same day with a larger cap judges only the rest."""
    monkeypatch.setenv(KEY_ENV, CANARY)
    warehouse = tmp_path / "warehouse"
    with FakeLLMServer(ScriptedResponder()) as srv:
        def day_with(cap: str) -> tuple[dg.ExecuteInProcessResult, pl.DataFrame]:
            settings = DefsSettings.from_env({
                "FP_JUDGE_MODEL": "openai/fake-judge", "FP_JUDGE_API_BASE": srv.base_url, "FP_JUDGE_API_KEY_ENV": KEY_ENV,
                "FP_JUDGE_INPUT_COST_PER_TOKEN": "1e-6", "FP_JUDGE_OUTPUT_COST_PER_TOKEN": "4e-6",
                "FP_JUDGE_MAX_COST_USD": cap, "FP_JUDGE_MAX_CONCURRENCY": "1", "FP_JUDGE_MAX_ITEMS_PER_PACK": "2",
                "FP_LANDING": str(SAMPLE), "FP_WAREHOUSE": str(warehouse),
            })
            defs = build_defs(settings)
            run = dg.materialize([*(defs.assets or []), *(defs.asset_checks or [])], partition_key=DAY,  # type: ignore[arg-type]
                                 instance=instance, resources=defs.resources,
                                 selection=dg.AssetSelection.groups("answer_quality"))
            assert run.success
            return run, pl.read_parquet(warehouse / "scored_conversations" / f"ds={DAY}" / "data.parquet")

        run, scored = day_with("0.002")
        landed = pl.read_parquet(warehouse / "raw_conversations" / f"ds={DAY}" / "data.parquet").height
        skipped = scored.filter(pl.col("status") == "skipped")
        assert scored.height == landed and 0 < skipped.height < landed
        assert skipped.select("hallucination_score", "faithfulness_score").null_count().row(0) == (skipped.height,) * 2
        assert float(scored.get_column("billed_cost_usd").sum()) <= 0.002
        checks = {e.check_name: e for e in run.get_asset_check_evaluations()
                  if e.asset_key == dg.AssetKey("scored_conversations")}
        cap_check = checks["within_spend_cap"]
        assert not cap_check.passed and cap_check.severity == dg.AssetCheckSeverity.WARN
        assert f"{skipped.height} of {landed} rows were left unjudged" in (cap_check.description or "")
        assert checks["error_rate"].passed and checks["scores_in_range"].passed
        assert _meta(run, "scored_conversations")["skipped_rows"] == skipped.height

        run, rest = day_with("10")
    assert set(rest.get_column("status")) == {"ok"}
    was_judged = rest.filter(~pl.col("row_key").is_in(skipped.get_column("row_key").implode()))
    assert float(was_judged.get_column("billed_cost_usd").sum()) == 0  # from the store
    assert {e.check_name: e.passed for e in run.get_asset_check_evaluations()}["within_spend_cap"]


def test_a_judging_step_logs_the_tokens_of_a_slow_servers_replies_as_they_arrive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, instance: dg.DagsterInstance
) -> None:
    """A step that waits minutes on a self-hosted server's packs says in its log that replies are coming (a line
    a minute; every half second here), where the rows' own lines come only as rows finish."""
    from faithfulness_pipeline.testing.fakellm import Latency

    monkeypatch.setenv(KEY_ENV, CANARY)
    monkeypatch.setattr("faithfulness_pipeline.defs.judged.RECEIVING_LOG_S", 0.5)
    with FakeLLMServer(ScriptedResponder(), latency=Latency(per_output_token_s=0.004)) as slow:
        defs = build_defs(DefsSettings.from_env({
            "FP_JUDGE_MODEL": "openai/fake-judge", "FP_JUDGE_API_BASE": slow.base_url, "FP_JUDGE_API_KEY_ENV": KEY_ENV,
            "FP_JUDGE_TIMEOUT_S": "10", "FP_LANDING": str(SAMPLE), "FP_WAREHOUSE": str(tmp_path / "warehouse"),
        }))
        everything = [*(defs.assets or []), *(defs.asset_checks or [])]
        result = dg.materialize(everything, partition_key=DAY, instance=instance, resources=defs.resources,  # type: ignore[arg-type]
                                selection=dg.AssetSelection.groups("answer_quality"))
        assert result.success
        completion = slow.stats().completion_tokens
    lines = [e.user_message for e in instance.all_logs(result.run_id) if "receiving replies" in e.user_message]
    assert lines, "no line said replies were arriving"
    counts = [int(n.replace(",", "")) for line in lines for n in re.findall(r"([\d,]+) tokens so far", line)]
    assert counts == sorted(counts) and 0 < counts[-1] <= 1.5 * completion

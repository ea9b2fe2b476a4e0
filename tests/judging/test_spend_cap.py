"""The spend cap (``max_cost_usd``) against the fake server, real HTTP through litellm: what a run pays stays
under the cap, the rows it could not afford are skipped (present, null scores, never errors), a re-run on
the same store pays only for the rest and ends with the uncapped table, batch mode caps what it submits,
and a model without a price is refused before any request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.budget import Budget
from faithfulness_pipeline.judging.dryrun import cap_line
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.fakellm.faults import BatchTiming
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame

KEY_ENV = "FP_TEST_CAP_KEY"
PRICES = {"input_cost_per_token": 1e-6, "output_cost_per_token": 4e-6}
#: What a scoring decides (as against what a run paid or when): equal between a capped run resumed and one
#: run without a cap.
DECIDED = ("row_key", "status", "claims", "hallucination_score", "faithfulness_score", "hallucination_reason")
FAST = BatchTiming(validating_s=0.01, per_line_s=0.001, finalizing_s=0.01, cancelling_s=0.01)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-cap")


def _settings(server: FakeLLMServer, store: Path, **extra: Any) -> JudgeSettings:
    values: dict[str, Any] = {
        "model": "openai/fake-judge", "api_base": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 5,
        "backoff_base_s": 0.01, "backoff_max_s": 0.05, "store": str(store), "max_items_per_pack": 4,
        "max_concurrency": 2, **PRICES,
    }
    values.update(extra)
    return JudgeSettings(**values)


def _score(frame: pl.DataFrame, settings: JudgeSettings) -> pl.DataFrame:
    return score_frame(frame, make_judge(settings), ScoringConfig(chunk_rows=20))


def _billed(df: pl.DataFrame) -> float:
    return float(df.get_column("billed_cost_usd").sum())


def test_a_capped_run_pays_at_most_the_cap_skips_the_rest_and_a_rerun_pays_only_for_it(tmp_path: Path) -> None:
    frame = typical_frame(60, seed=11)
    with FakeLLMServer(ScriptedJudge()) as server:
        full = _score(frame, _settings(server, tmp_path / "full.sqlite"))
        whole_bill = _billed(full)
        assert set(full.get_column("status")) == {S.STATUS_OK}
        cap = whole_bill * 0.4
        server.reset_stats()
        capped = _score(frame, _settings(server, tmp_path / "capped.sqlite", max_cost_usd=cap))
        sent = server.stats()

        assert capped.height == frame.height  # no row dropped
        skipped = capped.filter(pl.col("status") == S.STATUS_SKIPPED)
        assert 0 < skipped.height < frame.height
        assert capped.filter(pl.col("status") == S.STATUS_ERROR).is_empty()  # skipped rows are no errors
        assert set(skipped.get_column(S.RESULT_SOURCE)) == {S.SOURCE_SKIPPED}
        assert skipped.get_column("hallucination_score").null_count() == skipped.height
        assert skipped.get_column("faithfulness_score").null_count() == skipped.height
        assert all("max_cost_usd" in e for e in skipped.get_column("error"))
        # The requests sent cost at most the cap: each held its worst case before it left.
        paid = sent.prompt_tokens * PRICES["input_cost_per_token"] + sent.completion_tokens * PRICES["output_cost_per_token"]
        assert paid <= cap
        assert _billed(capped) == pytest.approx(paid, rel=1e-9)
        # The rows it did judge are those of the run without a cap.
        judged = capped.filter(pl.col("status") == S.STATUS_OK).select(DECIDED)
        assert judged.join(full.select(DECIDED), on=DECIDED, how="anti").is_empty()

        server.reset_stats()
        rest = _score(frame, _settings(server, tmp_path / "capped.sqlite"))
    assert set(rest.get_column("status")) == {S.STATUS_OK}
    assert rest.select(DECIDED).sort("row_key").equals(full.select(DECIDED).sort("row_key"))
    # The re-run paid for the skipped rows only: what was judged under the cap came from the store.
    assert rest.filter(pl.col("row_key").is_in(judged.get_column("row_key").implode())).get_column(
        "billed_cost_usd").sum() == 0
    assert 0 < _billed(rest) < whole_bill


def test_a_cap_smaller_than_one_request_sends_nothing_and_skips_every_row(tmp_path: Path) -> None:
    frame = typical_frame(6, seed=12)
    with FakeLLMServer(ScriptedJudge()) as server:
        scored = _score(frame, _settings(server, tmp_path / "s.sqlite", max_cost_usd=1e-9))
        assert server.stats().requests == 0
    assert scored.height == 6 and set(scored.get_column("status")) == {S.STATUS_SKIPPED}


def test_a_cap_for_a_model_without_a_price_is_refused_before_any_request(tmp_path: Path) -> None:
    with FakeLLMServer(ScriptedJudge()) as server:
        unpriced = _settings(server, tmp_path / "s.sqlite", max_cost_usd=1.0, input_cost_per_token=None,
                             output_cost_per_token=None)
        with pytest.raises(ConfigError, match=r"max_cost_usd.*needs the price of openai/fake-judge"):
            make_judge(unpriced)
        assert server.stats().requests == 0


def test_batch_mode_caps_what_it_submits_at_batch_prices(tmp_path: Path) -> None:
    frame = typical_frame(40, seed=13)
    batch = {"mode": "batch", "batch_poll_s": 0.02}
    with FakeLLMServer(ScriptedJudge(), batch_timing=FAST) as server:
        full = _score(frame, _settings(server, tmp_path / "full.sqlite", **batch))
        cap = _billed(full) * 0.5
        server.reset_stats()
        capped = _score(frame, _settings(server, tmp_path / "capped.sqlite", max_cost_usd=cap, **batch))
        st = server.stats()
    assert st.requests == 0  # nothing went interactively
    billed = st.batch_billed_prompt_tokens * PRICES["input_cost_per_token"] + \
        st.batch_billed_completion_tokens * PRICES["output_cost_per_token"]
    assert 0 < billed <= cap
    skipped = capped.filter(pl.col("status") == S.STATUS_SKIPPED)
    assert capped.height == 40 and 0 < skipped.height < 40
    assert capped.filter(pl.col("status") == S.STATUS_ERROR).is_empty()
    assert _billed(capped) == pytest.approx(billed, rel=1e-9)


def test_the_budget_closes_at_the_first_request_it_cannot_hold() -> None:
    budget = Budget(1.0)
    assert budget.hold(0.6)
    assert not budget.hold(0.5)  # 0.6 held + 0.5 > 1
    budget.release(0.6)
    budget.spend(0.1)
    assert not budget.hold(0.1)  # closed: a smaller request is not squeezed in later
    assert budget.reached and budget.spent_usd == pytest.approx(0.1)
    assert "2 requests were not sent" in (budget.note() or "")
    with pytest.raises(ConfigError):
        Budget(0.0)


def test_the_dry_run_says_whether_the_cap_is_enough() -> None:
    assert "enough for the estimated $0.0400" in cap_line(0.05, 0.04)
    short = cap_line(0.01, 0.04)
    assert "NOT enough" in short and "about 25% of the run" in short and "skipped" in short

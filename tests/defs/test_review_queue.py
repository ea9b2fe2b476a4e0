"""The day's review queue as a Dagster asset (issue 51, item 1): materialised with the day, its size the review
resource's, the same rows the core draws from the day's scored table, blind to the judge's scores, its strata
in the metadata, and no staler after a change of judge than the scored table it is drawn from."""

from __future__ import annotations

from datetime import date

import dagster as dg
import polars as pl

from faithfulness_pipeline.defs import DefsSettings, ReviewResource, build_defs
from faithfulness_pipeline.defs.resources import JudgeResource
from faithfulness_pipeline.outputs.kinds import DAY, OutputContext
from faithfulness_pipeline.outputs.review_queue import QUEUE_SCHEMA, REVIEW_QUEUE, review_sample
from tests.defs.conftest import DAYS, Built, Lake

DAY_KEY = "2026-11-25"
#: What the review must not see.
JUDGED = {"claims", "verdicts", "hallucination_score", "faithfulness_score", "hallucination_reason",
          "faithfulness_reason", "n_claims", "status", "error"}


def _expected(lake: Lake, day: str, size: int) -> pl.DataFrame:
    """The queue the core draws from the day's scored table."""
    scored = lake.read("scored_conversations", day)
    context = OutputContext(review_sample_size=size)
    rows = scored.select(REVIEW_QUEUE.reads(scored.columns, context))
    return review_sample(rows.with_columns(pl.lit(date.fromisoformat(day)).alias(DAY)), context).rows


def test_each_day_s_queue_holds_every_scored_answer_below_the_default_size(built: Built) -> None:
    for day in DAYS:
        queue = built.lake.read("review_queue", day)
        scored = built.lake.read("scored_conversations", day)
        assert queue.height == scored.height > 0  # 100 a day: every answer of the sample data's days
        assert set(queue.get_column("row_key")) == set(scored.get_column("row_key"))
        assert (queue.get_column("inclusion_probability") == 1.0).all()
        assert queue.get_column("day").cast(pl.String).unique().to_list() == [day]
        assert not JUDGED & set(queue.columns)
        assert {*QUEUE_SCHEMA, "conversation_id"} == set(queue.columns)
        assert queue.equals(_expected(built.lake, day, 100))


def test_a_day_s_queue_draws_the_resource_s_size_with_its_strata_in_the_metadata(lake: Lake,
                                                                               instance: dg.DagsterInstance) -> None:
    result = lake.materialize(DAY_KEY, instance, resources={"review": ReviewResource(review_sample_size=4)})
    assert result.success
    queue = lake.read("review_queue", DAY_KEY)
    assert queue.height == 4
    assert queue.equals(_expected(lake, DAY_KEY, 4))
    # fewer rows than strata: one row from each of the four largest, at its stratum's probability
    assert (queue.get_column("stratum_sample") == 1).all()
    assert (queue.get_column("inclusion_probability") == 1 / queue.get_column("stratum_rows")).all()
    events = {str(e.asset_key.to_user_string() if e.asset_key else None): e.materialization.metadata
              for e in result.get_asset_materialization_events()}
    meta = events["review_queue"]
    assert meta["dagster/row_count"].value == 4
    strata = str(meta["strata"].value)
    assert strata.startswith("4 of 9 scored answers drawn (size 4")
    assert '| ["2026-11-25", "gpt-4o-mini", "en"] |' in strata
    assert "calibration" not in meta  # the judge did not make it


def test_a_change_of_judge_leaves_the_queue_s_code_version_alone() -> None:
    def version(defs: dg.Definitions, asset: str) -> str | None:
        return defs.resolve_asset_graph().get(dg.AssetKey(asset)).code_version

    offline, llm = build_defs(), build_defs(DefsSettings(judge=JudgeResource(model="openai/gpt-4o-mini")))
    assert version(offline, "review_queue") == version(llm, "review_queue") == "review-queue-1"
    assert version(offline, "daily_answer_quality") != version(llm, "daily_answer_quality")

"""The Python API: polars, pandas and Arrow inputs; scripts and running event loops (Jupyter); the
README's snippets that build the litellm judge and try the LLM path, run against the fake server."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline import InputError, score_frame, score_frame_async
from faithfulness_pipeline.core.port import settings_hash
from faithfulness_pipeline.judging.offline.judge import OfflineJudge
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.marker_judge import MarkerJudge
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.doc_blocks import run_shell, shell_env
from tests.user_shell import user_env

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
SCORES = ["row_key", "claims", "n_claims", "hallucination_score", "faithfulness_score", "hallucination_reason"]

FRAME = pl.DataFrame({
    "conversation_id": ["en", "zh", "ko"],
    "output": ["Paris is the capital of France. It has 40 million people.", "长城位于中国。长城建于1990年。",
               "서울은 한국의 수도이다. 서울은 바다 위에 있다."],
    "context": [["Paris is the capital of France."], ["长城位于中国。"], ["서울은 한국의 수도이다."]],
    "team": ["a", "b", "c"],
})


def test_each_call_is_one_scoring_run_that_every_row_names() -> None:
    first, second = score_frame(FRAME), score_frame(FRAME)
    ids = [set(frame.get_column("scoring_run_id")) for frame in (first, second)]
    assert all(len(one) == 1 and re.fullmatch(r"[0-9a-f]{32}", next(iter(one))) for one in ids), ids
    assert ids[0] != ids[1]  # a warehouse join tells the two scorings of the same rows apart
    assert first.drop("scoring_run_id", "scored_at").equals(second.drop("scoring_run_id", "scored_at"))


def test_every_row_names_the_judge_settings_that_shaped_it() -> None:
    offline = score_frame(FRAME).get_column("judge_settings_hash")
    assert offline.to_list() == [settings_hash(OfflineJudge().result_scope())] * FRAME.height
    # A judge of one's own that does not say what shapes its results: unknown, never a made-up hash.
    custom = score_frame(FRAME, judge=MarkerJudge()).get_column("judge_settings_hash")
    assert custom.null_count() == FRAME.height


def test_score_frame_works_inside_a_running_event_loop_like_a_notebook() -> None:
    expected = score_frame(FRAME)

    async def cell() -> pl.DataFrame:
        asyncio.get_running_loop()  # what Jupyter has while a cell runs
        return score_frame(FRAME)

    inside = asyncio.run(cell())
    assert inside.select(SCORES).equals(expected.select(SCORES))


def test_score_frame_async_is_exported_and_awaitable() -> None:
    async def cell() -> pl.DataFrame:
        return await score_frame_async(FRAME)

    scored = asyncio.run(cell())
    assert scored.select(SCORES).equals(score_frame(FRAME).select(SCORES))


def test_pandas_and_arrow_inputs_score_like_polars_with_every_column_passed_through() -> None:
    pandas = pytest.importorskip("pandas")
    expected = score_frame(FRAME)
    as_pandas = pandas.DataFrame({
        "conversation_id": FRAME["conversation_id"].to_list(),
        "output": FRAME["output"].to_list(),
        "context": FRAME["context"].to_list(),
        "team": FRAME["team"].to_list(),
    })
    for table in (as_pandas, FRAME.to_arrow(), FRAME.to_arrow().to_batches()[0]):
        scored = score_frame(table)
        assert scored.select(SCORES).equals(expected.select(SCORES)), type(table)
        assert scored.columns[:4] == ["conversation_id", "output", "context", "team"]
        assert scored.get_column("output").to_list() == FRAME["output"].to_list()


def test_a_named_pandas_index_becomes_a_column() -> None:
    pandas = pytest.importorskip("pandas")
    df = pandas.DataFrame({"output": ["Paris is in France."], "context": [["Paris is in France."]]},
                          index=pandas.Index(["c1"], name="conversation_id"))
    scored = score_frame(df)
    assert scored.get_column("row_key").to_list() == ["c1"]  # the id column keyed the row


def test_an_unsupported_table_type_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="polars or pandas DataFrame or a pyarrow Table"):
        score_frame({"output": ["x"]})


def test_polars_and_arrow_inputs_need_no_pandas() -> None:
    # pandas is a dev dependency only: a user without it must score polars and Arrow tables all the same.
    script = (
        "import sys\n"
        "class NoPandas:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'pandas':\n"
        "            raise ModuleNotFoundError(\"No module named 'pandas'\", name=name)\n"
        "sys.meta_path.insert(0, NoPandas())\n"
        "import polars as pl\n"
        "from faithfulness_pipeline import score_frame\n"
        "df = pl.DataFrame({'output': ['Paris is in France.'], 'context': [['Paris is in France.']]})\n"
        "for table in (df, df.to_arrow()):\n"
        "    assert score_frame(table).get_column('faithfulness_score').to_list() == [1.0]\n"
        "assert 'pandas' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def _readme_block(lang: str, needle: str) -> str:
    blocks = [b for b in re.findall(rf"```{lang}\n(.*?)```", README, flags=re.DOTALL) if needle in b]
    assert len(blocks) == 1, f"expected one {lang} block with {needle!r} in the README"
    return blocks[0]


@pytest.mark.parametrize("in_a_running_loop", [False, True], ids=["script", "notebook"])
def test_the_readme_snippet_builds_the_litellm_judge_and_scores(
    in_a_running_loop: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    snippet = _readme_block("python", "make_judge(")
    model = 'model="openai/gpt-4o-mini"'
    assert snippet.count(model) == 1
    with FakeLLMServer(ScriptedJudge(grounded=True), api_key="sk-test-readme") as server:
        # The one change: the fake server instead of OpenAI (never any other address).
        code = snippet.replace(model, f"{model}, api_base={server.base_url!r}")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test-readme")
        namespace: dict[str, object] = {}
        if in_a_running_loop:
            async def cell() -> None:
                exec(code, namespace)

            asyncio.run(cell())
        else:
            exec(code, namespace)
        assert server.stats().requests > 0
    scored = namespace["scored"]
    assert isinstance(scored, pl.DataFrame)
    assert scored.get_column("status").to_list() == ["ok", "ok"]
    # grounded script: the English claim is in the passage; the Chinese one names another city
    assert scored.get_column("faithfulness_score").to_list()[0] == 1.0
    assert scored.get_column("hallucination_score").to_list()[1] == 1.0
    assert "c1" in capsys.readouterr().out


def test_the_readme_snippet_runs_with_no_key_under_the_fake_server_as_printed(tmp_path: Path) -> None:
    """The snippet saved as the README says and run by its command: the wrapper's FP_JUDGE_* variables reach
    the snippet's settings (JudgeSettings.from_env), so no address or key is passed by hand."""
    (tmp_path / "try_judge.py").write_text(_readme_block("python", "make_judge("), encoding="utf-8")
    command = _readme_block("bash", "try_judge.py")
    done = run_shell(command, tmp_path, shell_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"the command sent [1-9]\d* request", done.stderr), done.stderr[-2000:]
    assert "c1" in done.stdout and "c2" in done.stdout


def test_the_readme_command_tries_the_llm_path_without_a_key(tmp_path: Path) -> None:
    command = _readme_block("bash", "out/fake.parquet")
    out = tmp_path / "fake.parquet"
    assert command.count("out/fake.parquet") == 1
    done = subprocess.run(["bash", "-c", command.replace("out/fake.parquet", str(out))], cwd=ROOT, env=user_env(),
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "asked of the LLM" in done.stderr and re.search(r"the command sent [1-9]\d* request", done.stderr)
    scored = pl.read_parquet(out)
    assert scored.height == 26 and set(scored.get_column("judge_model")) == {"openai/fake-judge"}


def test_compare_scored_puts_two_scorings_side_by_side_from_python() -> None:
    """The compare command's question from Python, on the tables score_frame returns (here as pyarrow)."""
    from faithfulness_pipeline import compare_scored

    golden = pl.read_parquet(Path(__file__).parent / "golden" / "offline_sample" / "scored.parquet")
    worse = golden.with_columns(pl.when(pl.col("hallucination_score").is_not_null())
                                .then((pl.col("hallucination_score") + 0.3).clip(0, 1)).alias("hallucination_score"))
    result = compare_scored(golden.to_arrow(), worse, threshold=0.5, min_rows=5)
    assert result.paired and result.key == "row_key" and result.pairs == golden.height
    overall = result.table.filter((pl.col("group_by") == "all") & (pl.col("score") == "hallucination")).row(
        0, named=True)
    assert overall["difference"] > 0 and overall["verdict"] == "larger than noise"
    assert result.flips.height > 0  # rows that crossed the threshold, worst first
    models = compare_scored(golden, by="model", min_rows=5)
    assert set(models.table.get_column("segment")) == {"model=gpt-4o-mini vs claude-3-5-haiku"}
    with pytest.raises(ValueError, match="candidate"):
        compare_scored(golden)

"""Every command and code block the README and the docs pages show is run by a test.

``RUN_BY`` names, for each block, the test that runs it as printed; a new block without an entry fails
here, and so does an entry whose test is gone or no longer reads that page. The blocks no other test file
is the natural home for are run below: a real model's commands and batch mode against the fake
OpenAI-compatible server (the one change: ``FP_JUDGE_API_BASE`` points there), calibration, and the
scaling-out recipe's variables and executor snippets (dagster-k8s and dagster-aws are not installed here:
stand-ins take their place, and the snippets must build the definitions with them).

Not covered: the commands inside ``BENCHMARKS.md``, which the benchmarks page includes. They are how its
numbers were measured (``bench/``, minutes each); ``bench/run_all.py`` runs them.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from faithfulness_pipeline.core.aggregates import daily_aggregates
from faithfulness_pipeline.defs import DefsSettings, build_defs
from faithfulness_pipeline.settings.derive import settings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge
from tests.doc_blocks import REPO, RUNNABLE, block, code_blocks, exported, run_shell, shell_env

PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (REPO / "docs").glob("*.md"))]
THIS = "tests/docs/test_commands.py"

#: (page, language, a text only that block of the page holds) -> the tests that run it.
RUN_BY: dict[tuple[str, str, str], tuple[str, ...]] = {
    ("docs/table-formats.md", "python", "snapshot_id=int(version)"): (
        "tests/defs/test_iceberg_materialize.py::test_the_day_in_iceberg_versions_per_judge_and_a_failed_write",
    ),
    ("docs/table-formats.md", "python", "table_format=\"postgres\", postgres_url=url"): (
        "tests/defs/test_postgres_materialize.py::test_a_day_in_postgres_reads_back_by_sql_and_as_of_each_judge",
    ),
    ("docs/table-formats.md", "sql", "faithfulness._loads"): (
        "tests/defs/test_postgres_materialize.py::test_a_day_in_postgres_reads_back_by_sql_and_as_of_each_judge",
    ),
    ("docs/table-formats.md", "python", "landing_days(TableSettings(url"): (
        "tests/sources/test_table_landing.py::test_the_docs_snippet_lists_the_days_of_a_postgres_landing_table",
    ),
    ("docs/table-formats.md", "bash", "--table-format delta --as-of 2"): (
        "tests/cli/test_warehouse_formats.py::test_the_documented_commands_run_as_printed",
    ),
    ("docs/table-formats.md", "python", "DeltaTable(uri, version=int(table_version))"): (
        "tests/defs/test_delta_materialize.py::test_a_day_in_delta_tables_is_read_by_every_engine_and_each_version_is_what_it_published",
    ),
    ("README.md", "bash", "faithfulness-pipeline demo"): (
        "tests/defs/test_demo.py::test_demo_scores_every_sample_row_and_says_where_the_tables_are",
        f"{THIS}::test_ci_runs_the_readme_test_command",
    ),
    ("README.md", "bash", "--mastra-out out/mastra.jsonl"): (
        "tests/defs/test_demo.py::test_the_tour_score_command_and_the_report_commands_run_as_printed",
    ),
    ("README.md", "bash", "out/fake.parquet"): (
        "tests/test_api.py::test_the_readme_command_tries_the_llm_path_without_a_key",
    ),
    ("README.md", "bash", "try_judge.py"): (
        "tests/test_api.py::test_the_readme_snippet_runs_with_no_key_under_the_fake_server_as_printed",
    ),
    ("README.md", "python", "make_judge("): (
        "tests/test_api.py::test_the_readme_snippet_builds_the_litellm_judge_and_scores",
    ),
    ("README.md", "bash", "dg dev"): ("tests/defs/test_demo.py::test_the_ui_hint_starts_the_dagster_ui_as_printed",),
    ("docs/calibration.md", "bash", "-o out/calibration.parquet"): (
        f"{THIS}::test_the_calibration_commands_run_as_printed",
    ),
    ("docs/calibration.md", "bash", "--scored out/labelled-offline.parquet"): (
        f"{THIS}::test_the_calibration_commands_run_as_printed",
    ),
    ("docs/judges.md", "bash", "export OPENAI_API_KEY"): (f"{THIS}::test_a_real_models_commands_run_as_printed",),
    ("docs/judges.md", "bash", "packing-study"): (f"{THIS}::test_the_packing_study_runs_as_printed",),
    ("docs/store-and-batch.md", "bash", "--batch"): (f"{THIS}::test_the_batch_command_runs_as_printed",),
    ("docs/self-hosted.md", "bash", "--served-as llama.cpp"): (
        f"{THIS}::test_the_self_hosted_try_runs_as_printed",
    ),
    ("docs/self-hosted.md", "bash", "llama_cpp serve"): (
        "tests/selfhosted/test_llama_server.py::test_the_documented_llama_cpp_commands_run_as_printed",
    ),
    ("docs/object-storage.md", "bash", "s3://bucket/in/rows.parquet"): (
        "tests/cli/test_object_store.py::test_the_documented_commands_run_against_a_bucket",
    ),
    ("docs/pipeline.md", "bash", "dg launch"): (
        "tests/defs/test_cli.py::test_the_documented_dg_launch_commands_materialise_a_day_and_calibrate",
    ),
    ("docs/report.md", "bash", "report warehouse"): (
        "tests/defs/test_demo.py::test_the_tour_score_command_and_the_report_commands_run_as_printed",
    ),
    ("docs/report.md", "bash", "import duckdb"): ("tests/defs/test_demo.py::test_the_documented_query_command_runs",),
    ("docs/report.md", "sql", "daily_answer_quality"): ("tests/defs/test_materialize.py::test_the_documented_bi_queries_run",),
    ("docs/sampling.md", "bash", "--sample-rate 0.5"): (f"{THIS}::test_the_sampling_command_and_query_run_as_printed",),
    ("docs/sampling.md", "sql", "sampled_answers"): (f"{THIS}::test_the_sampling_command_and_query_run_as_printed",),
    ("docs/scaling-out.md", "bash", "dagster instance migrate"): (
        "tests/defs/test_postgres_instance.py::test_two_machines_reaching_the_pool_at_once_on_a_new_instance_both_get_a_slot",
        "tests/reliability/test_two_machines.py::test_two_machines_backfill_four_days_at_once_within_the_pool_paying_each_item_once",
    ),
    ("docs/scaling-out.md", "bash", 'DAGSTER_HOME="$PWD/dagster_home/postgres"'): (
        f"{THIS}::test_the_scaling_out_variables_are_what_the_code_location_and_the_instance_read",
    ),
    ("docs/scaling-out.md", "bash", "FP_JUDGE_SHARDS=8"): (
        f"{THIS}::test_the_scaling_out_variables_are_what_the_code_location_and_the_instance_read",
    ),
    ("docs/scaling-out.md", "python", "from dagster_k8s import"): (
        f"{THIS}::test_the_executor_snippets_build_the_definitions",
    ),
    ("docs/scaling-out.md", "bash", "FP_CELERY_BROKER=redis"): (
        f"{THIS}::test_the_scaling_out_variables_are_what_the_code_location_and_the_instance_read",
    ),
    ("docs/scaling-out.md", "bash", "celery -A faithfulness_pipeline"): (
        "tests/defs/test_celery.py::test_a_day_in_four_shards_runs_on_both_workers_as_on_one_machine",
    ),
    ("docs/traces.md", "bash", "score \"phoenix+http"): (
        "tests/traces/test_phoenix.py::test_the_documented_phoenix_command_runs_as_printed",
    ),
    ("docs/compare.md", "bash", "compare out/before.parquet"): (
        "tests/cli/test_compare.py::test_the_documented_command_runs_as_printed",
    ),
    ("docs/review.md", "bash", "review sample"): (
        "tests/cli/test_review.py::test_the_documented_commands_run_as_printed",
    ),
    ("docs/review.md", "bash", "review serve out/review-queue.parquet"): (
        "tests/review/test_cli.py::test_the_documented_review_commands_run_as_printed",
    ),
    ("docs/review.md", "bash", "review import sheet.csv"): (
        "tests/review/test_cli.py::test_the_documented_review_commands_run_as_printed",
    ),
    ("docs/review.md", "bash", 'review import "phoenix+http'): (
        "tests/review/test_phoenix_labels.py::test_the_documented_phoenix_import_runs_as_printed",
    ),
    ("docs/traces.md", "bash", "score /var/spans/"): (
        "tests/traces/test_spans_in.py::test_the_documented_collector_recipe_scores_its_folder",
    ),
    ("docs/scaling-out.md", "python", "S3PickleIOManager"): (
        f"{THIS}::test_the_executor_snippets_build_the_definitions",
    ),
}


def _imported_helpers(test_file: Path) -> list[Path]:
    """The modules of tests/ that ``test_file`` imports from (where a test reads its block through them)."""
    tree = ast.parse(test_file.read_text(encoding="utf-8"))
    names = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module]
    return [REPO / (name.replace(".", "/") + ".py") for name in names if name.startswith("tests.")]


def test_every_block_is_run_by_a_named_test_that_reads_its_page() -> None:
    seen: set[tuple[str, str, str]] = set()
    for page in PAGES:
        for lang, code in code_blocks(page):
            assert lang, f"{page}: a code block without a language (`text` for diagrams and synopses)"
            if lang not in RUNNABLE:
                continue
            keys = [key for key in RUN_BY if key[:2] == (page, lang) and key[2] in code]
            assert len(keys) == 1, f"{page}: no test (or several) named in RUN_BY for the {lang} block:\n{code}"
            seen.add(keys[0])
    assert seen == set(RUN_BY), f"RUN_BY names blocks that are gone: {set(RUN_BY) - seen}"
    for (page, _, _), tests in RUN_BY.items():
        for test in tests:
            path, _, name = test.partition("::")
            source = REPO / path
            assert re.search(rf"^def {re.escape(name)}\(", source.read_text(encoding="utf-8"), re.MULTILINE), test
            readers = [source, *_imported_helpers(source)]
            assert any(page in p.read_text(encoding="utf-8") for p in readers if p.is_file()), (
                f"{test} does not read {page}"
            )


INSTALL = 'python3 -m pip install -qq --target .uv uv && export PATH="$PWD/.uv/bin:$PATH" && '


_WRITTEN = re.compile(r"(?:-o|--[a-z-]+-out) (out/[\w./-]+)")


def test_no_page_overwrites_what_another_pages_commands_wrote() -> None:
    """A reader who follows two pages in one folder keeps both pages' results: a file under out/ is written
    by the commands of one page only (the README's tour copied into docs pages counts as the README's; a result
    store, --store, is meant to be shared)."""
    writers: dict[str, set[str]] = {}
    for page in PAGES:
        for lang, code in code_blocks(page):
            if lang == "bash":
                for target in _WRITTEN.findall(code):
                    writers.setdefault(target, set()).add(page)
    shared = {target: sorted(pages) for target, pages in writers.items() if len(pages) > 1}
    assert not shared, f"written by the commands of several pages: {shared}"


def test_ci_runs_the_readme_test_command() -> None:
    """The quickstart's second command is the suite itself: .ci/run runs it (pytest cannot run itself)."""
    quickstart = block("README.md", "bash", "faithfulness-pipeline demo")
    demo, suite = (line for line in quickstart.strip().splitlines() if line.startswith("python3"))
    assert demo == INSTALL + "uv run --frozen faithfulness-pipeline demo"
    assert suite == INSTALL + "uv run --frozen --group dev --compile-bytecode pytest"
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == suite
    # The demo installs no dependency group (no test tooling, no model weights) and compiles nothing ahead;
    # the suite asks for the dev group and for bytecode, where a machine sets PYTHONDONTWRITEBYTECODE every
    # CLI and dg subprocess would otherwise compile litellm and dagster from source again. Both from the
    # commands and pyproject.toml, not from variables a reader of the README would have to copy.
    uv = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["uv"]
    assert uv == {"python-downloads": "never", "default-groups": []}
    assert not [line for line in ci if "UV_COMPILE_BYTECODE" in line or "UV_PYTHON_DOWNLOADS" in line]


# ------------------------------------------------------------------------------------- run as printed


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A folder laid out like the repository root for the commands: the sample data, the labelled rows."""
    for name in ("sample_data", "sample_labelled"):
        (tmp_path / name).symlink_to(REPO / name)
    return tmp_path


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    # "..." is the key the page exports: the fake server accepts exactly that.
    with FakeLLMServer(ScriptedJudge(grounded=True), api_key="...") as running:
        yield running


def test_a_real_models_commands_run_as_printed(root: Path, server: FakeLLMServer) -> None:
    commands = block("docs/judges.md", "bash", "export OPENAI_API_KEY")
    done = run_shell(commands, root, shell_env(FP_JUDGE_API_BASE=server.base_url))
    assert done.returncode == 0, done.stderr[-3000:]
    assert server.stats().requests > 0
    scored = pl.read_parquet(root / "out" / "gpt-4o-mini.parquet")
    assert set(scored.get_column("status")) == {"ok"}
    assert set(scored.get_column("judge_model")) == {"openai/gpt-4o-mini"}
    assert (root / "out" / "judge.sqlite").is_file()


def test_the_packing_study_runs_as_printed(root: Path) -> None:
    """The study against "a server of your own" (the fake server, moved to the page's address)."""
    with FakeLLMServer(ScriptedJudge(grounded=True)) as server:
        command = block("docs/judges.md", "bash", "packing-study").replace("http://127.0.0.1:8080/v1", server.base_url)
        done = run_shell(command, root, shell_env())
        sent = server.stats().requests
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| single |" in done.stdout and "| repeat |" in done.stdout and "verdicts flipped" in done.stdout
    assert sent > 0 and pl.read_parquet(root / "out" / "study.parquet").height == 12 * 4


def test_the_batch_command_runs_as_printed(root: Path, server: FakeLLMServer) -> None:
    command = block("docs/store-and-batch.md", "bash", "--batch")
    env = shell_env(FP_JUDGE_API_BASE=server.base_url, OPENAI_API_KEY="...", FP_JUDGE_BATCH_POLL_S="0.05")
    done = run_shell(command, root, env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "batch" in done.stderr
    scored = pl.read_parquet(root / "out" / "batch.parquet")
    assert scored.height > 0 and set(scored.get_column("status")) == {"ok"}
    assert server.stats().requests == 0  # every request went through the Batch API, none interactively


def test_the_self_hosted_try_runs_as_printed(root: Path) -> None:
    """The page's keyless try: the fake server playing a llama.cpp server that refuses the schema. The run
    steps down once and packs to the window the server reports, both said in the summary."""
    done = run_shell(block("docs/self-hosted.md", "bash", "--served-as llama.cpp"), root, shell_env())
    assert done.returncode == 0, done.stderr[-3000:]
    scored = pl.read_parquet(root / "out" / "self-hosted.parquet")
    assert scored.height > 0 and set(scored.get_column("status")) == {"ok"}
    assert "json_object" in done.stderr or "JSON mode" in done.stderr, done.stderr[-3000:]
    assert "2048 tokens" in done.stderr, done.stderr[-3000:]


def test_the_calibration_commands_run_as_printed(root: Path) -> None:
    for needle in ("-o out/calibration.parquet", "--scored out/labelled-offline.parquet"):
        done = run_shell(block("docs/calibration.md", "bash", needle), root, shell_env())
        assert done.returncode == 0, done.stderr[-3000:]
    one = pl.read_parquet(root / "out" / "calibration.parquet")
    assert set(one.get_column("judge")) == {"offline-lexical-v1"}
    both = pl.read_parquet(root / "out" / "both.parquet")
    assert both.filter(pl.col("group_by") == "all").get_column("judge").to_list() == [
        "offline-lexical-v1", "openai/fake-judge"]
    assert (root / "out" / "disagree.parquet").is_file()


def test_the_sampling_command_and_query_run_as_printed(root: Path) -> None:
    done = run_shell(block("docs/sampling.md", "bash", "--sample-rate 0.5"), root, shell_env())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sample: judged" in done.stderr
    scored = pl.read_parquet(root / "out" / "sampled.parquet")
    assert {"ok", "not_sampled"} <= set(scored.get_column("status"))
    # the page's query, on the daily table of that run (the view in the DuckDB file has the same columns)
    daily_answer_quality = daily_aggregates(scored.with_columns(pl.col("created_at").dt.date().alias("day")))  # noqa: F841
    rows = duckdb.sql(block("docs/sampling.md", "sql", "sampled_answers")).fetchall()
    assert rows and sum(r[3] for r in rows) == scored.filter(pl.col("status") != "not_sampled").height
    # groups of the sample data are a few answers each: where fewer than two were scored there is no interval
    bounded = [r for r in rows if r[5] is not None]
    assert all(r[2] >= r[3] and r[5] <= r[4] <= r[6] for r in bounded), rows


def test_the_scaling_out_variables_are_what_the_code_location_and_the_instance_read() -> None:
    known = {s.env for s in settings()}
    instance_yaml = (REPO / "dagster_home" / "postgres" / "dagster.yaml").read_text(encoding="utf-8")
    for needle in ('DAGSTER_HOME="$PWD/dagster_home/postgres"', "FP_JUDGE_SHARDS=8", "FP_CELERY_BROKER=redis"):
        variables = exported(block("docs/scaling-out.md", "bash", needle))
        assert variables
        for name in variables:
            assert name in known or name == "DAGSTER_HOME" or name in instance_yaml, name
        if "DAGSTER_HOME" in variables:
            # $PWD is the repository root in the recipe: the instance file the repository ships
            assert variables["DAGSTER_HOME"].endswith("/dagster_home/postgres")
            assert (REPO / "dagster_home" / "postgres" / "dagster.yaml").is_file()
        # the code location takes them as they are (nothing is contacted: URLs are only read)
        fp = {k: v for k, v in variables.items() if k in known}
        defs_settings = DefsSettings.from_env(fp)
        if "FP_JUDGE_SHARDS" in fp:
            assert defs_settings.judge.shards == int(fp["FP_JUDGE_SHARDS"])
            assert defs_settings.warehouse.root == "s3://answers/warehouse"
        assert defs_settings.judge.store == fp["FP_JUDGE_STORE"]
        if "FP_CELERY_BROKER" in fp:  # the code location's executor is then dagster-celery's
            assert defs_settings.celery.broker == "redis://broker.internal:6379/0"
            job = build_defs(defs_settings).resolve_job_def("score_conversations")
            assert job.executor_def.name == "celery"


def test_the_executor_snippets_build_the_definitions(monkeypatch: pytest.MonkeyPatch) -> None:
    # Stand-ins for the packages the snippets name: an executor with the k8s executor's `configured`, and an
    # IO manager built from the same arguments as dagster-aws's.
    k8s = types.ModuleType("dagster_k8s")
    k8s.k8s_job_executor = dg.multiprocess_executor  # type: ignore[attr-defined]
    aws = types.ModuleType("dagster_aws")
    aws_s3 = types.ModuleType("dagster_aws.s3")
    made: dict[str, object] = {}

    class S3Resource:
        """What the IO manager would sign its requests with."""

    def s3_pickle_io_manager(s3_resource: S3Resource, s3_bucket: str) -> dg.InMemoryIOManager:
        made.update(resource=s3_resource, bucket=s3_bucket)
        return dg.InMemoryIOManager()

    aws_s3.S3PickleIOManager = s3_pickle_io_manager  # type: ignore[attr-defined]
    aws_s3.S3Resource = S3Resource  # type: ignore[attr-defined]
    for name, module in (("dagster_k8s", k8s), ("dagster_aws", aws), ("dagster_aws.s3", aws_s3)):
        monkeypatch.setitem(sys.modules, name, module)
    namespace: dict[str, object] = {}
    exec(block("docs/scaling-out.md", "python", "from dagster_k8s import"), namespace)
    first = namespace["defs"]
    assert isinstance(first, dg.Definitions)
    exec(block("docs/scaling-out.md", "python", "S3PickleIOManager"), namespace)  # the same code location, grown
    second = namespace["defs"]
    assert isinstance(second, dg.Definitions) and second is not first
    assert made["bucket"] == "answers" and isinstance(made["resource"], S3Resource)
    for defs in (first, second):
        job = defs.resolve_job_def("score_conversations")
        assert job.executor_def.name == dg.multiprocess_executor.name

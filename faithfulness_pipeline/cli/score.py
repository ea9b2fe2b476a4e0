"""``faithfulness-pipeline score INPUT -o OUTPUT``: the scoring core from the command line, without Dagster."""

from __future__ import annotations

import asyncio
import importlib
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import polars as pl

from faithfulness_pipeline.api.run import judge_run
from faithfulness_pipeline.cli.options import (
    chosen_outputs,
    output_options,
    resolve_settings,
    resolved,
    setting_options,
)
from faithfulness_pipeline.cli.process import freeze_loaded_objects
from faithfulness_pipeline.cli.progress import Progress
from faithfulness_pipeline.cli.sigterm import sigterm_as_interrupt, terminated
from faithfulness_pipeline.cli.streams import unfailing_streams
from faithfulness_pipeline.cli.summary import Summary
from faithfulness_pipeline.core.combine import conform
from faithfulness_pipeline.core.config import ContextHook, ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError, FaithfulnessPipelineError
from faithfulness_pipeline.core.pipeline import check_inputs, new_run_id, scored_schema
from faithfulness_pipeline.judging.dryrun import estimate_cost
from faithfulness_pipeline.judging.factory import check_key, make_judge
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.outputs import DayTable, Output, OutputContext
from faithfulness_pipeline.outputs.run_files import RunFiles, check_sends, option_of, send_scores
from faithfulness_pipeline.outputs.scored_table import SCORED_TABLE
from faithfulness_pipeline.settings.derive import from_env
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.landing import LandingSettings, WarehouseSettings
from faithfulness_pipeline.settings.review import ReviewSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.settings.traces import TraceExportSettings
from faithfulness_pipeline.sources.open import open_source
from faithfulness_pipeline.sources.source import Part, Source
from faithfulness_pipeline.tables.output_files import OutputError, check_outputs, committed_together
from faithfulness_pipeline.tables.read import iter_chunks
from faithfulness_pipeline.tables.write import input_arrow_types
from faithfulness_pipeline.traces.phoenix import PHOENIX_KEY_ENV
from faithfulness_pipeline.traces.urls import scrubbed

#: A run whose spend cap left rows unjudged (status skipped): its outputs are written, and complete but for them.
SKIPPED_EXIT = 3


def _load_hook(spec: str) -> ContextHook:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--context-hook must look like 'package.module:function', got {spec!r}")
    sys.path.insert(0, str(Path.cwd()))
    try:
        hook = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load --context-hook {spec!r}: {exc}") from exc
    if not callable(hook):
        raise ConfigError(f"--context-hook {spec!r} is not callable")
    result: ContextHook = hook
    return result


def _read_context_file(file: str) -> str:
    """The text of ``--context-file``; a file that is not there, not a file or not UTF-8 is one line."""
    try:
        data = Path(file).read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"--context-file {file!r} is a folder: give a file holding a JSON list of strings or "
                          f"plain text") from None
    except FileNotFoundError:
        raise ConfigError(f"--context-file {file!r} does not exist: give the path of a file holding a JSON list of "
                          f"strings or plain text") from None
    except OSError as exc:
        raise ConfigError(f"cannot read --context-file {file!r}: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")  # a byte-order mark is no part of the text
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--context-file {file!r} is not UTF-8 text (byte {exc.start}): re-encode it as UTF-8, "
                          f"then run again") from None


def _static_context(texts: tuple[str, ...], file: str | None) -> tuple[str, ...] | None:
    passages = list(texts)
    if file is not None:
        raw = _read_context_file(file)
        try:
            loaded = json.loads(raw)
        except ValueError:
            loaded = [raw]
        if not isinstance(loaded, list) or not all(isinstance(p, str) for p in loaded):
            raise ConfigError(f"--context-file {file!r} must be a JSON list of strings or plain text")
        passages += loaded
    return tuple(passages) if passages or file is not None else None


async def _run(
    source: Source[Part],
    chunks: Iterator[pl.DataFrame],
    out_schema: pl.Schema,
    judge: JudgeStack,
    config: ScoringConfig,
    outputs: dict[Output, str],
    context: OutputContext,
    progress: Callable[[float], None] | None,
    summary: Summary,
) -> None:
    """Scores ``chunks`` (read from ``source``, whose parts' columns make ``out_schema``) into ``outputs``
    (entry -> path: the scored table and the others the options ask for), which appear together when the run
    is complete, or not at all. A cap per model, or a judge that answers the whole run in bulk (batch mode),
    reads ``source`` first."""
    with committed_together({option_of(e): path for e, path in outputs.items()}) as tmps:
        files = RunFiles({e: tmps[option_of(e)] for e in outputs}, context,
                         arrow_types=input_arrow_types([p.name for p in source.parts]))
        # The files close inside the run, before its judge does.
        async with judge_run(judge, source.chunks, config, progress=progress,
                             run_id=summary.run_id, spill=True, first_pass=chunks) as scored_chunks:
            complete = False
            try:
                async for chunk in scored_chunks:
                    scored = conform(chunk, out_schema)  # files of other shapes or columns: one table
                    summary.add(scored)
                    files.write(scored)
                complete = True
            finally:
                files.close(out_schema, complete=complete)


def _read_ahead(chunks: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    """``chunks`` with the first one read now (while litellm may still be importing)."""
    first = next(chunks, None)
    return chunks if first is None else itertools.chain([first], chunks)


def _output_context(scoring: ScoringSettings, outputs: dict[Output, str], options: dict[str, Any]) -> OutputContext:
    """What the run's outputs read of the settings. Tables of whole days also read, as the report does, a row's
    day (``FP_TIMESTAMP_COLUMN`` in ``FP_TIMEZONE``), the comparison's segments (``FP_SEGMENT_COLUMNS``) and the
    review queue's size (``--review-sample-size``): only then, so that a Dagster variable that is wrong never
    stops a run that does not need it."""
    context = OutputContext(
        model_column=scoring.model_column, id_column=scoring.id_column, turn_column=scoring.turn_column,
        key_column=scoring.key_column, answer_column=scoring.output_column,
        hallucination_threshold=scoring.hallucination_threshold, scale=scoring.scale, chunk_rows=scoring.chunk_rows,
    )
    if not any(isinstance(entry, DayTable) for entry in outputs):
        return context
    landing, warehouse = from_env(LandingSettings, os.environ), from_env(WarehouseSettings, os.environ)
    review = resolved(ReviewSettings, options, os.environ)
    return replace(context, segment_columns=tuple(warehouse.segment_columns),
                   timestamp_column=landing.timestamp_column, timezone=landing.zone(),
                   review_sample_size=review.review_sample_size)


def _write_back(traces: TraceExportSettings, output: str, context: OutputContext) -> tuple[list[str], bool]:
    """The scored table's scores sent back to the spans it was made of, where the settings name a place:
    evaluation events to an OTLP endpoint, annotations to Phoenix. One line each, and whether all arrived."""
    delivered = send_scores(lambda: iter_chunks([output], context.chunk_rows), traces, context)
    return [d.line for d in delivered], not any(d.failed for d in delivered)


def _settings(options: dict[str, Any], batch: bool) -> tuple[JudgeSettings, ScoringSettings, TraceExportSettings]:
    """The run's settings from its flags, the variables and the defaults."""
    if batch:
        if options.get("mode") not in (None, "batch"):
            raise ConfigError(f"--batch contradicts --mode {options['mode']}")
        options["mode"] = "batch"
    judge_settings, scoring = resolve_settings(options, os.environ)
    if judge_settings.model is not None:
        # litellm takes seconds to import: it loads on a worker thread while the input is checked and read;
        # building the judge waits for it.
        from faithfulness_pipeline.judging.llm.card import import_litellm_in_background

        import_litellm_in_background()
    return judge_settings, scoring, resolved(TraceExportSettings, options, os.environ)


def _dry_run(judge_settings: JudgeSettings, source: Source[Part], config: ScoringConfig) -> None:
    judge = make_judge(judge_settings, need_key=False)
    freeze_loaded_objects()
    click.echo(estimate_cost(judge, source, config, batch=judge_settings.mode == "batch",
                             max_cost_usd=judge_settings.max_cost_usd))
    asyncio.run(judge.aclose())


@click.command()
@click.argument("input_spec", metavar="INPUT")
@output_options
@click.option("--context", "static_texts", multiple=True, help="Static context passage for every row (repeatable).")
@click.option("--context-file", default=None, help="Static context: a JSON list of strings, or one text passage.")
@click.option("--context-hook", default=None, help="module:function returning a row's passages (beats all else).")
@click.option("--dry-run", is_flag=True, help="Print requests, tokens and estimated cost; call nothing.")
@click.option("--quiet", is_flag=True, help="No progress and no summary.")
@click.option("--batch", is_flag=True, help="Same as --mode batch: the provider's Batch API, at its batch price.")
@setting_options(JudgeSettings, ScoringSettings, TraceExportSettings, ReviewSettings)
def score(input_spec: str, static_texts: tuple[str, ...], context_file: str | None, context_hook: str | None,
          dry_run: bool, quiet: bool, batch: bool, **options: Any) -> None:
    """Score INPUT (a Parquet, JSON Lines or CSV file, a directory of them, or a glob) and write the scored
    table. Files may differ in shape (flat and chat) and columns: each is normalised on its own.

    Every setting can also be given by its environment variable; a flag beats the variable.

    \b
    Examples:
      faithfulness-pipeline score sample_data -o out/scored.parquet        # offline judge, no key
      faithfulness-pipeline score rows.parquet -o scored.parquet --model openai/gpt-4o-mini --dry-run
      faithfulness-pipeline score rows.parquet -o scored.parquet --model openai/gpt-4o-mini \\
          --claims-out claims.parquet --max-cost-usd 5
    """
    started = time.monotonic()
    outputs = chosen_outputs(options)
    output = outputs[SCORED_TABLE]
    with unfailing_streams(), sigterm_as_interrupt(), ExitStack() as inputs:
        try:
            judge_settings, scoring, traces = _settings(options, batch)
            context = _output_context(scoring, outputs, options)
            config = scoring.config(
                static_context=_static_context(static_texts, context_file),
                context_hook=_load_hook(context_hook) if context_hook else None,
            )
            # Span exports become conversation tables in a folder of the source's, removed when the command ends.
            source = inputs.enter_context(open_source(input_spec, rows=config.chunk_rows,
                                                      text=config.columns.key_columns(),
                                                      phoenix_api_key=os.environ.get(PHOENIX_KEY_ENV)))
            # Every file's columns are validated before any call is paid for.
            out_schema = scored_schema([(part.name, part.schema()) for part in source.parts], config)
            # So are the write-backs: a flat table cannot be sent to spans, nor anything to an ftp:// URL.
            check_sends(out_schema.names(), traces)
            if dry_run:  # a dry run sends nothing, so it needs no key and writes nothing
                _dry_run(judge_settings, source, config)
                return
            check_key(judge_settings)
            # So do outputs that could not be written, or would overwrite each other or an input.
            check_outputs({option_of(e): path for e, path in outputs.items()}, source.files)
            if judge_settings.model is not None:
                # Requests cost money: whatever the inputs alone can refuse (a duplicate key in the last
                # file) is found before the first one (the offline judge pays nothing: it is not read twice).
                check_inputs(source.chunks(), config)
            total = source.row_count()
            assert total is not None  # files and a Phoenix project count their rows
            chunks = _read_ahead(source.chunks())
            progress = Progress(total, enabled=not quiet)
            judge = make_judge(judge_settings, check_connection=True,
                               report=None if quiet else lambda line: click.echo(line, err=True),
                               receiving=None if quiet else progress.receiving)
            freeze_loaded_objects()  # this process only scores: its loaded modules need no collecting
            progress.start()
            summary = Summary(model_column=scoring.model_column, answer_column=scoring.output_column,
                              threshold=scoring.hallucination_threshold, run_id=new_run_id(),
                              sample_rate=scoring.sample_rate, sample_max_rows=scoring.sample_max_rows,
                              input_notes=source.notes)
            try:
                asyncio.run(_run(source, chunks, out_schema, judge, config, outputs, context, progress, summary))
            finally:
                progress.close()
            written_back, delivered = _write_back(traces, output, context)
        except OutputError as exc:  # the machine's fault (a full disk, a read-only folder), not the command's
            click.echo(f"error: {scrubbed(str(exc))}", err=True)
            sys.exit(1)
        except FaithfulnessPipelineError as exc:  # an input refusal may quote a Phoenix URL with its password
            click.echo(f"error: {scrubbed(str(exc))}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            how = "terminated" if terminated() else "interrupted"
            click.echo(f"{how}: nothing was written (stored results are kept for the next run)", err=True)
            sys.exit(128 + (signal.SIGTERM if terminated() else signal.SIGINT))
        if not quiet:
            click.echo(summary.render(time.monotonic() - started, list(outputs.values()), judge, scoring.max_error_rate,
                                      scoring.max_zero_claim_share), err=True)
        _exit_after_writing(summary, written_back, delivered, quiet)


def _exit_after_writing(summary: Summary, written_back: list[str], delivered: bool, quiet: bool) -> None:
    """What a run that wrote its outputs says of its scores sent back, and its exit status."""
    for line in written_back if not quiet or not delivered else []:
        click.echo(line, err=True)
    if not delivered:  # the endpoint's fault, not the command's: the scored table is written all the same
        sys.exit(1)
    if summary.skipped:  # the outputs are written: a scheduler still hears the run is not complete
        sys.exit(SKIPPED_EXIT)

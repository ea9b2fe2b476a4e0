"""Choosing a judge from its settings: offline when no model is set, else the litellm judge; with a store
path, the result store around it (``judges.stored``). And the dry run's report."""

from __future__ import annotations

from collections.abc import Callable

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.io import iter_chunks
from faithfulness_pipeline.core.normalize import KeyRegistry, prepare
from faithfulness_pipeline.core.port import ExtractItem, Judge, VerdictItem
from faithfulness_pipeline.judging.estimates import Estimating
from faithfulness_pipeline.judging.llm.packing import rough_sentences
from faithfulness_pipeline.settings.judge import JudgeSettings


def make_judge(
    settings: JudgeSettings, api_key: str | None = None, *, need_key: bool = True, check_connection: bool = False
) -> Judge:
    """The offline judge when ``settings.model`` is unset; otherwise the litellm judge; either one behind
    the stored-judge wrapper (identical items asked once per run, and the result store when
    ``settings.store`` is set). A missing API key or an unusable store fails here, before any row is read;
    ``api_key`` beats the environment variable the settings name. ``need_key=False`` builds a judge that
    only estimates (the dry run): a missing key is then no error. ``check_connection`` (a run that will
    send requests, not a dry run) also fails here when the endpoint accepts no connection."""
    from faithfulness_pipeline.judging.stored import StoredJudge, open_store

    judge: Judge
    if settings.model is None:
        if settings.mode == "batch":
            raise ConfigError("batch mode needs a model (--model, FP_JUDGE_MODEL): the offline judge sends nothing")
        from faithfulness_pipeline.judging.offline.judge import OfflineJudge

        judge = OfflineJudge()
    elif settings.mode == "batch":
        from faithfulness_pipeline.judging.llm.batch.judge import NEEDS_A_STORE, BatchJudge

        if settings.store is None:
            raise ConfigError(NEEDS_A_STORE)
        batch_store = open_store(settings.store)
        try:
            judge = BatchJudge(settings, batch_store, api_key=api_key, need_key=need_key)
            if check_connection:
                from faithfulness_pipeline.judging.llm.reachability import check_reachable

                check_reachable(judge.interactive.endpoint, settings.timeout_s)
        except BaseException:
            batch_store.close()
            raise
        return StoredJudge(judge, batch_store, refresh=settings.refresh, lease_s=settings.store_lease_s)
    else:
        from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge

        judge = LiteLLMJudge(settings, api_key=api_key, need_key=need_key)
        if check_connection:
            from faithfulness_pipeline.judging.llm.reachability import check_reachable

            check_reachable(judge.endpoint, settings.timeout_s)
    # Built first, the judge fails on a missing key before the store file is created; it holds nothing to
    # close until its first request.
    store = None if settings.store is None else open_store(settings.store)  # a path or a postgresql:// URL
    return StoredJudge(judge, store, refresh=settings.refresh, lease_s=settings.store_lease_s)


def report_to(judge: Judge, report: Callable[[str], None]) -> None:
    """Where a judge that runs long jobs of its own (the batch judge, behind the wrapper) says how they go."""
    inner = getattr(judge, "inner", judge)
    if hasattr(inner, "report"):
        inner.report = report


def check_key(settings: JudgeSettings) -> None:
    """Fails now, naming the variable, when the model needs an API key that is not set: what building the
    judge would say, without waiting for litellm's import for the providers whose key variable is known."""
    if settings.model is not None and settings.model.strip():
        from faithfulness_pipeline.judging.llm.secrets import resolve_api_key

        resolve_api_key(settings.model, settings.api_key_env)


def estimate_cost(judge: Judge, paths: list[str], config: ScoringConfig, *, batch: bool = False) -> str:
    """The dry-run report: what scoring ``paths`` would send, without sending anything; the cost both
    interactively and as provider batches, ``batch`` marking the mode of this run."""
    registry = KeyRegistry()
    answers: list[ExtractItem] = []
    verdicts: list[VerdictItem] = []
    rows = 0
    for chunk in iter_chunks(paths, config.chunk_rows):
        prepared = prepare(chunk, config, registry)
        rows += prepared.height
        for key, answer, question, context in prepared.select(
            S.ROW_KEY, S.ANSWER, S.QUESTION, S.CONTEXT
        ).iter_rows():
            if answer is not None and answer.strip():
                answers.append(ExtractItem(id=key, answer=answer, question=question))
                # Claims not extracted yet are estimated as the answer's sentences.
                verdicts.append(VerdictItem(key, tuple(rough_sentences(answer)), tuple(context or ()), question))
    if not isinstance(judge, Estimating):
        return f"dry run: {rows} rows, {len(answers)} answers to judge with {judge.model_name}: 0 requests, cost $0"
    estimate = judge.estimate(answers, verdicts)
    def dollars(value: float | None) -> str:
        return "unknown (no price for this model)" if value is None else f"${value:.4f}"

    lines = [
        f"dry run with {judge.model_name} (prompt {judge.prompt_version}): {rows} rows, {len(answers)} answers",
        f"  requests: {estimate.requests}",
        f"  already in the result store: {estimate.cached_items} step results (free)",
        f"  prompt tokens: {estimate.prompt_tokens}",
        f"  completion tokens: {estimate.completion_tokens}",
        f"  estimated cost, interactive: {dollars(estimate.cost_usd)}{'' if batch else '   <- this run'}",
        f"  estimated cost, batch (--batch): {dollars(estimate.batch_cost_usd)}{'   <- this run' if batch else ''}",
    ]
    lines += [f"  note: {note}" for note in estimate.notes]
    return "\n".join(lines)

"""Choosing a judge from its settings and putting its stack together: offline when no model is set, else
the litellm judge (interactive, or provider batch jobs), always behind the judge stack (``judging.stack``:
run memory, and the result store when one is set)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.stack import JudgeStack
from faithfulness_pipeline.settings.judge import JudgeSettings

if TYPE_CHECKING:
    from faithfulness_pipeline.judging.llm.requests import Receiving


def make_judge(
    settings: JudgeSettings,
    api_key: str | None = None,
    *,
    need_key: bool = True,
    check_connection: bool = False,
    report: Callable[[str], None] | None = None,
    receiving: Receiving | None = None,
) -> JudgeStack:
    """The offline judge when ``settings.model`` is unset; otherwise the litellm judge; either one in a judge
    stack (identical items asked once per run, and the result store when ``settings.store`` is set). A
    missing API key or an unusable store fails here, before any row is read; ``api_key`` beats the
    environment variable the settings name. ``need_key=False`` builds a judge that only estimates (the dry
    run): a missing key is then no error. ``check_connection`` (a run that will send requests, not a dry
    run) also fails here when the endpoint accepts no connection. ``report`` hears how a judge's long jobs
    of its own go (batch mode: the state of its batches); ``receiving`` how many reply tokens just arrived on
    a streamed request (``stream``), so that a long request shows the server at work."""
    from faithfulness_pipeline.judging.store.open import open_store

    if settings.model is None:
        if settings.mode == "batch":
            raise ConfigError("batch mode needs a model (--model, FP_JUDGE_MODEL): the offline judge sends nothing")
        from faithfulness_pipeline.judging.offline.judge import OfflineJudge

        store = None if settings.store is None else open_store(settings.store)
        return JudgeStack(OfflineJudge(), store, refresh=settings.refresh, lease_s=settings.store_lease_s)
    if settings.mode == "batch":
        return _batch_stack(settings, api_key, need_key, check_connection, report)
    from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge

    judge = LiteLLMJudge(settings, api_key=api_key, need_key=need_key, receiving=receiving)
    if check_connection:
        from faithfulness_pipeline.judging.llm.reachability import check_reachable

        check_reachable(judge.endpoint, settings.timeout_s)
    # Built first, the judge fails on a missing key before the store file is created; it holds nothing to
    # close until its first request.
    store = None if settings.store is None else open_store(settings.store)  # a path or a postgresql:// URL
    return JudgeStack(judge, store, refresh=settings.refresh, lease_s=settings.store_lease_s, redact=judge.redact)


def _batch_stack(
    settings: JudgeSettings, api_key: str | None, need_key: bool, check_connection: bool,
    report: Callable[[str], None] | None,
) -> JudgeStack:
    """Batch mode: the batch judge asks the whole run before it is scored (the stack's prepay) and keeps
    its batches and results in the run's result store."""
    from faithfulness_pipeline.judging.llm.batch.judge import NEEDS_A_STORE, BatchJudge
    from faithfulness_pipeline.judging.store.open import open_store

    if settings.store is None:
        raise ConfigError(NEEDS_A_STORE)
    store = open_store(settings.store)
    try:
        judge = BatchJudge(settings, store, api_key=api_key, need_key=need_key, report=report)
        if check_connection:
            from faithfulness_pipeline.judging.llm.reachability import check_reachable

            check_reachable(judge.interactive.endpoint, settings.timeout_s)
    except BaseException:
        store.close()
        raise
    return JudgeStack(judge, store, refresh=settings.refresh, lease_s=settings.store_lease_s, redact=judge.redact,
                      bulk=judge.prepay_step)


def check_key(settings: JudgeSettings) -> None:
    """Fails now, naming the variable, when the model needs an API key that is not set: what building the
    judge would say, without waiting for litellm's import for the providers whose key variable is known."""
    if settings.model is not None and settings.model.strip():
        from faithfulness_pipeline.judging.llm.secrets import resolve_api_key

        resolve_api_key(settings.model, settings.api_key_env)

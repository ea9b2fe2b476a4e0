"""Choosing a judge from user options: offline when no model is set, else the litellm judge; with a store
path, the result store around it (``judges.stored``)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Final

from faithfulness_pipeline.core import schema as S
from faithfulness_pipeline.core.config import ScoringConfig
from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.core.io import iter_chunks
from faithfulness_pipeline.core.judge import ExtractItem, Judge, VerdictItem
from faithfulness_pipeline.core.normalize import KeyRegistry, prepare
from faithfulness_pipeline.core.packing import rough_sentences
from faithfulness_pipeline.judges.estimates import Estimating


@dataclass(frozen=True, slots=True)
class JudgeOptions:
    """The judge settings shared by the CLI and the Dagster resource; None means the judge's default."""

    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    max_concurrency: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    timeout_s: float | None = None
    pack_tokens: int | None = None
    store_path: str | None = None
    backoff_base_s: float | None = None
    backoff_max_s: float | None = None
    refresh: bool = False


#: Settings read from the environment when the options leave them unset (CLI flags --backoff-base /
#: --backoff-max; the Dagster layer reads the same variables into its judge resource).
ENV_FALLBACKS: Final = (("backoff_base_s", "FP_JUDGE_BACKOFF_BASE_S"), ("backoff_max_s", "FP_JUDGE_BACKOFF_MAX_S"))


def _seconds_from_env(variable: str) -> float | None:
    raw = os.environ.get(variable, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also refuses nan
        raise ConfigError(f"{variable} must be a number of seconds >= 0, got {raw!r}")
    return value


def make_judge(options: JudgeOptions, api_key: str | None = None) -> Judge:
    """The offline judge when ``options.model`` is unset; otherwise a configured litellm judge; either one
    behind the result store when ``options.store_path`` is set.

    A missing API key fails here, before any row is read. ``FP_JUDGE_BACKOFF_BASE_S`` and
    ``FP_JUDGE_BACKOFF_MAX_S`` set the back-off where the options do not.
    """
    judge: Judge
    if not options.model:
        from faithfulness_pipeline.judges.offline import OfflineJudge

        judge = OfflineJudge()
    else:
        from faithfulness_pipeline.judges.litellm_config import LiteLLMJudgeConfig
        from faithfulness_pipeline.judges.litellm_judge import LiteLLMJudge

        given: dict[str, Any] = {
            k: v for k, v in asdict(options).items() if v is not None and k not in ("store_path", "refresh")
        }
        for name, variable in ENV_FALLBACKS:
            if name not in given and (value := _seconds_from_env(variable)) is not None:
                given[name] = value
        judge = LiteLLMJudge(LiteLLMJudgeConfig(**given), api_key=api_key)
    if options.store_path is None:
        return judge
    from faithfulness_pipeline.judges.stored import StoredJudge, open_store

    return StoredJudge(judge, open_store(options.store_path), refresh=options.refresh)


def estimate_cost(judge: Judge, paths: list[str], config: ScoringConfig) -> str:
    """The dry-run report: what scoring ``paths`` would send, without sending anything."""
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
    cost = "unknown (no price for this model)" if estimate.cost_usd is None else f"${estimate.cost_usd:.4f}"
    lines = [
        f"dry run with {judge.model_name} (prompt {judge.prompt_version}): {rows} rows, {len(answers)} answers",
        f"  requests: {estimate.requests}",
        f"  already in the result store: {estimate.cached_items} step results (free)",
        f"  prompt tokens: {estimate.prompt_tokens}",
        f"  completion tokens: {estimate.completion_tokens}",
        f"  estimated cost: {cost}",
    ]
    lines += [f"  note: {note}" for note in estimate.notes]
    return "\n".join(lines)

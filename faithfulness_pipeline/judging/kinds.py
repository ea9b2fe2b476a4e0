"""The judge kinds: which judge a ``JudgeSettings`` selects, how it is built, and what it is called before it is.

Each kind is one :class:`JudgeKind` registered here: the settings it takes, a builder, the (judge model,
prompt version) it records, told without building it, and, for a baseline, what a reader of its scores must
be told. A builder imports its judge's module when it is called, not before: the Dagster code location and
every command import this module, and litellm's import costs seconds. ``factory.make_judge`` builds the kind
the settings select and puts the judge stack around it; ``catalog`` describes judges by the registrations;
neither knows a kind by name.

A new judge is its module and one :func:`register` call. Kinds are asked newest first, so a kind registered
after the built-in ones may take settings one of them would take (a model prefix of its own, say); the
built-in kinds take disjoint settings: no model, a model asked interactively, a model in batch mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from faithfulness_pipeline.core.errors import ConfigError

# The one judge module imported with the registry: the offline judge's names are what the catalog tells of
# it, and its module is pure Python that every entry point loads anyway (the offline judge is the default).
from faithfulness_pipeline.judging.offline.judge import (
    OFFLINE_FALLBACK_NOTE,
    OFFLINE_MODEL_NAME,
    OFFLINE_PROMPT_VERSION,
    OfflineJudge,
)
from faithfulness_pipeline.settings.judge import JudgeSettings

if TYPE_CHECKING:
    from faithfulness_pipeline.core.port import Judge
    from faithfulness_pipeline.judging.stack import Bulk
    from faithfulness_pipeline.judging.store.protocol import Store


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """What ``make_judge`` was asked beside the settings (its docstring says what each one means)."""

    api_key: str | None = None
    need_key: bool = True
    check_connection: bool = False
    report: Callable[[str], None] | None = None
    receiving: Callable[[int], None] | None = None


@dataclass(frozen=True, slots=True)
class Built:
    """A built judge and what the judge stack takes of it: the result store it opened (None: run memory only),
    what scrubs its key from error texts, and its prepay where it asks a whole run before it is scored."""

    judge: Judge
    store: Store | None = None
    redact: Callable[[str], str] = str
    bulk: Bulk | None = None


@dataclass(frozen=True, slots=True)
class Baseline:
    """A kind whose scores are a baseline, not the product's: the ``judge_model`` its scores are recorded
    under, and the note every reader of them gets."""

    judge_model: str
    note: str


def _no_key(settings: JudgeSettings) -> None:
    """A judge that sends nothing needs no key."""


@dataclass(frozen=True, slots=True)
class JudgeKind:
    """One kind of judge, as the registry knows it.

    ``selects`` says whether it takes the settings; ``build`` builds it (a missing key or an unusable store
    fails there, and a store it opened is closed again when it fails); ``identity`` is the (judge model, prompt
    version) it records, told without building it; ``check_key`` fails, naming the variable, where the key it
    would need is not set.
    """

    name: str
    selects: Callable[[JudgeSettings], bool]
    build: Callable[[JudgeSettings, BuildOptions], Built]
    identity: Callable[[JudgeSettings], tuple[str, str]]
    baseline: Baseline | None = None
    check_key: Callable[[JudgeSettings], None] = _no_key


_KINDS: list[JudgeKind] = []


def register(kind: JudgeKind) -> JudgeKind:
    """Adds ``kind``, asked before every kind registered earlier; its name must be new."""
    if any(k.name == kind.name for k in _KINDS):
        raise ValueError(f"a judge kind named {kind.name!r} is registered already")
    _KINDS.append(kind)
    return kind


def unregister(name: str) -> JudgeKind:
    """Removes the kind named ``name`` and returns it."""
    for i, kind in enumerate(_KINDS):
        if kind.name == name:
            return _KINDS.pop(i)
    raise KeyError(f"no judge kind named {name!r} is registered")


def registered() -> tuple[JudgeKind, ...]:
    """Every registered kind, in the order they are asked (newest first)."""
    return tuple(reversed(_KINDS))


def kind_for(settings: JudgeSettings) -> JudgeKind:
    """The kind that ``settings`` select: the newest one that takes them."""
    for kind in registered():
        if kind.selects(settings):
            return kind
    raise ConfigError(f"no judge kind takes these settings (model {settings.model!r}, mode {settings.mode})")


# ------------------------------------------------------------------------------------------- the built-in kinds


def _open_store(spec: str | None) -> Store | None:
    from faithfulness_pipeline.judging.store.open import open_store

    return None if spec is None else open_store(spec)  # a path or a postgresql:// URL


def _check_reachable(endpoint: str | None, timeout_s: float) -> None:
    from faithfulness_pipeline.judging.llm.reachability import check_reachable

    check_reachable(endpoint, timeout_s)


def _build_offline(settings: JudgeSettings, options: BuildOptions) -> Built:
    if settings.mode == "batch":
        raise ConfigError("batch mode needs a model (--model, FP_JUDGE_MODEL): the offline judge sends nothing")
    store = _open_store(settings.store)
    return Built(OfflineJudge(), store)


def _build_litellm(settings: JudgeSettings, options: BuildOptions) -> Built:
    from faithfulness_pipeline.judging.llm.judge import LiteLLMJudge

    judge = LiteLLMJudge(settings, api_key=options.api_key, need_key=options.need_key, receiving=options.receiving)
    if options.check_connection:
        _check_reachable(judge.endpoint, settings.timeout_s)
    # Built first, the judge fails on a missing key before the store file is created; it holds nothing to
    # close until its first request.
    return Built(judge, _open_store(settings.store), redact=judge.redact)


def _build_batch(settings: JudgeSettings, options: BuildOptions) -> Built:
    """Batch mode: the batch judge asks the whole run before it is scored (the stack's prepay) and keeps
    its batches and results in the run's result store."""
    from faithfulness_pipeline.judging.llm.batch.judge import NEEDS_A_STORE, BatchJudge

    store = _open_store(settings.store)
    if store is None:
        raise ConfigError(NEEDS_A_STORE)
    try:
        judge = BatchJudge(settings, store, api_key=options.api_key, need_key=options.need_key,
                           report=options.report)
        if options.check_connection:
            _check_reachable(judge.interactive.endpoint, settings.timeout_s)
    except BaseException:
        store.close()
        raise
    return Built(judge, store, redact=judge.redact, bulk=judge.prepay_step)


def _litellm_identity(settings: JudgeSettings) -> tuple[str, str]:
    from faithfulness_pipeline.judging.llm.prompts import PROMPT_VERSION

    return settings.model or "", PROMPT_VERSION


def _litellm_key(settings: JudgeSettings) -> None:
    """What building the judge would say of a missing key, without waiting for litellm's import for the
    providers whose key variable is known."""
    if settings.model is not None and settings.model.strip():
        from faithfulness_pipeline.judging.llm.secrets import resolve_api_key

        resolve_api_key(settings.model, settings.api_key_env)


register(JudgeKind(
    "offline", selects=lambda settings: settings.model is None, build=_build_offline,
    identity=lambda settings: (OFFLINE_MODEL_NAME, OFFLINE_PROMPT_VERSION),
    baseline=Baseline(OFFLINE_MODEL_NAME, OFFLINE_FALLBACK_NOTE),
))
register(JudgeKind(
    "litellm", selects=lambda settings: settings.model is not None and settings.mode == "interactive",
    build=_build_litellm, identity=_litellm_identity, check_key=_litellm_key,
))
register(JudgeKind(
    "batch", selects=lambda settings: settings.model is not None and settings.mode == "batch",
    build=_build_batch, identity=_litellm_identity, check_key=_litellm_key,
))

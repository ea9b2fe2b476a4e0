"""Building a judge from its settings and putting its stack together: the kind the settings select
(``judging.kinds``: offline when no model is set, else the litellm judge, interactive or in provider batch
jobs), always behind the judge stack (``judging.stack``: run memory, and the result store when one is set)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from faithfulness_pipeline.judging.kinds import BuildOptions, kind_for
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
    """The judge of the kind ``settings`` select (the offline judge when ``settings.model`` is unset; otherwise
    the litellm judge) in a judge stack (identical items asked once per run, and the result store when
    ``settings.store`` is set). A missing API key or an unusable store fails here, before any row is read;
    ``api_key`` beats the environment variable the settings name. ``need_key=False`` builds a judge that only
    estimates (the dry run): a missing key is then no error. ``check_connection`` (a run that will send
    requests, not a dry run) also fails here when the endpoint accepts no connection. ``report`` hears how a
    judge's long jobs of its own go (batch mode: the state of its batches); ``receiving`` how many reply tokens
    just arrived on a streamed request (``stream``), so that a long request shows the server at work."""
    options = BuildOptions(api_key, need_key, check_connection, report, receiving)
    built = kind_for(settings).build(settings, options)
    return JudgeStack(built.judge, built.store, refresh=settings.refresh, lease_s=settings.store_lease_s,
                      redact=built.redact, bulk=built.bulk)


def check_key(settings: JudgeSettings) -> None:
    """Fails now, naming the variable, when the judge needs an API key that is not set: what building the
    judge would say, without waiting for litellm's import for the providers whose key variable is known."""
    kind_for(settings).check_key(settings)

"""The flags of the commands that take settings and outputs: derived from the settings registry and the list of
outputs, never declared here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click
from pydantic import BaseModel

from faithfulness_pipeline.outputs import Output
from faithfulness_pipeline.outputs.run_files import offered
from faithfulness_pipeline.outputs.scored_table import SCORED_TABLE
from faithfulness_pipeline.settings.derive import Setting, from_env, settings
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings

M = TypeVar("M", bound=BaseModel)


def _click_type(setting: Setting) -> Any:
    if setting.choices is not None:
        return click.Choice(setting.choices)
    # Numbers stay text until the settings model reads them: a bad one ('nan', '0', 'ten') is then the same
    # one-line error naming flag, variable and resource field as a bad variable, not click's usage report.
    return str


def _help(setting: Setting) -> str:
    default = "" if setting.default is None or setting.kind is bool else f" [default: {setting.default}]"
    return f"{setting.description}.{default} [env {setting.env}]"


def setting_options(*models: type[BaseModel]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """One option per setting of ``models`` (``faithfulness_pipeline.settings.derive``): the flags are derived, never
    declared here. Unset (None) means the variable, then the default."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        for setting in reversed([s for s in settings() if s.model in models and s.cli_flag is not None]):
            if setting.kind is bool:
                option = click.option(setting.flag, setting.name, is_flag=True, default=None, help=_help(setting))
            else:
                metavar = {int: "INTEGER", float: "NUMBER"}.get(setting.kind, "TEXT")
                option = click.option(setting.flag, setting.name, type=_click_type(setting), default=None,
                                      metavar=metavar if setting.choices is None else None, help=_help(setting))
            command = option(command)
        return command

    return decorate


def resolved(model: type[M], options: Mapping[str, Any], env: Mapping[str, str]) -> M:
    """``model``'s settings of a run: the flags given, then the ``FP_*`` variables, then the defaults.
    ``options`` may hold the command's other parameters too."""
    return from_env(model, env, {s.name: options[s.name] for s in settings(model) if options.get(s.name) is not None})


def resolve_settings(options: dict[str, Any], env: Mapping[str, str]) -> tuple[JudgeSettings, ScoringSettings]:
    """The judge's and the scoring settings of a run (:func:`resolved`)."""
    return resolved(JudgeSettings, options, env), resolved(ScoringSettings, options, env)


def output_param(entry: Output) -> str:
    """The command's parameter holding where ``entry`` goes (``--claims-out`` -> ``claims_out``)."""
    assert entry.option is not None
    return entry.option.removeprefix("--").replace("-", "_")


def output_options(command: Callable[..., None]) -> Callable[..., None]:
    """One option per output the command line offers (``outputs.catalog``): the scored table's is required,
    each other one adds its output. Never declared here."""
    for entry in reversed(offered()):
        assert entry.option is not None
        names = [n for n in (entry.short_option, entry.option) if n]
        command = click.option(*names, output_param(entry), required=entry is SCORED_TABLE, default=None,
                               metavar="PATH", help=entry.option_help)(command)
    return command


def chosen_outputs(options: dict[str, Any]) -> dict[Output, str]:
    """The outputs a run's options ask for, and where (taken out of ``options``)."""
    wanted = {entry: options.pop(output_param(entry), None) for entry in offered()}
    return {entry: path for entry, path in wanted.items() if path is not None}

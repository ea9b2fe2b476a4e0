"""Where every setting is reachable: derived from the two settings models, never declared again.

:class:`~faithfulness_pipeline.settings.judge.JudgeSettings` and
:class:`~faithfulness_pipeline.core.config.ScoringSettings` declare each setting once (name, type, default,
range, description). From them come:

- the CLI flags (``faithfulness-pipeline score --timeout ...``), built by ``cli.py`` from :func:`settings`
  (``calibrate`` also takes the :class:`~faithfulness_pipeline.core.labels.CalibrationSettings`);
- the Dagster resource fields: ``JudgeResource`` and ``ScoringResource`` inherit the models' fields;
- the environment variables: ``FP_JUDGE_<FIELD>`` for the judge, ``FP_<FIELD>`` for scoring, read by the
  Dagster code location and, as the flags' defaults, by the CLI (:func:`from_env`);
- the README's settings table (:func:`markdown_table`; ``python -m faithfulness_pipeline.settings`` prints it).

Precedence: a CLI flag or a resource value given in the launchpad, then the variable, then the default.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.fields import CLI
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings

M = TypeVar("M", bound=BaseModel)

#: The settings models, the prefix of their variables and the Dagster resource that carries their fields.
MODELS: Final[tuple[tuple[type[BaseModel], str, str], ...]] = (
    (JudgeSettings, "FP_JUDGE_", "judge"),
    (ScoringSettings, "FP_", "scoring"),
    (CalibrationSettings, "FP_CALIBRATION_", "calibration"),
)


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting as users reach it."""

    model: type[BaseModel]
    name: str  # the field: the Dagster resource field and the Python keyword
    flag: str  # the CLI flag
    env: str  # the environment variable
    resource: str  # the Dagster resource that has the field
    kind: type  # str, int, float or bool
    choices: tuple[str, ...] | None  # the allowed values of a choice
    optional: bool  # None (unset) is a value
    default: Any
    description: str


def _kind(annotation: Any) -> tuple[type, tuple[str, ...] | None, bool]:
    """(base type, choices, optional) of a field annotation such as ``int | None`` or ``Literal[...]``."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    optional = get_origin(annotation) in (Union, types.UnionType) and len(args) < len(get_args(annotation))
    if optional and len(args) == 1:
        annotation = args[0]
    if get_origin(annotation) is Literal:
        return str, tuple(str(v) for v in get_args(annotation)), optional
    if annotation in (str, int, float, bool):
        return annotation, None, optional
    raise TypeError(f"a setting must be str, int, float, bool or a Literal of str, got {annotation!r}")


def settings(model: type[BaseModel] | None = None) -> list[Setting]:
    """Every setting (of one model), in declaration order."""
    out: list[Setting] = []
    for cls, prefix, resource in MODELS:
        if model is not None and cls is not model:
            continue
        for name, field in cls.model_fields.items():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            kind, choices, optional = _kind(field.annotation)
            out.append(Setting(
                model=cls, name=name, flag=str(extra.get(CLI) or "--" + name.replace("_", "-")),
                env=prefix + name.upper(), resource=resource, kind=kind, choices=choices, optional=optional,
                default=field.default, description=field.description or "",
            ))
    return out


def _where(setting: Setting) -> str:
    return f"{setting.flag} / {setting.env} / {setting.resource}.{setting.name}"


def build(model: type[M], values: Mapping[str, Any]) -> M:
    """The model from ``values`` (unset keys take their defaults); a bad value is a :class:`ConfigError`
    naming the setting everywhere it can be set."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        raise config_error(model, exc) from None


def config_error(model: type[BaseModel], exc: ValidationError) -> ConfigError:
    by_name = {s.name: s for s in settings(model)}
    problems = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else ""
        where = _where(by_name[name]) if name in by_name else name or model.__name__
        problems.append(f"{where}: {error['msg']} (got {error.get('input')!r})")
    return ConfigError("invalid setting " + "; ".join(problems))


def from_env(model: type[M], env: Mapping[str, str], given: Mapping[str, Any] | None = None) -> M:
    """The model from ``given`` values, then the ``FP_*`` variables set (non-empty) in ``env``, then the
    defaults. Variables are text; pydantic turns them into the field's type."""
    values = dict(given or {})
    for setting in settings(model):
        raw = env.get(setting.env, "").strip()
        if setting.name not in values and raw:
            values[setting.name] = raw
    return build(model, values)


def _default(setting: Setting) -> str:
    if setting.default is None:
        return "unset"
    if setting.kind is bool:
        return "on" if setting.default else "off"
    return f"`{setting.default}`"


def markdown_table() -> str:
    """The README's table of every setting: flag, variable, Dagster field, default, meaning."""
    lines = [
        "| setting | CLI flag | variable | Dagster resource field | default | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in settings():
        choices = f" (one of {', '.join(s.choices)})" if s.choices else ""
        lines.append(
            f"| {s.name} | `{s.flag}` | `{s.env}` | `{s.resource}.{s.name}` | {_default(s)} | "
            f"{s.description.replace('|', '/')}{choices} |"
        )
    return "\n".join(lines)


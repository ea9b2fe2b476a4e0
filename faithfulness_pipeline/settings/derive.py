"""Where every setting is reachable: derived from the settings models, never declared again.

The models (``judge``, ``scoring``, ``calibration``, ``traces``, ``review``, ``landing`` and ``celery`` in this
package) declare each setting once (name, type, default, range, description); :data:`MODELS` says how users
reach each model's fields. From them come:

- the CLI flags (``faithfulness-pipeline score --timeout ...``), built by ``cli`` from :func:`settings` for
  the models whose settings are flags (``calibrate`` also takes the calibration settings); the landing,
  warehouse and partition settings are the Dagster layer's and are none, but for those that name a flag: the
  ``report``'s own ``--timezone``, and the warehouse's table format and place (``--table-format``,
  ``--postgres-url``, ...) that ``report``, ``compare`` and ``estimate`` read a warehouse with;
- the Dagster resource fields: ``JudgeResource``, ``ScoringResource``, ``CalibrationResource``,
  ``TracesResource``, ``ReviewResource``, ``LandingResource`` and ``WarehouseResource`` inherit the models'
  fields (the first partition is fixed when the code location loads, so no resource has it);
- the environment variables: the model's prefix and the field name in capitals (``FP_JUDGE_TIMEOUT_S``,
  ``FP_SCALE``), or the name a field gives (``fields.variable``: ``FP_LANDING`` for ``landing.path``), read
  by the Dagster code location and, as the flags' defaults, by the CLI (:func:`from_env`);
- the settings table of docs/settings.md (:func:`markdown_table`; ``python -m faithfulness_pipeline.settings``
  prints it).

Precedence: a CLI flag or a resource value given in the launchpad, then the variable, then the default.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, NamedTuple, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.settings.calibration import CalibrationSettings
from faithfulness_pipeline.settings.celery import CelerySettings
from faithfulness_pipeline.settings.fields import CLI, ENV
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.settings.labels import LabelSettings
from faithfulness_pipeline.settings.landing import LandingSettings, PartitionSettings, WarehouseSettings
from faithfulness_pipeline.settings.review import ReviewSettings
from faithfulness_pipeline.settings.scoring import ScoringSettings
from faithfulness_pipeline.settings.traces import TraceExportSettings

M = TypeVar("M", bound=BaseModel)


class Registered(NamedTuple):
    """A settings model and how users reach its fields."""

    model: type[BaseModel]
    prefix: str  # of its variables (a field may name its own: fields.variable)
    resource: str | None  # the Dagster resource with its fields; None: fixed when the code location loads
    # Whether its fields are CLI flags (``--`` and the name with dashes, unless ``fields.flag`` names one). The
    # Dagster layer's settings are not; such a field names a flag only where commands have it: one a command
    # declares itself (``report --timezone``), or one built from the field for the commands that take it (the
    # warehouse's table format: ``cli/warehouse.py``), so the table never shows a flag no command has.
    flags: bool = True


#: Every settings model, in the order of the settings table.
MODELS: Final[tuple[Registered, ...]] = (
    Registered(JudgeSettings, "FP_JUDGE_", "judge"),
    Registered(ScoringSettings, "FP_", "scoring"),
    Registered(CalibrationSettings, "FP_CALIBRATION_", "calibration"),
    Registered(TraceExportSettings, "FP_", "traces"),
    Registered(LabelSettings, "FP_", "labels"),
    Registered(ReviewSettings, "FP_", "review"),
    Registered(LandingSettings, "FP_", "landing", flags=False),
    Registered(WarehouseSettings, "FP_", "warehouse", flags=False),
    Registered(PartitionSettings, "FP_", None, flags=False),
    Registered(CelerySettings, "FP_CELERY_", None, flags=False),
)


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting as users reach it."""

    model: type[BaseModel]
    name: str  # the field: the Dagster resource field and the Python keyword
    cli_flag: str | None  # the CLI flag; None: no command has one for the setting
    env: str  # the environment variable
    resource: str | None  # the Dagster resource that has the field; None: none has it
    kind: type  # str, int, float, bool, or list (of str; comma-separated in a variable)
    choices: tuple[str, ...] | None  # the allowed values of a choice
    optional: bool  # None (unset) is a value
    default: Any
    description: str

    @property
    def flag(self) -> str:
        """The CLI flag. The CLI builds options only for models with flags: asking a setting without one is a bug."""
        if self.cli_flag is None:
            raise LookupError(f"{self.model.__name__}.{self.name} is no CLI flag (set it with {self.env})")
        return self.cli_flag


def _kind(annotation: Any) -> tuple[type, tuple[str, ...] | None, bool]:
    """(base type, choices, optional) of a field annotation such as ``int | None`` or ``Literal[...]``."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    optional = get_origin(annotation) in (Union, types.UnionType) and len(args) < len(get_args(annotation))
    if optional and len(args) == 1:
        annotation = args[0]
    if get_origin(annotation) is Annotated:  # a constrained type inside an optional one: ``Annotated[int, ...] | None``
        annotation = get_args(annotation)[0]
    if get_origin(annotation) is Literal:
        return str, tuple(str(v) for v in get_args(annotation)), optional
    if annotation in (str, int, float, bool):
        return annotation, None, optional
    if get_origin(annotation) is list and get_args(annotation) == (str,):
        return list, None, optional
    raise TypeError(f"a setting must be str, int, float, bool, list[str] or a Literal of str, got {annotation!r}")


def settings(model: type[BaseModel] | None = None) -> list[Setting]:
    """Every setting (of one model), in declaration order."""
    out: list[Setting] = []
    for registered in MODELS:
        cls = registered.model
        if model is not None and cls is not model:
            continue
        for name, field in cls.model_fields.items():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            kind, choices, optional = _kind(field.annotation)
            derived = "--" + name.replace("_", "-") if registered.flags else None
            cli_flag = (str(extra[CLI]) or None) if CLI in extra else derived
            out.append(Setting(
                model=cls, name=name, cli_flag=cli_flag, env=str(extra.get(ENV) or registered.prefix + name.upper()),
                resource=registered.resource, kind=kind, choices=choices, optional=optional,
                default=field.get_default(call_default_factory=True), description=field.description or "",
            ))
    return out


def _field(setting: Setting) -> str:
    return f"{setting.resource}.{setting.name}" if setting.resource else setting.name


def _where(setting: Setting) -> str:
    return " / ".join(([setting.cli_flag] if setting.cli_flag else []) + [setting.env, _field(setting)])


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
            values[setting.name] = _from_text(setting, raw)
    return build(model, values)


def _from_text(setting: Setting, raw: str) -> Any:
    """A variable's text as pydantic reads the field: a list is comma-separated (blanks dropped)."""
    if setting.kind is list:
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw


def _default(setting: Setting) -> str:
    if setting.default is None:
        return "unset"
    if setting.kind is bool:
        return "on" if setting.default else "off"
    if setting.kind is list:
        return f"`{','.join(setting.default)}`" if setting.default else "none"
    return f"`{setting.default}`"


def markdown_table() -> str:
    """The table of every setting on the docs' settings page: flag, variable, Dagster field, default, meaning.
    ``<`` is escaped so that a placeholder such as ``<warehouse>`` shows as text, not as an HTML tag."""
    lines = [
        "| setting | CLI flag | variable | Dagster resource field | default | meaning |",
        "|---|---|---|---|---|---|",
    ]
    for s in settings():
        choices = f" (one of {', '.join(s.choices)})" if s.choices else ""
        flag = f"`{s.cli_flag}`" if s.cli_flag else "none"
        field = f"`{s.resource}.{s.name}`" if s.resource else "none (fixed when the code location loads)"
        meaning = s.description.replace("|", "/").replace("<", "&lt;")
        lines.append(f"| {s.name} | {flag} | `{s.env}` | {field} | {_default(s)} | {meaning}{choices} |")
    return "\n".join(lines)


"""What a settings field tells the registry (``derive``) beyond pydantic's own facts, in its ``json_schema_extra``.

Kept apart from ``derive`` so the settings models can use it without importing the registry that imports them.
"""

from __future__ import annotations

from typing import Any, Final

#: ``json_schema_extra`` key of a field's CLI flag.
CLI: Final = "cli"
#: ``json_schema_extra`` key of a field's environment variable.
ENV: Final = "env"


def flag(name: str) -> dict[str, Any]:
    """The field's CLI flag, where it is not ``--`` and the field name with dashes (``--timeout`` for
    ``timeout_s``: the unit is in the help, and the short flag is what users type)."""
    return {CLI: name}


def no_flag() -> dict[str, Any]:
    """A field of a model with flags that is no flag: it shapes what the Dagster layer builds (a run's shard
    steps), which a command line run in one process has no use for."""
    return {CLI: ""}


def variable(name: str) -> dict[str, Any]:
    """The field's environment variable, where it is not the model's prefix and the field name in capitals:
    for variables users set before the field existed (``FP_LANDING`` for ``landing.path``)."""
    return {ENV: name}

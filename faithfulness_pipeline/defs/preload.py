"""Imported once by the multiprocess executor's fork server; every step process forks from it.

Step processes then start with the code location and Dagster's instance and storage machinery already
imported: about two seconds less per step, since a fresh process re-imports sqlalchemy, alembic and
friends the first time it opens the instance. Only imports happen here: no instance, connection or
thread may exist before the fork. The dagster modules are internal, so a missing one is skipped.
"""

import contextlib
import importlib

_MODULES = (
    "dagster._core.execution.api",
    "dagster._core.execution.plan.execute_plan",
    "dagster._core.instance.factory",
    "dagster._core.secrets.loader",
    "dagster._core.storage.event_log.sqlite",
    "dagster._core.storage.migration.utils",
    "dagster._core.storage.root",
    "dagster._core.storage.runs.sqlite",
    "dagster._core.storage.schedules.sqlite",
    "dagster._core.storage.sqlite_storage",
    "upath",
    "faithfulness_pipeline.definitions",
)

for _name in _MODULES:
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)

"""Imported once by the multiprocess executor's fork server; every step process forks from it.

Step processes then start with the code location and Dagster's instance and storage machinery already
imported: about two seconds less per step, since a fresh process re-imports sqlalchemy, alembic and
friends the first time it opens the instance. Only imports happen here: no instance, connection or
thread may exist before the fork.

The dagster modules are internal: Dagster has no public way to name what a step process imports. A
module that no longer imports only costs start-up time, so it is skipped with a warning rather than
failing every run; tests/defs/test_private_dagster.py fails on it, and on any dagster version other
than ``CHECKED_WITH_DAGSTER``, so the list is re-checked whenever dagster is upgraded.
"""

import importlib
import warnings

# The dagster version MODULES (and PRELOAD_MODULES in defs/executors.py) were last checked against.
CHECKED_WITH_DAGSTER = "1.13.27"

MODULES = (
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

for _name in MODULES:
    try:
        importlib.import_module(_name)
    except ImportError as exc:
        warnings.warn(
            f"preload: cannot import {_name} ({exc}); step processes will import it themselves and start "
            f"slower. The list was checked with dagster {CHECKED_WITH_DAGSTER}: run "
            "tests/defs/test_private_dagster.py and update faithfulness_pipeline/defs/preload.py.",
            RuntimeWarning,
            stacklevel=1,
        )

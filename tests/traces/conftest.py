from tests.defs.conftest import dagster_home

__all__ = ["dagster_home"]

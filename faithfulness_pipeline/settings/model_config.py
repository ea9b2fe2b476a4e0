"""What every settings model shares: immutable, no unknown field, and no infinite or not-a-number value (a
float setting of ``inf`` was once accepted where another refused it: one rule for all, declared here)."""

from __future__ import annotations

from typing import Final

from pydantic import ConfigDict

SETTINGS_CONFIG: Final = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

"""Test-wide settings: litellm stays offline and quiet (no price-list fetch, no tokenizer download)."""

from __future__ import annotations

import os

for _name, _value in {
    "LITELLM_OFFLINE_MODE": "true",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOG": "ERROR",
    "HF_HUB_OFFLINE": "1",
    "DAGSTER_TELEMETRY_DISABLED": "1",
}.items():
    os.environ.setdefault(_name, _value)

"""Errors a user can act on. Each message names the bad column or value and the fix."""

from __future__ import annotations


class FaithfulnessPipelineError(Exception):
    """Base class: the CLI prints these without a traceback and exits non-zero."""


class InputError(FaithfulnessPipelineError):
    """The input table cannot be scored as it is (missing or mistyped column, duplicate keys, ...)."""


class ConfigError(FaithfulnessPipelineError):
    """A setting is out of range or inconsistent (scale <= 0, unknown option value, missing API key, ...)."""

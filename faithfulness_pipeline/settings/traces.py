"""Where scores go back to traces (``score``'s flags, ``FP_OTEL_*`` / ``FP_PHOENIX_*`` variables, the Dagster
``traces`` resource).

Headers of the OTLP endpoint (an API key of a hosted backend) are no setting of ours: the OpenTelemetry
exporter reads them from ``OTEL_EXPORTER_OTLP_LOGS_HEADERS`` / ``OTEL_EXPORTER_OTLP_HEADERS`` itself, so they
never enter a resource, a run's storage or a log line."""

from __future__ import annotations

from pydantic import BaseModel, Field

from faithfulness_pipeline.settings.model_config import SETTINGS_CONFIG


class TraceExportSettings(BaseModel):
    """The trace export settings: declared once here; ``score``'s flags, the variables and the Dagster
    ``traces`` resource fields are derived (``faithfulness_pipeline.settings.derive``)."""

    model_config = SETTINGS_CONFIG

    otel_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP endpoint (http://collector:4318, or its /v1/logs URL) that receives one "
        "gen_ai.evaluation.result event per scorer for every judged row made of spans (docs/traces.md); unset: "
        "none is sent",
    )
    phoenix_endpoint: str | None = Field(
        default=None,
        description="Arize Phoenix base URL (http://127.0.0.1:6006) whose span annotations hallucination and "
        "faithfulness receive the scores of rows made of spans, updated on re-runs (its API key: PHOENIX_API_KEY); "
        "unset: none written",
    )
    otel_timeout_s: float = Field(
        default=30.0, gt=0, allow_inf_nan=False,
        description="seconds an OTLP export may take before its events count as not delivered",
    )

"""Traces as input and as the place scores go back to: span exports (OpenTelemetry GenAI and OpenInference
conventions) read as conversations, and results written back to the spans they came from (OpenTelemetry
evaluation events, Phoenix span annotations). Above ``tables`` (it reads files through it) and below
``settings``: its functions take plain values, the entry points pass them from the settings."""

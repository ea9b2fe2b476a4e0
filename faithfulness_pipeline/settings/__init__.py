"""Every setting of every layer, declared once (one pydantic model per layer) and derived everywhere.

``judge`` (:class:`JudgeSettings`), ``scoring`` (:class:`ScoringSettings`), ``calibration``
(:class:`CalibrationSettings`), ``traces`` (:class:`TraceExportSettings`), ``review`` (:class:`ReviewSettings`:
the audit sample people label) and ``landing`` (the Dagster layer's :class:`LandingSettings`,
:class:`WarehouseSettings` and :class:`PartitionSettings`; ``celery``'s :class:`CelerySettings` for Dagster's Celery
executor) declare the fields, with ``fields`` for what a field
tells the registry; ``derive`` turns them into CLI flags, ``FP_*`` variables, Dagster resource fields and the
settings table of the docs (``python -m faithfulness_pipeline.settings``).
"""

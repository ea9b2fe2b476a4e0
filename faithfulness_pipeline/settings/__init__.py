"""Every setting of every layer, declared once (one pydantic model per layer) and derived everywhere.

``judge`` (:class:`JudgeSettings`), ``scoring`` (:class:`ScoringSettings`) and ``calibration``
(:class:`CalibrationSettings`) declare the fields; ``derive`` turns them into CLI flags, ``FP_*`` variables,
Dagster resource fields and the settings table of the docs (``python -m faithfulness_pipeline.settings``).
"""

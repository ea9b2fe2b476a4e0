"""The Celery app of a worker of the code location's Celery executor (docs/scaling-out.md)::

    celery -A faithfulness_pipeline.defs.celery_app worker -Q dagster -c 1 -n worker-a@%h

with the code location's ``FP_*`` variables (the broker, the store, the warehouse, the judge, the instance's
``DAGSTER_HOME``): each task is one Dagster step of a run, executed in the worker's process against the run's
instance, with the code location imported from this package.
"""

from faithfulness_pipeline.defs.celery import worker_app

app = worker_app()

"""People's labels as the corrected figures read them (``estimate --labels``, ``compare --labelled``, the
Dagster ``answer_labels`` asset through ``FP_LABELS``): a table of labels, or a label store."""

from __future__ import annotations

from contextlib import closing

import polars as pl

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.judging.store.open import LIBPQ_PAIR
from faithfulness_pipeline.review.store import LabelStore, is_store
from faithfulness_pipeline.tables.read import read_all


def read_labels(spec: str, text: frozenset[str] = frozenset()) -> pl.DataFrame:
    """Every label ``spec`` names: a label store's ``labels`` table (a ``*.sqlite``, ``*.sqlite3`` or ``*.db``
    file, or a ``postgresql://`` URL; each reviewer's label a row), else a table file, folder or glob read as
    :func:`tables.read.read_all` reads it (``text``: CSV columns read as text)."""
    if is_store(spec):
        with closing(LabelStore(spec, create=False)) as store:
            return store.frame()
    if LIBPQ_PAIR.search(spec):
        # Named as given, a key=value string would be echoed back, password and all, as a missing file.
        raise InputError("the labels look like a libpq key=value connection string (host=... dbname=...): give "
                         "the label store as a URL, postgresql://user@host:5432/database")
    return read_all(spec, text)


def labels_stamp(spec: str) -> str:
    """What tells that a label store's labels changed (:meth:`LabelStore.stamp`)."""
    with closing(LabelStore(spec, create=False)) as store:
        return store.stamp()

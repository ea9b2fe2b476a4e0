"""The batch ledger of a result store, by the store's backend.

Apart from ``batch.ledger`` because both backends' ledgers build on that module's ``BatchLedger``: the
choice between them, kept there, made the SQLite and PostgreSQL ledger modules import each other.
"""

from __future__ import annotations

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.llm.batch.ledger import BatchLedger, SqliteBatchLedger
from faithfulness_pipeline.judging.llm.batch.ledger_postgres import PostgresBatchLedger
from faithfulness_pipeline.judging.store.postgres import PostgresStore
from faithfulness_pipeline.judging.store.protocol import Store
from faithfulness_pipeline.judging.store.sqlite import ResultStore


def ledger_of(store: Store) -> BatchLedger:
    """The batch ledger kept in ``store``: the same SQLite file, or the same PostgreSQL database."""
    if isinstance(store, ResultStore):
        return SqliteBatchLedger(store)
    if isinstance(store, PostgresStore):
        return PostgresBatchLedger(store)
    raise ConfigError(f"batch mode cannot keep its batch records in {type(store).__name__} stores (a SQLite file "
                      "or a postgresql:// URL can)")

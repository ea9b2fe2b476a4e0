"""The batch ledger finds a judge's open batches by its settings hash, and those an earlier version
recorded under the key it used then: a batch is paid for when created and read hours later, maybe by a
run of a newer version."""

from __future__ import annotations

import time
from pathlib import Path

from faithfulness_pipeline.core.port import ResultScope, settings_hash
from faithfulness_pipeline.judging.llm.batch.ledger import BatchRecord, earlier_key
from faithfulness_pipeline.judging.llm.batch.open_ledger import ledger_of
from faithfulness_pipeline.judging.store.open import open_store

SCOPE = ResultScope(
    ("extract", "x1", "openai/m", "", "t=0.0", "seed=None", "schema"),
    ("verdict", "v1", "openai/m", "", "t=0.0", "seed=None", "schema", "window=128000"),
    ("row", "x1", "v1", "openai/m", "", "t=0.0", "seed=None", "schema", "window=128000"),
)
OTHER = ResultScope(("extract", "x2"), ("verdict", "v2"), ("row", "x2", "v2"))


def test_the_earlier_key_is_the_one_earlier_versions_wrote() -> None:
    # sha256(repr(scope))[:32], as the batch judge computed it before the ledger took the settings hash
    assert earlier_key(SCOPE) == "c63ad99416e77b2f234a6318e57fe395"
    assert settings_hash(SCOPE) == "1b1c9bc7c18b56a8"


def test_open_batches_of_either_key_are_found_and_no_others(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.sqlite")
    ledger = ledger_of(store)
    try:
        now = time.time()
        for n, scope in enumerate((earlier_key(SCOPE), settings_hash(SCOPE), settings_hash(OTHER), earlier_key(OTHER))):
            ledger.record_submission(BatchRecord(f"tag-{n}", "extract", scope, "file", None, "creating", None, 1,
                                                 now + n), [])
        assert [r.submission for r in ledger.open_batches(SCOPE, "extract")] == ["tag-0", "tag-1"]
        assert [r.submission for r in ledger.open_batches(OTHER, "extract")] == ["tag-2", "tag-3"]
        assert ledger.open_batches(SCOPE, "verdict") == []
    finally:
        ledger.close()
        store.close()

"""The label store on SQLite and on a real PostgreSQL cluster: one row per answer and reviewer, replaced when a
reviewer changes their mind and gone on undo; every write committed (another connection, another process, sees
it the moment ``put`` returns); read back as a labels table the corrected figures take; a table of another shape,
a missing store and a bad label refused in one line; a PostgreSQL password in no message."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from faithfulness_pipeline.core.corrected import keyed_labels
from faithfulness_pipeline.review.labels import labels_stamp, read_labels
from faithfulness_pipeline.review.store import FRAME_SCHEMA, Label, LabelStore, LabelStoreError, is_store
from tests.postgres_cluster import PASSWORD, Cluster

WHEN = datetime(2026, 11, 25, 9, 30, tzinfo=UTC)


def _label(key: str, reviewer: str, hallucinated: bool | None, **more: object) -> Label:
    return Label(row_key=key, reviewer=reviewer, label_hallucinated=hallucinated, labelled_at=WHEN, **more)  # type: ignore[arg-type]


def test_one_row_per_answer_and_reviewer_replaced_and_undone(new_store: Callable[[str], str]) -> None:
    spec = new_store("labels")
    store = LabelStore(spec)
    claims = ({"claim_index": 0, "claim": "首尔是韩国的首都。", "verdict": "supported"},
              {"claim_index": 2, "claim": "서울의 인구는 천만 명이다.", "verdict": "contradicted"})
    store.put(_label("k1", "김지수", True, label_faithfulness=0.5, claim_labels=claims, content_hash="h1",
                     scoring_run_id="run-1", judge_model="offline-lexical-v1", prompt_version="p1",
                     inclusion_probability=0.25))
    store.put([_label("k1", "bo", False), _label("k2", "bo", True)])
    assert set(store.of_reviewer("bo")) == {"k1", "k2"}
    mine = store.of_reviewer("김지수")["k1"]
    assert mine.claim_labels == claims and mine.label_faithfulness == 0.5 and mine.labelled_at == WHEN
    assert (mine.content_hash, mine.scoring_run_id, mine.judge_model, mine.prompt_version) == (
        "h1", "run-1", "offline-lexical-v1", "p1")
    assert mine.inclusion_probability == 0.25 and mine.source == "review" and mine.label_hallucinated is True

    # bo changes their mind: the label is replaced, not added
    later = WHEN + timedelta(minutes=5)
    store.put(Label(row_key="k1", reviewer="bo", label_hallucinated=True, labelled_at=later))
    assert len(store.labels()) == 3
    assert store.of_reviewer("bo")["k1"].label_hallucinated is True
    assert store.of_reviewer("bo")["k1"].labelled_at == later
    before = labels_stamp(spec)

    assert store.delete("k2", "bo") and not store.delete("k2", "bo")
    assert set(store.of_reviewer("bo")) == {"k1"} and set(store.of_reviewer("김지수")) == {"k1"}
    assert labels_stamp(spec) != before

    frame = read_labels(spec)
    assert frame.schema == FRAME_SCHEMA and frame.height == 2
    assert frame.sort("reviewer").get_column("label_hallucinated").to_list() == [True, True]
    # the corrected figures take it as they take a table: each reviewer's label a row of its answer
    scored = pl.DataFrame({"row_key": ["k1", "k2"], "conversation_id": ["c1", "c2"]})
    keyed = keyed_labels(frame, scored, id_column="conversation_id", turn_column="turn", key_column=None)
    assert keyed.sort("reviewer").get_column("reviewer").to_list() == ["bo", "김지수"]
    store.close()


def test_every_write_is_committed_when_put_returns(new_store: Callable[[str], str], tmp_path: Path) -> None:
    """Another process reads each label the moment put returns: nothing waits in a buffer or a transaction."""
    spec = new_store("durable")
    store = LabelStore(spec)
    reader = ("import sys\nfrom faithfulness_pipeline.review.store import LabelStore\n"
              "print(sorted(LabelStore(sys.argv[1], create=False).of_reviewer('ana')))")
    for count in (1, 2):
        store.put(_label(f"k{count}", "ana", count % 2 == 0))
        seen = subprocess.run([sys.executable, "-c", reader, spec], capture_output=True, text=True, check=True)
        assert seen.stdout.strip() == str([f"k{n}" for n in range(1, count + 1)])
    store.close()


def test_two_writers_at_once_each_keep_their_labels(new_store: Callable[[str], str]) -> None:
    spec = new_store("shared")
    stores = [LabelStore(spec), LabelStore(spec)]

    def write(store: LabelStore, reviewer: str) -> None:
        for n in range(40):
            store.put(_label(f"k{n}", reviewer, n % 3 == 0))

    threads = [threading.Thread(target=write, args=(s, name)) for s, name in zip(stores, ("ana", "bo"), strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    frame = read_labels(spec)
    assert frame.height == 80 and frame.group_by("reviewer").len().sort("reviewer").get_column("len").to_list() == [40, 40]
    for store in stores:
        store.close()


def test_the_labels_of_a_queues_answers_are_read_in_chunks_of_keys(new_store: Callable[[str], str]) -> None:
    """A page reads the labels of its queue's answers only (a store may hold many days of queues)."""
    store = LabelStore(new_store("many"))
    store.put([_label(f"k{n:04d}", "ana", n % 2 == 0) for n in range(1300)])
    wanted = [f"k{n:04d}" for n in range(100, 1300, 1)] + ["not-labelled"]
    frame = store.frame(wanted)
    assert frame.height == 1200 and set(frame.get_column("row_key")) == set(wanted[:-1])
    assert store.frame([]).is_empty() and store.frame().height == 1300
    store.close()


def test_what_is_not_a_label_store_is_refused_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "none.sqlite"
    with pytest.raises(LabelStoreError, match="no label store at"):
        read_labels(str(missing))
    assert not missing.exists()  # reading never makes an empty store

    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE labels (id INTEGER, name TEXT)")
    with pytest.raises(LabelStoreError, match="not a label store"):
        LabelStore(str(other))

    store = LabelStore(str(tmp_path / "labels.sqlite"))
    with pytest.raises(LabelStoreError, match="neither label_hallucinated nor label_faithfulness"):
        store.put(_label("k1", "ana", None))
    with pytest.raises(LabelStoreError, match=r"\[0, 1\]"):
        store.put(_label("k1", "ana", True, label_faithfulness=1.5))
    with pytest.raises(LabelStoreError, match="verdict"):
        store.put(_label("k1", "ana", True, claim_labels=({"claim_index": 0, "claim": "x", "verdict": "maybe"},)))
    assert store.labels() == []  # a refused label leaves nothing behind
    store.close()
    assert is_store("x.sqlite") and is_store("X.DB") and is_store("postgresql://u@h/db") and not is_store("x.parquet")


def test_a_postgresql_password_is_in_no_message(postgres: Cluster) -> None:
    wrong = postgres.url(password="not-the-pw-5512")
    with pytest.raises(LabelStoreError) as refused:
        LabelStore(wrong)
    assert "not-the-pw-5512" not in str(refused.value) and "***" in str(refused.value)
    postgres.psql("CREATE DATABASE labels_secret")
    store = LabelStore(postgres.url(database="labels_secret"))
    assert PASSWORD not in store.location and "***" in store.location
    store.put(_label("k1", "ana", True))
    assert read_labels(postgres.url(database="labels_secret")).height == 1
    store.close()
    with pytest.raises(LabelStoreError) as gone:
        read_labels(postgres.url(database="no_such_db"))
    assert PASSWORD not in str(gone.value)

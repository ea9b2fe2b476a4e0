"""The write-behind queue of the result store: rows added after it closed (replies that arrive while a
cancelled run shuts down) are written by the caller, never turned into a failure (the CI of 6df5b37 saw
"the store's writer is closed" on a SIGTERM during verdicts)."""

from __future__ import annotations

from collections.abc import Sequence

from faithfulness_pipeline.judging.write_behind import Row, WriteBehind


def test_rows_added_after_close_are_written_not_failed() -> None:
    written: list[Row] = []
    failures: list[Exception] = []

    def put(rows: Sequence[Row]) -> None:
        written.extend(rows)

    behind = WriteBehind(put, failures.append)
    behind.add([(b"k1", "extract", "v1")])
    behind.close()  # writes what was queued, stops the thread
    behind.add([(b"k2", "verdict", "v2")])  # a late reply
    assert [key for key, _, _ in written] == [b"k1", b"k2"]
    assert failures == []


def test_a_late_write_that_fails_is_reported_once_like_any_other() -> None:
    failures: list[Exception] = []

    def put(rows: Sequence[Row]) -> None:
        raise OSError("disk full")

    behind = WriteBehind(put, failures.append)
    behind.close()
    behind.add([(b"k", "extract", "v")])
    assert [str(e) for e in failures] == ["disk full"]

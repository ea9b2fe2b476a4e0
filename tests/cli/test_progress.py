"""The progress display counts whole rows although rows finish in fractions (a row's share of a request)."""

from __future__ import annotations

import io
import re

import pytest

from faithfulness_pipeline.cli.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bar_shows_whole_rows_when_rows_finish_in_fractions(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    progress = Progress(10, enabled=True)
    for share in [0.5] * 7 + [1 / 3] * 3 + [2.5] + [1 / 7] * 7 + [2.0]:
        progress(share)
    progress.close()
    counts = re.findall(r"(\d+(?:\.\d+)?)/10", screen.getvalue())
    assert counts, screen.getvalue()
    assert all("." not in c for c in counts), counts  # never "3.5/10"
    assert counts[-1] == "10"
    assert [int(c) for c in counts] == sorted(int(c) for c in counts)

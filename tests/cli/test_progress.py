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


def test_the_bar_shows_reply_tokens_arriving_while_no_row_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    monkeypatch.setattr("faithfulness_pipeline.cli.progress.POSTFIX_S", 0.0)
    progress = Progress(90, enabled=True)
    progress.start()
    for _ in range(30):
        progress.receiving(4)
    progress.close()
    shown = screen.getvalue()
    assert "0/90" in shown and "receiving: 120 tokens" in shown
    counts = [int(n.replace(",", "")) for n in re.findall(r"receiving: ([\d,]+) tokens", shown)]
    assert counts == sorted(counts) and counts[-1] == 120


def test_plain_lines_show_reply_tokens_arriving_too(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()  # not a terminal: a cron job's log
    monkeypatch.setattr("sys.stderr", log)
    monkeypatch.setattr("faithfulness_pipeline.cli.progress.LINE_S", 0.0)
    progress = Progress(90, enabled=True)
    progress.start()
    progress.receiving(652)
    progress(6)
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("scoring: 0/90 rows (0%); receiving: 652 tokens (")
    assert lines[-1].startswith("scoring: 6/90 rows (7%); receiving: 652 tokens (")


def test_nothing_is_drawn_before_the_start_or_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    screen = _Terminal()
    monkeypatch.setattr("sys.stderr", screen)
    Progress(10, enabled=True)  # built before the judge, which can still fail: no bar yet
    quiet = Progress(10, enabled=False)
    quiet.start()
    quiet.receiving(5)
    quiet(1)
    assert screen.getvalue() == ""

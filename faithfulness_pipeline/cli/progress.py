"""How far ``score`` has got, on stderr while it runs."""

from __future__ import annotations

import sys
import time
from typing import Any, Final

import click

#: Seconds between two plain lines (no terminal): cron logs stay readable.
LINE_S: Final = 5.0
#: Seconds between two redraws of the bar's "receiving" part: a streamed reply brings several tokens a second.
POSTFIX_S: Final = 1.0


class Progress:
    """A tqdm bar on a terminal; a plain line every few seconds otherwise (cron logs stay readable).

    Rows are counted as they finish; reply tokens (:meth:`receiving`) as they arrive on streamed requests, so
    that a pack a slow server takes minutes over shows the server at work while no row finishes. The bar is
    drawn by :meth:`start` (or the first count): a judge that hears tokens is built with it first, and must
    be able to fail without a bar on the screen.
    """

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.done = 0.0  # rows finish in fractions (a row's share of a packed request): shown as whole rows
        self.enabled = enabled
        self.tokens = 0  # reply tokens received on streamed requests
        self._bar: Any = None
        self._last = time.monotonic()
        self._shown = (time.monotonic(), 0)  # (when, tokens) the "receiving" part was last drawn
        self._rate = 0.0  # tokens a second between its last two drawings
        self._started = False

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        self._last = time.monotonic()
        self._shown = (self._last, self.tokens)  # a rate from when the run began, not from when this was built
        if self.enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, unit="row", desc="scoring", file=sys.stderr, dynamic_ncols=True)

    def __call__(self, rows: float) -> None:
        self.start()
        self.done += rows
        if self._bar is not None:
            whole = min(int(self.done + 1e-9), self.total)
            if whole > self._bar.n:
                self._bar.update(whole - self._bar.n)
        else:
            self._line()

    def receiving(self, tokens: int) -> None:
        """``tokens`` more reply tokens arrived."""
        self.tokens += tokens
        if not self.enabled:
            return
        self.start()
        now = time.monotonic()
        when, before = self._shown
        if now - when >= POSTFIX_S:
            self._rate = (self.tokens - before) / (now - when)
            self._shown = (now, self.tokens)
            if self._bar is not None:
                self._bar.set_postfix_str(self._receiving(), refresh=True)
        if self._bar is None:
            self._line()

    def _receiving(self) -> str:
        return f"receiving: {self.tokens:,} tokens ({self._rate:.1f}/s)"

    def _line(self) -> None:
        if not self.enabled or time.monotonic() - self._last < LINE_S:
            return
        self._last = time.monotonic()
        pct = 100 * self.done / self.total if self.total else 100.0
        tokens = f"; {self._receiving()}" if self.tokens else ""
        click.echo(f"scoring: {self.done:.0f}/{self.total} rows ({pct:.0f}%){tokens}", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

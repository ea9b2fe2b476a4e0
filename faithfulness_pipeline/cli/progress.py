"""How far ``score`` has got, on stderr while it runs."""

from __future__ import annotations

import sys
import time
from typing import Any

import click


class Progress:
    """A tqdm bar on a terminal; a plain line every few seconds otherwise (cron logs stay readable)."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.done = 0.0  # rows finish in fractions (a row's share of a packed request): shown as whole rows
        self.enabled = enabled
        self._bar: Any = None
        self._last = time.monotonic()
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="row", desc="scoring", file=sys.stderr, dynamic_ncols=True)

    def __call__(self, rows: float) -> None:
        self.done += rows
        if self._bar is not None:
            whole = min(int(self.done + 1e-9), self.total)
            if whole > self._bar.n:
                self._bar.update(whole - self._bar.n)
        elif self.enabled and time.monotonic() - self._last >= 5:
            self._last = time.monotonic()
            pct = 100 * self.done / self.total if self.total else 100.0
            click.echo(f"scoring: {self.done:.0f}/{self.total} rows ({pct:.0f}%)", err=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

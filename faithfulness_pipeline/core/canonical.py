"""The one form in which text is compared, keyed and judged: Unicode NFC, without the characters that draw
nothing. Text that looks the same is then the same text: a Korean answer typed in decomposed Hangul (NFD, as
macOS file names and some editors write it) is judged as its composed form, and a zero-width space inside a
word does not make a claim unsupported. Only the judge's view of a row takes this form; the row's own columns
are written back exactly as they came.
"""

from __future__ import annotations

from typing import Final

import polars as pl

#: Zero-width space, word joiner, byte-order mark (zero-width no-break space) and soft hyphen: invisible in a
#: rendered answer, and splitting the word they sit in for a model or a rule. The zero-width joiner and
#: non-joiner are kept: they change how emoji and some scripts render.
INVISIBLE: Final = "[\u200b\u2060\ufeff\u00ad]"


def canonical(text: pl.Expr) -> pl.Expr:
    """``text`` (a string column) in its canonical form; null stays null."""
    return text.str.normalize("NFC").str.replace_all(INVISIBLE, "")


def canonical_each(texts: pl.Expr) -> pl.Expr:
    """Every string of ``texts`` (a list-of-strings column) in its canonical form."""
    return texts.list.eval(canonical(pl.element()))

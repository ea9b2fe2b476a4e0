"""Content hashes: stable row keys for tables that carry no id column."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import polars as pl


def content_key(question: str | None, answer: str | None, context: Sequence[str]) -> str:
    """A 16-hex-digit key from what is judged; the same row content gives the same key in every run."""
    payload = json.dumps([question, answer, list(context)], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


#: Exactly the characters of Python's ``str.isspace()`` (checked by a test), so that a blank test done by
#: polars over a whole column agrees with ``not text.strip()`` on every row.
PYTHON_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_BLANK_PATTERN = "^[" + "".join(f"\\x{{{ord(c):x}}}" for c in PYTHON_WHITESPACE) + "]*$"


def is_blank(text: pl.Expr) -> pl.Expr:
    """True where ``text`` is null or ``not text.strip()`` in Python (polars' own whitespace set differs)."""
    return text.is_null() | text.str.contains(_BLANK_PATTERN)

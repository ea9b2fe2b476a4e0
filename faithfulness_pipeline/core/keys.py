"""Content hashes: stable row keys for tables that carry no id column."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence


def content_key(question: str | None, answer: str | None, context: Sequence[str]) -> str:
    """A 16-hex-digit key from what is judged; the same row content gives the same key in every run."""
    payload = json.dumps([question, answer, list(context)], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]

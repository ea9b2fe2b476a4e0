"""Result keys: what a stored result is found by.

A key is SHA-256 over the settings that change a judge's results (``core.port.ResultScope``: step,
prompt version, model, endpoint, output-changing parameters) and then over one item's content, cut to 16
bytes. Never a prompt, never an API key: none of the hashed fields contain the secret. Keys of whole rows
(``store.rows``) hash a row's texts straight from the Arrow buffers of its columns (:func:`spans`,
:func:`list_spans`): no Python object per row on a warm re-run's hot path.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from typing import Final

import polars as pl
import pyarrow as pa

from faithfulness_pipeline.core.keys import is_blank
from faithfulness_pipeline.core.port import ExtractItem, ResultScope, VerdictItem


class KeyMaker:
    """Result keys: SHA-256 over fixed settings, then over one item's content fields, cut to 16 bytes.

    The content goes into the hash as one string: a header with the length (in code points) of every
    field, then the fields themselves, so no two different field sequences give the same bytes, and a
    row costs one ``encode`` and one ``update`` however many passages it has (a warm re-run hashes
    every row's passages again: this is its hot path). SHA-256 because CPUs hash it in hardware.
    """

    def __init__(self, *settings: str | None) -> None:
        self._base = hashlib.sha256(b"fp-result-v2")
        self._base.update(_content(settings))

    def key(self, *fields: str | None) -> bytes:
        h = self._base.copy()
        h.update(_content(fields))
        return h.digest()[:16]

    def key_of_lists(self, *groups: Sequence[str] | str | None) -> bytes:
        """A key over fields that are themselves sequences of strings (claims, passages)."""
        return self._digest(_list_content(groups))

    def keys_of_pairs(self, pairs: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[bytes]:
        """``key_of_lists(a, b)`` for every ``(a, b)``, on this thread: splitting a call's batch (512
        items) over two threads was slower (0.055 vs 0.046 s per 5,000 items), as for the columns."""
        return self._digests([_pair_content(a, b) for a, b in pairs])

    def keys_of_spans(self, first: _Spans, second: _Spans | None = None) -> list[bytes]:
        """One key per row over the row's bytes in ``first`` then (if given) its bytes in ``second``."""
        data, rows = first
        base = self._base
        out: list[bytes] = []
        if second is None:
            for a, b in rows:
                h = base.copy()
                h.update(data[a:b])
                out.append(h.digest()[:16])
            return out
        tail_data, tail_spans = second
        piece = _GIL_PIECE
        for (a, b), (c, d) in zip(rows, tail_spans, strict=True):
            h = base.copy()
            h.update(data[a:b])
            while d - c > piece:
                h.update(tail_data[c : c + piece])
                c += piece
            h.update(tail_data[c:d])
            out.append(h.digest()[:16])
        return out

    def _digest(self, data: bytes) -> bytes:
        return self._digests([(b"", data)])[0]

    def _digests(self, data: Sequence[tuple[bytes, bytes]]) -> list[bytes]:
        # Pieces under _GIL_PIECE: these keys are made on the event loop (per-item calls), which must not
        # give the GIL away to the token-counting thread and wait up to a switch interval to get it back.
        piece = _GIL_PIECE
        out: list[bytes] = []
        view = memoryview
        for head, body in data:
            h = self._base.copy()
            h.update(head)
            if len(body) <= piece:
                h.update(body)
            else:
                whole = view(body)
                for start in range(0, len(body), piece):
                    h.update(whole[start : start + piece])
            out.append(h.digest()[:16])
        return out


#: hashlib lets go of the GIL while it hashes 2 KiB or more, and every time it does, taking the GIL back
#: waits on whichever thread has it: with other threads busy, that costs more than the hashing itself.
_GIL_PIECE: Final = 2047


#: A string column's UTF-8 buffer and each row's (start, end) in it.
_Spans = tuple[memoryview, list[tuple[int, int]]]


def spans(texts: pl.Series) -> _Spans:
    """The UTF-8 buffer of a string column and each row's (start, end) in it."""
    arr = texts.rechunk().to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    if arr.null_count:
        raise ValueError("content to hash must not be null")
    _, offsets_buf, data_buf = arr.buffers()
    offsets = memoryview(offsets_buf).cast("q")[arr.offset : arr.offset + len(arr) + 1].tolist()
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    return data, list(itertools.pairwise(offsets))


def list_spans(lists: pl.Series) -> _Spans:
    """The UTF-8 buffer of a list-of-strings column and, for each row, the (start, end) of all its
    strings, which Arrow lays out back to back: no joined copy of a row's texts. No null row or text."""
    arr = lists.rechunk().to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = arr.cast(pa.large_list(pa.large_string()))
    if arr.null_count or arr.values.null_count:
        raise ValueError("content to hash must not be null")
    texts = arr.values
    if len(texts) == 0:
        return memoryview(b""), [(0, 0)] * len(arr)
    _, offsets_buf, data_buf = texts.buffers()
    starts = memoryview(offsets_buf).cast("q")[texts.offset : texts.offset + len(texts) + 1]
    rows = memoryview(arr.buffers()[1]).cast("q")[arr.offset : arr.offset + len(arr) + 1].tolist()
    data = memoryview(data_buf) if data_buf is not None else memoryview(b"")
    return data, [(starts[i], starts[j]) for i, j in itertools.pairwise(rows)]


def _pair_content(first: Sequence[str], second: Sequence[str]) -> tuple[bytes, bytes]:
    """``_list_content((first, second))`` as (header, body), without its generality: the verdict step's
    hot path, hashed in two updates so that the ~4 KiB body is never copied."""
    body = "\x00".join([*first, *second])
    if body.count("\x00") != max(len(first) + len(second) - 1, 0):
        whole = _list_content((first, second))
        return b"", whole
    try:
        data = body.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: the same bytes the slower error handler gives
        data = body.encode("utf-8", "surrogatepass")
    return f"l{len(first)},l{len(second)}\x01".encode(), data


def _list_content(groups: Sequence[Sequence[str] | str | None]) -> bytes:
    # Texts joined by NUL with the number of texts per group in the header: unambiguous as long as no
    # text holds a NUL, which one scan of the joined text checks; otherwise every length goes in.
    shape = ",".join(["n" if g is None else "s" if isinstance(g, str) else f"l{len(g)}" for g in groups])
    texts = [t for g in groups if g is not None for t in ((g,) if isinstance(g, str) else g)]
    body = "\x00".join(texts)
    if body.count("\x00") != max(len(texts) - 1, 0):
        shape = "L" + ",".join(str(len(t)) for t in texts) + ";" + shape
    return (shape + "\x01" + body).encode("utf-8", "surrogatepass")


def _content(fields: Sequence[str | None]) -> bytes:
    head = ",".join(["n" if f is None else str(len(f)) for f in fields])
    body = "".join([f for f in fields if f is not None])
    return (head + "\x00" + body).encode("utf-8", "surrogatepass")



class ContentKeys:
    """The result keys of step items under one :class:`~faithfulness_pipeline.core.port.ResultScope`: one
    definition for the run memory, the store and the row cache."""

    def __init__(self, scope: ResultScope) -> None:
        self._extract = KeyMaker(*scope.extract)
        self._verdict = KeyMaker(*scope.verdict)
        self.rows = KeyMaker(*scope.row)

    def extract(self, items: Sequence[ExtractItem]) -> dict[str, bytes]:
        """Item id -> key, for the items that have something to extract from."""
        make = self._extract.key
        return {it.id: make(question_of(it.question), it.answer) for it in items if it.answer and it.answer.strip()}

    def verdict(self, items: Sequence[VerdictItem]) -> dict[str, bytes]:
        """Item id -> key, for the items with claims and passages."""
        keyed = [it for it in items if it.claims and it.context]
        pairs = [(it.claims, it.context) for it in keyed]
        return dict(zip([it.id for it in keyed], self._verdict.keys_of_pairs(pairs), strict=True))


def question_of(question: str | None) -> str | None:
    """A question as the keys see it: a blank question is no question."""
    return question if question is not None and question.strip() else None


def questions_of(questions: pl.Series) -> pl.Series:
    """:func:`question_of` over a column."""
    return questions.to_frame("q").select(
        pl.when(is_blank(pl.col("q"))).then(pl.lit(None, dtype=pl.String)).otherwise(pl.col("q"))
    ).to_series()

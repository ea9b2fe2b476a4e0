"""Which files an input names, and how each is read: a file, a folder (every ``*.parquet``, ``*.jsonl`` /
``*.ndjson`` and ``*.csv`` below it) or a glob, local or an object-store URI; the format from the suffix.
A local walk follows each real folder once and names each real file once (symlinks), and a compressed table
is refused by name. Reading them is ``tables.read``'s.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from faithfulness_pipeline.core.errors import InputError
from faithfulness_pipeline.tables.storage import Place, StorageError, describe

log = logging.getLogger(__name__)

#: Input formats by file suffix; a file named explicitly with another suffix is read as Parquet.
FORMATS: Final = {".parquet": "Parquet", ".jsonl": "JSON Lines", ".ndjson": "JSON Lines", ".csv": "CSV"}
PARQUET: Final = "Parquet"



#: Compression suffixes of text files, by the program that makes them. Inputs are read uncompressed (Parquet
#: compresses itself): such a file is refused by name rather than read as Parquet or skipped in a folder.
COMPRESSED: Final = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd", ".zip": "zip"}


def compression_of(path: str) -> str | None:
    """The compression ``path``'s suffix names (``gzip`` for ``day.jsonl.gz``), or None."""
    return COMPRESSED.get(os.path.splitext(path)[1].lower())


def refuse_compressed(paths: Iterable[str]) -> None:
    """An :class:`InputError` naming the first compressed file among ``paths`` and how to read it."""
    for path in paths:
        kind = compression_of(path)
        if kind is not None:
            raise InputError(
                f"{path!r} is {kind}-compressed, and inputs are read uncompressed: decompress it first "
                f"({'unzip' if kind == 'zip' else kind + ' -d'} {os.path.basename(path)!r}), or write the table as "
                "Parquet, which compresses itself"
            )


def input_format(path: str) -> str:
    """``Parquet``, ``JSON Lines`` or ``CSV``, from the suffix of ``path``."""
    return FORMATS.get(os.path.splitext(path)[1].lower(), PARQUET)


def _is_input(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in FORMATS


def is_uri(spec: str) -> bool:
    return "://" in spec and not spec.startswith("file://")


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regular expression over whole paths: ``*`` and ``?`` stay within one folder, ``**``
    crosses folders (as ``glob.glob(recursive=True)``)."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _remote_inputs(text: str) -> list[str]:
    try:
        if glob.has_magic(text):
            # An object store has no globbing: list below the pattern's fixed folder and match every name.
            head = text[: min(text.index(c) for c in "*?[" if c in text)].rsplit("/", 1)[0]
            if head.endswith(":/"):
                raise InputError(f"the pattern {text!r} must name its bucket (no wildcard before the first /)")
            base = Place.of(head)
            pattern = _glob_regex(base.uri + text[len(head) :])
            files = [p.uri for p in base.files() if pattern.match(p.uri)]
            if not files:
                raise InputError(f"the pattern {text!r} matches no files")
            return files
        place = Place.of(text)
        if place.is_dir():
            files = [p.uri for p in place.files() if _is_input(p.name)]
            if not files:
                raise InputError(f"{text!r} holds no *.parquet, *.jsonl, *.ndjson or *.csv files")
            return files
        if place.is_file():
            return [place.uri]
    except StorageError as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"cannot list {text!r}: {describe(exc)}") from None
    raise InputError(f"input {text!r} does not exist (give a Parquet, JSON Lines or CSV object, a prefix or a glob)")


def resolve_inputs(spec: str | os.PathLike[str], *, compressed: bool = False) -> list[str]:
    """The input files that ``spec`` names, sorted, so runs are reproducible. Each real file comes once: a
    symlinked folder is followed but never into a folder already walked (a link to ``.`` cannot loop), and two
    names of one file (``latest.jsonl -> 2026-11-25.jsonl``) are read once, under the name that is not a link.
    A compressed file is refused unless ``compressed`` (a reader that can tell a compressed span export from a
    compressed table, ``traces.staging``, refuses the tables itself)."""
    if compressed:
        return _resolve(os.fspath(spec), lambda paths: None)
    return _resolve(os.fspath(spec), refuse_compressed)


def _resolve(text: str, refuse: Callable[[Iterable[str]], None]) -> list[str]:
    if is_uri(text):
        return _remote_inputs(text)
    text = text.removeprefix("file://")
    path = Path(text)
    if path.is_dir():
        found = list(_walk(text))
        # A compressed table in the folder is named, not skipped: its rows would be missing without a word.
        packed = [p for p in found if _is_input(os.path.splitext(os.path.basename(p))[0])]
        refuse(packed)
        files = _each_file_once([*(p for p in found if _is_input(os.path.basename(p))), *packed])
        if not files:
            raise InputError(f"directory {text!r} holds no *.parquet, *.jsonl, *.ndjson or *.csv files")
        return files
    if path.is_file():
        refuse([str(path)])
        return [str(path)]
    if glob.has_magic(text):
        files = _each_file_once(_matches(text))
        refuse(files)
        if not files:
            raise InputError(f"the pattern {text!r} matches no files")
        return files
    raise InputError(
        f"input {text!r} does not exist (give a Parquet, JSON Lines or CSV file, a directory or a glob)"
    )


def _walk(root: str, depth: int | None = None) -> Iterator[str]:
    """Every file below ``root`` (at most ``depth`` folders down), symlinked folders followed, each real folder
    entered once. Folders that are not links go first at every level, so a folder reached both ways is walked
    under its own name."""
    seen: set[tuple[int, int]] = set()
    for folder, folders, names in os.walk(root, followlinks=True):
        try:
            info = os.stat(folder)
        except OSError:  # a dangling link, or a folder removed under the walk: nothing to read there
            folders[:] = []
            continue
        if (info.st_dev, info.st_ino) in seen:
            folders[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        below = os.path.relpath(folder, root)
        if depth is not None and (1 if below == "." else below.count(os.sep) + 2) >= depth:
            folders[:] = []
        folders.sort(key=lambda name: (os.path.islink(os.path.join(folder, name)), name))
        yield from (os.path.join(folder, name) for name in names)


def _matches(pattern: str) -> Iterator[str]:
    """The files a local glob names, found by a loop-safe walk of its fixed folder rather than by
    ``glob.glob``, which follows a folder linked to its parent for ever. As with ``glob``, a wildcard does not
    match a name that starts with a dot (where our temporary files live)."""
    fixed = pattern[: min(pattern.index(c) for c in "*?[" if c in pattern)]
    head = fixed.rsplit("/", 1)[0] if "/" in fixed else ""
    rest = pattern[len(head) + 1 :] if head or pattern.startswith("/") else pattern
    root = head or ("/" if pattern.startswith("/") else ".")
    depth = None if "**" in rest else rest.count("/") + 1
    regex = _glob_regex(rest)
    for found in _walk(root, depth):
        relative = os.path.relpath(found, root)
        hidden = any(part.startswith(".") for part in relative.split(os.sep))
        if regex.match(relative) and not (hidden and "/." not in "/" + rest):
            yield found if head or pattern.startswith("/") else relative


def _each_file_once(paths: Iterable[str]) -> list[str]:
    """``paths`` that are files, one name per real file (the first that is not a link, else the first), sorted."""
    kept: dict[tuple[int, int], str] = {}
    for candidate in sorted(paths, key=lambda p: (os.path.islink(p), p)):
        try:
            info = os.stat(candidate)
        except OSError:  # a dangling link
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        key = (info.st_dev, info.st_ino)
        if key in kept:
            log.info("input: %s is %s under another name: read once", candidate, kept[key])
            continue
        kept[key] = candidate
    return sorted(kept.values())

"""Why a SQLite file cannot be opened. SQLite says only "unable to open database file" whatever the cause;
the user needs to know which of the usual causes it is, to fix it."""

from __future__ import annotations

import os
from pathlib import Path


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def open_failure(path: Path | str, error: BaseException) -> str:
    """``error`` (SQLite's, or the OS's) with the cause that can be seen from outside: a folder where the file
    should be, a read-only filesystem, a folder this user may not write (the journal and WAL files are made
    beside the database), or a file it may not read."""
    path = Path(path)
    folder = _existing(path.parent)
    reason = None
    if path.is_dir():
        reason = f"{str(path)!r} is a folder: name a file in it, e.g. {str(path / 'store.sqlite')!r}"
    elif folder.is_dir() and os.statvfs(folder).f_flag & os.ST_RDONLY:
        reason = f"{str(folder)!r} is on a read-only filesystem: put the database on a writable one"
    elif folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        reason = (f"this user may not write in {str(folder)!r} (SQLite makes its journal beside the database): "
                  "put it in a folder you can write")
    elif path.is_file() and not os.access(path, os.R_OK | os.W_OK):
        reason = f"this user may not read and write {str(path)!r}"
    return f"{error} ({reason})" if reason else str(error)

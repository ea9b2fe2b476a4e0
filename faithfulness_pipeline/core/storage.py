"""Where tables live: a local folder or an object store (``s3://``, ``gs://``, ``abfs://``), one code path.

Every file the warehouse, the report and the CLI's outputs touch goes through :class:`Place`, a path in a
pyarrow filesystem: ``pyarrow.fs.FileSystem.from_uri`` picks S3, Google Cloud Storage or Azure from the
URI, and their credentials come from the usual environment and profile chain of each (for S3: the
``AWS_*`` variables, ``~/.aws``, an instance role; ``AWS_ENDPOINT_URL`` for an S3-compatible endpoint).
Nothing here logs or formats a credential: a place is shown by its URI, which holds none.

Replacing a file is atomic everywhere (:meth:`Place.replace`): the new bytes go to a staging file of a name
no reader looks for, and only a complete one takes the target's place (``os.replace`` on a local disk; on
an object store a server-side copy, which makes the new object appear whole, then the staging object is
deleted). A reader sees the previous file or the new one, never half of one; a writer killed midway
leaves the previous file as it was, and at most a staging object behind (swept by the next write of the
same place, once it is older than a day).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.fs as pafs

#: Object-store schemes (pyarrow names Azure's abfs / abfss); anything else is a local path.
REMOTE_SCHEMES: Final = ("s3", "gs", "gcs", "abfs", "abfss", "az")
#: Where staging files of a folder's writes go (a name no table glob matches: it starts with an underscore).
STAGING: Final = "_staging"
#: A staging file this old belongs to a writer that died: the next write in the same folder removes it.
STALE_STAGING_S: Final = 24 * 3600.0


def is_remote(spec: str | os.PathLike[str]) -> bool:
    """Whether ``spec`` is an object-store URI (``s3://...``)."""
    text = os.fspath(spec)
    return "://" in text and text.split("://", 1)[0].lower() in REMOTE_SCHEMES


@dataclass(frozen=True)
class Place:
    """A file or folder: ``fs`` and ``path`` as pyarrow sees it, ``uri`` as users write it."""

    fs: pafs.FileSystem
    path: str
    uri: str

    @staticmethod
    def of(spec: str | os.PathLike[str]) -> Place:
        """The place ``spec`` names: an object-store URI, else a local path (``~`` expanded, made absolute)."""
        text = os.fspath(spec)
        if is_remote(text):
            fs, path = pafs.FileSystem.from_uri(text)
            return Place(fs, path.rstrip("/"), text.rstrip("/"))
        local = str(Path(text.removeprefix("file://")).expanduser().resolve())
        return Place(pafs.LocalFileSystem(), local, local)

    @property
    def remote(self) -> bool:
        return not isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def local_path(self) -> Path:
        """This place as a local path; an object-store place has none."""
        if self.remote:
            raise ValueError(f"{self.uri} is in an object store, not on a local disk")
        return Path(self.path)

    def child(self, *parts: str) -> Place:
        tail = "/".join(p.strip("/") for p in parts if p)
        return Place(self.fs, f"{self.path}/{tail}", f"{self.uri}/{tail}")

    def parent(self) -> Place:
        return Place(self.fs, self.path.rsplit("/", 1)[0], self.uri.rsplit("/", 1)[0])

    def exists(self) -> bool:
        return bool(self._info().type != pafs.FileType.NotFound)

    def is_file(self) -> bool:
        return bool(self._info().type == pafs.FileType.File)

    def is_dir(self) -> bool:
        return bool(self._info().type == pafs.FileType.Directory)

    def size(self) -> int:
        return int(self._info().size or 0)

    def files(self, suffix: str = "") -> list[Place]:
        """The files below this folder whose names end with ``suffix``, sorted; none if it does not exist.
        Staging files are never among them."""
        if not self.is_dir():
            return []
        found = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        out = []
        for info in found:
            relative = info.path[len(self.path) :].lstrip("/")
            if info.type == pafs.FileType.File and info.path.endswith(suffix) and STAGING not in relative.split("/"):
                out.append(self.child(relative))
        return sorted(out, key=lambda p: p.path)

    def open_input(self) -> pa.NativeFile:
        return self.fs.open_input_file(self.path)

    def read_text(self) -> str:
        with self.fs.open_input_stream(self.path) as stream:
            return bytes(stream.read()).decode("utf-8")

    def write_bytes(self, data: bytes) -> None:
        """Replaces this file with ``data`` (atomically, as :meth:`replace`)."""
        with self.replace() as stream:
            stream.write(data)

    def delete(self) -> None:
        """Removes this file or folder (and all below it); nothing when it is not there."""
        info = self._info()
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self.path)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(self.path)

    @contextmanager
    def replace(self) -> Iterator[pa.NativeFile]:
        """A stream whose bytes become this file when the block ends without an error, atomically (see the
        module docstring); on an error the file stays as it was and the staging bytes are removed."""
        staging = self.parent().child(STAGING, f"{self.name}.{os.getpid()}-{uuid.uuid4().hex[:12]}")
        self.fs.create_dir(staging.parent().path, recursive=True)
        _sweep(staging.parent())
        try:
            with self.fs.open_output_stream(staging.path) as stream:
                yield stream
            if self.remote:
                # A server-side copy makes the new object appear whole under its name.
                self.fs.copy_file(staging.path, self.path)
                self.fs.delete_file(staging.path)
            else:
                with open(staging.path, "rb") as handle:
                    os.fsync(handle.fileno())
                os.replace(staging.path, self.path)
        except BaseException:
            with contextlib.suppress(OSError):  # an unreachable store: the sweep of a later write removes it
                staging.delete()
            raise

    def _info(self) -> pafs.FileInfo:
        info: pafs.FileInfo = self.fs.get_file_info(self.path)
        return info


def _sweep(folder: Place) -> None:
    """Removes staging files older than :data:`STALE_STAGING_S`: their writers died (SIGKILL skips cleanup)."""
    now = time.time()
    for info in folder.fs.get_file_info(pafs.FileSelector(folder.path, allow_not_found=True)):
        mtime = info.mtime.timestamp() if info.mtime is not None else now
        if info.type == pafs.FileType.File and now - mtime > STALE_STAGING_S:
            with contextlib.suppress(OSError):  # another writer swept it first
                folder.fs.delete_file(info.path)

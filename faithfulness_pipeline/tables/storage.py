"""Where tables live: a local folder or an object store (``s3://``, ``gs://``, ``abfs://``), one code path.

Every file the warehouse, the report and the CLI's outputs touch goes through :class:`Place`, a path in a
pyarrow filesystem: ``pyarrow.fs.FileSystem.from_uri`` picks S3, Google Cloud Storage or Azure from the
URI, and their credentials come from the usual environment and profile chain of each (for S3: the
``AWS_*`` variables, ``~/.aws``, an instance role; ``AWS_ENDPOINT_URL`` for an S3-compatible endpoint).
``az://container/path`` is Azure too, with the account from ``AZURE_STORAGE_ACCOUNT_NAME`` (pyarrow itself
spells Azure only ``abfs://container@account.dfs.core.windows.net/path``).

Nothing here logs or formats a credential: a place is shown by its URI, and a URI that carries one
(``s3://key:secret@bucket``) is refused, its secret left out of the message. :func:`scrub` removes the
secrets of the environment from any text (an error of the store) before it is shown.

Replacing a file is atomic everywhere (:meth:`Place.replace`): the new bytes go to a staging file beside it
(``.<name>.<host>-<pid>-<random>.tmp``: hidden, so no reader or table glob takes it for data), and only a
complete one takes the target's place (``os.replace`` on a local disk; on an object store a server-side
copy, which makes the new object appear whole, then the staging object is deleted). A reader sees the
previous file or the new one, never half of one; a writer killed midway leaves the previous file as it
was, and at most a staging file behind, which the next write in the same folder removes once its writer
is known dead (same host, no such process) or it is older than a day.
"""

from __future__ import annotations

import functools
import hashlib
import os
import posixpath
import re
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

#: Object-store schemes (pyarrow names Azure's abfs / abfss; az is fsspec's and polars' name); anything else
#: is a local path.
REMOTE_SCHEMES: Final = ("s3", "gs", "gcs", "abfs", "abfss", "az")
#: Folders of files in the making (a run's shards): never listed as data by :meth:`Place.files`.
STAGING: Final = "_staging"
#: A staging file this old belongs to a writer that died: the next write in the same folder removes it.
STALE_STAGING_S: Final = 24 * 3600.0
#: Environment variables whose values are secrets (never shown, removed from any text by :func:`scrub`).
SECRET_VARIABLES: Final = (
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_STORAGE_CONNECTION_STRING",
)
#: Bytes copied per read when a local file is uploaded (bounded memory for any size).
COPY_CHUNK: Final = 8 * 1024 * 1024
#: Whole-object reads tried before giving up on an object that changes under every one of them.
_READ_ATTEMPTS: Final = 5
#: How pyarrow's S3 client words a ranged read that starts past the object's end (an empty version).
_RANGE_NOT_SATISFIABLE: Final = "HTTP status 416"

# A host's staging files carry its id: a later writer on the same host can tell a dead writer's file
# (no such process) from a live one's, and leaves other hosts' files (a shared disk, a bucket) to age out.
_HOST: Final = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_STAGING_NAME: Final = re.compile(r"^\.(?P<name>.+)\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{12}\.tmp$")


class StorageError(ValueError):
    """A place that cannot be named (an unknown scheme, credentials in the URI, a missing account)."""


def is_remote(spec: str | os.PathLike[str]) -> bool:
    """Whether ``spec`` is an object-store URI (``s3://...``)."""
    text = os.fspath(spec)
    return "://" in text and text.split("://", 1)[0].lower() in REMOTE_SCHEMES


def scrub(text: str) -> str:
    """``text`` without the value of any secret variable of the environment (an error of the store, a
    message built from one): what we show never carries a credential, whatever a library put in it."""
    for name in SECRET_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 4:  # a one-letter value would blank out every such letter of the text
            text = text.replace(value, "***")
    return text


def describe(exc: BaseException) -> str:
    """One line for an error of the store, scrubbed: its own sentence, without the library's line breaks."""
    return scrub(" ".join(str(exc).split()) or type(exc).__name__)


def _shown(text: str) -> str:
    """``text`` as a message may show it: without the user info and query of a URI (where credentials go)."""
    parts = urlsplit(text)
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}{parts.path}"


def _env_key() -> tuple[tuple[str, str], ...]:
    # The filesystem of a bucket depends on the environment (endpoint, region, keys): a changed variable
    # (another profile, a test's endpoint) gets a filesystem of its own.
    prefixes = ("AWS_", "AZURE_", "GOOGLE_", "GCS_", "STORAGE_EMULATOR_HOST")
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(prefixes)))


@functools.lru_cache(maxsize=64)
def _filesystem(scheme: str, netloc: str, env: tuple[tuple[str, str], ...]) -> pafs.FileSystem:
    """One filesystem per bucket (``from_uri`` asks an S3 endpoint for the bucket's region: once, not per file)."""
    del env  # only the cache key
    if scheme == "az":
        account = os.environ.get("AZURE_STORAGE_ACCOUNT_NAME")
        if not account:
            raise StorageError(
                f"az://{netloc} names no storage account: set AZURE_STORAGE_ACCOUNT_NAME, or write the URI as "
                f"abfs://{netloc}@ACCOUNT.dfs.core.windows.net/..."
            )
        return pafs.AzureFileSystem(account_name=account)
    fs, _ = pafs.FileSystem.from_uri(f"{scheme}://{netloc}/")
    return fs


@dataclass(frozen=True)
class Place:
    """A file or folder: ``fs`` and ``path`` as pyarrow sees it, ``uri`` as users write it (local: the
    absolute path)."""

    fs: pafs.FileSystem
    path: str
    uri: str

    @staticmethod
    def of(spec: str | os.PathLike[str] | Place) -> Place:
        """The place ``spec`` names: an object-store URI, else a local path (``~`` expanded, made absolute)."""
        if isinstance(spec, Place):
            return spec
        text = os.fspath(spec)
        if not is_remote(text):
            if "://" in text and not text.startswith("file://"):
                raise StorageError(
                    f"{_shown(text)}: unknown storage scheme (give a local path or an s3://, gs://, abfs:// or "
                    f"az:// URI)"
                )
            local = str(Path(text.removeprefix("file://")).expanduser().resolve())
            return Place(pafs.LocalFileSystem(), local, local)
        parts = urlsplit(text)
        if parts.username is not None or parts.password is not None:
            raise StorageError(
                f"{_shown(text)}: a URI with credentials in it is refused (they would show in logs and "
                f"messages); give them by the environment or a profile"
            )
        if parts.query or parts.fragment:
            raise StorageError(
                f"{_shown(text)}: options in a storage URI are not supported; set them in the environment "
                f"(AWS_REGION, AWS_ENDPOINT_URL, ...)"
            )
        scheme = parts.scheme.lower()
        if not parts.netloc:
            raise StorageError(f"{_shown(text)}: the URI names no bucket")
        try:
            fs = _filesystem(scheme, parts.netloc, _env_key())
        except (pa.ArrowInvalid, OSError) as exc:
            raise StorageError(f"{_shown(text)}: {describe(exc)}") from None
        inner = parts.path.strip("/")
        # Azure's abfs URIs name the container as user info of the host; pyarrow's paths start with it.
        bucket = parts.netloc.split("@", 1)[0] if scheme in ("abfs", "abfss") else parts.netloc
        path = f"{bucket}/{inner}" if inner else bucket
        uri = f"{scheme}://{parts.netloc}/{inner}" if inner else f"{scheme}://{parts.netloc}"
        return Place(fs, path, uri)

    def __repr__(self) -> str:
        return f"Place({self.uri!r})"  # never the filesystem's, which could hold what it was built with

    __str__ = __repr__

    @property
    def remote(self) -> bool:
        return not isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def scheme(self) -> str:
        """``s3``, ``gs``, ... or ``file`` for a local place."""
        return self.uri.split("://", 1)[0] if self.remote else "file"

    def local_path(self) -> Path:
        """This place as a local path; an object-store place has none."""
        if self.remote:
            raise StorageError(f"{self.uri} is in an object store, not on a local disk")
        return Path(self.path)

    def child(self, *parts: str) -> Place:
        """The place ``parts`` below this one (each may hold ``/``; ``.`` and ``..`` are refused, so a name
        never leads outside)."""
        names = [name for part in parts for name in part.split("/") if name]
        if not names or any(name in (".", "..") for name in names):
            raise StorageError(f"{'/'.join(parts)!r} is no name of a place below {self.uri}")
        tail = "/".join(names)
        return Place(self.fs, f"{self.path.rstrip('/')}/{tail}", f"{self.uri.rstrip('/')}/{tail}")

    def parent(self) -> Place:
        """The folder of this place; a bucket (or ``/``) is its own parent."""
        if self.remote:
            if "/" not in self.path:
                return self
            return Place(self.fs, self.path.rsplit("/", 1)[0], self.uri.rsplit("/", 1)[0])
        folder = posixpath.dirname(self.path)
        return Place(self.fs, folder, folder)

    def exists(self) -> bool:
        return bool(self.info().type != pafs.FileType.NotFound)

    def is_file(self) -> bool:
        return bool(self.info().type == pafs.FileType.File)

    def is_dir(self) -> bool:
        return bool(self.info().type == pafs.FileType.Directory)

    def size(self) -> int:
        return int(self.info().size or 0)

    def mtime_ns(self) -> int:
        """When the file was last written (an object: uploaded), in ns since the epoch; 0 when unknown."""
        return int(self.info().mtime_ns or 0)

    def info(self) -> pafs.FileInfo:
        info: pafs.FileInfo = self.fs.get_file_info(self.path)
        return info

    def files(self, suffix: str = "") -> list[Place]:
        """The files below this folder whose names end with ``suffix``, sorted; none if it does not exist.
        Staging files (hidden names, ``_staging`` folders) are never among them."""
        if not self.is_dir():
            return []
        found = self.fs.get_file_info(pafs.FileSelector(self.path, recursive=True))
        out = []
        for info in found:
            relative = info.path[len(self.path) :].strip("/")
            names = relative.split("/")
            hidden = any(n == STAGING or n.startswith(".") for n in names)
            if info.type == pafs.FileType.File and relative and info.path.endswith(suffix) and not hidden:
                out.append(self.child(relative))
        return sorted(out, key=lambda p: p.path)

    def open_input(self) -> pa.NativeFile:
        """The file for random access (Parquet footers, row groups)."""
        return self.fs.open_input_file(self.path)

    def open_input_stream(self) -> pa.NativeFile:
        return self.fs.open_input_stream(self.path)

    def read_bytes(self) -> bytes:
        """The whole file, one version of it even while it is being replaced.

        A stream reads an object in several ranged requests, each of which may meet another version; this
        reads it in one request (one version) and checks the size the store gives before and after. A
        read sized on one version that meets an empty one is refused (416, range not satisfiable): read again."""
        if not self.remote:
            with self.fs.open_input_stream(self.path) as stream:
                return bytes(stream.read())
        for _ in range(_READ_ATTEMPTS):
            with self.fs.open_input_file(self.path) as handle:
                size = handle.size()
                try:
                    data = bytes(handle.read_at(size, 0)) if size else b""
                except OSError as exc:
                    if _RANGE_NOT_SATISFIABLE not in str(exc):
                        raise
                    continue
            if len(data) == size and self.size() == size:
                return data
        raise OSError(f"{self.uri} changed every time it was read ({_READ_ATTEMPTS} times)")

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")

    def write_bytes(self, data: bytes) -> None:
        """Replaces this file with ``data`` (atomically, as :meth:`replace`)."""
        with self.replace() as stream:
            stream.write(data)

    def write_text(self, text: str) -> None:
        self.write_bytes(text.encode("utf-8"))

    def put_file(self, local: str | os.PathLike[str]) -> None:
        """Replaces this file with a copy of the local file ``local`` (atomically, in bounded memory)."""
        with open(local, "rb") as source, self.replace() as stream:
            while chunk := source.read(COPY_CHUNK):
                stream.write(chunk)

    def get_file(self, local: str | os.PathLike[str]) -> None:
        """Copies this file to the local path ``local`` (in bounded memory)."""
        with self.fs.open_input_stream(self.path) as stream, open(local, "wb") as target:
            while chunk := stream.read(COPY_CHUNK):
                target.write(chunk)

    def copy_to(self, other: Place) -> None:
        """Copies this file to ``other`` in the same store (server-side on an object store)."""
        self.fs.copy_file(self.path, other.path)

    def delete(self) -> None:
        """Removes this file or folder (and all below it); nothing when it is not there."""
        info = self.info()
        if info.type == pafs.FileType.Directory:
            self.fs.delete_dir(self.path)
        elif info.type == pafs.FileType.File:
            self.fs.delete_file(self.path)

    def staging_sibling(self) -> Place:
        """A fresh name beside this file for its next version: hidden, and unique to this writer."""
        return self.parent().child(f".{self.name}.{_HOST}-{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp")

    def promote(self, staging: Place) -> None:
        """Makes the complete file ``staging`` (a :meth:`staging_sibling`) this file, atomically: a reader
        sees the previous file or this one. ``staging`` is gone afterwards."""
        if self.remote:
            # A server-side copy makes the new object appear whole under its name; a rename does not exist.
            self.fs.copy_file(staging.path, self.path)
            with suppress(OSError):  # the new file is in place; a later write's sweep removes the leftover
                self.fs.delete_file(staging.path)
            return
        with open(staging.path, "rb") as handle:
            os.fsync(handle.fileno())  # the bytes are on disk before the name points at them
        os.replace(staging.path, self.path)
        _fsync_dir(self.parent().path)

    @contextmanager
    def replace(self) -> Iterator[pa.NativeFile]:
        """A stream whose bytes become this file when the block ends without an error, atomically (see the
        module docstring); on an error the file stays as it was and the staging bytes are removed."""
        staging = self.staging_sibling()
        if not self.remote:
            self.fs.create_dir(staging.parent().path, recursive=True)  # an object store has no folders to make
        sweep_staging(self.parent())
        try:
            with self.fs.open_output_stream(staging.path) as stream:
                yield stream
            self.promote(staging)
        except BaseException:
            with suppress(OSError):  # an unreachable store: the sweep of a later write removes it
                staging.delete()
            raise


def _fsync_dir(folder: str) -> None:
    """Makes a rename in ``folder`` durable (a crash right after it cannot bring the old name back)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a folder; the rename itself is still atomic
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: alive as far as we can tell
    return True


def sweep_staging(folder: Place, older_than_s: float = STALE_STAGING_S) -> list[Place]:
    """Removes staging files in ``folder`` whose writers died (SIGKILL skips cleanup): those of this host
    whose process is gone, and any older than ``older_than_s``. Returns what it removed."""
    now = time.time()
    removed = []
    try:
        found = folder.fs.get_file_info(pafs.FileSelector(folder.path, allow_not_found=True))
    except OSError:
        return []  # the folder is not listable (a file, an unreachable store): the write itself will say
    for info in found:
        match = _STAGING_NAME.match(info.base_name)
        if info.type != pafs.FileType.File or match is None:
            continue
        age = now - info.mtime.timestamp() if info.mtime is not None else 0.0
        dead = match["host"] == _HOST and int(match["pid"]) != os.getpid() and not _alive(int(match["pid"]))
        if dead or age > older_than_s:
            try:
                folder.fs.delete_file(info.path)
            except OSError:
                continue  # another writer swept it first
            removed.append(folder.child(info.base_name))
    return removed

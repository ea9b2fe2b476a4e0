"""The output files of one run: checked before anything is paid for, written to temporaries, and committed
together (every output replaced, or none).

A run that fails at its end (a full disk, a file-size limit, a target that turned into a folder) must not
leave one table new and another old: outputs are fsynced first, then each existing target is moved aside,
the new files are moved in, and only when all are in are the old ones deleted. A failure in between puts
the old files back.

An output in an object store (``s3://...``, ``tables.storage``) is written to a local temporary file, uploaded
whole to a hidden staging object beside its target once the run is complete, and only then copied into
place server-side (an object appears whole); its previous version is first copied aside, so a failure of
a later output puts it back. Before the run, its bucket must exist and take (and give up) a probe object.
"""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from faithfulness_pipeline.core.errors import FaithfulnessPipelineError, InputError
from faithfulness_pipeline.tables.inputs import is_uri
from faithfulness_pipeline.tables.storage import COPY_CHUNK, Place, StorageError, describe, is_remote, scrub
from faithfulness_pipeline.tables.write import real_target, sweep_orphans

_COUNTER = itertools.count()


class OutputError(FaithfulnessPipelineError):
    """An output cannot be written where it was asked for (a folder, no permission, a full disk, ...)."""


def _os_reason(exc: OSError) -> str:
    return scrub(exc.strerror) if exc.strerror else describe(exc)


def check_outputs(outputs: Mapping[str, str | None], inputs: Sequence[str]) -> None:
    """Refuses, before any request is sent, outputs that could not be written or that would overwrite
    each other or an input. ``outputs`` maps each option (``-o``, ``--claims-out``...) to its path."""
    seen: dict[Path | str, str] = {}
    input_files = {Path(p).resolve(): p for p in inputs if not is_uri(p)}
    input_objects = {p for p in inputs if is_uri(p)}
    for option, spec in outputs.items():
        if spec is None:
            continue
        if not spec.strip():
            raise InputError(f"{option} is empty: give a file path")
        if is_remote(spec):
            _check_object(option, spec, seen, input_objects)
            continue
        path = Path(spec).expanduser().resolve()
        if path in seen:
            raise InputError(
                f"{option} and {seen[path]} both name {spec!r}: one table would overwrite the other; "
                f"give each output its own path"
            )
        if path in input_files:
            raise InputError(f"{option} {spec!r} is also an input file: write the output to another path")
        seen[path] = option
        if path.is_dir():
            raise InputError(f"{option} {spec!r} is an existing folder: give a file path, e.g. {spec.rstrip('/')}/out")
        _probe(option, spec, path.parent)


def _check_object(option: str, spec: str, seen: dict[Path | str, str], inputs: set[str]) -> None:
    """The object-store side of :func:`check_outputs`: a valid URI, no clash, not a folder, a writable bucket."""
    try:
        place = Place.of(spec)
    except StorageError as exc:
        raise InputError(f"{option}: {exc}") from None
    if place.uri in seen:
        raise InputError(
            f"{option} and {seen[place.uri]} both name {place.uri!r}: one table would overwrite the other; "
            f"give each output its own path"
        )
    if place.uri in inputs:
        raise InputError(f"{option} {place.uri!r} is also an input file: write the output to another path")
    seen[place.uri] = option
    try:
        if place.parent() == place:
            raise InputError(f"{option} {place.uri!r} names a bucket: give an object key, e.g. {place.uri}/out")
        if place.is_dir():
            raise InputError(f"{option} {place.uri!r} is an existing folder: give a file path, e.g. {place.uri}/out")
        # A probe object beside the output: the bucket exists and this identity may write and delete there.
        probe = place.parent().child(f".fp-probe.{os.getpid()}-{next(_COUNTER)}.tmp")
        probe.write_bytes(b"")
        probe.delete()
    except OSError as exc:
        raise OutputError(f"cannot write {option} {place.uri!r}: {describe(exc)}") from None


def _probe(option: str, spec: str, folder: Path) -> None:
    """Creates (and removes) a file in the output's folder, or in its nearest existing ancestor when the
    folder is still to be made (nothing is created for good before the run): a folder that cannot take the
    output fails now."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(f"cannot write {option} {spec!r}: a file is in the way of its folder ({str(existing)!r})")
    try:
        probe = existing / f".fp-probe.{os.getpid()}-{next(_COUNTER)}.tmp"
        probe.touch(exist_ok=False)
        probe.unlink()
    except OSError as exc:
        raise OutputError(f"cannot write {option} {spec!r}: {_os_reason(exc)} (folder {str(existing)!r})") from None


@contextmanager
def committed_together(targets: Mapping[str, str]) -> Iterator[dict[str, Path]]:
    """Temporary paths beside each target (by option name; a local temporary file for an object-store
    target); they replace the targets together when the block finishes, or are all removed when it fails
    (any exception, KeyboardInterrupt included)."""
    tmps: dict[str, Path] = {}
    staged: list[Place] = []  # staging objects of object-store targets, removed whatever happens
    try:
        for option, target in targets.items():
            if is_remote(target):
                descriptor, name = tempfile.mkstemp(prefix=f".{Place.of(target).name}.", suffix=".tmp")
                os.close(descriptor)
                tmps[option] = Path(name)
                continue
            path = real_target(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            sweep_orphans(path)
            tmp = path.parent / f".{path.name}.{os.getpid()}-{next(_COUNTER)}.tmp"
            tmp.touch(exist_ok=False)
            tmps[option] = tmp
        yield tmps
        moves: list[tuple[Place, Place]] = []
        for option, target in targets.items():
            final = Place.of(target if is_remote(target) else str(real_target(target)))
            if final.remote:
                # Every upload completes before any target changes: the slow part cannot leave a mix.
                staging = final.staging_sibling()
                staged.append(staging)
                _upload(tmps[option], staging)
                moves.append((staging, final))
            else:
                with open(tmps[option], "rb") as handle:
                    os.fsync(handle.fileno())
                moves.append((Place.of(tmps[option]), final))
        _commit(moves)
    except OSError as exc:
        raise OutputError(_write_error(exc, targets)) from None
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)
        for staging in staged:
            with suppress(OSError):  # an unreachable store: a later write's sweep removes it
                staging.delete()


def _upload(local: Path, staging: Place) -> None:
    with open(local, "rb") as source, staging.fs.open_output_stream(staging.path) as stream:
        while chunk := source.read(COPY_CHUNK):
            stream.write(chunk)


def _write_error(exc: OSError, targets: Mapping[str, str]) -> str:
    where = exc.filename
    for option, target in targets.items():
        if where is not None and Path(str(where)).name.startswith(f".{Path(target).name}."):
            where = f"{option} {target!r}"
            break
    else:
        where = ", ".join(f"{o} {t!r}" for o, t in targets.items()) if where is None else repr(where)
    return f"cannot write {where}: {_os_reason(exc)}; nothing was written (free space, or write elsewhere)"


def _commit(moves: Sequence[tuple[Place, Place]]) -> None:
    """Puts each complete new file (staged) in its target's place; all of them, or (on an error) none."""
    for _, final in moves:
        if final.is_dir():  # a folder made there since the run began: refuse before anything is moved
            raise IsADirectoryError(21, "a folder is in the way", final.uri)
    backups: list[tuple[Place, Place]] = []  # (backup, final) of targets that existed
    placed: list[Place] = []
    try:
        for staged, final in moves:
            if final.exists():
                backups.append((_aside(final), final))
            final.promote(staged)
            placed.append(final)
    except BaseException:
        had = {final.uri for _, final in backups}
        for final in placed:
            if final.uri not in had:
                final.delete()
        for backup, final in backups:
            _restore(backup, final)
        raise
    for backup, _ in backups:
        with suppress(OSError):  # a leftover would be swept as an orphan by the next run
            backup.delete()


def _aside(final: Place) -> Place:
    """A copy of ``final``'s current version that :func:`_restore` can put back. A local file is renamed
    (it is replaced next anyway); an object is copied, so readers keep seeing it until its new version."""
    if final.remote:
        backup = final.staging_sibling()
        final.copy_to(backup)
        return backup
    path = final.local_path()
    backup_path = path.parent / f".{path.name}.{os.getpid()}-{next(_COUNTER)}.old.tmp"
    os.replace(path, backup_path)
    return Place.of(backup_path)


def _restore(backup: Place, final: Place) -> None:
    if final.remote:
        backup.copy_to(final)
        backup.delete()
    else:
        os.replace(backup.path, final.path)

"""The output files of one run: checked before anything is paid for, written to temporaries, and committed
together (every output replaced, or none).

A run that fails at its end (a full disk, a file-size limit, a target that turned into a folder) must not
leave one table new and another old: outputs are fsynced first, then each existing target is moved aside,
the new files are moved in, and only when all are in are the old ones deleted. A failure in between puts
the old files back.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from faithfulness_pipeline.core.errors import FaithfulnessPipelineError, InputError
from faithfulness_pipeline.core.io import is_uri, sweep_orphans

_COUNTER = itertools.count()


class OutputError(FaithfulnessPipelineError):
    """An output cannot be written where it was asked for (a folder, no permission, a full disk, ...)."""


def _os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def check_outputs(outputs: Mapping[str, str | None], inputs: Sequence[str]) -> None:
    """Refuses, before any request is sent, outputs that could not be written or that would overwrite
    each other or an input. ``outputs`` maps each option (``-o``, ``--claims-out``...) to its path."""
    seen: dict[Path, str] = {}
    input_files = {Path(p).resolve(): p for p in inputs if not is_uri(p)}
    for option, spec in outputs.items():
        if spec is None:
            continue
        if not spec.strip():
            raise InputError(f"{option} is empty: give a file path")
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
    """Temporary paths beside each target (by option name); they replace the targets together when the
    block finishes, or are all removed when it fails (any exception, KeyboardInterrupt included)."""
    tmps: dict[str, Path] = {}
    try:
        for option, target in targets.items():
            final = Path(target)
            final.parent.mkdir(parents=True, exist_ok=True)
            sweep_orphans(final)
            tmp = final.parent / f".{final.name}.{os.getpid()}-{next(_COUNTER)}.tmp"
            tmp.touch(exist_ok=False)
            tmps[option] = tmp
        yield tmps
        for tmp in tmps.values():
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
        _commit({option: (tmps[option], Path(target)) for option, target in targets.items()})
    except OSError as exc:
        raise OutputError(_write_error(exc, targets)) from None
    finally:
        for tmp in tmps.values():
            tmp.unlink(missing_ok=True)


def _write_error(exc: OSError, targets: Mapping[str, str]) -> str:
    where = exc.filename
    for option, target in targets.items():
        if where is not None and Path(str(where)).name.startswith(f".{Path(target).name}."):
            where = f"{option} {target!r}"
            break
    else:
        where = ", ".join(f"{o} {t!r}" for o, t in targets.items()) if where is None else repr(where)
    return f"cannot write {where}: {_os_reason(exc)}; nothing was written (free space, or write elsewhere)"


def _commit(moves: Mapping[str, tuple[Path, Path]]) -> None:
    for _, final in moves.values():
        if final.is_dir():  # a folder made there since the run began: refuse before anything is moved
            raise IsADirectoryError(21, "a folder is in the way", str(final))
    moved_aside: list[tuple[Path, Path]] = []  # (backup, final) of targets that existed
    placed: list[Path] = []
    try:
        for tmp, final in moves.values():
            if final.exists():
                backup = final.parent / f".{final.name}.{os.getpid()}-{next(_COUNTER)}.old.tmp"
                os.replace(final, backup)
                moved_aside.append((backup, final))
            os.replace(tmp, final)
            placed.append(final)
    except BaseException:
        for final in placed:
            final.unlink(missing_ok=True)
        for backup, final in moved_aside:
            os.replace(backup, final)
        raise
    for backup, _ in moved_aside:
        backup.unlink(missing_ok=True)  # a leftover would be swept as an orphan by the next run


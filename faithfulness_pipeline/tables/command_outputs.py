"""The outputs of a command that computes a few tables (or a page) from scored ones (compare, calibrate,
estimate, packing-study, report): checked before anything is read or paid for, as ``score``'s are (not an
input, not a folder, writable, in an object store where the URI says so), and the tables written together
as Parquet (``output_files``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import polars as pl

from faithfulness_pipeline.tables.inputs import resolve_inputs
from faithfulness_pipeline.tables.output_files import check_outputs, committed_together


def input_files(specs: Iterable[str | None]) -> list[str]:
    """Every file (or object) the input ``specs`` name: what an output must not overwrite."""
    return [path for spec in specs if spec for path in resolve_inputs(spec)]


def check_command_outputs(outputs: Mapping[str, str | None], inputs: Iterable[str | None]) -> None:
    """Refuses outputs (by option: ``-o``, ``--flips-out``...) that could not be written, that name one file
    twice, or that would replace one of the ``inputs`` (specs: files, folders, globs, URIs)."""
    if any(outputs.values()):
        check_outputs(outputs, input_files(inputs))


def write_frames(outputs: Mapping[str, tuple[str | None, pl.DataFrame]]) -> None:
    """Each frame as Parquet at its target (by option; a None target is not written), all replaced together."""
    targets = {option: target for option, (target, _) in outputs.items() if target}
    if not targets:
        return
    with committed_together(targets) as paths:
        for option, path in paths.items():
            outputs[option][1].write_parquet(path)

"""A Phoenix project as a source: ``phoenix+http(s)://HOST[:PORT][/PREFIX]/projects/NAME`` with optional
``start`` and ``end``. Its spans are pulled a page at a time and staged as one conversation table in the
source's working folder (``traces.staging``), read like any table file."""

from __future__ import annotations

from typing import Final

from faithfulness_pipeline.sources.files import FilePart
from faithfulness_pipeline.sources.source import Part, Source, working_folder
from faithfulness_pipeline.traces.conversations import SpanCount
from faithfulness_pipeline.traces.staging import phoenix_pieces, stage_spans

#: How an input names a Phoenix project instead of files.
PHOENIX_SCHEMES: Final = ("phoenix+http://", "phoenix+https://")


def is_phoenix(spec: str) -> bool:
    return spec.startswith(PHOENIX_SCHEMES)


def phoenix_source(spec: str, rows: int, text: frozenset[str], workdir: str | None,
                   api_key: str | None) -> Source[Part]:
    """The spans of the project ``spec`` names as a source of one staged table, in a working folder under
    ``workdir`` that goes when the source closes (or at once, when pulling fails)."""
    work = working_folder(workdir)
    spans = SpanCount()
    try:
        table = stage_spans(phoenix_pieces(spec, api_key), "phoenix", work.name, spans)
    except BaseException:
        work.cleanup()
        raise
    return Source([FilePart(table, rows, text)], files=[table], spans=spans, work=work)

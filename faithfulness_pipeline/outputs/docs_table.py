"""The docs' table of outputs (docs/tables.md, "Every output"), printed from the list itself:
``python -m faithfulness_pipeline.outputs``."""

from __future__ import annotations

from faithfulness_pipeline.outputs.catalog import entries
from faithfulness_pipeline.outputs.kinds import ChunkLines, ChunkTable, DayTable, Output, Sent, TableOutput


def _kind(entry: Output) -> str:
    if isinstance(entry, ChunkTable):
        return "table, built chunk by chunk"
    if isinstance(entry, DayTable):
        return "table, built from whole days"
    if isinstance(entry, ChunkLines):
        return "JSON Lines, built chunk by chunk"
    assert isinstance(entry, Sent)
    return "sent to another system"


def _option(entry: Output) -> str:
    if isinstance(entry, Sent):
        return f"sent where {entry.named_by} names the place"
    return " / ".join(f"`{n}`" for n in (entry.short_option, entry.option) if n) or "-"


def _asset(entry: Output) -> str:
    if isinstance(entry, TableOutput):
        return f"`{entry.name}`" + (", a BI view" if entry.view else "")
    if isinstance(entry, Sent):
        return f"`{entry.name}`, where {entry.named_by} is set as the code location loads"
    return "-"


def _checks(entry: Output) -> str:
    return ", ".join(f"`{c}`" for c in entry.checks) if isinstance(entry, TableOutput) and entry.checks else "-"


def markdown_table() -> str:
    """One row per entry of the list, in its order."""
    lines = ["| output | what it is | command line | Dagster asset | checks | holds |", "|---|---|---|---|---|---|"]
    for entry in entries():
        holds = " ".join(entry.description.split()).replace("|", "\\|")
        lines.append(f"| `{entry.name}` | {_kind(entry)} | {_option(entry)} | {_asset(entry)} | {_checks(entry)} "
                     f"| {holds} |")
    return "\n".join(lines)

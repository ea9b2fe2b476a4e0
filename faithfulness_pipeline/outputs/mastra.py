"""The Mastra-shaped export: per row and scorer, the record Mastra's ``scorer.run()`` gives (``core.outputs``)."""

from __future__ import annotations

from typing import Final

from faithfulness_pipeline.core.outputs import mastra_jsonl_lines
from faithfulness_pipeline.outputs.kinds import ChunkLines

MASTRA_EXPORT: Final = ChunkLines(
    name="mastra_export",
    description="Two JSON lines per answer, one per scorer, shaped like Mastra's scorer.run() result: runId, "
    "scorerId, score, reason, preprocessStepResult.claims, analyzeStepResult.verdicts (yes / no / unsure).",
    kinds=frozenset({"jsonl"}),
    option="--mastra-out",
    option_help="Also write the Mastra-shaped export (JSON lines, one per row per scorer).",
    lines=mastra_jsonl_lines,
)

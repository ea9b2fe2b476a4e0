"""A step's request lines put into batch input files within the provider's limits, each file one
submission (its own tag), each line named by its tag and its place in the step."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from faithfulness_pipeline.judging.llm.batch.api import request_line
from faithfulness_pipeline.judging.llm.batch.ledger import LineRecord, new_submission_tag


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What one batch may hold (OpenAI: 50,000 requests and 200 MB per input file; a margin kept)."""

    max_lines: int = 50_000
    max_bytes: int = 190 * 1024 * 1024


#: OpenAI's limits (and so those of most batch endpoints that copy its API).
PROVIDER_LIMITS: Final = BatchLimits()


@dataclass(slots=True)
class BatchFile:
    """One batch input file: its submission tag, its lines, and what the ledger records of each line."""

    tag: str = field(default_factory=new_submission_tag)
    lines: list[bytes] = field(default_factory=list)
    records: list[LineRecord] = field(default_factory=list)
    size: int = 0

    def data(self) -> bytes:
        return b"".join(self.lines)


def batch_files(step: str, requests: Iterable[tuple[dict[str, Any], list[dict[str, Any]]]],
                limits: BatchLimits) -> list[BatchFile]:
    """``requests`` (a request body, and the serialised items it carries) as lines of files that each keep
    within ``limits``; the last file is empty when there were no requests."""
    files = [BatchFile()]
    for n, (body, items) in enumerate(requests):
        line = request_line(f"{files[-1].tag}-{n}", body)
        full = len(files[-1].lines) >= limits.max_lines or files[-1].size + len(line) > limits.max_bytes
        if files[-1].lines and full:
            files.append(BatchFile())
            line = request_line(f"{files[-1].tag}-{n}", body)
        file = files[-1]
        file.size += len(line)
        file.lines.append(line)
        file.records.append(LineRecord(f"{file.tag}-{n}", file.tag, step, items))
    return files

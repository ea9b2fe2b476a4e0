"""Outputs of the CLI on the golden cases equal the tables written before the judge-layer redesign.

Every column of the golden tables but ``scored_at`` must match to the bit: scores, reasons, verdicts, the
usage shares of each row (packing and sharing), the claim table and the Mastra export. Columns added since
(where a result came from, what a run paid) are checked by their own tests. The LLM case runs cold with a
result store and then warm from it: both must give the golden tables.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from tests.golden.cases import HERE, OUTPUTS, comparable, llm_rag, offline_sample


def _same_as_golden(case: str, out_dir: Path) -> None:
    for name in OUTPUTS:
        got, want = comparable(out_dir / name), comparable(HERE / case / name)
        if isinstance(want, list):
            assert got == want, f"{case}/{name} differs from the golden file"
        else:
            assert_frame_equal(got.select(want.columns), want)  # type: ignore[union-attr]


def test_offline_judge_on_the_sample_data(tmp_path: Path) -> None:
    offline_sample(tmp_path / "out")
    _same_as_golden("offline_sample", tmp_path / "out")


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_litellm_judge_on_typical_rag_rows(tmp_path: Path, warm: bool) -> None:
    store = str(tmp_path / "store.sqlite")
    if warm:
        llm_rag(tmp_path, tmp_path / "fill", "--store", store)
    llm_rag(tmp_path, tmp_path / "out", "--store", store)
    _same_as_golden("llm_rag", tmp_path / "out")

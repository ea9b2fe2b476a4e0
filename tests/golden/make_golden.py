"""Writes the golden outputs: ``python -m tests.golden.make_golden`` (see ``cases.py`` for when)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from tests.golden.cases import HERE, OUTPUTS, llm_rag, offline_sample


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        offline_sample(work / "offline_sample")
        llm_rag(work, work / "llm_rag")
        for case in ("offline_sample", "llm_rag"):
            (HERE / case).mkdir(exist_ok=True)
            for name in OUTPUTS:
                shutil.copyfile(work / case / name, HERE / case / name)


if __name__ == "__main__":
    main()

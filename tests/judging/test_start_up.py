"""What scoring with the litellm judge loads in a fresh process: one tiktoken encoding (the judge model's,
not litellm's default as well) and no pandas (pyarrow imports it for ``pa.array`` on Python lists). Each
costs start-up CPU for nothing (issue 30; figures in BENCHMARKS.md). The fake server runs in the test's
process, so that the encoding it counts with is not the client's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

ROOT = Path(__file__).resolve().parents[2]

_PROBE = r"""
import json, sys
import tiktoken.registry
from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.scripted import typical_frame

# Whole replies, as gpt-4o-mini at OpenAI's own endpoint gets them (--stream auto): a streamed request has
# litellm count its prompt with its default encoding (docs/judges.md).
judge = make_judge(JudgeSettings(model="openai/gpt-4o-mini", api_base=sys.argv[1], api_key_env="FP_PROBE_KEY",
                                 timeout_s=10, stream="no"))
scored = score_frame(typical_frame(4, seed=2), judge)
print(json.dumps({"rows": scored.height, "errors": scored.get_column("error").drop_nulls().to_list(),
                  "pandas": "pandas" in sys.modules, "encodings": sorted(tiktoken.registry.ENCODINGS)}))
"""


def test_scoring_loads_one_encoding_and_no_pandas() -> None:
    env = {**os.environ, "FP_PROBE_KEY": "sk-probe", "PYTHONPATH": str(ROOT)}
    with FakeLLMServer(ScriptedJudge()) as server:
        done = subprocess.run([sys.executable, "-c", _PROBE, server.base_url], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        assert server.stats().requests > 0  # the litellm judge really ran
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["rows"] == 4 and seen["errors"] == []
    assert seen["encodings"] == ["o200k_base"]  # gpt-4o-mini's; litellm's default cl100k_base not loaded
    assert not seen["pandas"]

"""Library code leaves the process as it found it: importing the package and the code location, building
judges (offline, litellm, behind a store) and scoring through the Python API change no garbage-collector
setting, signal handler, switch interval or environment variable, but for litellm's two offline defaults,
which the litellm judge sets only where the user has not, when it is built. Checked in a fresh interpreter,
so that nothing another test did counts; what the dependencies do when they load is the baseline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from faithfulness_pipeline.judging.llm.card import OFFLINE_DEFAULTS
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge

ROOT = Path(__file__).resolve().parents[1]

_PROBE = r"""
import asyncio, gc, json, os, signal, sys

def state():
    return {
        "gc_enabled": gc.isenabled(),
        "gc_frozen": gc.get_freeze_count(),
        "gc_threshold": list(gc.get_threshold()),
        "switch_interval": sys.getswitchinterval(),
        "signals": {name: repr(signal.getsignal(getattr(signal, name))) for name in ("SIGINT", "SIGTERM", "SIGHUP")},
        "env": dict(os.environ),
    }

# What the dependencies do to the process when they load (polars sets its allocator's options, litellm
# points tiktoken at its bundled tokenizers) is theirs: loaded first, it is part of the baseline.
import polars as pl, pyarrow, dagster
env_of_user = dict(os.environ)
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true"); os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
litellm.encode(model="gpt-4o-mini", text="warm up")
for name in ("LITELLM_OFFLINE_MODE", "LITELLM_LOCAL_MODEL_COST_MAP"):
    if name not in env_of_user:
        del os.environ[name]
before = state()
import faithfulness_pipeline
import faithfulness_pipeline.definitions  # the code location, as dagster loads it
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.settings.judge import JudgeSettings

frame = pl.DataFrame({"output": ["Paris is in France. It has a tower."], "context": [["Paris is in France."]]})
faithfulness_pipeline.score_frame(frame)
store = sys.argv[2]
faithfulness_pipeline.score_frame(frame, make_judge(JudgeSettings(store=store)))
llm = make_judge(JudgeSettings(model="openai/gpt-4o-mini", api_base=sys.argv[1], api_key_env="FP_PROBE_KEY",
                               store=store + ".llm"))
faithfulness_pipeline.score_frame(frame, llm)
after = state()
print(json.dumps({"before": before, "after": after}))
"""


def test_importing_building_and_scoring_change_nothing_process_wide(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in OFFLINE_DEFAULTS}
    env["FP_PROBE_KEY"] = "sk-probe"
    with FakeLLMServer(ScriptedJudge()) as server:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, server.base_url, str(tmp_path / "store.sqlite")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
        )
        assert server.stats().requests > 0  # the litellm judge really ran
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    before, after = seen["before"], seen["after"]
    added = {k: v for k, v in after.pop("env").items() if before["env"].get(k) != v}
    before.pop("env")
    assert after == before
    assert added == OFFLINE_DEFAULTS  # litellm's offline defaults, set where the user had not set them

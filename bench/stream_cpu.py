"""Client CPU of scoring 200 typical rows in process, replies streamed or not (the judge's ``stream`` setting).

With an ``api_base`` the litellm judge streams by default (``stream=auto``: litellm cannot vouch for the
endpoint, so a slow server's reply is waited for while it keeps coming). Each streamed piece is parsed by
litellm through the OpenAI SDK's models; this measures what that costs the client against the fake server
(in this process, its own thread), one process, the modes taking turns after a warm-up.

    .venv/bin/python bench/stream_cpu.py [--rows 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics

from common import machine

from faithfulness_pipeline.api import score_frame
from faithfulness_pipeline.judging.factory import make_judge
from faithfulness_pipeline.judging.llm.card import import_litellm
from faithfulness_pipeline.settings.judge import JudgeSettings
from faithfulness_pipeline.testing.fakellm import FakeLLMServer
from faithfulness_pipeline.testing.scripted import ScriptedJudge, typical_frame

_KEY_ENV = "FP_BENCH_STREAM_KEY"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    os.environ[_KEY_ENV] = "sk-bench"
    import_litellm()
    frame = typical_frame(args.rows, seed=5)
    seconds: dict[str, list[float]] = {"yes": [], "no": []}
    tokens: dict[str, int] = {}
    with FakeLLMServer(ScriptedJudge()) as server:
        def once(stream: str) -> float:
            judge = make_judge(JudgeSettings(model="openai/gpt-4o-mini", api_base=server.base_url,
                                             api_key_env=_KEY_ENV, stream=stream))  # fmt: skip
            before = _cpu()
            score_frame(frame, judge)
            return _cpu() - before

        for stream in seconds:  # warm-up: tiktoken's tables, litellm's first calls
            once(stream)
        for _ in range(args.runs):
            for stream in seconds:
                start = server.stats().completion_tokens
                seconds[stream].append(once(stream))
                tokens[stream] = server.stats().completion_tokens - start
    print(f"`.venv/bin/python bench/stream_cpu.py --rows {args.rows} --runs {args.runs}` — {machine()}\n")
    print("| replies | score_frame CPU s (median) | runs | completion tokens a run |")
    print("|---|---:|---|---:|")
    for stream, values in seconds.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {'streamed' if stream == 'yes' else 'whole'} | {statistics.median(values):.2f} | {runs} | "
              f"{tokens[stream]:,} |")


if __name__ == "__main__":
    main()

"""Run the fake LLM server as its own process (client-overhead benchmarks, crash tests, trying the LLM path).

    python -m faithfulness_pipeline.testing.fakellm --port 0 --responder pkg.module:attr --base-ms 200 --per-token-ms 2

Prints ``READY http://127.0.0.1:PORT/v1`` once it accepts connections; SIGTERM or SIGINT stops it,
after which it prints ``STATS {json}`` (the counters) and exits 0. ``GET /fakellm/stats`` gives the
same counters while it runs. The Files and Batches endpoints are served too (``--batch-*-s`` set how
long a batch's phases last).

    python -m faithfulness_pipeline.testing.fakellm --responder scripted -- \
        faithfulness-pipeline score sample_data -o out/fake.parquet \
        --model openai/fake-judge

runs the command after ``--`` against the server instead (``FP_JUDGE_API_BASE`` set to it, and a made-up
key in ``FP_JUDGE_API_KEY_ENV``), then stops the server and exits with the command's status: the LLM path,
end to end over real HTTP, with no key and no network. The ``scripted`` responder judges a claim found
word for word in a passage supported, one that differs from a passage sentence only in its numbers
contradicted, anything else unsupported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import cast

from faithfulness_pipeline.testing.fakellm.faults import BatchTiming, FaultPlan, Latency
from faithfulness_pipeline.testing.fakellm.selfhosted import FORMATS, KINDS, ServedLimits
from faithfulness_pipeline.testing.fakellm.server import FakeLLMServer, stats_to_dict
from faithfulness_pipeline.testing.fakellm.wire import Responder, echo_json
from faithfulness_pipeline.testing.scripted import ScriptedJudge

_BUILTIN_RESPONDERS: dict[str, Responder] = {"echo_json": echo_json, "scripted": ScriptedJudge(grounded=True)}
#: The made-up key a command run against the server gets (the server does not ask for one).
_RUN_KEY_ENV = "FAKELLM_API_KEY"


def load_responder(spec: str) -> Responder:
    """``echo_json`` or ``package.module:attribute`` naming a callable ``(ChatRequest) -> str``."""
    if spec in _BUILTIN_RESPONDERS:
        return _BUILTIN_RESPONDERS[spec]
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise SystemExit(f"--responder must be 'echo_json' or 'module:attribute', got {spec!r}")
    target: object = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise SystemExit(f"{spec} is not callable")
    return cast(Responder, target)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m faithfulness_pipeline.testing.fakellm",
                                description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    p.add_argument("--responder", default="echo_json", help="echo_json, scripted or package.module:attribute")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>'")
    p.add_argument("--base-ms", type=float, default=0.0, help="service time per request")
    p.add_argument("--per-token-ms", type=float, default=0.0, help="service time per completion token")
    p.add_argument("--max-in-flight", type=int, default=None, help="server-side concurrency; extra requests queue")
    p.add_argument("--max-concurrent", type=int, default=None,
                   help="the provider's limit on requests in flight: one more is refused with a 429")
    p.add_argument("--rate-429", type=float, default=0.0)
    p.add_argument("--retry-after-s", type=float, default=1.0)
    p.add_argument("--rate-429-no-retry-after", type=float, default=0.0)
    p.add_argument("--rate-5xx", type=float, default=0.0)
    p.add_argument("--status-5xx", type=int, default=500)
    p.add_argument("--rate-malformed", type=float, default=0.0)
    p.add_argument("--rate-partial", type=float, default=0.0)
    p.add_argument("--rate-hang", type=float, default=0.0)
    p.add_argument("--rate-stall", type=float, default=0.0, help="streamed replies that go silent halfway")
    p.add_argument("--rate-trickle", type=float, default=0.0, help="replies sent a byte at a time")
    p.add_argument("--trickle-ms", type=float, default=500.0, help="with --rate-trickle: milliseconds between bytes")
    p.add_argument("--fault-seed", type=int, default=0)
    p.add_argument("--prompt-cache", action="store_true",
                   help="report cached prompt tokens for prompts sharing a 1,024-token prefix (OpenAI's rule)")
    default = BatchTiming()
    p.add_argument("--batch-validating-s", type=float, default=default.validating_s)
    p.add_argument("--batch-per-line-s", type=float, default=default.per_line_s)
    p.add_argument("--batch-finalizing-s", type=float, default=default.finalizing_s)
    p.add_argument("--batch-cancelling-s", type=float, default=default.cancelling_s)
    p.add_argument("--refuse-format", action="append", choices=FORMATS, default=[],
                   help="answer this response_format type with a 400 (repeat for both)")
    p.add_argument("--served-as", choices=KINDS, default=None,
                   help="publish and enforce a window of its own, as this kind of self-hosted server does")
    p.add_argument("--served-window", type=int, default=2048, help="with --served-as: tokens per request")
    p.add_argument("--served-slots", type=int, default=1, help="with --served-as llama.cpp: parallel slots")
    p.add_argument("--served-max-output", type=int, default=None, help="with --served-as: the server's reply cap")
    p.add_argument("command", nargs=argparse.REMAINDER, help="after --: a command to run against the server")
    return p


def _run_against(server: FakeLLMServer, command: list[str]) -> int:
    env = {**os.environ, "FP_JUDGE_API_BASE": server.base_url, "FP_JUDGE_API_KEY_ENV": _RUN_KEY_ENV,
           _RUN_KEY_ENV: "fake-key-for-the-fake-server"}
    try:
        code = subprocess.run(command, env=env, check=False).returncode
    except FileNotFoundError:
        print(f"fakellm: no such command: {command[0]}", file=sys.stderr)
        return 127
    stats = server.stats()
    print(f"fakellm: the command sent {stats.requests} request(s) to {server.base_url}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    latency = Latency(
        base_s=args.base_ms / 1000, per_output_token_s=args.per_token_ms / 1000, max_in_flight=args.max_in_flight
    )
    faults = FaultPlan(
        max_concurrent=args.max_concurrent,
        rate_429=args.rate_429,
        retry_after_s=args.retry_after_s,
        rate_429_no_retry_after=args.rate_429_no_retry_after,
        rate_5xx=args.rate_5xx,
        status_5xx=args.status_5xx,
        rate_malformed=args.rate_malformed,
        rate_partial=args.rate_partial,
        rate_hang=args.rate_hang,
        rate_stall=args.rate_stall,
        rate_trickle=args.rate_trickle,
        trickle_s=args.trickle_ms / 1000,
        seed=args.fault_seed,
    )
    batch_timing = BatchTiming(
        validating_s=args.batch_validating_s,
        per_line_s=args.batch_per_line_s,
        finalizing_s=args.batch_finalizing_s,
        cancelling_s=args.batch_cancelling_s,
    )
    limits = None if args.served_as is None else ServedLimits(
        args.served_as, args.served_window, slots=args.served_slots, max_output_tokens=args.served_max_output
    )
    server = FakeLLMServer(
        load_responder(args.responder),
        latency=latency,
        faults=faults,
        port=args.port,
        api_key=args.api_key,
        batch_timing=batch_timing,
        limits=limits,
        refuse_formats=args.refuse_format,
        prompt_cache=args.prompt_cache,
    )
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command:
        with server:
            return _run_against(server, command)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        del signum, frame
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with server:
        print(f"READY {server.base_url}", flush=True)
        # A timed wait keeps the main thread returning to the interpreter, where signal handlers run.
        while not stop.wait(0.2):
            pass
        stats = stats_to_dict(server.stats())
    print(f"STATS {json.dumps(stats, sort_keys=True)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

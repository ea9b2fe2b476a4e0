"""Throughput against the latency-bound limit: answers/s with 16 and 64 requests in flight.

The fake server runs in its own process and models a provider: every request takes 200 ms plus 2 ms per
completion token, and at most ``in_flight`` requests are worked on at once (the client's
``max_concurrency`` is the same). No client can beat

    limit = in_flight / (mean request latency × requests per answer)
          = in_flight × answers / (sum of the requests' modelled latencies)

answers per second; the fraction of it reached is the share of slot-time the client kept busy. Scoring
runs end to end (``score_frame_async`` with the litellm judge at its defaults, typical RAG rows from
``bench/rag_rows.py``); the server judges claims against the passages, so contradicted and unsupported
claims carry reasons, as real replies do. A thread samples the judge's requests in flight every 5 ms to
show where slot-time is lost (the start of a step, its tail, the pipeline's work between steps).

    .venv/bin/python bench/throughput.py [--rows16 2000] [--rows64 5000]
"""

from __future__ import annotations

import argparse
import itertools
import os
import threading
import time
from typing import Any

import polars as pl
from common import add_pack_options, machine, machine_line, pack_overrides, score
from overhead import BENCH_MODEL, ServerProcess, bench_judge
from rag_rows import make_rows

BASE_MS = 200.0
PER_TOKEN_MS = 2.0
TARGET_FRACTION = 0.85
TARGET_ANSWERS_PER_S_AT_16 = 50.0
TARGET_COMPLETION_PER_ANSWER = 150.0
RESPONDER = "faithfulness_pipeline.testing.scripted:GROUNDED_RESPONDER"


class InFlightSampler:
    """Samples ``limiter.in_flight`` from a thread: slot-time used, and how long the slots sat idle."""

    def __init__(self, limiter: Any, slots: int, every_s: float = 0.005) -> None:
        self.limiter = limiter
        self.slots = slots
        self.every_s = every_s
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), int(self.limiter.in_flight)))
            time.sleep(self.every_s)

    def __enter__(self) -> InFlightSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def idle_share(self) -> dict[str, float]:
        """Shares of the run's slot-time with free slots: none in flight, partly busy (tails), all busy."""
        if len(self.samples) < 2:
            return {"empty": 0.0, "partial": 0.0, "busy": 0.0}
        empty = partial = busy = 0.0
        for (t0, n), (t1, _) in zip(self.samples, self.samples[1:], strict=False):
            dt = t1 - t0
            if n == 0:
                empty += dt
            elif n < self.slots:
                partial += dt * (self.slots - n) / self.slots
            busy += dt * n / self.slots
        total = self.samples[-1][0] - self.samples[0][0]
        return {"empty": empty / total, "partial": partial / total, "busy": busy / total}

    def phases(self) -> dict[str, float]:
        """Where the idle slot-time sits: seconds to the first request and until every slot is busy, the
        drain after the last moment every slot was busy, and the busy share of the slot-time between."""
        samples = self.samples
        if len(samples) < 2:
            return {"first_s": 0.0, "full_s": 0.0, "drain_s": 0.0, "middle_busy": 0.0}
        start, end = samples[0][0], samples[-1][0]
        first = next((t for t, n in samples if n > 0), end)
        full_at = [t for t, n in samples if n >= self.slots]
        if not full_at:
            return {"first_s": first - start, "full_s": end - start, "drain_s": 0.0, "middle_busy": 0.0}
        busy = held = 0.0
        for (t0, n), (t1, _) in itertools.pairwise(samples):
            if full_at[0] <= t0 < full_at[-1]:
                busy += (t1 - t0) * min(n, self.slots)
                held += (t1 - t0) * self.slots
        return {"first_s": first - start, "full_s": full_at[0] - start, "drain_s": end - full_at[-1],
                "middle_busy": busy / held if held else 0.0}


def measure(in_flight: int, rows: int, seed: int, **judge: Any) -> dict[str, Any]:
    frame = make_rows(rows, seed=seed)
    with ServerProcess(RESPONDER, base_ms=BASE_MS, per_token_ms=PER_TOKEN_MS, max_in_flight=in_flight) as server:
        # One-time costs (litellm's lazy imports on its first call, the connection pool) are not
        # throughput: a small run pays them first.
        score(make_rows(40, seed=seed + 1000), bench_judge(server.base_url, max_concurrency=in_flight, **judge))
        scorer = bench_judge(server.base_url, max_concurrency=in_flight, **judge)
        before = server.stats()
        with InFlightSampler(scorer.inner.limiter, in_flight) as sampler:
            start = time.perf_counter()
            scored = score(frame, scorer)
            wall = time.perf_counter() - start
        after = server.stats()
    idle = sampler.idle_share()
    requests = after["requests"] - before["requests"]
    modelled = after["modelled_latency_s"] - before["modelled_latency_s"]
    answers = frame.height
    limit = in_flight * answers / modelled
    rate = answers / wall
    ok = scored.filter(pl.col("status") == "ok").height
    verdicts = scored.select(pl.col("verdicts").list.eval(pl.element().struct.field("verdict"))).explode("verdicts")
    counts = verdicts.get_column("verdicts").value_counts()
    return {
        "in_flight": in_flight,
        "rows": answers,
        "ok_rows": ok,
        "requests": requests,
        "requests_per_answer": requests / answers,
        "prompt_tokens_per_answer": (after["prompt_tokens"] - before["prompt_tokens"]) / answers,
        "completion_tokens_per_answer": (after["completion_tokens"] - before["completion_tokens"]) / answers,
        "mean_request_latency_s": modelled / max(requests, 1),
        "wall_s": wall,
        "answers_per_s": rate,
        "limit_answers_per_s": limit,
        "fraction_of_limit": rate / limit,
        "max_in_flight_seen": after["max_in_flight_seen"],
        "idle": idle,
        "phases": sampler.phases(),
        # The server's own time per reply (parsing, counting, judging, its loop's delays) over the modelled
        # one: what of the held time above modelled is the fake server's, not the client's.
        "served_per_modelled": (after["served_latency_s"] - before["served_latency_s"]) / modelled,
        # Slot-time the client held per second of modelled service time: above 1 when replies wait to be
        # read or requests to be written (a busy or CPU-starved client or server), not when slots sit idle.
        "held_per_modelled": idle["busy"] * in_flight * wall / modelled,
        "verdict_mix": {str(k): int(v) for k, v in counts.iter_rows()},
    }


def run(rows16: int = 2000, rows64: int = 5000, **judge: Any) -> dict[str, Any]:
    results = [measure(16, rows16, seed=31, **judge), measure(64, rows64, seed=32, **judge)]
    return {
        "model": BENCH_MODEL,
        "latency": f"{BASE_MS:g} ms + {PER_TOKEN_MS:g} ms per completion token",
        "results": results,
        "targets": {
            "fraction_of_limit": TARGET_FRACTION,
            "answers_per_s_at_16": TARGET_ANSWERS_PER_S_AT_16,
            "completion_tokens_per_answer": TARGET_COMPLETION_PER_ANSWER,
        },
        "machine": machine(),
        "load_average": os.getloadavg()[0],  # other processes on the machine skew timings: say so
    }


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(result: dict[str, Any]) -> str:
    targets = result["targets"]
    lines = [
        "## Throughput against the latency-bound limit",
        "",
        "`.venv/bin/python bench/throughput.py` — typical RAG rows scored end to end (`score_frame_async`, "
        f"litellm judge at its defaults as `{result['model']}`) against the fake server in its own process at "
        f"{result['latency']}, with the server's and the client's concurrency both set to the in-flight "
        "number. limit = in_flight / (mean request latency × requests per answer), the mean latency being "
        "the server's modelled service time; the fraction is the share of slot-time kept busy. The fraction "
        "is about (1 - idle share) / (slot-time held / modelled): idle slots are the pipeline's doing, held "
        "time above the modelled one is CPU time the client or the server did not get in time.",
        "",
        "| in flight | rows | requests/answer | prompt tok/answer | completion tok/answer | mean latency s | "
        "answers/s | limit | fraction | slots idle: none in flight / partly | slot-time held / modelled |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in result["results"]:
        idle = r["idle"]
        lines.append(
            f"| {r['in_flight']} | {r['rows']} | {r['requests_per_answer']:.3f} | "
            f"{r['prompt_tokens_per_answer']:.0f} | {r['completion_tokens_per_answer']:.1f} | "
            f"{r['mean_request_latency_s']:.3f} | **{r['answers_per_s']:.1f}** | {r['limit_answers_per_s']:.1f} | "
            f"**{r['fraction_of_limit']:.3f}** | {100 * idle['empty']:.1f} % / {100 * idle['partial']:.1f} % | "
            f"{r['held_per_modelled']:.2f} |"
        )
    lines += ["", "Where the idle slot-time sits (the run's start and end; the slots' busy share in between):", ""]
    for r in result["results"]:
        p = r["phases"]
        lines.append(
            f"- {r['in_flight']} in flight: first request after {p['first_s']:.2f} s, every slot busy after "
            f"{p['full_s']:.2f} s; after the last moment every slot was busy the run drained for "
            f"{p['drain_s']:.2f} s (of {r['wall_s']:.1f} s); in between {100 * p['middle_busy']:.1f} % of the "
            f"slot-time was busy. Slots were held {r['held_per_modelled']:.2f}× the modelled time, the server's "
            f"handler took {r['served_per_modelled']:.3f}× of it: the difference is sending, reading and "
            "waiting for the client's event loop."
        )
    lines += [
        "",
        "Filling the slots costs client CPU per request (counting the pack's tokens, then litellm's own work "
        "to send it), and the drain lasts about one request latency: both are fixed per run, so a short "
        "run's fraction sits below the steady state's.",
    ]
    at16 = next(r for r in result["results"] if r["in_flight"] == 16)
    worst = min(r["fraction_of_limit"] for r in result["results"])
    completion = max(r["completion_tokens_per_answer"] for r in result["results"])
    mix = at16["verdict_mix"]
    lines += [
        "",
        f"Targets: fraction ≥ {targets['fraction_of_limit']} ({_met(worst >= targets['fraction_of_limit'])}, "
        f"lowest {worst:.3f}); ≥ {targets['answers_per_s_at_16']:g} answers/s at 16 in flight "
        f"({_met(at16['answers_per_s'] >= targets['answers_per_s_at_16'])}, {at16['answers_per_s']:.1f}); "
        f"≤ {targets['completion_tokens_per_answer']:g} completion tokens per answer for both scores "
        f"({_met(completion <= targets['completion_tokens_per_answer'])}, {completion:.1f}).",
        "",
        f"Verdicts in the 16-in-flight run: {', '.join(f'{k} {v}' for k, v in sorted(mix.items()))} "
        "(contradicted and unsupported claims each carry a one-sentence reason). The scripted judge marks "
        "every answer sentence true (each is one claim as written); a judge that writes claims out in full "
        "pays about one completion token per claim token for each one it rewrites.",
        "",
        machine_line(result),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows16", type=int, default=2000)
    parser.add_argument("--rows64", type=int, default=5000)
    add_pack_options(parser)
    args = parser.parse_args()
    overrides = pack_overrides(args)
    print(report(run(args.rows16, args.rows64, **overrides)))

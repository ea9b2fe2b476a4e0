"""A fake OpenAI-compatible LLM server for tests and benchmarks (no litellm import).

    from tests.fakellm import FakeLLMServer, FaultPlan, Latency, ChatRequest

    with FakeLLMServer(lambda req: '{"claims": []}', faults=FaultPlan(rate_429=0.2)) as server:
        litellm.acompletion(model="openai/judge", api_base=server.base_url, api_key="k", ...)
        server.stats().by_outcome

Run as a process: ``python -m tests.fakellm --port 0 --responder pkg.module:attr``.
"""

from tests.fakellm.server import (
    MALFORMED_CONTENT,
    ChatRequest,
    FakeLLMServer,
    FaultPlan,
    Latency,
    Responder,
    ServerStats,
    canonical_body,
    count_prompt_tokens,
    count_tokens,
    echo_json,
    stats_to_dict,
)

__all__ = [
    "MALFORMED_CONTENT",
    "ChatRequest",
    "FakeLLMServer",
    "FaultPlan",
    "Latency",
    "Responder",
    "ServerStats",
    "canonical_body",
    "count_prompt_tokens",
    "count_tokens",
    "echo_json",
    "stats_to_dict",
]

"""A fake OpenAI-compatible LLM server for tests and benchmarks (no litellm import).

    from faithfulness_pipeline.testing.fakellm import FakeLLMServer, FaultPlan, Latency, ChatRequest

    with FakeLLMServer(lambda req: '{"claims": []}', faults=FaultPlan(rate_429=0.2)) as server:
        litellm.acompletion(model="openai/judge", api_base=server.base_url, api_key="k", ...)
        server.stats().by_outcome

``ServedLimits`` makes it a self-hosted server with a window and output cap of its own, published as
llama.cpp (``/props``), vLLM (``max_model_len``) or Ollama (``/api/show``) publish theirs, and
``refuse_formats`` the ``response_format`` types it refuses with a 400 (``selfhosted.py``).

``prompt_cache=True`` (``--prompt-cache``) reports ``prompt_tokens_details.cached_tokens`` by OpenAI's rule:
a prompt sharing a prefix of 1,024 tokens or more with an earlier one has it cached, in steps of 128.

The Files and Batches endpoints (``/v1/files``, ``/v1/batches``) answer each batch line the same way;
``BatchTiming`` sets how long a batch takes, ``BatchFaults`` its faults (see ``batches.py``).

One module per thing it imitates: ``chat.py`` (chat completions, streamed by ``streaming.py``), ``files.py``
and ``batches.py`` (Files and Batches, in the shapes of ``batch_format.py``), ``selfhosted.py`` (a self-hosted
server's limits and refusals); beneath them what they share: ``wire.py`` (requests, replies, error bodies),
``faults.py`` (latency and faults) and ``tokens.py`` (token counts and the prompt cache). ``server.py`` runs
them all as one server.

Run as a process: ``python -m faithfulness_pipeline.testing.fakellm --port 0 --responder pkg.module:attr``.
"""

from faithfulness_pipeline.testing.fakellm.batch_format import validate_input
from faithfulness_pipeline.testing.fakellm.faults import MALFORMED_CONTENT, BatchFaults, BatchTiming, FaultPlan, Latency
from faithfulness_pipeline.testing.fakellm.selfhosted import ServedLimits
from faithfulness_pipeline.testing.fakellm.server import FakeLLMServer, ServerStats, stats_to_dict
from faithfulness_pipeline.testing.fakellm.tokens import count_prompt_tokens, count_tokens
from faithfulness_pipeline.testing.fakellm.wire import ChatRequest, Responder, canonical_body, echo_json

__all__ = [
    "MALFORMED_CONTENT",
    "BatchFaults",
    "BatchTiming",
    "ChatRequest",
    "FakeLLMServer",
    "FaultPlan",
    "Latency",
    "Responder",
    "ServedLimits",
    "ServerStats",
    "canonical_body",
    "count_prompt_tokens",
    "count_tokens",
    "echo_json",
    "stats_to_dict",
    "validate_input",
]

"""The fake server as a self-hosted one (``selfhosted.py``), over real HTTP: the limits it publishes where
llama.cpp, vLLM and Ollama publish theirs, the 400s it sends as they do, and its own cap on a reply."""

from __future__ import annotations

import asyncio
import os
from typing import Any

for _name, _value in {"LITELLM_OFFLINE_MODE": "true", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                      "LITELLM_LOG": "ERROR", "HF_HUB_OFFLINE": "1"}.items():
    os.environ.setdefault(_name, _value)

import httpx  # noqa: E402
import litellm  # noqa: E402
import pytest  # noqa: E402
from litellm.exceptions import BadRequestError, ContextWindowExceededError  # noqa: E402

from faithfulness_pipeline.testing.fakellm import FakeLLMServer, ServedLimits, count_prompt_tokens  # noqa: E402

litellm.suppress_debug_info = True
SCHEMA = {"type": "json_schema", "json_schema": {"name": "x", "strict": True, "schema": {"type": "object"}}}
MESSAGES = [{"role": "user", "content": "Say something in JSON."}]
LONG_JSON = '{"words": "' + " ".join(["word"] * 300) + '"}'


def _complete(server: FakeLLMServer, **kwargs: Any) -> Any:
    kwargs.setdefault("messages", MESSAGES)
    return asyncio.run(litellm.acompletion(model="openai/gemma", api_base=server.base_url, api_key="k",
                                           timeout=10, max_retries=0, **kwargs))


def test_a_refused_schema_is_a_400_naming_it_and_json_mode_still_works() -> None:
    with FakeLLMServer(refuse_formats=["json_schema"]) as srv:
        with pytest.raises(BadRequestError, match=r"response_format.*json_schema"):
            _complete(srv, response_format=SCHEMA)
        assert _complete(srv, response_format={"type": "json_object"}).choices[0].message.content == '{"ok": true}'
        srv.set_refused_formats(["json_schema", "json_object"])
        with pytest.raises(BadRequestError, match="json_object"):
            _complete(srv, response_format={"type": "json_object"})
        assert _complete(srv).choices[0].message.content == '{"ok": true}'  # no format: taken
        assert srv.stats().by_outcome == {"format_refused": 2, "ok": 2}
    with pytest.raises(ValueError, match="refuse_formats"):
        FakeLLMServer(refuse_formats=["text"])


def test_llama_cpp_publishes_a_slots_window_and_refuses_a_prompt_over_it() -> None:
    limits = ServedLimits("llama.cpp", 512, slots=4, max_output_tokens=40)
    with FakeLLMServer(lambda _: LONG_JSON, limits=limits) as srv:
        props = httpx.get(f"http://127.0.0.1:{srv.port}/props").json()
        assert props["default_generation_settings"]["n_ctx"] == 512 and props["total_slots"] == 4
        assert props["default_generation_settings"]["params"]["n_predict"] == 40
        # the server's own cap cuts a reply the request would have let run longer
        reply = _complete(srv, max_tokens=1000)
        assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 40
        too_long = [{"role": "user", "content": "many words " * 400}]
        assert count_prompt_tokens(too_long) > 512
        with pytest.raises(ContextWindowExceededError, match="exceeds the available context size"):
            _complete(srv, messages=too_long)
        assert srv.stats().by_outcome == {"max_tokens": 1, "context_exceeded": 1}
        srv.set_limits(ServedLimits("llama.cpp", 512, slots=4, whole_context=True))
        props = httpx.get(f"http://127.0.0.1:{srv.port}/props").json()
        assert props["n_ctx"] == 2048 and "n_ctx" not in props["default_generation_settings"]
        assert httpx.post(f"http://127.0.0.1:{srv.port}/api/show", json={"model": "gemma"}).status_code == 404
        assert srv.probes_log == ["GET /props", "GET /props", "POST /api/show"]


def test_vllm_publishes_max_model_len_and_counts_the_reply_budget_in_the_window() -> None:
    with FakeLLMServer(limits=ServedLimits("vllm", 1024)) as srv:
        models = httpx.get(f"{srv.base_url}/models").json()
        assert models["data"][0]["max_model_len"] == 1024
        assert httpx.get(f"http://127.0.0.1:{srv.port}/props").status_code == 404
        assert _complete(srv, max_tokens=900).choices[0].finish_reason == "stop"
        with pytest.raises(ContextWindowExceededError, match="maximum context length is 1024"):
            _complete(srv, max_tokens=1020)


def test_ollama_shows_num_ctx_among_the_parameters() -> None:
    with FakeLLMServer(limits=ServedLimits("ollama", 4096)) as srv:
        shown = httpx.post(f"http://127.0.0.1:{srv.port}/api/show", json={"model": "gemma3:270m"}).json()
        assert "num_ctx 4096" in shown["parameters"].splitlines()
        assert shown["model_info"]["gemma3.context_length"] == 32768
        assert "max_model_len" not in httpx.get(f"{srv.base_url}/models").json()["data"][0]
        srv.set_limits(ServedLimits("ollama", 4096, ollama_num_ctx=False))
        shown = httpx.post(f"http://127.0.0.1:{srv.port}/api/show", json={"model": "gemma3:270m"}).json()
        assert "num_ctx" not in shown["parameters"]


def test_without_limits_the_server_publishes_none() -> None:
    with FakeLLMServer() as srv:
        assert httpx.get(f"http://127.0.0.1:{srv.port}/props").status_code == 404
        assert "max_model_len" not in httpx.get(f"{srv.base_url}/models").json()["data"][0]
        assert httpx.post(f"http://127.0.0.1:{srv.port}/api/show", json={"model": "m"}).status_code == 404

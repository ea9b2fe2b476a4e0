"""How the fake server plays a self-hosted one (llama.cpp's llama-server, vLLM, Ollama): what it tells of its
own limits, and what it refuses.

- :class:`ServedLimits`: the server's context window (per request: a llama.cpp slot's share) and its own cap
  on generated tokens, published where that kind of server publishes them (llama.cpp ``GET /props``, vLLM
  ``max_model_len`` in ``GET /v1/models``, Ollama ``POST /api/show``), and enforced with the 400 that kind of
  server sends for a request over the window;
- ``refuse_formats``: the ``response_format`` types the server answers with a 400 naming them, the way a
  build without grammar support for JSON schemas (or a server with no JSON mode) does.

- :class:`LimitProbes`: the endpoints a client reads those limits from, and llama.cpp's ``/slots`` (which
  slots are working now), logged (``probes_log``).

The chat endpoint (``chat.py``) enforces the window, the cap and the refusals; what is here is pure functions
of the request and the settings, and the endpoints that publish them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, Final, Literal

from aiohttp import web

from faithfulness_pipeline.testing.fakellm.wire import error_body

Kind = Literal["llama.cpp", "vllm", "ollama"]
KINDS: Final = ("llama.cpp", "vllm", "ollama")
#: response_format types a server may refuse ("text" is always taken).
FORMATS: Final = ("json_schema", "json_object")


@dataclass(frozen=True)
class ServedLimits:
    """A self-hosted server's own limits.

    ``context_window`` is what one request may hold, prompt and reply (for llama.cpp a slot's share of
    ``-c``: ``-c 8192 -np 4`` gives 2048). ``max_output_tokens`` is the server's own cap on a reply (llama.cpp
    ``-n``): a longer reply is cut, with ``finish_reason`` "length", whatever ``max_tokens`` the request asked.
    ``whole_context`` publishes llama.cpp's window the way some builds do, as the whole context (``n_ctx`` at
    the top of ``/props``) to be shared by ``slots``; ``ollama_num_ctx`` False leaves ``num_ctx`` out of
    Ollama's parameters (the model's trained length only).
    """

    kind: Kind
    context_window: int
    slots: int = 1
    max_output_tokens: int | None = None
    enforce: bool = True
    whole_context: bool = False
    ollama_num_ctx: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        if self.context_window < 1 or self.slots < 1:
            raise ValueError("context_window and slots must be >= 1")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError("max_output_tokens must be >= 1 or None")

    def props(self, model: str) -> dict[str, Any]:
        """llama.cpp's ``GET /props`` (the fields a client reads, and a few more)."""
        n_predict = -1 if self.max_output_tokens is None else self.max_output_tokens
        body: dict[str, Any] = {
            "default_generation_settings": {"n_ctx": self.context_window, "params": {"n_predict": n_predict}},
            "total_slots": self.slots,
            "model_path": f"/models/{model}.gguf",
            "build_info": "b0000-fakellm",
        }
        if self.whole_context:
            del body["default_generation_settings"]["n_ctx"]
            body["n_ctx"] = self.context_window * self.slots
        return body

    def models_entry(self) -> dict[str, Any]:
        """What vLLM adds to a model of ``GET /v1/models``."""
        return {"max_model_len": self.context_window} if self.kind == "vllm" else {}

    def show(self, model: str) -> dict[str, Any]:
        """Ollama's ``POST /api/show``: the trained length in ``model_info``, the window in ``parameters``."""
        parameters = "stop \"<end_of_turn>\""
        if self.ollama_num_ctx:
            parameters = f"num_ctx {self.context_window}\n{parameters}"
        return {
            "modelfile": f"FROM {model}",
            "parameters": parameters,
            "details": {"family": "gemma3", "format": "gguf"},
            "model_info": {"general.architecture": "gemma3", "gemma3.context_length": 32768},
        }

    def over_window(self, prompt_tokens: int, max_tokens: int | None) -> str | None:
        """The server's 400 message for a request over the window, or None when it fits (or is not checked).

        llama.cpp refuses a prompt that alone fills the slot; vLLM a prompt whose reply budget would not fit.
        """
        if not self.enforce:
            return None
        window = self.context_window
        if self.kind == "vllm":
            asked = prompt_tokens + (max_tokens or 0)
            if asked <= window:
                return None
            return (f"This model's maximum context length is {window} tokens. However, you requested {asked} "
                    f"tokens ({prompt_tokens} in the messages, {max_tokens or 0} in the completion). Please reduce "
                    f"the length of the messages or completion.")
        if prompt_tokens < window:
            return None
        return (f"request ({prompt_tokens} tokens) exceeds the available context size ({window} tokens), "
                "try increasing it")

    def cap(self, max_tokens: int | None, prompt_tokens: int) -> int | None:
        """Tokens the reply may have: the request's ``max_tokens``, the server's own cap, and for llama.cpp what
        is left of the slot after the prompt (generation stops where the slot is full)."""
        caps = [c for c in (max_tokens, self.max_output_tokens) if c is not None]
        if self.kind == "llama.cpp":
            caps.append(max(1, self.context_window - prompt_tokens))
        return min(caps) if caps else None


def refusal(response_format: dict[str, Any] | None, refused: Collection[str]) -> str | None:
    """The 400 message for a ``response_format`` the server does not take, or None."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind not in refused:
        return None
    allowed = " or ".join(f'"{t}"' for t in ("text", *FORMATS) if t not in refused)
    return f'"response_format" type must be one of {allowed}, but got: {kind}'


def refused_formats(formats: Collection[str]) -> frozenset[str]:
    """The ``response_format`` types to refuse, checked against those a server may refuse."""
    chosen = frozenset(formats)
    if not chosen <= set(FORMATS):
        raise ValueError(f"refuse_formats must be among {FORMATS}, got {sorted(chosen)}")
    return chosen


class LimitProbes:
    """``GET /v1/models``, llama.cpp's ``GET /props`` and Ollama's ``POST /api/show``, answered from the limits
    the server has now (``limits``, read at each request: the server may change them while it runs)."""

    def __init__(self, limits: Callable[[], ServedLimits | None], working: Callable[[], int] = lambda: 0) -> None:
        self._limits = limits
        self._working = working  # requests being answered now: llama.cpp's /slots shows them as processing
        self._lock = threading.Lock()
        #: GET and POST requests of the endpoints a client reads a server's limits from (``/props`` ...)
        self.log: list[str] = []

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/v1/models", self._models)
        router.add_get("/models", self._models)
        router.add_get("/props", self._props)
        router.add_get("/slots", self._slots)
        router.add_post("/api/show", self._show)

    def reset(self) -> None:
        with self._lock:
            self.log.clear()

    def _probed(self, request: web.Request) -> None:
        with self._lock:
            self.log.append(f"{request.method} {request.path}")

    async def _models(self, request: web.Request) -> web.Response:
        self._probed(request)
        limits = self._limits()
        extra = limits.models_entry() if limits is not None else {}
        data = [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fakellm", **extra}]
        return web.json_response({"object": "list", "data": data})

    async def _props(self, request: web.Request) -> web.Response:
        self._probed(request)
        limits = self._limits()
        if limits is None or limits.kind != "llama.cpp":
            return web.json_response(error_body("File Not Found", "not_found_error", None), status=404)
        return web.json_response(limits.props("fake-model"))

    async def _slots(self, request: web.Request) -> web.Response:
        """llama.cpp's ``GET /slots``: each slot, ``is_processing`` while it reads a prompt or generates."""
        self._probed(request)
        limits = self._limits()
        if limits is None or limits.kind != "llama.cpp":
            return web.json_response(error_body("File Not Found", "not_found_error", None), status=404)
        busy = self._working()
        return web.json_response([{"id": k, "id_task": -1, "n_ctx": limits.context_window, "is_processing": k < busy}
                                  for k in range(limits.slots)])  # fmt: skip

    async def _show(self, request: web.Request) -> web.Response:
        self._probed(request)
        limits = self._limits()
        if limits is None or limits.kind != "ollama":
            return web.Response(status=404, text="404 page not found")
        try:
            body = await request.json()
        except ValueError:
            return web.json_response({"error": "invalid JSON"}, status=400)
        name = body.get("model") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name:
            return web.json_response({"error": "model is required"}, status=400)
        return web.json_response(limits.show(name))

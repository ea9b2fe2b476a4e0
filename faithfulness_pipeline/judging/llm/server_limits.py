"""What a self-hosted server says of its own limits, asked once per run where litellm knows no window.

litellm's model map knows the windows of vendors' models, not of a model behind a server of one's own; the
server does, per request: llama.cpp's llama-server a slot's share of its ``-c`` (``GET /props``), vLLM
``max_model_len`` (``GET /v1/models``), Ollama the ``num_ctx`` of the model (``POST /api/show``). Packing to
that window instead of a guess keeps requests from being refused (or, by Ollama, silently cut).

Every probe goes to the configured ``api_base``'s host and nowhere else (redirects are not followed), with a
short timeout; whatever goes wrong (no such endpoint, an error, a timeout, a reply of another shape) ends in
None and one log line, and the judge falls back to the setting. Standard library only: no litellm, no
client of its own to configure.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from faithfulness_pipeline.judging.llm.reachability import shown

log = logging.getLogger(__name__)

#: Longest wait for one probe: a server that is slow to say what it is must not hold the run's start.
PROBE_TIMEOUT_S: Final = 5.0
#: Most bytes read of a probe's reply (llama.cpp's ``/props`` carries the chat template: tens of kB).
MAX_REPLY_BYTES: Final = 4 * 1024 * 1024
#: What Ollama gives a model without ``num_ctx`` on a small machine (its default depends on its version,
#: ``OLLAMA_CONTEXT_LENGTH`` and the GPU's memory, none of which it reports): a prompt over it is cut,
#: without an error, so the judge assumes no more.
OLLAMA_DEFAULT_NUM_CTX: Final = 4096


@dataclass(frozen=True, slots=True)
class ServerWindow:
    """A server's window per request (prompt and reply), its own cap on a reply, and where they were read;
    ``working_url``: where the server says whether it is working now (llama.cpp's ``/slots``), if it does."""

    context_window: int
    max_output_tokens: int | None
    source: str
    working_url: str | None = None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A probe's redirect is not followed: it could point at another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER: Final = urllib.request.build_opener(_NoRedirects)


class _Unreachable(Exception):
    """No server answered: the other probes would not be answered either."""


def served_name(model: str) -> str:
    """The model's name on the server: the litellm model without its provider prefix (``openai/gemma``)."""
    return model.split("/", 1)[1] if "/" in model else model


def ask_server(api_base: str, model: str, *, api_key: str | None, timeout_s: float) -> ServerWindow | None:
    """The window ``api_base``'s server reports for ``model`` (llama.cpp, vLLM, Ollama, asked in that order),
    or None when none of them answers with one."""
    base = api_base.rstrip("/")
    root = re.sub(r"/v1$", "", base)
    name = served_name(model)
    timeout = min(timeout_s, PROBE_TIMEOUT_S)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    probes: tuple[Callable[[], ServerWindow | None], ...] = (
        lambda: _llama_cpp(_get(f"{root}/props", headers, timeout), f"{root}/slots"),
        lambda: _vllm(_get(f"{base}/models", headers, timeout), name),
        lambda: _ollama(_post(f"{root}/api/show", {"model": name}, headers, timeout)),
    )
    try:
        for probe in probes:
            found = probe()
            if found is not None:
                log.info("judge: the server at %s has %d tokens a request (%s)", shown(api_base),
                         found.context_window, found.source)
                return found
    except _Unreachable as exc:
        log.info("judge: could not ask the server at %s for its context window (%s): using the setting",
                 shown(api_base), exc)
        return None
    log.info("judge: the server at %s reports no context window (not llama.cpp, vLLM or Ollama?): using the "
             "setting", shown(api_base))
    return None


# ------------------------------------------------------------------------------------------- the kinds


def _llama_cpp(props: Any, slots_url: str) -> ServerWindow | None:
    """llama.cpp's ``/props``: ``default_generation_settings.n_ctx`` is a slot's window (``-c`` shared by
    ``-np`` slots); builds that report only the whole ``n_ctx`` share it out over ``total_slots`` here."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    settings = settings if isinstance(settings, dict) else {}
    slots = _positive(props.get("total_slots")) or 1
    per_slot = _positive(settings.get("n_ctx"))
    if per_slot is None:
        whole = _positive(props.get("n_ctx"))
        if whole is None:
            return None
        per_slot = whole // slots
        how = f"n_ctx {whole} shared by {slots} slots"
    else:
        how = f"n_ctx {per_slot} a slot, {slots} slots"
    params = settings.get("params")
    n_predict = _positive(params.get("n_predict")) if isinstance(params, dict) else None
    cap = f", replies cut at {n_predict} tokens (n_predict)" if n_predict else ""
    return ServerWindow(per_slot, n_predict, f"llama.cpp /props: {how}{cap}", slots_url)


def _vllm(models: Any, name: str) -> ServerWindow | None:
    """vLLM's ``/v1/models``: ``max_model_len`` of the served model (or of the only one)."""
    data = models.get("data") if isinstance(models, dict) else None
    if not isinstance(data, list):
        return None
    entries = [m for m in data if isinstance(m, dict)]
    named = [m for m in entries if m.get("id") == name] or (entries if len(entries) == 1 else [])
    window = _positive(named[0].get("max_model_len")) if named else None
    if window is None:
        return None
    return ServerWindow(window, None, f"vLLM /v1/models: max_model_len {window}")


def _ollama(show: Any) -> ServerWindow | None:
    """Ollama's ``/api/show``: ``num_ctx`` among the model's parameters; without it, Ollama's own default, at
    most the trained length (``<architecture>.context_length`` in ``model_info``)."""
    if not isinstance(show, dict):
        return None
    parameters = show.get("parameters")
    found = re.search(r"(?m)^\s*num_ctx\s+(\d+)\s*$", parameters) if isinstance(parameters, str) else None
    if found is not None and int(found.group(1)) > 0:
        window = int(found.group(1))
        return ServerWindow(window, None, f"Ollama /api/show: num_ctx {window}")
    info = show.get("model_info")
    if not isinstance(info, dict):
        return None
    trained = [v for k, v in info.items() if k.endswith(".context_length") and _positive(v)]
    if not trained:
        return None
    window = min(int(trained[0]), OLLAMA_DEFAULT_NUM_CTX)
    return ServerWindow(window, None, f"Ollama /api/show: no num_ctx set, so {window}, Ollama's smallest default "
                                      "(for more, set num_ctx in the Modelfile, or --context-window to what "
                                      "OLLAMA_CONTEXT_LENGTH gives)")


def server_working(url: str, *, api_key: str | None, timeout_s: float) -> bool:
    """Whether llama.cpp's ``/slots`` at ``url`` shows a slot processing (reading a prompt or generating).
    False when it cannot tell (the endpoint disabled with ``--no-slots``, an error, no answer): silence is
    then taken for what it looks like."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        slots = _get(url, headers, min(timeout_s, PROBE_TIMEOUT_S))
    except _Unreachable:
        return False
    return isinstance(slots, list) and any(isinstance(s, dict) and s.get("is_processing") is True for s in slots)


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


# ------------------------------------------------------------------------------------------------ HTTP


def _get(url: str, headers: dict[str, str], timeout: float) -> Any:
    return _fetch(urllib.request.Request(url, headers=headers, method="GET"), timeout)


def _post(url: str, body: dict[str, Any], headers: dict[str, str], timeout: float) -> Any:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={**headers, "Content-Type": "application/json"})
    return _fetch(request, timeout)


def _fetch(request: urllib.request.Request, timeout: float) -> Any:
    """The reply's JSON; None for an error status or a reply that is not JSON. Raises :class:`_Unreachable`
    when no server answered (refused, reset, timed out)."""
    try:
        with _OPENER.open(request, timeout=timeout) as reply:
            raw = reply.read(MAX_REPLY_BYTES + 1)
    except urllib.error.HTTPError:  # 404 and the like: not this kind of server
        return None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:  # ValueError: a bad URL
        reason = getattr(exc, "reason", exc)
        raise _Unreachable(getattr(reason, "strerror", None) or type(reason).__name__) from None
    if len(raw) > MAX_REPLY_BYTES:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None

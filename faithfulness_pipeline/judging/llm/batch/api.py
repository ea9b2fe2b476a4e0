"""The provider's Files and Batches endpoints, through litellm: the only place the batch judge calls out.

Each call is one HTTP request with a timeout; what goes wrong becomes a :class:`BatchAPIError` whose
text has the API key scrubbed out. The calls are litellm's synchronous ones, each on a worker thread:
litellm's asynchronous file and batch calls build a new client per call on an executor thread, outside
any event loop, and never close it, so its connections outlive the ``asyncio.run`` that made them (later
runs printed "Event loop is closed" as they were collected, and one CI run stalled on a call for its
600 s timeout). Synchronous clients belong to no loop. Creating a batch is retried on 429 (providers cap
how many batches are queued at once); every other call is left to the caller's polling loop, which simply
looks again.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from faithfulness_pipeline.core.errors import ConfigError
from faithfulness_pipeline.judging.llm.card import import_litellm
from faithfulness_pipeline.judging.llm.failures import quota_used_up
from faithfulness_pipeline.judging.llm.limits import retry_after_from_headers
from faithfulness_pipeline.judging.llm.reachability import shown

#: Providers whose batch endpoints litellm speaks (``litellm.acreate_batch``'s ``custom_llm_provider``).
BATCH_PROVIDERS: Final = ("openai", "azure", "vertex_ai", "bedrock", "hosted_vllm", "litellm_proxy", "mistral", "xai")
#: The statuses after which a batch changes no more.
TERMINAL: Final = frozenset({"completed", "failed", "expired", "cancelled"})
#: Tries of a batch creation answered 429, and the pause when the reply names none.
CREATE_TRIES: Final = 6
CREATE_PAUSE_S: Final = 2.0
#: Per-call timeout of the file and batch endpoints (uploads of up to 200 MB included).
CALL_TIMEOUT_S: Final = 600.0


class BatchAPIError(Exception):
    """A call to the batch endpoints that failed; ``fatal`` when no later call can work (a refused key)."""

    def __init__(self, reason: str, fatal: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.fatal = fatal


@dataclass(frozen=True, slots=True)
class BatchView:
    """What a look at a batch tells."""

    id: str
    status: str
    completed: int = 0
    failed: int = 0
    total: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    errors: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


class BatchAPI:
    """Upload, create, look at, read and cancel batches of one model's provider: ``model`` at ``api_base`` (None:
    the provider's own endpoint). A 429 on a creation whose Retry-After is longer than ``retry_after_max_s`` is a
    failure, not a pause (as for requests)."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None,
        retry_after_max_s: float,
        api_key: str | None,
        redact: Callable[[str], str],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        litellm = import_litellm()
        try:
            self.model, self.provider = litellm.get_llm_provider(model)[:2]
        except Exception as exc:
            raise ConfigError(f"batch mode: litellm does not know the provider of {model!r}: {exc}") from None
        if self.provider not in BATCH_PROVIDERS:
            raise ConfigError(
                f"batch mode: litellm has no batch endpoints for provider {self.provider!r} (model {model}); "
                f"use one of {', '.join(BATCH_PROVIDERS)} or the interactive mode"
            )
        self.api_base = api_base
        self.retry_after_max_s = retry_after_max_s
        self._api_key = api_key
        self._redact = redact
        self._sleep = sleep

    async def _litellm(self, call: str, **arguments: Any) -> Any:
        """litellm's synchronous ``call`` on a worker thread (see the module's docstring)."""
        return await asyncio.to_thread(getattr(import_litellm(), call), **arguments, **self._kwargs())

    def _kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"custom_llm_provider": self.provider, "timeout": CALL_TIMEOUT_S}
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if self._api_key:
            kwargs["api_key"] = self._api_key
        return kwargs

    def _failure(self, what: str, exc: BaseException) -> BatchAPIError:
        # litellm's file and batch calls raise the openai SDK's errors (litellm's own subclass them).
        import openai

        detail = self._redact(" ".join(str(exc).split()))[:300]
        fatal = isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError | openai.NotFoundError)
        if quota_used_up(exc, detail):
            return BatchAPIError(f"{what} failed: the provider says the account's quota is used up "
                                 f"(insufficient_quota): {detail}; add credit or raise the limit, then re-run",
                                 fatal=True)
        return BatchAPIError(f"{what} failed ({type(exc).__name__}): {detail}", fatal=fatal)

    async def upload(self, data: bytes, name: str) -> str:
        import openai

        try:
            created = await self._litellm("create_file", file=(name, data), purpose="batch")
        except openai.NotFoundError as exc:
            # The first call of a batch run: a server without a files endpoint (llama.cpp, vLLM, Ollama, TGI:
            # chat completions only) answers 404 here, and no later call could succeed.
            detail = self._redact(" ".join(str(exc).split()))[:200]
            where = shown(self.api_base) if self.api_base else f"provider {self.provider}"
            raise BatchAPIError(f"{where} has no Batch API (uploading the batch input file: {detail}); "
                                "self-hosted servers serve chat completions only: use --mode interactive",
                                fatal=True) from None
        except Exception as exc:
            raise self._failure("uploading the batch input file", exc) from None
        return str(created.id)

    async def create(self, input_file_id: str, tag: str) -> BatchView:
        """A batch over an uploaded file, tagged so that a run that lost its id finds it (:meth:`find`)."""
        import openai

        for attempt in range(1, CREATE_TRIES + 1):
            try:
                batch = await self._litellm(
                    "create_batch", completion_window="24h", endpoint="/v1/chat/completions",
                    input_file_id=input_file_id, metadata={"fp_submission": tag},
                )
                return _view(batch)
            except openai.RateLimitError as exc:
                if attempt == CREATE_TRIES or quota_used_up(exc, str(exc)):
                    raise self._failure(f"creating a batch ({attempt} tries)", exc) from None
                response = getattr(exc, "response", None)
                headers = getattr(exc, "litellm_response_headers", None) or getattr(response, "headers", None)
                pause = retry_after_from_headers(dict(headers) if headers else None)
                if pause is not None and pause > self.retry_after_max_s:
                    raise BatchAPIError(
                        f"creating a batch failed: rate limited (429) with Retry-After {pause:g} s, longer than the "
                        f"{self.retry_after_max_s:g} s waited out at most (--retry-after-max, "
                        f"FP_JUDGE_RETRY_AFTER_MAX_S); re-run once the limit has reset", fatal=True) from None
                await self._sleep(pause if pause is not None else CREATE_PAUSE_S * attempt)
            except Exception as exc:
                raise self._failure("creating a batch", exc) from None
        raise AssertionError("unreachable")

    async def retrieve(self, batch_id: str) -> BatchView:
        try:
            return _view(await self._litellm("retrieve_batch", batch_id=batch_id))
        except Exception as exc:
            raise self._failure(f"looking at batch {batch_id}", exc) from None

    async def content(self, file_id: str) -> bytes:
        try:
            response = await self._litellm("file_content", file_id=file_id)
        except Exception as exc:
            raise self._failure(f"reading file {file_id}", exc) from None
        data = getattr(response, "content", response)
        return data if isinstance(data, bytes) else str(data).encode()

    async def find(self, tag: str) -> BatchView | None:
        """The batch created with submission ``tag``, if the provider lists it (None: it was never created)."""
        try:
            page = await self._litellm("list_batches", limit=100)
        except Exception as exc:
            raise self._failure("listing batches", exc) from None
        for batch in getattr(page, "data", None) or []:
            view = _view(batch)
            if view.metadata.get("fp_submission") == tag:
                return view
        return None

    async def cancel(self, batch_id: str) -> None:
        try:
            await self._litellm("cancel_batch", batch_id=batch_id)
        except Exception as exc:
            raise self._failure(f"cancelling batch {batch_id}", exc) from None


def _view(batch: Any) -> BatchView:
    counts = getattr(batch, "request_counts", None)
    errors = getattr(batch, "errors", None)
    messages: list[str] = []
    for error in getattr(errors, "data", None) or []:
        line = getattr(error, "line", None)
        where = f" (line {line})" if line is not None else ""
        messages.append(f"{getattr(error, 'code', None) or 'error'}{where}: {getattr(error, 'message', '')}")
    metadata = getattr(batch, "metadata", None) or {}
    return BatchView(
        id=str(batch.id),
        status=str(batch.status),
        completed=int(getattr(counts, "completed", 0) or 0),
        failed=int(getattr(counts, "failed", 0) or 0),
        total=int(getattr(counts, "total", 0) or 0),
        output_file_id=getattr(batch, "output_file_id", None),
        error_file_id=getattr(batch, "error_file_id", None),
        errors=messages,
        metadata={str(k): str(v) for k, v in dict(metadata).items()},
    )


def request_line(custom_id: str, body: dict[str, Any]) -> bytes:
    """One line of a batch input file."""
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

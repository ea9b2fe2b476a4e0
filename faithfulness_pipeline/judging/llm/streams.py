"""Reading a streamed reply to its end, under the judge's own two bounds (the whole request, and the
silence between pieces), and telling a stream from a reply that came whole to a streamed request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from faithfulness_pipeline.judging.llm.replies import Answer, whole_answer


class StreamTimeout(TimeoutError):
    """A streamed request given up on by one of the judge's own bounds; ``reason`` says which."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: What litellm's errors say when it ends a stream that repeats one piece over and over
#: (``CustomStreamWrapper.raise_on_model_repetition``), and when a stream ended without a finish_reason;
#: tests/judging/test_private_litellm.py checks both.
REPEATING: Final = "The model is repeating the same chunk"
UNFINISHED: Final = "Stream ended before a finish_reason was received"


def says(exc: BaseException, words: str) -> bool:
    """Whether ``exc``, or an error it was raised from, says ``words``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if words in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False


#: Not known: litellm keeps no chunks where the judge can see them.
UNKNOWN: Final = object()


def kept_usage(stream: Any) -> Any:
    """The usage the server sent in a stream, None when it sent none, :data:`UNKNOWN` when litellm does not
    say. litellm keeps the server's usage chunk among the stream's chunks (``CustomStreamWrapper.chunks``)."""
    kept = getattr(stream, "chunks", None)
    if not isinstance(kept, list):
        return UNKNOWN
    usages = [usage for chunk in kept if (usage := getattr(chunk, "usage", None)) is not None]
    return usages[-1] if usages else None


async def not_streamed(stream: Any) -> str | None:
    """The body of a reply that came whole to a streamed request (a proxy's web page, a server that ignores
    ``stream``), None when the reply is a stream. Told by its content type (litellm keeps the reply's
    headers, ``llm_provider-`` before each name)."""
    hidden = getattr(stream, "_hidden_params", None)
    headers = hidden.get("additional_headers") if isinstance(hidden, dict) else None
    kind = str(headers.get("llm_provider-content-type") or "") if isinstance(headers, dict) else ""
    if not kind or "text/event-stream" in kind:
        return None
    response = getattr(getattr(stream, "completion_stream", None), "response", None)
    read = getattr(response, "aread", None)
    if read is None:
        return ""
    raw = await read()
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


async def read_stream(litellm: Any, kwargs: dict[str, Any], *, stream_max_s: float, timeout_s: float,
                      on_piece: Callable[[str], None]) -> tuple[Answer, bool]:
    """One streamed request, read to its end, and whether it came as a stream (not whole). Two bounds of
    the judge's own: ``stream_max_s`` on the whole request, the wait for its first piece included, and,
    once pieces come, ``timeout_s`` on the silence after each. A request that breaks one is closed (the
    server stops generating) and raises :class:`StreamTimeout`. ``on_piece`` hears each piece of text."""
    loop = asyncio.get_running_loop()
    answer = Answer(choices=False)
    whole, silence = asyncio.timeout(stream_max_s), asyncio.timeout(None)
    stream: Any = None
    try:
        async with whole:
            stream = await litellm.acompletion(**kwargs)
            body = await not_streamed(stream)
            if body is not None:
                return whole_answer(body), False
            async with silence:
                try:
                    async for chunk in stream:
                        # A new deadline per piece: a reply may take as long as it likes while pieces come.
                        silence.reschedule(loop.time() + timeout_s)
                        piece = answer.add(chunk)
                        if piece:
                            on_piece(piece)
                except Exception as exc:
                    if answer.pieces and says(exc, REPEATING):
                        # litellm ends a reply that repeats one piece over and over (a model in a loop). What
                        # came is the reply, cut: sent again unchanged it would loop again; parsed, it is
                        # re-asked in smaller packs or with a repair message.
                        answer.finish_reason = "length"
                    elif not says(exc, UNFINISHED):
                        raise
                    # else the server ended the stream properly, if without a finish_reason: what came is the
                    # reply (none at all: a reply without choices, never sent again unchanged)
    except TimeoutError:
        if silence.expired():
            raise StreamTimeout(f"timed out: nothing came for {timeout_s:g} s in the middle of a streamed "
                                f"reply (--timeout)") from None
        if whole.expired():
            raise StreamTimeout(f"timed out: a streamed reply took over {stream_max_s:g} s in all, the wait "
                                f"for its first token included (--stream-max)") from None
        raise
    finally:
        if stream is not None:  # the connection goes, so the server stops working on a reply given up
            await stream.aclose()
    kept = kept_usage(stream)
    if kept is not UNKNOWN:
        # The server's own usage, as litellm kept it: at the end of a stream litellm hands out a usage of its
        # own counting when the server sent none, and none when the stream did not end normally.
        answer.usage = kept
    return answer, True

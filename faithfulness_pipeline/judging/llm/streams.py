"""Reading a streamed reply to its end, under the judge's own two bounds (the whole request, and the
silence between pieces), and telling a stream from a reply that came whole to a streamed request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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


async def _read_pieces(stream: Any, answer: Answer, timeout_s: float, on_piece: Callable[[str], None],
                       still_working: Callable[[], Awaitable[bool]] | None) -> None:
    """The stream's chunks into ``answer``. Where the server can say whether it is working, each next chunk
    is awaited as a task of its own, so that a silence can be looked into without cancelling the read under
    way; elsewhere a silence is simply a timeout, and one deadline moved at each chunk costs less CPU a piece."""
    if still_working is None:
        await _read_until_silent(stream, answer, timeout_s, on_piece)
        return
    chunks = aiter(stream)
    started = False  # before the first chunk only ``stream_max_s`` bounds the wait (queue, prompt)
    while True:
        step = asyncio.ensure_future(anext(chunks))
        try:
            while not (await asyncio.wait({step}, timeout=timeout_s if started else None))[0]:
                if not await still_working():
                    raise StreamTimeout(f"timed out: nothing came for {timeout_s:g} s in the middle of a streamed "
                                        f"reply (--timeout)")
        finally:
            if not step.done():
                step.cancel()
        try:
            chunk = step.result()
        except StopAsyncIteration:
            return
        started = True
        piece = answer.add(chunk)
        if piece:
            on_piece(piece)


async def _read_until_silent(stream: Any, answer: Answer, timeout_s: float, on_piece: Callable[[str], None]) -> None:
    """The stream's chunks into ``answer``, a silence of ``timeout_s`` after the first one a timeout."""
    loop = asyncio.get_running_loop()
    silence = asyncio.timeout(None)  # before the first chunk only ``stream_max_s`` bounds the wait
    try:
        async with silence:
            async for chunk in stream:
                silence.reschedule(loop.time() + timeout_s)  # a reply may take as long as it likes while pieces come
                piece = answer.add(chunk)
                if piece:
                    on_piece(piece)
    except TimeoutError:
        if silence.expired():
            raise StreamTimeout(f"timed out: nothing came for {timeout_s:g} s in the middle of a streamed reply "
                                f"(--timeout)") from None
        raise


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
                      on_piece: Callable[[str], None],
                      still_working: Callable[[], Awaitable[bool]] | None = None) -> tuple[Answer, bool]:
    """One streamed request, read to its end, and whether it came as a stream (not whole). Two bounds of
    the judge's own: ``stream_max_s`` on the whole request, the wait for its first piece included, and,
    once pieces come, ``timeout_s`` on the silence after each. A request that breaks one is closed (the
    server stops generating) and raises :class:`StreamTimeout`. ``on_piece`` hears each piece of text.

    ``still_working``, where the server can say it is working (llama.cpp's ``/slots``), is asked when a
    silence reaches ``timeout_s``: while it says yes the silence is waited out, up to ``stream_max_s``.
    llama.cpp generates for no slot while it reads a prompt, so on a CPU every stream goes quiet for as long
    as a new request's prompt takes; that is work, not a hung server."""
    answer = Answer(choices=False)
    whole = asyncio.timeout(stream_max_s)
    stream: Any = None
    try:
        async with whole:
            stream = await litellm.acompletion(**kwargs)
            body = await not_streamed(stream)
            if body is not None:
                return whole_answer(body), False
            try:
                await _read_pieces(stream, answer, timeout_s, on_piece, still_working)
            except StreamTimeout:
                raise
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

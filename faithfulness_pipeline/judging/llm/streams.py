"""Reading a streamed reply to its end, under the judge's own two bounds (the whole request, and the
silence of a reply the server has begun), and telling a stream from a reply that came whole to a streamed
request.

The server has begun its reply once its answer's head has come (litellm's ``acompletion`` returns then).
Before that only ``stream_max_s`` bounds the wait: the request sits in the server's queue, or the server
reads its prompt, and a server that answers late sends nothing at all meanwhile. From then on ``timeout_s``
bounds every silence, the one before the first piece included: a body that trickles in a byte at a time
brings no piece, so it is silence too. Where the server can say it is working (llama.cpp's ``/slots``) a
silence is looked into instead of cut (many servers, llama.cpp among them, send the head at once and then
read the prompt); a reply that came whole must have come within ``timeout_s`` of its head, as a request
sent whole is bounded as a whole (``requests.Sender``).
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
    started = False
    while True:
        step = asyncio.ensure_future(anext(chunks))
        try:
            while not (await asyncio.wait({step}, timeout=timeout_s))[0]:
                # The probe takes a while: a piece read meanwhile (or one the loop was too busy to read when
                # the bound came) ends the silence whatever the server says now.
                if not await still_working() and not step.done():
                    raise StreamTimeout(_silent(timeout_s, started))
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


def _silent(timeout_s: float, started: bool) -> str:
    """Why a stream was given up on for its silence: in the middle of its reply, or before the first piece."""
    if started:
        return f"timed out: nothing came for {timeout_s:g} s in the middle of a streamed reply (--timeout)"
    return f"timed out: the server began a streamed reply and sent no piece of it for {timeout_s:g} s (--timeout)"


async def _read_until_silent(stream: Any, answer: Answer, timeout_s: float, on_piece: Callable[[str], None]) -> None:
    """The stream's chunks into ``answer``, a silence of ``timeout_s`` (from the reply's head, then from each
    chunk) a timeout."""
    loop = asyncio.get_running_loop()
    started = False
    async with Silence(timeout_s) as silence:
        async for chunk in stream:
            started = True
            silence.heard_at = loop.time()  # a reply may take as long as it likes while pieces come
            piece = answer.add(chunk)
            if piece:
                on_piece(piece)
    if silence.expired:
        raise StreamTimeout(_silent(timeout_s, started))


#: What a silence is given beyond its bound before the read is cut, at most: time for this process's own
#: event loop to read what came while it was busy elsewhere.
GRACE_S: Final = 1.0


class Silence:
    """``async with Silence(timeout_s) as s:`` cuts the block (``s.expired``, no exception) once nothing was
    heard for ``timeout_s``; the block says it heard something by setting ``heard_at`` (loop time), which
    costs a piece nothing but that assignment.

    Unlike ``asyncio.timeout`` moved at each piece, an expired bound is looked at once more after a grace of
    ``min(GRACE_S, timeout_s / 4)``: on a busy machine the event loop itself can be held up past the bound,
    and a piece the server sent meanwhile waits unread in the socket; the grace lets the loop read it before
    the server is taken for silent."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self.heard_at = self._loop.time()
        self._grace_s = min(GRACE_S, timeout_s / 4)
        self._graced = False
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0
        self._handle: asyncio.TimerHandle | None = None

    async def __aenter__(self) -> Silence:
        self._task = asyncio.current_task()
        if self._task is None:
            raise RuntimeError("Silence is used inside a task")
        self._cancelling = self._task.cancelling()
        self._handle = self._loop.call_at(self.heard_at + self.timeout_s, self._look)
        return self

    def _look(self) -> None:
        now = self._loop.time()
        due = self.heard_at + self.timeout_s
        if now < due:  # heard since: look again when the silence since then would be up
            self._graced = False
            self._handle = self._loop.call_at(due, self._look)
        elif not self._graced:
            self._graced = True
            self._handle = self._loop.call_at(now + self._grace_s, self._look)
        else:
            self.expired = True
            assert self._task is not None
            self._task.cancel()

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if self._handle is not None:
            self._handle.cancel()
        # The cancellation was this bound's own (and no one else's, which would still be pending): swallowed.
        assert self._task is not None
        return bool(self.expired and kind is asyncio.CancelledError and self._task.uncancel() <= self._cancelling)


def kept_usage(stream: Any) -> Any:
    """The usage the server sent in a stream, None when it sent none, :data:`UNKNOWN` when litellm does not
    say. litellm keeps the server's usage chunk among the stream's chunks (``CustomStreamWrapper.chunks``)."""
    kept = getattr(stream, "chunks", None)
    if not isinstance(kept, list):
        return UNKNOWN
    usages = [usage for chunk in kept if (usage := getattr(chunk, "usage", None)) is not None]
    return usages[-1] if usages else None


async def not_streamed(stream: Any, timeout_s: float) -> str | None:
    """The body of a reply that came whole to a streamed request (a proxy's web page, a server that ignores
    ``stream``), None when the reply is a stream. Told by its content type (litellm keeps the reply's
    headers, ``llm_provider-`` before each name). A whole body is one piece: it must have come within
    ``timeout_s``, however slowly its bytes arrive, or :class:`StreamTimeout` is raised."""
    hidden = getattr(stream, "_hidden_params", None)
    headers = hidden.get("additional_headers") if isinstance(hidden, dict) else None
    kind = str(headers.get("llm_provider-content-type") or "") if isinstance(headers, dict) else ""
    if not kind or "text/event-stream" in kind:
        return None
    response = getattr(getattr(stream, "completion_stream", None), "response", None)
    read = getattr(response, "aread", None)
    if read is None:
        return ""
    raw: Any = b""
    async with Silence(timeout_s) as bound:  # nothing is heard of a whole body until all of it has come
        raw = await read()
    if bound.expired:
        raise StreamTimeout(f"timed out: a reply that came whole took over {timeout_s:g} s to arrive after its "
                            f"head (--timeout)")
    return raw.decode("utf-8", errors="replace") if isinstance(raw, bytes) else str(raw)


async def read_stream(litellm: Any, kwargs: dict[str, Any], *, stream_max_s: float, timeout_s: float,
                      on_piece: Callable[[str], None],
                      still_working: Callable[[], Awaitable[bool]] | None = None,
                      on_head: Callable[[], None] | None = None) -> tuple[Answer, bool]:
    """One streamed request, read to its end, and whether it came as a stream (not whole). Two bounds of
    the judge's own: ``stream_max_s`` on the whole request, the wait for the server's answer included, and,
    once the server has begun its reply, ``timeout_s`` on every silence (before the first piece and after
    each; a reply that came whole: on its body). A request that breaks one is closed (the server stops
    generating) and raises :class:`StreamTimeout`. ``on_piece`` hears each piece of text.

    ``still_working``, where the server can say it is working (llama.cpp's ``/slots``), is asked when a
    silence reaches ``timeout_s``: while it says yes the silence is waited out, up to ``stream_max_s``.
    llama.cpp sends a stream's head at once and then reads the prompt, and generates for no slot while it
    reads a prompt, so on a CPU a stream goes quiet for as long as a prompt takes; that is work, not a hung
    server. ``on_head`` hears that the server has begun the reply."""
    answer = Answer(choices=False)
    whole = asyncio.timeout(stream_max_s)
    stream: Any = None
    try:
        async with whole:
            stream = await litellm.acompletion(**kwargs)  # returns with the answer's head: the reply has begun
            if on_head is not None:
                on_head()
            body = await not_streamed(stream, timeout_s)
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

"""Client-side limits for LLM requests: in-flight cap, RPM/TPM token buckets, shared 429 back-off.

One ``RequestLimiter`` is shared by every request of a judge, so throttling seen by one request slows
all of them: a 429 pauses every new request until its ``Retry-After`` has passed (or an exponential
back-off when the server gives none) and halves the number of requests allowed in flight; the cap
then grows back by one after each run of successes as long as the current cap (AIMD, like TCP).

The RPM and TPM buckets start full: the first minute's budget is available at once instead of being
trickled in, and a request bigger than a whole bucket waits for a full bucket rather than forever.
Tokens are reserved from an estimate before a request and settled against the reply's usage after it.

Time is injectable (``clock``, ``sleep``) so the tests can check every decision without waiting.
"""

from __future__ import annotations

import asyncio
import email.utils
import heapq
import itertools
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

#: A Retry-After longer than this is never waited out in one go, whoever calls (the judge fails the requests
#: held back by one longer than its ``retry_after_max_s`` before they reach the limiter: a daily quota is a
#: failure, not a pause).
MAX_RETRY_AFTER_S: Final = 300.0


class TokenBucket:
    """``capacity`` units refilled evenly over a minute; starts full; may go negative on settling."""

    def __init__(self, per_minute: int, now: float) -> None:
        if per_minute < 1:
            raise ValueError(f"a per-minute limit must be >= 1, got {per_minute}")
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.level = self.capacity
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self.level = min(self.capacity, self.level + (now - self._at) * self.rate)
        self._at = max(self._at, now)

    def wait_s(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` can be taken (an amount above capacity needs a full bucket)."""
        self._refill(now)
        need = min(amount, self.capacity)
        if self.level >= need:
            return 0.0
        return (need - self.level) / self.rate

    def take(self, amount: float, now: float) -> None:
        self._refill(now)
        self.level -= amount

    def give_back(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


@dataclass
class LimiterCounters:
    """What the limiter did, for stats and tests."""

    rate_limited: int = 0  # 429 replies seen
    retry_after_honoured: int = 0  # of those, with a Retry-After that set the shared pause
    pauses_s: list[float] = field(default_factory=list)  # every shared pause set, in seconds
    backoffs_s: list[float] = field(default_factory=list)  # every per-request back-off, in seconds
    max_in_flight_seen: int = 0
    min_cap_seen: int = 0


class RequestLimiter:
    """Admission control for one judge's requests. Use ``async with limiter.slot(tokens) as s:``."""

    def __init__(
        self,
        max_in_flight: int,
        rpm: int | None = None,
        tpm: int | None = None,
        *,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        if backoff_base_s < 0 or backoff_max_s < backoff_base_s:
            raise ValueError("need 0 <= backoff_base_s <= backoff_max_s")
        self.max_in_flight = max_in_flight
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        now = clock()
        self._rpm = TokenBucket(rpm, now) if rpm else None
        self._tpm = TokenBucket(tpm, now) if tpm else None
        self.cap = max_in_flight
        self.in_flight = 0
        self._paused_until = now
        self._last_cut = float("-inf")
        self._successes = 0
        self._streak_429 = 0
        # Waiting requests, longest expected first within a bounded head start (see ``slot``); a freed
        # slot is handed to exactly one of them (waking every waiter on each release costs quadratic
        # time with thousands of packs queued).
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.counters = LimiterCounters(min_cap_seen=max_in_flight)

    # ------------------------------------------------------------------------------ admission

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (a new run): the old loop's waiters and slots are gone with it.
            self._loop = loop
            self._waiters = []
            self.in_flight = 0

    def now(self) -> float:
        """The limiter's clock (injectable in tests): what pauses and holds are measured on."""
        return self._clock()

    def slot(self, tokens: int, head_start_s: float = 0.0) -> Slot:
        """A slot for a request of ``tokens`` (for TPM). Waiting requests get free slots in arrival
        order, but a request queues as if it had arrived ``head_start_s`` earlier: given its expected
        length, the long requests of a wave leave first and the last wave ends sooner, and no request
        is passed by one that arrived more than the largest head start after it."""
        return Slot(self, tokens, head_start_s)

    async def _enter(self, tokens: int, head_start_s: float = 0.0) -> None:
        self._bind_loop()
        if not self._waiters and self.in_flight < self.cap:
            self.in_flight += 1
        else:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiters, (self._clock() - head_start_s, next(self._arrivals), waiter))
            try:
                await waiter  # resolved by _hand_over, which has counted this request in flight
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._release()  # handed a slot just as it was cancelled: pass it on
                else:
                    waiter.cancel()
                raise
        self.counters.max_in_flight_seen = max(self.counters.max_in_flight_seen, self.in_flight)
        try:
            while True:
                now = self._clock()
                wait = self._paused_until - now
                if self._rpm is not None:
                    wait = max(wait, self._rpm.wait_s(1, now))
                if self._tpm is not None:
                    wait = max(wait, self._tpm.wait_s(tokens, now))
                if wait <= 0:
                    break
                await self._sleep(wait)
            if self._rpm is not None:
                self._rpm.take(1, now)
            if self._tpm is not None:
                self._tpm.take(tokens, now)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self._hand_over()

    def _hand_over(self) -> None:
        """Gives free slots (the cap may have grown) to the first waiting requests in queue order (arrival
        less head start), one each."""
        while self._waiters and self.in_flight < self.cap:
            _, _, waiter = heapq.heappop(self._waiters)
            if waiter.done():  # cancelled while it waited
                continue
            self.in_flight += 1
            waiter.set_result(None)

    def settle(self, reserved: int, actual: int) -> None:
        """Corrects the TPM bucket once the reply's real token usage is known."""
        if self._tpm is not None and actual != reserved:
            if actual < reserved:
                self._tpm.give_back(reserved - actual)
            else:
                self._tpm.take(actual - reserved, self._clock())

    def unused(self, reserved: int) -> None:
        """A slot given up before its request was sent: its RPM and TPM shares go back to the buckets."""
        if self._rpm is not None:
            self._rpm.give_back(1)
        if self._tpm is not None:
            self._tpm.give_back(reserved)

    # ------------------------------------------------------------------------------- feedback

    def on_success(self) -> None:
        self._streak_429 = 0
        self._successes += 1
        if self.cap < self.max_in_flight and self._successes >= self.cap:
            self._successes = 0
            self.cap += 1  # waiters see it when this request's slot is released

    def on_rate_limited(self, retry_after_s: float | None) -> float:
        """Records a 429: pauses every request and lowers the in-flight cap. Returns the pause set."""
        now = self._clock()
        self.counters.rate_limited += 1
        self._streak_429 += 1
        if retry_after_s is not None and retry_after_s >= 0:
            pause = min(retry_after_s, MAX_RETRY_AFTER_S)
            self.counters.retry_after_honoured += 1
        else:
            pause = self.backoff_s(self._streak_429)
        self._paused_until = max(self._paused_until, now + pause)
        self.counters.pauses_s.append(pause)
        # Many requests in flight get 429s for the same congestion: cut once per pause, not once each.
        if now >= self._last_cut:
            self.cap = max(1, self.cap // 2)
            self._successes = 0
            self._last_cut = self._paused_until
            self.counters.min_cap_seen = min(self.counters.min_cap_seen, self.cap)
        return pause

    def backoff_s(self, attempt: int) -> float:
        """Exponential back-off with jitter for the ``attempt``-th consecutive failure (1-based)."""
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** max(0, attempt - 1))
        return ceiling * self._rng.uniform(0.5, 1.0)

    async def back_off(self, attempt: int) -> float:
        """Sleeps the back-off of one request after a 5xx, timeout or connection error."""
        delay = self.backoff_s(attempt)
        self.counters.backoffs_s.append(delay)
        if delay > 0:
            await self._sleep(delay)
        return delay


class Slot:
    """One admitted request; ``settle`` it with the reply's token usage."""

    def __init__(self, limiter: RequestLimiter, tokens: int, head_start_s: float = 0.0) -> None:
        self._limiter = limiter
        self.tokens = tokens
        self.head_start_s = head_start_s

    async def __aenter__(self) -> Slot:
        await self._limiter._enter(self.tokens, self.head_start_s)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._limiter._release()

    def settle(self, actual_tokens: int) -> None:
        self._limiter.settle(self.tokens, actual_tokens)

    def unused(self) -> None:
        """The request was not sent after all: nothing of the rate limits was spent."""
        self._limiter.unused(self.tokens)


def retry_after_from_headers(headers: Mapping[str, str] | None, now_epoch: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date), else None."""
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_epoch is None else now_epoch
    return max(0.0, when.timestamp() - now)

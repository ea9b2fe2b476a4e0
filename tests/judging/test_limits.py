"""The request limiter, driven by a fake clock: every wait is counted, none is slept for real."""

from __future__ import annotations

import asyncio
import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from faithfulness_pipeline.judging.llm.limits import (
    MAX_RETRY_AFTER_S,
    RequestLimiter,
    TokenBucket,
    retry_after_from_headers,
)


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def make(t: FakeTime, **kwargs: object) -> RequestLimiter:
    return RequestLimiter(clock=t.clock, sleep=t.sleep, rng=random.Random(0), **kwargs)  # type: ignore[arg-type]


def test_buckets_start_full() -> None:
    bucket = TokenBucket(60, now=0.0)
    assert bucket.wait_s(60, 0.0) == 0.0
    bucket.take(60, 0.0)
    assert bucket.wait_s(1, 0.0) == pytest.approx(1.0)
    assert bucket.wait_s(1, 1.0) == 0.0
    # More than the capacity: wait for a full bucket, not forever.
    empty = TokenBucket(60, now=0.0)
    empty.take(60, 0.0)
    assert empty.wait_s(500, 0.0) == pytest.approx(60.0)


def test_rpm_lets_the_first_minute_through_at_once_then_spaces_requests() -> None:
    t = FakeTime()
    limiter = make(t, max_in_flight=100, rpm=5)

    async def main() -> None:
        for _ in range(7):
            async with limiter.slot(0):
                pass

    asyncio.run(main())
    assert t.sleeps[:1] == [pytest.approx(12.0)]  # nothing slept for the first five
    assert sum(t.sleeps) == pytest.approx(24.0)


def test_tpm_reserves_then_settles_against_real_usage() -> None:
    t = FakeTime()
    limiter = make(t, max_in_flight=10, tpm=6000)

    async def main() -> None:
        async with limiter.slot(5000) as slot:
            slot.settle(1000)  # the reply used less: 4000 tokens go back
        async with limiter.slot(5000):
            pass

    asyncio.run(main())
    assert t.sleeps == []

    t2 = FakeTime()
    strict = make(t2, max_in_flight=10, tpm=6000)

    async def main2() -> None:
        async with strict.slot(5000):
            pass
        async with strict.slot(5000):
            pass

    asyncio.run(main2())
    assert sum(t2.sleeps) == pytest.approx(40.0)  # 4000 missing tokens at 100 per second


def test_a_slot_given_up_unsent_spends_nothing_of_the_rate_limits() -> None:
    # A pack whose items another process stored while it waited for its slot is not sent.
    t = FakeTime()
    limiter = make(t, max_in_flight=10, rpm=1, tpm=6000)

    async def main() -> None:
        for _ in range(3):
            async with limiter.slot(5000) as slot:
                slot.unused()
        async with limiter.slot(5000):
            pass

    asyncio.run(main())
    assert t.sleeps == []  # three slots given back whole, so the one real request still finds both full


def test_in_flight_cap_is_never_exceeded() -> None:
    limiter = RequestLimiter(max_in_flight=3)
    seen: list[int] = []

    async def one() -> None:
        async with limiter.slot(1):
            seen.append(limiter.in_flight)
            await asyncio.sleep(0.001)

    async def main() -> None:
        await asyncio.gather(*(one() for _ in range(20)))

    asyncio.run(main())
    assert max(seen) == 3
    assert limiter.counters.max_in_flight_seen == 3
    assert limiter.in_flight == 0


def test_freed_slots_go_to_waiters_in_arrival_order_one_each() -> None:
    limiter = RequestLimiter(max_in_flight=2)
    order: list[int] = []

    async def main() -> None:
        gate = asyncio.Event()

        async def one(k: int) -> None:
            async with limiter.slot(1):
                order.append(k)
                if k < 2:
                    await gate.wait()
                else:
                    await asyncio.sleep(0)

        tasks = [asyncio.create_task(one(k)) for k in range(8)]
        await asyncio.sleep(0.01)
        assert order == [0, 1] and limiter.in_flight == 2  # the rest queue, none runs ahead
        gate.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == list(range(8))
    assert limiter.in_flight == 0 and limiter.counters.max_in_flight_seen == 2


def test_a_head_start_lets_longer_requests_pass_only_those_that_arrived_within_it() -> None:
    t = FakeTime()
    limiter = make(t, max_in_flight=1)
    order: list[str] = []

    async def main() -> None:
        gate = asyncio.Event()

        async def one(name: str, head_start_s: float) -> None:
            async with limiter.slot(1, head_start_s):
                order.append(name)
                if name == "holder":
                    await gate.wait()

        holder = asyncio.create_task(one("holder", 0.0))
        await asyncio.sleep(0)
        waiting = []
        # (name, arrival on the fake clock, head start): queued as arrival - head start
        for name, at, head_start_s in [("short-early", 1000.0, 0.1), ("long-late", 1000.5, 1.0),
                                       ("long-too-late", 1002.0, 1.0), ("equal-a", 1003.0, 0.0),
                                       ("equal-b", 1003.0, 0.0)]:
            t.now = at
            waiting.append(asyncio.create_task(one(name, head_start_s)))
            await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(holder, *waiting)

    asyncio.run(main())
    # long-late (999.5) passes short-early (999.9); long-too-late (1001.0) does not; ties keep arrival order
    assert order == ["holder", "long-late", "short-early", "long-too-late", "equal-a", "equal-b"]
    assert limiter.in_flight == 0


def test_a_waiter_cancelled_in_the_queue_does_not_leak_its_slot() -> None:
    limiter = RequestLimiter(max_in_flight=1)

    async def main() -> None:
        held = asyncio.Event()
        done = asyncio.Event()

        async def holder() -> None:
            async with limiter.slot(1):
                held.set()
                await done.wait()

        async def waiter() -> None:
            async with limiter.slot(1):
                raise AssertionError("a cancelled waiter must never get a slot")

        first = asyncio.create_task(holder())
        await held.wait()
        cancelled = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        cancelled.cancel()
        done.set()
        await first
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        async with limiter.slot(1):  # the slot is free again
            assert limiter.in_flight == 1

    asyncio.run(main())
    assert limiter.in_flight == 0


def test_a_429_pauses_everyone_for_retry_after_and_halves_the_cap_once() -> None:
    t = FakeTime()
    limiter = make(t, max_in_flight=8)
    for _ in range(5):  # five replies to the same congestion
        assert limiter.on_rate_limited(7.0) == 7.0
    assert limiter.cap == 4
    assert limiter.counters.rate_limited == 5 and limiter.counters.retry_after_honoured == 5

    async def main() -> None:
        async with limiter.slot(1):
            pass

    asyncio.run(main())
    assert t.sleeps == [pytest.approx(7.0)]
    limiter.on_rate_limited(1.0)  # a new pause window: a new cut
    assert limiter.cap == 2
    for _ in range(2):
        limiter.on_success()
    assert limiter.cap == 3  # additive increase after a run of successes
    for _ in range(100):
        limiter.on_success()
    assert limiter.cap == 8


def test_a_429_without_retry_after_backs_off_exponentially() -> None:
    t = FakeTime()
    limiter = make(t, max_in_flight=4, backoff_base_s=1.0, backoff_max_s=30.0)
    pauses = [limiter.on_rate_limited(None) for _ in range(8)]
    for n, pause in enumerate(pauses, start=1):
        ceiling = min(30.0, 2.0 ** (n - 1))
        assert ceiling / 2 <= pause <= ceiling
    assert limiter.on_rate_limited(10_000.0) == MAX_RETRY_AFTER_S


def test_back_off_sleeps_with_jitter() -> None:
    t = FakeTime()
    limiter = make(t, max_in_flight=1, backoff_base_s=0.5, backoff_max_s=4.0)

    async def main() -> None:
        for attempt in range(1, 6):
            await limiter.back_off(attempt)

    asyncio.run(main())
    for attempt, slept in enumerate(t.sleeps, start=1):
        ceiling = min(4.0, 0.5 * 2 ** (attempt - 1))
        assert ceiling / 2 <= slept <= ceiling
    assert t.sleeps == limiter.counters.backoffs_s


def test_limiter_survives_a_new_event_loop() -> None:
    limiter = RequestLimiter(max_in_flight=2)

    async def main() -> None:
        async with limiter.slot(1):
            pass

    asyncio.run(main())
    asyncio.run(main())
    assert limiter.in_flight == 0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),
        ({"Retry-After": "2"}, 2.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"Retry-After": "soon"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_headers(headers: dict[str, str] | None, expected: float | None) -> None:
    assert retry_after_from_headers(headers) == expected


def test_retry_after_as_http_date() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    header = format_datetime(now + timedelta(seconds=30), usegmt=True)
    assert retry_after_from_headers({"Retry-After": header}, now_epoch=now.timestamp()) == pytest.approx(30.0)

"""Leases: workers sharing a result store (two processes, two machines on PostgreSQL) do not pay for the
same item.

Before the inner judge is asked, the contents are leased to this worker (``Store.claim``: owner, expiry,
renewed every third of the lease while the call runs, given back after its results are stored). Contents
another worker holds are awaited in the store and taken over when the lease runs out, or at once when its
holder is a dead process of this machine. A store that cannot lease lets two workers pay for the same
items, never lose them.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

from faithfulness_pipeline.core.port import ExtractResult, Hooks, VerdictResult
from faithfulness_pipeline.judging.store.protocol import Store, StoreError
from faithfulness_pipeline.judging.tally import Tally

R = TypeVar("R", ExtractResult, VerdictResult)

#: How long a content another worker is asking for stays reserved to it without being renewed, and how
#: often a waiting worker looks.
DEFAULT_LEASE_S: Final = 60.0
LEASE_POLL_S: Final = 0.25


class Leases:
    """The leases of one stack in ``store``: its owner name is unique per stack (``host:pid:tag``), so two
    runs in one process do not take each other's."""

    def __init__(self, store: Store, lease_s: float, tally: Tally, *,
                 stored: Callable[[], None] = lambda: None) -> None:
        self.store = store
        self.lease_s = lease_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._tally = tally
        #: blocks until the results kept so far are in the store: a lease is given back only after them
        self._stored = stored

    async def ask(
        self,
        asked: Sequence[Any],
        keys: Mapping[str, bytes],
        ask: Callable[[Sequence[Any], Hooks[R]], Awaitable[list[R]]],
        hooks: Hooks[R],
        found: Callable[[Mapping[str, bytes]], Mapping[str, R]],
    ) -> dict[str, R]:
        """``ask``'s results for ``asked`` by item id, except for the contents another worker holds: those are
        awaited through ``found`` (the store), and asked here when their lease runs out."""
        wanted = list(dict.fromkeys(keys[it.id] for it in asked if it.id in keys))
        held = await asyncio.to_thread(self.claim, wanted)
        others = {keys[it.id]: it for it in asked if it.id in keys and keys[it.id] not in held}
        mine = [it for it in asked if it.id not in keys or keys[it.id] in held]
        results: dict[str, R] = {}

        async def run(items: list[Any]) -> None:
            if not items:
                return
            held_keys = [keys[it.id] for it in items if it.id in keys]
            beat = asyncio.create_task(self._renew(held_keys))
            try:
                results.update((r.id, r) for r in await ask(items, hooks))
            finally:
                beat.cancel()
                await asyncio.to_thread(self.release, held_keys)

        async def wait() -> None:
            while others:
                await asyncio.sleep(LEASE_POLL_S)
                done = await asyncio.to_thread(found, {it.id: key for key, it in others.items()})
                for item_id, result in done.items():
                    results[item_id] = result
                    others.pop(keys[item_id])
                hooks.tick(len(done))
                if others:
                    taken = await asyncio.to_thread(self.claim, list(others))
                    await run([others.pop(key) for key in list(others) if key in taken])

        await asyncio.gather(run(mine), wait())
        return results

    def claim(self, keys: list[bytes]) -> set[bytes]:
        """The leases of ``keys`` this stack holds now; all of them when the store cannot lease."""
        if not keys:
            return set()
        try:
            held = self.store.claim(keys, self.owner, self.lease_s)
            rest = [k for k in keys if k not in held]
            dead = [o for o in self.store.lease_owners(rest) if _dead_here(o)] if rest else []
            if dead:  # a run on this machine that was killed: no need to wait for its leases to run out
                held |= self.store.claim(rest, self.owner, self.lease_s, takeover=dead)
            return held
        except (sqlite3.Error, StoreError) as exc:
            self._tally.warn(f"result store leases failed ({type(exc).__name__}): items may be paid by two workers",
                             exc)
            return set(keys)

    def release(self, keys: list[bytes]) -> None:
        if not keys:
            return
        self._stored()
        try:
            self.store.release(keys, self.owner)
        except (sqlite3.Error, StoreError) as exc:  # the leases run out on their own
            self._tally.warn(f"result store leases could not be given back ({type(exc).__name__})", exc)

    async def _renew(self, keys: list[bytes]) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            await asyncio.to_thread(self.claim, keys)


def _dead_here(owner: str) -> bool:
    """Whether a lease owner (``host:pid:tag``) is a process of this machine that no longer runs."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False

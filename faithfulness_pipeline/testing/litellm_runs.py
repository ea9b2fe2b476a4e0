"""Running a coroutine that calls litellm directly (the fake server's own tests), one event loop per call."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from faithfulness_pipeline.judging.llm.card import import_litellm

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    async def wrapped() -> T:
        try:
            return await coro
        finally:
            # Each asyncio.run gets a new loop: litellm's cached aiohttp sessions must not outlive it.
            await import_litellm().close_litellm_async_clients()

    return asyncio.run(wrapped())

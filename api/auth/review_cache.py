"""A TTL cache with single flight, for answers the Kubernetes API server gives.

A burst of requests with one token makes one review, not one each: the
first asks, the others wait on its answer; later ones read it from the
cache until its TTL runs out. Failures to ask (the API server down) are not
cached, so the next request asks again.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["ReviewCache"]

V = TypeVar("V")


class ReviewCache(Generic[V]):
    """Answers by key, each kept for the TTL its ``ask`` chose; concurrent asks share one."""

    def __init__(
        self, *, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self._clock = clock
        self._done: OrderedDict[Hashable, tuple[float, V]] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Future[tuple[V, float]]] = {}
        # How many times ``ask`` ran: the reviews actually sent.
        self.asked = 0

    async def get(self, key: Hashable, ask: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The cached answer for ``key``, or ``ask()``'s (answer, ttl), kept for ttl seconds."""
        done = self._done.get(key)
        if done is not None:
            expires, value = done
            if self._clock() < expires:
                return value
            del self._done[key]
        future = self._inflight.get(key)
        if future is None:
            self.asked += 1
            future = asyncio.ensure_future(ask())
            self._inflight[key] = future
            future.add_done_callback(lambda f: self._finish(key, f))
        value, _ = await asyncio.shield(future)
        return value

    def _finish(self, key: Hashable, future: asyncio.Future[tuple[V, float]]) -> None:
        self._inflight.pop(key, None)
        if future.cancelled() or future.exception() is not None:
            return
        value, ttl = future.result()
        if ttl <= 0:
            return
        self._done[key] = (self._clock() + ttl, value)
        self._done.move_to_end(key)
        while len(self._done) > self.max_entries:
            self._done.popitem(last=False)

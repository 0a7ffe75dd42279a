"""A TTL cache with single flight, for answers the Kubernetes API server gives.

A burst of requests with one token makes one review, not one each: the
first asks, the others wait on its answer; later ones read it from the
cache until its TTL runs out. Failures to ask (the API server down) are not
cached, so the next request asks again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from ..shared_calls import Keep, SharedCalls

__all__ = ["ReviewCache"]

V = TypeVar("V")


def _keep_for_its_ttl(answer: tuple[object, float], started: float, ended: float) -> Keep | None:
    _, ttl = answer
    return Keep(ended, ttl) if ttl > 0 else None


class ReviewCache(Generic[V]):
    """Answers by key, each kept for the TTL its ``ask`` chose; concurrent asks share one."""

    def __init__(
        self, *, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._calls: SharedCalls[Hashable, tuple[V, float]] = SharedCalls(
            max_entries=max_entries, clock=clock
        )

    @property
    def asked(self) -> int:
        """How many times ``ask`` ran: the reviews actually sent."""
        return self._calls.counts["called"]

    async def get(self, key: Hashable, ask: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The cached answer for ``key``, or ``ask()``'s (answer, ttl), kept for ttl seconds."""
        value, _ = await self._calls.get(key, ask, _keep_for_its_ttl)
        return value

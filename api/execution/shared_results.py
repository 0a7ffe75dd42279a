"""Identical queries arriving together share one execution.

Dashboards poll the same query; a hundred of them polling once a second
would otherwise execute it a hundred times a second over the same agent
snapshots. Within ``ttl`` (the snapshot TTL: the data cannot be fresher than
that anyway) identical operations get the same result, and concurrent ones
wait on the single execution in flight.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Hashable

from graphql import ExecutionResult

from ..shared_calls import Keep, SharedCalls

__all__ = ["SharedResults"]

# Errors that say "not now" rather than describe the data: a result carrying
# one must not outlive its own request.
_TRANSIENT_CODES = frozenset({"NOT_READY", "REQUEST_TIMEOUT"})


def _keepable(result: ExecutionResult) -> bool:
    if result.data is None:  # a total failure: invalid, not ready, timed out
        return False
    return not any(
        (error.extensions or {}).get("code") in _TRANSIENT_CODES for error in result.errors or ()
    )


class SharedResults:
    """Single-flight plus a short-lived cache of execution results, keyed by the operation."""

    def __init__(
        self,
        ttl: float,
        *,
        max_entries: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self._calls: SharedCalls[Hashable, ExecutionResult] = SharedCalls(
            max_entries=max_entries, clock=clock
        )

    @property
    def shared(self) -> int:
        """How many requests were answered by another request's execution."""
        return self._calls.counts["cached"] + self._calls.counts["shared"]

    async def run(
        self,
        key: Hashable,
        execute: Callable[[], Awaitable[ExecutionResult]],
        data_since: Callable[[], float | None] = lambda: None,
    ) -> ExecutionResult:
        """The result for ``key``: cached, joined in flight, or from a new execution.

        ``data_since``, asked once the execution is over, says when the oldest
        data it used was fetched (on this object's clock); the result is kept
        for ``ttl`` from then, so no answer is ever older than the TTL.
        """

        def keep(result: ExecutionResult, started: float, ended: float) -> Keep | None:
            if self.ttl <= 0 or not _keepable(result):
                return None
            since = data_since()
            return Keep(started if since is None else min(since, started), self.ttl)

        return await self._calls.get(key, execute, keep)

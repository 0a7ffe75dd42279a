"""Identical queries arriving together share one execution.

Dashboards poll the same query; a hundred of them polling once a second
would otherwise execute it a hundred times a second over the same agent
snapshots. Within ``ttl`` (the snapshot TTL: the data cannot be fresher than
that anyway) identical operations get the same result, and concurrent ones
wait on the single execution in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass

from graphql import ExecutionResult

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


@dataclass(slots=True)
class _Done:
    result: ExecutionResult
    at: float


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
        self.max_entries = max_entries
        self._clock = clock
        self._done: OrderedDict[Hashable, _Done] = OrderedDict()
        self._inflight: dict[Hashable, asyncio.Future[ExecutionResult]] = {}
        # How many requests were answered by another request's execution.
        self.shared = 0

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
        done = self._done.get(key)
        if done is not None and self._clock() - done.at < self.ttl:
            self.shared += 1
            return done.result
        future = self._inflight.get(key)
        if future is None:
            future = asyncio.ensure_future(execute())
            self._inflight[key] = future
            started = self._clock()
            future.add_done_callback(lambda f: self._finish(key, f, started, data_since))
        else:
            self.shared += 1
        # Shielded: one client going away must not cancel the others' answer.
        return await asyncio.shield(future)

    def _finish(
        self,
        key: Hashable,
        future: asyncio.Future[ExecutionResult],
        started: float,
        data_since: Callable[[], float | None],
    ) -> None:
        self._inflight.pop(key, None)
        if self.ttl <= 0 or future.cancelled() or future.exception() is not None:
            return
        result = future.result()
        if not _keepable(result):
            return
        since = data_since()
        self._done[key] = _Done(result, started if since is None else min(since, started))
        self._done.move_to_end(key)
        while len(self._done) > self.max_entries:
            self._done.popitem(last=False)

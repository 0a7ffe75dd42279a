"""One call in flight per key, its answer kept for a while: the server's answer to bursts.

The agent pool (snapshots per node), the GraphQL view (identical operations)
and authentication (Kubernetes reviews per token or question) all face the
same traffic: many callers want the same key at once, and an answer stays
good for a few seconds. The first caller starts the call, the others join
it, later ones read the kept answer until it expires. A call that fails or
is cancelled is not kept, so the next caller tries again.

A caller that goes away (its client gone, its time limit hit, its subscription
closed) leaves the call running for the others. Only a caller's own
cancellation raises CancelledError in it: a call cancelled under its callers
(``close``, or its work cancelled beneath it, as gRPC does to calls on a
channel that closes) is CallCancelledError to each, an error to answer with
rather than a cancellation that would unwind them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

from graph_schema.shared_futures import shielded

__all__ = ["CallCancelledError", "Keep", "SharedCalls", "Source", "being_cancelled"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# How a caller was answered: from the kept answer, by joining the call in
# flight, or by a call of its own; or from a kept answer past its time while a
# background call for it is in flight.
Source = Literal["cached", "shared", "called", "stale"]


class CallCancelledError(Exception):
    """The call a caller waited on was cancelled, and not by that caller."""


def being_cancelled() -> bool:
    """Whether the running task is being cancelled: a CancelledError it sees is its own."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep an answer ``ttl`` seconds from ``since`` (on the SharedCalls' clock)."""

    since: float
    ttl: float


@dataclass(slots=True)
class _Kept(Generic[V]):
    value: V
    keep: Keep


# Given an answer and the clock readings when its call started and ended, how
# long to keep it; None: do not keep it.
KeepPolicy = Callable[[V, float, float], "Keep | None"]


class SharedCalls(Generic[K, V]):
    """Single flight plus a TTL cache, keyed by ``K``; callers choose how long answers keep."""

    def __init__(
        self, *, max_entries: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._kept: OrderedDict[K, _Kept[V]] = OrderedDict()
        self._inflight: dict[K, asyncio.Task[V]] = {}
        # Keys whose call in flight is a background one (``refresh``).
        self._refreshing: set[K] = set()
        # How callers were answered, by Source.
        self.counts: Counter[Source] = Counter()

    async def get(
        self,
        key: K,
        call: Callable[[], Awaitable[V]],
        keep: KeepPolicy[V],
        *,
        before_call: Callable[[], None] | None = None,
        observe: Callable[[Source], None] | None = None,
        name: str | None = None,
        stale_while_refreshing: float = 0.0,
    ) -> V:
        """``key``'s kept answer, the call in flight's, or a new call's.

        ``before_call`` runs only when a new call would start, and may raise to
        refuse it; ``observe`` hears how each caller was answered. An answer up to
        ``stale_while_refreshing`` seconds past its time is still given while a
        background call (``refresh``) for it is in flight, rather than waiting for it.
        """
        kept = self._kept.get(key)
        if kept is not None:
            age = self.clock() - kept.keep.since
            if age < kept.keep.ttl:
                self._observe("cached", observe)
                return kept.value
            if key in self._refreshing and age < kept.keep.ttl + stale_while_refreshing:
                self._observe("stale", observe)
                return kept.value
            del self._kept[key]
        task = self._inflight.get(key)
        if task is not None:
            self._observe("shared", observe)
        else:
            if before_call is not None:
                before_call()
            self._observe("called", observe)
            # Started now, not when the task first runs: an answer is never kept
            # from later than the moment it was asked for.
            started = self.clock()
            task = asyncio.get_running_loop().create_task(
                self._call(key, call, keep, started), name=name
            )
            self._inflight[key] = task
            task.add_done_callback(lambda t: self._done(key, t))
        try:
            # Shielded: a caller that goes away (client gone, time limit hit) must
            # not cancel the call the other callers share.
            return await shielded(task)
        except asyncio.CancelledError:
            if being_cancelled() or not task.cancelled():
                raise
            raise CallCancelledError("the call this answer waited on was cancelled") from None

    def refresh(
        self,
        key: K,
        call: Callable[[], Awaitable[V]],
        keep: KeepPolicy[V],
        *,
        name: str | None = None,
    ) -> bool:
        """Start a call for ``key`` in the background, unless one is in flight.

        The kept answer stays: callers read it while it is fresh, and join this
        call only once it has expired. False when a call was already in flight.
        """
        if key in self._inflight:
            return False
        started = self.clock()
        task = asyncio.get_running_loop().create_task(
            self._call(key, call, keep, started), name=name
        )
        self._inflight[key] = task
        self._refreshing.add(key)
        task.add_done_callback(lambda t: self._done(key, t))
        return True

    async def _call(
        self, key: K, call: Callable[[], Awaitable[V]], keep: KeepPolicy[V], started: float
    ) -> V:
        value = await call()
        # Kept before the call counts as over, so no caller in between misses it.
        chosen = keep(value, started, self.clock())
        if chosen is not None:
            self._kept[key] = _Kept(value, chosen)
            self._kept.move_to_end(key)
            while self.max_entries is not None and len(self._kept) > self.max_entries:
                self._kept.popitem(last=False)
        return value

    def _done(self, key: K, task: asyncio.Task[V]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
            self._refreshing.discard(key)
        if not task.cancelled():
            # Mark the exception retrieved even when every caller went away.
            task.exception()

    def _observe(self, source: Source, observe: Callable[[Source], None] | None) -> None:
        self.counts[source] += 1
        if observe is not None:
            observe(source)

    def keys(self) -> set[K]:
        """Every key with an answer kept (fresh or not)."""
        return set(self._kept)

    def forget(self, key: K) -> None:
        """Drop ``key``'s kept answer."""
        self._kept.pop(key, None)

    async def close(self) -> None:
        """Cancel the calls in flight, wait for them, and drop every kept answer."""
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._kept.clear()

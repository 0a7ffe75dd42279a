"""Pacing: long executions share the event loop with everything else.

graphql-core resolves a list's items as tasks gathered together, and asyncio
runs every ready task in one loop iteration before it looks at sockets again.
A query that fans out (GPUs, their nodes, those nodes' GPUs, ...) makes
thousands of tasks ready at once, so one iteration can take seconds: no
``/healthz`` answer, no other client, and no timeout, since the timer is
only checked between iterations.

``Pacer.pace()`` is awaited by the resolvers' loader calls. Within a time
slice it returns at once. Past the slice, the task queues and is let go in
batches, one batch per loop iteration, so each iteration stays short and
sockets and timers are serviced in between. Queued tasks cost nothing while
they wait; the batch size adapts so that an iteration takes about one slice.

A slice starts when the loop is seen to go round: a marker callback, scheduled
while calls are within the slice, runs on the next iteration and restarts it.
So many small requests, each ending in a few milliseconds and letting the loop
go round, never queue; only work that holds one iteration past the slice does.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

__all__ = ["Pacer"]

# Work one loop iteration may do before paced tasks queue.
SLICE_SECONDS = 0.005


class Pacer:
    """Spreads paced tasks over loop iterations of about ``slice_seconds`` each."""

    def __init__(
        self,
        slice_seconds: float = SLICE_SECONDS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.slice_seconds = slice_seconds
        self._clock = clock
        self._slice_start = clock()
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._wake_scheduled = False
        self._marker_scheduled = False
        self._batch = 16
        # Times a task had to queue; tests and benchmarks read it.
        self.deferred = 0

    def due(self) -> bool:
        """Whether ``pace()`` would wait (a caller may skip awaiting it when not); within
        the slice, it also watches for the loop to go round."""
        if self._waiting or self._clock() - self._slice_start >= self.slice_seconds:
            return True
        if not self._marker_scheduled:
            self._marker_scheduled = True
            asyncio.get_running_loop().call_soon(self._went_round)
        return False

    def _went_round(self) -> None:
        # The first callback of a later iteration: sockets were looked at since.
        self._marker_scheduled = False
        self._slice_start = self._clock()

    async def pace(self) -> None:
        """Return at once within the slice; otherwise wait for a later loop iteration."""
        if not self.due():
            return
        now = self._clock()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.append(future)
        self.deferred += 1
        if not self._wake_scheduled:
            self._wake_scheduled = True
            loop.call_soon(self._wake, loop, now)
        await future

    def _wake(self, loop: asyncio.AbstractEventLoop, scheduled_at: float) -> None:
        now = self._clock()
        # Adapt the batch to how long the last round of released tasks took.
        if now - scheduled_at > 2 * self.slice_seconds:
            self._batch = max(1, self._batch // 2)
        elif now - scheduled_at < self.slice_seconds / 2:
            self._batch = min(4096, self._batch * 2)
        self._slice_start = now
        released = 0
        while self._waiting and released < self._batch:
            future = self._waiting.popleft()
            if not future.done():  # a cancelled (timed-out) task's future is done
                future.set_result(None)
                released += 1
        if self._waiting:
            loop.call_soon(self._wake, loop, now)
        else:
            self._wake_scheduled = False

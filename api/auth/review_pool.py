"""Kubernetes reviews on threads of their own, bounded: a stalled API server starves no one else.

TokenReviews and SubjectAccessReviews block a thread for up to their
deadline. Run on Python's default pool, whose queue is unbounded, a flood of
unseen tokens against a stalled API server queued behind it everything else
that pool runs (``/metrics`` rendering, gzip), and left requests unanswered
for minutes. Here they get ``workers`` threads and at most ``waiting``
reviews queued; past that a review is refused at once with
ReviewUnavailableError (503), and requests whose answers are cached never get
here at all. A review counts until its thread is done with it, even if the
request that asked has given up, so the bound holds for threads, not tasks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = [
    "REVIEW_WAITING",
    "REVIEW_WORKERS",
    "ReviewPool",
    "ReviewUnavailableError",
    "ThrottledWarning",
]

T = TypeVar("T")

REVIEW_WORKERS = 8
REVIEW_WAITING = 8


class ReviewUnavailableError(Exception):
    """The API server could not be asked; the caller gets 503, never a pass."""


class ReviewPool:
    """At most ``workers`` reviews at once and ``waiting`` queued; the rest refused at once."""

    def __init__(self, workers: int = REVIEW_WORKERS, waiting: int = REVIEW_WAITING) -> None:
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix="gpugraph-review")
        self._slots = threading.BoundedSemaphore(workers + waiting)
        self.capacity = workers + waiting
        # Reviews refused because the pool was full; tests and benchmarks read it.
        self.refused = 0

    async def run(self, review: Callable[[], T]) -> T:
        """``review()`` on a review thread; ReviewUnavailableError when the pool is full."""
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            raise ReviewUnavailableError("too many reviews are waiting for the API server")
        try:
            done = self._executor.submit(review)
        except BaseException:
            self._slots.release()
            raise
        # Released when the thread finishes, not when the caller stops waiting.
        done.add_done_callback(lambda _: self._slots.release())
        return await asyncio.wrap_future(done)

    def close(self) -> None:
        """Take no more reviews; those running finish within their deadline."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class ThrottledWarning:
    """One warning per ``window`` seconds for a repeated failure; the rest are counted.

    A flood of unseen tokens against a down API server would otherwise write
    one line per request.
    """

    def __init__(
        self,
        logger: logging.Logger,
        window: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._window = window
        self._clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self.left_out = 0

    def warning(self, message: str, *args: object) -> None:
        """Log ``message`` unless one was logged within the window; then count it."""
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self._window:
                self.left_out += 1
                return
            self._last, left_out, self.left_out = now, self.left_out, 0
        if left_out:
            message += f" ({left_out} more like it since the last one logged)"
        self._log.warning(message, *args)

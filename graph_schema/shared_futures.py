"""Awaiting a future that several callers share, without one caller's end reaching the rest.

A shared call (a loader's key, one agent read joined by many fields, a history
read two fields ask for) is awaited by several callers at once. Each awaits it
through its own shield, so cancelling one caller cancels neither the call nor
the others. And a failure is an answer, not a bug: a caller that gave up before
it read it (cancelled just as the answer landed, as graphql-core cancels an
object's other fields when one fails in a non-null position; or its coroutine
closed, when the compiled plan hands over to strawberry) must not leave asyncio
to log a traceback for it as never retrieved.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

__all__ = ["seen", "shielded"]

T = TypeVar("T")


def shielded(shared: asyncio.Future[T]) -> asyncio.Future[T]:
    """``shared`` as one of its callers awaits it: cancelled alone, its failure never
    logged as unread."""
    mine = asyncio.shield(shared)
    mine.add_done_callback(seen)
    return mine


def seen(future: asyncio.Future[Any]) -> None:
    """Mark ``future``'s failure, if any, as read (a done callback)."""
    if not future.cancelled():
        future.exception()

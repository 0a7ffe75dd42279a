"""Waiting for a condition that becomes true in the background: ``eventually``, sync and async."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["eventually", "eventually_async"]


def _give_up(what: str, timeout: float, last: Any) -> AssertionError:
    return AssertionError(f"{what} not reached within {timeout} s (last: {last!r})")


def eventually(
    check: Callable[[], Any],
    timeout: float = 15.0,
    *,
    interval: float = 0.01,
    what: str = "condition",
) -> Any:
    """Poll ``check()`` until it returns a truthy value (returned); fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise _give_up(what, timeout, result)
        time.sleep(interval)
    return result


async def eventually_async(
    check: Callable[[], Any],
    *,
    timeout: float = 5.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Await ``check()`` (sync or async) until it returns a truthy value (returned), or fail."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise _give_up(what, timeout, result)
        await asyncio.sleep(interval)

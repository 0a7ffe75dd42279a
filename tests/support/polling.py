"""Waiting for a condition that becomes true in the background: ``eventually``, sync and async."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

__all__ = ["eventually", "eventually_async"]


class _Patience:
    """Judges each answer of a check: True once it is truthy, AssertionError past the timeout."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout

    def satisfied(self, result: Any) -> bool:
        if result:
            return True
        if time.monotonic() > self.deadline:
            raise AssertionError(
                f"{self.what} not reached within {self.timeout} s (last: {result!r})"
            )
        return False


def eventually(
    check: Callable[[], Any],
    timeout: float = 15.0,
    *,
    interval: float = 0.01,
    what: str = "condition",
) -> Any:
    """Poll ``check()`` until it returns a truthy value (returned); fail after ``timeout`` s."""
    patience = _Patience(what, timeout)
    while not patience.satisfied(result := check()):
        time.sleep(interval)
    return result


async def eventually_async(
    check: Callable[[], Any],
    *,
    timeout: float = 15.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """Await ``check()`` (sync or async) until it returns a truthy value (returned), or fail."""
    patience = _Patience(what, timeout)
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if patience.satisfied(result):
            return result
        await asyncio.sleep(interval)

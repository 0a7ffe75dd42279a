"""Polling for a condition that becomes true in the background, from sync tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["eventually"]


def eventually(
    check: Callable[[], Any],
    timeout: float = 15.0,
    *,
    interval: float = 0.01,
    what: str = "condition",
) -> bool:
    """Poll ``check()`` until it is truthy (returns True); fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(interval)
    return True

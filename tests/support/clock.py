"""A clock the test moves by hand, for anything that takes ``clock=``."""

from __future__ import annotations

__all__ = ["ManualClock"]


class ManualClock:
    """A monotonic clock that stands still until the test moves it (TTLs, backoff, pacing)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        self.now += seconds

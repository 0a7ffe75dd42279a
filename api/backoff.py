"""Exponential backoff: how long to wait, or skip a key, after it failed again.

The agent pool skips a node whose agent keeps failing; each Kubernetes
reflector sleeps before it lists or watches again. Both wait initial, 2x,
4x, ... up to a maximum, and start over after a success.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass(slots=True)
class _State:
    # The last delay before jitter; doubled, not recomputed as initial * 2**n,
    # so a key that fails for hours stays at the maximum instead of overflowing.
    delay: float = 0.0
    retry_at: float = 0.0
    last_error: str = ""


@dataclass
class Backoff:
    """Per-key failure tracking: after a failure, skip the key for a doubling delay.

    The first failure skips ``initial`` seconds, each further one doubles that
    up to ``maximum``; a success forgets the key. With ``jitter`` (0.2: plus
    or minus 20%), each delay is spread, so that many clients retrying one
    server do not retry in step.
    """

    initial: float = 1.0
    maximum: float = 30.0
    clock: Callable[[], float] = time.monotonic
    jitter: float = 0.0
    _states: dict[str, _State] = field(default_factory=dict, init=False, repr=False)

    def failed(self, key: str, error: str) -> float:
        """Record a failure of ``key``; return how long it is now skipped for."""
        state = self._states.setdefault(key, _State())
        state.delay = min(self.maximum, state.delay * 2.0 if state.delay else self.initial)
        delay = state.delay
        if self.jitter:
            delay *= random.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        state.retry_at = self.clock() + delay
        state.last_error = error
        return delay

    def blocked(self, key: str) -> tuple[str, float] | None:
        """While ``key`` is skipped, its last error and the seconds left; else None."""
        state = self._states.get(key)
        if state is None:
            return None
        left = state.retry_at - self.clock()
        if left <= 0:
            return None
        return state.last_error, left

    def failing(self, key: str) -> bool:
        """Whether ``key`` failed and has not succeeded since."""
        return key in self._states

    def keys(self) -> set[str]:
        """Every key with failures on record."""
        return set(self._states)

    def backing_off(self) -> int:
        """How many keys are skipped right now."""
        now = self.clock()
        return sum(1 for s in self._states.values() if s.retry_at > now)

    def forget(self, key: str) -> None:
        """Drop ``key``'s failures: it answered again, or its node left the cluster."""
        self._states.pop(key, None)

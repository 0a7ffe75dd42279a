"""Backoff: doubling delays per key, capped, spread by jitter, forgotten after a success."""

from __future__ import annotations

import pytest

from api.backoff import Backoff
from tests.support.clock import ManualClock


def test_each_failure_doubles_the_delay_up_to_the_maximum() -> None:
    backoff = Backoff(initial=0.5, maximum=3.0, clock=ManualClock())
    assert [backoff.failed("node-a", "down") for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff.failed("node-b", "down") == 0.5  # keys do not share failures


def test_a_key_that_keeps_failing_stays_at_the_maximum() -> None:
    # A node or API server down for hours fails thousands of times; 2.0**1024
    # overflows, which once ended a reflector's thread.
    backoff = Backoff(initial=0.2, maximum=10.0, clock=ManualClock(), jitter=0.2)
    for _ in range(5000):
        delay = backoff.failed("pods", "connection refused")
    assert 8.0 <= delay <= 12.0


def test_a_key_is_blocked_until_its_delay_has_passed_with_its_last_error() -> None:
    clock = ManualClock()
    backoff = Backoff(initial=1.0, clock=clock)
    assert backoff.blocked("node-a") is None
    backoff.failed("node-a", "connection refused")
    assert backoff.blocked("node-a") == ("connection refused", 1.0)
    assert backoff.backing_off() == 1
    clock.advance(1.0)
    assert backoff.blocked("node-a") is None
    assert backoff.backing_off() == 0
    # Waited out but still failing: the next failure doubles.
    assert backoff.failing("node-a")
    assert backoff.failed("node-a", "timeout") == 2.0


def test_forget_starts_over_from_the_initial_delay() -> None:
    backoff = Backoff(initial=0.2, maximum=10.0, clock=ManualClock())
    backoff.failed("pods", "watch dropped")
    backoff.failed("pods", "watch dropped")
    assert backoff.keys() == {"pods"}
    backoff.forget("pods")
    assert not backoff.failing("pods")
    assert backoff.keys() == set()
    assert backoff.failed("pods", "watch dropped") == 0.2


@pytest.mark.parametrize("failures", [1, 3, 8])
def test_jitter_spreads_each_delay_within_its_bounds(failures: int) -> None:
    backoff = Backoff(initial=0.2, maximum=10.0, clock=ManualClock(), jitter=0.2)
    base = min(10.0, 0.2 * 2 ** (failures - 1))
    delays = set()
    for _ in range(50):
        backoff.forget("nodes")
        for _ in range(failures - 1):
            backoff.failed("nodes", "error")
        delays.add(backoff.failed("nodes", "error"))
    assert all(base * 0.8 <= d <= base * 1.2 for d in delays)
    assert len(delays) > 1  # spread, not one fixed value

"""The review pool: bounded, refusing at once when full; failure warnings throttled."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from api.auth.review_pool import ReviewPool, ReviewUnavailableError, ThrottledWarning
from tests.support.clock import ManualClock


async def test_a_full_pool_refuses_at_once_and_frees_slots_when_threads_finish() -> None:
    pool = ReviewPool(workers=2, waiting=1)
    gate = threading.Event()
    try:
        held = [asyncio.ensure_future(pool.run(gate.wait)) for _ in range(3)]
        await asyncio.sleep(0)  # let them take their slots
        with pytest.raises(ReviewUnavailableError, match="too many reviews"):
            await pool.run(lambda: True)
        assert pool.refused == 1
        # A caller that stops waiting does not free its slot: the thread is still busy.
        held[0].cancel()
        with pytest.raises(ReviewUnavailableError):
            await pool.run(lambda: True)
        gate.set()
        assert await asyncio.gather(*held[1:]) == [True, True]
        # asyncio.gather returns once the futures are done; the slots free in the
        # threads' done callbacks, which have run by then.
        assert await pool.run(lambda: 7) == 7
    finally:
        gate.set()
        pool.close()


def test_repeated_failure_warnings_are_throttled(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    logger = logging.getLogger("tests.review_pool")
    throttled = ThrottledWarning(logger, window=60.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="tests.review_pool"):
        for i in range(100):
            throttled.warning("review %d failed", i)
        clock.advance(61)
        throttled.warning("review %d failed", 100)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "review 0 failed",
        "review 100 failed (99 more like it since the last one logged)",
    ]

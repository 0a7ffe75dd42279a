"""The pacer: past its time slice, tasks queue and are let go in batches, one per loop iteration."""

from __future__ import annotations

import asyncio

from graph_schema.pacing import Pacer
from tests.support.clock import ManualClock


async def test_within_the_slice_pace_returns_without_yielding() -> None:
    clock = ManualClock(0.0)
    pacer = Pacer(slice_seconds=0.005, clock=clock)
    order: list[str] = []

    async def other() -> None:
        order.append("other")

    task = asyncio.create_task(other())
    for _ in range(100):
        await pacer.pace()
    order.append("paced")
    await task
    assert order == ["paced", "other"] and pacer.deferred == 0


async def test_past_the_slice_tasks_wait_for_a_later_iteration_and_all_finish() -> None:
    clock = ManualClock(0.0)
    pacer = Pacer(slice_seconds=0.005, clock=clock)
    clock.now = 1.0  # the slice is spent
    finished: list[int] = []
    ticks = 0

    async def work(i: int) -> None:
        await pacer.pace()
        finished.append(i)

    async def ticker() -> None:
        nonlocal ticks
        while len(finished) < 200:
            ticks += 1
            await asyncio.sleep(0)

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(work(i) for i in range(200)))
    await tick
    assert sorted(finished) == list(range(200))
    assert finished == sorted(finished), "first queued, first let go"
    assert pacer.deferred == 200
    assert ticks > 1, "the loop went round between batches"


async def test_a_cancelled_waiter_is_skipped() -> None:
    clock = ManualClock(0.0)
    pacer = Pacer(slice_seconds=0.005, clock=clock)
    clock.now = 1.0
    waiting = asyncio.create_task(pacer.pace())
    await asyncio.sleep(0)
    waiting.cancel()
    clock.now = 2.0
    done = asyncio.create_task(pacer.pace())
    await asyncio.wait_for(done, 5)
    assert waiting.cancelled()

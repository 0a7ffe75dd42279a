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


async def test_due_says_whether_pace_would_wait() -> None:
    # Resolvers skip awaiting pace() when it is not due: the two must agree.
    clock = ManualClock(0.0)
    pacer = Pacer(slice_seconds=0.005, clock=clock)
    assert not pacer.due()
    await asyncio.sleep(0)  # the loop went round: a slice starts at 0.0
    clock.now = 0.006  # this iteration has held the loop past the slice
    assert pacer.due()
    queued = [asyncio.create_task(pacer.pace()) for _ in range(3)]
    await asyncio.sleep(0)  # each ran to its wait
    assert pacer.deferred == 3
    # While tasks queue, a newcomer queues behind them, even within the slice.
    clock.now = 0.001
    assert pacer.due()
    await asyncio.gather(*queued)
    assert not pacer.due()


async def test_work_that_lets_the_loop_go_round_never_queues() -> None:
    # Many short requests: each step well within a slice, the loop going round
    # between them, for a hundred slices in all.
    clock = ManualClock(0.0)
    pacer = Pacer(slice_seconds=0.005, clock=clock)
    for _ in range(200):
        await pacer.pace()
        clock.now += 0.0025
        await asyncio.sleep(0)
    assert pacer.deferred == 0
    # Held within one iteration past the slice, the same work queues.
    for _ in range(3):
        await pacer.pace()
        clock.now += 0.003
    assert pacer.deferred == 1

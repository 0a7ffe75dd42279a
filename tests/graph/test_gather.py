"""Gathering the plan's coroutines in the task that runs the plan."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from graph_schema.gather import gather_inline


async def test_results_come_back_in_order_whatever_order_the_futures_complete_in() -> None:
    loop = asyncio.get_running_loop()
    first: asyncio.Future[str] = loop.create_future()
    second: asyncio.Future[str] = loop.create_future()

    async def wait_on(future: asyncio.Future[str], suffix: str) -> str:
        return (await future) + suffix

    async def at_once() -> str:
        return "now"

    gathering = asyncio.ensure_future(
        gather_inline(
            [wait_on(first, "-1"), at_once(), wait_on(second, "-2"), wait_on(first, "-3")]
        )
    )
    await asyncio.sleep(0)
    second.set_result("b")
    await asyncio.sleep(0)
    assert not gathering.done()
    first.set_result("a")
    assert await gathering == ["a-1", "now", "b-2", "a-3"]


async def test_no_task_is_made_per_coroutine() -> None:
    tasks_before = len(asyncio.all_tasks())
    seen: list[int] = []

    async def count() -> int:
        seen.append(len(asyncio.all_tasks()))
        await asyncio.sleep(0)
        return 1

    assert await gather_inline([count() for _ in range(20)]) == [1] * 20
    # The gathering task only (the test's own): no task per coroutine.
    assert max(seen) == tasks_before


async def test_coroutines_that_yield_to_the_loop_resume() -> None:
    async def yields(n: int) -> int:
        for _ in range(n):
            await asyncio.sleep(0)
        return n

    assert await gather_inline([yields(3), yields(0), yields(1)]) == [3, 0, 1]


async def test_nested_gathers_complete() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    async def leaf(k: int) -> int:
        return (await future) * k

    async def inner(k: int) -> list[int]:
        return await gather_inline([leaf(k), leaf(k + 1)])

    gathering = asyncio.ensure_future(gather_inline([inner(1), inner(10)]))
    await asyncio.sleep(0)
    future.set_result(2)
    assert await gathering == [[2, 4], [20, 22]]


async def test_the_first_error_propagates_and_the_waiting_coroutines_are_closed() -> None:
    loop = asyncio.get_running_loop()
    never: asyncio.Future[None] = loop.create_future()
    closed: list[str] = []

    async def waits() -> None:
        try:
            await never
        finally:
            closed.append("waits")

    async def fails() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await gather_inline([waits(), fails()])
    assert closed == ["waits"]


async def test_a_time_limit_cancels_the_gathering_and_closes_what_waits() -> None:
    loop = asyncio.get_running_loop()
    never: asyncio.Future[None] = loop.create_future()
    closed: list[int] = []

    async def waits(i: int) -> None:
        try:
            await never
        finally:
            closed.append(i)

    limit = loop.create_future()

    async def limited() -> Any:
        async with asyncio.timeout(None) as timeout:
            limit.set_result(timeout)
            return await gather_inline([waits(0), waits(1)])

    task = asyncio.ensure_future(limited())
    timeout = await limit
    timeout.reschedule(loop.time())  # expire now: no waiting on the clock
    with pytest.raises(TimeoutError):
        await task
    assert sorted(closed) == [0, 1]


async def test_a_coroutine_yielding_something_else_than_a_future_is_an_error() -> None:
    class Bad:
        def __await__(self) -> Any:
            yield "not a future"

    async def bad() -> None:
        await Bad()

    with pytest.raises(RuntimeError, match="not a future"):
        await gather_inline([bad()])


class CountingFuture(asyncio.Future[int]):
    """A future that counts who asked to hear when it is done."""

    def __init__(self) -> None:
        super().__init__()
        self.listeners = 0

    def add_done_callback(self, fn: Any, *, context: Any = None) -> None:
        self.listeners += 1
        super().add_done_callback(fn, context=context)


async def test_work_released_over_many_loop_iterations_costs_each_future_one_callback() -> None:
    # The pacer releases paced work a batch per loop iteration: waiting again
    # must not re-register every future still pending (quadratic in the list).
    futures = [CountingFuture() for _ in range(50)]

    async def waits(future: CountingFuture) -> int:
        return await future

    gathering = asyncio.ensure_future(gather_inline([waits(f) for f in futures]))
    for i, future in enumerate(futures):
        await asyncio.sleep(0)
        future.set_result(i)
    assert await gathering == list(range(50))
    assert {f.listeners for f in futures} == {1}

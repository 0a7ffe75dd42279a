"""A future several callers await: one caller's end reaches neither the future nor the rest."""

from __future__ import annotations

import asyncio
import gc

import pytest

from graph_schema.shared_futures import shielded


async def test_a_cancelled_caller_leaves_the_shared_future_to_the_others() -> None:
    shared: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    gone = asyncio.ensure_future(shielded(shared))
    stays = asyncio.ensure_future(shielded(shared))
    await asyncio.sleep(0)  # both now wait on the shared future
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert not shared.cancelled()
    shared.set_result(7)
    assert await stays == 7


async def test_a_failure_no_caller_read_is_not_logged_as_never_retrieved() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    shared: asyncio.Future[int] = loop.create_future()
    mine = shielded(shared)
    shared.set_exception(RuntimeError("agent down"))
    await asyncio.sleep(0)  # the shield's callbacks run: the failure lands in ``mine``
    assert mine.done()
    del mine, shared
    gc.collect()
    await asyncio.sleep(0)
    assert reported == []

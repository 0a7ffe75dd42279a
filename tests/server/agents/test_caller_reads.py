"""CallerReads: each caller's reads in flight, bounded over all nodes and per node."""

from __future__ import annotations

import asyncio

import pytest

from api.agents.caller_reads import CallerReads
from graph_schema.limits import (
    DEFAULT_MAX_HISTORY_READS_PER_CALLER,
    DEFAULT_MAX_HISTORY_READS_PER_CALLER_PER_NODE,
)
from graph_schema.occupancy.fan_out import FAN_OUT


async def settled() -> None:
    """Let every task that can run do so (a waiter wakes one step after its release)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_the_defaults_let_one_query_fan_out_at_full_width() -> None:
    assert DEFAULT_MAX_HISTORY_READS_PER_CALLER >= FAN_OUT
    assert 1 <= DEFAULT_MAX_HISTORY_READS_PER_CALLER_PER_NODE < DEFAULT_MAX_HISTORY_READS_PER_CALLER


async def test_a_caller_past_its_bound_at_a_node_waits_while_others_go_ahead() -> None:
    reads = CallerReads(per_caller=10, per_node=2)
    held = [await reads.acquire("tenant", "node-a") for _ in range(2)]
    third = asyncio.ensure_future(reads.acquire("tenant", "node-a"))
    await settled()
    assert not third.done()
    # The same caller elsewhere, and another caller at the same node, are not held up.
    elsewhere = await asyncio.wait_for(reads.acquire("tenant", "node-b"), 5)
    admin = await asyncio.wait_for(reads.acquire("admin", "node-a"), 5)
    assert (reads.in_flight("tenant"), reads.in_flight("tenant", "node-a")) == (3, 2)
    assert reads.waiting("tenant") == 1 and reads.in_flight("admin", "node-a") == 1
    held[0].release()
    slot = await asyncio.wait_for(third, 5)
    assert reads.in_flight("tenant", "node-a") == 2 and reads.waiting("tenant") == 0
    for s in (held[1], slot, elsewhere, admin):
        s.release()
    assert reads.callers() == 0


async def test_a_callers_reads_over_all_nodes_are_bounded_too() -> None:
    reads = CallerReads(per_caller=3, per_node=2)
    held = [await reads.acquire("tenant", f"node-{i}") for i in range(3)]
    fourth = asyncio.ensure_future(reads.acquire("tenant", "node-9"))
    await settled()
    assert not fourth.done() and reads.waiting("tenant") == 1
    held[1].release()
    (await asyncio.wait_for(fourth, 5)).release()
    for slot in (held[0], held[2]):
        slot.release()
    assert reads.callers() == 0


async def test_waiters_take_their_turn_in_order() -> None:
    reads = CallerReads(per_caller=5, per_node=1)
    first = await reads.acquire("tenant", "node-a")
    order: list[tuple[int, int]] = []

    async def read(i: int) -> None:
        slot = await reads.acquire("tenant", "node-a")
        order.append((i, reads.in_flight("tenant", "node-a")))
        await asyncio.sleep(0)
        slot.release()

    waiters = [asyncio.ensure_future(read(i)) for i in range(4)]
    await settled()
    assert order == []
    first.release()
    await asyncio.wait_for(asyncio.gather(*waiters), 5)
    # In the order they asked, one at a time.
    assert order == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert reads.callers() == 0


async def test_a_cancelled_waiter_leaves_nothing_behind() -> None:
    reads = CallerReads(per_caller=1, per_node=1)
    held = await reads.acquire("tenant", "node-a")
    waiter = asyncio.ensure_future(reads.acquire("tenant", "node-b"))
    await settled()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert reads.waiting("tenant") == 0
    held.release()
    held.release()  # a second release gives nothing back twice
    assert reads.callers() == 0
    # The budget is whole again.
    again = await asyncio.wait_for(reads.acquire("tenant", "node-a"), 5)
    again.release()


def test_bounds_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        CallerReads(per_caller=0, per_node=1)
    with pytest.raises(ValueError, match="at least 1"):
        CallerReads(per_caller=1, per_node=0)

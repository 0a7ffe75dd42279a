"""The graph's GPU event fields: a node asked for by name that the caller cannot see."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from graph_schema.context import GraphContext
from graph_schema.scope import EVERYTHING, Scope
from tests.graph.occupancy.test_resolvers import GPUS, SINCE, UNSEEN, answer
from tests.support.graph import SmallWorld
from tests.support.history_agents import HistoryAgents, open_stores

EVENTS = f'gpuEvents(since: "{SINCE}", nodeName: $node) {{ edges {{ node {{ xid }} }} }}'
STREAM = "subscription($node: String) { gpuEventStream(nodeName: $node) { xid } }"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SmallWorld]:
    """The small world, each node's agent with an (empty) log."""
    stores = open_stores(tmp_path, {"node-a": [], "node-b": []})
    try:
        yield SmallWorld(agents=HistoryAgents(stores))
    finally:
        for store in stores.values():
            store.close()


@pytest.mark.parametrize(("node", "scope"), UNSEEN.values(), ids=UNSEEN.keys())
async def test_gpu_events_of_a_node_the_caller_cannot_see_is_not_found_as_gpus_is(
    world: SmallWorld, node: str, scope: Scope
) -> None:
    # Not an empty page: that would look like a node whose GPUs never failed.
    events = await answer(world, EVENTS, node, scope)
    gpus = await answer(world, GPUS, node, scope)
    assert events["data"] is None and gpus["errors"][0]["path"] == ["gpus"]
    gpus["errors"][0]["path"] = ["gpuEvents"]
    assert events == gpus
    assert events["errors"][0]["code"] == {"code": "NOT_FOUND"}
    assert world.agents.calls == {}


@pytest.mark.parametrize(("node", "scope"), UNSEEN.values(), ids=UNSEEN.keys())
async def test_a_stream_of_a_node_the_caller_cannot_see_ends_not_found(
    world: SmallWorld, node: str, scope: Scope
) -> None:
    # Not a stream that never yields: that would look like a healthy node.
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=scope)
    stream = await world.schema.subscribe(STREAM, variable_values={"node": node}, context_value=ctx)
    assert isinstance(stream, AsyncIterator)
    first = await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert first.data is None and first.errors is not None
    gpus = await answer(world, GPUS, node, scope)
    assert [e.message.replace(node, "NODE") for e in first.errors] == [
        e["message"] for e in gpus["errors"]
    ]
    assert first.errors[0].extensions == {"code": "NOT_FOUND"}
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert world.agents.calls == {}
    assert world.schema.state.subscriptions.active == 0


@pytest.mark.parametrize("first", [0, -1, 1001])
async def test_both_connections_refuse_a_page_size_out_of_range_alike(
    world: SmallWorld, first: int
) -> None:
    paged = f'since: "{SINCE}", first: {first}, nodeName: $node'
    answers = []
    for name in ("gpuHistory", "gpuEvents"):
        refused = await answer(
            world, f"{name}({paged}) {{ edges {{ cursor }} }}", "node-a", EVERYTHING
        )
        assert refused["errors"][0]["path"] == [name]
        refused["errors"][0]["path"] = ["CONNECTION"]
        answers.append(refused)
    assert answers[0] == answers[1]
    assert answers[0]["data"] is None
    assert [e["message"] for e in answers[0]["errors"]] == ["first must be between 1 and 1000"]
    assert world.agents.calls == {}

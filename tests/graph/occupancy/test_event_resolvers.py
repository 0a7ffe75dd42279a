"""The graph's GPU event fields: a node asked for by name that the caller cannot see, and
the stream's followers when a node cannot answer."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
import weakref
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from strawberry.types.execution import ExecutionResult, PreExecutionError

from graph_schema.context import GraphContext
from graph_schema.interfaces import AgentUnavailableError
from graph_schema.occupancy import event_resolvers
from graph_schema.occupancy.event_fan_out import Follower
from graph_schema.scope import EVERYTHING, Scope
from node_resolver.gpu_events.records import EventPage, EventQuery, GpuEvent
from node_resolver.history.store import HistoryStore
from tests.graph.occupancy.test_resolvers import GPUS, SINCE, UNSEEN, answer, xid
from tests.support.graph import SmallWorld, node_record, pod_record, snapshot
from tests.support.history_agents import HistoryAgents, open_stores
from tests.support.polling import eventually_async

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
    assert answers[0]["errors"][0]["code"] == {"code": "BAD_USER_INPUT"}
    assert world.agents.calls == {}


async def subscribe(
    world: SmallWorld, node: str | None, scope: Scope = EVERYTHING
) -> AsyncGenerator[ExecutionResult | PreExecutionError, None]:
    """gpuEventStream, on ``node`` or every node, as a caller who sees everything (or
    ``scope``)."""
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=scope)
    stream = await world.schema.subscribe(STREAM, variable_values={"node": node}, context_value=ctx)
    assert isinstance(stream, AsyncGenerator)
    return stream


async def test_a_stream_of_a_named_node_that_cannot_be_followed_ends_with_its_error(
    world: SmallWorld,
) -> None:
    # Not a stream that never yields: that would look like a node whose GPUs never fail.
    world.agents.kill("node-a", "connection refused")
    stream = await subscribe(world, "node-a")
    first = await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert first.data is None and first.errors is not None
    assert [e.message for e in first.errors] == [
        str(AgentUnavailableError("node-a", "connection refused"))
    ]
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert world.schema.state.subscriptions.active == 0


async def test_a_followed_node_that_fails_is_followed_again_and_loses_no_event(
    world: SmallWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Follower, "retry_seconds", 0.01)
    calls = world.agents.calls
    stream = await subscribe(world, None)
    first = asyncio.ensure_future(stream.__anext__())
    try:
        # Following: it has read where node-a's log stands and asked for what follows.
        await eventually_async(lambda: calls["node-a"] >= 2, what="node-a followed")
        world.agents.kill("node-a", "restarting")
        failed_at = calls["node-a"]
        # It failed, and tried again, while node-a was down (an agent's rolling restart).
        await eventually_async(lambda: calls["node-a"] >= failed_at + 2, what="a retry")
        assert isinstance(world.agents, HistoryAgents)
        world.agents.stores["node-a"].write_events([xid("GPU-node-a-0", 30, 79)])
        world.agents.revive("node-a")
        result = await asyncio.wait_for(first, timeout=15)
    finally:
        first.cancel()
        await stream.aclose()
    assert result.errors is None
    assert result.data == {"gpuEventStream": {"xid": 79}}


@pytest.fixture
def node_c(
    world: SmallWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HistoryStore]:
    """node-c's agent, its log empty, the node not in the cluster yet; streams look for new
    nodes at once."""
    monkeypatch.setattr(event_resolvers, "NEW_NODES_SECONDS", 0.01)
    assert isinstance(world.agents, HistoryAgents)
    (store,) = open_stores(tmp_path / "late", {"node-c": []}).values()
    world.agents.stores["node-c"] = store
    world.agents.put(snapshot("node-c", []))
    try:
        yield store
    finally:
        store.close()


async def test_a_node_that_joins_an_open_stream_is_followed_from_the_streams_start(
    world: SmallWorld, node_c: HistoryStore
) -> None:
    # A node the autoscaler adds during an incident: its GPUs' events count as much.
    store = node_c
    listings = counted(world, "nodes")
    stream = await subscribe(world, None)
    first = asyncio.ensure_future(stream.__anext__())
    try:
        await eventually_async(lambda: world.agents.calls["node-a"] >= 2, what="node-a followed")
        # Logged before the stream began: not new to it. Then one after.
        store.write_events([now_xid("GPU-node-c-0", 41, ago=3600), now_xid("GPU-node-c-0", 42)])
        world.cluster.add_node(node_record("node-c", ip="10.0.0.3"))
        assert (await asyncio.wait_for(first, timeout=15)).data == {"gpuEventStream": {"xid": 42}}
        # It leaves (its follower stops at two listings without it), logs, and comes back:
        # followed again from where it stopped, not from the stream's start.
        world.cluster.remove_node("node-c")
        left_at = listings["nodes"]
        await eventually_async(lambda: listings["nodes"] >= left_at + 2, what="two listings")
        store.write_events([now_xid("GPU-node-c-0", 43)])
        world.cluster.add_node(node_record("node-c", ip="10.0.0.3"))
        nxt = await asyncio.wait_for(stream.__anext__(), timeout=15)
    finally:
        first.cancel()
        await stream.aclose()
    assert nxt.data == {"gpuEventStream": {"xid": 43}}


async def test_a_node_gone_long_is_forgotten_and_shows_no_event_twice_when_back(
    world: SmallWorld, node_c: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream open for weeks on an autoscaled cluster keeps no follower per node that passed.
    monkeypatch.setattr(event_resolvers, "GONE_NODE_SECONDS", 0.0)
    alive: weakref.WeakSet[Follower] = weakref.WeakSet()

    class Kept(Follower):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            alive.add(self)

    monkeypatch.setattr(event_resolvers, "Follower", Kept)
    store = node_c
    listings = counted(world, "nodes")
    calls = world.agents.calls
    stream = await subscribe(world, None)
    first = asyncio.ensure_future(stream.__anext__())
    try:
        world.cluster.add_node(node_record("node-c", ip="10.0.0.3"))
        await eventually_async(lambda: calls["node-c"] >= 2, what="node-c followed")
        store.write_events([now_xid("GPU-node-c-0", 42)])
        assert (await asyncio.wait_for(first, timeout=15)).data == {"gpuEventStream": {"xid": 42}}
        world.cluster.remove_node("node-c")
        left_at = listings["nodes"]
        await eventually_async(lambda: listings["nodes"] >= left_at + 3, what="three listings")
        gc.collect()
        assert sorted(f.node_name for f in alive) == ["node-a", "node-b"]
        # Back: its log read again from the start, but 42 is not new to the stream.
        world.cluster.add_node(node_record("node-c", ip="10.0.0.3"))
        back_at = calls["node-c"]
        await eventually_async(lambda: calls["node-c"] >= back_at + 2, what="node-c followed")
        store.write_events([now_xid("GPU-node-c-0", 44)])
        nxt = await asyncio.wait_for(stream.__anext__(), timeout=15)
    finally:
        first.cancel()
        await stream.aclose()
    assert nxt.data == {"gpuEventStream": {"xid": 44}}


async def test_a_tenants_stream_follows_a_node_its_pod_comes_to(
    world: SmallWorld, node_c: HistoryStore
) -> None:
    # serving sees node-b (infer-1 runs there). Its new pod lands on node-c while the
    # stream is open: node-c is the tenant's now, and so are its GPUs' events.
    store = node_c
    world.cluster.add_node(node_record("node-c", ip="10.0.0.3"))
    serving = Scope(pod_namespaces=frozenset({"serving"}))
    stream = await subscribe(world, None, serving)
    first = asyncio.ensure_future(stream.__anext__())
    try:
        await eventually_async(lambda: world.agents.calls["node-b"] >= 2, what="node-b followed")
        assert world.agents.calls["node-c"] == 0, "not the tenant's node yet"
        world.cluster.add_pod(pod_record("serving", "infer-2", "node-c"))
        pod = ("serving", "infer-2", pod_uid_of(world, "serving", "infer-2"))
        event = dataclasses.replace(xid("GPU-node-c-0", 0, 43, pod), time=time.time())
        store.write_events([event])
        assert (await asyncio.wait_for(first, timeout=15)).data == {"gpuEventStream": {"xid": 43}}
    finally:
        first.cancel()
        await stream.aclose()


async def test_a_node_down_when_the_stream_began_shows_what_it_logged_since(
    world: SmallWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It could not say where its log stood: once back, what it logged after the stream
    # began is new to the stream (and what came before is not).
    monkeypatch.setattr(Follower, "retry_seconds", 0.01)
    assert isinstance(world.agents, HistoryAgents)
    store = world.agents.stores["node-a"]
    store.write_events([now_xid("GPU-node-a-0", 41, ago=3600)])
    world.agents.kill("node-a", "restarting")
    stream = await subscribe(world, None)
    first = asyncio.ensure_future(stream.__anext__())
    try:
        failed = world.agents.calls["node-a"]
        await eventually_async(lambda: world.agents.calls["node-a"] >= failed + 2, what="a retry")
        store.write_events([now_xid("GPU-node-a-0", 42)])
        world.agents.revive("node-a")
        result = await asyncio.wait_for(first, timeout=15)
    finally:
        first.cancel()
        await stream.aclose()
    assert result.data == {"gpuEventStream": {"xid": 42}}


def pod_uid_of(world: SmallWorld, namespace: str, name: str) -> str:
    record = world.cluster.pod(namespace, name)
    assert record is not None
    return record.uid


class OlderAgents(HistoryAgents):
    """Agents from before ``since`` counted while following: they send the whole log."""

    async def follow_gpu_events(
        self, node_name: str, query: EventQuery, *, wait_seconds: float
    ) -> EventPage:
        older = dataclasses.replace(query, since=0.0)
        return await super().follow_gpu_events(node_name, older, wait_seconds=wait_seconds)


async def test_a_late_follower_leaves_out_what_an_older_agent_sends_from_before_its_start(
    tmp_path: Path,
) -> None:
    stores = open_stores(tmp_path, {"node-a": []})
    stores["node-a"].write_events([now_xid("GPU-node-a-0", 41, ago=3600)])
    agents = OlderAgents(stores)
    agents.put(snapshot("node-a", []))
    stores["node-a"].write_events([now_xid("GPU-node-a-0", 42)])
    follower = Follower(agents, "node-a", EventQuery(), since=time.time() - 60)
    try:
        batch = await asyncio.wait_for(anext(follower.batches()), timeout=15)
    finally:
        stores["node-a"].close()
    assert [item.event.xid for item in batch] == [42]


def now_xid(gpu_uuid: str, code: int, *, ago: float = 0.0) -> GpuEvent:
    """An XID on ``gpu_uuid`` ``ago`` seconds before now."""
    return dataclasses.replace(xid(gpu_uuid, 0, code), time=time.time() - ago)


def counted(world: SmallWorld, method: str) -> Counter[str]:
    """How many times the world's cluster has been asked ``method`` from now on."""
    calls: Counter[str] = Counter()
    real = getattr(world.cluster, method)

    def counting(*args: object) -> object:
        calls[method] += 1
        return real(*args)

    setattr(world.cluster, method, counting)
    return calls


async def test_a_follower_waits_longer_after_each_failure_in_a_row_and_afresh_once_answered(
    world: SmallWorld,
) -> None:
    # A node that never answers (no agent on a CPU node, its log off) costs a call every
    # few minutes, not every few seconds, for as long as a stream stays open.
    assert isinstance(world.agents, HistoryAgents)
    follower = Follower(world.agents, "node-a", EventQuery())
    delays = [follower.retry_delay() for _ in range(8)]
    assert delays == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    following = asyncio.ensure_future(anext(follower.batches()))
    try:
        await eventually_async(lambda: follower.started, what="node-a answered")
    finally:
        following.cancel()
    assert follower.retry_delay() == 5.0

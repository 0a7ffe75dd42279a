"""Subscriptions: live ticks, freeing on unsubscribe, the server-wide cap, interval clamp."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import pytest

import graph_schema.subscriptions
from graph_schema.context import GraphContext
from graph_schema.limits import SchemaLimits
from graph_schema.schema import GraphSchema, build_schema
from graph_schema.scope import EVERYTHING, Scope
from tests.support.graph import GiB, gpu_sample, process, snapshot, synthetic_cluster
from tests.support.history_agents import HistoryAgents, at, occupancy, open_stores

GPU_UPDATES = """subscription($node: String, $every: Float) {
  gpuUpdates(nodeName: $node, intervalSeconds: $every) {
    uuid memoryUsedBytes processes { pid usedMemoryBytes pod { name } }
  }
}"""


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replace the subscriptions' sleep: record each interval and just yield control."""
    requested: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        requested.append(seconds)
        await asyncio.sleep(0)

    monkeypatch.setattr(graph_schema.subscriptions, "sleep", fake_sleep)
    return requested


async def subscribe(schema: GraphSchema, ctx: Any, query: str, **variables: Any) -> Any:
    stream = await schema.subscribe(query, variable_values=variables, context_value=ctx)
    assert isinstance(stream, AsyncIterator)
    return stream


async def next_data(stream: AsyncGenerator[Any, None]) -> Any:
    result = await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert result.errors is None, result.errors
    return result.data


async def test_ticks_reflect_changing_snapshots(ticks: list[float]) -> None:
    sc = synthetic_cluster(2, gpus_per_node=1, processes_per_gpu=1)
    node = sc.node_names[0]
    schema = build_schema()
    stream = await subscribe(
        schema,
        GraphContext(sc.cluster, sc.snapshots, schema.state),
        GPU_UPDATES,
        node=node,
        every=1.0,
    )
    first = await next_data(stream)
    (gpu,) = first["gpuUpdates"]
    assert gpu["memoryUsedBytes"] == GiB
    assert gpu["processes"] == [
        {"pid": 1000, "usedMemoryBytes": GiB, "pod": {"name": f"w-{node}-0-0"}}
    ]

    sc.snapshots.put(snapshot(node, [gpu_sample(node, 0, [process(4242, 7 * GiB)])]))
    second = await next_data(stream)
    assert second["gpuUpdates"][0]["memoryUsedBytes"] == 7 * GiB
    assert second["gpuUpdates"][0]["processes"] == [
        {"pid": 4242, "usedMemoryBytes": 7 * GiB, "pod": None}
    ]
    # A fresh loader each tick: one agent call per tick, only for the node asked about.
    assert dict(sc.snapshots.calls) == {node: 2}
    assert ticks == [1.0]
    await stream.aclose()


async def test_a_dead_node_is_left_out_and_named_in_that_ticks_errors(
    ticks: list[float],
) -> None:
    sc = synthetic_cluster(3, gpus_per_node=2, processes_per_gpu=1)
    dead = sc.node_names[0]
    schema = build_schema()
    stream = await subscribe(
        schema, GraphContext(sc.cluster, sc.snapshots, schema.state), GPU_UPDATES
    )
    assert len((await next_data(stream))["gpuUpdates"]) == 6
    sc.snapshots.kill(dead)
    tick = await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert [g["uuid"] for g in tick.data["gpuUpdates"]] == [
        f"GPU-{n}-{i}" for n in sc.node_names[1:] for i in range(2)
    ]
    assert [(e.message, e.path) for e in tick.errors] == [
        (f"agent on node {dead!r} unavailable: connection refused", ["gpuUpdates"])
    ]
    # The error belongs to that tick only: once the node is back, the next tick is clean.
    sc.snapshots.revive(dead)
    assert len((await next_data(stream))["gpuUpdates"]) == 6
    await stream.aclose()


@pytest.mark.parametrize(
    ("node", "namespaces"),
    [("node-x", None), ("node-x", {"ns-1"}), ("node-00000", {"ns-1"}), ("node-00000", set())],
    ids=["no such node", "no such node, for a tenant", "another tenant's node", "sees nothing"],
)
async def test_updates_of_a_node_the_caller_cannot_see_end_not_found_as_gpus_answers(
    ticks: list[float], node: str, namespaces: set[str] | None
) -> None:
    # Not empty ticks: they would look like a node whose GPUs run nothing.
    sc = synthetic_cluster(2, gpus_per_node=1, processes_per_gpu=1)
    schema = build_schema()
    scope = EVERYTHING if namespaces is None else Scope(pod_namespaces=frozenset(namespaces))
    ctx = GraphContext(sc.cluster, sc.snapshots, schema.state, scope=scope)
    stream = await subscribe(schema, ctx, GPU_UPDATES, node=node)
    tick = await asyncio.wait_for(stream.__anext__(), timeout=5)
    gpus = await schema.execute(
        "query($node: String) { gpus(nodeName: $node) { uuid } }",
        variable_values={"node": node},
        context_value=GraphContext(sc.cluster, sc.snapshots, schema.state, scope=scope),
    )
    assert gpus.errors is not None and tick.errors is not None
    assert tick.data is None
    assert [(e.message, e.extensions) for e in tick.errors] == [
        (e.message, e.extensions) for e in gpus.errors
    ]
    assert tick.errors[0].extensions == {"code": "NOT_FOUND"}
    # The stream ends there, and no agent was asked.
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert sc.snapshots.calls == {}
    assert schema.state.subscriptions.active == 0


async def test_pod_gpu_usage(ticks: list[float]) -> None:
    sc = synthetic_cluster(2, gpus_per_node=2, processes_per_gpu=1)
    node = sc.node_names[1]
    pod_name = f"w-{node}-1-0"
    schema = build_schema()
    stream = await subscribe(
        schema,
        GraphContext(sc.cluster, sc.snapshots, schema.state),
        """subscription($ns: String!, $name: String!) {
          podGpuUsage(namespace: $ns, name: $name) {
            name gpus { uuid } gpuProcesses { pid usedMemoryBytes }
          }
        }""",
        ns="ns-1",
        name=pod_name,
    )
    data = await next_data(stream)
    assert data["podGpuUsage"] == {
        "name": pod_name,
        "gpus": [{"uuid": f"GPU-{node}-1"}],
        "gpuProcesses": [{"pid": 1100, "usedMemoryBytes": GiB}],
    }
    sc.cluster.remove_pod("ns-1", pod_name)
    assert (await next_data(stream)) == {"podGpuUsage": None}
    assert ticks == [2.0]
    await stream.aclose()


@pytest.mark.parametrize(("ns", "name"), [("", "w"), ("ns-0", "")])
async def test_pod_gpu_usage_of_an_empty_name_is_refused_not_null_for_ever(
    ticks: list[float], ns: str, name: str
) -> None:
    sc = synthetic_cluster(1, gpus_per_node=1, processes_per_gpu=1)
    schema = build_schema()
    stream = await subscribe(
        schema,
        GraphContext(sc.cluster, sc.snapshots, schema.state),
        "subscription($ns: String!, $name: String!) { podGpuUsage(namespace: $ns, name: $name)"
        " { name } }",
        ns=ns,
        name=name,
    )
    tick = await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert tick.errors is not None
    assert [e.extensions for e in tick.errors] == [{"code": "BAD_USER_INPUT"}]
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(stream.__anext__(), timeout=5)
    assert ticks == [] and schema.state.subscriptions.active == 0


async def test_unsubscribe_frees_the_slot(ticks: list[float]) -> None:
    sc = synthetic_cluster(1, gpus_per_node=1, processes_per_gpu=1)
    schema = build_schema()
    limiter = schema.state.subscriptions
    streams = [
        await subscribe(schema, GraphContext(sc.cluster, sc.snapshots, schema.state), GPU_UPDATES)
        for _ in range(3)
    ]
    for s in streams:
        await next_data(s)
    assert limiter.active == 3
    for s in streams:
        await s.aclose()
    assert limiter.active == 0


async def test_cap_refuses_new_subscriptions_clearly(ticks: list[float]) -> None:
    sc = synthetic_cluster(1, gpus_per_node=1, processes_per_gpu=1)
    schema = build_schema(SchemaLimits(max_subscriptions=2))
    ctx = GraphContext(sc.cluster, sc.snapshots, schema.state)
    held = [await subscribe(schema, ctx, GPU_UPDATES) for _ in range(2)]
    for s in held:
        await next_data(s)

    refused = await subscribe(schema, ctx, GPU_UPDATES)
    result = await asyncio.wait_for(refused.__anext__(), timeout=5)
    assert result.data is None
    assert [e.message for e in result.errors] == [
        "too many concurrent subscriptions: this server allows 2; try again later"
    ]
    with pytest.raises(StopAsyncIteration):
        await refused.__anext__()

    # Held subscriptions keep ticking; a freed slot can be taken again.
    await next_data(held[0])
    await held[1].aclose()
    again = await subscribe(schema, ctx, GPU_UPDATES)
    assert len((await next_data(again))["gpuUpdates"]) == 1
    for s in (held[0], again):
        await s.aclose()
    assert schema.state.subscriptions.active == 0


@pytest.mark.parametrize(
    ("asked", "slept"), [(0.01, 0.5), (0.0, 0.5), (-3.0, 0.5), (0.75, 0.75), (None, 2.0)]
)
async def test_interval_is_clamped(ticks: list[float], asked: float | None, slept: float) -> None:
    sc = synthetic_cluster(1, gpus_per_node=1, processes_per_gpu=1)
    schema = build_schema()
    stream = await subscribe(
        schema, GraphContext(sc.cluster, sc.snapshots, schema.state), GPU_UPDATES, every=asked
    )
    await next_data(stream)
    await next_data(stream)
    assert ticks == [slept]
    await stream.aclose()


async def test_each_tick_reads_history_afresh(ticks: list[float], tmp_path: pathlib.Path) -> None:
    # A GPU's history is read once per operation, shared by the fields that read the
    # same records; a subscription's tick is a new read, not the first tick's again.
    uuid = "GPU-node-00000-0"
    stores = open_stores(tmp_path, {"node-00000": [occupancy(uuid, 1, 0, 1)]})
    try:
        sc = synthetic_cluster(
            1, gpus_per_node=1, processes_per_gpu=1, agents=HistoryAgents(stores)
        )
        schema = build_schema()
        query = """subscription { gpuUpdates(nodeName: "node-00000", intervalSeconds: 1) {
          uuid history(since: "2026-12-01T00:00:00Z", until: "2026-12-02T00:00:00Z") { pid }
          hiddenHistoryCount(since: "2026-12-01T00:00:00Z", until: "2026-12-02T00:00:00Z") } }"""
        context = GraphContext(sc.cluster, sc.snapshots, schema.state)
        stream = await subscribe(schema, context, query)
        first = await next_data(stream)
        assert [p["pid"] for p in first["gpuUpdates"][0]["history"]] == [1]
        stores["node-00000"].write([occupancy(uuid, 2, 2, 3)], [], now=at(24))
        second = await next_data(stream)
        assert [p["pid"] for p in second["gpuUpdates"][0]["history"]] == [1, 2]
        await stream.aclose()
    finally:
        for store in stores.values():
            store.close()

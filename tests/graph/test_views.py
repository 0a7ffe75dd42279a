"""Graph objects built once per snapshot: each pod's GPUs, looked up by index."""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from graph_schema.context import GraphContext
from graph_schema.scope import Scope
from graph_schema.types import Gpu
from graph_schema.views import ViewCache, gpus_by_pod
from node_resolver.codec import snapshot_from_wire, snapshot_to_proto
from tests.support.clock import ManualClock
from tests.support.graph import (
    GiB,
    MemoryCluster,
    SmallWorld,
    gpu_sample,
    gpu_uuid,
    node_record,
    process,
    snapshot,
)

ML_ONLY = Scope(pod_namespaces=frozenset({"ml"}))


async def test_a_pods_gpus_are_those_running_its_processes_in_node_order() -> None:
    world = SmallWorld()
    ctx = GraphContext(world.cluster, world.agents, world.schema.state)
    gpus = await ctx.gpus("node-a")
    by_pod = gpus_by_pod(gpus)
    # train-1 runs on GPUs 0 and 1 (two processes on 1 count once); train-2 only on 0.
    assert [g.uuid for g in by_pod[world.train1.uid]] == [
        gpu_uuid("node-a", 0),
        gpu_uuid("node-a", 1),
    ]
    assert [g.uuid for g in by_pod[world.train2.uid]] == [gpu_uuid("node-a", 0)]
    # The host process (no pod) and the lost GPU belong to nobody.
    assert set(by_pod) == {world.train1.uid, world.train2.uid}
    assert await ctx.pod_gpus("node-a", world.idle.uid) == []


async def test_the_index_of_the_shared_objects_is_built_once_per_snapshot() -> None:
    world = SmallWorld()
    first = GraphContext(world.cluster, world.agents, world.schema.state)
    second = GraphContext(world.cluster, world.agents, world.schema.state)
    a = await first.pod_gpus("node-a", world.train1.uid)
    b = await second.pod_gpus("node-a", world.train1.uid)
    assert [g.uuid for g in a] == [g.uuid for g in b]
    shared = await second.gpus("node-a")
    assert world.schema.state.views.gpus_by_pod("node-a", shared) is (
        world.schema.state.views.gpus_by_pod("node-a", shared)
    )
    # Another list (a restricted caller's copies) is not the shared objects' index.
    assert world.schema.state.views.gpus_by_pod("node-a", list(shared)) is None


async def test_a_restricted_caller_gets_its_own_copies_of_a_pods_gpus() -> None:
    world = SmallWorld()
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=ML_ONLY)
    visible = await ctx.gpus("node-a")
    used = await ctx.pod_gpus("node-a", world.train2.uid)
    assert [g.uuid for g in used] == [gpu_uuid("node-a", 0)]
    # The caller's copies, as ``gpus`` hands them out, not the shared objects.
    assert used[0] is visible[0]
    shared = world.schema.state.views.gpus("node-a", await ctx.snapshot("node-a"), world.cluster)
    assert used[0] is not shared[0]


async def test_pod_gpus_and_gpu_processes_answer_through_the_index() -> None:
    world = SmallWorld()
    data = await world.query(
        '{ pods(namespace: "ml") { name gpus { uuid } gpuProcesses { pid } } }'
    )
    by_name = {p["name"]: p for p in data["pods"]}
    assert [g["uuid"] for g in by_name["train-1"]["gpus"]] == [
        gpu_uuid("node-a", 0),
        gpu_uuid("node-a", 1),
    ]
    assert [p["pid"] for p in by_name["train-1"]["gpuProcesses"]] == [101, 103]
    assert [p["pid"] for p in by_name["train-2"]["gpuProcesses"]] == [202]
    assert by_name["idle"]["gpus"] == [] and by_name["pending"]["gpus"] == []


def test_the_sizes_are_those_of_the_current_snapshots_read_within_the_horizon() -> None:
    cluster = MemoryCluster()
    clock = ManualClock()
    views = ViewCache(horizon=10.0, clock=clock)

    def node(name: str, processes: int, gpus: int = 2) -> None:
        cluster.add_node(node_record(name))
        listed = [process(100 + i, 1 << 20) for i in range(processes)]
        samples = [gpu_sample(name, 0, listed)] + [gpu_sample(name, i) for i in range(1, gpus)]
        views.gpus(name, snapshot(name, samples), cluster)

    def sizes() -> tuple[int, int]:
        peaks = views.peaks()
        return peaks.gpus_per_node, peaks.processes_per_gpu

    node("a", 1)
    node("b", 9, gpus=4)
    assert sizes() == (4, 9)
    # Replaced: b's old figures leave with its old snapshot.
    node("b", 2)
    assert sizes() == (2, 2)
    # Unread past the horizon, b's snapshot no longer counts; a read counts it again.
    clock.advance(6.0)
    node("c", 5)
    clock.advance(6.0)
    assert sizes() == (2, 5)
    held = snapshot("b", [gpu_sample("b", 0, [process(7, 1 << 20)] * 3)])
    views.gpus("b", held, cluster)
    clock.advance(10.0)
    assert sizes() == (0, 0)
    views.gpus("b", held, cluster)  # the same snapshot object handed out again
    assert sizes() == (1, 3)
    # Released with its node.
    views.forget("b")
    assert sizes() == (0, 0)


async def test_objects_built_from_the_agents_message_are_those_built_from_its_records() -> None:
    world = SmallWorld()
    for node_name in ("node-a", "node-b"):
        records = (await world.agents.fetch(node_name)).snapshot
        # As the server's client decodes it: the graph reads the message itself.
        wire = snapshot_from_wire(snapshot_to_proto(records, now=records.sampled_at))
        from_records = ViewCache().gpus(node_name, records, world.cluster)
        from_wire = ViewCache().gpus(node_name, wire, world.cluster)
        assert from_records
        assert [fields(g) for g in from_wire] == [fields(g) for g in from_records]
        assert wire.sample.gpus == records.sample.gpus


def fields(gpu: Gpu) -> dict[str, Any]:
    """A GPU object's fields and its processes', but for what is built per snapshot."""
    mine = {k: v for k, v in vars(gpu).items() if k not in ("processes", "allocations_of_node")}
    processes = [{k: v for k, v in vars(p).items() if k != "gpu_ref"} for p in gpu.processes]
    return {**mine, "processes": processes}


def test_a_replaced_snapshots_objects_go_without_the_cyclic_collector() -> None:
    world = SmallWorld()
    views = ViewCache()
    first = snapshot("node-a", [gpu_sample("node-a", 0, [process(7, GiB)])])
    gpu = views.gpus("node-a", first, world.cluster)[0]
    assert gpu.processes[0].gpu is gpu
    gone = weakref.ref(gpu)
    del gpu
    with collector_off():
        views.gpus("node-a", replace(first, sampled_at=first.sampled_at + 1), world.cluster)
        assert gone() is None


async def test_an_operation_holds_the_gpus_whose_processes_it_hands_out() -> None:
    world = SmallWorld()
    ctx = GraphContext(world.cluster, world.agents, world.schema.state)
    processes = [p for g in await ctx.gpus("node-a") for p in g.processes]
    uuids = [p.gpu.uuid for p in processes]
    with collector_off():
        # A newer snapshot replaces the cache's objects while the operation runs.
        old = (await world.agents.fetch("node-a")).snapshot
        world.schema.state.views.gpus("node-a", replace(old, sampled_at=1.0), world.cluster)
        assert [p.gpu.uuid for p in processes] == uuids
        gone = weakref.ref(processes[0].gpu)
        # Once it ends, nothing holds the replaced objects.
        ctx.finish()
        del processes
        assert gone() is None


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    """No cyclic collection meanwhile: what goes, goes by reference counting."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

"""The visibility seam: the cluster, pods and GPUs as one caller may see them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from graph_schema.context import GraphContext
from graph_schema.scope import EVERYTHING, Scope
from graph_schema.visibility import VisibleCluster
from node_resolver.models import (
    AllocationMechanism,
    ContainerAllocations,
    DeviceAllocation,
    NodeAllocations,
)
from tests.support.graph import (
    GiB,
    SmallWorld,
    gpu_sample,
    gpu_uuid,
    node_record,
    pod_record,
    process,
    snapshot,
)

ML_ONLY = Scope(pod_namespaces=frozenset({"ml"}))
SERVING_ONLY = Scope(pod_namespaces=frozenset({"serving"}))
ALL_PODS = Scope(all_pods=True)


@pytest.fixture
def world() -> SmallWorld:
    return SmallWorld()


def test_a_namespace_caller_gets_only_its_pods_by_every_lookup(world: SmallWorld) -> None:
    view = VisibleCluster(world.cluster, ML_ONLY)
    assert {p.namespace for p in view.pods()} == {"ml"}
    assert view.pod_count == 4
    assert view.pods(namespace="serving") == []
    assert [p.name for p in view.pods(node_name="node-b")] == ["idle"]
    assert view.pod("serving", "infer-1") is None
    assert view.pod_by_uid(world.infer.uid) is None
    assert view.pod_by_container_id("ctr-i1") is None
    assert view.pods_named("infer-1") == []
    assert view.pod("ml", "train-1") is world.train1
    assert view.pod_by_container_id("ctr-t2") is world.train2
    # The raw cache is still there for joins.
    assert view.raw.pod_by_uid(world.infer.uid) is world.infer


def test_without_list_nodes_a_caller_sees_the_nodes_running_its_pods(world: SmallWorld) -> None:
    assert [n.name for n in VisibleCluster(world.cluster, ML_ONLY).nodes()] == ["node-a", "node-b"]
    serving = VisibleCluster(world.cluster, SERVING_ONLY)
    assert [n.name for n in serving.nodes()] == ["node-b"]
    assert serving.node("node-a") is None
    assert not serving.sees_node("node-a")
    world.cluster.add_node(node_record("node-c"))
    assert VisibleCluster(world.cluster, ALL_PODS).node("node-c") is None
    assert VisibleCluster(world.cluster, Scope(all_nodes=True)).node_count == 3
    nobody = VisibleCluster(world.cluster, Scope())
    assert (nobody.nodes(), nobody.pods(), nobody.node("node-a")) == ([], [], None)


@pytest.mark.parametrize(
    ("scope", "shown"),
    [
        (ML_ONLY, ["ml-a", "ml-b"]),
        (SERVING_ONLY, ["serving"]),
        # Things of no pod (a host process, a pod never cached) need cluster-wide list pods.
        (ALL_PODS, ["ml-a", "serving", "host", "ml-b"]),
        (Scope(all_nodes=True, exec_all=True), []),
        (EVERYTHING, ["ml-a", "serving", "host", "ml-b"]),
    ],
)
def test_owned_records_are_split_by_the_rule_that_filters_processes(
    world: SmallWorld, scope: Scope, shown: list[str]
) -> None:
    # Records of any kind (allocations, history): only their owner's namespace matters.
    owners: dict[str, str | None] = {"ml-a": "ml", "serving": "serving", "host": None, "ml-b": "ml"}
    view = VisibleCluster(world.cluster, scope)
    seen, withheld = view.split_owned(list(owners), owners.__getitem__)
    assert seen == shown
    assert withheld == [k for k in owners if k not in shown]
    assert [view.sees_owner(owners[k]) for k in owners] == [k in shown for k in owners]


def test_a_namespace_the_cache_no_longer_holds_is_still_the_callers(world: SmallWorld) -> None:
    # History of a deleted pod: its namespace decides, not whether the pod is cached.
    view = VisibleCluster(world.cluster, Scope(pod_namespaces=frozenset({"gone"})))
    assert view.sees_namespace("gone")
    assert view.split_owned(["x"], lambda _: "gone") == (["x"], [])
    assert not view.sees_namespace("ml")


@pytest.mark.parametrize(
    "scope", [SERVING_ONLY, ML_ONLY, ALL_PODS, Scope(pod_namespaces=frozenset({"gone"}))]
)
def test_history_is_read_from_every_node_whoever_asks_but_only_seen_nodes_are_named(
    world: SmallWorld, scope: Scope
) -> None:
    # A pod's records outlive it in its node's log: a team that runs nothing on node-c now
    # (or nothing at all) still has its past there, so a read asks every node.
    world.cluster.add_node(node_record("node-c"))
    view = VisibleCluster(world.cluster, scope)
    assert view.history_nodes() == ["node-a", "node-b", "node-c"]
    assert not view.sees_node("node-c")
    assert view.history_nodes() == VisibleCluster(world.cluster, EVERYTHING).history_nodes()


def test_a_caller_who_may_see_no_record_reads_no_log(world: SmallWorld) -> None:
    assert VisibleCluster(world.cluster, Scope(all_nodes=True)).history_nodes() == []
    assert VisibleCluster(world.cluster, Scope()).history_nodes() == []


async def test_a_nodes_gpus_hide_other_tenants_and_count_what_they_hide(world: SmallWorld) -> None:
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=ML_ONLY)
    assert isinstance(ctx.cluster, VisibleCluster)
    assert ctx.raw_cluster is world.cluster
    gpus = await ctx.gpus("node-a")
    # The lost GPU runs nothing of ml's: without list nodes it is not shown.
    assert [g.uuid for g in gpus] == [gpu_uuid("node-a", 0), gpu_uuid("node-a", 1)]
    side = gpus[1]
    assert [p.pid for p in side.processes] == [103]
    assert (side.hidden_process_count, side.hidden_memory_bytes) == (1, 5 * GiB)
    assert all(p.gpu is side for p in side.processes)
    assert all(p.cmdline is None for g in gpus for p in g.processes)
    # Copied once per view: a second read hands out the same objects.
    assert await ctx.gpus("node-a") is gpus
    # The shared objects are untouched.
    shared = world.schema.state.views.gpus("node-a", await ctx.snapshot("node-a"), world.cluster)
    assert [p.pid for p in shared[1].processes] == [103, 999]
    assert shared[1].hidden_process_count == 0


async def test_a_gpu_a_callers_pod_holds_and_leaves_idle_is_its_own(world: SmallWorld) -> None:
    # The idle allocation a tenant is told about: its pod was given the GPU and runs nothing
    # on it. Hidden, the GPU would leave it a device ID it cannot look up.
    world.cluster.add_node(node_record("node-c", ip="10.0.0.3"))
    world.cluster.add_pod(pod_record("research", "notebook", "node-c"))
    world.cluster.add_pod(pod_record("ml", "elsewhere", "node-c"))
    held = gpu_uuid("node-c", 0)
    given = DeviceAllocation(AllocationMechanism.DEVICE_PLUGIN, "nvidia.com/gpu", held, held)
    kubelet = NodeAllocations(
        available=True,
        containers=(ContainerAllocations("research", "notebook", "main", (given,)),),
    )
    gpus = [gpu_sample("node-c", 0), gpu_sample("node-c", 1)]
    world.agents.put(replace(snapshot("node-c", gpus), allocations=kubelet))
    research = Scope(pod_namespaces=frozenset({"research"}))
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=research)
    assert [g.uuid for g in await ctx.gpus("node-c")] == [held]
    found = await ctx.gpu(held)
    assert found is not None and found.processes == []
    # ml sees the node (its pod runs there), but no GPU of it is ml's.
    ml = GraphContext(world.cluster, world.agents, world.schema.state, scope=ML_ONLY)
    assert ml.cluster.sees_node("node-c")
    assert await ml.gpus("node-c") == [] and await ml.gpu(held) is None


async def test_a_gpu_one_tenant_holds_idle_and_another_runs_on_shows_each_only_its_own(
    world: SmallWorld,
) -> None:
    # A time-sliced GPU: research was given it and runs nothing, ml runs on it.
    world.cluster.add_node(node_record("node-c", ip="10.0.0.3"))
    world.cluster.add_pod(pod_record("research", "notebook", "node-c"))
    ml_pod = pod_record("ml", "runner", "node-c", container_ids=["c-ml"])
    world.cluster.add_pod(ml_pod)
    held = gpu_uuid("node-c", 0)
    given = DeviceAllocation(AllocationMechanism.DEVICE_PLUGIN, "nvidia.com/gpu", held, held)
    kubelet = NodeAllocations(
        available=True,
        containers=(ContainerAllocations("research", "notebook", "main", (given,)),),
    )
    running = process(700, 3 * GiB, container_id="c-ml", pod_uid=ml_pod.uid)
    world.agents.put(
        replace(snapshot("node-c", [gpu_sample("node-c", 0, [running])]), allocations=kubelet)
    )
    research = Scope(pod_namespaces=frozenset({"research"}))
    query = (
        '{ gpus(nodeName: "node-c") { processes { pid } hiddenProcessCount hiddenMemoryBytes '
        "allocations { pod { namespace name } } } }"
    )
    seen = {}
    for name, scope in (("research", research), ("ml", ML_ONLY)):
        ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=scope)
        result = await world.schema.execute(query, context_value=ctx)
        assert result.errors is None and result.data is not None
        seen[name] = result.data["gpus"]
    assert seen["research"] == [
        {"processes": [], "hiddenProcessCount": 1, "hiddenMemoryBytes": 3 * GiB,
         "allocations": [{"pod": {"namespace": "research", "name": "notebook"}}]},
    ]  # fmt: skip
    assert seen["ml"] == [
        {"processes": [{"pid": 700}], "hiddenProcessCount": 0, "hiddenMemoryBytes": 0,
         "allocations": []},
    ]  # fmt: skip


async def test_an_unrestricted_caller_gets_the_shared_gpu_objects(world: SmallWorld) -> None:
    ctx = GraphContext(world.cluster, world.agents, world.schema.state)
    gpus = await ctx.gpus("node-a")
    snap = await ctx.snapshot("node-a")
    assert gpus is world.schema.state.views.gpus("node-a", snap, world.cluster)


async def test_a_new_tick_sees_pods_scheduled_since(world: SmallWorld) -> None:
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=SERVING_ONLY)
    assert not ctx.cluster.sees_node("node-a")
    world.cluster.add_pod(pod_record("serving", "infer-2", "node-a"))
    ctx.new_tick()
    assert ctx.cluster.sees_node("node-a")


async def test_a_gpu_looked_up_on_a_node_that_read_no_gpus_reports_why(world: SmallWorld) -> None:
    # The node's agent answers, but NVML failed node-wide: the lookup names the failure
    # instead of answering "no such GPU", as the node's own gpus field does.
    world.cluster.add_node(node_record("node-c"))
    world.agents.put(snapshot("node-c", [], error="NVML_ERROR_DRIVER_NOT_LOADED"))
    world.schema.state.gpu_nodes[gpu_uuid("node-c", 0)] = "node-c"
    ctx = GraphContext(world.cluster, world.agents, world.schema.state)
    result = await world.schema.execute(
        f'{{ gpu(uuid: "{gpu_uuid("node-c", 0)}") {{ uuid }} }}', context_value=ctx
    )
    assert result.errors is not None
    assert "NVML_ERROR_DRIVER_NOT_LOADED" in str(result.errors[0])

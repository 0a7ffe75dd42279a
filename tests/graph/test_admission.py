"""The admission step's size gauge: measured once per caller's scope per TTL, from what
the agents' current snapshots say, and for a tenant from its own processes alone."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from api.http.map_queries import SNAPSHOT_QUERY
from graph_schema.admission import SizeGauge
from graph_schema.compiled.documents import CompiledDocuments
from graph_schema.context import GraphContext
from graph_schema.limits import SchemaLimits
from graph_schema.records import PodRecord
from graph_schema.schema import build_schema
from graph_schema.scope import EVERYTHING, Scope
from graph_schema.state import SharedState
from graph_schema.views import ViewCache
from graph_schema.visibility import VisibleCluster
from node_resolver.models import NodeSnapshot
from tests.support.clock import ManualClock
from tests.support.graph import (
    GiB,
    MemoryCluster,
    SyntheticCluster,
    gpu_sample,
    node_record,
    pod_record,
    process,
    snapshot,
    synthetic_cluster,
)

FULL_CLUSTER = """{ nodes { name gpus { uuid memoryUsedBytes utilizationGpu
  processes { pid usedMemoryBytes pod { name namespace } } } } }"""


class CountingCluster(MemoryCluster):
    """A MemoryCluster that counts full pod listings (what a measurement costs)."""

    def __init__(self) -> None:
        super().__init__()
        self.listings = 0

    def pods(
        self, namespace: str | None = None, node_name: str | None = None
    ) -> Sequence[PodRecord]:
        if namespace is None and node_name is None:
            self.listings += 1
        return super().pods(namespace, node_name)


def test_each_request_view_of_one_scope_shares_one_measurement_per_ttl() -> None:
    cluster = CountingCluster()
    cluster.add_node(node_record("n1"))
    for i in range(3):
        cluster.add_pod(pod_record("ml", f"p{i}", "n1"))
    cluster.add_pod(pod_record("other", "q", "n1"))
    clock = ManualClock()
    gauge = SizeGauge(ViewCache(), ttl=1.0, clock=clock)
    tenant = Scope(pod_namespaces=frozenset({"ml"}))
    # A new view per request, as the server makes them.
    first = gauge.sizes(VisibleCluster(cluster, tenant))
    for _ in range(5):
        assert gauge.sizes(VisibleCluster(cluster, tenant)) == first
    listings = cluster.listings
    everything = gauge.sizes(VisibleCluster(cluster, EVERYTHING))
    # The whole cluster's sizes come from the cache's own counts, not a listing of its pods.
    assert cluster.listings == listings
    assert (everything.pods_per_node, everything.containers_per_pod) == (4, 1)
    # The tenant's sizes count only what it sees; each scope was measured once.
    assert (first.pods, everything.pods) == (3, 4)
    listings = cluster.listings
    gauge.sizes(VisibleCluster(cluster, tenant))
    assert cluster.listings == listings
    clock.advance(1.5)
    gauge.sizes(VisibleCluster(cluster, tenant))
    assert cluster.listings > listings


def _busy(sc: SyntheticCluster, node: str, processes: int) -> NodeSnapshot:
    """``node``'s snapshot (a new object) with ``processes`` processes of its pod on GPU 0,
    and one process of its own pod on each other GPU, as the synthetic cluster has them."""
    gpus = []
    for index, pod in enumerate(sc.cluster.pods(node_name=node)):  # one per GPU, in order
        cid = pod.containers[0].container_id
        count = processes if index == 0 else 1
        listed = [
            process(5000 + 100 * index + i, GiB, container_id=cid, pod_uid=pod.uid)
            for i in range(count)
        ]
        gpus.append(gpu_sample(node, index, listed))
    return snapshot(node, gpus)


def _calm(sc: SyntheticCluster, node: str) -> NodeSnapshot:
    """``node``'s snapshot back at one process per GPU (a new snapshot object)."""
    return _busy(sc, node, 1)


def _code(result: Any) -> str | None:
    errors = result.errors or []
    return errors[0].extensions.get("code") if errors and errors[0].extensions else None


async def test_a_busy_gpu_raises_the_estimate_only_while_its_nodes_snapshot_says_so() -> None:
    # The full-cluster query and the map's at 1,000 nodes x 8 GPUs: admitted at the
    # floor (4 processes per GPU), refused at 10 (estimates 169,000 and 170,001).
    sc = synthetic_cluster(1000, gpus_per_node=8, processes_per_gpu=1)
    clock = ManualClock()
    # The server's state and gauge, as its composition root hands them to the schema.
    state = SharedState.for_limits(SchemaLimits())
    gauge = SizeGauge(state.views, clock=clock)
    schema = sc.schema = build_schema(state=state, gauge=gauge)
    compiled = CompiledDocuments()
    planned = build_schema(state=state, gauge=gauge, compiled=compiled)
    ttl = gauge.ttl

    def context() -> GraphContext:
        return GraphContext(sc.cluster, sc.snapshots, schema.state)

    async def admitted(query: str) -> bool:
        """Whether both paths admit ``query``: the plan runs it, strawberry does not refuse."""
        answered = compiled.counts["compiled"]
        await planned.execute(query, context_value=context())
        by_plan = compiled.counts["compiled"] > answered
        refusal = await schema.execute(query, context_value=context())
        by_strawberry = _code(refusal) != "QUERY_TOO_COSTLY"
        assert by_plan == by_strawberry, (query, refusal.errors)
        return by_strawberry

    # Every node read once, as a dashboard's first query does.
    warm = await planned.execute(FULL_CLUSTER, context_value=context())
    assert warm.errors is None and compiled.counts["compiled"] == 1
    busy = "node-00007"
    one_node = f'{{ gpus(nodeName: "{busy}") {{ processes {{ pid }} }} }}'

    # One node lists 10 processes on one GPU, and a query reads it once.
    sc.snapshots.put(_busy(sc, busy, 10))
    assert (await sc.execute(one_node)).errors is None
    clock.advance(ttl)
    refused = await sc.execute(FULL_CLUSTER)
    assert _code(refused) == "QUERY_TOO_COSTLY"
    assert refused.errors and refused.errors[0].extensions
    assert refused.errors[0].extensions["estimate"] == 169_000
    assert not await admitted(FULL_CLUSTER)
    assert not await admitted(SNAPSHOT_QUERY)

    # The node calms down and its snapshot is replaced: within a TTL, both are back.
    sc.snapshots.put(_calm(sc, busy))
    assert (await sc.execute(one_node)).errors is None
    clock.advance(ttl)
    assert await admitted(FULL_CLUSTER)
    assert await admitted(SNAPSHOT_QUERY)
    assert gauge.sizes(VisibleCluster(sc.cluster, EVERYTHING)).processes_per_gpu == 4


async def test_a_tenants_estimate_does_not_move_with_another_tenants_processes() -> None:
    # 20 nodes, namespace ns-<n % 10>: ns-1 runs on nodes 1 and 11, ns-2 on 2 and 12.
    sc = synthetic_cluster(20, gpus_per_node=8, processes_per_gpu=1)
    limits = SchemaLimits(max_result_items=100)
    clock = ManualClock()
    state = SharedState.for_limits(limits)
    sc.schema = build_schema(limits, state=state, gauge=SizeGauge(state.views, clock=clock))
    tenant = Scope(pod_namespaces=frozenset({"ns-1"}))
    both = Scope(pod_namespaces=frozenset({"ns-1", "ns-2"}))

    async def estimate(scope: Scope) -> int:
        """The estimate a refusal of the full-cluster query tells ``scope``."""
        context = GraphContext(sc.cluster, sc.snapshots, sc.schema.state, scope=scope)
        result = await sc.schema.execute(FULL_CLUSTER, context_value=context)
        assert _code(result) == "QUERY_TOO_COSTLY", result.errors
        assert result.errors and result.errors[0].extensions
        return int(result.errors[0].extensions["estimate"])

    def processes_per_gpu(scope: Scope) -> int:
        return sc.schema.gauge.sizes(VisibleCluster(sc.cluster, scope)).processes_per_gpu

    for node in sc.node_names:
        assert (await sc.execute(f'{{ gpus(nodeName: "{node}") {{ uuid }} }}')).errors is None
    quiet, everyone = await estimate(tenant), await estimate(EVERYTHING)

    async def spike(node: str, processes: int) -> None:
        sc.snapshots.put(_busy(sc, node, processes))
        assert (await sc.execute(f'{{ gpus(nodeName: "{node}") {{ uuid }} }}')).errors is None
        clock.advance(sc.schema.gauge.ttl)

    # Another tenant's node gets busy: the tenant limited to ns-1 is told exactly
    # what it was told before.
    await spike("node-00002", 10)
    assert await estimate(tenant) == quiet
    assert processes_per_gpu(tenant) == 4
    # Those who see the busy processes are told (a caller of two namespaces gets
    # their sum: 1 of ns-1's and 10 of ns-2's).
    assert (processes_per_gpu(EVERYTHING), processes_per_gpu(both)) == (10, 11)
    assert await estimate(EVERYTHING) > everyone
    # Its own processes do count: 6 of them on one GPU, with ns-2's 10 on another
    # node, is 16 for the caller of both namespaces (an upper bound).
    await spike("node-00011", 6)
    assert processes_per_gpu(tenant) == 6
    assert await estimate(tenant) > quiet
    assert processes_per_gpu(both) == 16
    # Another tenant calming down changes nothing for it either.
    sc.snapshots.put(_calm(sc, "node-00002"))
    await spike("node-00002", 1)
    assert (processes_per_gpu(tenant), processes_per_gpu(EVERYTHING)) == (6, 6)


async def test_a_tenants_estimate_does_not_move_with_another_tenants_larger_node() -> None:
    # Its bound on GPUs per node is over the nodes it sees: a refusal's estimate must not
    # tell it how many GPUs another tenant's node has.
    sc = synthetic_cluster(20, gpus_per_node=8, processes_per_gpu=1)
    clock = ManualClock()
    state = SharedState.for_limits(SchemaLimits())
    gauge = SizeGauge(state.views, clock=clock)
    sc.schema = build_schema(state=state, gauge=gauge)
    tenant = Scope(pod_namespaces=frozenset({"ns-1"}))

    def gpus_per_node(scope: Scope) -> int:
        return gauge.sizes(VisibleCluster(sc.cluster, scope)).gpus_per_node

    for node in sc.node_names:
        assert (await sc.execute(f'{{ gpus(nodeName: "{node}") {{ uuid }} }}')).errors is None
    assert (gpus_per_node(tenant), gpus_per_node(EVERYTHING)) == (8, 8)
    # node-00002 (ns-2's) reports 64 GPUs; node-00011 (ns-1's) 12.
    for node, count in (("node-00002", 64), ("node-00011", 12)):
        sc.snapshots.put(snapshot(node, [gpu_sample(node, i, []) for i in range(count)]))
        assert (await sc.execute(f'{{ gpus(nodeName: "{node}") {{ uuid }} }}')).errors is None
    clock.advance(gauge.ttl)
    assert (gpus_per_node(tenant), gpus_per_node(EVERYTHING)) == (12, 64)

"""The admission step's size gauge: measured once per caller's scope per TTL."""

from __future__ import annotations

from collections.abc import Sequence

from graph_schema.admission import SizeGauge
from graph_schema.records import PodRecord
from graph_schema.scope import EVERYTHING, Scope
from graph_schema.views import ViewCache
from graph_schema.visibility import VisibleCluster
from tests.support.clock import ManualClock
from tests.support.graph import MemoryCluster, node_record, pod_record


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
    everything = gauge.sizes(VisibleCluster(cluster, EVERYTHING))
    # The tenant's sizes count only what it sees; each scope was measured once.
    assert (first.pods, everything.pods) == (3, 4)
    listings = cluster.listings
    gauge.sizes(VisibleCluster(cluster, tenant))
    assert cluster.listings == listings
    clock.advance(1.5)
    gauge.sizes(VisibleCluster(cluster, tenant))
    assert cluster.listings > listings

"""Attributed snapshots as Prometheus metric families, named as docs/metrics.md's table lists.

The series themselves (names, help texts, labels) are declared once, in
``node_resolver.metrics.families``, which the agents' own ``/metrics``
renders too; this module fills them from each node's graph objects, whose
processes the server joined to its cached pods.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from graph_schema.allocation_join import AllocationRules, pod_gpu_request
from graph_schema.types import Gpu
from node_resolver.metrics.families import GpuSeries
from node_resolver.models import NodeSnapshot

from .attribution import attribute_node

__all__ = ["NodeResult", "SnapshotCollector"]


@dataclass(frozen=True, slots=True)
class NodeResult:
    """One GPU node at one scrape: its snapshot and age, or None when its agent did not answer."""

    node: str
    snapshot: NodeSnapshot | None
    age_seconds: float = 0.0
    # The snapshot's GPUs as graph objects (``ViewCache``'s, through the seam).
    gpus: Sequence[Gpu] = ()


def _add_node(series: GpuSeries, result: NodeResult, rules: AllocationRules) -> None:
    """The node's series: agent_up always, the rest only from a snapshot."""
    node = result.node
    series.agent_up.add_metric([node], 1.0 if result.snapshot is not None else 0.0)
    if result.snapshot is None:
        return
    series.snapshot_age.add_metric([node], result.age_seconds)
    use = attribute_node(result.gpus)
    # The agent's judged allocations, counted as its own /metrics counts them (same series).
    use.attributed.add_allocations(result.snapshot.allocations)
    series.add_attribution(node, use.attributed)
    for pod, devices in use.pod_devices.values():
        beyond = len(devices) - (pod_gpu_request(pod, rules) or 0)
        # Only while positive: one series per GPU pod would mostly say 0.
        if beyond > 0:
            series.unrequested.add_metric([pod.namespace, pod.name, node], float(beyond))
    driver = result.snapshot.sample.driver_version or ""
    series.add_gpus(node, result.gpus, driver, use.attributed.containers)


class SnapshotCollector(Collector):
    """A prometheus_client collector over one scrape's node results."""

    def __init__(
        self,
        results: list[NodeResult],
        *,
        dcgm_names: bool = False,
        rules: AllocationRules | None = None,
    ) -> None:
        self._results = results
        self._dcgm_names = dcgm_names
        self._rules = rules if rules is not None else AllocationRules()

    def collect(self) -> Iterator[Metric]:
        """Every family, each node's series in node order."""
        series = GpuSeries(self._dcgm_names)
        for result in self._results:
            _add_node(series, result, self._rules)
        yield from series.all()

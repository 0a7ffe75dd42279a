"""Attributed snapshots as Prometheus metric families, named as docs/metrics.md's table lists.

Label names follow kube-state-metrics (``namespace``, ``pod``, ``container``,
``node``), so ``group_left`` joins with ``kube_pod_info`` and
``kube_pod_labels`` work. There is no ``pid`` label: per-process detail would
multiply the series with every restart, and stays in GraphQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from graph_schema.allocations import AllocationRules, pod_gpu_request
from graph_schema.interfaces import Cluster
from node_resolver.models import GpuSample, NodeSnapshot

from .attribution import NodeAttribution, attribute_node

__all__ = ["NodeResult", "SnapshotCollector"]

MIB = 1024 * 1024
CONTAINER_LABELS = (
    "node",
    "gpu",
    "gpu_uuid",
    "mig_device",
    "namespace",
    "pod",
    "container",
    "pod_uid",
)
GPU_LABELS = ("node", "gpu", "gpu_uuid", "model")
# dcgm-exporter's label set, for dashboards built on its names.
DCGM_LABELS = (
    "gpu",
    "UUID",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "container",
    "namespace",
    "pod",
)


@dataclass(frozen=True, slots=True)
class NodeResult:
    """One GPU node at one scrape: its snapshot and age, or None when its agent did not answer."""

    node: str
    snapshot: NodeSnapshot | None
    age_seconds: float = 0.0


def _gauge(name: str, documentation: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


class _Families:
    """Every family of one scrape, filled node by node."""

    def __init__(self, dcgm_names: bool) -> None:
        g = _gauge
        self.agent_up = g(
            "gpugraph_agent_up", "1 if the node's agent answered this scrape, else 0.", ("node",)
        )
        self.snapshot_age = g(
            "gpugraph_agent_snapshot_age_seconds",
            "Age of the node's snapshot when the metrics were rendered.",
            ("node",),
        )
        self.container_memory = g(
            "gpugraph_container_gpu_memory_used_bytes",
            "GPU memory used by the container's processes on the GPU (or MIG device).",
            CONTAINER_LABELS,
        )
        self.container_sm = g(
            "gpugraph_container_gpu_sm_utilization_ratio",
            "SM utilization of the container's processes on the GPU, 0-1.",
            CONTAINER_LABELS,
        )
        self.container_processes = g(
            "gpugraph_container_gpu_processes",
            "Processes of the container on the GPU (or MIG device).",
            CONTAINER_LABELS,
        )
        self.memory_used = g(
            "gpugraph_gpu_memory_used_bytes", "GPU memory in use, all processes.", GPU_LABELS
        )
        self.memory_total = g("gpugraph_gpu_memory_total_bytes", "GPU memory size.", GPU_LABELS)
        self.utilization = g(
            "gpugraph_gpu_utilization_ratio",
            "Fraction of the last sample period the GPU was busy, 0-1.",
            GPU_LABELS,
        )
        self.temperature = g(
            "gpugraph_gpu_temperature_celsius", "GPU core temperature.", GPU_LABELS
        )
        self.power = g("gpugraph_gpu_power_watts", "GPU power draw.", GPU_LABELS)
        self.power_limit = g(
            "gpugraph_gpu_power_limit_watts", "GPU power management limit.", GPU_LABELS
        )
        self.info = g(
            "gpugraph_gpu_info",
            "Always 1: the GPU's model, MIG mode and driver version as labels.",
            (*GPU_LABELS, "mig_enabled", "driver_version"),
        )
        self.unattributed = g(
            "gpugraph_gpu_unattributed_memory_bytes",
            "GPU memory of processes in no cached pod, by reason: host_process (in no "
            "container), unknown_container (a container the cache does not know), "
            "unresolved (the PID could not be read), pod_on_other_node (its cgroup names a pod "
            "bound to another node). None for a GPU whose process list failed.",
            ("node", "gpu", "gpu_uuid", "reason"),
        )
        self.unrequested = g(
            "gpugraph_pod_gpus_unrequested",
            "GPUs (or MIG devices) the pod's processes use beyond its GPU request (every "
            "GPU-like resource and its DRA claims' GPU devices); present only while above 0.",
            ("namespace", "pod", "node"),
        )
        self.unallocated = g(
            "gpugraph_container_gpu_unallocated",
            "1 while the container runs on a GPU the kubelet did not give it (allocation "
            "verdict NOT_ALLOCATED); absent where the verdict is unknown.",
            ("namespace", "pod", "container", "node", "gpu_uuid"),
        )
        self.dcgm: tuple[GaugeMetricFamily, GaugeMetricFamily] | None = None
        if dcgm_names:
            self.dcgm = (
                g("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", DCGM_LABELS),
                g("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", DCGM_LABELS),
            )

    def all(self) -> Iterator[Metric]:
        """Every family, in the order the exposition lists them."""
        yield from (
            self.agent_up,
            self.snapshot_age,
            self.container_memory,
            self.container_sm,
            self.container_processes,
            self.memory_used,
            self.memory_total,
            self.utilization,
            self.temperature,
            self.power,
            self.power_limit,
            self.info,
            self.unattributed,
            self.unrequested,
            self.unallocated,
        )
        if self.dcgm is not None:
            yield from self.dcgm

    def add_node(self, cluster: Cluster, result: NodeResult, rules: AllocationRules) -> None:
        """The node's series: agent_up always, the rest only from a snapshot."""
        node = result.node
        self.agent_up.add_metric([node], 1.0 if result.snapshot is not None else 0.0)
        if result.snapshot is None:
            return
        self.snapshot_age.add_metric([node], result.age_seconds)
        sample = result.snapshot.sample
        attributed = attribute_node(cluster, node, result.snapshot, rules)
        for key, usage in attributed.containers.items():
            labels = [
                node,
                str(key.gpu_index),
                key.gpu_uuid,
                key.mig_device,
                key.namespace,
                key.pod,
                key.container,
                key.pod_uid,
            ]
            self.container_processes.add_metric(labels, float(usage.processes))
            if usage.memory_bytes is not None:
                self.container_memory.add_metric(labels, float(usage.memory_bytes))
            if usage.sm_percent is not None:
                self.container_sm.add_metric(labels, min(usage.sm_percent, 100) / 100)
        for (index, uuid), reasons in attributed.unattributed.items():
            for reason, used in reasons.items():
                self.unattributed.add_metric([node, str(index), uuid, reason], float(used))
        for pod, devices in attributed.pod_devices.values():
            beyond = len(devices) - (pod_gpu_request(pod, rules) or 0)
            # Only while positive: one series per GPU pod would mostly say 0.
            if beyond > 0:
                self.unrequested.add_metric([pod.namespace, pod.name, node], float(beyond))
        for namespace, pod_name, container, gpu_uuid in sorted(attributed.unallocated):
            self.unallocated.add_metric([namespace, pod_name, container, node, gpu_uuid], 1.0)
        for gpu in sample.gpus:
            self._add_gpu(node, gpu, sample.driver_version or "", attributed)

    def _add_gpu(self, node: str, gpu: GpuSample, driver: str, attributed: NodeAttribution) -> None:
        labels = [node, str(gpu.index), gpu.uuid, gpu.name or ""]
        mig = "" if gpu.mig_enabled is None else str(gpu.mig_enabled).lower()
        self.info.add_metric([*labels, mig, driver], 1.0)
        for family, value in (
            (self.memory_used, gpu.memory_used_bytes),
            (self.memory_total, gpu.memory_total_bytes),
            (self.utilization, None if gpu.utilization_gpu is None else gpu.utilization_gpu / 100),
            (self.temperature, gpu.temperature_c),
            (self.power, gpu.power_usage_watts),
            (self.power_limit, gpu.power_limit_watts),
        ):
            # Not reported is no series, never a misleading zero.
            if value is not None:
                family.add_metric(labels, float(value))
        if self.dcgm is not None:
            self._add_dcgm(node, gpu, driver, attributed)

    def _add_dcgm(
        self, node: str, gpu: GpuSample, driver: str, attributed: NodeAttribution
    ) -> None:
        assert self.dcgm is not None
        fb_used, util = self.dcgm
        # dcgm-exporter names the one pod a GPU is allocated to; a shared GPU names none.
        users = {k for k in attributed.containers if k.gpu_uuid == gpu.uuid}
        owner = next(iter(users)) if len(users) == 1 else None
        labels = [
            str(gpu.index),
            gpu.uuid,
            f"nvidia{gpu.index}",
            gpu.name or "",
            node,
            driver,
            owner.container if owner else "",
            owner.namespace if owner else "",
            owner.pod if owner else "",
        ]
        if gpu.memory_used_bytes is not None:
            fb_used.add_metric(labels, float(gpu.memory_used_bytes // MIB))
        if gpu.utilization_gpu is not None:
            util.add_metric(labels, float(gpu.utilization_gpu))


class SnapshotCollector(Collector):
    """A prometheus_client collector over one scrape's node results."""

    def __init__(
        self,
        cluster: Cluster,
        results: list[NodeResult],
        *,
        dcgm_names: bool = False,
        rules: AllocationRules | None = None,
    ) -> None:
        self._cluster = cluster
        self._results = results
        self._dcgm_names = dcgm_names
        self._rules = rules if rules is not None else AllocationRules()

    def collect(self) -> Iterator[Metric]:
        """Every family, each node's series in node order."""
        families = _Families(self._dcgm_names)
        for result in self._results:
            families.add_node(self._cluster, result, self._rules)
        yield from families.all()

"""Every GPU series gpugraph exports, declared once: names, help texts and labels.

The server's cluster-wide ``/metrics`` (``api/gpu_metrics/``) and each
agent's own (``node_series``) fill the same ``GpuSeries``, so a series means
the same, under the same name and labels, whichever of the two Prometheus
scrapes, and dashboards and alerts work on either. docs/metrics.md lists them.

Label names follow kube-state-metrics (``namespace``, ``pod``, ``container``,
``node``), so ``group_left`` joins with ``kube_pod_info`` and
``kube_pod_labels`` work. There is no ``pid`` label: per-process detail would
multiply the series with every restart, and stays in GraphQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .containers import (
    AllocationSeriesKey,
    AllocationTotals,
    ContainerKey,
    ContainerUsage,
    NodeAttribution,
)

__all__ = [
    "ALLOCATION_LABELS",
    "CONTAINER_LABELS",
    "DCGM_LABELS",
    "GPU_LABELS",
    "MIB",
    "UNALLOCATED_LABELS",
    "UNATTRIBUTED_LABELS",
    "UNREQUESTED_LABELS",
    "GpuReadings",
    "GpuSeries",
]

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
UNATTRIBUTED_LABELS = ("node", "gpu", "gpu_uuid", "reason")
UNREQUESTED_LABELS = ("namespace", "pod", "node")
UNALLOCATED_LABELS = ("namespace", "pod", "container", "node", "gpu_uuid")
# mig_device is "" (no label, to Prometheus) on a whole GPU or a replica of one.
ALLOCATION_LABELS = ("namespace", "pod", "container", "node", "gpu_uuid", "mig_device")
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


class GpuReadings(Protocol):
    """A GPU's own readings, as the agent's sample and the server's graph object both hold them."""

    @property
    def index(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def name(self) -> str | None: ...
    @property
    def mig_enabled(self) -> bool | None: ...
    @property
    def memory_used_bytes(self) -> int | None: ...
    @property
    def memory_total_bytes(self) -> int | None: ...
    @property
    def utilization_gpu(self) -> int | None: ...
    @property
    def temperature_c(self) -> int | None: ...
    @property
    def power_usage_watts(self) -> float | None: ...
    @property
    def power_limit_watts(self) -> float | None: ...


def _gauge(name: str, documentation: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


class GpuSeries:
    """Every family of one scrape, filled node by node."""

    def __init__(self, dcgm_names: bool = False) -> None:
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
            UNATTRIBUTED_LABELS,
        )
        self.unrequested = g(
            "gpugraph_pod_gpus_unrequested",
            "GPUs (or MIG devices) the pod's processes use beyond its GPU request (every "
            "GPU-like resource and its DRA claims' GPU devices); present only while above 0.",
            UNREQUESTED_LABELS,
        )
        self.unallocated = g(
            "gpugraph_container_gpu_unallocated",
            "1 while the container runs on a GPU the kubelet did not give it (allocation "
            "verdict NOT_ALLOCATED); absent where the verdict is unknown.",
            UNALLOCATED_LABELS,
        )
        self.allocated = CounterMetricFamily(
            "gpugraph_container_gpu_allocated_seconds",
            "GPU-equivalent seconds the kubelet had given the container the GPU (or MIG "
            "device): a whole GPU counts 1, a MIG device its share of the GPU's memory, a "
            "time-sliced replica 1/replicas, a DRA device shared by capacity its claim's share. "
            "Starts at 0 when the agent does.",
            labels=list(ALLOCATION_LABELS),
        )
        self.idle_allocated = CounterMetricFamily(
            "gpugraph_container_gpu_idle_allocated_seconds",
            "The part of gpugraph_container_gpu_allocated_seconds_total the allocation spent "
            "IDLE or UNUSED (no process of the container above the SM threshold for the "
            "agent's idle window).",
            labels=list(ALLOCATION_LABELS),
        )
        self.allocation_idle = g(
            "gpugraph_container_gpu_allocation_idle_seconds",
            "How long the container's allocation of the GPU (or MIG device) has been IDLE or "
            "UNUSED; 0 while ACTIVE, absent while the agent cannot tell.",
            ALLOCATION_LABELS,
        )
        self.dcgm: tuple[GaugeMetricFamily, GaugeMetricFamily] | None = None
        if dcgm_names:
            self.dcgm = (
                g("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", DCGM_LABELS),
                g("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", DCGM_LABELS),
            )

    def all(self) -> Iterator[Metric]:
        """Every family, in the order the server's exposition lists them."""
        yield self.agent_up
        yield self.snapshot_age
        yield from self.node_families()
        yield self.unrequested
        yield self.unallocated
        yield from self.allocation_families()
        if self.dcgm is not None:
            yield from self.dcgm

    def node_families(self) -> Iterator[Metric]:
        """The families one node's snapshot fills by itself, without the cluster's pods.

        An agent serves these (with the snapshot's age, and ``unallocated`` where
        the kubelet's answer decides): whether it answered is Prometheus's own
        ``up``, and a pod's GPU request is the server's to know.
        """
        yield from (
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
        )

    def allocation_families(self) -> Iterator[Metric]:
        """The allocation series: counters of allocated and idle GPU-seconds, and idle time."""
        yield from (self.allocated, self.idle_allocated, self.allocation_idle)

    def add_allocations(
        self, node: str, allocations: Mapping[AllocationSeriesKey, AllocationTotals]
    ) -> None:
        """``node``'s allocation series: one per container and GPU (or MIG device)."""
        for key, totals in allocations.items():
            labels = [key.namespace, key.pod, key.container, node, key.gpu_uuid, key.mig_device]
            self.allocated.add_metric(labels, totals.allocated_gpu_seconds)
            self.idle_allocated.add_metric(labels, totals.idle_allocated_gpu_seconds)
            if totals.idle_seconds is not None:
                self.allocation_idle.add_metric(labels, totals.idle_seconds)

    def add_containers(self, node: str, containers: Mapping[ContainerKey, ContainerUsage]) -> None:
        """The container series of ``node``: one per container and GPU (or MIG device)."""
        for key, usage in containers.items():
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

    def add_unattributed(
        self, node: str, unattributed: Mapping[tuple[int, str], Mapping[str, int]]
    ) -> None:
        """Memory in no pod on ``node``: (GPU index, UUID) -> reason -> bytes."""
        for (index, uuid), reasons in unattributed.items():
            for reason, used in reasons.items():
                self.unattributed.add_metric([node, str(index), uuid, reason], float(used))

    def add_attribution(self, node: str, attributed: NodeAttribution) -> None:
        """``node``'s container series, memory in no pod, and containers on GPUs not given them."""
        self.add_containers(node, attributed.containers)
        self.add_unattributed(node, attributed.unattributed)
        for namespace, pod, container, gpu_uuid in sorted(attributed.unallocated):
            self.unallocated.add_metric([namespace, pod, container, node, gpu_uuid], 1.0)
        self.add_allocations(node, attributed.allocations)

    def add_gpus(
        self,
        node: str,
        gpus: Iterable[GpuReadings],
        driver: str,
        containers: Mapping[ContainerKey, ContainerUsage],
    ) -> None:
        """Each GPU's own series (and dcgm-exporter's, when asked for)."""
        for gpu in gpus:
            self._add_gpu(node, gpu, driver, containers)

    def _add_gpu(
        self,
        node: str,
        gpu: GpuReadings,
        driver: str,
        containers: Mapping[ContainerKey, ContainerUsage],
    ) -> None:
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
            self._add_dcgm(node, gpu, driver, containers)

    def _add_dcgm(
        self,
        node: str,
        gpu: GpuReadings,
        driver: str,
        containers: Mapping[ContainerKey, ContainerUsage],
    ) -> None:
        assert self.dcgm is not None
        fb_used, util = self.dcgm
        # dcgm-exporter names the one pod a GPU is allocated to; a shared GPU names none.
        users = {k for k in containers if k.gpu_uuid == gpu.uuid}
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

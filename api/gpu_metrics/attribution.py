"""Who holds a node's GPUs: per container, per pod, and memory that belongs to no pod.

A reshaping of the node's graph objects (``graph_schema.views``: each process
already joined to its pod and judged, exactly as GraphQL shows it) into the
per-container aggregation the agents' own series use too
(``node_resolver.metrics.containers``), plus what only the server knows: the
GPUs each pod's processes use, against its request. Nothing here knows
Prometheus; ``families`` turns the result into series.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from graph_schema.records import PodRecord
from graph_schema.types import Gpu
from node_resolver.metrics.containers import (
    UNATTRIBUTED_REASONS,
    ContainerKey,
    ContainerUsage,
    NodeAttribution,
    unattributed_reason,
)

__all__ = [
    "UNATTRIBUTED_REASONS",
    "ContainerKey",
    "ContainerUsage",
    "NodeUse",
    "attribute_node",
]


@dataclass(slots=True)
class NodeUse:
    """One node's GPUs, attributed: the agents' aggregation, and each pod's devices."""

    attributed: NodeAttribution = field(default_factory=NodeAttribution)
    # pod uid -> (pod, the GPUs or MIG devices its processes use)
    pod_devices: dict[str, tuple[PodRecord, set[str]]] = field(default_factory=dict)


def _container_name(pod: PodRecord, container_id: str | None) -> str:
    container = pod.container_with_id(container_id) if container_id else None
    return "" if container is None else container.name


def attribute_node(gpus: Iterable[Gpu]) -> NodeUse:
    """Every process of a node's GPUs (``ViewCache``'s objects) by container, or counted
    as no pod's; each container judged by its first process's verdict (its container's)."""
    use = NodeUse()
    attributed, pod_devices = use.attributed, use.pod_devices
    for gpu in gpus:
        # Memory in no pod is only known where every process was listed: a list
        # that failed would make it read 0 (and silence the leftover-process alert).
        lost = attributed.gpu(gpu.index, gpu.uuid, complete=gpu.process_list_complete)
        for process in gpu.processes:
            pod = process.pod
            if pod is None:
                reason = unattributed_reason(
                    in_container=process.container_id is not None or process.pod_uid is not None,
                    named=process.name is not None,
                    elsewhere=process.pod_elsewhere,
                )
                lost[reason] += process.used_memory_bytes or 0
                continue
            record = pod.record
            mig = process.mig_device_uuid or ""
            key = ContainerKey(
                gpu.index,
                gpu.uuid,
                mig,
                record.namespace,
                record.name,
                _container_name(record, process.container_id),
                record.uid,
            )
            if attributed.add(key, process):
                attributed.judge(key, process.allocation())
            entry = pod_devices.get(record.uid)
            if entry is None:
                entry = pod_devices[record.uid] = (record, set())
            entry[1].add(mig or gpu.uuid)
    return use

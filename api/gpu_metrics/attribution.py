"""Who holds a node's GPUs: per container, per pod, and memory that belongs to no pod.

The join is GraphQL's (``graph_schema.joins.join_pod``), so Prometheus and
GraphQL attribute every process to the same pod. Nothing here knows
Prometheus; ``families`` turns the result into series. The records it fills
(``ContainerKey``, ``ContainerUsage``) are the agent's too, declared in
``node_resolver.metrics.containers``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graph_schema.allocations import (
    AllocationRules,
    AllocationTable,
    AllocationVerdict,
    allocation_table,
    judge_process,
)
from graph_schema.interfaces import Cluster
from graph_schema.joins import join_process
from graph_schema.records import PodRecord
from node_resolver.metrics.containers import (
    UNATTRIBUTED_REASONS,
    ContainerKey,
    ContainerUsage,
    unattributed_reason,
)
from node_resolver.models import GpuSample, NodeSnapshot

__all__ = [
    "UNATTRIBUTED_REASONS",
    "ContainerKey",
    "ContainerUsage",
    "NodeAttribution",
    "attribute_node",
    "unattributed_reason",
]


@dataclass(slots=True)
class NodeAttribution:
    """One node's snapshot, attributed."""

    containers: dict[ContainerKey, ContainerUsage] = field(default_factory=dict)
    # (gpu index, gpu uuid) -> reason -> bytes, every reason present for every GPU
    # whose process list is complete; a GPU whose list is not has no entry.
    unattributed: dict[tuple[int, str], dict[str, int]] = field(default_factory=dict)
    # pod uid -> (pod, the GPUs or MIG devices its processes use)
    pod_devices: dict[str, tuple[PodRecord, set[str]]] = field(default_factory=dict)
    # (namespace, pod, container, gpu uuid) of containers running on a GPU they were not given
    # (the allocation verdict NOT_ALLOCATED; UNKNOWN is never counted).
    unallocated: set[tuple[str, str, str, str]] = field(default_factory=set)


def _container_name(pod: PodRecord, container_id: str | None) -> str:
    container = pod.container_with_id(container_id) if container_id else None
    return "" if container is None else container.name


def _attribute_gpu(
    cluster: Cluster,
    node_name: str,
    gpu: GpuSample,
    result: NodeAttribution,
    table: AllocationTable,
) -> None:
    lost = dict.fromkeys(UNATTRIBUTED_REASONS, 0)
    # Memory in no pod is only known where every process was listed: a list
    # that failed would make it read 0 (and silence the leftover-process alert).
    if gpu.process_list_complete():
        result.unattributed[(gpu.index, gpu.uuid)] = lost
    for process in gpu.processes:
        ref = process.container
        container_id = (ref.container_id or None) if ref else None
        pod_uid = (ref.pod_uid or None) if ref else None
        joined = join_process(cluster, node_name, pod_uid, container_id) if ref else None
        pod = joined.pod if joined is not None else None
        if pod is None:
            elsewhere = joined is not None and joined.elsewhere is not None
            reason = unattributed_reason(
                in_container=ref is not None, named=process.name is not None, elsewhere=elsewhere
            )
            lost[reason] += process.used_memory_bytes or 0
            continue
        mig = process.mig_device_uuid or ""
        key = ContainerKey(
            gpu.index,
            gpu.uuid,
            mig,
            pod.namespace,
            pod.name,
            _container_name(pod, container_id),
            pod.uid,
        )
        usage = result.containers.get(key)
        if usage is None:
            usage = result.containers[key] = ContainerUsage()
        usage.add(process)
        entry = result.pod_devices.get(pod.uid)
        if entry is None:
            entry = result.pod_devices[pod.uid] = (pod, set())
        entry[1].add(mig or gpu.uuid)
        if judge_process(table, pod, process, gpu.uuid) is AllocationVerdict.NOT_ALLOCATED:
            result.unallocated.add((pod.namespace, pod.name, key.container, gpu.uuid))


def attribute_node(
    cluster: Cluster, node_name: str, snapshot: NodeSnapshot, rules: AllocationRules | None = None
) -> NodeAttribution:
    """Every process of ``snapshot``, fetched from ``node_name``'s agent, joined to its pod
    (bound to that node) and container, or counted as no pod's.

    Each process is judged against the node's allocations by the join GraphQL uses.
    """
    result = NodeAttribution()
    table = allocation_table(
        snapshot.node_name, snapshot, cluster, rules if rules is not None else AllocationRules()
    )
    for gpu in snapshot.sample.gpus:
        _attribute_gpu(cluster, node_name, gpu, result, table)
    return result

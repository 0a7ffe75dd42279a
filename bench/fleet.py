"""A deterministic simulated GPU fleet shared by the benchmark and its agent host.

Both processes rebuild the same fleet from (nodes, pods), so nothing but two
numbers crosses the process boundary. Every node has 8 GPUs x 4 processes and
every process belongs to a pod on its node.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from api.demo.cluster import make_node, make_pod
from api.demo.cluster.manifests import container_id_for, pod_uid_for
from node_resolver.models import ContainerRef, GpuProcess, GpuSample, NodeSample

GPUS_PER_NODE = 8
PROCESSES_PER_GPU = 4
GiB = 1024**3


def node_name(i: int) -> str:
    """The i-th node's name."""
    return f"gpu-node-{i:05d}"


def node_ip(i: int) -> str:
    """The i-th node's InternalIP: its own loopback address, so each agent binds its own."""
    return f"127.{10 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}"


@dataclass
class Fleet:
    """Nodes, pods as API JSON, and each node's GPU sample."""

    nodes: int
    pods: int
    node_objects: list[dict[str, Any]] = field(default_factory=list)
    pod_objects: list[dict[str, Any]] = field(default_factory=list)
    # node name -> [(pod uid, container id)] of the pods placed on it
    placement: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def sample(self, i: int) -> NodeSample:
        """Node i's GPUs, each process in one of the node's pods."""
        name = node_name(i)
        owners = self.placement[name]
        gpus = []
        for g in range(GPUS_PER_NODE):
            processes = []
            for k in range(PROCESSES_PER_GPU):
                slot = g * PROCESSES_PER_GPU + k
                pod_uid, container_id = owners[slot % len(owners)]
                processes.append(
                    GpuProcess(
                        pid=10_000 + slot,
                        used_memory_bytes=(k + 1) * GiB,
                        sm_utilization=10 * k,
                        name="python3",
                        container=ContainerRef(container_id, "containerd", pod_uid),
                    )
                )
            gpus.append(
                GpuSample(
                    index=g,
                    uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'{name}/{g}')}",
                    name="NVIDIA H200",
                    memory_total_bytes=150_754_820_096,
                    memory_used_bytes=10 * GiB,
                    utilization_gpu=50 + g,
                    utilization_memory=30,
                    temperature_c=55,
                    power_usage_watts=350.5,
                    power_limit_watts=700.0,
                    mig_enabled=False,
                    processes=processes,
                )
            )
        return NodeSample(driver_version="550.90.07", cuda_driver_version=12040, gpus=gpus)


def _pod(p: int, nodes: int) -> tuple[str, str, str]:
    return node_name(p % nodes), f"team-{p % 20}", f"worker-{p:06d}"


def build_fleet(nodes: int, pods: int, *, with_objects: bool = True) -> Fleet:
    """Nodes with ``pods`` pods spread evenly over them (at least one per node).

    The agent host only needs the placement; the API objects are built when
    ``with_objects`` is set.
    """
    fleet = Fleet(nodes, pods)
    for i in range(nodes):
        fleet.placement[node_name(i)] = []
        if with_objects:
            fleet.node_objects.append(make_node(node_name(i), node_ip(i), gpus=GPUS_PER_NODE))
    for p in range(max(pods, nodes)):
        node, namespace, name = _pod(p, nodes)
        uid = pod_uid_for(namespace, name)
        container_id = container_id_for(uid, "main").split("://", 1)[1]
        fleet.placement[node].append((uid, container_id))
        if with_objects:
            fleet.pod_objects.append(
                make_pod(name, namespace, node, uid=uid, gpu_limit=1, managed_fields=False)
            )
    return fleet

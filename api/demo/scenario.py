"""The demo cluster: which nodes, pods and GPU processes exist, as plain data.

Everything is derived from the node and GPU counts alone, so the same flags
always give the same names, UIDs, container IDs, GPU UUIDs and PIDs, and the
README's answers stay true. The cluster shows, on purpose:

- a training job with one worker pod per node, each on several GPUs;
- two inference pods time-sharing one GPU;
- a notebook pod using a GPU it never requested;
- a host process holding GPU memory with no pod (an orphan);
- a node whose agent is down (the last one).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from .cluster.fake_proc import kubelet_cgroup
from .cluster.manifests import make_node, make_pod

__all__ = [
    "GIB",
    "MIN_GPUS",
    "MIN_NODES",
    "DemoCluster",
    "DemoGpu",
    "DemoNode",
    "DemoProcess",
    "build_cluster",
    "gpu_uuid",
]

GIB = 1 << 30
MIN_NODES = 3
MIN_GPUS = 2
TRAINING_NAMESPACE = "ml-training"
INFERENCE_NAMESPACE = "inference"
RESEARCH_NAMESPACE = "research"
TRAINING_IMAGE = "nvcr.io/nvidia/pytorch:24.08-py3"
INFERENCE_IMAGE = "nvcr.io/nvidia/tritonserver:24.08-py3"
NOTEBOOK_IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07"
# A login session's process: in a cgroup, but in no container.
SESSION_CGROUP = "0::/user.slice/user-1000.slice/session-7.scope\n"


def gpu_uuid(node: str, index: int) -> str:
    """The stable UUID of GPU ``index`` on ``node``."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpu/{node}/{index}')}"


@dataclass(frozen=True, slots=True)
class DemoProcess:
    """One host process on one GPU, and where it lives."""

    pid: int
    comm: str
    cmdline: tuple[str, ...]
    gpu_index: int
    memory_bytes: int
    sm_utilization: int
    # Both None for a host process outside any container.
    pod_uid: str | None
    container_id: str | None

    @property
    def cgroup(self) -> str:
        """The ``/proc/<pid>/cgroup`` content the kubelet would have given this process."""
        if self.pod_uid is None or self.container_id is None:
            return SESSION_CGROUP
        # Kubelet with the systemd cgroup driver on cgroup v2, as most clusters run.
        return kubelet_cgroup(self.pod_uid, self.container_id, driver="systemd")

    @property
    def start_time(self) -> int:
        """Clock ticks after boot at which the process started (stable per PID)."""
        return 4_000_000 + self.pid * 37


@dataclass(frozen=True, slots=True)
class DemoGpu:
    """One GPU of a node."""

    index: int
    uuid: str


@dataclass(frozen=True, slots=True)
class DemoNode:
    """A GPU node: its address (where its agent listens) and its GPU processes."""

    name: str
    ip: str
    gpus: tuple[DemoGpu, ...]
    processes: tuple[DemoProcess, ...]
    agent_up: bool


@dataclass(frozen=True, slots=True)
class DemoCluster:
    """The whole simulated cluster plus the names of its notable parts."""

    nodes: tuple[DemoNode, ...]
    pods: tuple[dict[str, Any], ...]
    node_objects: tuple[dict[str, Any], ...]
    # namespace/name of a training worker, for the example queries.
    worker: tuple[str, str]
    # (node, GPU UUID) of the GPU the two inference pods share.
    shared_gpu: tuple[str, str]
    # (node, PID) of the host process that belongs to no pod.
    orphan: tuple[str, int]
    # namespace/name of the pod using a GPU it never requested.
    unrequested: tuple[str, str]
    down_node: str


class _Builder:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []

    def pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        container: str,
        image: str,
        gpu_limit: int | None,
        labels: dict[str, str],
    ) -> tuple[str, str]:
        """Add a running pod with one container; returns (pod UID, container ID)."""
        obj = make_pod(
            name,
            namespace,
            node,
            containers=(container,),
            images=(image,),
            gpu_limit=gpu_limit,
            labels=labels,
            managed_fields=False,
        )
        self.pods.append(obj)
        uid: str = obj["metadata"]["uid"]
        # "containerd://<64 hex>" as the kubelet reports it; cgroups carry only the hex.
        container_id: str = obj["status"]["containerStatuses"][0]["containerID"]
        return uid, container_id.split("://", 1)[1]


def _node_ip(index: int) -> str:
    # 127.0.0.1 stays free for the server; every node gets its own loopback address.
    n = index + 2
    return f"127.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


def build_cluster(nodes: int = 4, gpus_per_node: int = 8) -> DemoCluster:
    """The demo cluster for ``nodes`` nodes of ``gpus_per_node`` GPUs each."""
    if nodes < MIN_NODES:
        raise ValueError(f"the demo needs at least {MIN_NODES} nodes, got {nodes}")
    if gpus_per_node < MIN_GPUS:
        raise ValueError(f"the demo needs at least {MIN_GPUS} GPUs per node, got {gpus_per_node}")
    g = gpus_per_node
    b = _Builder()
    names = [f"gpu-node-{i}" for i in range(nodes)]
    processes: dict[str, list[DemoProcess]] = {name: [] for name in names}
    job = {"app": "llm-pretrain", "job-name": "llm-pretrain", "role": "worker"}

    def training_worker(rank: int, node: str, gpu_indices: list[int]) -> tuple[str, str]:
        name = f"llm-pretrain-worker-{rank}"
        uid, cid = b.pod(
            TRAINING_NAMESPACE,
            name,
            node,
            container="trainer",
            image=TRAINING_IMAGE,
            gpu_limit=len(gpu_indices),
            labels={**job, "worker-rank": str(rank)},
        )
        for local_rank, gpu in enumerate(gpu_indices):
            processes[node].append(
                DemoProcess(
                    pid=2100 + 16 * rank + local_rank,
                    comm="python",
                    cmdline=("/usr/bin/python", "-u", "pretrain.py", f"--local-rank={local_rank}"),
                    gpu_index=gpu,
                    memory_bytes=(98 + (3 * local_rank) % 17) * GIB,
                    sm_utilization=88 + (local_rank % 3) * 3,
                    pod_uid=uid,
                    container_id=cid,
                )
            )
        return TRAINING_NAMESPACE, name

    # Node 0: two inference replicas time-share GPU 0, a leaked host process sits
    # on GPU 1, and the first training worker has the rest (if any).
    node0 = names[0]
    shared = gpu_uuid(node0, 0)
    for replica, (memory, sm) in enumerate([(30 * GIB, 35), (24 * GIB, 25)]):
        uid, cid = b.pod(
            INFERENCE_NAMESPACE,
            f"chat-api-{replica}",
            node0,
            container="triton",
            image=INFERENCE_IMAGE,
            gpu_limit=1,
            labels={"app": "chat-api", "tier": "inference"},
        )
        processes[node0].append(
            DemoProcess(
                pid=3300 + replica,
                comm="tritonserver",
                cmdline=("tritonserver", "--model-repository=/models", "--http-port=8000"),
                gpu_index=0,
                memory_bytes=memory,
                sm_utilization=sm,
                pod_uid=uid,
                container_id=cid,
            )
        )
    orphan_pid = 48213
    processes[node0].append(
        DemoProcess(
            pid=orphan_pid,
            comm="python3",
            cmdline=("python3", "/home/alice/bench_matmul.py", "--size", "65536"),
            gpu_index=1,
            memory_bytes=22 * GIB,
            sm_utilization=0,
            pod_uid=None,
            container_id=None,
        )
    )
    worker = training_worker(0, node0, list(range(2, g))) if g > 2 else None

    # Node 1: a training worker on all GPUs but the last, which a notebook pod
    # uses although it requested no GPU (NVIDIA_VISIBLE_DEVICES=all in its image).
    node1 = names[1]
    worker1 = training_worker(1, node1, list(range(g - 1)))
    uid, cid = b.pod(
        RESEARCH_NAMESPACE,
        "notebook-alice",
        node1,
        container="notebook",
        image=NOTEBOOK_IMAGE,
        gpu_limit=None,
        labels={"app": "notebook", "owner": "alice"},
    )
    processes[node1].append(
        DemoProcess(
            pid=5120,
            comm="python3",
            cmdline=("python3", "-m", "ipykernel_launcher", "-f", "/tmp/kernel-3f2a.json"),
            gpu_index=g - 1,
            memory_bytes=18 * GIB,
            sm_utilization=30,
            pod_uid=uid,
            container_id=cid,
        )
    )

    # The other nodes: one training worker each, on every GPU.
    for rank in range(2, nodes):
        training_worker(rank, names[rank], list(range(g)))

    down = names[-1]
    demo_nodes = tuple(
        DemoNode(
            name=name,
            ip=_node_ip(i),
            gpus=tuple(DemoGpu(index, gpu_uuid(name, index)) for index in range(g)),
            processes=tuple(processes[name]),
            agent_up=name != down,
        )
        for i, name in enumerate(names)
    )
    node_objects = tuple(make_node(n.name, n.ip, gpus=g) for n in demo_nodes)
    return DemoCluster(
        nodes=demo_nodes,
        pods=tuple(b.pods),
        node_objects=node_objects,
        worker=worker or worker1,
        shared_gpu=(node0, shared),
        orphan=(node0, orphan_pid),
        unrequested=(RESEARCH_NAMESPACE, "notebook-alice"),
        down_node=down,
    )

"""The demo cluster: which nodes, pods and GPU processes exist, as plain data.

Everything is derived from the node and GPU counts alone, so the same flags
always give the same names, UIDs, container IDs, GPU UUIDs and PIDs, and the
README's answers stay true. The cluster shows, on purpose:

- a training job with one worker pod per node, each on several GPUs;
- two inference pods time-sharing one GPU;
- a notebook pod using a GPU it never requested;
- a host process holding GPU memory with no pod (an orphan);
- a node whose agent is down (the last one);
- and, beside those, how GPUs are handed out besides ``nvidia.com/gpu``: a MIG
  ``mixed`` node, a node of time-sliced ``nvidia.com/gpu.shared`` replicas and
  a DRA node whose pods use template claims. Every node's fake kubelet reports
  what it gave each container, and one inference replica runs on a GPU it was
  not given (a CUDA_VISIBLE_DEVICES override);
- GPUs given and left idle: a notebook pod holding the MIG node's whole GPU
  with no process on it (``UNUSED``), and an embedding replica whose process
  holds memory at 0% SM (``IDLE``); their idle stretches began before the demo
  did (``api.demo.idle_scenario`` writes them into the agents' logs).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from .cluster.dra_manifests import (
    ClaimDevice,
    SliceDevice,
    make_resource_claim,
    make_resource_slice,
)
from .cluster.fake_proc import kubelet_cgroup
from .cluster.manifests import make_node, make_pod

__all__ = [
    "GIB",
    "MAX_GPUS",
    "MAX_NODES",
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
# A demo on one machine: each node is a real agent with its fixture /proc tree, written
# before the demo answers signals, so a size typed wrong would hold the terminal.
MAX_NODES = 64
MAX_GPUS = 16
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
    # Set for a process on a MIG device of the GPU.
    mig_device_uuid: str | None = None

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
    # MIG devices' UUIDs (MIG mode on when any).
    mig_devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DemoNode:
    """A GPU node: its address (where its agent listens) and its GPU processes."""

    name: str
    ip: str
    gpus: tuple[DemoGpu, ...]
    processes: tuple[DemoProcess, ...]
    agent_up: bool
    # What the node's kubelet reports on its PodResources API (api.demo.cluster.kubelet's shape).
    kubelet: dict[str, Any] | None = None


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
    # namespace/name of the pod whose process runs on a GPU the kubelet did not give it.
    misallocated: tuple[str, str] = ("", "")
    # namespace/name of the pod holding a GPU with no process on it (UNUSED), and of the
    # pod whose process holds memory at 0% SM (IDLE); empty without the allocation nodes.
    unused: tuple[str, str] = ("", "")
    idle: tuple[str, str] = ("", "")
    # The DRA node's ResourceClaims and ResourceSlices, as the API server serves them.
    claims: tuple[dict[str, Any], ...] = ()
    slices: tuple[dict[str, Any], ...] = ()


class _Builder:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        # pod UID -> (namespace, name, container, resource) of pods given devices.
        self.given: dict[str, tuple[str, str, str, str]] = {}

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
        gpu_resource: str = "nvidia.com/gpu",
        claims: dict[str, str] | None = None,
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
            gpu_resource=gpu_resource,
            claims=claims,
        )
        self.pods.append(obj)
        if gpu_limit:
            self.given[obj["metadata"]["uid"]] = (namespace, name, container, gpu_resource)
        uid: str = obj["metadata"]["uid"]
        # "containerd://<64 hex>" as the kubelet reports it; cgroups carry only the hex.
        container_id: str = obj["status"]["containerStatuses"][0]["containerID"]
        return uid, container_id.split("://", 1)[1]


def _node_ip(index: int) -> str:
    # 127.0.0.1 stays free for the server; every node gets its own loopback address.
    n = index + 2
    return f"127.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


def build_cluster(
    nodes: int = 4, gpus_per_node: int = 8, *, allocation_nodes: bool = True
) -> DemoCluster:
    """The demo cluster for ``nodes`` nodes of ``gpus_per_node`` GPUs each.

    ``allocation_nodes`` adds the MIG mixed, time-sliced and DRA nodes (two GPUs each).
    """
    if not MIN_NODES <= nodes <= MAX_NODES:
        raise ValueError(f"the demo has {MIN_NODES} to {MAX_NODES} nodes, got {nodes}")
    if not MIN_GPUS <= gpus_per_node <= MAX_GPUS:
        raise ValueError(
            f"the demo has {MIN_GPUS} to {MAX_GPUS} GPUs per node, got {gpus_per_node}"
        )
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

    # What each kubelet gave: the GPUs each pod's processes use, except that the second
    # inference replica was given GPU 1 and runs on GPU 0 (CUDA_VISIBLE_DEVICES=0).
    misallocated = (INFERENCE_NAMESPACE, "chat-api-1")
    given_to_stray = {gpu_uuid(node0, 1)}
    down = names[-1]
    demo_nodes = tuple(
        DemoNode(
            name=name,
            ip=_node_ip(i),
            gpus=tuple(DemoGpu(index, gpu_uuid(name, index)) for index in range(g)),
            processes=tuple(processes[name]),
            agent_up=name != down,
            kubelet=_kubelet(
                b,
                name,
                processes[name],
                overrides={misallocated: given_to_stray} if name == node0 else {},
            ),
        )
        for i, name in enumerate(names)
    )
    claims: tuple[dict[str, Any], ...] = ()
    slices: tuple[dict[str, Any], ...] = ()
    if allocation_nodes:
        extra, claims, slices = _allocation_nodes(b, len(names))
        demo_nodes += extra
    node_objects = tuple(make_node(n.name, n.ip, gpus=len(n.gpus)) for n in demo_nodes)
    return DemoCluster(
        nodes=demo_nodes,
        pods=tuple(b.pods),
        node_objects=node_objects,
        worker=worker or worker1,
        shared_gpu=(node0, shared),
        orphan=(node0, orphan_pid),
        unrequested=(RESEARCH_NAMESPACE, "notebook-alice"),
        down_node=down,
        misallocated=misallocated,
        unused=UNUSED_POD if allocation_nodes else ("", ""),
        idle=IDLE_POD if allocation_nodes else ("", ""),
        claims=claims,
        slices=slices,
    )


def _kubelet(
    b: _Builder,
    node: str,
    processes: list[DemoProcess],
    *,
    overrides: dict[tuple[str, str], set[str]],
    dra: dict[str, list[dict[str, str]]] | None = None,
) -> dict[str, Any]:
    """The node's PodResources answer: each device-plugin pod given the devices it uses."""
    uuids = {p.gpu_index: gpu_uuid(node, p.gpu_index) for p in processes}
    devices: dict[str, set[str]] = {}
    replicas: dict[str, int] = {}
    for p in processes:
        if p.pod_uid in b.given:
            namespace, name, _, resource = b.given[p.pod_uid]
            device = p.mig_device_uuid or uuids[p.gpu_index]
            if resource.endswith(".shared"):
                # Time-sliced replicas: the GPU's UUID and a replica number.
                replicas[device] = replicas.get(device, -1) + 1
                device = f"{device}::{replicas[device]}"
            devices.setdefault(p.pod_uid, set()).add(device)
    pods = []
    for uid, (namespace, name, container, resource) in b.given.items():
        if uid not in devices and (namespace, name) not in overrides:
            continue
        given = overrides.get((namespace, name), devices.get(uid, set()))
        pods.append(
            {
                "namespace": namespace,
                "name": name,
                "containers": [
                    {
                        "name": container,
                        "devices": [{"resourceName": resource, "deviceIds": sorted(given)}],
                    }
                ],
            }
        )
    for uid, claims in (dra or {}).items():
        namespace, name, container = _pod_of(b, uid)
        pods.append(
            {
                "namespace": namespace,
                "name": name,
                "containers": [{"name": container, "claims": claims}],
            }
        )
    return {"pods": pods}


def _pod_of(b: _Builder, uid: str) -> tuple[str, str, str]:
    obj = next(p for p in b.pods if p["metadata"]["uid"] == uid)
    meta = obj["metadata"]
    return meta["namespace"], meta["name"], obj["spec"]["containers"][0]["name"]


MIG_NODE = "gpu-mig-0"
# The allocation nodes' pods that hold a GPU and leave it idle.
UNUSED_POD = (RESEARCH_NAMESPACE, "notebook-bob")
IDLE_POD = (INFERENCE_NAMESPACE, "embed-3")
SHARED_NODE = "gpu-ts-0"
DRA_NODE = "gpu-dra-0"
# The nodes build_cluster adds on top of ``nodes`` (with allocation_nodes).
ALLOCATION_NODES = (MIG_NODE, SHARED_NODE, DRA_NODE)
DRA_DRIVER = "gpu.nvidia.com"


def mig_uuid(node: str, gpu: int, slot: int) -> str:
    """The stable UUID of MIG device ``slot`` of GPU ``gpu`` on ``node``."""
    return f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, f'mig/{node}/{gpu}/{slot}')}"


def _allocation_nodes(
    b: _Builder, first_index: int
) -> tuple[tuple[DemoNode, ...], tuple[dict[str, Any], ...], tuple[dict[str, Any], ...]]:
    """The MIG mixed node, the time-sliced node and the DRA node (two GPUs each)."""

    def process(pid: int, gpu: int, uid: str, cid: str, mig: str | None = None) -> DemoProcess:
        return DemoProcess(
            pid=pid,
            comm="python3",
            cmdline=("python3", "serve.py"),
            gpu_index=gpu,
            memory_bytes=(8 + pid % 5) * GIB,
            sm_utilization=20 + pid % 30,
            pod_uid=uid,
            container_id=cid,
            mig_device_uuid=mig,
        )

    nodes = []
    # MIG mixed: GPU 0 split in two 1g.18gb devices, each a notebook's.
    migs = (mig_uuid(MIG_NODE, 0, 0), mig_uuid(MIG_NODE, 0, 1))
    procs = []
    # GPU 1 is whole: a notebook pod was given it and runs nothing on it.
    b.pod(
        *UNUSED_POD,
        MIG_NODE,
        container="notebook",
        image=NOTEBOOK_IMAGE,
        gpu_limit=1,
        labels={"app": "notebook", "owner": "bob"},
    )
    for i, mig in enumerate(migs):
        uid, cid = b.pod(
            RESEARCH_NAMESPACE,
            f"mig-notebook-{i}",
            MIG_NODE,
            container="notebook",
            image=NOTEBOOK_IMAGE,
            gpu_limit=1,
            labels={"app": "mig-notebook"},
            gpu_resource="nvidia.com/mig-1g.18gb",
        )
        procs.append(process(7100 + i, 0, uid, cid, mig))
    nodes.append(
        DemoNode(
            name=MIG_NODE,
            ip=_node_ip(first_index),
            gpus=(DemoGpu(0, gpu_uuid(MIG_NODE, 0), migs), DemoGpu(1, gpu_uuid(MIG_NODE, 1))),
            processes=tuple(procs),
            agent_up=True,
            kubelet=_kubelet(b, MIG_NODE, procs, overrides={UNUSED_POD: {gpu_uuid(MIG_NODE, 1)}}),
        )
    )
    # Time-sliced: embedding replicas on nvidia.com/gpu.shared, two on each GPU.
    procs = []
    for i, gpu in enumerate((0, 0, 1)):
        uid, cid = b.pod(
            INFERENCE_NAMESPACE,
            f"embed-{i}",
            SHARED_NODE,
            container="embed",
            image=INFERENCE_IMAGE,
            gpu_limit=1,
            labels={"app": "embed", "tier": "inference"},
            gpu_resource="nvidia.com/gpu.shared",
        )
        procs.append(process(7200 + i, gpu, uid, cid))
    # A fourth replica loaded its model on GPU 1 and serves nothing: memory, 0% SM.
    uid, cid = b.pod(
        *IDLE_POD,
        SHARED_NODE,
        container="embed",
        image=INFERENCE_IMAGE,
        gpu_limit=1,
        labels={"app": "embed", "tier": "inference"},
        gpu_resource="nvidia.com/gpu.shared",
    )
    procs.append(dataclasses.replace(process(7203, 1, uid, cid), sm_utilization=0))
    nodes.append(
        DemoNode(
            name=SHARED_NODE,
            ip=_node_ip(first_index + 1),
            gpus=(DemoGpu(0, gpu_uuid(SHARED_NODE, 0)), DemoGpu(1, gpu_uuid(SHARED_NODE, 1))),
            processes=tuple(procs),
            agent_up=True,
            kubelet=_kubelet(b, SHARED_NODE, procs, overrides={}),
        )
    )
    # DRA: a fine-tuning pod's template claim gets gpu-0, an eval pod's a MIG device of gpu-1.
    dra_migs = (mig_uuid(DRA_NODE, 1, 0),)
    dra_mig_device = "gpu-1-mig-1g18gb-9-0"
    procs, claims = [], []
    given: dict[str, list[dict[str, str]]] = {}
    dra_pods: tuple[tuple[int, str, int, str, str | None], ...] = (
        (7300, "finetune-0", 0, "gpu-0", None),
        (7301, "eval-0", 1, dra_mig_device, dra_migs[0]),
    )
    for pid, name, gpu, device, on_mig in dra_pods:
        generated = f"{name}-gpu-7x2kq"
        uid, cid = b.pod(
            TRAINING_NAMESPACE,
            name,
            DRA_NODE,
            container="trainer",
            image=TRAINING_IMAGE,
            gpu_limit=None,
            labels={"app": name.split("-")[0]},
            claims={"gpu": generated},
        )
        procs.append(process(pid, gpu, uid, cid, on_mig))
        claims.append(
            make_resource_claim(
                TRAINING_NAMESPACE,
                generated,
                [ClaimDevice(device, DRA_NODE)],
                reserved_for=[name],
                template="gpu",
            )
        )
        given[uid] = [
            {
                "claimNamespace": TRAINING_NAMESPACE,
                "claimName": generated,
                "driver": DRA_DRIVER,
                "pool": DRA_NODE,
                "device": device,
            }
        ]
    slice_ = make_resource_slice(
        DRA_NODE,
        [
            SliceDevice("gpu-0", gpu_uuid(DRA_NODE, 0)),
            SliceDevice("gpu-1", gpu_uuid(DRA_NODE, 1)),
            SliceDevice(dra_mig_device, dra_migs[0], "mig", parent_uuid=gpu_uuid(DRA_NODE, 1)),
        ],
    )
    nodes.append(
        DemoNode(
            name=DRA_NODE,
            ip=_node_ip(first_index + 2),
            gpus=(DemoGpu(0, gpu_uuid(DRA_NODE, 0)), DemoGpu(1, gpu_uuid(DRA_NODE, 1), dra_migs)),
            processes=tuple(procs),
            agent_up=True,
            kubelet=_kubelet(b, DRA_NODE, procs, overrides={}, dra=given),
        )
    )
    return tuple(nodes), tuple(claims), (slice_,)

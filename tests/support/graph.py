"""In-memory stand-ins for the Kubernetes cache and the agents, for schema tests and benches.

``MemoryCluster`` implements ``graph_schema.Cluster`` and ``MemorySnapshots``
implements ``graph_schema.SnapshotSource`` (counting ``fetch`` calls per
node). ``synthetic_cluster`` builds an N-node cluster where every GPU process
belongs to its own pod; ``SmallWorld`` is a hand-made cluster with every
kind of join (shared GPU, container-ID-only join, orphan, lost GPU).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from strawberry.types import ExecutionResult

from graph_schema.context import GraphContext
from graph_schema.interfaces import AgentUnavailableError, Received
from graph_schema.records import ContainerRecord, NodeRecord, PodRecord, PodSizes
from graph_schema.schema import GraphSchema, build_schema
from node_resolver.models import (
    ContainerRef,
    GpuProcess,
    GpuSample,
    NodeSample,
    NodeSnapshot,
)

GiB = 1024**3


class MemoryCluster:
    """A Kubernetes cache held in dicts, with the same indexes as the real one."""

    def __init__(self, ready: bool = True) -> None:
        self._ready = ready
        self._nodes: dict[str, NodeRecord] = {}
        self._pods: dict[tuple[str, str], PodRecord] = {}
        self._by_uid: dict[str, PodRecord] = {}
        self._by_container: dict[str, PodRecord] = {}
        self._by_node: dict[str, dict[tuple[str, str], PodRecord]] = {}

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    def add_node(self, record: NodeRecord) -> None:
        self._nodes[record.name] = record

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)

    def add_pod(self, record: PodRecord) -> None:
        self.remove_pod(record.namespace, record.name)
        self._pods[(record.namespace, record.name)] = record
        self._by_uid[record.uid] = record
        if record.node_name is not None:
            self._by_node.setdefault(record.node_name, {})[(record.namespace, record.name)] = record
        for c in record.containers:
            if c.container_id:
                self._by_container[c.container_id] = record

    def remove_pod(self, namespace: str, name: str) -> None:
        old = self._pods.pop((namespace, name), None)
        if old is None:
            return
        self._by_uid.pop(old.uid, None)
        if old.node_name is not None:
            self._by_node[old.node_name].pop((namespace, name), None)
        for c in old.containers:
            if c.container_id:
                self._by_container.pop(c.container_id, None)

    def node(self, name: str) -> NodeRecord | None:
        return self._nodes.get(name)

    def nodes(self) -> Sequence[NodeRecord]:
        return [self._nodes[k] for k in sorted(self._nodes)]

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        return self._pods.get((namespace, name))

    def pod_by_uid(self, uid: str) -> PodRecord | None:
        return self._by_uid.get(uid)

    def pod_by_container_id(self, container_id: str) -> PodRecord | None:
        return self._by_container.get(container_id)

    def pods(
        self, namespace: str | None = None, node_name: str | None = None
    ) -> Sequence[PodRecord]:
        pods = self._pods if node_name is None else self._by_node.get(node_name, {})
        return [pods[k] for k in sorted(pods) if namespace is None or k[0] == namespace]

    def pods_named(self, name: str) -> Sequence[PodRecord]:
        return [p for (_, n), p in sorted(self._pods.items()) if n == name]

    def pod_sizes(self) -> PodSizes:
        return PodSizes.of(self._pods.values())


class MemorySnapshots:
    """Agents held in memory: a snapshot (or a failure) per node, and a call counter.

    Replace a node's snapshot with ``put`` rather than mutating it in place:
    the schema caches the graph objects built from each snapshot object.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.calls: Counter[str] = Counter()
        self._snapshots: dict[str, NodeSnapshot] = {}
        self._down: dict[str, str] = {}
        self._broken: dict[str, Exception] = {}

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def put(self, snapshot: NodeSnapshot) -> None:
        self._snapshots[snapshot.node_name] = snapshot

    def kill(self, node_name: str, reason: str = "connection refused") -> None:
        """Make the node's agent answer with AgentUnavailableError."""
        self._down[node_name] = reason

    def break_with(self, node_name: str, exc: Exception) -> None:
        """Make the node's agent raise an arbitrary exception (a bug, not an outage)."""
        self._broken[node_name] = exc

    def revive(self, node_name: str) -> None:
        self._down.pop(node_name, None)
        self._broken.pop(node_name, None)

    async def fetch(self, node_name: str) -> Received:
        self.calls[node_name] += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if node_name in self._broken:
            raise self._broken[node_name]
        if node_name in self._down:
            raise AgentUnavailableError(node_name, self._down[node_name])
        snapshot = self._snapshots.get(node_name)
        if snapshot is None:
            raise AgentUnavailableError(node_name, "no agent")
        return Received(snapshot)

    def agent_address(self, node_name: str) -> str | None:
        return f"{node_name}.agents:50051" if node_name in self._snapshots else None


def node_record(name: str, ip: str | None = None, gpus: int | None = 8) -> NodeRecord:
    """A GPU node record."""
    return NodeRecord(
        name=name,
        uid=f"uid-{name}",
        internal_ip=ip,
        labels={"kubernetes.io/hostname": name},
        gpu_capacity=gpus,
        gpu_allocatable=gpus,
    )


def pod_record(
    namespace: str,
    name: str,
    node_name: str | None,
    *,
    container_ids: Sequence[str] = (),
    labels: dict[str, str] | None = None,
    gpu_request: int | None = 1,
    uid: str | None = None,
) -> PodRecord:
    """A running pod record with one container per container ID."""
    return PodRecord(
        uid=uid or f"uid-{namespace}-{name}",
        namespace=namespace,
        name=name,
        node_name=node_name,
        phase="Running" if node_name else "Pending",
        pod_ip=None,
        labels=dict(labels or {}),
        gpu_request=gpu_request,
        containers=tuple(
            ContainerRecord(name=f"c{i}", image="cuda:12", container_id=cid)
            for i, cid in enumerate(container_ids)
        )
        or (ContainerRecord(name="c0", image="cuda:12", container_id=None),),
    )


def process(
    pid: int,
    used_bytes: int | None,
    *,
    container_id: str | None = None,
    pod_uid: str | None = None,
    name: str | None = "python",
) -> GpuProcess:
    """A GPU process, optionally inside a container of a pod."""
    ref = (
        ContainerRef(container_id=container_id, runtime="containerd", pod_uid=pod_uid)
        if container_id
        else None
    )
    return GpuProcess(pid=pid, used_memory_bytes=used_bytes, name=name, container=ref)


def gpu_sample(
    node_name: str, index: int, processes: Sequence[GpuProcess] = (), **metrics: object
) -> GpuSample:
    """A healthy H200-like GPU sample."""
    fields: dict[str, object] = {
        "name": "NVIDIA H200",
        "memory_total_bytes": 141 * GiB,
        "memory_used_bytes": sum(p.used_memory_bytes or 0 for p in processes),
        "utilization_gpu": 50,
        "utilization_memory": 20,
        "temperature_c": 40,
        "power_usage_watts": 300.0,
        "power_limit_watts": 700.0,
        "mig_enabled": False,
    }
    fields.update(metrics)
    return GpuSample(
        index=index,
        uuid=gpu_uuid(node_name, index),
        processes=list(processes),
        **fields,  # type: ignore[arg-type]
    )


def gpu_uuid(node_name: str, index: int) -> str:
    return f"GPU-{node_name}-{index}"


def snapshot(node_name: str, gpus: Sequence[GpuSample], **sample: object) -> NodeSnapshot:
    """A node snapshot, taken just now."""
    return NodeSnapshot(
        node_name=node_name,
        sample=NodeSample(
            driver_version=str(sample.pop("driver_version", "550.54.15")),
            cuda_driver_version=sample.pop("cuda_driver_version", 12040),  # type: ignore[arg-type]
            gpus=list(gpus),
            **sample,  # type: ignore[arg-type]
        ),
        sampled_at=1_700_000_000.0,
        age_seconds=0.25,
    )


@dataclass
class SyntheticCluster:
    """A generated cluster and its agents, with a schema to query them."""

    cluster: MemoryCluster
    snapshots: MemorySnapshots
    node_names: list[str]
    schema: GraphSchema = field(default_factory=build_schema)

    async def execute(self, query: str, **variables: Any) -> ExecutionResult:
        """Run ``query`` as one operation of its own, errors and all."""
        return await self.schema.execute(
            query,
            variable_values=variables or None,
            context_value=GraphContext(self.cluster, self.snapshots, self.schema.state),
        )


def synthetic_cluster(
    nodes: int,
    gpus_per_node: int = 8,
    processes_per_gpu: int = 4,
    delay: float = 0.0,
    agents: MemorySnapshots | None = None,
) -> SyntheticCluster:
    """N nodes x GPUs x processes, every process in its own pod (namespace ``ns-<node % 10>``)."""
    cluster = MemoryCluster()
    agents = MemorySnapshots(delay=delay) if agents is None else agents
    names = [f"node-{i:05d}" for i in range(nodes)]
    for n, node in enumerate(names):
        cluster.add_node(node_record(node, ip=f"10.{n // 65536}.{n // 256 % 256}.{n % 256}"))
        samples = []
        for g in range(gpus_per_node):
            procs = []
            for k in range(processes_per_gpu):
                pod_name = f"w-{node}-{g}-{k}"
                cid = f"c-{node}-{g}-{k}"
                namespace = f"ns-{n % 10}"
                pod = pod_record(
                    namespace, pod_name, node, container_ids=[cid], labels={"app": "train"}
                )
                cluster.add_pod(pod)
                procs.append(
                    process(1000 + g * 100 + k, (k + 1) * GiB, container_id=cid, pod_uid=pod.uid)
                )
            samples.append(gpu_sample(node, g, procs))
        agents.put(snapshot(node, samples))
    return SyntheticCluster(cluster, agents, names)


class SmallWorld:
    """Two GPU nodes, five pods, two of them sharing a GPU, an orphan process, a lost GPU."""

    def __init__(self, agents: MemorySnapshots | None = None) -> None:
        self.cluster = MemoryCluster()
        self.agents = MemorySnapshots() if agents is None else agents
        self.schema: GraphSchema = build_schema()
        c = self.cluster
        c.add_node(node_record("node-a", ip="10.0.0.1"))
        c.add_node(node_record("node-b", ip="10.0.0.2"))
        self.train1 = pod_record(
            "ml", "train-1", "node-a", container_ids=["ctr-t1", "ctr-t1-side"],
            labels={"app": "train", "team": "vision"}, gpu_request=2,
        )  # fmt: skip
        self.train2 = pod_record(
            "ml", "train-2", "node-a", container_ids=["ctr-t2"], labels={"app": "train"}
        )
        self.infer = pod_record(
            "serving", "infer-1", "node-b", container_ids=["ctr-i1"],
            labels={"app": "infer", "tier": "gpu"},
        )  # fmt: skip
        self.idle = pod_record("ml", "idle", "node-b", labels={"app": "notebook"}, gpu_request=None)
        self.pending = pod_record("ml", "pending", None, labels={"app": "train", "team": "nlp"})
        for p in (self.train1, self.train2, self.infer, self.idle, self.pending):
            c.add_pod(p)
        self.agents.put(
            snapshot(
                "node-a",
                [
                    # Two pods share GPU 0, each with its own memory.
                    gpu_sample(
                        "node-a",
                        0,
                        [
                            process(101, 10 * GiB, container_id="ctr-t1", pod_uid=self.train1.uid),
                            process(202, 20 * GiB, container_id="ctr-t2", pod_uid=self.train2.uid),
                        ],
                    ),
                    # train-1 again, plus an orphan: a host process in no container.
                    gpu_sample(
                        "node-a",
                        1,
                        [
                            process(
                                103, 3 * GiB, container_id="ctr-t1-side", pod_uid=self.train1.uid
                            ),
                            process(999, 5 * GiB, name="Xorg"),
                        ],
                        power_usage_watts=None,
                        field_errors={"power_usage_watts": "NOT_SUPPORTED"},
                    ),
                    gpu_sample(
                        "node-a",
                        2,
                        error="GPU_IS_LOST",
                        name=None,
                        memory_total_bytes=None,
                        memory_used_bytes=None,
                        utilization_gpu=None,
                    ),
                ],
            )
        )
        self.agents.put(
            snapshot(
                "node-b",
                # Joined by container ID alone: the agent could not tell the pod UID.
                [gpu_sample("node-b", 0, [process(301, 100 * GiB, container_id="ctr-i1")])],
                cuda_driver_version=11080,
            )
        )

    async def query(self, query: str, **variables: Any) -> Any:
        ctx = GraphContext(self.cluster, self.agents, self.schema.state)
        result = await self.schema.execute(query, variable_values=variables, context_value=ctx)
        assert result.errors is None, result.errors
        return result.data

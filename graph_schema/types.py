"""The graph's object types: Node, Gpu, GpuProcess, Pod, Container and friends.

Gpu and GpuProcess objects are built once per agent snapshot (see ``views``)
and every field below them resolves synchronously from that snapshot or the
Kubernetes cache. The only agent reads are the async fields that need a
node's snapshot, and they go through the operation's loader: one call per node.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import cast

import strawberry
from graphql import GraphQLError
from strawberry.types import Info

from .allocation_enums import (
    AllocationMechanism,
    AllocationRule,
    AllocationSource,
    AllocationUse,
    AllocationVerdict,
)
from .allocation_join import Allocation, LazyTable, owner, pod_gpu_request, use_shown
from .errors import BadUserInputError, require_ready
from .occupancy import event_resolvers as event_fields
from .occupancy import resolvers as occupancy
from .operation import Operation, remember_while
from .records import ContainerRecord, NodeRecord, PodRecord
from .scalars import JSON, Bytes


def context_of(info: Info) -> Operation[Gpu]:
    """The operation's context (a ``GraphContext``), as the resolvers use it."""
    return cast("Operation[Gpu]", info.context)


def ready_context(info: Info) -> Operation[Gpu]:
    """The operation's context for an entry point; NotReadyError until the cache fills."""
    ctx = context_of(info)
    require_ready(ctx.cluster)
    return ctx


def format_cuda_version(version: int | None) -> str | None:
    """NVML's CUDA driver version (12040) as "12.4"."""
    if version is None or version <= 0:
        return None
    return f"{version // 1000}.{version % 1000 // 10}"


@strawberry.type(description="How the node's agent answered this request.")
class AgentStatus:
    address: str | None = strawberry.field(description="Where the agent is expected.")
    reachable: bool
    error: str | None = strawberry.field(
        description="Why the agent could not answer, or a node-wide sampling failure."
    )
    snapshot_age_seconds: float | None = strawberry.field(
        description="How old the agent's sample was when it answered."
    )


@strawberry.federation.type(keys=["name"], description="A Kubernetes node.")
class Node:
    name: str
    uid: str | None
    internal_ip: str | None
    labels: JSON | None
    gpu_capacity: int | None = strawberry.field(description="The node's nvidia.com/gpu capacity.")
    gpu_allocatable: int | None = strawberry.field(
        description="The node's allocatable nvidia.com/gpu."
    )

    @classmethod
    def from_record(cls, record: NodeRecord) -> Node:
        """A Node over a cached node record."""
        return cls(
            name=record.name,
            uid=record.uid,
            internal_ip=record.internal_ip,
            labels=JSON(record.labels),
            gpu_capacity=record.gpu_capacity,
            gpu_allocatable=record.gpu_allocatable,
        )

    @classmethod
    def stub(cls, name: str) -> Node:
        """A Node known only by name (its agent answered before the cache saw it)."""
        return cls(
            name=name,
            uid=None,
            internal_ip=None,
            labels=None,
            gpu_capacity=None,
            gpu_allocatable=None,
        )

    @classmethod
    def resolve_reference(cls, info: Info, name: str) -> Node | None:
        """Federation entity lookup by name."""
        record = ready_context(info).cluster.node(name)
        return None if record is None else cls.from_record(record)

    @strawberry.field(description="The NVIDIA driver version the agent reports.")
    async def driver_version(self, info: Info) -> str | None:
        snapshot = await context_of(info).snapshot(self.name)
        return snapshot.sample.driver_version

    @strawberry.field(description='The CUDA version the driver supports, e.g. "12.4".')
    async def cuda_driver_version(self, info: Info) -> str | None:
        snapshot = await context_of(info).snapshot(self.name)
        return format_cuda_version(snapshot.sample.cuda_driver_version)

    @strawberry.field(description="Pods scheduled on this node.")
    def pods(self, info: Info) -> list[Pod]:
        ctx = context_of(info)
        records = ctx.cluster.pods(node_name=self.name)
        ctx.charge(len(records))
        return [Pod.from_record(r) for r in records]

    @strawberry.field(description="The node's GPUs; null when its agent cannot answer.")
    async def gpus(self, info: Info) -> list[Gpu] | None:
        ctx = context_of(info)
        gpus = await ctx.gpus(self.name)
        ctx.charge(len(gpus))
        return gpus

    @strawberry.field(description="How many GPUs the agent reports; null when it cannot answer.")
    async def gpu_count(self, info: Info) -> int | None:
        return len(await context_of(info).gpus(self.name))

    @strawberry.field(
        description="Where the node's allocation data comes from; NONE when there is none. "
        "Null (with NOT_FOUND) on a node the caller may not see, which its own history names."
    )
    async def allocation_source(self, info: Info) -> AllocationSource | None:
        return (await context_of(info).allocations(self.name)).source

    @strawberry.field(
        description="Why the node has no kubelet allocation data, when its source is NONE or "
        "API_ONLY; null on a node the caller may not see."
    )
    async def allocation_source_reason(self, info: Info) -> str | None:
        return (await context_of(info).allocations(self.name)).reason

    @strawberry.field(description="The node's agent: where it is and whether it answered.")
    async def agent(self, info: Info) -> AgentStatus:
        ctx = context_of(info)
        # Where a node the caller may not see listens is not the caller's to know (its own
        # history names such a node); the snapshot then answers NOT_FOUND below.
        address = (
            ctx.snapshots.agent_address(self.name) if ctx.cluster.sees_node(self.name) else None
        )
        try:
            received = await ctx.received(self.name)
        except Exception as exc:
            return AgentStatus(
                address=address, reachable=False, error=str(exc), snapshot_age_seconds=None
            )
        return AgentStatus(
            address=address,
            reachable=True,
            error=received.snapshot.sample.error,
            snapshot_age_seconds=received.age_seconds,
        )

    @strawberry.field(
        description='The agent\'s occupancy log: "ok", "off" (no --history-dir), or what is '
        "wrong with it (e.g. a corrupt database); null when the agent cannot answer."
    )
    async def history_status(self, info: Info) -> str | None:
        try:
            snapshot = await context_of(info).snapshot(self.name)
        except Exception:
            return None
        return snapshot.history_status

    gpu_history = occupancy.node_gpu_history
    gpu_event_status = event_fields.node_gpu_event_status
    gpu_events = event_fields.node_gpu_events


@strawberry.type(description="A MIG device (GPU instance + compute instance) of a GPU.")
class MigDevice:
    index: int
    uuid: str
    memory_total_bytes: Bytes | None
    memory_used_bytes: Bytes | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


@strawberry.federation.type(keys=["uuid"], description="One physical GPU, as its agent saw it.")
class Gpu:
    uuid: str
    index: int
    name: str | None
    memory_total_bytes: Bytes | None
    memory_used_bytes: Bytes | None
    utilization_gpu: int | None = strawberry.field(description="Percent of time a kernel ran.")
    utilization_memory: int | None = strawberry.field(
        description="Percent of time memory was read or written."
    )
    temperature_c: int | None
    power_usage_watts: float | None
    power_limit_watts: float | None
    mig_enabled: bool | None
    mig_devices: list[MigDevice]
    error: str | None = strawberry.field(
        description="Set when the GPU itself failed (e.g. GPU_IS_LOST); its metrics are then null."
    )
    field_errors: JSON = strawberry.field(
        description="Why a metric is null, by field name, "
        'e.g. {"powerUsageWatts": "NOT_SUPPORTED"}.'
    )
    processes: list[GpuProcess] = strawberry.field(
        description="Its processes that this caller may see."
    )
    node_name: strawberry.Private[str]
    hidden_process_count: int = strawberry.field(
        default=0,
        description="Processes on this GPU withheld from this caller (other tenants'); "
        "their memory still counts in memoryUsedBytes.",
    )
    hidden_memory_bytes: Bytes = strawberry.field(
        default=0,
        description="GPU memory used by the processes withheld from this caller.",
    )
    # The node's allocations, joined on first use; ``allocations`` shows the caller's share.
    allocations_of_node: strawberry.Private[LazyTable | None] = None
    # Whether the agent listed every process (no error took the GPU or a list down).
    process_list_complete: strawberry.Private[bool] = True

    @classmethod
    async def resolve_reference(cls, info: Info, uuid: str) -> Gpu | None:
        """Federation entity lookup by UUID."""
        return await ready_context(info).gpu(uuid)

    @strawberry.field(description="The node this GPU is in.")
    def node(self, info: Info) -> Node:
        ctx = context_of(info)
        # One object per GPU: a gpus { node { gpus ... } } chain multiplies.
        ctx.charge(1)
        record = ctx.cluster.node(self.node_name)
        return Node.stub(self.node_name) if record is None else Node.from_record(record)

    history = occupancy.gpu_history
    hidden_history_count = occupancy.gpu_hidden_history_count
    events = event_fields.gpu_events

    @strawberry.field(
        description="The devices on this GPU (it, or a MIG device of it) that the kubelet gave "
        "to containers, as the caller may see them."
    )
    def allocations(self, info: Info) -> list[GpuAllocation]:
        ctx = context_of(info)
        table = self.allocations_of_node
        records = table.get().for_gpu(self.uuid) if table is not None else []
        shown, _ = ctx.cluster.split_owned(records, owner)
        ctx.charge(len(shown))
        return [GpuAllocation.of(a, self.node_name) for a in shown]

    @strawberry.field(description="Distinct pods with processes on this GPU.")
    def pods(self, info: Info) -> list[Pod]:
        seen: dict[str, Pod] = {}
        for process in self.processes:
            pod = process.pod
            if pod is not None and pod.uid not in seen:
                seen[pod.uid] = pod
        context_of(info).charge(len(seen))
        return list(seen.values())


@strawberry.type(description="One host process using one GPU.")
class GpuProcess:
    pid: int = strawberry.field(description="The host PID.")
    name: str | None
    process_type: str | None = strawberry.field(
        name="type",
        description="Which NVML process lists it is in: COMPUTE, GRAPHICS, BOTH (compute and "
        "graphics), MPS (an MPS client) or MPS_GRAPHICS (an MPS client with graphics too).",
    )
    used_memory_bytes: Bytes | None
    sm_utilization: int | None
    container_id: str | None
    pod_uid: str | None
    runtime: str | None = strawberry.field(description="containerd, cri-o, docker, podman.")
    mig_device_uuid: str | None
    cmdline: str | None = strawberry.field(description="Only when the agent exposes it.")
    # Its GPU, held weakly (``gpu`` reads it): the GPU holds its processes, and a strong
    # reference back made every snapshot's objects a cycle, kept until a full collection
    # after a newer snapshot replaced them. The GPU lives as long as whatever hands its
    # processes out: the cache's current objects (``views``), and an operation the GPUs
    # it read (``GraphContext.node_gpus``).
    gpu_ref: strawberry.Private[Callable[[], Gpu | None]]
    pod: Pod | None = strawberry.field(
        description="The pod it belongs to, joined on pod UID, falling back to container ID; "
        "null when the pod is not in the cache (a host process, or a pod already gone)."
    )
    # No pod: its cgroup names a pod bound to another node (never that pod's, see joins).
    pod_elsewhere: strawberry.Private[bool] = False

    @property
    def gpu(self) -> Gpu:
        """The GPU it runs on."""
        gpu = self.gpu_ref()
        if gpu is None:
            # Nothing that hands a process out lets its GPU go first (see ``gpu_ref``).
            raise RuntimeError(f"the GPU of process {self.pid} is no longer held")
        return gpu

    @strawberry.field(name="gpu")
    def resolve_gpu(self) -> Gpu:
        return self.gpu

    @strawberry.field(
        description="Whether its container was given this GPU (or a MIG device on it)."
    )
    def allocation(self) -> AllocationVerdict:
        table = self.gpu.allocations_of_node
        if table is None:
            return AllocationVerdict.UNKNOWN
        record = self.pod.record if self.pod is not None else None
        return table.verdict(record, self.pod_uid is not None, self.container_id, self.gpu.uuid)

    @strawberry.field(description="Which rule decided ``allocation``.")
    def allocation_rule(self) -> AllocationRule:
        table = self.gpu.allocations_of_node
        if table is None:
            return AllocationRule.SPEC
        return table.get().rule(self.pod.record if self.pod is not None else None)

    @strawberry.field(description="The pod's container it runs in.")
    def container(self) -> Container | None:
        if not self.container_id:
            return None
        pod = self.pod
        if pod is None:
            return None
        record = pod.record.container_with_id(self.container_id)
        return None if record is None else Container.from_record(record, pod)

    def belongs_to(self, pod_uid: str) -> bool:
        """Whether this process was joined to the pod with this UID."""
        pod = self.pod
        return pod is not None and pod.uid == pod_uid


@strawberry.federation.type(keys=["uid", "namespace name"], description="A Kubernetes pod.")
class Pod:
    uid: strawberry.ID
    name: str
    namespace: str
    phase: str | None
    node_name: str | None
    pod_ip: str | None
    labels: JSON | None
    record: strawberry.Private[PodRecord]

    @classmethod
    def from_record(cls, record: PodRecord) -> Pod:
        """A Pod over a cached pod record."""
        return cls(
            uid=strawberry.ID(record.uid),
            name=record.name,
            namespace=record.namespace,
            phase=record.phase,
            node_name=record.node_name,
            pod_ip=record.pod_ip,
            labels=JSON(record.labels),
            record=record,
        )

    @classmethod
    def resolve_reference(
        cls,
        info: Info,
        uid: strawberry.ID | None = None,
        namespace: str | None = None,
        name: str | None = None,
    ) -> Pod | None:
        """Federation entity lookup by uid, or by namespace and name."""
        ctx = ready_context(info)
        cluster = ctx.cluster
        if uid is not None:
            record = cluster.pod_by_uid(uid)
        elif namespace is not None and name is not None:
            record = cluster.pod(namespace, name)
        else:
            raise BadUserInputError("a Pod reference needs uid, or namespace and name")
        return None if record is None else cls.from_record(record)

    @strawberry.field(
        description="GPUs it requests: every GPU-like device-plugin resource (nvidia.com/gpu, "
        "nvidia.com/gpu.shared, nvidia.com/mig-*, as configured) and its DRA claims' GPU "
        "devices; null when it requests none.",
        # The same for every caller; it changes with the pod's record or a claim.
        metadata=remember_while(lambda info: context_of(info).allocation_rules.claims_version()),
    )
    def gpu_request(self, info: Info) -> int | None:
        return pod_gpu_request(self.record, context_of(info).allocation_rules)

    @strawberry.field(
        description="The GPU devices the kubelet (or its DRA claims) gave its containers. "
        "When the node's agent or its kubelet cannot say which devices a pod that requests "
        "device-plugin GPUs was given, the list holds its DRA devices alone and an error "
        "names the node and why."
    )
    async def gpu_allocations(self, info: Info) -> list[GpuAllocation]:
        if not self.node_name:
            return []
        ctx = context_of(info)
        table = await ctx.allocations(self.node_name)
        if table.source is not AllocationSource.POD_RESOURCES and self.record.gpu_request:
            # Not an empty list that looks like "given nothing": only the kubelet knows.
            ctx.partial_errors.append(
                GraphQLError(
                    f"the device-plugin GPUs of pod {self.namespace}/{self.name} on node "
                    f"{self.node_name!r} are unknown: {table.reason}",
                    path=info.path.as_list(),
                )
            )
        mine = [a for a in table.for_pod(self.namespace, self.name) if a.is_gpu]
        shown, _ = ctx.cluster.split_owned(mine, owner)
        ctx.charge(len(shown))
        return [GpuAllocation.of(a, self.node_name) for a in shown]

    @strawberry.field(description="The node it is scheduled on.")
    def node(self, info: Info) -> Node | None:
        if not self.node_name:
            return None
        record = context_of(info).cluster.node(self.node_name)
        return None if record is None else Node.from_record(record)

    @strawberry.field(description="Its containers, init containers included.")
    def containers(self, info: Info) -> list[Container]:
        containers = self.record.containers
        context_of(info).charge(len(containers))
        return [Container.from_record(c, self) for c in containers]

    @strawberry.field(description="Its processes on its node's GPUs; null when the agent fails.")
    async def gpu_processes(self, info: Info) -> list[GpuProcess] | None:
        if not self.node_name:
            return []
        ctx = context_of(info)
        uid = self.uid
        gpus = await ctx.pod_gpus(self.node_name, uid)
        processes = [p for g in gpus for p in g.processes if p.belongs_to(uid)]
        ctx.charge(len(processes))
        return processes

    gpu_history = occupancy.pod_gpu_history
    gpu_events = event_fields.pod_gpu_events

    @strawberry.field(description="GPUs where it has processes; null when the agent fails.")
    async def gpus(self, info: Info) -> list[Gpu] | None:
        if not self.node_name:
            return []
        ctx = context_of(info)
        used = await ctx.pod_gpus(self.node_name, self.uid)
        ctx.charge(len(used))
        return list(used)


@strawberry.type(description="One container of a pod.")
class Container:
    container_id: str | None = strawberry.field(
        name="id", description="The runtime's container ID, without its runtime:// prefix."
    )
    name: str
    image: str | None
    init: bool = strawberry.field(description="An init container.")
    pod: Pod

    @classmethod
    def from_record(cls, record: ContainerRecord, pod: Pod) -> Container:
        """A Container over a container record of ``pod``."""
        return cls(
            container_id=record.container_id,
            name=record.name,
            image=record.image,
            init=record.init,
            pod=pod,
        )

    @strawberry.field(description="Its processes on GPUs; null when the agent fails.")
    async def gpu_processes(self, info: Info) -> list[GpuProcess] | None:
        cid = self.container_id
        if not cid or not self.pod.node_name:
            return []
        ctx = context_of(info)
        gpus = await ctx.gpus(self.pod.node_name)
        processes = [p for g in gpus for p in g.processes if p.container_id == cid]
        ctx.charge(len(processes))
        return processes


@strawberry.type(description="One device the kubelet gave a container, on a GPU.")
class GpuAllocation:
    container_name: str | None = strawberry.field(
        description="The container; null for a DRA claim no container lists."
    )
    mechanism: AllocationMechanism
    resource: str = strawberry.field(
        description="The resource name, or for DRA the claim's namespace/name."
    )
    device_id: str = strawberry.field(
        description="The device ID as the kubelet gave it, or for DRA the device name."
    )
    shared: bool = strawberry.field(
        description="A time-sliced replica (an ID ending ::N), or a DRA device shared between "
        "claims (shareID)."
    )
    mig_device_uuid: str | None = strawberry.field(description="Set for a MIG device.")
    gpu_uuid: str | None = strawberry.field(
        description="The GPU it is on (a MIG device's parent); null when it matches no GPU."
    )
    node_name: str = strawberry.field(description="The node whose kubelet gave it.")
    record: strawberry.Private[Allocation]

    @classmethod
    def of(cls, allocation: Allocation, node_name: str) -> GpuAllocation:
        """The graph object of one allocation on ``node_name``."""
        return cls(
            container_name=allocation.container,
            mechanism=allocation.mechanism,
            resource=allocation.resource,
            device_id=allocation.device_id,
            shared=allocation.shared,
            mig_device_uuid=allocation.mig_device_uuid,
            gpu_uuid=allocation.gpu_uuid,
            node_name=node_name,
            record=allocation,
        )

    @strawberry.field(description="The pod it was given to; null when not cached or not visible.")
    def pod(self, info: Info) -> Pod | None:
        record = context_of(info).cluster.pod(self.record.namespace, self.record.pod)
        return None if record is None else Pod.from_record(record)

    @strawberry.field(
        description="How its holder uses it, as the node's agent judged it at its last scan; "
        "UNKNOWN where the agent does not judge (no kubelet answer, an older agent, a claim "
        "the kubelet does not list)."
    )
    def use(self) -> AllocationUse:
        return use_shown(self.record)[0]

    @strawberry.field(
        description="When it became IDLE or UNUSED (the start of the window with no process "
        "of its holder above the threshold); null while ACTIVE or UNKNOWN."
    )
    def idle_since(self) -> datetime.datetime | None:
        since = use_shown(self.record)[1]
        return None if since is None else datetime.datetime.fromtimestamp(since, datetime.UTC)

    @strawberry.field(
        description="How long it has been IDLE or UNUSED, in seconds; 0 while ACTIVE, null "
        "while UNKNOWN."
    )
    def idle_seconds(self) -> float | None:
        return use_shown(self.record)[2]

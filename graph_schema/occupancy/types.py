"""The GraphQL objects of what an occupancy log records, and of reading it a page at a time.

A record names its node and pod, and those link back to the live Node and
Pod; Node, Gpu and Pod in turn have history fields. The schema is a cycle
there, so the links up are strawberry's lazy references to ``graph_schema.types``
(imported for the type checker, and by the two resolvers that build the
objects): the one import from this package up, declared in pyproject.toml's
acyclic contract.
"""

from __future__ import annotations

import datetime
import enum
from typing import TYPE_CHECKING, Annotated, Any, cast

import strawberry
from strawberry.types import Info

from node_resolver.history.records import OccupancyRecord

from ..allocation_enums import AllocationVerdict
from ..operation import Operation
from ..scalars import Bytes
from .fan_out import ConnectionPage

if TYPE_CHECKING:
    from ..types import Node, Pod

__all__ = [
    "GpuHistoryConnection",
    "GpuHistoryEdge",
    "GpuOccupancy",
    "GpuRef",
    "GpuUsageRow",
    "PageInfo",
    "UsageGroupBy",
    "operation_of",
]

_OBJECTS = "graph_schema.types"


@strawberry.type(description="A GPU as a history record names it (it may no longer exist).")
class GpuRef:
    uuid: str


def _recorded_verdict(record: OccupancyRecord) -> AllocationVerdict:
    if not record.pod_uid:
        return AllocationVerdict.NO_POD
    try:
        return AllocationVerdict(record.allocation_verdict)
    except ValueError:  # "" (never judged), or a value from a newer agent
        return AllocationVerdict.UNKNOWN


def _utc(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC)


@strawberry.type(
    description="One process's lifetime on one GPU, from its node's occupancy log: who held "
    "the GPU, from when to when, and how much of it."
)
class GpuOccupancy:
    mig_device_uuid: str | None = strawberry.field(
        description="The MIG device it ran on, on a GPU in MIG mode."
    )
    pid: int = strawberry.field(description="The host PID.")
    process_name: str | None
    container_id: str | None
    pod_namespace: str | None = strawberry.field(
        description="Its pod's namespace, kept after the pod is gone; null for no pod."
    )
    pod_name: str | None = strawberry.field(
        description="Its pod's name, kept after the pod is gone."
    )
    pod_uid: str | None
    start: datetime.datetime = strawberry.field(description="When it was first seen on the GPU.")
    end: datetime.datetime | None = strawberry.field(
        description="When it was last seen on the GPU; null while it runs."
    )
    peak_memory_bytes: Bytes
    mean_memory_bytes: Bytes | None = strawberry.field(description="Time-weighted mean GPU memory.")
    mean_sm_utilization: float | None = strawberry.field(
        description="Time-weighted mean SM utilization (percent), where NVML gives it."
    )
    gpu_seconds: float = strawberry.field(description="Seconds it held the GPU (start to end).")
    allocation: AllocationVerdict = strawberry.field(
        description="Whether the kubelet had given its container this GPU, as the agent "
        "last judged it from the kubelet's record while it ran; UNKNOWN where it could not tell."
    )
    gpu_uuid: strawberry.Private[str]
    node_name: strawberry.Private[str]

    @classmethod
    def of(cls, record: OccupancyRecord, node_name: str) -> GpuOccupancy:
        """The graph object of one record of ``node_name``'s log."""
        mean_memory = record.mean_memory_bytes
        return cls(
            mig_device_uuid=record.mig_device_uuid or None,
            pid=record.pid,
            process_name=record.process_name or None,
            container_id=record.container_id or None,
            pod_namespace=record.pod_namespace or None,
            pod_name=record.pod_name or None,
            pod_uid=record.pod_uid or None,
            start=_utc(record.first_seen),
            end=None if record.end is None else _utc(record.end),
            peak_memory_bytes=Bytes(record.peak_memory_bytes),
            mean_memory_bytes=None if mean_memory is None else Bytes(round(mean_memory)),
            mean_sm_utilization=record.mean_sm_utilization,
            gpu_seconds=record.gpu_seconds,
            allocation=_recorded_verdict(record),
            gpu_uuid=record.gpu_uuid,
            node_name=node_name,
        )

    @strawberry.field(description="The GPU it ran on.")
    def gpu(self) -> GpuRef:
        return GpuRef(uuid=self.gpu_uuid)

    @strawberry.field(description="The node whose agent recorded it.")
    # Quoted: strawberry reads the name and imports it lazily (ruff would unquote it).
    def node(self, info: Info) -> Annotated["Node", strawberry.lazy(_OBJECTS)]:  # noqa: UP037
        from ..types import Node

        record = operation_of(info).cluster.node(self.node_name)
        return Node.stub(self.node_name) if record is None else Node.from_record(record)

    @strawberry.field(description="The live pod; null once it is gone (podName still names it).")
    def pod(self, info: Info) -> Annotated["Pod", strawberry.lazy(_OBJECTS)] | None:  # noqa: UP037
        from ..types import Pod

        if not self.pod_uid:
            return None
        # The caller's view: a pod it may not see is None, as a gone one is. Only a pod bound
        # to the recording node: a cgroup naming another node's pod must not borrow it.
        record = operation_of(info).cluster.pod_by_uid(self.pod_uid)
        if record is None or record.node_name != self.node_name:
            return None
        return Pod.from_record(record)


def operation_of(info: Info) -> Operation[Any]:
    """The operation's context (a ``GraphContext``), as the history fields use it."""
    return cast("Operation[Any]", info.context)


@strawberry.type(description="One record of gpuHistory, and the cursor that resumes after it.")
class GpuHistoryEdge:
    node: GpuOccupancy
    page: strawberry.Private[ConnectionPage]
    index: strawberry.Private[int]

    @strawberry.field(description="Pass as after to continue right after this record.")
    def cursor(self) -> str:
        return self.page.cursor_after(self.index)


@strawberry.type(description="Where a page of a connection stands (Relay's PageInfo).")
class PageInfo:
    has_next_page: bool
    has_previous_page: bool
    start_cursor: str | None
    end_cursor: str | None


@strawberry.type(
    description="Process lifetimes on GPUs across nodes, oldest first, a page at a time."
)
class GpuHistoryConnection:
    edges: list[GpuHistoryEdge]
    page_info: PageInfo


@strawberry.enum(description="What gpuUsage sums by.")
class UsageGroupBy(enum.Enum):
    NAMESPACE = "NAMESPACE"
    POD = "POD"
    NODE = "NODE"
    GPU = "GPU"


@strawberry.type(description="GPU time and memory over a range, for one group (chargeback).")
class GpuUsageRow:
    namespace: str | None = strawberry.field(
        description="Null when not grouped by NAMESPACE or POD, or for processes in no pod."
    )
    pod_name: str | None = strawberry.field(description="Null when not grouped by POD.")
    node_name: str | None = strawberry.field(description="Null when not grouped by NODE.")
    gpu_uuid: str | None = strawberry.field(description="Null when not grouped by GPU.")
    gpu_seconds: float = strawberry.field(description="Seconds of GPU held, summed.")
    memory_gib_seconds: float = strawberry.field(
        description="GiB of GPU memory held times seconds (time-weighted mean x time), summed."
    )
    allocated_gpu_seconds: float = strawberry.field(
        default=0.0,
        description="GPU-equivalents the kubelet had given the group's containers, times "
        "seconds, summed: a whole GPU counts 1, a MIG device its share of its GPU's memory, a "
        "time-sliced replica 1/replicas, a DRA device shared by capacity its claim's share of "
        "it (docs/allocation.md). 0 from agents that do not judge allocations.",
    )
    idle_allocated_gpu_seconds: float = strawberry.field(
        default=0.0,
        description="The part of allocatedGpuSeconds spent IDLE or UNUSED.",
    )

"""The GraphQL objects of GPU health events, as the agents' occupancy logs record them.

An event names the GPU, the node, and the processes that were on the GPU (or
MIG device) at that moment, each with its pod as recorded, so the record
outlives the pods. Like a history record it links back to the live Node and
Pod through strawberry's lazy references (the one import from here up,
declared in pyproject.toml's acyclic contract). What a caller may see of an
event is decided before these objects are built (``event_resolvers``).
"""

from __future__ import annotations

import datetime
import enum
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.types import Info

from node_resolver.gpu_events.records import EventProcess, GpuEvent
from node_resolver.gpu_events.records import GpuEventKind as RecordedKind
from node_resolver.gpu_events.xid import describe

from ..allocation_enums import AllocationVerdict
from .event_fan_out import EventPageOfNodes, NodeEvent
from .types import GpuRef, PageInfo, operation_of

if TYPE_CHECKING:
    from ..types import Node, Pod

__all__ = [
    "GpuEventConnection",
    "GpuEventEdge",
    "GpuEventKind",
    "GpuEventObject",
    "GpuEventProcess",
    "event_object",
]

_OBJECTS = "graph_schema.types"


@strawberry.enum(description="What happened to a GPU.")
class GpuEventKind(enum.Enum):
    XID = "XID"
    ECC_DOUBLE_BIT = "ECC_DOUBLE_BIT"
    ECC_SINGLE_BIT = "ECC_SINGLE_BIT"
    GPU_LOST = "GPU_LOST"

    def recorded(self) -> RecordedKind:
        """The kind as the agents record it."""
        return RecordedKind(self.value)


def _verdict(process: EventProcess) -> AllocationVerdict:
    if not process.pod_uid:
        return AllocationVerdict.NO_POD
    try:
        return AllocationVerdict(process.allocation_verdict)
    except ValueError:  # "" (never judged), or a value from a newer agent
        return AllocationVerdict.UNKNOWN


@strawberry.type(
    name="GpuEventProcess",
    description="A process that was on the GPU (or MIG device) when the event happened, as "
    "its agent's last scan saw it; its pod as recorded, kept after the pod is gone.",
)
class GpuEventProcess:
    pid: int = strawberry.field(description="The host PID.")
    process_name: str | None
    container_id: str | None
    pod_namespace: str | None
    pod_name: str | None
    pod_uid: str | None
    allocation: AllocationVerdict = strawberry.field(
        description="Whether the kubelet had given its container this GPU, as the agent judged "
        "it at that moment; NO_POD for a process in no pod."
    )
    node_name: strawberry.Private[str]

    @classmethod
    def of(cls, process: EventProcess, node_name: str) -> GpuEventProcess:
        """The graph object of one process of an event on ``node_name``."""
        return cls(
            pid=process.pid,
            process_name=process.process_name or None,
            container_id=process.container_id or None,
            pod_namespace=process.pod_namespace or None,
            pod_name=process.pod_name or None,
            pod_uid=process.pod_uid or None,
            allocation=_verdict(process),
            node_name=node_name,
        )

    @strawberry.field(description="The live pod; null once it is gone (podName still names it).")
    def pod(self, info: Info) -> Annotated["Pod", strawberry.lazy(_OBJECTS)] | None:  # noqa: UP037
        from ..types import Pod

        if not self.pod_uid:
            return None
        # The caller's view; only a pod bound to the recording node, as history's records.
        record = operation_of(info).cluster.pod_by_uid(self.pod_uid)
        if record is None or record.node_name != self.node_name:
            return None
        return Pod.from_record(record)


@strawberry.type(
    name="GpuEvent",
    description="A health event on a GPU (an XID error, an ECC error, a GPU lost), with "
    "the processes and pods that were on it at that moment, from its node's occupancy log.",
)
class GpuEventObject:
    time: datetime.datetime
    kind: GpuEventKind
    xid: int | None = strawberry.field(description="The XID code, for kind XID.")
    description: str | None = strawberry.field(
        description="What the XID (or kind) usually means, from NVIDIA's XID catalog; null for "
        "an XID code not in it."
    )
    mig_device_uuid: str | None = strawberry.field(
        description="The MIG device it happened on, on a GPU in MIG mode."
    )
    culprit: GpuEventProcess | None = strawberry.field(
        description="The process NVIDIA's driver blamed in its kernel message, where one did "
        "and this caller may see it."
    )
    processes: list[GpuEventProcess] = strawberry.field(
        description="The processes on the GPU (or MIG device) at that moment that this caller "
        "may see."
    )
    hidden_process_count: int = strawberry.field(
        description="Processes on it at that moment withheld from this caller (other tenants', "
        "or in no pod)."
    )
    gpu_uuid: strawberry.Private[str]
    node_name: strawberry.Private[str]

    @strawberry.field(description="The GPU it happened on (it may no longer exist).")
    def gpu(self) -> GpuRef:
        return GpuRef(uuid=self.gpu_uuid)

    @strawberry.field(description="The node whose agent recorded it.")
    def node(self, info: Info) -> Annotated["Node", strawberry.lazy(_OBJECTS)]:  # noqa: UP037
        from ..types import Node

        record = operation_of(info).cluster.node(self.node_name)
        return Node.stub(self.node_name) if record is None else Node.from_record(record)


def event_object(
    found: NodeEvent, shown: list[EventProcess], hidden: int, *, sees_unowned: bool
) -> GpuEventObject:
    """The graph object of one node's event, with the processes the caller may see.

    ``sees_unowned``: the caller may see what is in no pod, so a culprit the last
    scan did not list (it exited first) is shown by the PID and name the driver gave.
    """
    event: GpuEvent = found.event
    node = found.node_name
    processes = [GpuEventProcess.of(p, node) for p in shown]
    culprit: GpuEventProcess | None = None
    if event.culprit_pid is not None:
        culprit = next((p for p in processes if p.pid == event.culprit_pid), None)
        listed = any(p.pid == event.culprit_pid for p in event.processes)
        if culprit is None and not listed and sees_unowned:
            unlisted = EventProcess(event.culprit_pid, process_name=event.culprit_name)
            culprit = GpuEventProcess.of(unlisted, node)
    return GpuEventObject(
        time=datetime.datetime.fromtimestamp(event.time, datetime.UTC),
        kind=GpuEventKind(event.kind.value),
        xid=event.xid,
        description=describe(event.kind, event.xid),
        mig_device_uuid=event.mig_device_uuid or None,
        culprit=culprit,
        processes=processes,
        hidden_process_count=hidden,
        gpu_uuid=event.gpu_uuid,
        node_name=node,
    )


@strawberry.type(description="One event of gpuEvents, and the cursor that resumes after it.")
class GpuEventEdge:
    node: GpuEventObject
    page: strawberry.Private[EventPageOfNodes]
    index: strawberry.Private[int]

    @strawberry.field(description="Pass as after to continue right after this event.")
    def cursor(self) -> str:
        return self.page.cursor_after(self.index)


@strawberry.type(description="GPU health events across nodes, oldest first, a page at a time.")
class GpuEventConnection:
    edges: list[GpuEventEdge]
    page_info: PageInfo

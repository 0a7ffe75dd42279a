"""What a GPU health event is, as the agent records it and is asked for it."""

from __future__ import annotations

import enum
from collections.abc import Collection
from dataclasses import dataclass, field

__all__ = [
    "ON",
    "UNSUPPORTED",
    "AllocatedPod",
    "EventPage",
    "EventProcess",
    "EventQuery",
    "GpuEvent",
    "GpuEventKind",
]

# The node's event status (Snapshot.gpu_event_status): "ok" while NVML delivers events,
# "unsupported" where the driver or every GPU has no event support, "off" without NVML
# (a fake source) or the error text of the last failure, as history's status reads.
ON = "ok"
UNSUPPORTED = "unsupported"


class GpuEventKind(enum.Enum):
    """What happened to the GPU; the values are what the log stores and GraphQL names."""

    XID = "XID"
    ECC_DOUBLE_BIT = "ECC_DOUBLE_BIT"
    ECC_SINGLE_BIT = "ECC_SINGLE_BIT"
    GPU_LOST = "GPU_LOST"


@dataclass(frozen=True, slots=True)
class EventProcess:
    """A process on the GPU (or MIG device) when the event happened, as the last scan saw it."""

    pid: int
    process_name: str = ""
    container_id: str = ""
    container_name: str = ""
    pod_uid: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    # An AllocationVerdict's value; "" where the agent could not tell.
    allocation_verdict: str = ""
    mig_device_uuid: str = ""


@dataclass(frozen=True, slots=True)
class AllocatedPod:
    """A pod the kubelet had given the GPU (or MIG device) when the event happened."""

    namespace: str
    name: str


@dataclass(slots=True)
class GpuEvent:
    """One health event on one GPU, with who was on it."""

    time: float
    kind: GpuEventKind
    # "" when the event names no GPU of this node (a kernel line's unknown PCI address).
    gpu_uuid: str
    mig_device_uuid: str = ""
    xid: int | None = None
    # NVML's bus ID ("00000000:3B:00.0"), or the kernel's address where no GPU has it.
    pci_bus_id: str = ""
    # The process NVIDIA's driver blamed in its kernel message, where one named it.
    culprit_pid: int | None = None
    culprit_name: str = ""
    # "nvml", "kernel", "nvml+kernel" (one event from both) or "scan" (a lost GPU).
    source: str = ""
    # The kernel message's text after the XID code, shortened.
    message: str = ""
    # How many events this record stands for: more than 1 when a storm was rate-limited.
    count: int = 1
    processes: tuple[EventProcess, ...] = ()
    allocated: tuple[AllocatedPod, ...] = ()
    # The log's sequence number (its row id), 0 until written; later events get larger ones.
    id: int = 0
    boot_id: str = ""
    # Pod UIDs and namespaces of the processes and allocations, for the log's filters.
    namespaces: tuple[str, ...] = field(default=())
    pod_uids: tuple[str, ...] = field(default=())

    def index_pods(self) -> None:
        """Fill ``namespaces`` and ``pod_uids`` from the processes and allocations."""
        self.namespaces = tuple(
            sorted(
                {p.pod_namespace for p in self.processes if p.pod_namespace}
                | {a.namespace for a in self.allocated}
            )
        )
        self.pod_uids = tuple(sorted({p.pod_uid for p in self.processes if p.pod_uid}))


@dataclass(frozen=True, slots=True)
class EventQuery:
    """Events in [since, until) by (time, sequence), or, with ``after_sequence``, those of
    them logged after that sequence number, by sequence."""

    since: float = 0.0
    until: float | None = None
    gpu_uuids: Collection[str] = ()
    namespaces: Collection[str] = ()
    pod_uids: Collection[str] = ()
    kinds: Collection[GpuEventKind] = ()
    limit: int = 500
    # (time, sequence) of the last event of the previous page.
    after: tuple[float, int] | None = None
    after_sequence: int | None = None


@dataclass(slots=True)
class EventPage:
    """One page of an agent's events as a client receives it."""

    node_name: str
    events: list[GpuEvent]
    # For each event, the page token that resumes right after it.
    cursors: list[str]
    next_page_token: str
    # The occupancy log's status: "ok", "off" or what is wrong with it.
    status: str
    # The highest sequence number the log held when it answered (0: none yet).
    last_sequence: int = 0
    # Names this log: a follower whose log_id changes starts again from sequence 0.
    log_id: str = ""
    # The node's event status: "ok", "unsupported", "off" or an error.
    event_status: str = ""

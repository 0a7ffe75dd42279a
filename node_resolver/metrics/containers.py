"""What one container's processes hold on one GPU, and why memory belongs to no pod.

The one per-container aggregation: the server (from its graph objects, whose
processes are joined to cached pods and judged) and the agent (naming its
processes from the pod names the server sent it) fill the same
``NodeAttribution``, which ``families`` turns into the same series.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..allocation_verdicts import AllocationVerdict
from ..models import AllocationUse, AllocationUseState, NodeAllocations

__all__ = [
    "UNATTRIBUTED_REASONS",
    "AllocationSeriesKey",
    "AllocationTotals",
    "ContainerKey",
    "ContainerUsage",
    "NodeAttribution",
    "ProcessUsage",
    "unattributed_reason",
]

# Why memory belongs to no pod: a process in no container, a container the
# cache does not know (e.g. its pod is gone), a PID the agent could not read,
# a process whose cgroup names a pod bound to another node (never that pod's).
UNATTRIBUTED_REASONS = ("host_process", "unknown_container", "unresolved", "pod_on_other_node")


@dataclass(frozen=True, slots=True)
class ContainerKey:
    """One container's share of one GPU (or MIG device): the container series' labels."""

    gpu_index: int
    gpu_uuid: str
    mig_device: str  # "" on a whole GPU
    namespace: str
    pod: str
    container: str  # "" when the process's container ID is not in the pod's status
    pod_uid: str


class ProcessUsage(Protocol):
    """What a container's series add up of one process (the agent's records, the graph's)."""

    @property
    def used_memory_bytes(self) -> int | None:
        """GPU memory the process holds; None when the driver did not say."""
        ...

    @property
    def sm_utilization(self) -> int | None:
        """The process's SM utilization (percent); None when not sampled."""
        ...


@dataclass(slots=True)
class ContainerUsage:
    """What one container's processes hold on one GPU."""

    # Summed over the processes; None while no process reported it.
    memory_bytes: int | None = None
    sm_percent: int | None = None
    processes: int = 0

    def add(self, process: ProcessUsage) -> None:
        """Count one more process of the container."""
        self.processes += 1
        if process.used_memory_bytes is not None:
            self.memory_bytes = (self.memory_bytes or 0) + process.used_memory_bytes
        if process.sm_utilization is not None:
            self.sm_percent = (self.sm_percent or 0) + process.sm_utilization


@dataclass(frozen=True, slots=True)
class AllocationSeriesKey:
    """One container's allocations on one GPU (or MIG device): the allocation series' labels."""

    namespace: str
    pod: str
    container: str
    gpu_uuid: str
    mig_device: str  # "" for a whole GPU or a replica of one


@dataclass(slots=True)
class AllocationTotals:
    """What one container's allocations on one device add up to."""

    # Counters: GPU-equivalent seconds allocated, and the idle part, as the agent counted.
    allocated_gpu_seconds: float = 0.0
    idle_allocated_gpu_seconds: float = 0.0
    # The longest idle stretch among them, 0 while active; None while none could be judged.
    idle_seconds: float | None = None

    def add(self, state: AllocationUseState) -> None:
        """Count one more allocation."""
        self.allocated_gpu_seconds += state.allocated_gpu_seconds
        self.idle_allocated_gpu_seconds += state.idle_allocated_gpu_seconds
        if state.use is not AllocationUse.UNKNOWN:
            self.idle_seconds = max(self.idle_seconds or 0.0, state.idle_seconds)


def unattributed_reason(*, in_container: bool, named: bool, elsewhere: bool = False) -> str:
    """Why a process that joins no cached pod belongs to none (one of UNATTRIBUTED_REASONS).

    ``in_container``: its cgroup path names a container; ``named``: the agent
    read its name (it names every PID it could read, so no name means /proc
    had nothing); ``elsewhere``: its cgroup names a pod bound to another node.
    """
    if elsewhere:
        return "pod_on_other_node"
    if in_container:
        return "unknown_container"
    return "host_process" if named else "unresolved"


@dataclass(slots=True)
class NodeAttribution:
    """One node's processes by container, its memory in no pod, and the containers on a GPU
    they were not given: what one node's container and memory series are rendered from."""

    # Why memory is in no pod, every reason present for every GPU counted.
    reasons: Sequence[str] = UNATTRIBUTED_REASONS
    containers: dict[ContainerKey, ContainerUsage] = field(default_factory=dict)
    # (gpu index, gpu uuid) -> reason -> bytes, for GPUs whose process list is complete;
    # a GPU whose list is not has no entry (its memory in no pod is not known).
    unattributed: dict[tuple[int, str], dict[str, int]] = field(default_factory=dict)
    # (namespace, pod, container, gpu uuid) of named containers judged NOT_ALLOCATED
    # (UNKNOWN is never counted).
    unallocated: set[tuple[str, str, str, str]] = field(default_factory=set)
    # Each container's judged allocations by device (devices matching no GPU are left out).
    allocations: dict[AllocationSeriesKey, AllocationTotals] = field(default_factory=dict)

    def gpu(self, index: int, uuid: str, *, complete: bool) -> dict[str, int]:
        """Start a GPU: its memory in no pod by reason, to add to (counted only if ``complete``)."""
        lost = dict.fromkeys(self.reasons, 0)
        if complete:
            self.unattributed[(index, uuid)] = lost
        return lost

    def add(self, key: ContainerKey, process: ProcessUsage) -> bool:
        """Count a process of the container; True for the container's first on this device."""
        usage = self.containers.get(key)
        first = usage is None
        if usage is None:
            usage = self.containers[key] = ContainerUsage()
        usage.add(process)
        return first

    def judge(self, key: ContainerKey, verdict: AllocationVerdict) -> None:
        """The container's verdict on the key's GPU: counted where it is NOT_ALLOCATED."""
        # The kubelet lists containers by name: a container known by no name is never judged.
        if verdict is AllocationVerdict.NOT_ALLOCATED and key.container:
            self.unallocated.add((key.namespace, key.pod, key.container, key.gpu_uuid))

    def add_allocations(self, allocations: NodeAllocations | None) -> None:
        """Count every judged allocation of the node's kubelet answer (the agent's uses)."""
        if allocations is None or not allocations.uses:
            return
        uses = allocations.uses
        for c in allocations.containers:
            for d in c.devices:
                state = uses.get((c.namespace, c.pod, c.container, d.resource, d.device_id))
                if state is None or d.gpu_uuid is None:
                    continue
                key = AllocationSeriesKey(
                    c.namespace, c.pod, c.container, d.gpu_uuid, d.mig_device_uuid or ""
                )
                totals = self.allocations.get(key)
                if totals is None:
                    totals = self.allocations[key] = AllocationTotals()
                totals.add(state)

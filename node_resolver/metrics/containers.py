"""What one container's processes hold on one GPU, and why memory belongs to no pod.

The server (joining processes to its cached pods) and the agent (naming them
from the pod names the server sent it) fill the same records, which
``families`` turns into the same series.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..models import GpuProcess, GpuSample

__all__ = [
    "UNATTRIBUTED_REASONS",
    "ContainerKey",
    "ContainerUsage",
    "process_list_complete",
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


@dataclass(slots=True)
class ContainerUsage:
    """What one container's processes hold on one GPU."""

    # Summed over the processes; None while no process reported it.
    memory_bytes: int | None = None
    sm_percent: int | None = None
    processes: int = 0

    def add(self, process: GpuProcess) -> None:
        """Count one more process of the container."""
        self.processes += 1
        if process.used_memory_bytes is not None:
            self.memory_bytes = (self.memory_bytes or 0) + process.used_memory_bytes
        if process.sm_utilization is not None:
            self.sm_percent = (self.sm_percent or 0) + process.sm_utilization


def unattributed_reason(process: GpuProcess) -> str:
    """Why a process that joins no cached pod belongs to none (one of UNATTRIBUTED_REASONS)."""
    if process.container is not None:
        return "unknown_container"
    # The agent names every PID it could read; no name means /proc had nothing.
    return "host_process" if process.name is not None else "unresolved"


def process_list_complete(gpu: GpuSample) -> bool:
    """Whether the GPU's process list holds every process: no error took the GPU or a list down.

    The agent marks a process list it could not read (the GPU's, or a MIG
    device's, e.g. without the mig-monitor capability) in ``field_errors``
    under a key naming ``processes``; the SM utilization samples are not the list.
    """
    if gpu.error:
        return False
    return not any(
        "processes" in key.split(".") and not key.endswith(".sm_utilization")
        for key in gpu.field_errors
    )

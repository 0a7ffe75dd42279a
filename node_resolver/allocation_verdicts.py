"""Allocation verdicts: whether a container was given the GPU its process runs on.

The vocabulary is declared here, in the lowest layer that judges: the agent
judges from the kubelet's record alone (its occupancy log and its own
``/metrics``), and the server (``graph_schema.allocation_join``) extends the
same rule with what only it knows: the DRA claims and slices of the API
server, and which resource names are GPUs. The values are what the occupancy
log stores and the agent sends in ``HistoryRecord.allocation_verdict``, and
the names GraphQL's ``AllocationVerdict`` enum shows, so all three must stay.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from .models import NodeAllocations

__all__ = ["AllocationVerdict", "ContainerVerdicts", "devices_verdict"]


class AllocationVerdict(enum.Enum):
    """Whether the kubelet gave a process's container the GPU it runs on."""

    ALLOCATED = "ALLOCATED"
    NOT_ALLOCATED = "NOT_ALLOCATED"
    NO_POD = "NO_POD"
    UNKNOWN = "UNKNOWN"


def devices_verdict(given: Iterable[str | None], gpu_uuid: str) -> AllocationVerdict:
    """The verdict from the GPUs a container's GPU devices are on (None: matches no GPU).

    ALLOCATED when one is ``gpu_uuid``; UNKNOWN when one matches no GPU (it
    could be this one); NOT_ALLOCATED when every one is known and none is it.
    """
    unmatched = False
    for uuid in given:
        if uuid == gpu_uuid:
            return AllocationVerdict.ALLOCATED
        if uuid is None:
            unmatched = True
    return AllocationVerdict.UNKNOWN if unmatched else AllocationVerdict.NOT_ALLOCATED


class ContainerVerdicts:
    """The kubelet's verdict for a container on a GPU, looked up per process of a scan.

    The agent does not know which resource names are GPUs (the server's
    ``--gpu-resources``), so every device the kubelet lists counts: one that
    matches no GPU (a NIC's, or an ID the scan does not know) leaves the
    verdict UNKNOWN, never a NOT_ALLOCATED the server would not give.
    """

    def __init__(self, allocations: NodeAllocations | None) -> None:
        available = allocations is not None and allocations.available
        self.containers = allocations.containers if allocations is not None and available else ()
        self._devices = {(c.namespace, c.pod, c.container): c.devices for c in self.containers}

    def verdict(self, namespace: str, pod: str, container: str, gpu_uuid: str) -> AllocationVerdict:
        """ALLOCATED, NOT_ALLOCATED, or UNKNOWN where the kubelet's record cannot tell
        (no data, the container unlisted, or one of its devices matching no GPU)."""
        devices = self._devices.get((namespace, pod, container))
        if devices is None:
            return AllocationVerdict.UNKNOWN
        return devices_verdict((d.gpu_uuid for d in devices), gpu_uuid)

"""Device IDs the kubelet hands out, mapped to this node's GPUs.

NVIDIA's device plugin names a device by its GPU or MIG UUID, and a
time-sliced replica by that UUID plus ``::N``. NVIDIA's DRA driver names a
full GPU ``gpu-<minor>`` and a MIG device ``gpu-<minor>-mig-…``: both are
mapped through NVML's minor number to the (parent) GPU; which MIG device it is,
the server reads from its ResourceSlice and sends with the pod's name
(``allocation_use``). An ID that matches no
GPU of the scan keeps ``gpu_uuid`` None, so the server can never count it as
the GPU a process runs on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .models import (
    AllocationMechanism,
    ContainerAllocations,
    DeviceAllocation,
    GpuSample,
    NodeAllocations,
)
from .pod_resources import KubeletContainer

__all__ = ["DRA_GPU_DRIVER", "GpuIndex", "node_allocations"]

DRA_GPU_DRIVER = "gpu.nvidia.com"
_DRA_DEVICE = re.compile(r"gpu-(\d+)(-mig-.*)?")
_REPLICA = "::"


class GpuIndex:
    """This scan's GPUs by UUID, MIG UUID and minor number."""

    def __init__(self, gpus: Iterable[GpuSample]) -> None:
        self.gpus: set[str] = set()
        self.mig_parent: dict[str, str] = {}
        self.by_minor: dict[int, str] = {}
        for gpu in gpus:
            if not gpu.uuid:
                continue
            self.gpus.add(gpu.uuid)
            for mig in gpu.mig_devices:
                self.mig_parent[mig.uuid] = gpu.uuid
            if gpu.minor_number is not None:
                self.by_minor[gpu.minor_number] = gpu.uuid

    def plugin_device(self, resource: str, device_id: str) -> DeviceAllocation:
        """A device plugin's ID: a GPU or MIG UUID, ``::N`` marking a time-sliced replica."""
        base, replica, _ = device_id.partition(_REPLICA)
        gpu = mig = None
        if base in self.gpus:
            gpu = base
        elif base in self.mig_parent:
            gpu, mig = self.mig_parent[base], base
        return DeviceAllocation(
            mechanism=AllocationMechanism.DEVICE_PLUGIN,
            resource=resource,
            device_id=device_id,
            gpu_uuid=gpu,
            mig_device_uuid=mig,
            shared=bool(replica),
        )

    def dra_device(self, claim: str, driver: str, pool: str, device: str) -> DeviceAllocation:
        """A DRA device; NVIDIA's ``gpu-<minor>`` names map here (the server has the slices)."""
        gpu = None
        match = _DRA_DEVICE.fullmatch(device) if driver == DRA_GPU_DRIVER else None
        if match is not None:
            gpu = self.by_minor.get(int(match.group(1)))
        return DeviceAllocation(
            mechanism=AllocationMechanism.DRA,
            resource=claim,
            device_id=device,
            gpu_uuid=gpu,
            driver=driver,
            pool=pool,
        )


def node_allocations(
    containers: Iterable[KubeletContainer], gpus: Iterable[GpuSample], *, age_seconds: float
) -> NodeAllocations:
    """The kubelet's answer as allocations, each device mapped to this scan's GPUs where it can."""
    index = GpuIndex(gpus)
    out: list[ContainerAllocations] = []
    for c in containers:
        devices = [
            index.plugin_device(d.resource_name, device_id)
            for d in c.devices
            for device_id in d.device_ids
        ]
        devices.extend(
            index.dra_device(f"{d.claim_namespace}/{d.claim_name}", d.driver, d.pool, d.device)
            for d in c.claim_devices
        )
        out.append(ContainerAllocations(c.namespace, c.pod, c.container, tuple(devices)))
    return NodeAllocations(available=True, containers=tuple(out), age_seconds=age_seconds)

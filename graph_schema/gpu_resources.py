"""Which Kubernetes requests count as GPUs: resource names and DRA drivers, declared once.

Names may end in ``*`` to cover a family (every ``nvidia.com/mig-<profile>``).
The defaults cover NVIDIA's device plugin (whole GPUs, time-sliced or MPS
replicas renamed ``.shared``, MIG ``mixed`` profiles) and NVIDIA's DRA driver;
another vendor's plugin (HAMi, …) is added by configuration, not code.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_GPU_DRA_DRIVERS", "DEFAULT_GPU_RESOURCES", "GpuResources"]

DEFAULT_GPU_RESOURCES: tuple[str, ...] = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "nvidia.com/mig-*",
)
DEFAULT_GPU_DRA_DRIVERS: tuple[str, ...] = ("gpu.nvidia.com",)


@dataclass(frozen=True, slots=True)
class GpuResources:
    """The GPU-like resource names (``*`` suffix: a prefix) and the GPU DRA drivers."""

    names: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    dra_drivers: tuple[str, ...] = DEFAULT_GPU_DRA_DRIVERS

    def is_gpu(self, resource: str) -> bool:
        """Whether a request or kubelet device of ``resource`` is a GPU (or part of one)."""
        for name in self.names:
            if resource == name or (name.endswith("*") and resource.startswith(name[:-1])):
                return True
        return False

    def is_gpu_driver(self, driver: str) -> bool:
        """Whether a DRA device of ``driver`` is a GPU."""
        return driver in self.dra_drivers

"""The GPU source interface: one scan of the node's GPUs and their processes.

Two implementations sit behind it: ``NvmlGpuSource`` (the real driver, via
NVML) and ``FakeGpuSource`` (a JSON file, for tests and the demo). Processes
come back as NVML sees them, without name or container; the sampler adds
those.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from .models import GpuProcess, NodeSample


class GpuSource(Protocol):
    """Something that can report the node's GPUs, their metrics and processes."""

    def sample(self) -> NodeSample:
        """Scan every GPU once; per-GPU and per-field failures are reported inside the sample."""
        ...

    def close(self) -> None:
        """Release the source (e.g. shut NVML down)."""
        ...


def merge_processes(processes: Iterable[GpuProcess]) -> list[GpuProcess]:
    """One entry per PID and MIG device, its type naming every list it is in, known values kept."""
    merged: dict[tuple[int, str | None], GpuProcess] = {}
    for process in processes:
        key = (process.pid, process.mig_device_uuid)
        seen = merged.get(key)
        if seen is None:
            merged[key] = process
            continue
        seen.type = seen.type.merged(process.type)
        # Every list reports the process's memory on this device; keep what is known.
        if process.used_memory_bytes is not None:
            seen.used_memory_bytes = max(seen.used_memory_bytes or 0, process.used_memory_bytes)
        if seen.sm_utilization is None:
            seen.sm_utilization = process.sm_utilization
    return list(merged.values())

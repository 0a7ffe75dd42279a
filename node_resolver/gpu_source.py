"""The GPU source interface: one scan of the node's GPUs and their processes.

Two implementations sit behind it: ``NvmlGpuSource`` (the real driver, via
NVML) and ``FakeGpuSource`` (a JSON file, for tests and the demo). Processes
come back as NVML sees them, without name or container; the sampler adds
those.
"""

from __future__ import annotations

from typing import Protocol

from .models import NodeSample


class GpuSource(Protocol):
    """Something that can report the node's GPUs, their metrics and processes."""

    def sample(self) -> NodeSample:
        """Scan every GPU once; per-GPU and per-field failures are reported inside the sample."""
        ...

    def close(self) -> None:
        """Release the source (e.g. shut NVML down)."""
        ...

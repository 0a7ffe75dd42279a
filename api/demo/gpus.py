"""What each demo node's GPUs report at a moment: the fake-NVML document the agent reads.

Utilization, memory, temperature and power follow slow waves, so every
refresh shows a moving, plausible cluster rather than frozen numbers.
"""

from __future__ import annotations

import math
from typing import Any

from .scenario import DemoNode, DemoProcess

__all__ = ["GPU_NAME", "fake_nvml_document"]

GPU_NAME = "NVIDIA H200"
GPU_MEMORY_BYTES = 150_754_820_096
POWER_LIMIT_WATTS = 700.0
DRIVER_VERSION = "550.90.07"
CUDA_DRIVER_VERSION = 12040
# What the driver and CUDA context hold on every GPU, process or not.
BASELINE_MEMORY_BYTES = 512 << 20
MIB = 1 << 20


def _wave(t: float, period: float, phase: float) -> float:
    return math.sin(2 * math.pi * t / period + phase)


def _process_now(process: DemoProcess, t: float) -> tuple[int, int]:
    """(memory bytes, SM %) of ``process`` at ``t`` seconds into the demo."""
    phase = process.pid % 11
    memory = process.memory_bytes * (1 + 0.03 * _wave(t, 17.0, phase))
    sm = process.sm_utilization
    if sm:
        sm = round(min(100, max(1, sm + 7 * _wave(t, 6.0, phase))))
    return int(memory) // MIB * MIB, sm


def fake_nvml_document(node: DemoNode, t: float) -> dict[str, Any]:
    """The fake-NVML JSON for ``node`` at ``t`` seconds into the demo."""
    gpus = []
    for gpu in node.gpus:
        procs = []
        used = BASELINE_MEMORY_BYTES
        busy = 0
        for process in node.processes:
            if process.gpu_index != gpu.index:
                continue
            memory, sm = _process_now(process, t)
            used += memory
            busy += sm
            procs.append(
                {
                    "pid": process.pid,
                    "usedMemoryBytes": memory,
                    "type": "COMPUTE",
                    "smUtilization": sm,
                    "migDeviceUuid": process.mig_device_uuid,
                }
            )
        utilization = min(100, busy)
        gpus.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "name": GPU_NAME,
                "memoryTotalBytes": GPU_MEMORY_BYTES,
                "memoryUsedBytes": min(used, GPU_MEMORY_BYTES),
                "utilizationGpu": utilization,
                "utilizationMemory": min(100, utilization * 2 // 3),
                "temperatureC": 33 + utilization * 2 // 5,
                "powerUsageWatts": round(72.0 + utilization * 5.9, 1),
                "powerLimitWatts": POWER_LIMIT_WATTS,
                "migEnabled": bool(gpu.mig_devices),
                "migDevices": [
                    {"index": slot, "uuid": mig, "gpuInstanceId": 9 + slot, "computeInstanceId": 0}
                    for slot, mig in enumerate(gpu.mig_devices)
                ],
                "minorNumber": gpu.index,
                "error": None,
                "processes": procs,
            }
        )
    return {
        "driverVersion": DRIVER_VERSION,
        "cudaDriverVersion": CUDA_DRIVER_VERSION,
        "gpus": gpus,
    }

"""NVML's process lists, read with the entry layout the loaded driver writes.

nvml.h has changed what ``nvmlDeviceGet{Compute,Graphics}RunningProcesses_v3``
writes without renaming it: 24-byte ``nvmlProcessInfo_v2_t`` entries from R510,
32-byte ones (``usedGpuCcProtectedMemory`` appended) on early R535 drivers
(535.43 to 535.86), and 24-byte ones again once 535.98 moved the extra field to
``nvmlDeviceGetRunningProcessDetailList``. pynvml reads with one fixed struct
per release, so against the other size it returns invented PIDs and memory
without an error (12.535.77 read 32 bytes from every driver).

The driver's layout is told from its symbols, as nvitop does (XuehaiPan/nvitop
PR #79 and #89): ``nvmlDeviceGetConfComputeMemSizeInfo`` without
``nvmlDeviceGetRunningProcessDetailList`` marks the 32-byte drivers. Reading the
entries here, rather than through pynvml's per-entry friendly objects, also
halves a scan's cost or better (bench/README.md, "One NVML scan").
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

V2_ENTRY_BYTES = 24
R535_ENTRY_BYTES = 32


class ProcessInfoV2(ctypes.Structure):
    """nvml.h's nvmlProcessInfo_v2_t: what _v2, and _v3 outside early R535, write."""

    _fields_ = [
        ("pid", ctypes.c_uint),
        ("usedGpuMemory", ctypes.c_ulonglong),
        ("gpuInstanceId", ctypes.c_uint),
        ("computeInstanceId", ctypes.c_uint),
    ]


class ProcessInfoR535(ctypes.Structure):
    """The entry early R535 drivers write through _v3 (their nvml.h's nvmlProcessInfo_v3_t)."""

    _fields_ = [*ProcessInfoV2._fields_, ("usedGpuCcProtectedMemory", ctypes.c_ulonglong)]


ENTRY_TYPES: dict[int, type[ctypes.Structure]] = {
    V2_ENTRY_BYTES: ProcessInfoV2,
    R535_ENTRY_BYTES: ProcessInfoR535,
}


@dataclass(frozen=True, slots=True)
class ProcessEntry:
    """One process-list entry, with the attribute names pynvml's friendly objects use."""

    pid: int
    usedGpuMemory: int  # pynvml's name


def process_list_layout(nvml: Any) -> tuple[str, int] | None:
    """(function suffix, entry bytes) of the loaded driver's newest process lists.

    None for a module that cannot look symbols up (not nvidia-ml-py), or a driver
    with neither ``_v3`` nor ``_v2`` process lists.
    """
    lookup = getattr(nvml, "_nvmlGetFunctionPointer", None)
    if lookup is None:
        return None

    def has(symbol: str) -> bool:
        try:
            lookup(symbol)
        except nvml.NVMLError:
            return False
        return True

    if has("nvmlDeviceGetComputeRunningProcesses_v3"):
        early_r535 = has("nvmlDeviceGetConfComputeMemSizeInfo") and not has(
            "nvmlDeviceGetRunningProcessDetailList"
        )
        return "_v3", R535_ENTRY_BYTES if early_r535 else V2_ENTRY_BYTES
    if has("nvmlDeviceGetComputeRunningProcesses_v2"):
        return "_v2", V2_ENTRY_BYTES
    return None


class ProcessListReader:
    """Calls a driver's process-list functions with entries of the driver's own layout."""

    def __init__(self, nvml: Any, suffix: str, entry_bytes: int) -> None:
        self._nvml = nvml
        self._suffix = suffix
        self._entry = ENTRY_TYPES[entry_bytes]

    def read(self, function: str, handle: Any) -> list[ProcessEntry]:
        """``function``'s entries for ``handle``; NVML errors raised as pynvml raises them."""
        nvml = self._nvml
        call = nvml._nvmlGetFunctionPointer(function + self._suffix)
        count = ctypes.c_uint(0)
        ret = call(handle, ctypes.byref(count), None)
        if ret == nvml.NVML_SUCCESS:
            return []
        if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
            raise nvml.NVMLError(ret)
        # Room for processes started between the two calls, as pynvml allows.
        count.value = count.value * 2 + 5
        entries = (self._entry * count.value)()
        ret = call(handle, ctypes.byref(count), entries)
        if ret != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(ret)
        return [ProcessEntry(e.pid, e.usedGpuMemory) for e in entries[: count.value]]

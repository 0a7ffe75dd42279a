"""NvmlGpuSource against a stand-in ``pynvml`` module.

The stand-in reuses nvidia-ml-py's own constants and NVMLError classes and
replaces only the functions that would call into libnvidia-ml, simulating a
node's GPUs with the same signatures and error behaviour. Everything above it
is the production code path.
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest

from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.models import GpuSample, ProcessType
from node_resolver.nvml import NVML_VALUE_NOT_AVAILABLE, NvmlGpuSource, NvmlUnavailableError
from tests.support.agents import skip_if_nvml_loads

NOW = 1_800_000_000.0  # the test clock, Unix seconds
NOW_US = int(NOW * 1_000_000)


@dataclass
class SimMig:
    """One MIG device of a simulated GPU."""

    uuid: str
    gi: int
    ci: int
    total: int = 20 << 30
    used: int = 1 << 30
    reserved: int = 0
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    # NVML function name -> error code it returns for this MIG device
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class SimGpu:
    """One simulated GPU: what NVML would report for it."""

    uuid: str
    name: str = "NVIDIA H200"
    total: int = 150754820096
    used: int = 2147483648
    # Memory the driver holds back: v1 of nvmlDeviceGetMemoryInfo counts it as used, v2 not.
    reserved: int = 0
    util_gpu: int = 87
    util_mem: int = 40
    temperature: int = 55
    power_mw: int = 350500
    limit_mw: int = 700000
    compute: list[tuple[int, int | None]] = field(default_factory=list)
    graphics: list[tuple[int, int | None]] = field(default_factory=list)
    # (pid, timestamp in microseconds, SM %)
    samples: list[tuple[int, int, int]] = field(default_factory=list)
    # What the sizing call of nvmlDeviceGetProcessUtilization returns with no samples.
    idle_return: int = pynvml.NVML_ERROR_NOT_FOUND
    mig_mode: int | None = None  # None: MIG not supported on this GPU
    # A slot holds a MIG device, None (empty: NOT_FOUND) or the error code its lookup returns.
    mig: list[SimMig | int | None] = field(default_factory=list)
    # NVML function name -> error code it returns for this GPU
    errors: dict[str, int] = field(default_factory=dict)
    # NVML function name -> exception pynvml raises outside its NVMLError family
    crashes: dict[str, Exception] = field(default_factory=dict)
    lost: bool = False


@dataclass(frozen=True)
class Handle:
    gpu: SimGpu
    mig: SimMig | None = None


class StandInNvml:
    """Builds a module object with pynvml's names, backed by simulated GPUs."""

    def __init__(
        self,
        gpus: list[SimGpu],
        *,
        init_error: int | None = None,
        driver_has_v3: bool = True,
        driver_has_memory_v2: bool = True,
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.driver_has_v3 = driver_has_v3
        self.driver_has_memory_v2 = driver_has_memory_v2
        self.count_error: int | None = None
        self.calls: list[str] = []
        self.util_since: list[int] = []
        self.memory_versions: list[int | None] = []
        self.unversioned_calls: list[str] = []
        self.module = types.ModuleType("pynvml")
        for name in dir(pynvml):
            if name.startswith(("NVML_", "NVMLError", "NVMLLibraryMismatchError", "nvmlMemory_v")):
                setattr(self.module, name, getattr(pynvml, name))
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(self.module, name, getattr(self, name))

    # errors are raised exactly as pynvml raises them: NVMLError(code) picks the subclass
    def _check(self, fn: str, handle: Handle) -> None:
        self.calls.append(fn)
        if handle.gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in handle.gpu.crashes:
            raise handle.gpu.crashes[fn]
        errors = handle.mig.errors if handle.mig else handle.gpu.errors
        if fn in errors:
            raise pynvml.NVMLError(errors[fn])

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise pynvml.NVMLError(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Handle:
        if index >= len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        handle = Handle(self.gpus[index])
        self._check("nvmlDeviceGetHandleByIndex", handle)
        return handle

    def nvmlDeviceGetUUID(self, handle: Handle) -> str:
        self._check("nvmlDeviceGetUUID", handle)
        return handle.mig.uuid if handle.mig else handle.gpu.uuid

    def nvmlDeviceGetName(self, handle: Handle) -> str:
        self._check("nvmlDeviceGetName", handle)
        return handle.gpu.name

    def nvmlDeviceGetMemoryInfo(self, handle: Handle, version: int | None = None) -> Any:
        self._check("nvmlDeviceGetMemoryInfo", handle)
        self.memory_versions.append(version)
        source = handle.mig or handle.gpu
        if version:
            # pynvml looks the _v2 symbol up; a driver without it has no such function.
            if not self.driver_has_memory_v2:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            assert version == pynvml.nvmlMemory_v2
            used = source.used
        else:
            used = source.used + source.reserved
        return types.SimpleNamespace(total=source.total, used=used, free=source.total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: Handle) -> Any:
        self._check("nvmlDeviceGetUtilizationRates", handle)
        return types.SimpleNamespace(gpu=handle.gpu.util_gpu, memory=handle.gpu.util_mem)

    def nvmlDeviceGetTemperature(self, handle: Handle, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", handle)
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return handle.gpu.temperature

    def nvmlDeviceGetPowerUsage(self, handle: Handle) -> int:
        self._check("nvmlDeviceGetPowerUsage", handle)
        return handle.gpu.power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Handle) -> int:
        self._check("nvmlDeviceGetEnforcedPowerLimit", handle)
        return handle.gpu.limit_mw

    def nvmlDeviceGetMigMode(self, handle: Handle) -> list[int]:
        self._check("nvmlDeviceGetMigMode", handle)
        if handle.gpu.mig_mode is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [handle.gpu.mig_mode, handle.gpu.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Handle) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", handle)
        return len(handle.gpu.mig)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Handle, index: int) -> Handle:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        mig = handle.gpu.mig[index]
        if mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        if isinstance(mig, int):
            raise pynvml.NVMLError(mig)
        return Handle(handle.gpu, mig)

    def nvmlDeviceGetGpuInstanceId(self, handle: Handle) -> int:
        self._check("nvmlDeviceGetGpuInstanceId", handle)
        assert handle.mig is not None
        return handle.mig.gi

    def nvmlDeviceGetComputeInstanceId(self, handle: Handle) -> int:
        self._check("nvmlDeviceGetComputeInstanceId", handle)
        assert handle.mig is not None
        return handle.mig.ci

    @staticmethod
    def _infos(entries: list[tuple[int, int | None]]) -> list[Any]:
        # pynvml's friendly objects; it already turns "not available" into None.
        return [
            types.SimpleNamespace(
                pid=pid, usedGpuMemory=mem, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
            )
            for pid, mem in entries
        ]

    def _unversioned(self, fn: str) -> None:
        # pynvml's @throwOnVersionMismatch: the unversioned call wraps the _v3 symbol.
        self.unversioned_calls.append(fn)
        if not self.driver_has_v3:
            raise pynvml.NVMLLibraryMismatchError(f"use a versioned function such as {fn}_v2")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Handle) -> list[Any]:
        self._unversioned("nvmlDeviceGetComputeRunningProcesses")
        return self.nvmlDeviceGetComputeRunningProcesses_v2(handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Handle) -> list[Any]:
        self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        return self._infos(handle.mig.compute if handle.mig else handle.gpu.compute)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Handle) -> list[Any]:
        self._unversioned("nvmlDeviceGetGraphicsRunningProcesses")
        return self.nvmlDeviceGetGraphicsRunningProcesses_v2(handle)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Handle) -> list[Any]:
        self._check("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return [] if handle.mig else self._infos(handle.gpu.graphics)

    def nvmlDeviceGetProcessUtilization(self, handle: Handle, timeStamp: int) -> list[Any]:
        self._check("nvmlDeviceGetProcessUtilization", handle)
        # NVML documents utilization queries as not supported in MIG mode.
        if handle.mig is not None or handle.gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.util_since.append(timeStamp)
        fresh = [s for s in handle.gpu.samples if s[1] > timeStamp]
        if not fresh:
            # What NVML does on an idle GPU: no samples newer than timeStamp. Depending on the
            # driver the sizing call returns NOT_FOUND or SUCCESS; pynvml raises either.
            raise pynvml.NVMLError(handle.gpu.idle_return)
        return [
            types.SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, ts, sm in fresh
        ]


def source_for(
    *gpus: SimGpu, window: float = 2.0, **driver: bool
) -> tuple[NvmlGpuSource, StandInNvml]:
    nvml = StandInNvml(list(gpus), **driver)
    return NvmlGpuSource(nvml.module, utilization_window=window, clock=lambda: NOW), nvml


def test_reads_every_metric_and_converts_power_to_watts() -> None:
    source, _ = source_for(SimGpu("GPU-a", compute=[(100, 1 << 30)]))
    node = source.sample()
    assert (node.driver_version, node.cuda_driver_version, node.error) == ("550.90.07", 12040, None)
    (gpu,) = node.gpus
    assert gpu.index == 0 and gpu.uuid == "GPU-a" and gpu.name == "NVIDIA H200"
    assert (gpu.memory_total_bytes, gpu.memory_used_bytes) == (150754820096, 2147483648)
    assert (gpu.utilization_gpu, gpu.utilization_memory, gpu.temperature_c) == (87, 40, 55)
    assert (gpu.power_usage_watts, gpu.power_limit_watts) == (350.5, 700.0)
    assert gpu.mig_enabled is None and gpu.field_errors == {"mig_enabled": "NOT_SUPPORTED"}
    assert [(p.pid, p.type, p.used_memory_bytes) for p in gpu.processes] == [
        (100, ProcessType.COMPUTE, 1 << 30)
    ]


@pytest.mark.parametrize("idle_return", [pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_SUCCESS])
def test_idle_gpu_without_process_utilization_samples_is_not_an_error(idle_return: int) -> None:
    sim = SimGpu("GPU-a", compute=[(100, 1 << 30)], samples=[], idle_return=idle_return)
    source, nvml = source_for(sim)
    (gpu,) = source.sample().gpus
    assert gpu.error is None
    assert "processes.sm_utilization" not in gpu.field_errors
    assert [(p.pid, p.sm_utilization) for p in gpu.processes] == [(100, None)]
    assert "nvmlDeviceGetProcessUtilization" in nvml.calls


def test_sm_utilization_takes_the_latest_sample_inside_the_window() -> None:
    window_start = NOW_US - 2_000_000
    samples = [
        (100, window_start - 10, 99),  # too old: before the window
        (100, NOW_US - 900_000, 20),
        (100, NOW_US - 100_000, 35),  # the latest for PID 100
        (200, NOW_US - 500_000, 70),
    ]
    gpu_sim = SimGpu("GPU-a", compute=[(100, 1), (200, 2), (300, 3)], samples=samples)
    source, nvml = source_for(gpu_sim, window=2.0)
    (gpu,) = source.sample().gpus
    assert nvml.util_since == [window_start]
    assert {p.pid: p.sm_utilization for p in gpu.processes} == {100: 35, 200: 70, 300: None}


@pytest.mark.parametrize("unavailable", [None, NVML_VALUE_NOT_AVAILABLE])
def test_not_available_used_gpu_memory_becomes_none(unavailable: int | None) -> None:
    source, _ = source_for(SimGpu("GPU-a", compute=[(100, unavailable), (101, 0)]))
    (gpu,) = source.sample().gpus
    assert {p.pid: p.used_memory_bytes for p in gpu.processes} == {100: None, 101: 0}


def test_compute_and_graphics_lists_merge_into_one_entry_per_pid() -> None:
    sim = SimGpu(
        "GPU-a",
        compute=[(100, 1 << 30), (200, 5)],
        graphics=[(100, 1 << 30), (300, None)],
    )
    source, _ = source_for(sim)
    (gpu,) = source.sample().gpus
    by_pid = {p.pid: p for p in gpu.processes}
    assert len(gpu.processes) == 3
    assert by_pid[100].type is ProcessType.BOTH and by_pid[100].used_memory_bytes == 1 << 30
    assert by_pid[200].type is ProcessType.COMPUTE
    assert by_pid[300].type is ProcessType.GRAPHICS and by_pid[300].used_memory_bytes is None


def test_a_lost_gpu_is_reported_on_that_gpu_only() -> None:
    healthy = SimGpu("GPU-ok", compute=[(100, 1)])
    failing = SimGpu("GPU-lost", name="NVIDIA A100", compute=[(200, 1)])
    source, _ = source_for(healthy, failing)
    assert source.sample().gpus[1].error is None
    failing.lost = True
    node = source.sample()
    ok, lost = node.gpus
    assert node.error is None
    assert ok.error is None and [p.pid for p in ok.processes] == [100]
    # Identity from the last good scan; no metrics and no processes.
    assert lost == GpuSample(index=1, uuid="GPU-lost", name="NVIDIA A100", error="GPU_IS_LOST")


def test_a_gpu_lost_halfway_through_its_fields_drops_the_partial_metrics() -> None:
    sim = SimGpu("GPU-a", compute=[(100, 1)])
    sim.errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_GPU_IS_LOST
    source, _ = source_for(sim)
    (gpu,) = source.sample().gpus
    assert gpu == GpuSample(index=0, uuid="GPU-a", error="GPU_IS_LOST")


def test_a_not_supported_field_is_none_with_a_field_error() -> None:
    sim = SimGpu("GPU-a", compute=[(100, 1)])
    sim.errors["nvmlDeviceGetPowerUsage"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    sim.errors["nvmlDeviceGetUtilizationRates"] = pynvml.NVML_ERROR_NO_PERMISSION
    source, _ = source_for(sim)
    (gpu,) = source.sample().gpus
    assert gpu.error is None
    assert gpu.power_usage_watts is None and gpu.power_limit_watts == 700.0
    assert gpu.utilization_gpu is None and gpu.utilization_memory is None
    assert gpu.field_errors == {
        "power_usage_watts": "NOT_SUPPORTED",
        "utilization_gpu": "NO_PERMISSION",
        "utilization_memory": "NO_PERMISSION",
        "mig_enabled": "NOT_SUPPORTED",
    }
    assert gpu.temperature_c == 55 and [p.pid for p in gpu.processes] == [100]


def test_mig_processes_are_read_per_mig_device() -> None:
    sim = SimGpu(
        "GPU-mig",
        mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE,
        # The parent's own list is not what MIG-aware tools read; it must not leak in.
        compute=[(999, 1)],
        mig=[
            SimMig("MIG-a", gi=1, ci=0, compute=[(100, 1 << 30)]),
            None,  # an empty slot: NOT_FOUND
            SimMig("MIG-c", gi=2, ci=0, compute=[(200, 2 << 30), (201, None)]),
        ],
    )
    source, nvml = source_for(sim)
    (gpu,) = source.sample().gpus
    assert gpu.error is None and gpu.mig_enabled is True
    assert [
        (d.index, d.uuid, d.gpu_instance_id, d.compute_instance_id) for d in gpu.mig_devices
    ] == [
        (0, "MIG-a", 1, 0),
        (2, "MIG-c", 2, 0),
    ]
    assert gpu.mig_devices[0].memory_total_bytes == 20 << 30
    assert {p.pid: (p.mig_device_uuid, p.used_memory_bytes) for p in gpu.processes} == {
        100: ("MIG-a", 1 << 30),
        200: ("MIG-c", 2 << 30),
        201: ("MIG-c", None),
    }
    # NVML does not support utilization queries in MIG mode; SM is unknown, not an error.
    assert all(p.sm_utilization is None for p in gpu.processes)
    assert gpu.field_errors == {}
    assert "nvmlDeviceGetProcessUtilization" not in nvml.calls


def test_a_failed_mig_enumeration_marks_the_process_list_incomplete() -> None:
    sim = SimGpu("GPU-mig", mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE, mig=[SimMig("MIG-a", 1, 0)])
    sim.errors["nvmlDeviceGetMaxMigDeviceCount"] = pynvml.NVML_ERROR_NO_PERMISSION
    source, _ = source_for(sim)
    (gpu,) = source.sample().gpus
    assert gpu.error is None and gpu.processes == [] and gpu.mig_devices == []
    # No processes here means "could not read them", not an idle GPU.
    assert gpu.field_errors == {"mig_devices": "NO_PERMISSION", "processes": "NO_PERMISSION"}


def test_mig_device_errors_are_kept_apart_by_mig_index() -> None:
    first = SimMig("MIG-a", gi=1, ci=0, compute=[(100, 1)])
    first.errors["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    third = SimMig("MIG-c", gi=2, ci=0, compute=[(200, 1)])
    third.errors["nvmlDeviceGetMemoryInfo"] = pynvml.NVML_ERROR_NO_PERMISSION
    third.errors["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_UNKNOWN
    sim = SimGpu(
        "GPU-mig",
        mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE,
        mig=[first, pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, third],
    )
    source, _ = source_for(sim)
    (gpu,) = source.sample().gpus
    assert gpu.error is None
    assert [d.uuid for d in gpu.mig_devices] == ["MIG-a", "MIG-c"]
    assert [p.pid for p in gpu.processes] == [100]
    assert gpu.field_errors == {
        "mig_devices[0].memory": "NOT_SUPPORTED",
        "mig_devices[1]": "INSUFFICIENT_RESOURCES",
        "processes": "INSUFFICIENT_RESOURCES",
        "mig_devices[2].memory": "NO_PERMISSION",
        "mig_devices[2].processes.compute": "UNKNOWN",
    }


def test_compute_and_graphics_list_failures_are_reported_apart() -> None:
    sim = SimGpu("GPU-a", compute=[(100, 1)], graphics=[(200, 2)])
    sim.errors["nvmlDeviceGetComputeRunningProcesses"] = pynvml.NVML_ERROR_NO_PERMISSION
    source, _ = source_for(sim)
    (gpu,) = source.sample().gpus
    assert [(p.pid, p.type) for p in gpu.processes] == [(200, ProcessType.GRAPHICS)]
    assert gpu.field_errors == {
        "processes.compute": "NO_PERMISSION",
        "mig_enabled": "NOT_SUPPORTED",
    }


def test_a_driver_without_v3_process_calls_is_read_with_the_v2_calls() -> None:
    sim = SimGpu("GPU-a", compute=[(100, 1 << 30)], graphics=[(100, 1 << 30), (200, None)])
    source, nvml = source_for(sim, driver_has_v3=False)
    for _ in range(2):
        (gpu,) = source.sample().gpus
        assert gpu.error is None and "processes.compute" not in gpu.field_errors
        assert {p.pid: p.type for p in gpu.processes} == {
            100: ProcessType.BOTH,
            200: ProcessType.GRAPHICS,
        }
    # The mismatch is learnt once; later scans go straight to the _v2 calls.
    assert nvml.unversioned_calls == ["nvmlDeviceGetComputeRunningProcesses"]


def test_a_pynvml_without_v2_fallbacks_costs_only_the_process_lists() -> None:
    source, nvml = source_for(SimGpu("GPU-a", compute=[(100, 1)]), driver_has_v3=False)
    del nvml.module.nvmlDeviceGetComputeRunningProcesses_v2
    del nvml.module.nvmlDeviceGetGraphicsRunningProcesses_v2
    (gpu,) = source.sample().gpus
    assert gpu.error is None and gpu.processes == [] and gpu.utilization_gpu == 87
    assert gpu.field_errors["processes.compute"] == "LIBRARY_MISMATCH"
    assert gpu.field_errors["processes.graphics"] == "LIBRARY_MISMATCH"


def test_an_unexpected_exception_on_one_gpu_is_that_gpus_error_only() -> None:
    healthy = SimGpu("GPU-ok", compute=[(100, 1)])
    broken = SimGpu("GPU-odd", name="NVIDIA A100")
    broken.crashes["nvmlDeviceGetTemperature"] = RuntimeError("ctypes went sideways")
    source, _ = source_for(healthy, broken)
    node = source.sample()
    ok, failed = node.gpus
    assert node.error is None
    assert ok.error is None and [p.pid for p in ok.processes] == [100]
    assert failed == GpuSample(index=1, uuid="GPU-odd", error="RuntimeError")


def test_memory_is_read_with_v2_which_leaves_reserved_memory_out() -> None:
    source, nvml = source_for(SimGpu("GPU-a", used=2 << 30, reserved=1 << 30))
    (gpu,) = source.sample().gpus
    assert gpu.memory_used_bytes == 2 << 30
    assert nvml.memory_versions == [pynvml.nvmlMemory_v2]


def test_memory_falls_back_to_v1_on_a_driver_without_v2() -> None:
    sim = SimGpu("GPU-a", used=2 << 30, reserved=1 << 30)
    source, nvml = source_for(sim, driver_has_memory_v2=False)
    for _ in range(2):
        (gpu,) = source.sample().gpus
        assert gpu.memory_used_bytes == 3 << 30 and gpu.memory_total_bytes == sim.total
        assert "memory_used_bytes" not in gpu.field_errors
    # v2 is asked once; after FUNCTION_NOT_FOUND only v1.
    assert nvml.memory_versions == [pynvml.nvmlMemory_v2, None, None]


def test_mig_capable_gpu_with_mig_off_reads_the_whole_gpu() -> None:
    sim = SimGpu("GPU-a", mig_mode=0, compute=[(100, 1)], mig=[SimMig("MIG-x", 1, 0)])
    source, _ = source_for(sim)
    (gpu,) = source.sample().gpus
    assert (
        gpu.mig_enabled is False and gpu.mig_devices == [] and "mig_enabled" not in gpu.field_errors
    )
    assert [(p.pid, p.mig_device_uuid) for p in gpu.processes] == [(100, None)]


def test_a_failing_device_count_is_a_node_error() -> None:
    source, nvml = source_for(SimGpu("GPU-a"))
    nvml.count_error = pynvml.NVML_ERROR_UNKNOWN
    node = source.sample()
    assert node.error == "UNKNOWN" and node.gpus == []
    assert node.driver_version == "550.90.07"


def test_missing_library_is_a_clear_startup_error() -> None:
    nvml = StandInNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(NvmlUnavailableError) as caught:
        NvmlGpuSource(nvml.module)
    message = str(caught.value)
    assert "libnvidia-ml.so.1" in message
    assert "NVIDIA_VISIBLE_DEVICES=all" in message
    assert "NVIDIA_DRIVER_CAPABILITIES" in message


def test_missing_library_with_the_real_pynvml_module() -> None:
    skip_if_nvml_loads()
    with pytest.raises(NvmlUnavailableError, match="NVIDIA_VISIBLE_DEVICES=all"):
        NvmlGpuSource()


def test_close_shuts_nvml_down_once() -> None:
    source, nvml = source_for(SimGpu("GPU-a"))
    source.close()
    source.close()
    assert nvml.calls.count("nvmlShutdown") == 1


def test_a_fake_file_error_gpu_looks_exactly_like_an_nvml_lost_gpu(tmp_path: Path) -> None:
    sim = SimGpu("GPU-x", name="NVIDIA H200")
    real, _ = source_for(sim)
    real.sample()
    sim.lost = True
    (from_nvml,) = real.sample().gpus
    path = tmp_path / "nvml.json"
    gpu = {"index": 0, "uuid": "GPU-x", "name": "NVIDIA H200", "error": "GPU_IS_LOST"}
    gpu |= {"memoryTotalBytes": 1, "utilizationGpu": 5, "processes": [{"pid": 1}]}
    write_fake_nvml(path, {"gpus": [gpu]})
    (from_file,) = FakeGpuSource(path).sample().gpus
    assert from_file == from_nvml

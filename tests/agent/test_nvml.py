"""NvmlGpuSource against a stand-in ``pynvml`` module: what the C fake cannot express.

The real NVML path (nvidia-ml-py over the fake libnvidia-ml.so.1) is tested in
test_nvml_library.py. This stand-in covers the rest: what the source learns
once and stops asking, exceptions outside pynvml's NVMLError family, a pynvml
without the _v2 fallbacks, and the sizing call's SUCCESS on an idle GPU. It
reuses nvidia-ml-py's own constants and NVMLError classes, and agrees with real
NVML where both can speak (e.g. no utilization in MIG mode).
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
import pytest

from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.models import GpuSample, ProcessType
from node_resolver.nvml import NvmlGpuSource
from tests.support.libnvml import FakeGpu, FakeMig, FakeNode, FakeProcess, build_library, probe

NOW = 1_800_000_000.0  # the test clock, Unix seconds


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
        driver_has_v3: bool = True,
        driver_has_memory_v2: bool = True,
        mismatch_as_lookup_error: bool = False,
    ) -> None:
        self.gpus = gpus
        self.driver_has_v3 = driver_has_v3
        self.driver_has_memory_v2 = driver_has_memory_v2
        self.mismatch_as_lookup_error = mismatch_as_lookup_error
        self.calls: list[str] = []
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
        pass

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
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
        # As in nvml.h: not supported in MIG mode, for the GPU as for its MIG devices.
        if handle.mig is not None or handle.gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
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
            if self.mismatch_as_lookup_error:  # nvidia-ml-py 12.535's way
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
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


def test_idle_gpu_whose_sizing_call_returns_success_is_not_an_error() -> None:
    # Some drivers answer an idle GPU's sizing call with SUCCESS, which pynvml raises.
    sim = SimGpu("GPU-a", compute=[(100, 1 << 30)], samples=[], idle_return=pynvml.NVML_SUCCESS)
    source, nvml = source_for(sim)
    (gpu,) = source.sample().gpus
    assert gpu.error is None
    assert "processes.sm_utilization" not in gpu.field_errors
    assert [(p.pid, p.sm_utilization) for p in gpu.processes] == [(100, None)]
    assert "nvmlDeviceGetProcessUtilization" in nvml.calls


@pytest.mark.parametrize("mismatch_as_lookup_error", [False, True])
def test_a_driver_without_v3_process_calls_is_read_with_the_v2_calls(
    mismatch_as_lookup_error: bool,
) -> None:
    sim = SimGpu("GPU-a", compute=[(100, 1 << 30)], graphics=[(100, 1 << 30), (200, None)])
    source, nvml = source_for(
        sim, driver_has_v3=False, mismatch_as_lookup_error=mismatch_as_lookup_error
    )
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


def test_memory_falls_back_to_v1_on_a_driver_without_v2() -> None:
    sim = SimGpu("GPU-a", used=2 << 30, reserved=1 << 30)
    source, nvml = source_for(sim, driver_has_memory_v2=False)
    for _ in range(2):
        (gpu,) = source.sample().gpus
        assert gpu.memory_used_bytes == 3 << 30 and gpu.memory_total_bytes == sim.total
        assert "memory_used_bytes" not in gpu.field_errors
    # v2 is asked once; after FUNCTION_NOT_FOUND only v1.
    assert nvml.memory_versions == [pynvml.nvmlMemory_v2, None, None]


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


def test_the_stand_in_agrees_with_the_c_library_on_a_mig_gpu(tmp_path: Path) -> None:
    mig: list[SimMig | int | None] = [
        SimMig("MIG-a", gi=1, ci=0, compute=[(100, 1 << 30)]),
        None,
        SimMig("MIG-c", gi=2, ci=0, compute=[(200, 2 << 30), (201, None)]),
    ]
    sim = SimGpu("GPU-mig", mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE, compute=[(999, 1)], mig=mig)
    stand_in, _ = source_for(sim)
    from_stand_in = dataclasses.asdict(stand_in.sample().gpus[0])

    def library_mig(slot: SimMig | int | None) -> FakeMig | None:
        if not isinstance(slot, SimMig):
            return None
        processes = [FakeProcess(pid, memory) for pid, memory in slot.compute]
        return FakeMig(slot.uuid, slot.gi, slot.ci, slot.total, slot.used, processes)

    gpu = FakeGpu(
        "GPU-mig",
        total=sim.total,
        used=sim.used,
        mig_mode=1,
        processes=[FakeProcess(999, 1)],
        mig=[library_mig(slot) for slot in mig],
    )
    config = FakeNode([gpu], driver="550.90.07").write(tmp_path / "nvml.conf")
    (scan,) = probe(build_library(), config, now=NOW).scans
    (from_library,) = scan["gpus"]
    # The probe's JSON spells enums by value.
    for process in from_stand_in["processes"]:
        process["type"] = process["type"].value
    assert from_stand_in == from_library
    assert from_library["field_errors"] == {
        "utilization_gpu": "NOT_SUPPORTED",
        "utilization_memory": "NOT_SUPPORTED",
    }

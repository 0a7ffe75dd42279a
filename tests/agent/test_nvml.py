"""NvmlGpuSource against a stand-in ``pynvml`` module: what the C fake cannot express.

The real NVML path (nvidia-ml-py over the fake libnvidia-ml.so.1) is tested in
test_nvml_library.py. This stand-in covers the rest: what the source learns
once and stops asking, exceptions outside pynvml's NVMLError family, a pynvml
without the _v2 fallbacks or with internals the reader cannot call, a driver
without nvmlInitWithFlags, and the sizing call's SUCCESS on an idle GPU. It
reuses nvidia-ml-py's own constants and NVMLError classes, and agrees with real
NVML where both can speak (e.g. no utilization in MIG mode; a test compares the
two).
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml
import pytest

from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.models import GpuSample, ProcessType
from node_resolver.nvml import NvmlGpuSource, NvmlUnavailableError
from tests.support.libnvml import FakeGpu, FakeMig, FakeNode, FakeProcess, build_library, probe

NOW = 1_800_000_000.0  # the test clock, Unix seconds


@dataclass(frozen=True)
class Handle:
    gpu: FakeGpu
    mig: FakeMig | None = None


class StandInNvml:
    """Builds a module object with pynvml's names, backed by the GPUs the C library reads."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver_has_v3: bool = True,
        driver_has_memory_v2: bool = True,
        idle_return: int = pynvml.NVML_ERROR_NOT_FOUND,
        crashes: dict[tuple[str, str], Exception] | None = None,
    ) -> None:
        self.gpus = gpus
        # What the sizing call of nvmlDeviceGetProcessUtilization returns with no samples.
        self.idle_return = idle_return
        # (GPU UUID, function) -> an exception pynvml raises outside its NVMLError family
        self.crashes = crashes or {}
        self.driver_has_v3 = driver_has_v3
        self.driver_has_memory_v2 = driver_has_memory_v2
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
        if (handle.gpu.uuid, fn) in self.crashes:
            raise self.crashes[handle.gpu.uuid, fn]
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

    def nvmlDeviceGetMinorNumber(self, handle: Handle) -> int:
        self._check("nvmlDeviceGetMinorNumber", handle)
        return self.gpus.index(handle.gpu)

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
            used = source.used + (handle.gpu.reserved if handle.mig is None else 0)
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
    def _infos(handle: Handle, graphics: bool) -> list[Any]:
        # pynvml's friendly objects; it already turns "not available" into None.
        device = handle.mig or handle.gpu
        return [
            types.SimpleNamespace(
                pid=p.pid,
                usedGpuMemory=p.memory,
                gpuInstanceId=handle.mig.gi if handle.mig else 0xFFFFFFFF,
                computeInstanceId=handle.mig.ci if handle.mig else 0xFFFFFFFF,
            )
            for p in device.processes
            if (p.graphics if graphics else p.compute)
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
        return self._infos(handle, graphics=False)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Handle) -> list[Any]:
        self._unversioned("nvmlDeviceGetGraphicsRunningProcesses")
        return self.nvmlDeviceGetGraphicsRunningProcesses_v2(handle)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Handle) -> list[Any]:
        self._check("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return self._infos(handle, graphics=True)

    def nvmlDeviceGetProcessUtilization(self, handle: Handle, timeStamp: int) -> list[Any]:
        self._check("nvmlDeviceGetProcessUtilization", handle)
        # NVML documents utilization queries as not supported in MIG mode.
        if handle.mig is not None or handle.gpu.mig_mode == pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        fresh = [s for s in handle.gpu.samples if s[1] > timeStamp]
        if not fresh:
            # What NVML does on an idle GPU: no samples newer than timeStamp. Depending on the
            # driver the sizing call returns NOT_FOUND or SUCCESS; pynvml raises either.
            raise pynvml.NVMLError(self.idle_return)
        return [
            types.SimpleNamespace(pid=pid, timeStamp=ts, smUtil=sm, memUtil=0, encUtil=0, decUtil=0)
            for pid, ts, sm in fresh
        ]


def source_for(
    *gpus: FakeGpu, window: float = 2.0, **driver: Any
) -> tuple[NvmlGpuSource, StandInNvml]:
    nvml = StandInNvml(list(gpus), **driver)
    return NvmlGpuSource(nvml.module, utilization_window=window, clock=lambda: NOW), nvml


def test_idle_gpu_whose_sizing_call_returns_success_is_not_an_error() -> None:
    # Some drivers answer an idle GPU's sizing call with SUCCESS, which pynvml raises.
    sim = FakeGpu("GPU-a", processes=[FakeProcess(100)])
    source, nvml = source_for(sim, idle_return=pynvml.NVML_SUCCESS)
    (gpu,) = source.sample().gpus
    assert gpu.error is None
    assert "processes.sm_utilization" not in gpu.field_errors
    assert [(p.pid, p.sm_utilization) for p in gpu.processes] == [(100, None)]
    assert "nvmlDeviceGetProcessUtilization" in nvml.calls


def test_a_driver_without_v3_process_calls_is_read_with_the_v2_calls() -> None:
    sim = FakeGpu(
        "GPU-a",
        processes=[
            FakeProcess(100, graphics=True),
            FakeProcess(200, None, compute=False, graphics=True),
        ],
    )
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
    source, nvml = source_for(FakeGpu("GPU-a", processes=[FakeProcess(100)]), driver_has_v3=False)
    del nvml.module.nvmlDeviceGetComputeRunningProcesses_v2
    del nvml.module.nvmlDeviceGetGraphicsRunningProcesses_v2
    (gpu,) = source.sample().gpus
    assert gpu.error is None and gpu.processes == [] and gpu.utilization_gpu == 87
    assert gpu.field_errors["processes.compute"] == "LIBRARY_MISMATCH"
    assert gpu.field_errors["processes.graphics"] == "LIBRARY_MISMATCH"


def test_an_unexpected_exception_on_one_gpu_is_that_gpus_error_only() -> None:
    healthy = FakeGpu("GPU-ok", processes=[FakeProcess(100)])
    broken = FakeGpu("GPU-odd", name="NVIDIA A100")
    crash = RuntimeError("ctypes went sideways")
    source, _ = source_for(
        healthy, broken, crashes={("GPU-odd", "nvmlDeviceGetTemperature"): crash}
    )
    node = source.sample()
    ok, failed = node.gpus
    assert node.error is None
    assert ok.error is None and [p.pid for p in ok.processes] == [100]
    assert failed == GpuSample(index=1, uuid="GPU-odd", error="RuntimeError")


def test_memory_falls_back_to_v1_on_a_driver_without_v2() -> None:
    sim = FakeGpu("GPU-a", used=2 << 30, reserved=1 << 30)
    source, nvml = source_for(sim, driver_has_memory_v2=False)
    for _ in range(2):
        (gpu,) = source.sample().gpus
        assert gpu.memory_used_bytes == 3 << 30 and gpu.memory_total_bytes == sim.total
        assert "memory_used_bytes" not in gpu.field_errors
    # v2 is asked once; after FUNCTION_NOT_FOUND only v1.
    assert nvml.memory_versions == [pynvml.nvmlMemory_v2, None, None]


def test_close_shuts_nvml_down_once() -> None:
    source, nvml = source_for(FakeGpu("GPU-a"))
    source.close()
    source.close()
    assert nvml.calls.count("nvmlShutdown") == 1


def test_a_fake_file_error_gpu_looks_exactly_like_an_nvml_lost_gpu(tmp_path: Path) -> None:
    sim = FakeGpu("GPU-x", name="NVIDIA H200")
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
    gpu = FakeGpu(
        "GPU-mig",
        mig_mode=pynvml.NVML_DEVICE_MIG_ENABLE,
        processes=[FakeProcess(999, 1)],
        samples=[(100, int(NOW * 1_000_000), 50)],
        mig=[
            FakeMig("MIG-a", gi=1, processes=[FakeProcess(100, 1 << 30, graphics=True)]),
            None,
            FakeMig("MIG-c", gi=2, processes=[FakeProcess(200, 2 << 30), FakeProcess(201, None)]),
        ],
    )
    stand_in, _ = source_for(gpu)
    from_stand_in = dataclasses.asdict(stand_in.sample().gpus[0])
    config = FakeNode([gpu]).write(tmp_path / "nvml.conf")
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


def test_a_process_list_the_reader_cannot_call_is_a_field_error_not_a_guess() -> None:
    # An nvidia-ml-py whose symbol lookup hands back something the reader cannot call.
    source_sim = FakeGpu("GPU-a", processes=[FakeProcess(100)])
    nvml = StandInNvml([source_sim])
    vars(nvml.module)["_nvmlGetFunctionPointer"] = lambda name: object()
    source = NvmlGpuSource(nvml.module, clock=lambda: NOW)
    (gpu,) = source.sample().gpus
    assert gpu.error is None and gpu.processes == [] and gpu.utilization_gpu == 87
    assert gpu.field_errors["processes.compute"] == "PROCESS_LIST_UNREADABLE"
    assert gpu.field_errors["processes.graphics"] == "PROCESS_LIST_UNREADABLE"


def test_a_driver_without_init_with_flags_is_named_as_too_old() -> None:
    nvml = StandInNvml([])

    def init() -> None:
        # pynvml's nvmlInit looks nvmlInitWithFlags up; a driver that old lacks the symbol.
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    vars(nvml.module)["nvmlInit"] = init
    with pytest.raises(NvmlUnavailableError) as refused:
        NvmlGpuSource(nvml.module)
    assert str(refused.value) == (
        "cannot start NVML: libnvidia-ml.so.1 lacks nvmlInitWithFlags: the NVIDIA driver is "
        "older than the R450 gpugraph needs"
    )


def test_a_driver_without_r550s_utilization_call_is_asked_once_then_read_the_legacy_way() -> None:
    sim = FakeGpu("GPU-a", processes=[FakeProcess(100)], samples=[(100, int(NOW * 1e6), 40)])
    nvml = StandInNvml([sim])
    asked: list[int] = []

    def utilization_info(handle: Handle, timeStamp: int) -> list[Any]:
        # pynvml looks the symbol up on each call; a driver before R550 has none.
        asked.append(timeStamp)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    vars(nvml.module)["nvmlDeviceGetProcessesUtilizationInfo"] = utilization_info
    source = NvmlGpuSource(nvml.module, clock=lambda: NOW)
    for _ in range(2):
        (gpu,) = source.sample().gpus
        assert [(p.pid, p.sm_utilization) for p in gpu.processes] == [(100, 40)]
        assert "processes.sm_utilization" not in gpu.field_errors
    assert len(asked) == 1 and nvml.calls.count("nvmlDeviceGetProcessUtilization") == 2


def test_a_driver_without_the_mps_call_is_asked_once_and_its_lists_stay_complete() -> None:
    nvml = StandInNvml([FakeGpu("GPU-a", processes=[FakeProcess(100)])])
    asked: list[Handle] = []

    def mps_clients(handle: Handle) -> list[Any]:
        asked.append(handle)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    vars(nvml.module)["nvmlDeviceGetMPSComputeRunningProcesses"] = mps_clients
    source = NvmlGpuSource(nvml.module, clock=lambda: NOW)
    for _ in range(2):
        (gpu,) = source.sample().gpus
        assert [p.pid for p in gpu.processes] == [100] and gpu.process_list_complete()
        assert "processes.mps" not in gpu.field_errors
    assert len(asked) == 1

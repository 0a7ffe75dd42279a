"""The real GPU source: NVML through the ``pynvml`` module of nvidia-ml-py.

Errors stay as local as NVML lets them: a failing field (NOT_SUPPORTED,
NO_PERMISSION, ...) is reported on that field, a failing GPU (GPU_IS_LOST, ...)
on that GPU, and the rest of the node still answers. Only a missing or
unusable NVML library at startup is fatal.

``pynvml`` is imported lazily, and a module object with the same functions
can be passed in instead; tests use that to drive this exact code. With
nvidia-ml-py the process lists are read in the driver's own entry layout
(``nvml_process_info``); other modules' are read through their own functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .gpu_source import merge_processes
from .models import GpuProcess, GpuSample, MigDevice, NodeSample, ProcessType
from .nvml_process_info import (
    R535_ENTRY_BYTES,
    EntryLayoutError,
    ProcessListReader,
    process_list_layout,
)

T = TypeVar("T")

log = logging.getLogger(__name__)

# NVML's "value not available" for unsigned 64-bit fields; pynvml maps it to
# None for process memory, but older releases and other paths pass it through.
NVML_VALUE_NOT_AVAILABLE = 2**64 - 1

# Errors after which nothing else on the GPU can be trusted; any other error
# on a field only costs that field.
GPU_FATAL_ERRORS = frozenset(
    {
        "GPU_IS_LOST",
        "RESET_REQUIRED",
        "UNINITIALIZED",
        "DRIVER_NOT_LOADED",
        "LIB_RM_VERSION_MISMATCH",
    }
)

# NVML_SUCCESS: what nvmlDeviceGetProcessUtilization's sizing call returns when there are no
# samples at all; pynvml raises it as an error all the same.
NVML_SUCCESS = 0

# Under MPS, clients are listed by their own call (R450 and later), not among compute processes.
MPS_LIST = "nvmlDeviceGetMPSComputeRunningProcesses"
# The process lists, each with the field its failure is reported under.
PROCESS_LISTS = (
    (ProcessType.COMPUTE, "compute", "nvmlDeviceGetComputeRunningProcesses"),
    (ProcessType.GRAPHICS, "graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    (ProcessType.MPS, "mps", MPS_LIST),
)
# What the MPS list answers where no MPS client can run or the driver predates the call: no
# client is missing, so the GPU's process list stays complete. The first two mean the driver.
MPS_ABSENT = frozenset({"FUNCTION_NOT_FOUND", "LIBRARY_MISMATCH", "NOT_SUPPORTED"})

# Per-process utilization: R550's call first; Blackwell answers only it, and older drivers
# only the legacy one.
UTILIZATION_INFO = "nvmlDeviceGetProcessesUtilizationInfo"
# What R550's call answers when the legacy call may still have the samples: not on this
# driver, not for this GPU, or not in the struct version this nvidia-ml-py writes.
UTILIZATION_INFO_ABSENT = frozenset(
    {"FUNCTION_NOT_FOUND", "NOT_SUPPORTED", "ARGUMENT_VERSION_MISMATCH"}
)

# The name nvidia-ml-py dlopens on Linux.
NVML_LIBRARY = "libnvidia-ml.so.1"

# The field error of a process list the reader could not call through this nvidia-ml-py.
PROCESS_LIST_ERROR = "PROCESS_LIST_UNREADABLE"
# The field error of a process list whose entries are not the size the driver's symbols promised.
PROCESS_LAYOUT_ERROR = "PROCESS_LIST_LAYOUT_MISMATCH"

MISSING_LIBRARY_HINT = (
    f"the NVML library {NVML_LIBRARY} was not found. In Kubernetes this usually means the "
    "agent pod was started without the NVIDIA container runtime (set runtimeClassName: nvidia "
    "or make it the default runtime) or without the environment that makes the runtime mount "
    "the driver: NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES=utility (or =all). "
    "A runtime that ignores that variable in unprivileged pods "
    "(accept-nvidia-visible-devices-envvar-when-unprivileged=false), a CDI-only runtime or "
    "GKE's driver install needs the Helm chart's agent.nvml.mode (docs/nvml.md). "
    "Use --nvml-fake PATH to run without a GPU."
)


# Why NVML would not start, per error name; each is the whole one-line message after
# "cannot start NVML: ".
INIT_FAILURES = {
    "DRIVER_NOT_LOADED": "the NVIDIA kernel driver is not loaded on this node",
    "NO_PERMISSION": "no permission to open the NVIDIA device files (/dev/nvidia*)",
    "LIB_RM_VERSION_MISMATCH": (
        f"{NVML_LIBRARY} and the loaded NVIDIA kernel module come from different driver "
        "versions, as after a driver upgrade without a reboot: reboot the node or reload the "
        "nvidia kernel modules"
    ),
    "FUNCTION_NOT_FOUND": (
        f"{NVML_LIBRARY} lacks nvmlInitWithFlags: the NVIDIA driver is older than the "
        "R450 gpugraph needs"
    ),
}


class NvmlUnavailableError(RuntimeError):
    """NVML could not be started, so the agent cannot read the GPUs; the message says why."""


class _NeverRaisedError(Exception):
    """Internal: stands in for exception classes an older pynvml does not define."""


class _GpuFailedError(Exception):
    """Internal: an error that takes the whole GPU down, carrying the NVML error name."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def load_pynvml() -> Any:
    """Import nvidia-ml-py's ``pynvml`` module, or raise NvmlUnavailableError."""
    try:
        import pynvml  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:
        raise NvmlUnavailableError(
            "the Python package nvidia-ml-py (module pynvml) is not installed"
        ) from exc
    return pynvml


class NvmlGpuSource:
    """Reads every GPU on the node through NVML."""

    def __init__(
        self,
        nvml: Any | None = None,
        *,
        utilization_window: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        self._error_names = {
            getattr(self._nvml, attr): attr.removeprefix("NVML_ERROR_")
            for attr in dir(self._nvml)
            if attr.startswith("NVML_ERROR_") and isinstance(getattr(self._nvml, attr), int)
        }
        self._window = utilization_window
        self._clock = clock
        self._closed = False
        # Where process lists go through pynvml's own calls (a module without symbol lookup,
        # or a driver with neither _v3 nor _v2 lists), its unversioned ones need the driver's
        # _v3 entry points and raise this on drivers without them; _v2 works there.
        self._mismatch: type[Exception] = getattr(
            self._nvml, "NVMLLibraryMismatchError", _NeverRaisedError
        )
        self._legacy_process_lists = False
        # Stops asking for MPS clients once the driver shows it has no such call.
        self._mps_listed = True
        # R550's utilization call, until the driver shows it lacks it; GPUs it does not serve.
        self._utilization_info: Callable[..., Any] | None = getattr(
            self._nvml, UTILIZATION_INFO, None
        )
        self._legacy_utilization_gpus: set[int] = set()
        self._memory_v2 = getattr(self._nvml, "nvmlMemory_v2", None)
        # (GPU index, error) pairs already logged, so a broken GPU is logged once, not per scan.
        self._logged: set[tuple[int, str]] = set()
        # UUID and name per index from the last good read, so a GPU that is
        # lost later is still reported under its identity.
        self._identity: dict[int, tuple[str, str | None]] = {}
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise NvmlUnavailableError(self._init_failure(exc)) from exc
        self.driver_version = self._node_value(self._nvml.nvmlSystemGetDriverVersion, _text)
        self.cuda_driver_version = self._node_value(self._nvml.nvmlSystemGetCudaDriverVersion, int)
        self._process_reader = self._process_list_reader()

    def _init_failure(self, exc: Exception) -> str:
        name = self.error_name(exc)
        if name == "LIBRARY_NOT_FOUND":
            return f"cannot start NVML: {_library_failure()}"
        return f"cannot start NVML: {INIT_FAILURES.get(name, f'{name} ({exc})')}"

    def _process_list_reader(self) -> ProcessListReader | None:
        """A reader of the driver's own process-list entries; None without symbol lookup."""
        layout = process_list_layout(self._nvml)
        if layout is None:
            return None
        suffix, entry_bytes = layout
        if entry_bytes == R535_ENTRY_BYTES:
            log.warning(
                "this NVML driver (%s) writes %d-byte process entries through the _v3 process "
                "lists, as early R535 drivers do; reading them with that size",
                self.driver_version,
                entry_bytes,
            )
        return ProcessListReader(self._nvml, suffix, entry_bytes)

    def _node_value(self, read: Callable[[], Any], convert: Callable[[Any], T]) -> T | None:
        try:
            return convert(read())
        except self._nvml.NVMLError:
            return None

    def error_name(self, exc: Exception) -> str:
        """NVML's name for an NVMLError, e.g. "GPU_IS_LOST"."""
        value = getattr(exc, "value", None)
        name = self._error_names.get(value) if isinstance(value, int) else None
        return name or f"NVML_ERROR_{value}"

    def sample(self) -> NodeSample:
        """Scan every GPU once."""
        nvml = self._nvml
        node = NodeSample(
            driver_version=self.driver_version, cuda_driver_version=self.cuda_driver_version
        )
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            node.error = self.error_name(exc)
            return node
        node.gpus = [self._sample_gpu(index) for index in range(count)]
        return node

    def close(self) -> None:
        """Shut NVML down; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()

    # -- one GPU ---------------------------------------------------------------

    def _sample_gpu(self, index: int) -> GpuSample:
        nvml = self._nvml
        uuid: str | None = None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            gpu = GpuSample(index=index, uuid=uuid)
            self._fill(gpu, handle)
        except nvml.NVMLError as exc:
            return self._failed(index, self.error_name(exc), uuid=uuid)
        except _GpuFailedError as failure:
            return self._failed(index, failure.name, uuid=uuid)
        except Exception as exc:
            # Whatever else pynvml throws costs this GPU, not the node.
            error = type(exc).__name__
            if self._first_time(index, error):
                log.warning("reading GPU %d failed", index, exc_info=True)
            return self._failed(index, error, uuid=uuid)
        self._identity[index] = (uuid, gpu.name)
        return gpu

    def _first_time(self, index: int, error: str) -> bool:
        """Whether ``error`` on GPU ``index`` is new, so that it is logged once, not per scan."""
        if (index, error) in self._logged:
            return False
        self._logged.add((index, error))
        return True

    def _failed(self, index: int, error: str, *, uuid: str | None = None) -> GpuSample:
        known_uuid, known_name = self._identity.get(index, ("", None))
        return GpuSample(index=index, uuid=uuid or known_uuid, name=known_name, error=error)

    def _read(
        self, gpu: GpuSample, fields: tuple[str, ...], read: Callable[..., T], *args: Any
    ) -> T | None:
        """Call ``read(*args)``; on a field-level NVML error mark ``fields`` failed, return None."""
        try:
            return read(*args)
        except self._nvml.NVMLError as exc:
            name = self.error_name(exc)
            if name in GPU_FATAL_ERRORS:
                raise _GpuFailedError(name) from exc
            for field_name in fields:
                gpu.field_errors[field_name] = name
            return None

    def _fill(self, gpu: GpuSample, handle: Any) -> None:
        nvml = self._nvml
        gpu.name = self._read(gpu, ("name",), lambda: _text(nvml.nvmlDeviceGetName(handle)))
        gpu.minor_number = self._read(
            gpu, ("minor_number",), lambda: int(nvml.nvmlDeviceGetMinorNumber(handle))
        )
        memory = self._read(
            gpu, ("memory_total_bytes", "memory_used_bytes"), self._memory_info, handle
        )
        if memory is not None:
            gpu.memory_total_bytes = _u64(memory.total)
            gpu.memory_used_bytes = _u64(memory.used)
        rates = self._read(
            gpu,
            ("utilization_gpu", "utilization_memory"),
            lambda: nvml.nvmlDeviceGetUtilizationRates(handle),
        )
        if rates is not None:
            gpu.utilization_gpu = int(rates.gpu)
            gpu.utilization_memory = int(rates.memory)
        gpu.temperature_c = self._read(
            gpu,
            ("temperature_c",),
            lambda: int(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        )
        # NVML reports power in milliwatts.
        gpu.power_usage_watts = self._read(
            gpu, ("power_usage_watts",), lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        )
        gpu.power_limit_watts = self._read(
            gpu,
            ("power_limit_watts",),
            lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
        )
        mode = self._read(gpu, ("mig_enabled",), lambda: nvml.nvmlDeviceGetMigMode(handle))
        gpu.mig_enabled = None if mode is None else mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        if gpu.mig_enabled:
            # NVML does not support utilization queries in MIG mode: SM stays unknown.
            self._fill_mig(gpu, handle)
            return
        gpu.processes = self._processes(gpu, handle, field="processes", mig_device_uuid=None)
        sm = self._sm_utilization(gpu, handle)
        for process in gpu.processes:
            process.sm_utilization = sm.get(process.pid)

    def _memory_info(self, handle: Any) -> Any:
        nvml = self._nvml
        if self._memory_v2 is not None:
            # v2 leaves the driver's reserved memory out of "used", as nvidia-smi does.
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version=self._memory_v2)
            except nvml.NVMLError as exc:
                name = self.error_name(exc)
                if name in GPU_FATAL_ERRORS:
                    raise
                if name == "FUNCTION_NOT_FOUND":  # a driver without v2: stop asking
                    self._memory_v2 = None
        return nvml.nvmlDeviceGetMemoryInfo(handle)

    def _fill_mig(self, gpu: GpuSample, handle: Any) -> None:
        nvml = self._nvml
        count = self._read(
            gpu, ("mig_devices", "processes"), lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle)
        )
        for slot in range(count or 0):
            where = f"mig_devices[{slot}]"
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except nvml.NVMLError as exc:
                name = self.error_name(exc)
                if name == "NOT_FOUND":  # an empty slot
                    continue
                if name in GPU_FATAL_ERRORS:
                    raise _GpuFailedError(name) from exc
                # The slot's processes are missing too: the list is incomplete, not idle.
                gpu.field_errors[where] = gpu.field_errors["processes"] = name
                continue
            uuid = self._read(gpu, (where, "processes"), nvml.nvmlDeviceGetUUID, mig)
            if uuid is None:
                continue
            device = MigDevice(index=slot, uuid=_text(uuid))
            memory = self._read(gpu, (f"{where}.memory",), self._memory_info, mig)
            if memory is not None:
                device.memory_total_bytes = _u64(memory.total)
                device.memory_used_bytes = _u64(memory.used)
            device.gpu_instance_id = _int(
                self._read(gpu, (f"{where}.gpu_instance_id",), nvml.nvmlDeviceGetGpuInstanceId, mig)
            )
            device.compute_instance_id = _int(
                self._read(
                    gpu,
                    (f"{where}.compute_instance_id",),
                    nvml.nvmlDeviceGetComputeInstanceId,
                    mig,
                )
            )
            gpu.mig_devices.append(device)
            gpu.processes.extend(
                self._processes(gpu, mig, field=f"{where}.processes", mig_device_uuid=device.uuid)
            )

    def _processes(
        self, gpu: GpuSample, handle: Any, *, field: str, mig_device_uuid: str | None
    ) -> list[GpuProcess]:
        found = []
        for kind, list_name, function in PROCESS_LISTS:
            where = f"{field}.{list_name}"
            if function == MPS_LIST:
                listed = self._mps_clients(gpu, where, handle)
            else:
                listed = self._process_list(gpu, where, function, handle)
            found += [
                GpuProcess(
                    pid=int(info.pid),
                    type=kind,
                    used_memory_bytes=_u64(info.usedGpuMemory),
                    mig_device_uuid=mig_device_uuid,
                )
                for info in listed or ()
            ]
        return merge_processes(found)

    def _mps_clients(self, gpu: GpuSample, field: str, handle: Any) -> Any:
        """The device's MPS clients; none, without an error, where there can be none."""
        if not self._mps_listed:
            return None
        if self._process_reader is None and not hasattr(self._nvml, MPS_LIST):
            self._mps_listed = False  # an nvidia-ml-py without the call
            return None
        listed = self._process_list(gpu, field, MPS_LIST, handle)
        error = gpu.field_errors.get(field)
        if error in MPS_ABSENT:
            del gpu.field_errors[field]
            if error != "NOT_SUPPORTED":
                log.info("this NVML driver (%s) cannot list MPS clients", self.driver_version)
                self._mps_listed = False
        return listed

    def _process_list(self, gpu: GpuSample, field: str, function: str, handle: Any) -> Any:
        nvml = self._nvml
        if self._process_reader is not None:
            return self._read_entries(gpu, field, function, handle, self._process_reader)
        if not self._legacy_process_lists:
            try:
                return self._read(gpu, (field,), getattr(nvml, function), handle)
            except self._mismatch:
                log.info("this NVML driver predates %s_v3; using the _v2 calls", function)
                self._legacy_process_lists = True
        legacy = getattr(nvml, f"{function}_v2", None)
        if legacy is None:
            gpu.field_errors[field] = "LIBRARY_MISMATCH"
            return None
        return self._read(gpu, (field,), legacy, handle)

    def _read_entries(
        self, gpu: GpuSample, field: str, function: str, handle: Any, reader: ProcessListReader
    ) -> Any:
        try:
            return self._read(gpu, (field,), reader.read, function, handle)
        except (AttributeError, TypeError, ctypes.ArgumentError):
            # This nvidia-ml-py's internals differ from what the reader uses: no list rather
            # than a guess.
            if self._first_time(gpu.index, PROCESS_LIST_ERROR):
                log.warning(
                    "cannot call the driver's process lists through this nvidia-ml-py",
                    exc_info=True,
                )
            gpu.field_errors[field] = PROCESS_LIST_ERROR
            return None
        except EntryLayoutError as exc:
            if self._first_time(gpu.index, PROCESS_LAYOUT_ERROR):
                log.warning("GPU %d, NVML driver %s: %s", gpu.index, self.driver_version, exc)
            gpu.field_errors[field] = PROCESS_LAYOUT_ERROR
            return None

    def _sm_utilization(self, gpu: GpuSample, handle: Any) -> dict[int, int]:
        """Latest SM utilization per PID from NVML samples newer than the window."""
        # NVML returns only samples taken after this CPU timestamp (microseconds).
        since = max(0, int((self._clock() - self._window) * 1_000_000))
        info = self._utilization_info
        if gpu.index in self._legacy_utilization_gpus:
            info = None
        samples: Any = ()
        error: str | None = None
        if info is not None:
            samples, error = self._utilization_samples(info, handle, since)
            if error in UTILIZATION_INFO_ABSENT:
                self._stop_asking_utilization_info(gpu.index, error)
        if info is None or error is not None:
            legacy = self._nvml.nvmlDeviceGetProcessUtilization
            samples, legacy_error = self._utilization_samples(legacy, handle, since)
            # Where R550's call failed for a reason of its own, that reason is the news.
            if legacy_error is None or error is None or error in UTILIZATION_INFO_ABSENT:
                error = legacy_error
        if error is not None:
            if gpu.processes:
                gpu.field_errors["processes.sm_utilization"] = error
            return {}
        latest: dict[int, tuple[int, int]] = {}
        for entry in samples:
            sm = int(entry.smUtil)
            if sm > 100:  # a "not available" sentinel, not a percentage
                continue
            pid, stamp = int(entry.pid), int(entry.timeStamp)
            seen = latest.get(pid)
            if seen is None or stamp >= seen[0]:
                latest[pid] = (stamp, sm)
        return {pid: sm for pid, (_, sm) in latest.items()}

    def _utilization_samples(
        self, call: Callable[..., Any], handle: Any, since: int
    ) -> tuple[Any, str | None]:
        """``call``'s samples since ``since`` (none on an idle GPU), or the error it answered."""
        try:
            return call(handle, since), None
        except self._nvml.NVMLError as exc:
            name = self.error_name(exc)
            if name == "NOT_FOUND" or getattr(exc, "value", None) == NVML_SUCCESS:
                return (), None  # an idle GPU: no samples in the window
            if name in GPU_FATAL_ERRORS:
                raise _GpuFailedError(name) from exc
            return (), name

    def _stop_asking_utilization_info(self, index: int, error: str) -> None:
        """Read GPU ``index`` (every GPU, on a driver without R550's call) the legacy way."""
        if error == "FUNCTION_NOT_FOUND":
            log.info("this NVML driver (%s) predates %s", self.driver_version, UTILIZATION_INFO)
            self._utilization_info = None
        else:
            log.info(
                "GPU %d answers %s with %s; asking the legacy call", index, UTILIZATION_INFO, error
            )
            self._legacy_utilization_gpus.add(index)


def _library_failure() -> str:
    """Why pynvml could not load the NVML library: missing, or present but unloadable."""
    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError as exc:
        # dlopen's reason, e.g. "...: invalid ELF header" or "wrong ELF class: ELFCLASS32".
        reason = str(exc)
        if "No such file or directory" not in reason:
            return f"{NVML_LIBRARY} was found but cannot be loaded ({reason})"
    return MISSING_LIBRARY_HINT


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _u64(value: Any) -> int | None:
    if value is None or value == NVML_VALUE_NOT_AVAILABLE:
        return None
    return int(value)

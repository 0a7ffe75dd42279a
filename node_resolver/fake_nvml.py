"""A GPU source read from a JSON file, for tests and the demo.

The file is re-read whenever it changes, so what the "GPUs" show can be
changed while the agent runs. Its shape mirrors what NVML reports::

    {"driverVersion": "550.90.07", "cudaDriverVersion": 12040,
     "gpus": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H200",
               "memoryTotalBytes": 150754820096, "memoryUsedBytes": 2147483648,
               "utilizationGpu": 87, "utilizationMemory": 40, "temperatureC": 55,
               "powerUsageWatts": 350.5, "powerLimitWatts": 700.0, "error": null,
               "migEnabled": false, "migDevices": [], "fieldErrors": {}, "minorNumber": 0,
               "processes": [{"pid": 4242, "usedMemoryBytes": 1073741824,
                              "type": "COMPUTE", "smUtilization": 50,
                              "migDeviceUuid": null}]}]}

Unknown keys are ignored and a missing optional key means "not available".
The one exception is a process's ``type``: NVML always knows which list a
process came from, so a missing type means COMPUTE, the list almost every
CUDA process is in.
Numbers must fit what the agent's protobuf carries (utilizations are 0-100).
A PID listed twice on one GPU (and MIG device) is merged as NVML's compute,
graphics and MPS lists are: one entry, whose type names every list (BOTH for
COMPUTE and GRAPHICS, MPS_GRAPHICS for MPS and GRAPHICS). A GPU whose
``error`` is a string looks exactly like a GPU on which NVML returned that
error; ``fieldErrors`` does the same for single fields.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .gpu_source import merge_processes
from .models import GpuProcess, GpuSample, MigDevice, NodeSample, ProcessType

log = logging.getLogger(__name__)

# JSON key -> GpuSample attribute, for the GPU's plain metrics.
GPU_METRICS: dict[str, tuple[str, type]] = {
    "name": ("name", str),
    "memoryTotalBytes": ("memory_total_bytes", int),
    "memoryUsedBytes": ("memory_used_bytes", int),
    "utilizationGpu": ("utilization_gpu", int),
    "utilizationMemory": ("utilization_memory", int),
    "temperatureC": ("temperature_c", int),
    "powerUsageWatts": ("power_usage_watts", float),
    "powerLimitWatts": ("power_limit_watts", float),
    "migEnabled": ("mig_enabled", bool),
    "minorNumber": ("minor_number", int),
}
GPU_METRICS_ATTRS = frozenset(attr for attr, _ in GPU_METRICS.values())
# Field names as NVML failures are reported, for fieldErrors given in either spelling.
FIELD_NAMES = {key: attr for key, (attr, _) in GPU_METRICS.items()} | {
    "migDevices": "mig_devices",
    "processes": "processes",
}


# Stands for "the file could not be read" among the bad versions of the file.
MISSING = b"\0missing"

INT32 = (-(2**31), 2**31 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)
PERCENT = (0, 100)
# Integer key -> the range its protobuf field (or its meaning) allows; the same key has the
# same type wherever it appears. A value outside would make every GetSnapshot call fail.
INT_RANGES: dict[str, tuple[int, int]] = {
    "index": (0, INT32[1]),
    "cudaDriverVersion": (0, INT32[1]),
    "memoryTotalBytes": UINT64,
    "memoryUsedBytes": UINT64,
    "usedMemoryBytes": UINT64,
    "utilizationGpu": PERCENT,
    "utilizationMemory": PERCENT,
    "smUtilization": PERCENT,
    "temperatureC": INT32,
    "gpuInstanceId": UINT32,
    "computeInstanceId": UINT32,
    "pid": UINT32,
    "minorNumber": UINT32,
}


class FakeNvmlError(ValueError):
    """The fake NVML file is missing or malformed; the message names the file and the spot."""


class FakeGpuSource:
    """Serves the GPUs described by a JSON file, re-reading it when it changes."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise FakeNvmlError(f"cannot read fake NVML file {self.path}: {exc}") from exc
        self._sample = parse_fake_nvml(raw, source=str(self.path))
        self._raw = raw
        self._bad: bytes | None = None
        # Successful re-reads after the first load; tests read it.
        self.reloads = 0

    def sample(self) -> NodeSample:
        """The file's current content (the last good one if it is now broken)."""
        self._refresh()
        # Callers annotate the processes they get, so each scan hands out fresh records.
        return copy.deepcopy(self._sample)

    def close(self) -> None:
        """Nothing to release."""

    def _refresh(self) -> None:
        # Comparing content rather than mtime catches two writes within one
        # timestamp tick; the file is small and read once per scan.
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            self._warn(MISSING, f"cannot read fake NVML file {self.path}: {exc.strerror}")
            return
        if raw == self._raw or raw == self._bad:
            return
        try:
            self._sample = parse_fake_nvml(raw, source=str(self.path))
        except FakeNvmlError as exc:
            self._warn(raw, str(exc))
            return
        self._raw, self._bad = raw, None
        self.reloads += 1
        log.info("reloaded fake NVML file %s", self.path)

    def _warn(self, bad: bytes, message: str) -> None:
        # Warn once per bad version of the file, not on every scan.
        if bad != self._bad:
            log.warning("%s; still serving the last good data", message)
        self._bad = bad


def parse_fake_nvml(text: str | bytes, *, source: str = "<fake nvml>") -> NodeSample:
    """Parse the fake NVML JSON into a NodeSample, or raise FakeNvmlError naming the spot."""
    try:
        data = json.loads(text)
    except RecursionError:
        # Deeper than the interpreter's recursion limit: an error like any other bad
        # file (orjson would refuse it too, but it cannot read integers past 64 bits).
        raise FakeNvmlError(f"{source}: invalid JSON: nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise FakeNvmlError(f"{source}: not UTF-8 text: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise FakeNvmlError(f"{source}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from exc
    return _Parser(source).node(data)


def write_fake_nvml(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """Write a fake NVML file atomically, so a running agent never reads half of it."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, indent=1)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _show(raw: object) -> str:
    """A bad value for an error message: its JSON, cut short (deep or huge values included)."""
    try:
        shown = json.dumps(raw)
    except RecursionError:
        return f"a deeply nested {type(raw).__name__}"
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


class _Parser:
    """Checks types as it goes and names the JSON path of the first bad value."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> FakeNvmlError:
        return FakeNvmlError(f"{self.source}: {where}: {message}")

    def value(self, obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
        """``obj[key]`` checked against ``kind``; a missing key or null gives None."""
        raw = obj.get(key)
        if raw is None:
            return None
        # JSON true/false are Python bools, which are ints too; keep them apart.
        ok = (
            isinstance(raw, bool)
            if kind is bool
            else isinstance(raw, (int, float)) and not isinstance(raw, bool)
            if kind is float
            else isinstance(raw, kind) and not isinstance(raw, bool)
        )
        if not ok:
            raise self.fail(_at(where, key), f"expected {kind.__name__}, got {_show(raw)}")
        if kind is int:
            low, high = INT_RANGES.get(key, UINT64)
            if not low <= raw <= high:
                raise self.fail(
                    _at(where, key), f"expected an integer from {low} to {high}, got {raw}"
                )
        return float(raw) if kind is float else raw

    def required(self, obj: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
        found = self.value(obj, key, kind, where)
        if found is None:
            raise self.fail(_at(where, key), "required")
        return found

    def objects(self, obj: Mapping[str, Any], key: str, where: str) -> list[Mapping[str, Any]]:
        raw = obj.get(key)
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise self.fail(_at(where, key), "expected a list")
        for i, item in enumerate(raw):
            if not isinstance(item, dict):
                raise self.fail(f"{_at(where, key)}[{i}]", "expected an object")
        return raw

    def node(self, data: Any) -> NodeSample:
        if not isinstance(data, dict):
            raise self.fail("top level", "expected an object")
        if not isinstance(data.get("gpus"), list):
            raise self.fail("gpus", "required, a list of GPUs")
        gpus = [self.gpu(gpu, f"gpus[{i}]") for i, gpu in enumerate(self.objects(data, "gpus", ""))]
        indexes = [gpu.index for gpu in gpus]
        if len(set(indexes)) != len(indexes):
            raise self.fail("gpus", f"duplicate GPU index in {indexes}")
        return NodeSample(
            driver_version=self.value(data, "driverVersion", str, ""),
            cuda_driver_version=self.value(data, "cudaDriverVersion", int, ""),
            gpus=gpus,
            error=self.value(data, "error", str, ""),
        )

    def gpu(self, data: Mapping[str, Any], where: str) -> GpuSample:
        gpu = GpuSample(
            index=self.required(data, "index", int, where),
            uuid=self.required(data, "uuid", str, where),
            name=self.value(data, "name", str, where),
        )
        error = self.value(data, "error", str, where)
        if error is not None:
            # What NVML gives for a failed GPU: its identity and the error, nothing else.
            gpu.error = error
            return gpu
        for key, (attr, kind) in GPU_METRICS.items():
            setattr(gpu, attr, self.value(data, key, kind, where))
        gpu.mig_devices = [
            self.mig_device(d, f"{where}.migDevices[{i}]")
            for i, d in enumerate(self.objects(data, "migDevices", where))
        ]
        gpu.processes = merge_processes(
            self.process(p, f"{where}.processes[{i}]")
            for i, p in enumerate(self.objects(data, "processes", where))
        )
        field_errors = data.get("fieldErrors") or {}
        if not isinstance(field_errors, dict) or not all(
            isinstance(v, str) for v in field_errors.values()
        ):
            raise self.fail(f"{where}.fieldErrors", "expected an object of strings")
        for key, error_name in field_errors.items():
            failed = FIELD_NAMES.get(key) or str(key)
            gpu.field_errors[failed] = error_name
            # A failed field reads as NVML leaves it: not available.
            if failed in ("mig_devices", "processes"):
                setattr(gpu, failed, [])
            elif failed in GPU_METRICS_ATTRS:
                setattr(gpu, failed, None)
        return gpu

    def mig_device(self, data: Mapping[str, Any], where: str) -> MigDevice:
        return MigDevice(
            index=self.required(data, "index", int, where),
            uuid=self.required(data, "uuid", str, where),
            memory_total_bytes=self.value(data, "memoryTotalBytes", int, where),
            memory_used_bytes=self.value(data, "memoryUsedBytes", int, where),
            gpu_instance_id=self.value(data, "gpuInstanceId", int, where),
            compute_instance_id=self.value(data, "computeInstanceId", int, where),
        )

    def process(self, data: Mapping[str, Any], where: str) -> GpuProcess:
        kind = self.value(data, "type", str, where) or "COMPUTE"
        try:
            process_type = ProcessType(kind)
        except ValueError:
            raise self.fail(
                f"{where}.type",
                f"expected one of {', '.join(t.value for t in ProcessType)}, got {kind!r}",
            ) from None
        return GpuProcess(
            pid=self.required(data, "pid", int, where),
            type=process_type,
            used_memory_bytes=self.value(data, "usedMemoryBytes", int, where),
            sm_utilization=self.value(data, "smUtilization", int, where),
            mig_device_uuid=self.value(data, "migDeviceUuid", str, where),
        )

"""Probes of the NVML calls whose answers differ between drivers and GPUs, for ``make gpu-check``.

The agent reads MPS clients (``nvmlDeviceGetMPSComputeRunningProcesses``), per-process
utilization (R550's ``nvmlDeviceGetProcessesUtilizationInfo``, else the legacy
``nvmlDeviceGetProcessUtilization``, which Blackwell answers NOT_SUPPORTED) and health
events (NVML's event API), each of which a driver may lack or refuse. Each probe asks the
real driver once and says in one line what it answered and what the agent makes of it, so
that a report from a GPU nobody here has shows which paths that driver takes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from node_resolver.gpu_events.nvml_events import WANTED, event_kind
from node_resolver.nvml import (
    MPS_ABSENT,
    MPS_LIST,
    NVML_SUCCESS,
    UTILIZATION_INFO,
    UTILIZATION_INFO_ABSENT,
    load_pynvml,
)
from node_resolver.nvml_process_info import ProcessListReader, process_list_layout

LEGACY_UTILIZATION = "nvmlDeviceGetProcessUtilization"
# The samples asked for: those of the last two seconds, the agent's default window.
UTILIZATION_WINDOW_SECONDS = 2.0


def probe_lines(wait_seconds: float, nvml: Any | None = None) -> Iterator[str]:
    """Start NVML, run every probe (one line each), and shut NVML down."""
    nvml = load_pynvml() if nvml is None else nvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        yield f"probes: NVML would not start: {exc}"
        return
    try:
        yield from Probes(nvml).lines(wait_seconds)
    finally:
        nvml.nvmlShutdown()


class Probes:
    """The probes over one started NVML (pynvml, or a module with its names)."""

    def __init__(self, nvml: Any, *, clock: Callable[[], float] = time.time) -> None:
        self._nvml = nvml
        self._clock = clock
        self._names = {
            getattr(nvml, attr): attr.removeprefix("NVML_ERROR_")
            for attr in dir(nvml)
            if attr.startswith("NVML_ERROR_") and isinstance(getattr(nvml, attr), int)
        }
        layout = process_list_layout(nvml)
        self._reader = None if layout is None else ProcessListReader(nvml, *layout)
        self._suffix = "" if layout is None else layout[0]

    def error_name(self, exc: Exception) -> str:
        """NVML's name for an NVMLError, e.g. "NOT_SUPPORTED"."""
        value = getattr(exc, "value", None)
        return self._names.get(value, f"NVML_ERROR_{value}") if isinstance(value, int) else str(exc)

    def lines(self, wait_seconds: float) -> Iterator[str]:
        """One line per probe: each GPU's MPS list and utilization calls, then the events."""
        nvml = self._nvml
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            yield f"probes: nvmlDeviceGetCount answered {self.error_name(exc)}; nothing probed"
            return
        handles = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as exc:
                yield f"GPU {index}: no handle ({self.error_name(exc)}); not probed"
                continue
            handles.append((index, handle))
            yield self.mps(index, handle)
            yield from self.utilization(index, handle)
        yield from self.events(handles, wait_seconds)

    # -- MPS ---------------------------------------------------------------------------

    def mps(self, index: int, handle: Any) -> str:
        """What the MPS list answers on GPU ``index``, read as the agent reads it."""
        where = f"GPU {index} MPS clients"
        call = MPS_LIST + self._suffix
        try:
            if self._reader is not None:
                clients = self._reader.read(MPS_LIST, handle)
            else:
                clients = getattr(self._nvml, MPS_LIST)(handle)
        except self._nvml.NVMLError as exc:
            name = self.error_name(exc)
            if name in MPS_ABSENT:
                return f"{where}: {call} answered {name}; the agent lists none, without an error"
            return f"{where}: {call} answered {name}; the agent marks the process list incomplete"
        except Exception as exc:  # pynvml's own failures: a probe reports, never crashes
            return f"{where}: {call} failed: {type(exc).__name__}: {exc}"
        pids = ", ".join(str(int(c.pid)) for c in clients)
        return f"{where}: {len(clients)} through {call}" + (f" (PIDs {pids})" if pids else "")

    # -- per-process utilization ---------------------------------------------------------

    def utilization(self, index: int, handle: Any) -> Iterator[str]:
        """Both utilization calls on GPU ``index``, and which one the agent reads."""
        since = max(0, int((self._clock() - UTILIZATION_WINDOW_SECONDS) * 1_000_000))
        answers = {}
        for call in (UTILIZATION_INFO, LEGACY_UTILIZATION):
            answer = self._samples(call, handle, since)
            answers[call] = answer
            yield f"GPU {index} {call}: {answer}"
        new, legacy = answers[UTILIZATION_INFO], answers[LEGACY_UTILIZATION]
        if _answered(new):
            via = UTILIZATION_INFO
        elif _answered(legacy):
            via = LEGACY_UTILIZATION
        else:
            # NVML keeps no per-process utilization in MIG mode: no warning there.
            why = "a MIG-enabled GPU has none" if self._mig_enabled(handle) else "WARN"
            yield f"GPU {index} per-process SM utilization: {why}: neither call answers"
            return
        yield f"GPU {index} per-process SM utilization: the agent reads it through {via}"

    def _mig_enabled(self, handle: Any) -> bool:
        nvml = self._nvml
        try:
            return bool(nvml.nvmlDeviceGetMigMode(handle)[0] == nvml.NVML_DEVICE_MIG_ENABLE)
        except nvml.NVMLError:
            return False

    def _samples(self, call: str, handle: Any, since: int) -> str:
        function = getattr(self._nvml, call, None)
        if function is None:
            return "not in this nvidia-ml-py"
        try:
            samples = function(handle, since)
        except self._nvml.NVMLError as exc:
            name = self.error_name(exc)
            if name == "NOT_FOUND" or getattr(exc, "value", None) == NVML_SUCCESS:
                return f"answered, no samples in the last {UTILIZATION_WINDOW_SECONDS:g} s (idle)"
            if call == UTILIZATION_INFO and name in UTILIZATION_INFO_ABSENT:
                return f"{name}; the agent asks the legacy call"
            return name
        except Exception as exc:
            return f"failed: {type(exc).__name__}: {exc}"
        return f"answered, {len(samples)} samples in the last {UTILIZATION_WINDOW_SECONDS:g} s"

    # -- events --------------------------------------------------------------------------

    def events(self, handles: list[tuple[int, Any]], wait_seconds: float) -> Iterator[str]:
        """Register every GPU for the agent's event types, wait once, and say what came."""
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            yield f"events: nvmlEventSetCreate answered {self.error_name(exc)}; no events here"
            return
        freed = "freed"
        try:
            registered = 0
            for index, handle in handles:
                line, ok = self._register(index, handle, event_set)
                registered += ok
                yield line
            if registered:
                yield self._wait(event_set, wait_seconds)
            else:
                yield "events: no GPU registered; the agent's event status is unsupported"
        finally:
            try:
                nvml.nvmlEventSetFree(event_set)
            except nvml.NVMLError as exc:
                freed = self.error_name(exc)
        if freed != "freed":
            yield f"events: nvmlEventSetFree answered {freed}"

    def _register(self, index: int, handle: Any, event_set: Any) -> tuple[str, bool]:
        nvml = self._nvml
        where = f"GPU {index} events"
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(handle))
        except nvml.NVMLError as exc:
            return (
                f"{where}: nvmlDeviceGetSupportedEventTypes answered {self.error_name(exc)}",
                False,
            )
        # What the agent registers for: the types it reads that the GPU supports.
        mask = supported & WANTED
        kinds = [_kind_name(1 << bit) for bit in range(mask.bit_length()) if mask >> bit & 1]
        shown = f"supported types {supported:#x} ({', '.join(kinds) or 'none the agent reads'})"
        if not mask:
            return f"{where}: {shown}", False
        try:
            nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
        except nvml.NVMLError as exc:
            return f"{where}: {shown}; registering answered {self.error_name(exc)}", False
        return f"{where}: {shown}; registered", True

    def _wait(self, event_set: Any, wait_seconds: float) -> str:
        nvml = self._nvml
        waited = f"waited {wait_seconds:g} s"
        try:
            data = nvml.nvmlEventSetWait_v2(event_set, int(wait_seconds * 1000))
        except nvml.NVMLError as exc:
            name = self.error_name(exc)
            if name == "TIMEOUT":
                return f"events: {waited}: no event (TIMEOUT), as on a healthy GPU"
            return f"events: {waited}: nvmlEventSetWait_v2 answered {name}"
        kind = _kind_name(int(data.eventType))
        return f"events: {waited}: an event came: {kind}, data {int(data.eventData)}"


def _kind_name(event_type: int) -> str:
    kind = event_kind(event_type)
    return f"type {event_type:#x}" if kind is None else kind.value


def _answered(answer: str) -> bool:
    return answer.startswith("answered")

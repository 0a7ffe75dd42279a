"""NVML's event API in a thread of its own: XID, double- and single-bit ECC events.

The thread registers every GPU for the event types it supports
(``nvmlDeviceGetSupportedEventTypes``) on one event set and waits on it with a
timeout (``nvmlEventSetWait_v2``), so that it notices a stop within one
timeout. A wait that fails otherwise (a driver reset, a lost GPU) frees the set
and starts again after a delay that doubles up to a minute; the scans, in
their own thread, go on meanwhile. A node whose GPUs support none of these
events reports ``unsupported`` and the thread ends.

It also reads each GPU's PCI bus ID, which the kernel's XID messages name.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .kernel_log import pci_key
from .records import ON, UNSUPPORTED, GpuEventKind

__all__ = [
    "NO_INSTANCE",
    "WAIT_MS",
    "WANTED",
    "GpuAddress",
    "NvmlEventWatcher",
    "RawEvent",
    "event_kind",
]

log = logging.getLogger(__name__)

# nvmlEventType bits, as nvml.h numbers them (pynvml's nvmlEventType* constants).
SINGLE_BIT_ECC = 0x1
DOUBLE_BIT_ECC = 0x2
XID_CRITICAL = 0x8
WANTED = SINGLE_BIT_ECC | DOUBLE_BIT_ECC | XID_CRITICAL
_KINDS = (
    (XID_CRITICAL, GpuEventKind.XID),
    (DOUBLE_BIT_ECC, GpuEventKind.ECC_DOUBLE_BIT),
    (SINGLE_BIT_ECC, GpuEventKind.ECC_SINGLE_BIT),
)
# An event's GPU or compute instance ID when it belongs to no MIG device.
NO_INSTANCE = 0xFFFFFFFF
# How long one wait may block: the thread notices a stop within this.
WAIT_MS = 500
FIRST_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0


def event_kind(event_type: int) -> GpuEventKind | None:
    """The kind of an NVML event type the agent reads, or None for one it does not."""
    return next((kind for bit, kind in _KINDS if event_type & bit), None)


@dataclass(frozen=True, slots=True)
class GpuAddress:
    """A GPU as events and kernel messages name it."""

    uuid: str
    pci_bus_id: str


@dataclass(slots=True)
class RawEvent:
    """An event as a source delivered it, before it is merged, attributed and logged."""

    kind: GpuEventKind
    gpu_uuid: str
    # Wall-clock time it arrived, and a monotonic one for the merge window.
    time: float
    arrived: float
    source: str
    xid: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    pci_bus_id: str = ""
    culprit_pid: int | None = None
    culprit_name: str = ""
    message: str = ""


class NvmlEventWatcher:
    """Waits for NVML events in a daemon thread and hands each to ``on_event``."""

    def __init__(
        self,
        nvml: Any,
        on_event: Callable[[RawEvent], None],
        *,
        wait_ms: int = WAIT_MS,
        first_retry: float = FIRST_RETRY_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._nvml = nvml
        self._on_event = on_event
        self._wait_ms = wait_ms
        self._first_retry = first_retry
        self._clock = clock
        self._error_names = {
            getattr(nvml, attr): attr.removeprefix("NVML_ERROR_")
            for attr in dir(nvml)
            if attr.startswith("NVML_ERROR_") and isinstance(getattr(nvml, attr), int)
        }
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # "ok", "unsupported", or the last failure; "starting" before the first registration.
        self.status = "starting"
        # The GPUs by PCI (domain, bus, device), for the kernel reader; filled at each setup.
        self.by_pci: dict[tuple[int, int, int], GpuAddress] = {}
        # GPU UUID -> the event types registered for it.
        self.registered: dict[str, int] = {}
        # Event sets set up so far (1 + restarts) and events delivered; tests and benches read them.
        self.setups = 0
        self.delivered = 0
        # Set each time the thread has registered and waits (tests wait on it).
        self.waiting = threading.Event()

    def start(self) -> None:
        """Start the thread."""
        self._thread = threading.Thread(target=self._run, name="gpu-events", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread, waiting up to a wait's timeout and a little more."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._wait_ms / 1000 + 5.0 if timeout is None else timeout)

    def xid_registered(self, gpu_uuid: str) -> bool:
        """Whether NVML delivers XID events of this GPU now."""
        return self.status == ON and bool(self.registered.get(gpu_uuid, 0) & XID_CRITICAL)

    def _name(self, exc: Exception) -> str:
        value = getattr(exc, "value", None)
        name = self._error_names.get(value) if isinstance(value, int) else None
        return name or f"NVML_ERROR_{value}"

    def _run(self) -> None:
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._set_status(f"cannot start NVML: {self._name(exc)}")
            return
        delay = self._first_retry
        try:
            while not self._stop.is_set():
                outcome = self._session()
                if outcome == UNSUPPORTED or self._stop.is_set():
                    return
                if outcome == ON:  # it waited well before failing: start again soon
                    delay = self._first_retry
                self._stop.wait(delay)
                delay = min(MAX_RETRY_SECONDS, delay * 2)
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def _session(self) -> str:
        """Register, then wait until stopped or a wait fails; what ended it."""
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            name = self._name(exc)
            self._set_status(UNSUPPORTED if name == "NOT_SUPPORTED" else f"event set: {name}")
            return UNSUPPORTED if name == "NOT_SUPPORTED" else "failed"
        try:
            self.setups += 1
            try:
                handles = self._register(event_set)
            except nvml.NVMLError as exc:
                self._set_status(f"registering for events failed: {self._name(exc)}")
                return "failed"
            if not handles:
                self._set_status(UNSUPPORTED)
                return UNSUPPORTED
            self._set_status(ON)
            self.waiting.set()
            waited_well = False
            while not self._stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, self._wait_ms)
                except nvml.NVMLError as exc:
                    name = self._name(exc)
                    if name == "TIMEOUT":
                        waited_well = True
                        continue
                    self.waiting.clear()
                    self._set_status(f"waiting for events failed: {name}")
                    return ON if waited_well else "failed"
                waited_well = True
                self._deliver(data, handles)
            return ON
        finally:
            self.waiting.clear()
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlEventSetFree(event_set)

    def _register(self, event_set: Any) -> dict[int | None, GpuAddress]:
        """Register every GPU that supports some wanted type; their handles' addresses."""
        nvml = self._nvml
        handles: dict[int | None, GpuAddress] = {}
        registered: dict[str, int] = {}
        by_pci: dict[tuple[int, int, int], GpuAddress] = {}
        count = int(nvml.nvmlDeviceGetCount())
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except nvml.NVMLError:
                continue  # a lost GPU: the scans report it
            bus_id = ""
            with contextlib.suppress(nvml.NVMLError, AttributeError):
                bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            address = GpuAddress(uuid, bus_id)
            key = pci_key(bus_id) if bus_id else None
            if key is not None:
                by_pci[key] = address
            try:
                types = int(nvml.nvmlDeviceGetSupportedEventTypes(handle)) & WANTED
                if types:
                    nvml.nvmlDeviceRegisterEvents(handle, types, event_set)
            except nvml.NVMLError as exc:
                log.info("GPU %s: no NVML events (%s)", uuid, self._name(exc))
                continue
            if types:
                registered[uuid] = types
                handles[_address(handle)] = address
        self.by_pci = by_pci
        self.registered = registered
        return handles

    def _deliver(self, data: Any, handles: dict[int | None, GpuAddress]) -> None:
        address = handles.get(_address(data.device))
        if address is None:
            return
        event_type = int(data.eventType)
        kind = event_kind(event_type)
        if kind is None:
            return
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        self.delivered += 1
        self._on_event(
            RawEvent(
                kind=kind,
                gpu_uuid=address.uuid,
                time=self._clock(),
                arrived=time.monotonic(),
                source="nvml",
                xid=int(data.eventData) if kind is GpuEventKind.XID else None,
                gpu_instance_id=None if gi == NO_INSTANCE else gi,
                compute_instance_id=None if ci == NO_INSTANCE else ci,
                pci_bus_id=address.pci_bus_id,
            )
        )

    def _set_status(self, status: str) -> None:
        if status != self.status:
            if status == ON:
                log.info("NVML events: registered %d GPUs", len(self.registered))
            else:
                log.warning("NVML events: %s", status)
        self.status = status


def _address(handle: Any) -> int | None:
    """The device pointer a handle holds, which events carry back."""
    return ctypes.cast(handle, ctypes.c_void_p).value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

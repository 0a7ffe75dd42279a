"""From raw events to records: merged, attributed to who was on the GPU, rate-limited, logged.

Sources hand raw events to ``submit`` (the NVML thread, the kernel-log
thread) or the recorder finds them itself in each scan (a GPU that turned
GPU_IS_LOST). ``submit`` only appends to a bounded queue, so a source never
waits and a storm never reaches a scan; past the bound, events are counted
and folded into the next record of their GPU and kind.

A thread of its own then:

- merges an NVML XID and a kernel message for the same XID on the same GPU
  that arrive within ``MERGE_SECONDS`` into one event (the kernel names the
  culprit, NVML the MIG instance). Each waits that long for the other only
  where the other source is on;
- attributes the event to the processes on the GPU (or on the MIG device the
  event's GPU and compute instance IDs name) in the scan before it arrived,
  each with its container, pod names (as the server pushed them) and
  allocation verdict, and to the pods the kubelet had given the device;
- rate-limits per GPU, kind and XID (a burst, then one record a second): the
  events held back are counted and carried by the next record (``count``);
- counts every event in ``GpuEventCounters`` and hands the records to the
  occupancy log.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..allocation_verdicts import AllocationVerdict, ContainerVerdicts
from ..models import GpuSample, NodeAllocations, NodeSnapshot
from ..pod_names import PodNames
from .counters import GpuEventCounters
from .kernel_log import KernelXid
from .nvml_events import GpuAddress, RawEvent
from .records import AllocatedPod, EventProcess, GpuEvent, GpuEventKind

__all__ = ["BURST", "MAX_QUEUED", "MERGE_SECONDS", "RATE_PER_SECOND", "GpuEventRecorder"]

log = logging.getLogger(__name__)

MERGE_SECONDS = 2.0
# Records per GPU, kind and XID: a burst of this many, then this many a second.
BURST = 20
RATE_PER_SECOND = 1.0
# Raw events waiting for the recorder's thread; past it they are only counted.
MAX_QUEUED = 4096
# Rate-limit buckets and dropped-event tallies kept at most (GPU x kind x XID).
MAX_KEYS = 1024
LOST = "GPU_IS_LOST"

# (GPU UUID, kind, XID)
_Key = tuple[str, GpuEventKind, int | None]


@dataclass(slots=True)
class _Queued:
    raw: RawEvent
    # The scan it is attributed to: the latest when it arrived, or a lost GPU's last good one.
    gpu: GpuSample | None
    snapshot: NodeSnapshot | None
    allocations: NodeAllocations | None


@dataclass(slots=True)
class _Bucket:
    tokens: float
    refilled: float
    held_back: int = 0
    last: _Queued | None = None


@dataclass(slots=True)
class _Pending:
    queued: _Queued
    deadline: float


@dataclass(slots=True)
class RecorderCounts:
    """What the recorder did; tests, benchmarks and logs read it."""

    received: int = 0
    dropped: int = 0
    merged: int = 0
    records: int = 0
    held_back: int = 0
    kernel_unknown_gpu: int = 0
    lost_gpus: set[str] = field(default_factory=set)


class GpuEventRecorder:
    """Turns raw events into records for ``sink`` (the occupancy log's ``add_events``)."""

    def __init__(
        self,
        *,
        node_name: str,
        latest: Callable[[], NodeSnapshot | None],
        pod_names: PodNames,
        counters: GpuEventCounters,
        sink: Callable[[list[GpuEvent]], None] | None = None,
        boot_id: str = "",
        kernel_on: Callable[[], bool] = lambda: False,
        nvml_xid_on: Callable[[str], bool] = lambda _uuid: False,
        gpus_by_pci: Callable[[], dict[tuple[int, int, int], GpuAddress]] = dict,
        clock: Callable[[], float] = time.time,
        merge_seconds: float = MERGE_SECONDS,
        burst: int = BURST,
        rate: float = RATE_PER_SECOND,
    ) -> None:
        self.node_name = node_name
        self._latest = latest
        self._pod_names = pod_names
        self.counters = counters
        self._sink = sink
        self._boot_id = boot_id
        self._kernel_on = kernel_on
        self._nvml_xid_on = nvml_xid_on
        self._gpus_by_pci = gpus_by_pci
        self._clock = clock
        self._merge = merge_seconds
        self._burst = burst
        self._rate = rate
        self._queue: collections.deque[_Queued] = collections.deque()
        self._dropped: dict[_Key, int] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pending: dict[tuple[str, int | None], _Pending] = {}
        self._buckets: dict[_Key, _Bucket] = {}
        self._verdicts = ContainerVerdicts(None)
        # The last scan each GPU answered in, for the processes of a GPU that is then lost.
        self._good: dict[str, tuple[GpuSample, NodeAllocations | None]] = {}
        self._listeners: list[Callable[[], None]] = []
        self.counts = RecorderCounts()

    # -- producers (any thread) ---------------------------------------------------------

    def submit(self, raw: RawEvent) -> None:
        """Queue one raw event, attributed to the latest scan; never blocks."""
        snapshot = self._latest()
        self._put(_Queued(raw, None, snapshot, snapshot.allocations if snapshot else None))

    def kernel_xid(self, line: KernelXid) -> None:
        """Queue the XID of one kernel message, its PCI address mapped to a GPU where one has it."""
        address = self._gpus_by_pci().get(line.pci)
        if address is None:
            self.counts.kernel_unknown_gpu += 1
        self.submit(
            RawEvent(
                kind=GpuEventKind.XID,
                gpu_uuid=address.uuid if address is not None else "",
                time=self._clock(),
                arrived=time.monotonic(),
                source="kernel",
                xid=line.xid,
                pci_bus_id=address.pci_bus_id if address is not None else line.pci_text,
                culprit_pid=line.pid,
                culprit_name=line.name,
                message=line.message,
            )
        )

    def observe(self, snapshot: NodeSnapshot) -> None:
        """Find GPUs a scan reports lost (the sampler's scan hook; a dictionary write per GPU)."""
        lost = self.counts.lost_gpus
        for gpu in snapshot.sample.gpus:
            if gpu.error is None:
                self._good[gpu.uuid] = (gpu, snapshot.allocations)
                lost.discard(gpu.uuid)
            elif gpu.error == LOST and gpu.uuid and gpu.uuid not in lost:
                lost.add(gpu.uuid)
                before, allocations = self._good.get(gpu.uuid, (None, snapshot.allocations))
                raw = RawEvent(
                    kind=GpuEventKind.GPU_LOST,
                    gpu_uuid=gpu.uuid,
                    time=snapshot.sampled_at,
                    arrived=time.monotonic(),
                    source="scan",
                )
                self._put(_Queued(raw, before, None, allocations))

    def on_records(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the recorder's thread) after records went to the sink."""
        self._listeners.append(listener)

    def _put(self, queued: _Queued) -> None:
        with self._cond:
            self.counts.received += 1
            if len(self._queue) >= MAX_QUEUED:
                self.counts.dropped += 1
                raw = queued.raw
                key = (raw.gpu_uuid, raw.kind, raw.xid)
                if key in self._dropped or len(self._dropped) < MAX_KEYS:
                    self._dropped[key] = self._dropped.get(key, 0) + 1
                return
            self._queue.append(queued)
            if len(self._queue) == 1:
                self._cond.notify()

    # -- the recorder's thread -------------------------------------------------------------

    def start(self) -> None:
        """Start the recorder's thread."""
        self._thread = threading.Thread(target=self._run, name="gpu-event-recorder", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Record what is queued and pending, then stop the thread."""
        self._stop.set()
        with self._cond:
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._queue and not self._stop.is_set():
                    self._cond.wait(self._next_wake())
                batch = list(self._queue)
                self._queue.clear()
                dropped, self._dropped = self._dropped, {}
            stopping = self._stop.is_set()
            try:
                records = self._process(batch, dropped, flush_all=stopping)
                if records:
                    self._emit(records)
            except Exception:
                log.exception("recording GPU events failed")
            if stopping:
                return

    def _next_wake(self) -> float:
        now = time.monotonic()
        wake = 1.0 if any(b.held_back for b in self._buckets.values()) else 5.0
        for pending in self._pending.values():
            wake = min(wake, pending.deadline - now)
        return max(0.01, wake)

    def _process(
        self, batch: list[_Queued], dropped: dict[_Key, int], *, flush_all: bool
    ) -> list[GpuEvent]:
        out: list[GpuEvent] = []
        now = time.monotonic()
        for key, count in dropped.items():
            bucket = self._bucket(key, now)
            bucket.held_back += count
        for queued in batch:
            self._handle(queued, out)
        for merge_key, pending in list(self._pending.items()):
            if flush_all or pending.deadline <= now:
                del self._pending[merge_key]
                self._limit(pending.queued, out)
        self._release_held_back(now, out)
        return out

    def _handle(self, queued: _Queued, out: list[GpuEvent]) -> None:
        raw = queued.raw
        if raw.kind is not GpuEventKind.XID:
            self._limit(queued, out)
            return
        key = (raw.gpu_uuid or raw.pci_bus_id, raw.xid)
        other = self._pending.pop(key, None)
        if other is not None:
            if other.queued.raw.source != raw.source:
                self.counts.merged += 1
                self._limit(_merged(other.queued, queued), out)
                return
            self._limit(other.queued, out)
        if self._partner_expected(raw):
            self._pending[key] = _Pending(queued, raw.arrived + self._merge)
            return
        self._limit(queued, out)

    def _partner_expected(self, raw: RawEvent) -> bool:
        if raw.source == "nvml":
            return self._kernel_on()
        return bool(raw.gpu_uuid) and self._nvml_xid_on(raw.gpu_uuid)

    def _bucket(self, key: _Key, now: float) -> _Bucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_KEYS:
                # Forget the buckets with nothing held back: they only refill.
                self._buckets = {k: b for k, b in self._buckets.items() if b.held_back}
            bucket = self._buckets[key] = _Bucket(tokens=float(self._burst), refilled=now)
        else:
            bucket.tokens = min(
                float(self._burst), bucket.tokens + (now - bucket.refilled) * self._rate
            )
            bucket.refilled = now
        return bucket

    def _limit(self, queued: _Queued, out: list[GpuEvent]) -> None:
        raw = queued.raw
        bucket = self._bucket((raw.gpu_uuid, raw.kind, raw.xid), time.monotonic())
        if bucket.tokens < 1.0:
            bucket.held_back += 1
            bucket.last = queued
            self.counts.held_back += 1
            return
        bucket.tokens -= 1.0
        count = 1 + bucket.held_back
        bucket.held_back = 0
        bucket.last = None
        out.append(self._record(queued, count))

    def _release_held_back(self, now: float, out: list[GpuEvent]) -> None:
        """A record for the events held back of each key whose rate allows one again."""
        for key, bucket in list(self._buckets.items()):
            if not bucket.held_back:
                continue
            bucket = self._bucket(key, now)
            if bucket.tokens < 1.0 and not self._stop.is_set():
                continue
            bucket.tokens = max(0.0, bucket.tokens - 1.0)
            queued = bucket.last
            if queued is None:  # only dropped events: attribute them to the latest scan
                snapshot = self._latest()
                allocations = snapshot.allocations if snapshot else None
                raw = RawEvent(key[1], key[0], self._clock(), now, "nvml", xid=key[2])
                queued = _Queued(raw, None, snapshot, allocations)
            out.append(self._record(queued, bucket.held_back))
            bucket.held_back = 0
            bucket.last = None

    def _record(self, queued: _Queued, count: int) -> GpuEvent:
        raw = queued.raw
        gpu = queued.gpu
        if gpu is None and queued.snapshot is not None:
            gpu = next((g for g in queued.snapshot.sample.gpus if g.uuid == raw.gpu_uuid), None)
        mig_uuid, processes, allocated = self._attribute(raw, gpu, queued.allocations)
        event = GpuEvent(
            time=raw.time,
            kind=raw.kind,
            gpu_uuid=raw.gpu_uuid,
            mig_device_uuid=mig_uuid,
            xid=raw.xid,
            pci_bus_id=raw.pci_bus_id,
            culprit_pid=raw.culprit_pid,
            culprit_name=raw.culprit_name,
            source=raw.source,
            message=raw.message,
            count=count,
            processes=processes,
            allocated=allocated,
            boot_id=self._boot_id,
        )
        event.index_pods()
        return event

    def _attribute(
        self, raw: RawEvent, gpu: GpuSample | None, allocations: NodeAllocations | None
    ) -> tuple[str, tuple[EventProcess, ...], tuple[AllocatedPod, ...]]:
        if gpu is None:
            return "", (), ()
        migs = set()
        mig_uuid = ""
        if raw.gpu_instance_id is not None:
            found = [
                m.uuid
                for m in gpu.mig_devices
                if m.gpu_instance_id == raw.gpu_instance_id
                and (
                    raw.compute_instance_id is None
                    or m.compute_instance_id == raw.compute_instance_id
                )
            ]
            migs = set(found)
            mig_uuid = found[0] if len(found) == 1 else ""
        verdicts = self._verdicts
        if allocations is not None and allocations.containers is not verdicts.containers:
            verdicts = self._verdicts = ContainerVerdicts(allocations)
        names = self._pod_names
        processes = []
        for process in gpu.processes:
            if migs and process.mig_device_uuid not in migs:
                continue
            ref = process.container
            pod_uid = (ref.pod_uid or "") if ref is not None else ""
            container_id = ref.container_id if ref is not None else ""
            pod = names.get(pod_uid) if pod_uid else None
            namespace = pod.namespace if pod is not None else ""
            pod_name = pod.name if pod is not None else ""
            container = pod.containers.get(container_id, "") if pod is not None else ""
            verdict = ""
            if container:
                judged = verdicts.verdict(namespace, pod_name, container, gpu.uuid)
                verdict = judged.value if judged is not AllocationVerdict.UNKNOWN else ""
            elif ref is None:
                verdict = AllocationVerdict.NO_POD.value
            processes.append(
                EventProcess(
                    pid=process.pid,
                    process_name=process.name or "",
                    container_id=container_id,
                    container_name=container,
                    pod_uid=pod_uid,
                    pod_namespace=namespace,
                    pod_name=pod_name,
                    allocation_verdict=verdict,
                    mig_device_uuid=process.mig_device_uuid or "",
                )
            )
        allocated: set[AllocatedPod] = set()
        if allocations is not None and allocations.available:
            for container_alloc in allocations.containers:
                for device in container_alloc.devices:
                    if device.gpu_uuid != gpu.uuid:
                        continue
                    if migs and device.mig_device_uuid not in migs:
                        continue
                    allocated.add(AllocatedPod(container_alloc.namespace, container_alloc.pod))
        ordered = sorted(allocated, key=lambda a: (a.namespace, a.name))
        return mig_uuid, tuple(processes), tuple(ordered)

    def _emit(self, records: list[GpuEvent]) -> None:
        for record in records:
            self.counters.add(record)
        self.counts.records += len(records)
        if self._sink is not None:
            self._sink(records)
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("a GPU event listener failed")


def _merged(first: _Queued, second: _Queued) -> _Queued:
    """One event of an NVML XID and a kernel message of the same XID on the same GPU."""
    nvml, kernel = (first, second) if first.raw.source == "nvml" else (second, first)
    earlier = first.raw
    raw = RawEvent(
        kind=GpuEventKind.XID,
        gpu_uuid=nvml.raw.gpu_uuid,
        time=min(first.raw.time, second.raw.time),
        arrived=earlier.arrived,
        source="nvml+kernel",
        xid=nvml.raw.xid,
        gpu_instance_id=nvml.raw.gpu_instance_id,
        compute_instance_id=nvml.raw.compute_instance_id,
        pci_bus_id=nvml.raw.pci_bus_id or kernel.raw.pci_bus_id,
        culprit_pid=kernel.raw.culprit_pid,
        culprit_name=kernel.raw.culprit_name,
        message=kernel.raw.message,
    )
    # Attributed to the scan before the first of the two arrived.
    return _Queued(raw, first.gpu, first.snapshot, first.allocations)

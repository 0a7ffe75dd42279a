"""Whether each allocation's holder uses its device: ACTIVE, IDLE, UNUSED or UNKNOWN.

An allocation is one device the kubelet gave one container (a whole GPU, a
MIG device, a time-sliced or MPS replica, a DRA device). The agent judges it
every scan, because only it sees every scan: a holder's process above
``--idle-sm-percent`` on the device resets the idle clock; a window
(``--idle-after``) without one makes it IDLE (the holder's processes are
there, holding memory) or UNUSED (none was there for the whole window).

Only scans the agent can judge move the clock: a device that matches no GPU,
a GPU that failed or vanished, a process list or utilization that could not
be read, or a process on the device whose pod the agent cannot name yet (it
could be the holder's) make that scan UNKNOWN and leave the clock where it
was. The time between two scans counts at most ``IdlePolicy.gap_limit``, at
most half the window: a clock step, a stalled scan or the agent's own
restart can delay IDLE, never cause it. A new allocation starts ACTIVE: a
pod is idle only after a whole window of it.

Each allocation weighs its GPU-equivalents (``device_weight``). A DRA device's
share of its consumed capacity comes from the server with the pod's name; one
that arrives after the allocation began ends its record and starts another at
the new weight, so the log's weight x lifetime stays what the counters counted.

The judge's records are the occupancy log's allocation records, which the log
drains and writes, and gives back after a restart, so the idle clock goes on
where it was. docs/allocation.md states the rule and the GPU-equivalent weight.
"""

from __future__ import annotations

import math
import threading
import uuid as uuids
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from .history.durations import parse_duration
from .history.records import AllocationRecord
from .models import (
    AllocationKey,
    AllocationMechanism,
    AllocationUse,
    AllocationUseState,
    ContainerAllocations,
    ContainerRef,
    DeviceAllocation,
    GpuSample,
    NodeAllocations,
    NodeSample,
)
from .pod_names import DeviceShareKey, PodNames

__all__ = [
    "DEFAULT_IDLE_AFTER",
    "DEFAULT_IDLE_SM_PERCENT",
    "MIG_MEMORY_SLICES",
    "AllocationJudge",
    "IdlePolicy",
    "device_weight",
]

DEFAULT_IDLE_AFTER = "10m"
DEFAULT_IDLE_SM_PERCENT = 1.0
# A100, H100, H200 and B200 split their memory into eighths; a MIG device's share is
# rounded to the nearest eighth (A30's quarters are eighths too).
MIG_MEMORY_SLICES = 8
# An ended allocation's counters carry over to the next allocation of the same container
# on the same device within this long, so its series stays monotonic.
CARRY_SECONDS = 300.0

_SM_UNREAD = "processes.sm_utilization"
_DRA = AllocationMechanism.DRA
# The verdicts, looked up once: an enum member's lookup costs more than the rest of a step.
_ACTIVE_USE, _IDLE, _UNUSED, _UNKNOWN = (
    AllocationUse.ACTIVE,
    AllocationUse.IDLE,
    AllocationUse.UNUSED,
    AllocationUse.UNKNOWN,
)
_PRESENT = 1
_ACTIVE = 2
_UNREAD = 4
# A container the agent cannot name (it could be any holder's), and one that holds nothing.
_UNNAMED = -2
_NOT_HOLDER = -1


@dataclass(frozen=True, slots=True)
class IdlePolicy:
    """The idle window and the SM threshold; the agent's flags, declared once here."""

    idle_after: float = parse_duration(DEFAULT_IDLE_AFTER)
    idle_sm_percent: float = DEFAULT_IDLE_SM_PERCENT

    def gap_limit(self, interval: float) -> float:
        """The most seconds one step between scans counts: a few scans, under half the window."""
        return min(self.idle_after / 2, max(10 * interval, 30.0))


def device_weight(
    device: DeviceAllocation,
    gpus: Mapping[str, GpuSample],
    replicas: Mapping[str, int],
    replicas_listed: Mapping[str, int],
    consumed: float | None = None,
) -> float:
    """GPU-equivalents of one device: 1 for a whole GPU, a MIG device's share of its parent's
    memory, divided by the replicas of a time-shared device, times the share of a DRA device
    its claim consumes where the server sent one (``consumed``; docs/allocation.md).

    A DRA device on a GPU in MIG mode is one of its MIG devices: until the server says which
    (``mig_device_uuid``), the GPU is split evenly among them."""
    share = 1.0
    if device.gpu_uuid and (device.mig_device_uuid or device.mechanism is _DRA):
        share = _mig_share(gpus.get(device.gpu_uuid), device.mig_device_uuid or "")
    if consumed is not None and device.mechanism is _DRA:
        share *= consumed
    if device.mechanism is AllocationMechanism.DEVICE_PLUGIN and device.shared:
        base = device.device_id.partition("::")[0]
        # The kubelet's allocatable devices say how many replicas there are; without them,
        # at least as many as it handed out.
        count = replicas.get(base) or replicas_listed.get(base) or 1
        share /= count
    return share


def _dra_key(d: DeviceAllocation) -> tuple[str, str, str, str]:
    """A DRA device as the server's shares and MIG devices name it."""
    return d.resource, d.driver or "", d.pool or "", d.device_id


T = TypeVar("T")


def _by_dra_key(
    per_pod: list[tuple[str, Mapping[DeviceShareKey, T]]],
) -> dict[tuple[str, str, str, str], T]:
    """What the server sent per pod about its DRA devices (by claim, driver, pool and
    device), keyed as ``_dra_key`` names a device of the kubelet's answer."""
    return {
        (f"{namespace}/{claim}", driver, pool, device): value
        for namespace, told in per_pod
        for (claim, driver, pool, device), value in told.items()
    }


def _mig_share(parent: GpuSample | None, mig_uuid: str) -> float:
    if parent is None or not parent.mig_devices:
        return 1.0
    mig = next((m for m in parent.mig_devices if m.uuid == mig_uuid), None)
    total = parent.memory_total_bytes
    if mig is not None and mig.memory_total_bytes and total:
        slices = round(MIG_MEMORY_SLICES * mig.memory_total_bytes / total)
        return min(MIG_MEMORY_SLICES, max(1, slices)) / MIG_MEMORY_SLICES
    # Sizes unknown: the parent split evenly among its MIG devices.
    return 1.0 / len(parent.mig_devices)


def _listed_replicas(containers: Iterable[ContainerAllocations]) -> dict[str, int]:
    seen: dict[str, set[str]] = {}
    for c in containers:
        for d in c.devices:
            if d.shared and d.mechanism is AllocationMechanism.DEVICE_PLUGIN:
                seen.setdefault(d.device_id.partition("::")[0], set()).add(d.device_id)
    return {base: len(ids) for base, ids in seen.items()}


class AllocationJudge:
    """Judges every allocation each scan and keeps its lifetime record (the sampler's thread
    judges; the occupancy log drains the records from its writer thread)."""

    def __init__(
        self,
        *,
        node_name: str,
        boot_id: str = "",
        policy: IdlePolicy | None = None,
        pod_names: PodNames | None = None,
        interval: float = 1.0,
    ) -> None:
        self.node_name = node_name
        self.boot_id = boot_id
        self.policy = policy or IdlePolicy()
        self.pod_names = pod_names if pod_names is not None else PodNames()
        self.gap_limit = self.policy.gap_limit(interval)
        self._lock = threading.Lock()
        self._open: dict[AllocationKey, AllocationRecord] = {}
        self._ended: list[AllocationRecord] = []
        # Ended records are kept only for an occupancy log, which drains them.
        self.keeps_ended = False
        # (namespace, pod, container, gpu, MIG device) -> (counters, when they ended).
        self._carried: dict[tuple[str, ...], tuple[float, float, float]] = {}
        # The kubelet answer the holder index below was built for, and the names' version.
        self._containers: tuple[ContainerAllocations, ...] | None = None
        self._names_version = -1
        self._holders: dict[tuple[str, str, str], int] = {}
        # Each device of the answer: its key, container, device and holder index.
        self._plan: list[tuple[AllocationKey, ContainerAllocations, DeviceAllocation, int]] = []
        # Container ID -> holder index, _NOT_HOLDER or _UNNAMED.
        self._ident: dict[str, int] = {}
        self._by_container: dict[str, tuple[str, str, str]] = {}
        self._uids: dict[tuple[str, str], str] = {}
        # (claim "namespace/name", driver, pool, device) -> the share the server sent, and
        # the MIG device it said the device is.
        self._shares: dict[tuple[str, str, str, str], float] = {}
        self._migs: dict[tuple[str, str, str, str], str] = {}
        # The kubelet's containers with those MIG devices: what the snapshot and series say.
        self._published_containers: tuple[ContainerAllocations, ...] = ()
        # New shares or MIG devices arrived: open DRA records may weigh something else now.
        self._reweigh = False
        self._replicas_listed: dict[str, int] = {}

    @property
    def open_count(self) -> int:
        """Allocations the judge holds open."""
        return len(self._open)

    # -- the log's side -----------------------------------------------------------------

    def resume(self, records: Iterable[AllocationRecord]) -> None:
        """Continue allocations a previous run of this boot left open (their idle clocks too)."""
        with self._lock:
            for record in records:
                record.judged_at = record.last_seen
                key = (record.namespace, record.pod_name, record.container_name,
                       record.resource, record.device_id)  # fmt: skip
                self._open.setdefault(key, record)

    def drain(self) -> list[AllocationRecord]:
        """Copies of the open records and the records ended since the last drain."""
        with self._lock:
            ended, self._ended = self._ended, []
            copies = []
            for record in self._open.values():
                copy = replace(record, episodes=list(record.episodes))
                record.episodes.clear()
                copies.append(copy)
        return ended + copies

    def undrain(self, records: list[AllocationRecord]) -> None:
        """Put back what a failed write took: ended records, and episodes of open ones."""
        with self._lock:
            self._ended[:0] = [r for r in records if r.ended]
            for r in records:
                if not r.ended and r.episodes:
                    live = self._open.get(_key(r))
                    if live is None or live.key != r.key:
                        # Ended since, by a new weight: the episodes are still its own.
                        live = next((e for e in self._ended if e.key == r.key), None)
                    if live is not None:
                        live.episodes[:0] = r.episodes

    def cap_ended(self, limit: int) -> int:
        """Keep at most ``limit`` unwritten ended records, dropping the oldest; how many went."""
        with self._lock:
            excess = len(self._ended) - limit
            if excess <= 0:
                return 0
            del self._ended[:excess]
            return excess

    # -- the scan's side ----------------------------------------------------------------

    def judge(
        self, sample: NodeSample, allocations: NodeAllocations | None, now: float
    ) -> NodeAllocations | None:
        """``allocations`` with each device's use judged from ``sample`` taken at ``now``.

        Without the kubelet's answer nothing is judged and nothing ends: the
        open records wait for the next answer.
        """
        if allocations is None or not allocations.available:
            return allocations
        self._index(allocations.containers)
        if sample.error is not None and not sample.gpus:
            flags: dict[str, dict[int, int]] = {}
            blind: set[str] = set()
            gpus: dict[str, GpuSample] = {}
        else:
            flags, blind, gpus = self._scan(sample)
        complete = {u for u, g in gpus.items() if g.process_list_complete()}
        uses: dict[AllocationKey, AllocationUseState] = {}
        step = self._step
        with self._lock:
            if self._reweigh:
                self._reweigh = self._apply_shares(gpus, allocations)
            opened = self._open
            for key, c, d, holder in self._plan:
                record = opened.get(key)
                if record is None:
                    record = opened[key] = self._open_record(c, d, gpus, allocations, now)
                uses[key] = step(record, d, holder, flags, blind, complete, now)
            if len(uses) != len(opened):
                self._end_unlisted(uses, now)
        return replace(allocations, containers=self._published_containers, uses=uses)

    def _index(self, containers: tuple[ContainerAllocations, ...]) -> None:
        """Rebuild who holds what when the kubelet's answer or the pod names changed."""
        names = self.pod_names
        version = names.version
        if containers is self._containers and version == self._names_version:
            return
        if containers is not self._containers:
            self._holders = {}
            self._plan = []
            for c in containers:
                if c.devices:
                    holder = self._holders[(c.namespace, c.pod, c.container)] = len(self._holders)
                    self._plan += [
                        ((c.namespace, c.pod, c.container, d.resource, d.device_id), c, d, holder)
                        for d in c.devices
                    ]
            self._replicas_listed = _listed_replicas(containers)
            self._containers = containers
        if version != self._names_version:
            pods = names.all()
            self._by_container = {
                cid: (p.namespace, p.name, name) for p in pods for cid, name in p.containers.items()
            }
            self._uids = {(p.namespace, p.name): p.uid for p in pods}
            self._shares = _by_dra_key([(p.namespace, p.device_shares) for p in pods])
            self._migs = _by_dra_key([(p.namespace, p.device_migs) for p in pods])
            self._reweigh = bool(self._shares or self._migs)
            self._names_version = version
        # Each DRA device as the server's slices say: which MIG device it is, where one; the
        # same tuple until the answer or the names change (readers compare it by identity).
        self._plan = [(key, c, self._published(key, d), holder) for key, c, d, holder in self._plan]
        if self._migs or self._open:
            # The containers again, each with its devices as published in the plan.
            devices: dict[int, list[DeviceAllocation]] = {}
            for _, c, d, _ in self._plan:
                devices.setdefault(id(c), []).append(d)
            self._published_containers = tuple(
                replace(c, devices=tuple(devices[id(c)])) if c.devices else c for c in containers
            )
        else:
            self._published_containers = containers
        self._ident = {}

    def _identify(self, ref: ContainerRef) -> int:
        names = self.pod_names
        found: tuple[str, str, str] | None = None
        if ref.pod_uid:
            pod = names.get(ref.pod_uid)
            name = pod.containers.get(ref.container_id) if pod is not None else None
            if pod is not None and name:
                found = (pod.namespace, pod.name, name)
        else:
            found = self._by_container.get(ref.container_id)
        if found is None:
            return _UNNAMED
        return self._holders.get(found, _NOT_HOLDER)

    def _scan(
        self, sample: NodeSample
    ) -> tuple[dict[str, dict[int, int]], set[str], dict[str, GpuSample]]:
        """Per device, each holder's processes (present, active, utilization unread), and
        the devices with a process the agent cannot name."""
        threshold = self.policy.idle_sm_percent
        ident = self._ident
        flags: dict[str, dict[int, int]] = {}
        blind: set[str] = set()
        gpus: dict[str, GpuSample] = {}
        for gpu in sample.gpus:
            uuid = gpu.uuid
            gpus[uuid] = gpu
            if gpu.error is not None or not gpu.processes:
                continue
            unread = _PRESENT | _UNREAD if _SM_UNREAD in gpu.field_errors else _PRESENT
            on_gpu = flags.setdefault(uuid, {})
            for process in gpu.processes:
                ref = process.container
                if ref is None:
                    continue  # a host process holds no allocation
                holder = ident.get(ref.container_id)
                if holder is None:
                    holder = ident[ref.container_id] = self._identify(ref)
                mig = process.mig_device_uuid
                if holder < 0:
                    if holder == _UNNAMED:
                        blind.add(uuid)
                        if mig:
                            blind.add(mig)
                    continue
                if mig:
                    # NVML gives no per-process utilization on a MIG device: present is active.
                    found = _PRESENT | _ACTIVE
                    on_mig = flags.setdefault(mig, {})
                    on_mig[holder] = on_mig.get(holder, 0) | found
                else:
                    sm = process.sm_utilization
                    if sm is None:
                        # No sample in NVML's window is a process that did not run.
                        found = unread
                    else:
                        found = _PRESENT | _ACTIVE if sm > threshold else _PRESENT
                on_gpu[holder] = on_gpu.get(holder, 0) | found
        return flags, blind, gpus

    def _open_record(
        self,
        c: ContainerAllocations,
        d: DeviceAllocation,
        gpus: Mapping[str, GpuSample],
        allocations: NodeAllocations,
        now: float,
    ) -> AllocationRecord:
        record = AllocationRecord(
            key=uuids.uuid4().hex,
            node_name=self.node_name,
            namespace=c.namespace,
            pod_name=c.pod,
            container_name=c.container,
            resource=d.resource,
            device_id=d.device_id,
            boot_id=self.boot_id,
            first_seen=now,
            last_seen=now,
            gpu_uuid=d.gpu_uuid or "",
            mig_device_uuid=d.mig_device_uuid or "",
            pod_uid=self._uids.get((c.namespace, c.pod), ""),
            weight=device_weight(
                d, gpus, allocations.replicas, self._replicas_listed, self._share_of(d)
            ),
        )
        carried = self._carried.pop(_series(record), None)
        if carried is not None and now - carried[2] <= CARRY_SECONDS:
            record.counted_allocated, record.counted_idle = carried[0], carried[1]
        return record

    def _share_of(self, d: DeviceAllocation) -> float | None:
        if d.mechanism is not _DRA or not self._shares:
            return None
        return self._shares.get(_dra_key(d))

    def _published(self, key: AllocationKey, d: DeviceAllocation) -> DeviceAllocation:
        """``d`` (allocated as ``key``), a DRA device with the MIG device the server said it
        is (the kubelet's name gives only its parent GPU), or else its open record says
        (names read back after a restart keep no MIG devices); any other device as it is."""
        if d.mechanism is not _DRA:
            return d
        mig = self._migs.get(_dra_key(d))
        if mig is None:
            record = self._open.get(key)
            mig = (record.mig_device_uuid or None) if record is not None else None
        return d if d.mig_device_uuid == mig else replace(d, mig_device_uuid=mig)

    def _apply_shares(self, gpus: Mapping[str, GpuSample], allocations: NodeAllocations) -> bool:
        """Weigh open DRA records by the shares and MIG devices the server sent since they
        opened; True while one waits for its GPU to be seen (a MIG device's weight needs its
        parent)."""
        waiting = False
        for key, _, d, _ in self._plan:
            consumed = self._share_of(d)
            told = consumed is not None or _dra_key(d) in self._migs
            record = self._open.get(key) if told and d.mechanism is _DRA else None
            if record is None:
                continue
            if d.gpu_uuid is not None and d.gpu_uuid not in gpus:
                waiting = True
                continue
            weight = device_weight(d, gpus, allocations.replicas, self._replicas_listed, consumed)
            mig = d.mig_device_uuid or ""
            if not math.isclose(weight, record.weight) or mig != record.mig_device_uuid:
                self._open[key] = self._reweighed(record, weight, mig)
        return waiting

    def _reweighed(self, record: AllocationRecord, weight: float, mig: str) -> AllocationRecord:
        """``record`` at a new weight (or as another MIG device) from its last scan on: the
        log's weight x lifetime stays what the counters counted, so the old record ends there
        and a new one goes on."""
        if record.last_seen <= record.first_seen:
            # Nothing counted at the old weight yet.
            record.weight, record.mig_device_uuid = weight, mig
            return record
        idle = record.idle_start is not None
        _close(record)
        record.ended = True
        if self.keeps_ended:
            self._ended.append(record)
        successor = replace(
            record,
            key=uuids.uuid4().hex,
            first_seen=record.last_seen,
            weight=weight,
            mig_device_uuid=mig,
            ended=False,
            episodes=[],
            idle_closed_seconds=0.0,
        )
        if idle:
            # The idle episode goes on in the new record from where the old one's ended.
            successor.idle_start = record.idle_end
        return successor

    def _step(
        self,
        record: AllocationRecord,
        device: DeviceAllocation,
        holder: int,
        flags: Mapping[str, Mapping[int, int]],
        blind: set[str],
        complete: set[str],
        now: float,
    ) -> AllocationUseState:
        step = now - record.judged_at
        # NaN (the first scan) and a clock stepping back count nothing.
        step = min(step, self.gap_limit) if step > 0 else 0.0
        record.judged_at = now
        if now > record.last_seen:
            record.last_seen = now
        if not record.pod_uid:
            record.pod_uid = self._uids.get((record.namespace, record.pod_name), "")
        weight = record.weight
        record.counted_allocated += weight * step
        gpu = device.gpu_uuid
        unknown = True
        if gpu is not None and gpu in complete:
            unknown = False
            target = device.mig_device_uuid or gpu
            found = flags.get(target, {}).get(holder, 0) if holder >= 0 else 0
            if found & _ACTIVE:
                record.quiet_seconds = record.absent_seconds = 0.0
            elif found & _UNREAD:
                unknown = True
            elif found:
                record.quiet_seconds += step
                record.absent_seconds = 0.0
            elif target in blind:
                unknown = True
            else:
                record.quiet_seconds += step
                record.absent_seconds += step
        window = self.policy.idle_after
        if unknown:
            use = _UNKNOWN
            _close(record)
        elif record.quiet_seconds >= window:
            use = _UNUSED if record.absent_seconds >= window else _IDLE
            if record.idle_start is None:
                # The stretch counts as idle from its beginning, not from when it was judged.
                start = max(record.first_seen, now - record.quiet_seconds, record.idle_end)
                record.idle_start = start
                record.counted_idle += weight * max(0.0, now - start)
            else:
                record.counted_idle += weight * step
            record.idle_end = max(record.idle_end, now)
        else:
            use = _ACTIVE_USE
            _close(record)
        record.use = use.value
        idle = use is _IDLE or use is _UNUSED
        return AllocationUseState(
            use=use,
            idle_since=now - record.quiet_seconds if idle else None,
            idle_seconds=record.quiet_seconds if idle else 0.0,
            weight=weight,
            allocated_gpu_seconds=record.counted_allocated,
            idle_allocated_gpu_seconds=record.counted_idle,
        )

    def _end_unlisted(self, listed: Mapping[AllocationKey, object], now: float) -> None:
        for key in [k for k in self._open if k not in listed]:
            record = self._open.pop(key)
            _close(record)
            record.ended = True
            self._carried[_series(record)] = (record.counted_allocated, record.counted_idle, now)
            if self.keeps_ended:
                self._ended.append(record)
        if len(self._carried) > 2 * len(self._open) + 64:
            self._carried = {k: v for k, v in self._carried.items() if now - v[2] <= CARRY_SECONDS}


def _close(record: AllocationRecord) -> None:
    """End the open idle episode at its last idle scan."""
    start = record.idle_start
    if start is None:
        return
    end = max(start, record.idle_end)
    record.episodes.append((start, end))
    record.idle_closed_seconds += end - start
    record.idle_start = None


def _key(record: AllocationRecord) -> AllocationKey:
    return (record.namespace, record.pod_name, record.container_name, record.resource,
            record.device_id)  # fmt: skip


def _series(record: AllocationRecord) -> tuple[str, ...]:
    return (record.namespace, record.pod_name, record.container_name, record.gpu_uuid,
            record.mig_device_uuid)  # fmt: skip

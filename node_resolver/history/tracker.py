"""Folding scans into process lifetimes, in memory.

Every scan updates the open record of each (device, PID, start time) it
lists, opens one for each it has not seen, and ends those it no longer lists.
A GPU that failed in a scan (or a scan that failed as a whole) ends nothing:
a process the agent could not see is not a process that exited.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..allocation_verdicts import AllocationVerdict, ContainerVerdicts
from ..models import GpuProcess, NodeSnapshot
from ..pod_names import PodNames
from .records import OccupancyRecord

__all__ = ["Key", "OccupancyTracker"]

# (device UUID, PID, start ticks): a reused PID is a new key.
Key = tuple[str, int, int]


class OccupancyTracker:
    """The open records of one node and the records ended since the last drain."""

    def __init__(
        self,
        *,
        boot_id: str,
        pod_names: PodNames | None = None,
    ) -> None:
        self.boot_id = boot_id
        self._pod_names = pod_names
        # The kubelet's verdicts, rebuilt when its answer changes.
        self._verdicts = ContainerVerdicts(None)
        self._lock = threading.Lock()
        self._open: dict[Key, OccupancyRecord] = {}
        self._ended: list[OccupancyRecord] = []
        self._names_version = -1
        self._verdicts_judged: ContainerVerdicts | None = None

    @property
    def open_count(self) -> int:
        """Processes on a GPU right now, as far as the log knows."""
        return len(self._open)

    def resume(self, records: Iterable[OccupancyRecord]) -> None:
        """Continue records left open by a previous run on this boot."""
        with self._lock:
            for record in records:
                # The stored integrals run up to last_seen; the held readings go on from there.
                record.memory_since = record.sm_since = record.last_seen
                self._open[(record.device_uuid, record.pid, record.start_ticks)] = record

    def observe(self, snapshot: NodeSnapshot) -> None:
        """Fold one scan in."""
        sample = snapshot.sample
        now = snapshot.sampled_at
        if sample.error is not None and not sample.gpus:
            return
        names = self._pod_names
        verdicts = self._verdicts
        allocations = snapshot.allocations
        if (
            allocations is not None
            and allocations.available
            and allocations.containers is not verdicts.containers
        ):
            verdicts = self._verdicts = ContainerVerdicts(allocations)
        # Every record is judged again when the kubelet's answer changed; otherwise
        # only those it has not judged yet.
        rejudge = verdicts is not self._verdicts_judged
        self._verdicts_judged = verdicts
        opened: dict[Key, OccupancyRecord] = self._open
        get = opened.get
        seen: set[Key] = set()
        add = seen.add
        # Unnamed records are looked up again only when new names arrived.
        version = names.version if names is not None else 0
        rename = names is not None and version != self._names_version
        self._names_version = version
        # Processes on GPUs that failed this scan stay open, unseen.
        blind: set[str] = set()
        with self._lock:
            for gpu in sample.gpus:
                uuid = gpu.uuid
                if gpu.error is not None or "processes" in gpu.field_errors:
                    blind.add(uuid)
                    continue
                for process in gpu.processes:
                    start = process.start_time
                    if start is None:
                        start = -1
                    key = (process.mig_device_uuid or uuid, process.pid, start)
                    add(key)
                    record = get(key)
                    if record is None:
                        record = self._open_record(uuid, process, start, now, names)
                        opened[key] = record
                    else:
                        # A reading counts from the scan that saw it until the next change.
                        memory = process.used_memory_bytes
                        if memory != record.last_memory_bytes:
                            record.settle_memory(now)
                            record.last_memory_bytes = memory
                            if memory is not None and memory > record.peak_memory_bytes:
                                record.peak_memory_bytes = memory
                        sm = process.sm_utilization
                        held = record.last_sm_utilization
                        if sm != held:
                            # settle_sm, inlined: SM readings change nearly every scan.
                            since = record.sm_since
                            if held is not None and now > since:
                                record.sm_percent_seconds += held * (now - since)
                                record.sm_seconds += now - since
                            record.sm_since = now
                            record.last_sm_utilization = sm
                        record.last_seen = now
                        if rename and not record.pod_name and record.pod_uid:
                            _name(record, names)  # type: ignore[arg-type]
                    if record.container_name and (rejudge or not record.allocation_verdict):
                        verdict = verdicts.verdict(
                            record.pod_namespace, record.pod_name, record.container_name, uuid
                        )
                        # The record keeps its last verdict where this answer cannot tell.
                        if verdict is not AllocationVerdict.UNKNOWN:
                            record.allocation_verdict = verdict.value
            if len(seen) != len(opened):
                self._end_unseen(seen, blind)

    def _open_record(
        self,
        gpu_uuid: str,
        process: GpuProcess,
        start: int,
        now: float,
        names: PodNames | None,
    ) -> OccupancyRecord:
        container = process.container
        record = OccupancyRecord(
            gpu_uuid=gpu_uuid,
            mig_device_uuid=process.mig_device_uuid or "",
            pid=process.pid,
            start_ticks=start,
            boot_id=self.boot_id,
            first_seen=now,
            last_seen=now,
            process_name=process.name or "",
            container_id=container.container_id if container is not None else "",
            pod_uid=(container.pod_uid or "") if container is not None else "",
            peak_memory_bytes=process.used_memory_bytes or 0,
            last_memory_bytes=process.used_memory_bytes,
            last_sm_utilization=process.sm_utilization,
            memory_since=now,
            sm_since=now,
        )
        if record.pod_uid and names is not None:
            _name(record, names)
        return record

    def _end_unseen(self, seen: set[Key], blind: set[str]) -> None:
        for key in [key for key in self._open if key not in seen]:
            record = self._open[key]
            if record.gpu_uuid in blind:
                continue
            del self._open[key]
            record.ended = True
            self._ended.append(record)

    def end_all(self) -> None:
        """End every open record at its last sighting (the node rebooted)."""
        with self._lock:
            for record in self._open.values():
                record.ended = True
                self._ended.append(record)
            self._open.clear()

    def drain(self) -> list[OccupancyRecord]:
        """Copies of the open records and the records ended since the last drain."""
        with self._lock:
            ended, self._ended = self._ended, []
            # Copies: the scan thread keeps updating the open ones while they are written.
            copies = [_copy(record) for record in self._open.values()]
        for record in ended + copies:
            # What is written holds the integrals up to last_seen.
            record.settle()
        return ended + copies

    def undrain(self, records: list[OccupancyRecord]) -> None:
        """Put back ended records whose write failed, so the next flush retries them."""
        with self._lock:
            self._ended[:0] = [record for record in records if record.ended]

    def cap_ended(self, limit: int) -> int:
        """Keep at most ``limit`` unwritten ended records, dropping the oldest; how many went."""
        with self._lock:
            excess = len(self._ended) - limit
            if excess <= 0:
                return 0
            del self._ended[:excess]
            return excess

    def fill_names(self, records: Iterable[OccupancyRecord]) -> None:
        """Name the pods of records whose names arrived after they opened."""
        names = self._pod_names
        if names is None:
            return
        for record in records:
            if record.pod_uid and not record.pod_name:
                _name(record, names)


def _name(record: OccupancyRecord, names: PodNames) -> None:
    pod = names.get(record.pod_uid)
    if pod is None:
        return
    record.pod_namespace = pod.namespace
    record.pod_name = pod.name
    if record.container_id:
        record.container_name = pod.containers.get(record.container_id, "")


def _copy(record: OccupancyRecord) -> OccupancyRecord:
    copy = OccupancyRecord.__new__(OccupancyRecord)
    for name in OccupancyRecord.__slots__:
        setattr(copy, name, getattr(record, name))
    return copy

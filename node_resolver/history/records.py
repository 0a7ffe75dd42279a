"""What the occupancy log holds and how it is asked: records, queries, usage rows."""

from __future__ import annotations

import enum
import math
from collections.abc import Collection
from dataclasses import dataclass, field

__all__ = [
    "GIB",
    "MAX_FILTER_VALUES",
    "AllocationRecord",
    "HistoryPage",
    "HistoryQuery",
    "OccupancyRecord",
    "UsageGroup",
    "UsageQuery",
    "UsageRow",
]

GIB = float(1 << 30)
# Per filter list of a query: more than this is a caller's mistake, not a query (the agent
# refuses it; the server tells a caller of more namespaces than this so).
MAX_FILTER_VALUES = 256


@dataclass(slots=True)
class OccupancyRecord:
    """One process lifetime on one GPU (or MIG device), as accumulated scan by scan.

    Memory and SM utilization are sampled and held: each scan's value counts
    until the next scan, so the means are weighted by time, not by scans.
    """

    gpu_uuid: str
    # "" when the process runs on the whole GPU.
    mig_device_uuid: str
    pid: int
    # Clock ticks after boot; -1 when /proc did not give it.
    start_ticks: int
    boot_id: str
    first_seen: float
    last_seen: float
    process_name: str = ""
    container_id: str = ""
    pod_uid: str = ""
    pod_namespace: str = ""
    pod_name: str = ""
    container_name: str = ""
    # True once the process left the GPU; its end is then ``last_seen``.
    ended: bool = False
    peak_memory_bytes: int = 0
    # The reading held since ``memory_since``; the integrals cover the time before it.
    last_memory_bytes: int | None = None
    memory_byte_seconds: float = 0.0
    memory_seconds: float = 0.0
    last_sm_utilization: int | None = None
    sm_percent_seconds: float = 0.0
    sm_seconds: float = 0.0
    # An AllocationVerdict's value, as the agent last judged it; "" until it could tell.
    allocation_verdict: str = ""
    # The store's row id (0 until written); orders records that started together.
    id: int = 0
    # When the held readings began (the integrals stop there); NaN: at last_seen.
    memory_since: float = math.nan
    sm_since: float = math.nan

    def settle_memory(self, now: float) -> None:
        """Fold the held memory reading into its integral up to ``now`` (it changes then)."""
        since = self.memory_since
        held = self.last_memory_bytes
        if held is not None and since == since and now > since:
            self.memory_byte_seconds += held * (now - since)
            self.memory_seconds += now - since
        self.memory_since = now

    def settle_sm(self, now: float) -> None:
        """Fold the held SM reading into its integral up to ``now`` (it changes then)."""
        since = self.sm_since
        held = self.last_sm_utilization
        if held is not None and since == since and now > since:
            self.sm_percent_seconds += held * (now - since)
            self.sm_seconds += now - since
        self.sm_since = now

    def settle(self) -> None:
        """Fold the held readings into the integrals, up to last_seen."""
        seen = self.last_seen
        since = self.memory_since
        if since == since and self.last_memory_bytes is not None and seen > since:
            self.memory_byte_seconds += self.last_memory_bytes * (seen - since)
            self.memory_seconds += seen - since
        since = self.sm_since
        if since == since and self.last_sm_utilization is not None and seen > since:
            self.sm_percent_seconds += self.last_sm_utilization * (seen - since)
            self.sm_seconds += seen - since
        self.memory_since = self.sm_since = seen

    @property
    def device_uuid(self) -> str:
        """The MIG device's UUID on a MIG slice, else the GPU's."""
        return self.mig_device_uuid or self.gpu_uuid

    @property
    def end(self) -> float | None:
        """When the process was last seen on the GPU; None while it runs."""
        return self.last_seen if self.ended else None

    @property
    def mean_memory_bytes(self) -> float | None:
        """Time-weighted mean GPU memory; the one reading when there was only one."""
        return _mean(
            self.memory_byte_seconds, self.memory_seconds, self.last_memory_bytes,
            self.memory_since, self.last_seen,
        )  # fmt: skip

    @property
    def mean_sm_utilization(self) -> float | None:
        """Time-weighted mean SM utilization (percent), where NVML gave it."""
        return _mean(
            self.sm_percent_seconds, self.sm_seconds, self.last_sm_utilization,
            self.sm_since, self.last_seen,
        )  # fmt: skip

    @property
    def gpu_seconds(self) -> float:
        """How long the process held the GPU, first seen to last seen."""
        return max(0.0, self.last_seen - self.first_seen)


def _mean(
    integral: float, seconds: float, held: int | None, since: float, last_seen: float
) -> float | None:
    if held is not None and since == since and last_seen > since:
        integral += held * (last_seen - since)
        seconds += last_seen - since
    if seconds > 0:
        return integral / seconds
    return None if held is None else float(held)


@dataclass(slots=True)
class HistoryPage:
    """One page of an agent's log as the server receives it."""

    node_name: str
    records: list[OccupancyRecord]
    # For each record, the page token that resumes right after it.
    cursors: list[str]
    # Empty on the last page.
    next_page_token: str
    # "ok", "off" or what is wrong with the agent's log.
    status: str


@dataclass(frozen=True, slots=True)
class HistoryQuery:
    """Records overlapping [since, until), oldest first, after a page cursor."""

    since: float
    until: float | None = None
    gpu_uuids: Collection[str] = ()
    pod_uids: Collection[str] = ()
    namespaces: Collection[str] = ()
    pod_names: Collection[str] = ()
    limit: int = 500
    # (first_seen, id) of the last record of the previous page.
    after: tuple[float, int] | None = None


class UsageGroup(enum.Enum):
    """What usage rows are summed by."""

    NAMESPACE = "NAMESPACE"
    POD = "POD"
    NODE = "NODE"
    GPU = "GPU"


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """GPU-seconds and GiB-seconds over [since, until), summed by ``group_by``."""

    since: float
    until: float
    group_by: frozenset[UsageGroup] = frozenset()
    namespaces: Collection[str] = ()


@dataclass(slots=True)
class UsageRow:
    """One group's sums; a key is None where the query did not group by it."""

    namespace: str | None
    pod_name: str | None
    gpu_uuid: str | None
    gpu_seconds: float
    memory_gib_seconds: float
    node_name: str | None = None
    # GPU-equivalents x seconds allocated (by the kubelet), and the part spent IDLE or UNUSED.
    allocated_gpu_seconds: float = 0.0
    idle_allocated_gpu_seconds: float = 0.0


@dataclass(slots=True)
class AllocationRecord:
    """One allocation's lifetime: one device the kubelet gave one container, judged scan by scan.

    The idle clock (``quiet_seconds``, ``absent_seconds``) counts only scans the
    agent could judge, so it goes on from the log after a restart. Idle stretches
    (each at least the idle window long) are kept as episodes, so that the idle
    part of any time range is exact.
    """

    # A random key the episodes refer to; stable for the record's life (a weight learnt
    # later, a DRA device's share, ends the record and starts another).
    key: str
    node_name: str
    namespace: str
    pod_name: str
    container_name: str
    # The resource name (or DRA claim "namespace/name") and device ID, as the kubelet gave them.
    resource: str
    device_id: str
    boot_id: str
    first_seen: float
    last_seen: float
    gpu_uuid: str = ""
    mig_device_uuid: str = ""
    pod_uid: str = ""
    weight: float = 1.0
    ended: bool = False
    # Judged seconds since a holder's process last ran above the threshold, and since one
    # was last on the device.
    quiet_seconds: float = 0.0
    absent_seconds: float = 0.0
    # An AllocationUse's value, as last judged.
    use: str = ""
    # Seconds of idle episodes already closed; the open episode's start and last idle scan.
    idle_closed_seconds: float = 0.0
    idle_start: float | None = None
    idle_end: float = 0.0
    # Closed episodes (start, end) not yet written.
    episodes: list[tuple[float, float]] = field(default_factory=list)
    # GPU-equivalent seconds this agent process counted (its counters; not stored).
    counted_allocated: float = 0.0
    counted_idle: float = 0.0
    # The last scan that judged it (NaN: none since it was opened or resumed).
    judged_at: float = math.nan

    @property
    def idle_seconds(self) -> float:
        """Seconds spent IDLE or UNUSED over its life so far."""
        open_part = 0.0 if self.idle_start is None else max(0.0, self.idle_end - self.idle_start)
        return self.idle_closed_seconds + open_part

    @property
    def allocated_seconds(self) -> float:
        """First to last sighting."""
        return max(0.0, self.last_seen - self.first_seen)

"""The occupancy log of one agent: the tracker in memory, the store on disk, a writer thread.

Scans update the tracker on the sampling thread (a few dictionary operations
per process). A writer thread flushes it to the store every
``flush_interval`` seconds, one transaction per flush, and applies the
retention and size bounds. A read flushes first, so it sees the latest scan
(reads that arrive together share one flush), then reads beside the writer.

A store that cannot be opened or written (a corrupt file, a full disk, a lock
held by someone else) is logged once and reported by ``status``; the tracker
keeps the records in memory and the next flush tries again. The live
snapshot never waits on any of this.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ..gpu_events.records import EventQuery, GpuEvent
from ..models import NodeSnapshot
from ..pod_names import PodNames
from .events import name_pending
from .records import AllocationRecord, HistoryQuery, OccupancyRecord, UsageQuery, UsageRow
from .store import HistoryStore
from .tracker import OccupancyTracker

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_RETENTION",
    "FLUSH_SECONDS",
    "OFF",
    "OK",
    "AllocationKeeper",
    "HistoryLog",
    "HistorySettings",
    "read_boot_id",
]

log = logging.getLogger(__name__)

OK = "ok"
OFF = "off"
DEFAULT_RETENTION = "30d"
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
FLUSH_SECONDS = 5.0
# Bounds are applied every this many flushes (and at start): a size check is a stat, a
# retention delete an indexed range.
_PRUNE_EVERY = 12
# Ended records kept in memory while the store cannot take them; the oldest go first.
_MAX_UNWRITTEN = 100_000
# GPU events waiting for the store, likewise (a storm is rate-limited before it gets here).
_MAX_UNWRITTEN_EVENTS = 10_000


class AllocationKeeper(Protocol):
    """Whoever judges the allocations (``allocation_use.AllocationJudge``): the log keeps
    its records and gives them back after a restart."""

    keeps_ended: bool

    def resume(self, records: Iterable[AllocationRecord]) -> None:
        """Continue the allocations a previous run left open."""
        ...

    def drain(self) -> list[AllocationRecord]:
        """The records to write: copies of the open ones, and those ended since."""
        ...

    def undrain(self, records: list[AllocationRecord]) -> None:
        """Take back what a failed write took."""
        ...

    def cap_ended(self, limit: int) -> int:
        """Drop the oldest unwritten ended records beyond ``limit``; how many went."""
        ...


@dataclass(frozen=True, slots=True)
class HistorySettings:
    """Where the log lives and how much of it to keep."""

    directory: Path
    retention_seconds: float
    max_bytes: int = DEFAULT_MAX_BYTES
    flush_interval: float = FLUSH_SECONDS


def read_boot_id(proc_root: str) -> str:
    """This boot's ID from ``<proc_root>/sys/kernel/random/boot_id``; "" when unreadable."""
    try:
        return Path(proc_root, "sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


class HistoryLog:
    """Records every process lifetime on this node's GPUs, durably and within bounds."""

    def __init__(
        self,
        settings: HistorySettings,
        *,
        boot_id: str,
        pod_names: PodNames,
        clock: Callable[[], float] = time.time,
        allocations: AllocationKeeper | None = None,
    ) -> None:
        self.settings = settings
        self.pod_names = pod_names
        # The allocations' judge, whose records (lifetimes, idle clocks) the log keeps.
        self.allocations = allocations
        if allocations is not None:
            allocations.keeps_ended = True
        self.store = HistoryStore(settings.directory, max_bytes=settings.max_bytes)
        self.tracker = OccupancyTracker(boot_id=boot_id, pod_names=pod_names)
        self._clock = clock
        self._flush_lock = threading.Lock()
        # Flushes begun so far: a read that finds one begun after it arrived needs no other.
        self._flushes_begun = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._status = OK
        self._flushes = 0
        # Flushes done so far; tests wait on it.
        self.flushed = 0
        # GPU events waiting for the next flush; those dropped while the store failed.
        self._events: list[GpuEvent] = []
        self._events_lock = threading.Lock()
        self.events_dropped = 0

    @property
    def status(self) -> str:
        """ "ok", or what is wrong with the store."""
        return self._status

    def observe(self, snapshot: NodeSnapshot) -> None:
        """Fold one scan in (the sampler's ``on_scan``)."""
        self.tracker.observe(snapshot)

    def start(self) -> None:
        """Open the store, continue this boot's open records, and start flushing."""
        self._open()
        self._thread = threading.Thread(target=self._run, name="history-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Flush what is left and close the store; open records stay open for the next run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        self.flush()
        try:
            self.store.close()
        except (sqlite3.Error, OSError) as exc:
            self._failed(exc)

    def _open(self) -> bool:
        if self.store.is_open:
            return True
        try:
            self.store.open()
            boot_id = self.tracker.boot_id
            ended = self.store.end_open(boot_id)
            if ended:
                log.info("the node rebooted: ended %d records at their last sighting", ended)
            # Bounds first, so that what is loaded is what is kept.
            self.store.prune(self._clock(), self.settings.retention_seconds)
            self.pod_names.load(self.store.pod_names(self.pod_names.max_bytes))
            resumed = self.store.open_records(boot_id)
            self.tracker.resume(resumed)
            if self.allocations is not None:
                self.store.end_open_allocations(boot_id)
                self.allocations.resume(self.store.open_allocations(boot_id))
        except (sqlite3.Error, OSError) as exc:
            with contextlib.suppress(sqlite3.Error, OSError):
                self.store.close()
            self._failed(exc)
            return False
        log.info(
            "occupancy log in %s: continuing %d running processes", self.store.path, len(resumed)
        )
        return True

    def flush(self) -> bool:
        """Write the records and names changed since the last flush; False if the store failed."""
        with self._flush_lock:
            return self._flush()

    def _flush_for_read(self) -> None:
        begun = self._flushes_begun
        with self._flush_lock:
            if self._flushes_begun == begun:
                self._flush()

    def _flush(self) -> bool:
        self._flushes_begun += 1
        if not self._open():
            self._cap_unwritten()
            return False
        records = self.tracker.drain()
        self.tracker.fill_names(records)
        pods = self.pod_names.drain_changed(self.store.names_per_write)
        allocations = self.allocations.drain() if self.allocations is not None else []
        with self._events_lock:
            events, self._events = self._events, []
        now = self._clock()
        try:
            self.store.write(records, pods, now, allocations)
            if events:
                name_pending(events, self.pod_names)
                self.store.write_events(events)
            self._flushes += 1
            if self._flushes % _PRUNE_EVERY == 0 or self.store.size_bytes() > (
                self.settings.max_bytes
            ):
                self.store.prune(now, self.settings.retention_seconds)
        except (sqlite3.Error, OSError) as exc:
            self.tracker.undrain(records)
            self.pod_names.restore_changed(pods)
            if self.allocations is not None:
                self.allocations.undrain(allocations)
            self.add_events(events, first=True)
            self._cap_unwritten()
            self._failed(exc)
            return False
        self.flushed += 1
        if self._status != OK:
            log.info("the occupancy log in %s is writable again", self.store.path)
            self._status = OK
        return True

    def add_events(self, events: list[GpuEvent], *, first: bool = False) -> None:
        """Queue GPU events for the next flush (``first``: ahead of those queued already)."""
        if not events:
            return
        with self._events_lock:
            self._events = events + self._events if first else self._events + events
            excess = len(self._events) - _MAX_UNWRITTEN_EVENTS
            if excess > 0:
                del self._events[:excess]
                self.events_dropped += excess

    def gpu_events(self, query: EventQuery) -> tuple[list[GpuEvent], str, int]:
        """Events as ``query`` asks (after a flush), this log's ID and its last sequence."""
        self._flush_for_read()
        position = self.store.events_position()
        return self.store.gpu_events(query), *position

    def _cap_unwritten(self) -> None:
        dropped = self.tracker.cap_ended(_MAX_UNWRITTEN)
        if self.allocations is not None:
            dropped += self.allocations.cap_ended(_MAX_UNWRITTEN)
        if dropped:
            log.warning("dropped %d ended records the occupancy log could not write", dropped)

    def _failed(self, exc: BaseException) -> None:
        status = f"{type(exc).__name__}: {exc} ({self.store.path})"
        if status != self._status:
            # Once per distinct failure, not once per flush.
            log.error("occupancy log unusable, keeping records in memory: %s", status)
        self._status = status

    def history(self, query: HistoryQuery) -> list[OccupancyRecord]:
        """Records overlapping the query's range (after a flush, so the latest scan counts)."""
        self._flush_for_read()
        return self.store.history(query)

    def usage(self, query: UsageQuery) -> list[UsageRow]:
        """GPU- and GiB-seconds over the query's range, grouped."""
        self._flush_for_read()
        return self.store.usage(query)

    def prune(self) -> int:
        """Apply retention and the size bound now; how many records went."""
        with self._flush_lock:
            return self.store.prune(self._clock(), self.settings.retention_seconds)

    def _run(self) -> None:
        while not self._stop.wait(self.settings.flush_interval):
            try:
                self.flush()
            except Exception:
                log.exception("occupancy log flush crashed")

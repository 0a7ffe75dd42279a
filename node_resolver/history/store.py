"""The occupancy log on disk: SQLite in WAL mode, bounded by age and by size.

One row per process lifetime, written by upsert on its key, so a flush after
a restart continues the same rows. Pod names live in their own table and are
joined when records are read: names that arrive after a record was written
still name it.

The size bound counts every table and the WAL. Past it, pod names that no
record refers to go first (anyone with the agent's token can push names), then
the oldest ended records, until what the tables hold fits beside a WAL of its
checkpoint size; their pages are handed back (incremental vacuum) and the WAL
is checkpointed and truncated. Names are written a WAL's worth at a time, so
one write cannot take the files far past the bound either.

Writes go through one connection, serialised by one lock; reads go to a
bounded pool of read-only connections, which WAL mode lets read beside the
writer and each other, so a long usage sum holds up neither a page of records
nor a write.

Every method raises ``sqlite3.Error`` or ``OSError``; the caller (HistoryLog)
turns those into the node's history status.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..gpu_events.records import EventQuery, GpuEvent
from ..pod_names import PodName, pod_bytes
from . import events as event_rows
from .allocation_store import (
    ALLOCATION_SCHEMA,
    allocation_usage,
    delete_oldest_allocations,
    end_open_allocations,
    open_allocations,
    prune_allocations,
    write_allocations,
)
from .records import (
    GIB,
    AllocationRecord,
    HistoryQuery,
    OccupancyRecord,
    UsageGroup,
    UsageQuery,
    UsageRow,
)

__all__ = ["DB_NAME", "READERS", "HistoryStore"]

DB_NAME = "history.sqlite"
SCHEMA_VERSION = "1"
# Files below this are never pruned for size: SQLite's own overhead lives here.
_SIZE_FLOOR = 64 * 1024
# The WAL is checkpointed and cut back at this size (or an eighth of the bound).
_WAL_BYTES = 1 << 20
# Pruning for size deletes at least this share of the candidates per round (more when
# the excess is larger).
_PRUNE_SHARE = 0.1
# Read-only connections at most: reads beyond wait for one.
READERS = 4

_COLUMNS = (
    "gpu_uuid", "mig_device_uuid", "pid", "start_ticks", "boot_id", "first_seen", "last_seen",
    "ended", "process_name", "container_id", "pod_uid", "pod_namespace", "pod_name",
    "container_name", "peak_memory", "last_memory", "memory_byte_seconds", "memory_seconds",
    "last_sm", "sm_percent_seconds", "sm_seconds", "allocation_verdict",
)  # fmt: skip
_KEY = ("gpu_uuid", "mig_device_uuid", "pid", "start_ticks", "boot_id")
_UPDATED = [c for c in _COLUMNS if c not in _KEY and c != "first_seen"]

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS occupancy (
    id INTEGER PRIMARY KEY,
    gpu_uuid TEXT NOT NULL, mig_device_uuid TEXT NOT NULL, pid INTEGER NOT NULL,
    start_ticks INTEGER NOT NULL, boot_id TEXT NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, ended INTEGER NOT NULL,
    process_name TEXT NOT NULL, container_id TEXT NOT NULL, pod_uid TEXT NOT NULL,
    pod_namespace TEXT NOT NULL, pod_name TEXT NOT NULL, container_name TEXT NOT NULL,
    peak_memory INTEGER NOT NULL, last_memory INTEGER,
    memory_byte_seconds REAL NOT NULL, memory_seconds REAL NOT NULL,
    last_sm INTEGER, sm_percent_seconds REAL NOT NULL, sm_seconds REAL NOT NULL,
    allocation_verdict TEXT NOT NULL,
    UNIQUE ({", ".join(_KEY)})
);
CREATE INDEX IF NOT EXISTS occupancy_by_start ON occupancy (first_seen, id);
CREATE INDEX IF NOT EXISTS occupancy_by_end ON occupancy (ended, last_seen);
CREATE TABLE IF NOT EXISTS pods (
    uid TEXT PRIMARY KEY, namespace TEXT NOT NULL, name TEXT NOT NULL,
    containers TEXT NOT NULL, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_UPSERT = (
    f"INSERT INTO occupancy ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
    f"ON CONFLICT ({', '.join(_KEY)}) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _UPDATED)
)

# Names written on the record win; otherwise the pods table's, which may have come later.
_SELECT = """
SELECT o.id, o.gpu_uuid, o.mig_device_uuid, o.pid, o.start_ticks, o.boot_id, o.first_seen,
       o.last_seen, o.ended, o.process_name, o.container_id, o.pod_uid,
       COALESCE(NULLIF(o.pod_namespace, ''), p.namespace, '') AS ns,
       COALESCE(NULLIF(o.pod_name, ''), p.name, '') AS podname,
       o.container_name, o.peak_memory, o.last_memory, o.memory_byte_seconds, o.memory_seconds,
       o.last_sm, o.sm_percent_seconds, o.sm_seconds, o.allocation_verdict, p.containers
FROM occupancy o LEFT JOIN pods p ON o.pod_uid != '' AND p.uid = o.pod_uid
"""


class HistoryStore:
    """One SQLite file under ``directory``: one writer, up to ``readers`` readers beside it."""

    def __init__(
        self, directory: str | os.PathLike[str], *, max_bytes: int, readers: int = READERS
    ) -> None:
        self.path = Path(directory) / DB_NAME
        self.max_bytes = max_bytes
        # The WAL is checkpointed at this size, often enough that it stays well inside the
        # bound (and small: at most 1 MiB, a few minutes of a busy node's flushes).
        self.wal_bytes = max(_SIZE_FLOOR, min(_WAL_BYTES, max_bytes // 8))
        # Pod names written at a time (as ``pod_bytes`` counts them): a node's full set
        # fits, and one write cannot take the WAL far past its checkpoint size.
        self.names_per_write = self.wal_bytes
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._reader_slots = threading.BoundedSemaphore(readers)
        self._pool_lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        # Bumped by close: a reader of an earlier opening is closed when handed back.
        self._opening = 0

    # -- lifetime ------------------------------------------------------------------

    def open(self) -> None:
        """Open (creating if needed) and check the schema; raises on a corrupt file."""
        with self._lock:
            if self._db is not None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                db.execute("PRAGMA busy_timeout = 1000")
                # Before the first table: only then does it take effect without a VACUUM.
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")
                mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise sqlite3.OperationalError(f"cannot use WAL mode (got {mode})")
                db.execute("PRAGMA synchronous = NORMAL")
                page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
                pages = max(16, self.wal_bytes // page_size)
                db.execute(f"PRAGMA wal_autocheckpoint = {pages}")
                db.execute(f"PRAGMA journal_size_limit = {self.wal_bytes}")
                db.executescript(_SCHEMA)
                db.executescript(ALLOCATION_SCHEMA)
                db.executescript(event_rows.EVENTS_SCHEMA)
                db.execute(
                    "INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)",
                    (SCHEMA_VERSION,),
                )
            except BaseException:
                db.close()
                raise
            self._db = db

    def close(self) -> None:
        """Checkpoint and close; safe to call twice (readers in use close when handed back)."""
        with self._lock:
            db, self._db = self._db, None
        with self._pool_lock:
            idle, self._idle = self._idle, []
            self._opening += 1
        for reader in idle:
            reader.close()
        if db is not None:
            try:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                db.close()

    @property
    def is_open(self) -> bool:
        """True once ``open`` succeeded (and until ``close``)."""
        return self._db is not None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise sqlite3.OperationalError("the history database is not open")
        return self._db

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection from the pool, waiting while all are in use."""
        with self._reader_slots:
            with self._pool_lock:
                self._conn()
                opening = self._opening
                reader = self._idle.pop() if self._idle else None
            if reader is None:
                reader = sqlite3.connect(
                    self.path.resolve().as_uri() + "?mode=ro",
                    uri=True,
                    check_same_thread=False,
                    isolation_level=None,
                )
                reader.execute("PRAGMA busy_timeout = 1000")
            try:
                yield reader
            finally:
                with self._pool_lock:
                    keep = opening == self._opening
                    if keep:
                        self._idle.append(reader)
                if not keep:
                    reader.close()

    # -- writes ----------------------------------------------------------------------

    def write(
        self,
        records: Sequence[OccupancyRecord],
        pods: Sequence[PodName],
        now: float,
        allocations: Sequence[AllocationRecord] = (),
    ) -> None:
        """Upsert ``records``, ``pods`` and ``allocations`` in one transaction."""
        with self._lock:
            db = self._conn()
            db.execute("BEGIN")
            try:
                if pods:
                    db.executemany(
                        "INSERT INTO pods (uid, namespace, name, containers, updated_at) "
                        "VALUES (?, ?, ?, ?, ?) ON CONFLICT (uid) DO UPDATE SET "
                        "namespace = excluded.namespace, name = excluded.name, "
                        "containers = excluded.containers, updated_at = excluded.updated_at",
                        [
                            (p.uid, p.namespace, p.name, json.dumps(dict(p.containers)), now)
                            for p in pods
                        ],
                    )
                if records:
                    db.executemany(_UPSERT, [_row(r) for r in records])
                write_allocations(db, allocations)
                db.execute("COMMIT")
            except BaseException:
                # SQLite rolls back by itself on some errors (a full disk among them): the
                # error to report is the one that did it, never the ROLLBACK's own.
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                raise

    def end_open(self, boot_id: str) -> int:
        """End every open record of another boot at its last sighting; how many."""
        with self._lock:
            cursor = self._conn().execute(
                "UPDATE occupancy SET ended = 1 WHERE ended = 0 AND boot_id != ?", (boot_id,)
            )
            return cursor.rowcount

    def open_records(self, boot_id: str) -> list[OccupancyRecord]:
        """The records of ``boot_id`` still open, to continue them."""
        with self._lock:
            rows = (
                self._conn()
                .execute(_SELECT + " WHERE o.ended = 0 AND o.boot_id = ?", (boot_id,))
                .fetchall()
            )
        return [_record(row) for row in rows]

    def end_open_allocations(self, boot_id: str) -> int:
        """End every open allocation of another boot at its last sighting; how many."""
        with self._lock:
            return end_open_allocations(self._conn(), boot_id)

    def open_allocations(self, boot_id: str) -> list[AllocationRecord]:
        """The allocations of ``boot_id`` still open, to continue them (idle clocks included)."""
        with self._lock:
            return open_allocations(self._conn(), boot_id)

    def pod_names(self, max_bytes: int | None = None) -> list[PodName]:
        """The stored pod names, oldest first; with ``max_bytes``, the newest up to that many
        bytes (as ``pod_bytes`` counts them)."""
        pods: list[PodName] = []
        size = 0
        with self._lock:
            rows = self._conn().execute(
                "SELECT uid, namespace, name, containers FROM pods ORDER BY updated_at DESC, uid"
            )
            for uid, namespace, name, containers in rows:
                pod = PodName(uid, namespace, name, _containers(containers))
                size += pod_bytes(pod)
                if max_bytes is not None and size > max_bytes:
                    break
                pods.append(pod)
        pods.reverse()
        return pods

    # -- bounds ------------------------------------------------------------------------

    def size_bytes(self) -> int:
        """The database and its WAL, in bytes."""
        total = 0
        for suffix in ("", "-wal"):
            with contextlib.suppress(FileNotFoundError):
                total += os.path.getsize(f"{self.path}{suffix}")
        return total

    def used_bytes(self) -> int:
        """What the tables and their indexes hold (the database's pages less its free ones)."""
        with self._lock:
            return self._used(self._conn())

    def _used(self, db: sqlite3.Connection) -> int:
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
        free = int(db.execute("PRAGMA freelist_count").fetchone()[0])
        page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
        return (pages - free) * page_size

    def prune(self, now: float, retention: float) -> int:
        """Delete what is older than ``retention``, then, until the tables fit the size bound
        beside the WAL, unreferenced pod names and then the oldest ended records.

        Returns how many records were deleted.
        """
        with self._lock:
            db = self._conn()
            cutoff = now - retention
            deleted = db.execute(
                "DELETE FROM occupancy WHERE ended = 1 AND last_seen < ?", (cutoff,)
            ).rowcount
            db.execute(f"DELETE FROM pods WHERE updated_at < ? AND {_UNREFERENCED}", (cutoff,))
            deleted += prune_allocations(db, cutoff)
            deleted += event_rows.prune_older(db, cutoff)
            budget = max(_SIZE_FLOOR, self.max_bytes - self.wal_bytes)
            while (used := self._used(db)) > budget:
                share = max(_PRUNE_SHARE, (used - budget) / used)
                # Names nobody's record needs cost nothing to lose (the server sends its
                # pods' names again every few minutes); records go only once they are gone.
                if _delete_oldest(db, "pods", "uid", _UNREFERENCED, "updated_at, uid", share):
                    continue
                gone = _delete_oldest(db, "occupancy", "id", "ended = 1", "last_seen, id", share)
                gone += delete_oldest_allocations(db, share)
                # GPU events go by age beside the records they describe.
                gone += event_rows.delete_oldest(db, share)
                if not gone:
                    break
                deleted += gone
            # Free pages back to the file system. As a script: stepped once, as execute()
            # steps it, it frees a single page.
            db.executescript("PRAGMA incremental_vacuum")
            if self.size_bytes() > self.max_bytes:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    # -- GPU events -----------------------------------------------------------------------

    def write_events(self, events: Sequence[GpuEvent]) -> None:
        """Insert ``events`` in one transaction, giving each its sequence number."""
        with self._lock:
            db = self._conn()
            db.execute("BEGIN")
            try:
                event_rows.insert(db, events)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                for event in events:
                    event.id = 0
                raise

    def events_position(self) -> tuple[str, int]:
        """(this log's ID, the last sequence number given out)."""
        with self._lock:
            db = self._conn()
            return event_rows.log_id(db), event_rows.last_sequence(db)

    def gpu_events(self, query: EventQuery) -> list[GpuEvent]:
        """Up to ``query.limit`` events, with pod names that arrived after them filled in."""
        with self._reader() as db:
            events = event_rows.select(db, query)
            event_rows.fill_names(db, events)
        return events

    # -- reads ---------------------------------------------------------------------------

    def history(self, query: HistoryQuery) -> list[OccupancyRecord]:
        """Up to ``query.limit`` records overlapping the range, by (first seen, id)."""
        where = ["o.last_seen >= ?"]
        args: list[Any] = [query.since]
        if query.until is not None:
            where.append("o.first_seen < ?")
            args.append(query.until)
        if query.after is not None:
            where.append("(o.first_seen > ? OR (o.first_seen = ? AND o.id > ?))")
            args += [query.after[0], query.after[0], query.after[1]]
        _within(where, args, "(o.gpu_uuid IN ({}) OR o.mig_device_uuid IN ({}))", query.gpu_uuids)
        _within(where, args, "o.pod_uid IN ({})", query.pod_uids)
        _within(where, args, "COALESCE(NULLIF(o.pod_namespace, ''), p.namespace) IN ({})",
                query.namespaces)  # fmt: skip
        _within(where, args, "COALESCE(NULLIF(o.pod_name, ''), p.name) IN ({})", query.pod_names)
        sql = _SELECT + " WHERE " + " AND ".join(where) + " ORDER BY o.first_seen, o.id LIMIT ?"
        args.append(query.limit)
        with self._reader() as db:
            rows = db.execute(sql, args).fetchall()
        return [_record(row) for row in rows]

    def usage(self, query: UsageQuery) -> list[UsageRow]:
        """Sums over the records overlapping the range, each record counted for its overlap."""
        keys = []
        if UsageGroup.NAMESPACE in query.group_by or UsageGroup.POD in query.group_by:
            keys.append("ns")
        if UsageGroup.POD in query.group_by:
            keys.append("podname")
        if UsageGroup.GPU in query.group_by:
            keys.append("gpu_uuid")
        where = ["o.first_seen < ?", "o.last_seen > ?"]
        args: list[Any] = [query.until, query.since]
        _within(where, args, "COALESCE(NULLIF(o.pod_namespace, ''), p.namespace) IN ({})",
                query.namespaces)  # fmt: skip
        inner = f"""
            SELECT COALESCE(NULLIF(o.pod_namespace, ''), p.namespace, '') AS ns,
                   COALESCE(NULLIF(o.pod_name, ''), p.name, '') AS podname, o.gpu_uuid,
                   MIN(o.last_seen, ?) - MAX(o.first_seen, ?) AS overlap,
                   CASE WHEN o.memory_seconds > 0 THEN o.memory_byte_seconds / o.memory_seconds
                        ELSE COALESCE(o.last_memory, 0) END AS mean_memory
            FROM occupancy o LEFT JOIN pods p ON o.pod_uid != '' AND p.uid = o.pod_uid
            WHERE {" AND ".join(where)}
        """
        select_keys = ", ".join(keys)
        sql = (
            f"SELECT {select_keys + ', ' if keys else ''}SUM(overlap), "
            f"SUM(overlap * mean_memory) FROM ({inner})"
            + (f" GROUP BY {select_keys} ORDER BY {select_keys}" if keys else "")
        )
        with self._reader() as db:
            rows = db.execute(sql, [query.until, query.since, *args]).fetchall()
            allocated = allocation_usage(db, query, keys)
        result = []
        for row in rows:
            values = dict(zip(keys, row[: len(keys)], strict=True))
            if row[len(keys)] is None:
                continue  # no record overlapped: SUM over nothing
            given, idle = allocated.pop(tuple(row[: len(keys)]), (0.0, 0.0))
            result.append(
                UsageRow(
                    namespace=values.get("ns"),
                    pod_name=values.get("podname"),
                    gpu_uuid=values.get("gpu_uuid"),
                    gpu_seconds=float(row[len(keys)]),
                    memory_gib_seconds=float(row[len(keys) + 1] or 0.0) / GIB,
                    allocated_gpu_seconds=given,
                    idle_allocated_gpu_seconds=idle,
                )
            )
        # Groups that held a GPU and ran nothing on it (an UNUSED notebook) have rows too.
        for group, (given, idle) in allocated.items():
            values = dict(zip(keys, group, strict=True))
            result.append(
                UsageRow(
                    namespace=values.get("ns"),
                    pod_name=values.get("podname"),
                    gpu_uuid=values.get("gpu_uuid"),
                    gpu_seconds=0.0,
                    memory_gib_seconds=0.0,
                    allocated_gpu_seconds=given,
                    idle_allocated_gpu_seconds=idle,
                )
            )
        if allocated and keys:
            result.sort(key=lambda r: tuple(
                getattr(r, f) or "" for f in ("namespace", "pod_name", "gpu_uuid")
            ))  # fmt: skip
        return result


_UNREFERENCED = "uid NOT IN (SELECT pod_uid FROM occupancy)"


def _delete_oldest(
    db: sqlite3.Connection, table: str, key: str, where: str, order: str, share: float
) -> int:
    """Delete ``share`` (at least one) of the rows of ``table`` matching ``where``, oldest first."""
    count = int(db.execute(f"SELECT COUNT(*) FROM {table} WHERE {where}").fetchone()[0])
    if not count:
        return 0
    return db.execute(
        f"DELETE FROM {table} WHERE {key} IN "
        f"(SELECT {key} FROM {table} WHERE {where} ORDER BY {order} LIMIT ?)",
        (max(1, math.ceil(count * share)),),
    ).rowcount


def _within(where: list[str], args: list[Any], clause: str, values: Iterable[str]) -> None:
    values = list(values)
    if not values:
        return
    marks = ", ".join("?" for _ in values)
    where.append(clause.format(marks, marks))
    args.extend(values * clause.count("{}"))


def _row(r: OccupancyRecord) -> tuple[Any, ...]:
    return (
        r.gpu_uuid, r.mig_device_uuid, r.pid, r.start_ticks, r.boot_id, r.first_seen,
        r.last_seen, int(r.ended), r.process_name, r.container_id, r.pod_uid, r.pod_namespace,
        r.pod_name, r.container_name, r.peak_memory_bytes, r.last_memory_bytes,
        r.memory_byte_seconds, r.memory_seconds, r.last_sm_utilization, r.sm_percent_seconds,
        r.sm_seconds, r.allocation_verdict,
    )  # fmt: skip


def _record(row: Sequence[Any]) -> OccupancyRecord:
    record = OccupancyRecord(
        id=row[0], gpu_uuid=row[1], mig_device_uuid=row[2], pid=row[3], start_ticks=row[4],
        boot_id=row[5], first_seen=row[6], last_seen=row[7], ended=bool(row[8]),
        process_name=row[9], container_id=row[10], pod_uid=row[11], pod_namespace=row[12],
        pod_name=row[13], container_name=row[14], peak_memory_bytes=row[15],
        last_memory_bytes=row[16], memory_byte_seconds=row[17], memory_seconds=row[18],
        last_sm_utilization=row[19], sm_percent_seconds=row[20], sm_seconds=row[21],
        allocation_verdict=row[22],
    )  # fmt: skip
    if not record.container_name and record.container_id and row[23]:
        record.container_name = _containers(row[23]).get(record.container_id, "")
    return record


def _containers(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

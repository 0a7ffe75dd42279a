"""The occupancy log's allocation records in SQLite: one row per allocation's lifetime, and
its idle episodes beside it.

An allocation row is upserted on its random key, as a process's row is on its
lifetime's key, so a flush after a restart continues it. Each idle episode
(an IDLE or UNUSED stretch) is a row of ``allocation_idle``, upserted on
(key, start) while it grows, so the idle part of any range is a sum of
overlaps, exact to the scan. Retention and the size bound treat ended
allocations as ended process records, and an episode goes with its allocation.

The functions take the store's connection, inside its lock (and for writes
its transaction).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Sequence
from typing import Any

from .records import AllocationRecord, UsageQuery

__all__ = [
    "ALLOCATION_SCHEMA",
    "allocation_usage",
    "delete_oldest_allocations",
    "end_open_allocations",
    "open_allocations",
    "prune_allocations",
    "write_allocations",
]

ALLOCATION_SCHEMA = """
CREATE TABLE IF NOT EXISTS allocations (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE,
    node_name TEXT NOT NULL, gpu_uuid TEXT NOT NULL, mig_device_uuid TEXT NOT NULL,
    resource TEXT NOT NULL, device_id TEXT NOT NULL,
    namespace TEXT NOT NULL, pod_name TEXT NOT NULL, pod_uid TEXT NOT NULL,
    container_name TEXT NOT NULL, boot_id TEXT NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL, ended INTEGER NOT NULL,
    weight REAL NOT NULL, quiet_seconds REAL NOT NULL, absent_seconds REAL NOT NULL,
    use TEXT NOT NULL, idle_seconds REAL NOT NULL, idle_closed_seconds REAL NOT NULL,
    idle_start REAL, idle_end REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS allocations_by_end ON allocations (ended, last_seen);
CREATE INDEX IF NOT EXISTS allocations_by_start ON allocations (first_seen);
CREATE TABLE IF NOT EXISTS allocation_idle (
    key TEXT NOT NULL, idle_from REAL NOT NULL, idle_to REAL NOT NULL,
    PRIMARY KEY (key, idle_from)
) WITHOUT ROWID;
"""

_COLUMNS = (
    "key", "node_name", "gpu_uuid", "mig_device_uuid", "resource", "device_id", "namespace",
    "pod_name", "pod_uid", "container_name", "boot_id", "first_seen", "last_seen", "ended",
    "weight", "quiet_seconds", "absent_seconds", "use", "idle_seconds", "idle_closed_seconds",
    "idle_start", "idle_end",
)  # fmt: skip
_UPDATED = [c for c in _COLUMNS if c not in ("key", "first_seen")]
_UPSERT = (
    f"INSERT INTO allocations ({', '.join(_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in _COLUMNS)}) ON CONFLICT (key) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _UPDATED)
)
_EPISODE = (
    "INSERT INTO allocation_idle (key, idle_from, idle_to) VALUES (?, ?, ?) "
    "ON CONFLICT (key, idle_from) DO UPDATE SET idle_to = excluded.idle_to"
)
_ORPHANS = "DELETE FROM allocation_idle WHERE key NOT IN (SELECT key FROM allocations)"


def _row(r: AllocationRecord) -> tuple[Any, ...]:
    return (
        r.key, r.node_name, r.gpu_uuid, r.mig_device_uuid, r.resource, r.device_id,
        r.namespace, r.pod_name, r.pod_uid, r.container_name, r.boot_id, r.first_seen,
        r.last_seen, int(r.ended), r.weight, r.quiet_seconds, r.absent_seconds, r.use,
        r.idle_seconds, r.idle_closed_seconds, r.idle_start, r.idle_end,
    )  # fmt: skip


def write_allocations(db: sqlite3.Connection, records: Sequence[AllocationRecord]) -> None:
    """Upsert the records and their episodes (closed ones, and the one still open)."""
    if not records:
        return
    db.executemany(_UPSERT, [_row(r) for r in records])
    episodes = [(r.key, start, end) for r in records for start, end in r.episodes]
    episodes += [
        (r.key, r.idle_start, max(r.idle_start, r.idle_end))
        for r in records
        if r.idle_start is not None
    ]
    if episodes:
        db.executemany(_EPISODE, episodes)


def end_open_allocations(db: sqlite3.Connection, boot_id: str) -> int:
    """End the open allocations of another boot at their last sighting; how many."""
    return db.execute(
        "UPDATE allocations SET ended = 1 WHERE ended = 0 AND boot_id != ?", (boot_id,)
    ).rowcount


def open_allocations(db: sqlite3.Connection, boot_id: str) -> list[AllocationRecord]:
    """The allocations of ``boot_id`` still open, idle clocks included, to continue them."""
    rows = db.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM allocations WHERE ended = 0 AND boot_id = ?",
        (boot_id,),
    ).fetchall()
    out = []
    for row in rows:
        values = dict(zip(_COLUMNS, row, strict=True))
        values["ended"] = bool(values["ended"])
        del values["idle_seconds"]
        out.append(AllocationRecord(**values))
    return out


def prune_allocations(db: sqlite3.Connection, cutoff: float) -> int:
    """Delete ended allocations last seen before ``cutoff`` and their episodes; how many."""
    deleted = db.execute(
        "DELETE FROM allocations WHERE ended = 1 AND last_seen < ?", (cutoff,)
    ).rowcount
    if deleted:
        db.execute(_ORPHANS)
    return int(deleted)


def delete_oldest_allocations(db: sqlite3.Connection, share: float) -> int:
    """Delete ``share`` (at least one) of the ended allocations, oldest first; how many."""
    count = int(db.execute("SELECT COUNT(*) FROM allocations WHERE ended = 1").fetchone()[0])
    if not count:
        return 0
    deleted = db.execute(
        "DELETE FROM allocations WHERE id IN (SELECT id FROM allocations WHERE ended = 1 "
        "ORDER BY last_seen, id LIMIT ?)",
        (max(1, math.ceil(count * share)),),
    ).rowcount
    db.execute(_ORPHANS)
    return int(deleted)


# The usage query's group keys -> the allocation's columns.
_KEYS = {"ns": "namespace", "podname": "pod_name", "gpu_uuid": "gpu_uuid"}


def allocation_usage(
    db: sqlite3.Connection, query: UsageQuery, keys: Sequence[str]
) -> dict[tuple[str, ...], tuple[float, float]]:
    """Per group (``keys`` as the usage query names them): GPU-equivalent seconds allocated,
    and the part of them in idle episodes, each counted for its overlap with the range."""
    columns = [f"a.{_KEYS[k]}" for k in keys]
    select = ", ".join(columns) + ", " if columns else ""
    group = f" GROUP BY {', '.join(columns)}" if columns else ""
    where = ""
    args: list[Any] = []
    if query.namespaces:
        where = f" AND a.namespace IN ({', '.join('?' for _ in query.namespaces)})"
        args = list(query.namespaces)
    allocated = db.execute(
        f"SELECT {select}SUM(a.weight * (MIN(a.last_seen, ?) - MAX(a.first_seen, ?))) "
        f"FROM allocations a WHERE a.first_seen < ? AND a.last_seen > ?{where}{group}",
        [query.until, query.since, query.until, query.since, *args],
    ).fetchall()
    idle = db.execute(
        f"SELECT {select}SUM(a.weight * (MIN(i.idle_to, ?) - MAX(i.idle_from, ?))) "
        f"FROM allocation_idle i JOIN allocations a ON a.key = i.key "
        f"WHERE i.idle_from < ? AND i.idle_to > ?{where}{group}",
        [query.until, query.since, query.until, query.since, *args],
    ).fetchall()
    out: dict[tuple[str, ...], tuple[float, float]] = {}
    for row in allocated:
        if row[-1] is not None:
            out[tuple(row[:-1])] = (float(row[-1]), 0.0)
    for row in idle:
        if row[-1] is not None:
            group_key = tuple(row[:-1])
            out[group_key] = (out.get(group_key, (0.0, 0.0))[0], float(row[-1]))
    return out

"""GPU health events in the occupancy log's SQLite file: their table, writes, reads, bounds.

Events live beside the process records, in the same file, so the same
retention and size bound cover both (``HistoryStore.prune``). Each row holds
the event and, as JSON, the processes and allocated pods of that moment: they
are read with the event, never queried apart. The row id is the event's
sequence number: AUTOINCREMENT keeps it growing even after the newest rows
were pruned, so a follower that asks for the events after the last one it saw
misses none and sees none twice. ``log_id``, kept in the meta table, names
one file: a follower that sees it change starts again.
"""

from __future__ import annotations

import json
import math
import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from ..gpu_events.records import (
    AllocatedPod,
    EventProcess,
    EventQuery,
    GpuEvent,
    GpuEventKind,
)
from ..pod_names import PodNames

__all__ = [
    "EVENTS_SCHEMA",
    "delete_oldest",
    "insert",
    "last_sequence",
    "log_id",
    "name_pending",
    "prune_older",
    "select",
]

EVENTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS gpu_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time REAL NOT NULL, kind TEXT NOT NULL, xid INTEGER, gpu_uuid TEXT NOT NULL,
    mig_device_uuid TEXT NOT NULL, pci_bus_id TEXT NOT NULL, culprit_pid INTEGER,
    culprit_name TEXT NOT NULL, source TEXT NOT NULL, message TEXT NOT NULL,
    count INTEGER NOT NULL, boot_id TEXT NOT NULL,
    processes TEXT NOT NULL, allocated TEXT NOT NULL,
    namespaces TEXT NOT NULL, pod_uids TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS gpu_events_by_time ON gpu_events (time, id);
"""

_COLUMNS = (
    "time", "kind", "xid", "gpu_uuid", "mig_device_uuid", "pci_bus_id", "culprit_pid",
    "culprit_name", "source", "message", "count", "boot_id", "processes", "allocated",
    "namespaces", "pod_uids",
)  # fmt: skip
_INSERT = (
    f"INSERT INTO gpu_events ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"
)
_SELECT = f"SELECT id, {', '.join(_COLUMNS)} FROM gpu_events e"
_PROCESS_FIELDS = EventProcess.__slots__


def log_id(db: sqlite3.Connection) -> str:
    """This file's event log ID, made on first use."""
    row = db.execute("SELECT value FROM meta WHERE key = 'events_log_id'").fetchone()
    if row is not None:
        return str(row[0])
    made = uuid.uuid4().hex
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('events_log_id', ?)", (made,))
    row = db.execute("SELECT value FROM meta WHERE key = 'events_log_id'").fetchone()
    return str(row[0])


def insert(db: sqlite3.Connection, events: Sequence[GpuEvent]) -> None:
    """Insert ``events`` (inside the caller's transaction), giving each its sequence number."""
    for event in events:
        cursor = db.execute(_INSERT, _row(event))
        event.id = int(cursor.lastrowid or 0)


def last_sequence(db: sqlite3.Connection) -> int:
    """The highest sequence number given out so far (0: none)."""
    row = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'gpu_events'").fetchone()
    return int(row[0]) if row is not None else 0


def prune_older(db: sqlite3.Connection, cutoff: float) -> int:
    """Delete the events before ``cutoff``; how many."""
    return db.execute("DELETE FROM gpu_events WHERE time < ?", (cutoff,)).rowcount


def delete_oldest(db: sqlite3.Connection, share: float) -> int:
    """Delete ``share`` (at least one) of the events, oldest first; how many."""
    count = int(db.execute("SELECT COUNT(*) FROM gpu_events").fetchone()[0])
    if not count:
        return 0
    return db.execute(
        "DELETE FROM gpu_events WHERE id IN (SELECT id FROM gpu_events ORDER BY time, id LIMIT ?)",
        (max(1, math.ceil(count * share)),),
    ).rowcount


def select(db: sqlite3.Connection, query: EventQuery) -> list[GpuEvent]:
    """Up to ``query.limit`` events: by (time, sequence) in the range, or after a sequence."""
    where: list[str] = ["e.time >= ?"]
    args: list[Any] = [query.since]
    if query.after_sequence is not None:
        where.append("e.id > ?")
        args.append(query.after_sequence)
        order = "e.id"
    else:
        if query.after is not None:
            where.append("(e.time > ? OR (e.time = ? AND e.id > ?))")
            args += [query.after[0], query.after[0], query.after[1]]
        order = "e.time, e.id"
    if query.until is not None:
        where.append("e.time < ?")
        args.append(query.until)
    _within(where, args, "(e.gpu_uuid IN ({0}) OR e.mig_device_uuid IN ({0}))", query.gpu_uuids)
    _within(where, args, "e.kind IN ({0})", [k.value for k in query.kinds])
    _within(where, args, _IN_JSON.format(column="namespaces"), query.namespaces)
    _within(where, args, _IN_JSON.format(column="pod_uids"), query.pod_uids)
    sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ?"
    args.append(query.limit)
    return [_event(row) for row in db.execute(sql, args).fetchall()]


def fill_names(db: sqlite3.Connection, events: Iterable[GpuEvent]) -> None:
    """Name the pods of processes whose names arrived after the event was written."""
    events = list(events)
    uids = sorted({p.pod_uid for e in events for p in e.processes if p.pod_uid and not p.pod_name})
    if not uids:
        return
    marks = ", ".join("?" for _ in uids)
    names = {
        uid: (namespace, name, _containers(containers))
        for uid, namespace, name, containers in db.execute(
            f"SELECT uid, namespace, name, containers FROM pods WHERE uid IN ({marks})", uids
        )
    }
    for event in events:
        if not any(p.pod_uid in names and not p.pod_name for p in event.processes):
            continue
        event.processes = tuple(_named(p, names.get(p.pod_uid)) for p in event.processes)


def name_pending(events: Iterable[GpuEvent], pod_names: PodNames) -> None:
    """Name the pods of processes whose names arrived while the events waited to be written,
    so the namespace filter finds them too."""
    for event in events:
        if not any(p.pod_uid and not p.pod_name for p in event.processes):
            continue
        named = []
        for process in event.processes:
            pod = pod_names.get(process.pod_uid) if process.pod_uid else None
            found = None if pod is None else (pod.namespace, pod.name, dict(pod.containers))
            named.append(_named(process, found))
        event.processes = tuple(named)
        event.index_pods()


_IN_JSON = "EXISTS (SELECT 1 FROM json_each(e.{column}) WHERE value IN ({{0}}))"


def _named(process: EventProcess, found: tuple[str, str, dict[str, str]] | None) -> EventProcess:
    if found is None or process.pod_name:
        return process
    namespace, name, containers = found
    values = {field: getattr(process, field) for field in _PROCESS_FIELDS}
    values.update(pod_namespace=namespace, pod_name=name)
    if not process.container_name and process.container_id:
        values["container_name"] = containers.get(process.container_id, "")
    return EventProcess(**values)


def _within(where: list[str], args: list[Any], clause: str, values: Iterable[str]) -> None:
    values = list(values)
    if not values:
        return
    where.append(clause.format(", ".join("?" for _ in values)))
    args.extend(values * clause.count("{0}"))


def _row(event: GpuEvent) -> tuple[Any, ...]:
    processes = [[getattr(p, f) for f in _PROCESS_FIELDS] for p in event.processes]
    allocated = [[a.namespace, a.name] for a in event.allocated]
    return (
        event.time, event.kind.value, event.xid, event.gpu_uuid, event.mig_device_uuid,
        event.pci_bus_id, event.culprit_pid, event.culprit_name, event.source, event.message,
        event.count, event.boot_id, json.dumps(processes), json.dumps(allocated),
        json.dumps(list(event.namespaces)), json.dumps(list(event.pod_uids)),
    )  # fmt: skip


def _event(row: Sequence[Any]) -> GpuEvent:
    processes = tuple(
        EventProcess(**dict(zip(_PROCESS_FIELDS, values, strict=True)))
        for values in json.loads(row[13])
    )
    allocated = tuple(AllocatedPod(namespace, name) for namespace, name in json.loads(row[14]))
    return GpuEvent(
        id=row[0], time=row[1], kind=GpuEventKind(row[2]), xid=row[3], gpu_uuid=row[4],
        mig_device_uuid=row[5], pci_bus_id=row[6], culprit_pid=row[7], culprit_name=row[8],
        source=row[9], message=row[10], count=row[11], boot_id=row[12], processes=processes,
        allocated=allocated, namespaces=tuple(json.loads(row[15])),
        pod_uids=tuple(json.loads(row[16])),
    )  # fmt: skip


def _containers(text: str) -> dict[str, str]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

"""GPU events in the occupancy log's SQLite file: sequence numbers, filters, and the log's
retention and size bound, which cover events as they cover records."""

from __future__ import annotations

from pathlib import Path

from node_resolver.gpu_events.records import (
    AllocatedPod,
    EventProcess,
    EventQuery,
    GpuEvent,
    GpuEventKind,
)
from node_resolver.history.log import HistoryLog, HistorySettings
from node_resolver.history.store import HistoryStore
from node_resolver.pod_names import PodName, PodNames


def event(at: float, gpu: str = "GPU-0", namespace: str = "ml", pid: int = 1) -> GpuEvent:
    made = GpuEvent(
        time=at,
        kind=GpuEventKind.XID,
        gpu_uuid=gpu,
        xid=13,
        processes=(
            EventProcess(pid, "python3", "c" * 64, "main", f"uid-{pid}", namespace, f"pod-{pid}"),
        ),
        allocated=(AllocatedPod(namespace, f"pod-{pid}"),),
    )
    made.index_pods()
    return made


def test_sequence_numbers_grow_and_are_never_reused_after_pruning(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, max_bytes=64 << 20)
    store.open()
    try:
        first = [event(100.0), event(200.0)]
        store.write_events(first)
        assert [e.id for e in first] == [1, 2]
        log_id, last = store.events_position()
        assert last == 2
        # Retention takes the old ones, the newest among them.
        store.prune(now=1000.0, retention=10.0)
        assert store.gpu_events(EventQuery()) == []
        later = [event(995.0)]
        store.write_events(later)
        assert later[0].id == 3
        assert store.events_position() == (log_id, 3)
        assert [e.id for e in store.gpu_events(EventQuery(after_sequence=2))] == [3]
    finally:
        store.close()


def test_following_keeps_to_since(tmp_path: Path) -> None:
    # A stream that noticed a new node follows its log from the start, from its own start on.
    store = HistoryStore(tmp_path, max_bytes=64 << 20)
    store.open()
    try:
        store.write_events([event(100.0), event(200.0), event(300.0)])
        found = store.gpu_events(EventQuery(since=200.0, after_sequence=0))
        assert [(e.id, e.time) for e in found] == [(2, 200.0), (3, 300.0)]
        assert [e.id for e in store.gpu_events(EventQuery(since=200.0, after_sequence=2))] == [3]
    finally:
        store.close()


def test_filters_and_names_that_arrived_later(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, max_bytes=64 << 20)
    store.open()
    try:
        unnamed = event(1.0, pid=7)
        unnamed.processes = (EventProcess(7, "python3", "c" * 64, pod_uid="uid-7"),)
        unnamed.allocated = ()
        unnamed.index_pods()
        store.write_events([unnamed, event(2.0, "GPU-1", "research", pid=8)])
        store.write([], [PodName("uid-7", "late", "named-later", {"c" * 64: "main"})], 3.0)
        (found,) = store.gpu_events(EventQuery(gpu_uuids=["GPU-0"]))
        process = found.processes[0]
        assert (process.pod_namespace, process.pod_name, process.container_name) == (
            "late",
            "named-later",
            "main",
        )
        assert [e.time for e in store.gpu_events(EventQuery(namespaces=["research"]))] == [2.0]
        assert [e.time for e in store.gpu_events(EventQuery(pod_uids=["uid-8"]))] == [2.0]
        assert store.gpu_events(EventQuery(kinds=[GpuEventKind.GPU_LOST])) == []
        assert [e.time for e in store.gpu_events(EventQuery(since=1.5))] == [2.0]
    finally:
        store.close()


def test_the_size_bound_takes_the_oldest_events(tmp_path: Path) -> None:
    bound = 512 * 1024
    store = HistoryStore(tmp_path, max_bytes=bound)
    store.open()
    try:
        for batch in range(40):
            store.write_events([event(batch * 100.0 + i, pid=i) for i in range(100)])
            store.prune(now=10_000.0, retention=1e9)
        assert store.size_bytes() <= bound
        kept = store.gpu_events(EventQuery(limit=10_000))
        assert kept and kept[-1].time == 3999.0
        assert kept[0].time > 0.0
    finally:
        store.close()


def test_names_that_arrive_before_the_flush_are_found_by_the_namespace_filter(
    tmp_path: Path,
) -> None:
    names = PodNames()
    log = HistoryLog(
        HistorySettings(directory=tmp_path, retention_seconds=3600.0), boot_id="b", pod_names=names
    )
    log.start()
    try:
        unnamed = event(1.0, pid=7)
        unnamed.processes = (EventProcess(7, "python3", "c" * 64, pod_uid="uid-7"),)
        unnamed.allocated = ()
        unnamed.index_pods()
        log.add_events([unnamed])
        names.put([PodName("uid-7", "late", "named-later", {"c" * 64: "main"})])
        found, _, last = log.gpu_events(EventQuery(namespaces=["late"]))
        assert [(e.id, e.processes[0].pod_name) for e in found] == [(1, "named-later")]
        assert last == 1
    finally:
        log.stop()

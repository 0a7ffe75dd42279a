"""Allocation records in the occupancy log's SQLite file: retention, the size bound, another
boot's records, and idle episodes counted for their overlap with a range."""

from __future__ import annotations

from pathlib import Path

from node_resolver.history.records import AllocationRecord, UsageGroup, UsageQuery
from node_resolver.history.store import HistoryStore

DAY = 86400.0
NOW = 1_800_000_000.0


def allocation(n: int, first: float, last: float, **fields: object) -> AllocationRecord:
    values: dict[str, object] = {
        "key": f"k{n}",
        "node_name": "n",
        "namespace": "ml",
        "pod_name": f"pod-{n}",
        "container_name": "main",
        "resource": "nvidia.com/gpu",
        "device_id": f"GPU-{n % 8}",
        "boot_id": "b",
        "first_seen": first,
        "last_seen": last,
        "gpu_uuid": f"GPU-{n % 8}",
        "ended": True,
    }
    values.update(fields)
    return AllocationRecord(**values)  # type: ignore[arg-type]


def keys(store: HistoryStore) -> set[str]:
    with store._reader() as db:
        return {row[0] for row in db.execute("SELECT key FROM allocations")}


def episodes(store: HistoryStore) -> int:
    with store._reader() as db:
        return int(db.execute("SELECT COUNT(*) FROM allocation_idle").fetchone()[0])


def test_retention_drops_ended_allocations_and_their_episodes(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, max_bytes=256 << 20)
    store.open()
    old = allocation(1, NOW - 40 * DAY, NOW - 31 * DAY, episodes=[(NOW - 35 * DAY, NOW - 34 * DAY)])
    recent = allocation(2, NOW - 2 * DAY, NOW - DAY, episodes=[(NOW - 2 * DAY, NOW - DAY)])
    # Open for longer than the retention: still running, so kept.
    running = allocation(3, NOW - 60 * DAY, NOW, ended=False)
    store.write([], [], NOW, [old, recent, running])
    assert episodes(store) == 2
    assert store.prune(NOW, 30 * DAY) == 1
    assert keys(store) == {"k2", "k3"}
    assert episodes(store) == 1
    store.close()


def test_the_size_bound_drops_the_oldest_ended_allocations_first(tmp_path: Path) -> None:
    bound = 256 * 1024
    store = HistoryStore(tmp_path, max_bytes=bound)
    store.open()
    for batch in range(6):
        records = [
            allocation(n, NOW + n, NOW + n + 60, episodes=[(NOW + n, NOW + n + 60)])
            for n in range(batch * 500, (batch + 1) * 500)
        ]
        store.write([], [], NOW, records)
    store.write([], [], NOW, [allocation(99_999, NOW, NOW + 99_999, ended=False)])
    store.prune(NOW, 365 * DAY)
    assert store.size_bytes() <= bound
    left = keys(store)
    numbers = sorted(int(k[1:]) for k in left if k != "k99999")
    # The newest are left, without holes, and the open one is kept.
    assert "k99999" in left
    assert numbers and numbers == list(range(numbers[0], 3000)) and numbers[0] > 0
    assert episodes(store) == len(numbers)
    store.close()


def test_another_boots_open_allocations_end_and_this_boots_are_continued(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, max_bytes=256 << 20)
    store.open()
    before = allocation(1, NOW, NOW + 60, ended=False, boot_id="old")
    mine = allocation(
        2, NOW, NOW + 60, ended=False, quiet_seconds=900.0, absent_seconds=900.0, use="UNUSED",
        idle_start=NOW, idle_end=NOW + 60,
    )  # fmt: skip
    store.write([], [], NOW, [before, mine])
    assert store.end_open_allocations("b") == 1
    (resumed,) = store.open_allocations("b")
    assert (resumed.key, resumed.quiet_seconds, resumed.idle_start) == ("k2", 900.0, NOW)
    assert resumed.idle_seconds == 60
    store.close()


def test_idle_episodes_count_for_their_overlap_with_the_range(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, max_bytes=256 << 20)
    store.open()
    # Two idle stretches of an allocation weighing a quarter GPU, and an open one.
    record = allocation(
        1, NOW, NOW + 3600, weight=0.25, episodes=[(NOW + 600, NOW + 1200)],
        idle_start=NOW + 3000, idle_end=NOW + 3600,
    )  # fmt: skip
    store.write([], [], NOW, [record])
    (row,) = store.usage(UsageQuery(NOW + 900, NOW + 3300, frozenset({UsageGroup.POD})))
    assert row.pod_name == "pod-1" and row.gpu_seconds == 0
    assert row.allocated_gpu_seconds == 0.25 * 2400
    assert row.idle_allocated_gpu_seconds == 0.25 * (300 + 300)
    # Another namespace's filter leaves nothing.
    assert store.usage(UsageQuery(NOW, NOW + 3600, namespaces=("other",))) == []
    store.close()

"""The occupancy log against a real SQLite file, scans fed in by hand on a hand-moved clock."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from node_resolver.history.durations import format_duration, parse_duration
from node_resolver.history.log import HistoryLog, HistorySettings
from node_resolver.history.records import GIB, HistoryQuery, UsageGroup, UsageQuery
from node_resolver.history.store import DB_NAME, READERS
from node_resolver.models import (
    AllocationMechanism,
    ContainerAllocations,
    ContainerRef,
    DeviceAllocation,
    GpuProcess,
    GpuSample,
    NodeAllocations,
    NodeSample,
    NodeSnapshot,
)
from node_resolver.pod_names import PodName, PodNames
from tests.support.clock import ManualClock
from tests.support.pod_names import long_named_pods
from tests.support.sqlite_connections import SqliteConnections

GPU = "GPU-aaaa"
POD = "pod-uid-1"


def process(pid: int, memory: int | None, *, start: int = 100, sm: int | None = None,
            pod: str | None = POD, mig: str | None = None) -> GpuProcess:  # fmt: skip
    container = ContainerRef("c" * 64, "containerd", pod) if pod is not None else None
    return GpuProcess(
        pid, used_memory_bytes=memory, sm_utilization=sm, name="python",
        container=container, start_time=start, mig_device_uuid=mig,
    )  # fmt: skip


def scan(
    at: float,
    *processes: GpuProcess,
    error: str | None = None,
    allocations: NodeAllocations | None = None,
) -> NodeSnapshot:
    gpu = GpuSample(0, GPU, processes=list(processes), error=error)
    return NodeSnapshot("node-a", NodeSample(gpus=[gpu]), at, allocations=allocations)


def given(*gpu_uuids: str | None) -> NodeAllocations:
    """The kubelet's answer: research/trainer's container "main" was given these devices."""
    devices = tuple(
        DeviceAllocation(AllocationMechanism.DEVICE_PLUGIN, "nvidia.com/gpu", f"dev-{i}", uuid)
        for i, uuid in enumerate(gpu_uuids)
    )
    containers = (ContainerAllocations("research", "trainer", "main", devices),)
    return NodeAllocations(available=True, containers=containers)


class Log:
    """A HistoryLog in a directory, reopened as a restarted agent would."""

    def __init__(self, directory: Path, **settings: float) -> None:
        self.directory = directory
        self.clock = ManualClock(1000.0)
        self.names = PodNames()
        self.settings = settings
        self.log = self.open()

    def open(self, boot_id: str = "boot-1") -> HistoryLog:
        settings = HistorySettings(
            self.directory,
            retention_seconds=self.settings.get("retention", 86400.0),
            max_bytes=int(self.settings.get("max_bytes", 256 << 20)),
            flush_interval=3600.0,  # flushed by hand
        )
        self.names = PodNames()
        log = HistoryLog(settings, boot_id=boot_id, pod_names=self.names, clock=self.clock)
        log.start()
        return log

    def restart(self, boot_id: str = "boot-1") -> None:
        self.log.stop()
        self.log = self.open(boot_id)

    def records(self, **query: object) -> list:
        return self.log.history(HistoryQuery(since=0.0, **query))  # type: ignore[arg-type]


@pytest.fixture
def history(tmp_path: Path) -> Iterator[Log]:
    log = Log(tmp_path)
    yield log
    log.log.stop()


def test_a_process_that_appears_grows_and_exits_has_its_peak_mean_start_and_end(
    history: Log,
) -> None:
    history.log.observe(scan(1000, process(7, 1 * GIB_INT, sm=20)))
    history.log.observe(scan(1010, process(7, 3 * GIB_INT, sm=60)))
    history.log.observe(scan(1030, process(7, 2 * GIB_INT, sm=60)))
    (running,) = history.records()
    assert running.end is None and running.first_seen == 1000
    history.log.observe(scan(1031))
    (record,) = history.records()
    assert (record.first_seen, record.end) == (1000, 1030)
    assert record.peak_memory_bytes == 3 * GIB_INT
    # 1 GiB held for 10 s, then 3 GiB for 20 s.
    assert record.mean_memory_bytes == pytest.approx((10 * 1 + 20 * 3) / 30 * GIB)
    assert record.mean_sm_utilization == pytest.approx((10 * 20 + 20 * 60) / 30)
    assert record.gpu_seconds == 30


GIB_INT = 1 << 30


def test_a_reused_pid_is_a_second_record(history: Log) -> None:
    history.log.observe(scan(1000, process(7, GIB_INT, start=100)))
    history.log.observe(scan(1005, process(7, GIB_INT, start=500)))
    first, second = history.records()
    assert (first.start_ticks, first.end) == (100, 1000)
    assert (second.start_ticks, second.end) == (500, None)


def test_a_failed_gpu_ends_nothing(history: Log) -> None:
    history.log.observe(scan(1000, process(7, GIB_INT)))
    history.log.observe(scan(1005, error="GPU_IS_LOST"))
    (record,) = history.records()
    assert record.end is None


def test_mig_processes_are_keyed_by_their_mig_device(history: Log) -> None:
    history.log.observe(scan(1000, process(7, GIB_INT, mig="MIG-1"), process(8, 1, mig="MIG-2")))
    records = history.records(gpu_uuids=["MIG-2"])
    assert [(r.pid, r.gpu_uuid, r.mig_device_uuid) for r in records] == [(8, GPU, "MIG-2")]
    assert len(history.records(gpu_uuids=[GPU])) == 2


def test_an_agent_restart_continues_running_processes(history: Log) -> None:
    history.log.observe(scan(1000, process(7, GIB_INT)))
    history.restart()
    history.log.observe(scan(1100, process(7, 2 * GIB_INT)))
    (record,) = history.records()
    assert (record.first_seen, record.last_seen, record.end) == (1000, 1100, None)
    assert record.peak_memory_bytes == 2 * GIB_INT


def test_a_reboot_ends_open_records_at_their_last_sighting(history: Log) -> None:
    history.log.observe(scan(1000, process(7, GIB_INT)))
    history.log.observe(scan(1010, process(7, GIB_INT)))
    history.restart(boot_id="boot-2")
    # The same PID and start ticks after a reboot is another process.
    history.log.observe(scan(2000, process(7, GIB_INT)))
    first, second = history.records()
    assert (first.first_seen, first.end) == (1000, 1010)
    assert (second.first_seen, second.end) == (2000, None)


def test_names_that_arrive_later_name_the_record_and_survive_a_restart(history: Log) -> None:
    history.log.observe(scan(1000, process(7, GIB_INT)))
    history.log.observe(scan(1001))
    (record,) = history.records()
    assert record.pod_name == ""
    history.names.put([PodName(POD, "research", "trainer", {"c" * 64: "main"})])
    history.restart()
    (record,) = history.records()
    assert (record.pod_namespace, record.pod_name, record.container_name) == (
        "research", "trainer", "main",
    )  # fmt: skip
    assert history.records(namespaces=["research"]) == [record]
    assert history.records(namespaces=["other"]) == []


def test_the_record_keeps_the_kubelets_verdict_once_the_container_is_named(
    history: Log,
) -> None:
    history.names.put([PodName(POD, "research", "trainer", {"c" * 64: "main"})])
    history.log.observe(scan(1000, process(7, GIB_INT), allocations=given("GPU-other")))
    (record,) = history.records()
    assert record.allocation_verdict == "NOT_ALLOCATED"
    # The kubelet's answer changes (e.g. the container restarted on its given GPU).
    history.log.observe(scan(1001, process(7, GIB_INT), allocations=given(GPU)))
    # A later answer that cannot tell (a device matching no GPU) keeps the last verdict.
    history.log.observe(scan(1002, process(7, GIB_INT), allocations=given(None)))
    history.log.observe(scan(1003))
    (record,) = history.records()
    assert record.allocation_verdict == "ALLOCATED"


def test_no_kubelet_answer_leaves_the_verdict_unknown(history: Log) -> None:
    history.names.put([PodName(POD, "research", "trainer", {"c" * 64: "main"})])
    unavailable = NodeAllocations(available=False, reason="no socket")
    history.log.observe(scan(1000, process(7, GIB_INT), allocations=unavailable))
    history.log.observe(scan(1001, process(8, GIB_INT, pod=None), allocations=given(GPU)))
    history.log.observe(scan(1002))
    assert [(r.pid, r.allocation_verdict) for r in history.records()] == [(7, ""), (8, "")]


def test_pages_follow_each_other_without_gaps_or_repeats(history: Log) -> None:
    for pid in range(1, 26):
        history.log.observe(scan(1000 + pid, process(pid, GIB_INT)))
    seen: list[int] = []
    after = None
    while True:
        page = history.log.history(HistoryQuery(since=0.0, limit=10, after=after))
        seen += [r.pid for r in page]
        if len(page) < 10:
            break
        after = (page[-1].first_seen, page[-1].id)
    assert seen == list(range(1, 26))


def test_usage_counts_each_record_for_its_overlap_with_the_range(history: Log) -> None:
    history.names.put([PodName(POD, "research", "trainer", {})])
    history.log.observe(scan(1000, process(7, 2 * GIB_INT)))
    history.log.observe(scan(1100, process(7, 2 * GIB_INT), process(8, GIB_INT, pod=None)))
    history.log.observe(scan(1200, process(8, GIB_INT, pod=None)))
    rows = history.log.usage(
        UsageQuery(1050, 1150, frozenset({UsageGroup.POD}), namespaces=["research"])
    )
    assert [(r.namespace, r.pod_name, r.gpu_seconds) for r in rows] == [
        ("research", "trainer", 50.0)
    ]
    assert rows[0].memory_gib_seconds == pytest.approx(100.0)
    everyone = history.log.usage(UsageQuery(1000, 1200, frozenset({UsageGroup.NAMESPACE})))
    assert {(r.namespace, r.gpu_seconds) for r in everyone} == {("", 100.0), ("research", 100.0)}


def test_retention_deletes_the_oldest_ended_records_first(tmp_path: Path) -> None:
    history = Log(tmp_path, retention=3600.0)
    try:
        for pid, at in ((1, 1000), (2, 3000), (3, 5000)):
            history.log.observe(scan(at, process(pid, GIB_INT)))
        history.log.observe(scan(5001, process(3, GIB_INT)))
        history.clock.now = 1000 + 3600 + 100
        history.log.flush()
        assert history.log.prune() == 1
        assert [r.pid for r in history.records()] == [2, 3]
    finally:
        history.log.stop()


def test_the_size_bound_deletes_the_oldest_records_first(tmp_path: Path) -> None:
    history = Log(tmp_path, max_bytes=256 * 1024)
    try:
        for pid in range(1, 3001):
            history.log.observe(scan(1000 + pid, process(pid, GIB_INT)))
            if pid % 500 == 0:
                history.log.flush()
        history.log.flush()
        history.log.prune()
        store = history.log.store
        assert store.size_bytes() <= 256 * 1024
        pids = [r.pid for r in history.records(limit=1000)]
        # What is left is the newest, without holes.
        assert pids and pids == list(range(pids[0], 3001))
        assert pids[0] > 1
    finally:
        history.log.stop()


def test_a_corrupt_file_is_reported_once_and_the_log_keeps_tracking(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / DB_NAME).write_bytes(b"this is not a database" * 100)
    caplog.set_level(logging.ERROR)
    history = Log(tmp_path)
    try:
        assert "not a database" in history.log.status
        history.log.observe(scan(1000, process(7, GIB_INT)))
        assert history.log.flush() is False
        assert history.log.flush() is False
        assert len([r for r in caplog.records if "unusable" in r.message]) == 1
        with pytest.raises(sqlite3.Error):
            history.records()
        # The file is left as it was for someone to look at.
        assert (tmp_path / DB_NAME).read_bytes().startswith(b"this is not a database")
        assert history.log.tracker.open_count == 1
    finally:
        history.log.stop()


def test_a_locked_database_is_reported_then_recovers(history: Log) -> None:
    history.log.observe(scan(1000, process(7, GIB_INT)))
    blocker = sqlite3.connect(history.log.store.path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        assert history.log.flush() is False
        assert "locked" in history.log.status
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert history.log.flush() is True
    assert history.log.status == "ok"
    assert len(history.records()) == 1


def test_pushed_names_count_in_the_size_bound_and_go_before_any_record(tmp_path: Path) -> None:
    bound = 1 << 20
    history = Log(tmp_path, max_bytes=bound)
    try:
        # 300 records that ended before their pods were named, then named (so only the
        # names table names them), and one still running.
        history.log.observe(scan(1000, *(process(pid, GIB_INT, pod=f"uid-{pid}")
                                         for pid in range(1, 302))))  # fmt: skip
        history.log.observe(scan(1001, process(301, GIB_INT, pod="uid-301")))
        assert history.log.flush()
        history.names.put(PodName(f"uid-{pid}", "research", f"job-{pid}", {})
                          for pid in range(1, 302))  # fmt: skip
        assert history.log.flush()
        # 300 pushes of 35 pods with the longest names, a flush after each.
        sizes = []
        for batch in long_named_pods(10_500):
            history.names.put(batch)
            assert history.log.flush()
            sizes.append(history.log.store.size_bytes())
        while history.names.changed_count:
            assert history.log.flush()
            sizes.append(history.log.store.size_bytes())
        assert max(sizes) <= 2 * bound
        records = history.records(limit=1000)
        assert [(r.pid, r.pod_name) for r in records] == [
            (pid, f"job-{pid}") for pid in range(1, 302)
        ]
    finally:
        history.log.stop()


def test_a_full_disk_is_reported_as_itself_and_the_records_wait_for_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connections = SqliteConnections().install(monkeypatch)
    history = Log(tmp_path)
    try:
        history.log.observe(scan(1000, process(1, GIB_INT)))
        assert history.log.flush()
        connections.fill_disk()
        history.log.observe(scan(1001, *(process(pid, GIB_INT) for pid in range(1, 501))))
        history.log.observe(scan(1002, *(process(pid, GIB_INT) for pid in range(250, 501))))
        assert history.log.flush() is False
        assert "database or disk is full" in history.log.status
        connections.free_disk()
        assert history.log.flush() is True
        assert history.log.status == "ok"
        records = history.records(limit=1000)
        assert len(records) == 500
        assert sum(r.end is not None for r in records) == 249
    finally:
        history.log.stop()


def test_a_page_is_read_beside_a_stalled_usage_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connections = SqliteConnections().install(monkeypatch)
    history = Log(tmp_path)
    stall = connections.stall("SUM(overlap")
    everything = UsageQuery(0.0, 5000.0, frozenset())
    try:
        history.log.observe(scan(1000, process(7, GIB_INT)))
        with ThreadPoolExecutor(2) as pool:
            usage = pool.submit(history.log.usage, everything)
            assert stall.wait_holding(1)
            page = pool.submit(history.records)
            try:
                assert [r.pid for r in page.result(timeout=30)] == [7]
                assert not usage.done()
            finally:
                stall.release()
            assert usage.result(timeout=30)[0].gpu_seconds == 0.0
    finally:
        stall.release()
        history.log.stop()


def test_reads_share_a_bounded_pool_of_readers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connections = SqliteConnections().install(monkeypatch)
    history = Log(tmp_path)
    stall = connections.stall("SUM(overlap")
    everything = UsageQuery(0.0, 5000.0, frozenset())
    try:
        history.log.observe(scan(1000, process(7, GIB_INT)))
        history.log.observe(scan(1010, process(7, GIB_INT)))
        with ThreadPoolExecutor(READERS + 2) as pool:
            sums = [pool.submit(history.log.usage, everything) for _ in range(READERS + 2)]
            # As many held at once as there are readers; the others wait for one.
            assert stall.wait_holding(READERS)
            stall.release()
            assert {rows[0].gpu_seconds for rows in (s.result(timeout=30) for s in sums)} == {10.0}
        assert connections.read_only == READERS
    finally:
        stall.release()
        history.log.stop()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 2592000.0), ("12h", 43200.0), ("90m", 5400.0), ("1d12h", 129600.0), ("2w", 1209600.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "-1d", "0h", "1x", "1d 2h"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)

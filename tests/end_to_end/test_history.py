"""The occupancy log end to end: real agents over real gRPC, a real SQLite file, the stub API
server and the real server pushing pod names from its watch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from api.demo.cluster.manifests import pod_uid_for
from node_resolver.client import AgentClient
from node_resolver.history.records import HistoryQuery, OccupancyRecord
from node_resolver.history.store import DB_NAME
from tests.support.clock import ManualClock
from tests.support.polling import eventually_async
from tests.support.server import GIB, AgentNode, Gpu, GraphTestCluster, Proc, serving

GPU = "GPU-hist-0"
PID = 5001


async def history_of(agent: AgentNode) -> list[OccupancyRecord]:
    async with AgentClient(agent.address) as client:
        page = await client.get_history(HistoryQuery(since=0.0), timeout=10)
    assert page.status == "ok"
    return page.records


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[GraphTestCluster, AgentNode, ManualClock]]:
    cluster = GraphTestCluster(tmp_path, history=True)
    clock = ManualClock(1000.0)
    uid = pod_uid_for("research", "trainer")
    agent = cluster.add_node(
        "node-0",
        gpus=[Gpu(0, GPU, processes=[(PID, 1 * GIB)])],
        procs=[Proc(PID, "python", uid)],
    )
    agent.clock = clock
    cluster.add_pod("trainer", "research", "node-0", gpu_limit=1)
    await cluster.start()
    yield cluster, agent, clock
    await cluster.stop()


async def until_record(agent: AgentNode, check: object, what: str) -> OccupancyRecord:
    async def found() -> OccupancyRecord | None:
        records = await history_of(agent)
        return next((r for r in records if check(r)), None)  # type: ignore[operator]

    record: OccupancyRecord = await eventually_async(found, timeout=15, what=what)
    return record


async def test_a_record_keeps_its_numbers_and_its_pod_through_deletion_and_restarts(
    world: tuple[GraphTestCluster, AgentNode, ManualClock],
) -> None:
    cluster, agent, clock = world
    uid = pod_uid_for("research", "trainer")
    async with serving(cluster.settings()):
        # The server pushes the pod's name from its watch, with nobody asking.
        assert agent.history is not None
        await eventually_async(
            lambda: agent.history is not None and agent.history.pod_names.get(uid) is not None,
            timeout=15,
            what="the pod's name on the agent",
        )
        await until_record(agent, lambda r: r.first_seen == 1000, "first sighting")
        # Grows: 1 GiB held for 10 s, then 3 GiB for 20 s.
        clock.now = 1010.0
        gpu = Gpu(0, GPU, processes=[(PID, 3 * GIB)])
        agent.write_gpus([gpu])
        await until_record(agent, lambda r: r.peak_memory_bytes == 3 * GIB, "growth")
        clock.now = 1030.0
        await until_record(agent, lambda r: r.last_seen == 1030.0, "a later sighting")
        # Exits.
        agent.write_gpus([Gpu(0, GPU)])
        agent.remove_proc(PID)
        clock.now = 1040.0
        await until_record(agent, lambda r: r.ended, "the exit")
        cluster.stub.delete_pod("research", "trainer")
    # The server restarts without the pod; then the agent restarts.
    async with serving(cluster.settings()):
        await agent.stop()
        await agent.start()
        (record,) = await history_of(agent)
    assert (record.pod_namespace, record.pod_name, record.pod_uid) == ("research", "trainer", uid)
    assert record.container_name == "main"
    assert (record.first_seen, record.end) == (1000.0, 1030.0)
    assert record.peak_memory_bytes == 3 * GIB
    assert record.mean_memory_bytes == pytest.approx((10 * 1 + 20 * 3) / 30 * GIB)
    assert record.gpu_seconds == 30.0


async def test_a_reused_pid_makes_a_second_record_and_a_reboot_ends_the_open_one(
    world: tuple[GraphTestCluster, AgentNode, ManualClock],
) -> None:
    _, agent, clock = world
    await until_record(agent, lambda r: r.first_seen == 1000, "first sighting")
    # The process exits and another gets its PID: a new start time.
    agent.add_proc(Proc(PID, "python", None, start_time=9000))
    clock.now = 1100.0
    await until_record(agent, lambda r: r.first_seen == 1100, "the PID's second process")
    first, second = await history_of(agent)
    assert (first.end, first.pod_uid) == (1000.0, pod_uid_for("research", "trainer"))
    assert (second.end, second.pod_uid) == (None, "")
    # The node reboots while the second one runs: it ends at its last sighting.
    await agent.stop()
    last_seen = second.last_seen
    agent.set_boot_id("boot-2")
    agent.write_gpus([Gpu(0, GPU)])
    clock.now = 5000.0
    await agent.start()
    records = await history_of(agent)
    assert [(r.first_seen, r.end) for r in records] == [(1000.0, 1000.0), (1100.0, last_seen)]


async def test_a_corrupt_database_is_reported_while_live_snapshots_work(tmp_path: Path) -> None:
    cluster = GraphTestCluster(tmp_path, history=True)
    agent = cluster.add_node("node-0", gpus=[Gpu(0, GPU, processes=[(PID, GIB)])],
                             procs=[Proc(PID, "python")])  # fmt: skip
    assert agent.history_dir is not None
    agent.history_dir.mkdir(parents=True)
    (agent.history_dir / DB_NAME).write_bytes(b"garbage, not SQLite " * 64)
    await cluster.start()
    try:
        async with AgentClient(agent.address) as client:
            snapshot = await client.get_snapshot(timeout=10)
            page = await client.get_history(HistoryQuery(since=0.0), timeout=10)
        assert [p.pid for p in snapshot.sample.gpus[0].processes] == [PID]
        assert snapshot.history_status is not None
        assert "file is not a database" in snapshot.history_status
        assert "file is not a database" in page.status and page.records == []
    finally:
        await cluster.stop()


async def test_retention_deletes_the_oldest_ended_records_first(
    world: tuple[GraphTestCluster, AgentNode, ManualClock],
) -> None:
    _, agent, clock = world
    await until_record(agent, lambda r: r.first_seen == 1000, "first sighting")
    # Three lifetimes of the same PID (new start times), an hour apart.
    for n, at in enumerate((4600.0, 8200.0), start=1):
        agent.add_proc(Proc(PID, "python", None, start_time=9000 + n))
        clock.now = at
        await until_record(agent, lambda r, at=at: r.first_seen == at, f"lifetime {n}")
    # Kept for 1.5 hours: at the next start, the first lifetime (ended at 1000) is too old.
    await agent.stop()
    agent.history_retention = 5400.0
    clock.now = 8200.0
    await agent.start()
    records = await history_of(agent)
    assert [r.first_seen for r in records] == [4600.0, 8200.0]
    assert records[-1].end is None

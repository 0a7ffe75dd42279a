"""The occupancy log's RPCs over real gRPC: GetHistory, GetUsage, PutPodNames, and the CLI."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pytest

from node_resolver.client import AgentClient
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.generated import agent_pb2, agent_pb2_grpc
from node_resolver.history.log import HistoryLog, HistorySettings
from node_resolver.history.records import HistoryQuery, OccupancyRecord, UsageGroup, UsageQuery
from node_resolver.history.store import DB_NAME, READERS, HistoryStore
from node_resolver.history_codec import (
    PUT_POD_NAMES_MAX_BYTES,
    after_token,
    pod_names_requests,
    pod_names_to_proto,
)
from node_resolver.pod_names import PodName, PodNames
from node_resolver.sampler import Sampler
from node_resolver.service import NodeAgentServicer
from tests.support.agents import (
    AgentThread,
    AllAliveResolver,
    gpu_json,
    nvml_json,
    start_agent_process,
    start_agent_thread,
)
from tests.support.pod_names import long_named_pods
from tests.support.polling import eventually
from tests.support.sqlite_connections import STALL_LIMIT_SECONDS, SqliteConnections

TOKEN = "history-token"


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[AgentThread, HistoryLog]]:
    nvml = tmp_path / "nvml.json"
    procs = [{"pid": 100 + i, "usedMemoryBytes": 1 << 30} for i in range(30)]
    write_fake_nvml(nvml, nvml_json([gpu_json(0, procs)]))
    settings = HistorySettings(tmp_path / "history", retention_seconds=86400.0)
    history = HistoryLog(settings, boot_id="b", pod_names=PodNames())
    with start_agent_thread(FakeGpuSource(nvml), token=TOKEN, history=history) as running:
        yield running, history


def call(agent: AgentThread, method: str, request: object, token: str | None = TOKEN) -> object:
    with grpc.insecure_channel(agent.address) as channel:
        stub = agent_pb2_grpc.NodeAgentStub(channel)
        metadata = (("authorization", f"Bearer {token}"),) if token else None
        return getattr(stub, method)(request, timeout=10, metadata=metadata)


def test_every_history_rpc_needs_the_token(agent: tuple[AgentThread, HistoryLog]) -> None:
    running, _ = agent
    for method, request in (
        ("GetHistory", agent_pb2.GetHistoryRequest()),
        ("GetUsage", agent_pb2.GetUsageRequest()),
        ("PutPodNames", agent_pb2.PutPodNamesRequest()),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            call(running, method, request, token="wrong")
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, method


@pytest.mark.parametrize(
    "request_",
    [
        agent_pb2.GetHistoryRequest(page_token="not-a-token"),
        agent_pb2.GetHistoryRequest(since=10, until=5),
        agent_pb2.GetHistoryRequest(since=float("nan")),
        agent_pb2.GetHistoryRequest(namespaces=["x"] * 300),
        # A row past SQLite's INTEGER, which failed binding as an UNKNOWN with a traceback.
        agent_pb2.GetHistoryRequest(page_token=after_token((1.0, 2**63))),
        agent_pb2.GetHistoryRequest(page_token=after_token((1.0, -(2**70)))),
        # Empty values, which matched every record lacking the field.
        agent_pb2.GetHistoryRequest(gpu_uuids=[""]),
        agent_pb2.GetHistoryRequest(pod_uids=["uid-1", ""]),
    ],
    ids=["token", "range", "nan", "filters", "row-over", "row-under", "gpu-empty", "pod-empty"],
)
def test_bad_history_requests_are_invalid_arguments(
    agent: tuple[AgentThread, HistoryLog], request_: agent_pb2.GetHistoryRequest
) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        call(agent[0], "GetHistory", request_)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize(
    ("method", "request_", "store_call"),
    [
        ("GetHistory", agent_pb2.GetHistoryRequest(), "history"),
        ("GetUsage", agent_pb2.GetUsageRequest(), "usage"),
        ("GetGpuEvents", agent_pb2.GetGpuEventsRequest(after_sequence=0), "gpu_events"),
    ],
)
def test_a_failed_read_is_an_error_not_an_empty_answer(
    agent: tuple[AgentThread, HistoryLog],
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    request_: object,
    store_call: str,
) -> None:
    running, history = agent
    eventually(lambda: history.tracker.open_count == 30)

    def corrupt(query: object) -> object:
        raise sqlite3.DatabaseError("database disk image is malformed")

    monkeypatch.setattr(history.store, store_call, corrupt)
    with pytest.raises(grpc.RpcError) as caught:
        call(running, method, request_)
    # An "ok" page with nothing in it would read as an empty log: a follower of the
    # events would start again from the first and count each twice.
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "database disk image is malformed" in (caught.value.details() or "")
    monkeypatch.undo()
    assert call(running, method, request_).status == "ok"  # type: ignore[attr-defined]


def test_pages_over_grpc_and_pod_names_for_another_node_are_refused(
    agent: tuple[AgentThread, HistoryLog],
) -> None:
    running, history = agent

    async def pages() -> list[int]:
        pids: list[int] = []
        token = ""
        async with AgentClient(running.address, token=TOKEN) as client:
            while True:
                page = await client.get_history(
                    HistoryQuery(since=0.0, limit=7), page_token=token, timeout=10
                )
                pids += [r.pid for r in page.records]
                if not page.next_page_token:
                    return pids
                token = page.next_page_token

    eventually(lambda: history.tracker.open_count == 30)
    assert sorted(asyncio.run(pages())) == list(range(100, 130))
    with pytest.raises(grpc.RpcError) as caught:
        call(running, "PutPodNames", agent_pb2.PutPodNamesRequest(node_name="node-z"))
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    with pytest.raises(grpc.RpcError) as caught:
        call(
            running, "PutPodNames", agent_pb2.PutPodNamesRequest(pods=[agent_pb2.PodName(uid="u")])
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_device_shares_and_mig_devices_reach_the_agent_with_the_pods_name(
    agent: tuple[AgentThread, HistoryLog],
) -> None:
    running, history = agent
    mig = ("p-gpu", "gpu.nvidia.com", "node-a", "gpu-1-mig-19-0-1")
    pod = PodName(
        "u",
        "ml",
        "p",
        {},
        {("p-gpu", "gpu.nvidia.com", "node-a", "gpu-0"): 0.25},
        {mig: "MIG-1"},
    )

    async def put() -> int:
        async with AgentClient(running.address, token=TOKEN) as client:
            return await client.put_pod_names("node-a", [pod], timeout=10)

    assert asyncio.run(put()) == 1
    assert history.pod_names.get("u") == pod


def _share(**fields: Any) -> agent_pb2.PodName:
    return agent_pb2.PodName(
        uid="u", namespace="ml", name="p", device_shares=[agent_pb2.DeviceShare(**fields)]
    )


def _mig(**fields: Any) -> agent_pb2.PodName:
    return agent_pb2.PodName(
        uid="u", namespace="ml", name="p", device_migs=[agent_pb2.DeviceMig(**fields)]
    )


DEVICE = {"claim": "c", "driver": "d", "pool": "p"}


@pytest.mark.parametrize(
    ("named", "says"),
    [
        (_share(**DEVICE, device="gpu-0", share=0.0), "device share"),
        (_share(**DEVICE, device="gpu-0", share=1.5), "device share"),
        (_share(**DEVICE, device="gpu-0", share=math.nan), "device share"),
        (_share(**DEVICE, share=0.5), "device share"),
        (_mig(**DEVICE, device="gpu-0-mig-1"), "MIG device"),
        (_mig(**DEVICE, mig_device_uuid="MIG-1"), "MIG device"),
    ],
    ids=["zero", "above-one", "nan", "no-device", "mig-no-uuid", "mig-no-device"],
)
def test_a_device_the_agent_cannot_weigh_by_is_an_invalid_argument(
    agent: tuple[AgentThread, HistoryLog], named: agent_pb2.PodName, says: str
) -> None:
    running, history = agent
    with pytest.raises(grpc.RpcError) as caught:
        call(running, "PutPodNames", agent_pb2.PutPodNamesRequest(pods=[named]))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in (caught.value.details() or "")
    assert history.pod_names.get("u") is None


def test_usage_over_grpc_and_names_put_in_small_messages(
    agent: tuple[AgentThread, HistoryLog],
) -> None:
    running, history = agent
    eventually(lambda: history.tracker.open_count == 30)
    # 110 pods with long names and ten containers each: several messages, each small.
    pods = [
        PodName(f"uid-{i:04d}", "n" * 63, "p" * 253, {f"{c:064x}": "c" * 63 for c in range(10)})
        for i in range(110)
    ]
    requests = pod_names_requests("node-a", pods)
    assert len(requests) > 1
    assert max(r.ByteSize() for r in requests) <= PUT_POD_NAMES_MAX_BYTES + 2048

    async def exchange() -> tuple[int, list[float]]:
        async with AgentClient(running.address, token=TOKEN) as client:
            stored = await client.put_pod_names("node-a", pods, timeout=10)
            asked = UsageQuery(0.0, time.time(), frozenset({UsageGroup.GPU}))
            rows, status = await client.get_usage(asked, timeout=10)
        assert status == "ok"
        return stored, [r.gpu_seconds for r in rows]

    stored, seconds = asyncio.run(exchange())
    assert stored == 110 and len(history.pod_names) == 110
    assert len(seconds) == 1 and seconds[0] >= 0


def test_a_page_is_answered_while_usage_sums_hold_every_reader_they_may(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connections = SqliteConnections().install(monkeypatch)
    stall = connections.stall("SUM(overlap")
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 7, "usedMemoryBytes": 1 << 30}])]))
    settings = HistorySettings(tmp_path / "history", retention_seconds=86400.0)
    history = HistoryLog(settings, boot_id="b", pod_names=PodNames())
    flood = READERS + 4
    try:
        with (
            start_agent_thread(FakeGpuSource(nvml), token=TOKEN, history=history) as running,
            ThreadPoolExecutor(flood) as pool,
        ):
            eventually(lambda: history.tracker.open_count == 1)
            sums = [
                pool.submit(call, running, "GetUsage", agent_pb2.GetUsageRequest())
                for _ in range(flood)
            ]
            # Sums may hold every reader but one; the rest wait without one.
            assert stall.wait_holding(READERS - 1)
            page = call(running, "GetHistory", agent_pb2.GetHistoryRequest())
            assert [r.pid for r in page.records] == [7]  # type: ignore[attr-defined]
            assert not any(s.done() for s in sums)
            stall.release()
            assert all(s.result(timeout=30).status == "ok" for s in sums)  # type: ignore[attr-defined]
    finally:
        stall.release()


class BlockedRead:
    """A store read that waits until ``release`` is set, counting the reads that began."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._began = threading.Condition()
        self.began = 0

    def __call__(self, query: object) -> list[Any]:
        with self._began:
            self.began += 1
            self._began.notify_all()
        # Bounded, so that a failing test cannot hang the run.
        assert self.release.wait(STALL_LIMIT_SECONDS)
        return []

    def wait_began(self, count: int) -> bool:
        """Wait until ``count`` reads began; False if they never do."""
        with self._began:
            return self._began.wait_for(lambda: self.began >= count, 30)


async def settled() -> None:
    """Let every task that can run do so (a cancelled task ends one step after it)."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize(
    ("method", "request_", "store_call", "readers"),
    [
        ("GetHistory", agent_pb2.GetHistoryRequest(), "history", READERS),
        # Usage sums may take every reader but one.
        ("GetUsage", agent_pb2.GetUsageRequest(), "usage", READERS - 1),
        ("GetGpuEvents", agent_pb2.GetGpuEventsRequest(), "gpu_events", READERS),
    ],
)
async def test_a_cancelled_read_keeps_its_reader_until_its_thread_ends(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    request_: object,
    store_call: str,
    readers: int,
) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    settings = HistorySettings(tmp_path / "history", retention_seconds=86400.0)
    history = HistoryLog(settings, boot_id="b", pod_names=PodNames())
    sampler = Sampler(FakeGpuSource(nvml), AllAliveResolver(), node_name="node-a")
    servicer = NodeAgentServicer(sampler, history=history)
    blocked = BlockedRead()
    monkeypatch.setattr(history.store, store_call, blocked)
    context: Any = None  # a read that succeeds never touches it
    try:
        calls = [
            asyncio.ensure_future(getattr(servicer, method)(request_, context))
            for _ in range(readers)
        ]
        assert await asyncio.to_thread(blocked.wait_began, readers)
        # As gRPC cancels a call past its deadline: the thread reading for it goes on.
        for call in calls:
            call.cancel()
        probe = asyncio.ensure_future(getattr(servicer, method)(request_, context))
        await settled()
        assert not any(call.done() for call in calls), "a cancelled call let its reader go"
        assert blocked.began == readers, "a read began beyond the log's readers"
        blocked.release.set()
        await asyncio.wait_for(probe, 30)
        for call in calls:
            with pytest.raises(asyncio.CancelledError):
                await call
        assert blocked.began == readers + 1
    finally:
        blocked.release.set()
        history.stop()


def test_pushed_names_keep_the_log_within_its_bound_and_its_records(tmp_path: Path) -> None:
    # A holder of the token pushes 10,500 pods with the longest names (300 messages of
    # 59 KB) at an agent whose log is bounded at 1 MiB and holds 314 ended records.
    bound = 1 << 20
    directory = tmp_path / "history"
    store = HistoryStore(directory, max_bytes=bound)
    store.open()
    store.write([record(pid) for pid in range(314)], [], 1000.0)
    store.close()
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 7, "usedMemoryBytes": 1 << 30}])]))
    settings = HistorySettings(directory, retention_seconds=86400.0 * 365 * 100,
                               max_bytes=bound, flush_interval=3600.0)  # fmt: skip
    history = HistoryLog(settings, boot_id="b", pod_names=PodNames())
    with (
        start_agent_thread(FakeGpuSource(nvml), token=TOKEN, history=history) as running,
        grpc.insecure_channel(running.address) as channel,
    ):
        stub = agent_pb2_grpc.NodeAgentStub(channel)
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        for batch in long_named_pods(10_500):
            request = agent_pb2.PutPodNamesRequest(pods=pod_names_to_proto(batch))
            assert 55_000 < request.ByteSize() < 64 * 1024
            stub.PutPodNames(request, timeout=10, metadata=metadata)
        # Every name pushed, written (or let go) by the log's own flushes.
        sizes = []
        while True:
            assert history.flush()
            sizes.append(history.store.size_bytes())
            if not history.pod_names.changed_count:
                break
    assert max(sizes) <= 2 * bound
    with sqlite3.connect(directory / DB_NAME) as db:
        assert db.execute("SELECT COUNT(*) FROM occupancy WHERE ended = 1").fetchone()[0] == 314


def record(pid: int) -> OccupancyRecord:
    """An hour-long record that ended, of a pod the agent was never told the name of."""
    start = 1000.0 + pid
    return OccupancyRecord(
        gpu_uuid="GPU-old", mig_device_uuid="", pid=pid, start_ticks=1, boot_id="a",
        first_seen=start, last_seen=start + 3600, ended=True, pod_uid=f"uid-{pid}",
    )  # fmt: skip


def test_the_cli_keeps_a_bounded_log_that_survives_a_restart(tmp_path: Path) -> None:
    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0, [{"pid": 7, "usedMemoryBytes": 1 << 30}])]))
    directory = tmp_path / "history"
    args = ["--history-dir", str(directory), "--history-retention", "12h",
            "--history-max-bytes", str(1 << 20)]  # fmt: skip

    def records() -> list[int]:
        async def ask() -> list[int]:
            async with AgentClient(running.address) as client:
                page = await client.get_history(HistoryQuery(since=0.0), timeout=10)
            return [r.pid for r in page.records]

        return asyncio.run(ask())

    for attempt in range(2):
        log_path = tmp_path / f"agent-{attempt}.log"
        with start_agent_process(nvml, log_path=log_path, extra_args=args) as running:
            assert eventually(records) == [7]
        assert running.stop() == 0
    with sqlite3.connect(directory / DB_NAME) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT COUNT(*) FROM occupancy").fetchone()[0] == 1


def test_the_cli_rejects_bad_history_flags(tmp_path: Path) -> None:
    from tests.agent.test_service import run_cli

    nvml = tmp_path / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(0)]))
    for flag, value in (("--history-retention", "30x"), ("--history-max-bytes", "256MiB")):
        done = run_cli("--node-name", "n", "--nvml-fake", str(nvml), flag, value)
        assert done.returncode == 2 and flag in done.stderr

"""The agent pool's history and usage reads against real agents: shared in flight, and
bounded per caller so that one caller's reads wait their own turn."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from api.agents.discovery import NodeIpDiscovery
from api.agents.pool import CHANNEL_OPTIONS, AgentPool, HistoryReader, reads_history
from api.demo.cluster.manifests import pod_uid_for
from api.kube.cache import ClusterCache
from graph_schema.interfaces import AgentUnavailableError
from node_resolver.client import AgentClient
from node_resolver.history.records import HistoryQuery, UsageGroup, UsageQuery
from node_resolver.models import NodeSnapshot
from tests.server.agents.test_pool import cache_with_nodes, gpu_for
from tests.support import graph
from tests.support.polling import eventually_async
from tests.support.server import AgentNode


class SentCalls:
    """Builds real AgentClients and counts the history and usage calls they send."""

    def __init__(self) -> None:
        self.sent: Counter[str] = Counter()

    def __call__(self, target: str, token: str | None) -> AgentClient:
        client = AgentClient(target, token=token, options=CHANNEL_OPTIONS)
        for name in ("get_history", "get_usage"):
            real = getattr(client, name)

            async def counted(*args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
                self.sent[_name] += 1
                return await _real(*args, **kw)

            setattr(client, name, counted)
        return client


@pytest.fixture
async def history_agent(tmp_path: Path) -> AsyncIterator[AgentNode]:
    """A real agent keeping a real SQLite log, with one pod's process on its GPU."""
    gpu, proc = gpu_for("node-0", pod_uid_for("ml", "worker-0"))
    agent = AgentNode("node-0", "127.0.0.2", tmp_path, gpus=[gpu], procs=[proc], history=True)
    await agent.start()
    yield agent
    await agent.stop()


async def settled() -> None:
    """Let every task that can run now do so (a released slot starts a read a few steps on)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_identical_reads_in_flight_reach_the_agent_once_and_are_not_kept(
    history_agent: AgentNode,
) -> None:
    agent = history_agent
    sent = SentCalls()
    pool = AgentPool(NodeIpDiscovery(cache_with_nodes(agent), agent.port), client_factory=sent)
    page_query = HistoryQuery(since=0.0)
    usage_query = UsageQuery(since=0.0, until=time.time(), group_by=frozenset({UsageGroup.POD}))
    try:
        # Eight callers at once, each asking what the others ask.
        pages = await asyncio.gather(
            *(pool.history_page(agent.name, page_query, caller=f"user-{i}") for i in range(8))
        )
        sums = await asyncio.gather(
            *(pool.usage(agent.name, usage_query, caller=f"user-{i}") for i in range(8))
        )
        assert sent.sent == {"get_history": 1, "get_usage": 1}
        assert all(page is pages[0] for page in pages) and pages[0].status == "ok"
        assert [r.pid for r in pages[0].records] == [4242]
        assert all(rows is sums[0] for rows in sums) and sums[0][1] == "ok"
        # Kept for no time: once answered, the same read asks the agent again.
        again = await pool.history_page(agent.name, page_query, caller="user-0")
        assert again is not pages[0] and sent.sent["get_history"] == 2
        # Requests that differ in any field are calls of their own.
        await asyncio.gather(
            pool.history_page(agent.name, page_query),
            pool.history_page(agent.name, HistoryQuery(since=1.0)),
            pool.history_page(agent.name, HistoryQuery(since=0.0, namespaces=("ml",))),
            pool.history_page(agent.name, HistoryQuery(since=0.0, limit=7)),
            pool.history_page(agent.name, page_query, page_token=pages[0].cursors[0]),
        )
        assert sent.sent["get_history"] == 7
    finally:
        await pool.close()


@pytest.fixture
async def silent_port() -> AsyncIterator[int]:
    """A port on 127.0.0.9 that accepts connections and never answers: every read stalls."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accept the TCP connection, never speak HTTP/2

    blackhole = await asyncio.start_server(hold, "127.0.0.9", 0)
    yield blackhole.sockets[0].getsockname()[1]
    for writer in held:
        writer.close()
    blackhole.close()
    await blackhole.wait_closed()


async def test_a_caller_past_its_bound_waits_at_the_server_while_another_callers_read_goes_out(
    silent_port: int,
) -> None:
    cache = ClusterCache()
    cache.replace_nodes([graph.node_record("silent", ip="127.0.0.9")])
    sent = SentCalls()
    pool = AgentPool(
        NodeIpDiscovery(cache, silent_port),
        timeout=60,
        client_factory=sent,
        history_reads_per_caller=10,
        history_reads_per_node=2,
    )
    reads = pool.history_reads

    def read(since: float, caller: str) -> asyncio.Future[Any]:
        return asyncio.ensure_future(
            pool.history_page("silent", HistoryQuery(since), caller=caller)
        )

    # Six different reads of one tenant: two go out, four wait their turn.
    tenant = [read(float(i), "tenant") for i in range(6)]
    others: list[asyncio.Future[Any]] = []
    try:
        await eventually_async(
            lambda: sent.sent["get_history"] == 2 and reads.waiting("tenant") == 4,
            what="two of the tenant's reads sent, four waiting",
        )
        # Another caller's read goes out at once, beside the tenant's.
        others.append(read(100.0, "admin"))
        await eventually_async(lambda: sent.sent["get_history"] == 3, what="the admin's read sent")
        assert reads.in_flight("admin", "silent") == 1
        # A read identical to one in flight joins it, past the bound and without a slot.
        others.append(read(0.0, "tenant"))
        await settled()
        assert sent.sent["get_history"] == 3 and reads.waiting("tenant") == 4
        # A caller that goes away leaves its read in flight, and counted: no other starts.
        tenant[0].cancel()
        tenant[5].cancel()
        await settled()
        assert sent.sent["get_history"] == 3
        assert (reads.in_flight("tenant", "silent"), reads.waiting("tenant")) == (2, 3)
        assert not any(t.done() for t in tenant[1:5] + others)
    finally:
        await pool.close()
        for task in tenant + others:
            task.cancel()
        await asyncio.gather(*tenant, *others, return_exceptions=True)
        await settled()
    # Every slot came back: the reads in flight when the pool closed, and those it refused.
    assert reads.callers() == 0


class _Addresses:
    """Every node's agent at one address (nothing listens: the client is never dialled)."""

    def address(self, node_name: str) -> str:
        return "127.0.0.1:9"


class _SnapshotsOnly:
    """A client that answers snapshots and nothing of the occupancy log."""

    async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
        raise AssertionError("not asked")

    def close(self) -> None:
        pass


async def test_history_reads_take_the_clients_typed_interface_or_fail_as_the_node() -> None:
    # The production client is a HistoryReader as the type checker reads its signatures.
    agent = AgentClient("127.0.0.1:9")
    reader: HistoryReader = agent
    assert reads_history(agent) and reader is agent
    await agent.close()
    # A client without history fails the read as the node's agent does, named and clear.
    pool = AgentPool(_Addresses(), client_factory=lambda target, token: _SnapshotsOnly())
    try:
        with pytest.raises(AgentUnavailableError, match=r"GetUsage: .*reads no history"):
            await pool.usage("node-a", UsageQuery(0.0, 1.0))
        with pytest.raises(AgentUnavailableError, match=r"GetHistory: .*reads no history"):
            await pool.history_page("node-a", HistoryQuery(0.0))
    finally:
        await pool.close()

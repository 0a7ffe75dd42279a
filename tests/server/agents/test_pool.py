"""The agent pool against real agents on loopback node IPs."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from api.agents.discovery import NodeIpDiscovery, PodIpDiscovery
from api.agents.pool import CHANNEL_OPTIONS, REFRESH_CONCURRENCY, AgentPool
from api.backoff import Backoff
from api.demo.cluster.manifests import make_pod, pod_uid_for
from api.kube.cache import ClusterCache
from api.kube.parse import pod_record
from api.metrics import Metrics
from api.serve import agent_token
from api.settings import Settings, SettingsError
from graph_schema.interfaces import AgentUnavailableError
from node_resolver.auth import TokenFile
from node_resolver.client import AgentClient
from node_resolver.models import NodeSnapshot
from tests.support import graph
from tests.support.clock import ManualClock
from tests.support.polling import eventually_async
from tests.support.server import GIB, AgentNode, Gpu, Proc, node_ips


class CountingFactory:
    """Builds real AgentClients and remembers each, to observe channel reuse."""

    def __init__(self) -> None:
        self.made: list[tuple[str, AgentClient]] = []
        self.closed: list[str] = []

    def __call__(self, target: str, token: str | None) -> AgentClient:
        client = AgentClient(target, token=token, options=CHANNEL_OPTIONS)
        real_close = client.close

        async def close() -> None:
            self.closed.append(target)
            await real_close()

        client.close = close  # type: ignore[method-assign]
        self.made.append((target, client))
        return client


def cache_with_nodes(*agents: AgentNode) -> ClusterCache:
    cache = ClusterCache()
    cache.replace_nodes(graph.node_record(a.name, ip=a.ip) for a in agents)
    cache.replace_pods([])
    return cache


def gpu_for(node: str, pod_uid: str) -> tuple[Gpu, Proc]:
    proc = Proc(pid=4242, comm="python", pod_uid=pod_uid)
    return Gpu(0, f"GPU-{node}-0", processes=[(proc.pid, 3 * GIB)]), proc


def make_pool(
    cache: ClusterCache,
    agents: list[AgentNode],
    *,
    clock: Callable[[], float] | None = None,
    factory: CountingFactory | None = None,
    metrics: Metrics | None = None,
    ttl: float = 1.0,
    timeout: float = 2.0,
    token: str | None = None,
) -> AgentPool:
    kwargs = {} if clock is None else {"clock": clock}
    return AgentPool(
        NodeIpDiscovery(cache, agents[0].port),
        ttl=ttl,
        timeout=timeout,
        token=token,
        metrics=metrics,
        client_factory=factory,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
async def agents(tmp_path: Path) -> AsyncIterator[list[AgentNode]]:
    """Agents on different loopback IPs sharing one port, as node-ip discovery expects."""
    nodes: list[AgentNode] = []
    for i, ip in enumerate(node_ips(3)):
        name = f"node-{i}"
        gpu, proc = gpu_for(name, pod_uid_for("ml", f"worker-{i}"))
        node = AgentNode(name, ip, tmp_path, gpus=[gpu], procs=[proc])
        if nodes:
            node.port = nodes[0].port
        await node.start()
        nodes.append(node)
    yield nodes
    await asyncio.gather(*(n.stop() for n in nodes))


async def test_fetch_returns_each_nodes_snapshot_over_one_reused_channel(
    agents: list[AgentNode],
) -> None:
    cache = cache_with_nodes(*agents)
    factory = CountingFactory()
    pool = make_pool(cache, agents, factory=factory, ttl=0)
    try:
        for _ in range(3):
            for agent in agents:
                snapshot = (await pool.fetch(agent.name)).snapshot
                assert snapshot.node_name == agent.name
                (gpu,) = snapshot.sample.gpus
                assert gpu.uuid == f"GPU-{agent.name}-0"
                (process,) = gpu.processes
                assert process.used_memory_bytes == 3 * GIB
                assert process.container is not None
                worker = f"worker-{agent.name.rsplit('-', 1)[1]}"
                assert process.container.pod_uid == pod_uid_for("ml", worker)
        # TTL 0: every fetch called the agent, yet one channel per node served them all.
        assert [a.calls for a in agents] == [3, 3, 3]
        assert sorted(t for t, _ in factory.made) == sorted(a.address for a in agents)
        assert pool.channel_count() == 3
        assert pool.agent_address("node-1") == agents[1].address
        assert pool.agent_address("no-such-node") is None
    finally:
        await pool.close()
    assert sorted(factory.closed) == sorted(a.address for a in agents)


async def test_concurrent_and_repeated_fetches_within_the_ttl_share_one_call(
    agents: list[AgentNode],
) -> None:
    agent = agents[0]
    clock = ManualClock()
    metrics = Metrics()
    pool = make_pool(cache_with_nodes(agent), [agent], clock=clock, metrics=metrics, ttl=1.0)
    try:
        results = await asyncio.gather(*(pool.fetch(agent.name) for _ in range(20)))
        assert agent.calls == 1
        assert all(r.snapshot.sample.gpus[0].uuid == "GPU-node-0-0" for r in results)
        clock.advance(0.5)
        later = await pool.fetch(agent.name)
        assert agent.calls == 1
        # The very same object, so graph objects built from it are reused...
        assert all(r.snapshot is later.snapshot for r in results)
        # ...and its age counts the time it sat in the cache.
        assert later.age_seconds == later.snapshot.age_seconds + 0.5
        clock.advance(0.6)
        await pool.fetch(agent.name)
        assert agent.calls == 2
    finally:
        await pool.close()
    text = metrics.render().decode()
    assert 'gpugraph_agent_calls_total{node="node-0",outcome="ok"} 2.0' in text
    assert 'gpugraph_snapshot_requests_total{source="called"} 2.0' in text
    assert 'gpugraph_snapshot_requests_total{source="cached"} 1.0' in text
    shared = 'gpugraph_snapshot_requests_total{source="shared"} 19.0'
    assert shared in text


async def test_a_dead_agent_is_skipped_with_backoff_and_seen_again_after_restart(
    agents: list[AgentNode],
) -> None:
    dead, alive = agents[:2]
    clock = ManualClock()
    metrics = Metrics()
    pool = AgentPool(
        NodeIpDiscovery(cache_with_nodes(*agents), dead.port),
        ttl=0,
        backoff=Backoff(initial=1.0, maximum=30.0, clock=clock),
        metrics=metrics,
        clock=clock,
    )
    try:
        await pool.fetch(dead.name)
        await dead.stop()

        with pytest.raises(AgentUnavailableError) as failed:
            await pool.fetch(dead.name)
        assert failed.value.node_name == dead.name
        assert "node-0" in str(failed.value)
        assert dead.address in str(failed.value)
        assert "UNAVAILABLE" in str(failed.value)
        # While backing off, the pool answers at once with the last error, without a call.
        with pytest.raises(AgentUnavailableError, match="next retry in"):
            await pool.fetch(dead.name)
        assert (await pool.fetch(alive.name)).snapshot.node_name == alive.name
        assert 'gpugraph_snapshot_requests_total{source="backoff"} 1.0' in metrics.render().decode()

        # The second failure doubles the delay: 1 s later it is still skipped.
        clock.advance(1.01)
        with pytest.raises(AgentUnavailableError, match="UNAVAILABLE"):
            await pool.fetch(dead.name)
        clock.advance(1.01)
        with pytest.raises(AgentUnavailableError, match="next retry in"):
            await pool.fetch(dead.name)

        await dead.start()
        calls_before = dead.calls
        clock.advance(1.0)
        snapshot = (await pool.fetch(dead.name)).snapshot
        assert snapshot.node_name == dead.name
        assert dead.calls == calls_before + 1
        # Success resets the backoff: the next failure waits only the initial delay.
        await dead.stop()
        with pytest.raises(AgentUnavailableError):
            await pool.fetch(dead.name)
        clock.advance(1.01)
        with pytest.raises(AgentUnavailableError, match="UNAVAILABLE"):
            await pool.fetch(dead.name)
    finally:
        await pool.close()
    text = metrics.render().decode()
    assert 'gpugraph_agent_calls_total{node="node-0",outcome="error"} 4.0' in text


async def test_an_agent_that_never_answers_fails_at_the_deadline() -> None:
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # accept the TCP connection, never speak HTTP/2

    blackhole = await asyncio.start_server(hold, "127.0.0.9", 0)
    port = blackhole.sockets[0].getsockname()[1]
    cache = ClusterCache()
    cache.replace_nodes([graph.node_record("silent", ip="127.0.0.9")])
    metrics = Metrics()
    pool = AgentPool(NodeIpDiscovery(cache, port), timeout=0.3, metrics=metrics)
    try:
        with pytest.raises(AgentUnavailableError, match=r"no answer within the 0.3 s deadline"):
            await pool.fetch("silent")
    finally:
        await pool.close()
        for writer in held:
            writer.close()
        blackhole.close()
        await blackhole.wait_closed()
    assert 'outcome="timeout"} 1.0' in metrics.render().decode()


async def test_a_moved_agent_gets_a_new_channel(tmp_path: Path) -> None:
    first = AgentNode("node-0", "127.0.0.2", tmp_path / "a")
    await first.start()
    cache = cache_with_nodes(first)
    factory = CountingFactory()
    pool = AgentPool(NodeIpDiscovery(cache, first.port), ttl=0, client_factory=factory)
    moved = AgentNode("node-0", "127.0.0.7", tmp_path / "b")
    moved.port = first.port
    try:
        await pool.fetch("node-0")
        await first.stop()
        await moved.start()
        cache.upsert_node(graph.node_record("node-0", ip="127.0.0.7"))
        await pool.fetch("node-0")
        assert moved.calls == 1
        assert [t for t, _ in factory.made] == [first.address, moved.address]
        assert factory.closed == [first.address]
    finally:
        await pool.close()
        await moved.stop()


async def test_calls_whose_channel_another_call_closes_fail_as_the_node_not_as_cancelled(
    tmp_path: Path,
) -> None:
    # As when the demo starts: reads in flight on an agent's channel when another call
    # finds the agent moved and closes that channel under them (gRPC cancels its calls).
    connected = asyncio.Event()
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # the old address: accepts, never answers
        connected.set()

    blackhole = await asyncio.start_server(hold, "127.0.0.9", 0)
    moved = AgentNode("node-0", "127.0.0.7", tmp_path)
    moved.port = blackhole.sockets[0].getsockname()[1]
    await moved.start()
    cache = ClusterCache()
    cache.replace_nodes([graph.node_record("node-0", ip="127.0.0.9")])
    pool = AgentPool(NodeIpDiscovery(cache, moved.port), timeout=60)
    asked = asyncio.Event()

    async def snapshot(client: Any) -> NodeSnapshot:
        asked.set()
        result: NodeSnapshot = await client.get_snapshot(timeout=60)
        return result

    try:
        fetches = [asyncio.ensure_future(pool.fetch("node-0")) for _ in range(2)]
        history = asyncio.ensure_future(pool.call("node-0", snapshot, what="GetHistory"))
        await asyncio.gather(connected.wait(), asked.wait())
        cache.upsert_node(graph.node_record("node-0", ip="127.0.0.7"))
        got = await pool.call("node-0", lambda c: c.get_snapshot(timeout=5), what="GetSnapshot")
        assert got.node_name == "node-0"
        for waiter, what in [(f, "GetSnapshot") for f in fetches] + [(history, "GetHistory")]:
            with pytest.raises(AgentUnavailableError, match=f"{what}: the channel closed"):
                await waiter
        # Not a failure of the node's agent: the next read is answered, with no backoff.
        assert (await pool.fetch("node-0")).snapshot.node_name == "node-0"
    finally:
        await pool.close()
        await moved.stop()
        for writer in held:
            writer.close()
        blackhole.close()
        await blackhole.wait_closed()


async def test_an_agent_answering_for_another_node_is_an_error(agents: list[AgentNode]) -> None:
    agent = agents[0]
    cache = ClusterCache()
    # "node-9"'s InternalIP points at node-0's agent (an address reused by another node).
    cache.replace_nodes([graph.node_record("node-9", ip=agent.ip)])
    pool = AgentPool(NodeIpDiscovery(cache, agent.port))
    try:
        with pytest.raises(AgentUnavailableError, match="reports node 'node-0'"):
            await pool.fetch("node-9")
    finally:
        await pool.close()


async def test_missing_addresses_are_clear_errors() -> None:
    cache = ClusterCache()
    cache.replace_nodes([graph.node_record("no-ip", ip=None)])
    cache.replace_pods([])
    pool = AgentPool(NodeIpDiscovery(cache, 50051))
    try:
        with pytest.raises(AgentUnavailableError, match="has no InternalIP"):
            await pool.fetch("no-ip")
        with pytest.raises(AgentUnavailableError, match="not in the cluster cache"):
            await pool.fetch("ghost")
    finally:
        await pool.close()


async def test_pod_ip_discovery_finds_the_running_agent_pod(tmp_path: Path) -> None:
    agent = AgentNode("node-0", "127.0.0.4", tmp_path)
    await agent.start()
    labels = {"app.kubernetes.io/name": "gpugraph", "app.kubernetes.io/component": "agent"}
    selector = "app.kubernetes.io/name=gpugraph,app.kubernetes.io/component=agent"
    cache = ClusterCache()
    cache.replace_nodes([graph.node_record("node-0", ip="10.9.9.9")])
    cache.replace_pods(
        [
            pod_record(
                make_pod("agent-abcde", "gpugraph", "node-0", labels=labels, pod_ip=agent.ip)
            ),
            # Same labels, wrong namespace; and a right-namespace pod without the labels.
            pod_record(make_pod("agent-other", "elsewhere", "node-0", labels=labels)),
            pod_record(make_pod("worker-0", "gpugraph", "node-0", pod_ip="127.0.0.5")),
            pod_record(
                make_pod("agent-pending", "gpugraph", "node-1", labels=labels, phase="Pending")
            ),
        ]
    )
    pool = AgentPool(PodIpDiscovery(cache, "gpugraph", selector, agent.port))
    try:
        assert pool.agent_address("node-0") == agent.address
        snapshot = (await pool.fetch("node-0")).snapshot
        assert snapshot.node_name == "node-0"
        assert agent.calls == 1
        with pytest.raises(AgentUnavailableError, match="none Running"):
            await pool.fetch("node-1")
        with pytest.raises(AgentUnavailableError, match="no agent pod matching"):
            await pool.fetch("node-2")
    finally:
        await pool.close()
        await agent.stop()


def test_pod_ip_discovery_rejects_a_malformed_selector() -> None:
    with pytest.raises(ValueError, match="invalid labelSelector"):
        PodIpDiscovery(ClusterCache(), "gpugraph", "app in (a", 50051)


async def test_the_token_is_sent_and_a_missing_token_is_a_clear_error(tmp_path: Path) -> None:
    agent = AgentNode("node-0", "127.0.0.6", tmp_path, token="s3cret-token")
    await agent.start()
    cache = cache_with_nodes(agent)
    with_token = AgentPool(NodeIpDiscovery(cache, agent.port), token="s3cret-token")
    without = AgentPool(NodeIpDiscovery(cache, agent.port))
    wrong = AgentPool(NodeIpDiscovery(cache, agent.port), token="guess")
    try:
        assert (await with_token.fetch("node-0")).snapshot.node_name == "node-0"
        for pool in (without, wrong):
            with pytest.raises(AgentUnavailableError, match="UNAUTHENTICATED"):
                await pool.fetch("node-0")
        assert agent.calls == 1
    finally:
        for pool in (with_token, without, wrong):
            await pool.close()
        await agent.stop()


async def test_a_waiter_cancelled_mid_call_does_not_cancel_the_shared_call(
    agents: list[AgentNode],
) -> None:
    agent = agents[0]
    pool = make_pool(cache_with_nodes(agent), [agent])
    try:
        first = asyncio.ensure_future(pool.fetch(agent.name))
        second = asyncio.ensure_future(pool.fetch(agent.name))
        await asyncio.sleep(0)
        first.cancel()
        assert (await second).snapshot.node_name == agent.name
        assert agent.calls == 1
    finally:
        await pool.close()


def test_pool_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="timeout"):
        AgentPool(NodeIpDiscovery(ClusterCache()), timeout=0)
    with pytest.raises(ValueError, match="TTL"):
        AgentPool(NodeIpDiscovery(ClusterCache()), ttl=-1)


class FakeClient:
    """An agent client answering every call with one snapshot, or refusing while down."""

    def __init__(
        self, snapshot: NodeSnapshot, *, token: str | None = None, up: bool = True
    ) -> None:
        self.snapshot = snapshot
        self.token = token
        self.up = up
        self.calls = 0
        self.closed = False

    async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
        self.calls += 1
        if not self.up:
            raise ConnectionRefusedError("connection refused")
        return self.snapshot

    def close(self) -> None:
        self.closed = True


async def test_queries_within_the_ttl_reuse_the_graph_objects_built_for_a_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import graph_schema.views
    from graph_schema.context import GraphContext
    from graph_schema.schema import build_schema

    cluster = graph.MemoryCluster()
    clients: dict[str, FakeClient] = {}
    for i, name in enumerate(("node-a", "node-b")):
        cluster.add_node(graph.node_record(name, ip=f"10.0.0.{i + 1}"))
        clients[f"10.0.0.{i + 1}:50051"] = FakeClient(
            graph.snapshot(name, [graph.gpu_sample(name, 0)])
        )
    builds: list[str] = []
    real_build = graph_schema.views.build_gpus

    def counting_build(node_name: str, *args: Any) -> Any:
        builds.append(node_name)
        return real_build(node_name, *args)

    monkeypatch.setattr(graph_schema.views, "build_gpus", counting_build)
    clock = ManualClock()
    pool = AgentPool(
        NodeIpDiscovery(cluster, 50051),
        ttl=10.0,
        clock=clock,
        client_factory=lambda target, token: clients[target],
    )
    schema = build_schema()
    query = "{ nodes { name gpus { uuid } agent { snapshotAgeSeconds } } }"
    ages = []
    for _ in range(5):
        result = await schema.execute(
            query, context_value=GraphContext(cluster, pool, schema.state)
        )
        assert result.errors is None, result.errors
        ages.append(result.data["nodes"][0]["agent"]["snapshotAgeSeconds"])  # type: ignore[index]
        clock.advance(1.0)
    await pool.close()
    assert sorted(builds) == ["node-a", "node-b"]
    assert [c.calls for c in clients.values()] == [1, 1]
    # Served from the cache, the snapshot still ages.
    assert ages == [0.25, 1.25, 2.25, 3.25, 4.25]


def rotate(path: Path, text: str) -> None:
    """Replace the file the way Kubernetes updates a Secret: a new file swapped in."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def test_a_rotated_token_is_picked_up_after_the_check_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    clock = ManualClock()
    token = TokenFile(path, check_seconds=5.0, clock=clock)
    assert token.current() == "first"

    rotate(path, "second")
    clock.advance(4.0)
    assert token.current() == "first"  # not looked at yet
    clock.advance(1.0)
    assert token.current() == "second"

    # A broken rotation keeps the token in use, and says so.
    rotate(path, "  \n")
    clock.advance(5.0)
    with caplog.at_level(logging.WARNING, logger="api.agents.token"):
        assert token.current() == "second"
    assert "still expecting the previous token" in caplog.text
    path.unlink()
    clock.advance(5.0)
    assert token.current() == "second"

    path.write_text("third")
    clock.advance(5.0)
    assert token.current() == "third"


def test_an_unusable_token_file_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="--agent-token-file: cannot read"):
        agent_token(Settings(agent_token_file=tmp_path / "missing"))
    (tmp_path / "empty").write_text("")
    with pytest.raises(SettingsError, match="is empty"):
        agent_token(Settings(agent_token_file=tmp_path / "empty"))


async def test_the_pool_rebuilds_its_channels_with_a_rotated_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first")
    clock = ManualClock()
    cluster = graph.MemoryCluster()
    cluster.add_node(graph.node_record("node-a", ip="10.0.0.1"))
    made: list[FakeClient] = []

    def factory(target: str, token: str | None) -> FakeClient:
        made.append(
            FakeClient(graph.snapshot("node-a", [graph.gpu_sample("node-a", 0)]), token=token)
        )
        return made[-1]

    pool = AgentPool(
        NodeIpDiscovery(cluster, 50051),
        ttl=0,
        token=TokenFile(path, check_seconds=5.0, clock=clock),
        client_factory=factory,
        clock=clock,
    )
    await pool.fetch("node-a")
    await pool.fetch("node-a")
    assert [c.token for c in made] == ["first"]

    rotate(path, "second")
    clock.advance(5.0)
    await pool.fetch("node-a")
    assert [c.token for c in made] == ["first", "second"]
    assert made[0].closed and not made[1].closed
    await pool.close()


async def test_a_down_agent_is_logged_as_a_warning_once_and_again_when_it_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = graph.MemoryCluster()
    cluster.add_node(graph.node_record("node-a", ip="10.0.0.1"))
    client = FakeClient(graph.snapshot("node-a", []), up=False)
    clock = ManualClock()
    pool = AgentPool(
        NodeIpDiscovery(cluster, 50051),
        ttl=0,
        backoff=Backoff(initial=1.0, clock=clock),
        client_factory=lambda target, token: client,
        clock=clock,
    )
    with caplog.at_level(logging.DEBUG, logger="api.agents.pool"):
        for _ in range(3):
            with pytest.raises(AgentUnavailableError):
                await pool.fetch("node-a")
            clock.advance(60)
        client.up = True
        await pool.fetch("node-a")
        await pool.fetch("node-a")
    await pool.close()
    records = [(r.levelname, r.getMessage().split(",")[0]) for r in caplog.records]
    assert records == [
        ("WARNING", "agent on node node-a failed"),
        ("DEBUG", "agent on node node-a failed"),
        ("DEBUG", "agent on node node-a failed"),
        ("WARNING", "agent on node node-a answers again"),
    ]


async def test_keep_warm_refreshes_a_read_node_before_its_snapshot_expires(
    agents: list[AgentNode],
) -> None:
    agent, unread = agents[:2]
    metrics = Metrics()
    pool = AgentPool(
        NodeIpDiscovery(cache_with_nodes(*agents), agent.port),
        ttl=0.3,
        keep_warm=60.0,
        metrics=metrics,
    )
    try:
        first = await pool.fetch(agent.name)
        await pool.fetch(unread.name)
        assert agent.calls == 1
        # Nobody asks again, yet the pool fetches the node anew, in the background...
        await eventually_async(lambda: agent.calls >= 2)
        calls = agent.calls
        # ...and a reader gets that newer snapshot from memory, without a call of its own.
        later = await pool.fetch(agent.name)
        assert later.snapshot is not first.snapshot
        assert agent.calls == calls
        assert later.age_seconds < 0.3 + later.snapshot.age_seconds
        assert 'gpugraph_snapshot_requests_total{source="refresh"}' in metrics.render().decode()
    finally:
        await pool.close()
    # Closing stops the refreshing: no timer is left behind.
    assert not pool._refresh_timers


async def test_keep_warm_stops_for_nodes_nobody_reads(agents: list[AgentNode]) -> None:
    agent = agents[0]
    clock = ManualClock()
    pool = AgentPool(
        NodeIpDiscovery(cache_with_nodes(agent), agent.port), ttl=1.0, keep_warm=5.0, clock=clock
    )
    try:
        await pool.fetch(agent.name)
        assert agent.name in pool._refresh_timers
        # The next refresh finds no read within keep-warm: it schedules no other.
        clock.advance(6.0)
        pool._schedule_refresh(agent.name)
        assert agent.name not in pool._refresh_timers
    finally:
        await pool.close()


async def test_a_refresh_tells_its_listeners_before_any_reader_sees_the_snapshot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = graph.MemoryCluster()
    cluster.add_node(graph.node_record("node-a", ip="10.0.0.1"))
    client = FakeClient(graph.snapshot("node-a", [graph.gpu_sample("node-a", 0)]))
    pool = AgentPool(
        NodeIpDiscovery(cluster, 50051),
        ttl=0.2,
        keep_warm=60.0,
        client_factory=lambda target, token: client,
    )
    told: list[tuple[str, NodeSnapshot]] = []

    def broken(node_name: str, snapshot: NodeSnapshot) -> None:
        raise RuntimeError("listener bug")

    pool.on_refreshed(broken)
    pool.on_refreshed(lambda node_name, snapshot: told.append((node_name, snapshot)))
    try:
        first = await pool.fetch("node-a")
        # A reader's own fetch is no refresh: nobody is told of it.
        assert told == []
        client.snapshot = graph.snapshot("node-a", [graph.gpu_sample("node-a", 1)])
        await eventually_async(lambda: len(told) >= 1)
        later = await pool.fetch("node-a")
        assert later.snapshot is not first.snapshot
        # What the listener got is the very object readers get (graph objects key on it),
        # and a broken listener stopped neither the refresh nor the next listener.
        assert ("node-a", later.snapshot) in told
        assert "a refresh listener failed on node node-a" in caplog.text
    finally:
        await pool.close()


async def test_background_refreshes_run_a_bounded_number_at_a_time() -> None:
    nodes = [f"node-{i}" for i in range(REFRESH_CONCURRENCY + 8)]
    cluster = graph.MemoryCluster()
    for i, name in enumerate(nodes):
        cluster.add_node(graph.node_record(name, ip=f"10.0.{i // 250}.{i % 250 + 1}"))
    release = asyncio.Event()
    running = 0
    most = 0

    class HeldClient(FakeClient):
        async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
            nonlocal running, most
            if self.calls == 0:
                self.calls += 1
                return self.snapshot
            running += 1
            most = max(most, running)
            try:
                await release.wait()
                return self.snapshot
            finally:
                running -= 1

    clients = {
        f"{node.internal_ip}:50051": HeldClient(graph.snapshot(node.name, []))
        for node in cluster.nodes()
    }
    metrics = Metrics()
    pool = AgentPool(
        NodeIpDiscovery(cluster, 50051),
        ttl=0.05,
        keep_warm=60.0,
        metrics=metrics,
        client_factory=lambda target, token: clients[target],
    )
    try:
        await asyncio.gather(*(pool.fetch(name) for name in nodes))

        def refreshes() -> float:
            counter = metrics.snapshot_requests.labels(source="refresh")
            return float(counter._value.get())

        # Every node's refresh has started, and only the first few reach their agent.
        await eventually_async(lambda: refreshes() >= len(nodes))
        await eventually_async(lambda: running == REFRESH_CONCURRENCY)
        assert most == REFRESH_CONCURRENCY
        release.set()
        await eventually_async(lambda: running == 0)
    finally:
        release.set()
        await pool.close()


async def test_a_refresh_stuck_on_a_hung_agent_holds_up_no_other_node() -> None:
    nodes = [f"node-{i}" for i in range(REFRESH_CONCURRENCY * 4)]
    cluster = graph.MemoryCluster()
    for i, name in enumerate(nodes):
        cluster.add_node(graph.node_record(name, ip=f"10.0.0.{i + 1}"))
    hung = asyncio.Event()

    class HungClient(FakeClient):
        async def get_snapshot(self, *, timeout: float) -> NodeSnapshot:
            self.calls += 1
            if self.calls == 1:
                return self.snapshot
            hung.set()
            await asyncio.Event().wait()  # never answers; cancelled when the pool closes
            raise AssertionError("unreachable")

    clients = {
        f"{node.internal_ip}:50051": (HungClient if node.name == nodes[0] else FakeClient)(
            graph.snapshot(node.name, [])
        )
        for node in cluster.nodes()
    }
    pool = AgentPool(
        NodeIpDiscovery(cluster, 50051),
        ttl=0.05,
        keep_warm=60.0,
        timeout=60.0,
        client_factory=lambda target, token: clients[target],
    )
    refreshed: set[str] = set()
    pool.on_refreshed(lambda node_name, snapshot: refreshed.add(node_name))
    try:
        await asyncio.gather(*(pool.fetch(name) for name in nodes))
        await hung.wait()
        # Every other node is refreshed, in turns of the few slots, while one stays stuck.
        await eventually_async(lambda: refreshed >= set(nodes[1:]))
        assert nodes[0] not in refreshed
    finally:
        await pool.close()


def test_keep_warm_must_not_be_negative() -> None:
    with pytest.raises(SettingsError, match="snapshot-keep-warm"):
        Settings(snapshot_keep_warm=-1)


class ShiftedClock:
    """The monotonic clock plus whatever the test adds: reads seconds apart without
    waiting for them, while the pool's timers still run on the event loop."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.shift


async def test_by_default_a_node_read_by_repeated_queries_is_refreshed_ahead_of_its_next_read(
    agents: list[AgentNode],
) -> None:
    agent, once = agents[:2]
    clock = ShiftedClock()
    metrics = Metrics()
    # No keep-warm flag: the adaptive policy.
    pool = AgentPool(
        NodeIpDiscovery(cache_with_nodes(*agents), agent.port),
        ttl=1.0,
        metrics=metrics,
        clock=clock,
    )
    refreshed: list[NodeSnapshot] = []
    pool.on_refreshed(lambda node_name, snapshot: refreshed.append(snapshot))
    try:
        await pool.fetch(agent.name)
        await pool.fetch(once.name)
        # A dashboard's poll, 2 s later: a repeated read, the snapshot expired.
        clock.shift += 2.0
        await pool.fetch(agent.name)
        assert agent.calls == 2
        # Nobody asks again, yet the pool fetches the node anew ahead of the next read...
        await eventually_async(lambda: len(refreshed) >= 1)
        calls = agent.calls
        later = await pool.fetch(agent.name)
        # ...which finds it in memory: that refresh's snapshot, no call of its own.
        assert agent.calls == calls
        assert later.snapshot is refreshed[-1]
        # The node read once is left to expire.
        assert once.calls == 1
        assert once.name not in pool._refresh_timers
        text = metrics.render().decode()
        assert "gpugraph_keep_warm_nodes 1.0" in text
        assert "gpugraph_keep_warm_interval_seconds 0.6" in text
        assert "gpugraph_keep_warm_budget_cores 0.25" in text
        spent = re.search(r"^gpugraph_keep_warm_refresh_seconds_total (\S+)$", text, re.M)
        assert spent is not None and float(spent.group(1)) > 0
    finally:
        await pool.close()
    assert not pool._refresh_timers


async def test_a_kept_warm_agent_that_goes_down_is_not_refreshed_while_it_backs_off() -> None:
    cluster = graph.MemoryCluster()
    cluster.add_node(graph.node_record("node-a", ip="10.0.0.1"))
    client = FakeClient(graph.snapshot("node-a", [graph.gpu_sample("node-a", 0)]))
    clock = ShiftedClock()
    pool = AgentPool(
        NodeIpDiscovery(cluster, 50051),
        ttl=0.1,
        backoff=Backoff(initial=60.0, clock=clock),
        client_factory=lambda target, token: client,
        clock=clock,
    )
    try:
        await pool.fetch("node-a")
        clock.shift += 0.2
        await pool.fetch("node-a")
        await eventually_async(lambda: client.calls >= 3)
        client.up = False
        # The next refresh fails: the node backs off, and no refresh is scheduled...
        await eventually_async(lambda: client.calls >= 4)
        await eventually_async(lambda: "node-a" not in pool._refresh_timers)
        assert client.calls == 4
        # ...and a read in the backoff is refused without a call, and schedules none.
        clock.shift += 0.2
        with pytest.raises(AgentUnavailableError, match="next retry in"):
            await pool.fetch("node-a")
        assert client.calls == 4
        assert "node-a" not in pool._refresh_timers
    finally:
        await pool.close()


def test_keep_warm_settings_are_checked() -> None:
    assert Settings().snapshot_keep_warm is None
    with pytest.raises(SettingsError, match="snapshot-refresh-budget"):
        Settings(snapshot_refresh_budget=0)
    with pytest.raises(SettingsError, match="snapshot-refresh-budget"):
        Settings(snapshot_refresh_budget=math.nan)

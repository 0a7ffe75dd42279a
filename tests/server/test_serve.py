"""The server over time: before the cache is ready, nodes leaving, slow agents, long sockets."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest
from grpc import aio
from prometheus_client.parser import text_string_to_metric_families

from api.app import create_app
from api.demo.cluster.manifests import make_node
from api.settings import Settings
from node_resolver.generated import agent_pb2, agent_pb2_grpc
from node_resolver.models import NodeSnapshot
from node_resolver.version import version
from tests.server.http.test_header_limits import exchange
from tests.support.graph import MemoryCluster, MemorySnapshots
from tests.support.polling import eventually_async
from tests.support.server import (
    Gpu,
    GraphQLSocket,
    GraphTestCluster,
    serve_app,
    serving,
)


async def test_before_the_first_list_lands_requests_say_not_ready(
    cluster: GraphTestCluster,
) -> None:
    cluster.stub.pause_lists()
    gc.unfreeze()  # whatever an earlier test in this process may have left
    try:
        async with serving(cluster.settings(), wait_ready=False) as server:
            gpu_pods = await server.client.get("/gpu-pods", params={"worker_id": "worker-0"})
            assert gpu_pods.status_code == 503
            assert "still loading" in gpu_pods.json()["error"]
            result = await server.query('{ pod(namespace: "ml", name: "worker-0") { name } }')
            assert result["data"] == {"pod": None}
            assert [e["extensions"] for e in result["errors"]] == [{"code": "NOT_READY"}]
            assert "still loading" in result["errors"][0]["message"]
            # Introspection needs no cluster.
            assert (await server.query("{ __typename }")) == {"data": {"__typename": "Query"}}
            assert gc.get_freeze_count() == 0

            cluster.stub.resume_lists()
            await asyncio.to_thread(server.services.cache.wait_ready, 10.0)
            ready = await server.query('{ pod(namespace: "ml", name: "worker-0") { name } }')
            assert ready == {"data": {"pod": {"name": "worker-0"}}}
            # Once the cache is ready the collector is tuned for serving: the
            # cache's records moved out of its reach.
            await eventually_async(lambda: gc.get_freeze_count() > 0, what="gc.freeze()")
    finally:
        cluster.stub.resume_lists()


async def test_a_deleted_node_releases_its_channel_and_cached_state(
    cluster: GraphTestCluster,
) -> None:
    async with serving(cluster.settings()) as server:
        result = await server.query("{ nodes { name gpus { uuid } } }")
        assert "errors" not in result, result
        pool = server.services.pool
        state = server.services.state
        assert pool.channel_count() == 3
        assert "node-2" in state.node_names()
        assert 'node="node-2"' in (await server.client.get("/metrics")).text

        cluster.stub.delete_node("node-2")
        await eventually_async(lambda: pool.channel_count() == 2, what="node-2's channel closing")
        assert "node-2" not in pool.node_names()
        assert "node-2" not in state.node_names()
        assert "GPU-node-2-0" not in state.gpu_nodes
        assert 'node="node-2"' not in (await server.client.get("/metrics")).text
        # The nodes that stay keep their channels.
        assert pool.node_names() == {"node-0", "node-1"}


async def test_queries_on_one_websocket_each_read_fresh_snapshots(
    cluster: GraphTestCluster,
) -> None:
    query = '{ node(name: "node-2") { gpus { utilizationGpu } } }'
    agent = cluster.agents["node-2"]
    async with (
        serving(cluster.settings(snapshot_ttl=0)) as server,
        GraphQLSocket.connect(server.ws_url) as ws,
    ):
        first = await ws.query(query)
        assert first == {"data": {"node": {"gpus": [{"utilizationGpu": 0}]}}}
        agent.write_gpus([Gpu(0, "GPU-node-2-0", utilization=64)])

        async def sees_the_change() -> bool:
            result = await ws.query(query)
            return bool(result["data"]["node"]["gpus"] == [{"utilizationGpu": 64}])

        # Each query is a new operation with its own loaders: the same socket
        # sees the agent's next sample.
        await eventually_async(sees_the_change, what="the socket seeing the new utilization")


class SlowAgent(agent_pb2_grpc.NodeAgentServicer):
    """Accepts the call, then answers far beyond any deadline."""

    async def GetSnapshot(
        self, request: agent_pb2.GetSnapshotRequest, context: Any
    ) -> agent_pb2.Snapshot:
        await asyncio.sleep(60)
        return agent_pb2.Snapshot()


async def test_a_slow_agent_costs_only_its_own_node(cluster: GraphTestCluster) -> None:
    server = aio.server()
    agent_pb2_grpc.add_NodeAgentServicer_to_server(SlowAgent(), server)
    server.add_insecure_port(f"127.0.0.20:{cluster.port}")
    await server.start()
    cluster.stub.add_node(make_node("node-slow", "127.0.0.20"))
    try:
        # A deadline the live agents meet on a busy machine (their first call
        # opens a channel), far below the request's: had the slow node held the
        # whole query up, it would end in REQUEST_TIMEOUT with no data at all.
        settings = cluster.settings(agent_timeout=3.0, request_timeout=60)
        async with serving(settings) as served:
            result = await served.query("{ nodes { name gpus { uuid } } }")
    finally:
        await server.stop(grace=None)
    gpus = {n["name"]: n["gpus"] for n in result["data"]["nodes"]}
    assert gpus == {
        "node-0": [{"uuid": "GPU-node-0-0"}, {"uuid": "GPU-node-0-1"}],
        "node-1": [{"uuid": "GPU-node-1-0"}],
        "node-2": [{"uuid": "GPU-node-2-0"}],
        "node-slow": None,
    }
    (error,) = result["errors"]
    assert "'node-slow'" in error["message"]
    assert "no answer within the 3 s deadline" in error["message"]
    assert error["path"] == ["nodes", 3, "gpus"]


async def test_snapshots_kept_warm_get_their_graph_objects_before_a_query_reads_them(
    cluster: GraphTestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    import graph_schema.views

    built: list[tuple[str, NodeSnapshot]] = []
    real_build = graph_schema.views.build_gpus

    def recording_build(node_name: str, snapshot: NodeSnapshot, *args: Any) -> Any:
        built.append((node_name, snapshot))
        return real_build(node_name, snapshot, *args)

    monkeypatch.setattr(graph_schema.views, "build_gpus", recording_build)
    settings = cluster.settings(snapshot_ttl=2.0, snapshot_keep_warm=60.0)
    async with serving(settings) as server:
        # Read once: from now on the server fetches node-0 again before it expires.
        await server.query('{ node(name: "node-0") { gpus { uuid } } }')
        read = len(built)
        await eventually_async(lambda: len(built) > read, what="a refresh building node-0")
        # The snapshot a reader gets now is one whose objects were built as it landed.
        received = await server.services.pool.fetch("node-0")
        assert any(s is received.snapshot for _, s in built[read:])
        result = await server.query('{ node(name: "node-0") { gpus { uuid } } }')
        assert result == {
            "data": {"node": {"gpus": [{"uuid": "GPU-node-0-0"}, {"uuid": "GPU-node-0-1"}]}}
        }


async def test_metrics_show_the_collectors_runs_and_how_long_they_held_the_server(
    cluster: GraphTestCluster,
) -> None:
    def full_collections(exposition: str) -> tuple[float, float]:
        samples = {
            (sample.name, sample.labels.get("generation")): sample.value
            for family in text_string_to_metric_families(exposition)
            for sample in family.samples
        }
        return (
            samples["gpugraph_gc_collections_total", "2"],
            samples["gpugraph_gc_pause_seconds_total", "2"],
        )

    async with serving(cluster.settings()) as server:
        runs, seconds = full_collections((await server.client.get("/metrics")).text)

        async def collected() -> tuple[float, float] | None:
            # The server runs in this process: this collection is one of its own (one
            # that meets another thread's collection under way returns at once, so ask
            # until one has run).
            gc.collect()
            after = full_collections((await server.client.get("/metrics")).text)
            return after if after[0] > runs else None

        _, seconds_after = await eventually_async(collected, what="a full collection")
    assert seconds_after > seconds


def test_an_open_server_says_so_at_start(caplog: pytest.LogCaptureFixture) -> None:
    from api.serve import warn_if_open
    from api.settings import Settings

    with caplog.at_level(logging.WARNING):
        warn_if_open(Settings(auth_mode="kubernetes"))
        assert caplog.text == ""
        warn_if_open(Settings(auth_mode="none"))
    assert "--auth none: anyone who can reach 0.0.0.0:8000 sees every namespace" in caplog.text


async def test_serve_waits_for_the_api_server_before_it_says_serving(
    cluster: GraphTestCluster, caplog: pytest.LogCaptureFixture
) -> None:
    from api.serve import announce_when_ready

    settings = cluster.settings()

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "api.serve"]

    cluster.stub.pause_lists()
    try:
        with caplog.at_level(logging.INFO, logger="api.serve"):
            async with serving(settings, wait_ready=False) as server:
                stop = announce_when_ready(server.services, settings)
                try:
                    # The lists are held back: nothing may say "serving" yet.
                    (waiting,) = said()
                    assert f"waiting for the API server at {cluster.stub.url}" in waiting
                    cluster.stub.resume_lists()
                    await eventually_async(lambda: len(said()) == 2, what="serving on")
                finally:
                    stop()
    finally:
        cluster.stub.resume_lists()
    assert said()[1] == f"gpugraph {version()} serving on {settings.listen} (auth none)"


async def test_at_max_connections_a_new_request_gets_503_but_the_probes_are_answered() -> None:
    settings = Settings(max_connections=2)
    app = create_app(settings, MemoryCluster(), MemorySnapshots())
    async with serve_app(app, settings) as server:
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        # Two clients that connect and send nothing, as slow or idle ones would.
        held = [await asyncio.open_connection(host, int(port)) for _ in range(2)]

        def get(path: str) -> bytes:
            return f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()

        try:
            for _ in range(3):
                assert (await exchange(server, get("/metrics"))).startswith(b"HTTP/1.1 503 ")
            # Kubelet's probes: a liveness probe refused here would restart the server.
            assert (await exchange(server, get("/healthz"))).startswith(b"HTTP/1.1 200 ")
            assert (await exchange(server, get("/readyz?x=1"))).startswith(b"HTTP/1.1 200 ")
        finally:
            for _, writer in held:
                writer.close()

        async def answered() -> bool:
            return (await exchange(server, get("/metrics"))).startswith(b"HTTP/1.1 200 ")

        await eventually_async(answered, what="a request answered once the others closed")

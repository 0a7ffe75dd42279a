"""The HTTP surface: limits, health, readiness, metrics, CORS, GraphiQL, agent tokens."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import websockets
from websockets.typing import Origin, Subprotocol

from tests.support.polling import eventually_async
from tests.support.server import GraphTestCluster, serving, standard_cluster


def nested(depth: int) -> str:
    """A query nesting pod -> node -> pods ... to ``depth`` levels."""
    fields = ["pods { name ", "node { name "]
    opened = [fields[i % 2] for i in range(depth - 1)]
    return "{ " + "".join(opened) + "name" + " }" * len(opened) + " }"


async def chunked_upload(url: str, *, over: int) -> tuple[str, str]:
    """Send ``over`` bytes of a chunked POST body and stop; the reply's status line and body."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            b"POST /graphql HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        sent = 0
        while sent < over:
            chunk = b"x" * min(8192, over - sent)
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent += len(chunk)
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, body = response.decode().partition("\r\n\r\n")
    return head.splitlines()[0], body


async def test_limits_refuse_deep_aliased_and_huge_queries_and_the_server_keeps_serving(
    cluster: GraphTestCluster,
) -> None:
    async with serving(cluster.settings(max_body_bytes=64 * 1024)) as server:
        deep = await server.query(nested(31))  # 30 levels deep
        assert deep["data"] is None
        assert "exceeds maximum operation depth of 12" in deep["errors"][0]["message"]

        aliases = " ".join(f"a{i}: nodes {{ name }}" for i in range(100))
        aliased = await server.query(f"{{ {aliases} }}")
        assert aliased["data"] is None
        assert "aliases" in aliased["errors"][0]["message"].lower()
        assert "30" in aliased["errors"][0]["message"]

        padding = " " * (100 * 1024)
        too_big = await server.client.post(
            "/graphql", json={"query": "{ nodes { name } }" + padding}
        )
        assert too_big.status_code == 413
        body = too_big.json()
        assert "too large" in body["errors"][0]["message"]
        assert str(64 * 1024) in body["errors"][0]["message"]

        # Without a Content-Length (a chunked upload) the cap still holds: the server
        # answers as soon as the cap is crossed, without waiting for the rest.
        status_line, body_text = await chunked_upload(server.url, over=64 * 1024 + 10)
        assert status_line.startswith("HTTP/1.1 413")
        assert "too large" in body_text

        fine = await server.query("{ nodes { name } }")
        assert fine == {
            "data": {"nodes": [{"name": "node-0"}, {"name": "node-1"}, {"name": "node-2"}]}
        }
        metrics = (await server.client.get("/metrics")).text
    assert 'gpugraph_query_errors_total{kind="invalid"} 2.0' in metrics


async def test_every_limit_has_a_flag(cluster: GraphTestCluster) -> None:
    settings = cluster.settings(max_depth=3, max_aliases=2, max_tokens=40)
    async with serving(settings) as server:
        # Depth counts nested selections below the root field: nested(n) is n - 1 deep.
        too_deep = await server.query(nested(5))
        assert "exceeds maximum operation depth of 3" in too_deep["errors"][0]["message"]
        assert (await server.query(nested(4)))["data"] is not None

        three = await server.query("{ a: nodes { name } b: nodes { name } c: nodes { name } }")
        assert three["data"] is None
        assert "aliases" in three["errors"][0]["message"].lower()
        assert (await server.query("{ a: nodes { name } b: nodes { name } }"))["data"]

        # 8 fields + 2 braces per selection: 5 selections are 50 tokens.
        fields = "name uid internalIp labels gpuCapacity gpuAllocatable driverVersion gpuCount"
        many = await server.query("{ " + f"nodes {{ {fields} }} " * 5 + "}")
        assert many["data"] is None
        assert "token" in many["errors"][0]["message"].lower()
        assert (await server.query(f"{{ nodes {{ {fields} }} }}"))["data"]


async def test_invalid_queries_get_normal_graphql_errors_and_no_stack_traces(
    cluster: GraphTestCluster,
) -> None:
    async with serving(cluster.settings()) as server:
        syntax = await server.query("{ nodes { name ")
        assert syntax["data"] is None
        assert "Syntax Error" in syntax["errors"][0]["message"]
        unknown = await server.query("{ nodes { noSuchField } }")
        assert "Cannot query field 'noSuchField'" in unknown["errors"][0]["message"]
        bad_json = await server.client.post(
            "/graphql", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert bad_json.status_code == 400
        for text in (str(syntax), str(unknown), bad_json.text):
            assert "Traceback" not in text
            assert 'File "' not in text


async def test_healthz_readyz_and_metrics(cluster: GraphTestCluster) -> None:
    cluster.stub.pause_lists()
    try:
        async with serving(cluster.settings(), wait_ready=False) as server:
            assert (await server.client.get("/healthz")).status_code == 200
            not_ready = await server.client.get("/readyz")
            assert not_ready.status_code == 503
            assert "waiting for the first list" in not_ready.json()["reason"]
            metrics = (await server.client.get("/metrics")).text
            assert "gpugraph_cache_ready 0.0" in metrics

            cluster.stub.resume_lists()

            async def ready() -> bool:
                return (await server.client.get("/readyz")).status_code == 200

            await eventually_async(ready, what="/readyz turning 200")
            assert (await server.client.get("/healthz")).json() == {"status": "ok"}
            await server.query("{ nodes { gpus { uuid } } }")
            await server.query("{ nope }")
            response = await server.client.get("/metrics")
    finally:
        cluster.stub.resume_lists()
    assert response.headers["content-type"].startswith("text/plain")
    metrics = response.text
    for line in (
        "gpugraph_cache_ready 1.0",
        "gpugraph_cache_pods 5.0",
        "gpugraph_cache_nodes 3.0",
        'gpugraph_agent_calls_total{node="node-0",outcome="ok"} 1.0',
        'gpugraph_query_errors_total{kind="invalid"} 1.0',
        "gpugraph_query_seconds_count 2.0",
        "gpugraph_agent_call_seconds_count 3.0",
    ):
        assert line in metrics, line
    # Without prometheus_client's second series per counter and histogram.
    assert [line for line in metrics.splitlines() if "_created" in line] == []


ORIGIN = "https://dash.example.com"
EVIL = "https://evil.example.net"
PROTOCOL = Subprotocol("graphql-transport-ws")


async def test_cors_allows_only_the_configured_origins(cluster: GraphTestCluster) -> None:
    preflight_headers = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type",
    }
    query = {"query": "{ nodes { name } }"}
    async with serving(cluster.settings(cors_origins=(ORIGIN,))) as server:
        client = server.client
        allowed = await client.options("/graphql", headers={"Origin": ORIGIN, **preflight_headers})
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in allowed.headers["access-control-allow-methods"]
        refused = await client.options("/graphql", headers={"Origin": EVIL, **preflight_headers})
        assert refused.status_code == 400
        assert "access-control-allow-origin" not in refused.headers

        actual = await client.post("/graphql", json=query, headers={"Origin": ORIGIN})
        assert actual.headers["access-control-allow-origin"] == ORIGIN
        assert actual.json()["data"]["nodes"][0]["name"] == "node-0"
        other = await client.post("/graphql", json=query, headers={"Origin": EVIL})
        assert "access-control-allow-origin" not in other.headers

        # Browsers do not apply CORS to WebSockets; the handshake checks Origin instead.
        async with websockets.connect(
            server.ws_url, subprotocols=[PROTOCOL], origin=Origin(ORIGIN)
        ):
            pass
        with pytest.raises(websockets.InvalidStatus):
            async with websockets.connect(
                server.ws_url, subprotocols=[PROTOCOL], origin=Origin(EVIL)
            ):
                pass


async def test_no_cors_by_default(cluster: GraphTestCluster) -> None:
    async with serving(cluster.settings()) as server:
        preflight = await server.client.options(
            "/graphql", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"}
        )
        assert "access-control-allow-origin" not in preflight.headers
        actual = await server.client.post(
            "/graphql", json={"query": "{ nodes { name } }"}, headers={"Origin": ORIGIN}
        )
        assert actual.status_code == 200
        assert "access-control-allow-origin" not in actual.headers


async def test_graphiql_is_served_for_browsers_unless_turned_off(
    cluster: GraphTestCluster,
) -> None:
    browser = {"Accept": "text/html"}
    async with serving(cluster.settings()) as server:
        page = await server.client.get("/graphql", headers=browser)
        # 200 with the IDE, or 503 with build instructions when the assets are not built.
        assert page.status_code in (200, 503)
        assert page.headers["content-type"].startswith("text/html")
        assert "GraphiQL" in page.text
    async with serving(cluster.settings(graphiql=False)) as server:
        page = await server.client.get("/graphql", headers=browser)
        assert page.status_code == 404
        assert (await server.client.get("/static/graphiql/graphiql.min.js")).status_code == 404
        assert (await server.query("{ nodes { name } }"))["data"]["nodes"][0]["name"] == "node-0"


async def test_agent_tokens(tmp_path: Path) -> None:
    cluster = standard_cluster(tmp_path, token="agent-s3cret")
    await cluster.start()
    token_file = tmp_path / "token"
    token_file.write_text("agent-s3cret\n")
    query = "{ nodes { name gpus { uuid } } }"
    try:
        async with serving(cluster.settings(agent_token_file=token_file)) as server:
            with_token = await server.query(query)
        assert "errors" not in with_token, with_token
        assert [n["gpus"] is not None for n in with_token["data"]["nodes"]] == [True] * 3

        async with serving(cluster.settings()) as server:
            without = await server.query(query)
        assert [n["gpus"] for n in without["data"]["nodes"]] == [None] * 3
        messages = sorted(e["message"] for e in without["errors"])
        assert len(messages) == 3
        for node, message in zip(("node-0", "node-1", "node-2"), messages, strict=True):
            assert node in message
            assert "UNAUTHENTICATED" in message
    finally:
        await cluster.stop()


def test_an_unreadable_token_file_is_refused_at_startup(tmp_path: Path) -> None:
    from api.serve import build_pool
    from api.settings import Settings, SettingsError
    from tests.support.graph import MemoryCluster

    with pytest.raises(SettingsError, match="--agent-token-file"):
        build_pool(Settings(agent_token_file=tmp_path / "missing"), MemoryCluster())
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(SettingsError, match="is empty"):
        build_pool(Settings(agent_token_file=tmp_path / "empty"), MemoryCluster())


async def test_body_cap_applies_to_other_routes_too(cluster: GraphTestCluster) -> None:
    async with serving(cluster.settings(max_body_bytes=1000)) as server:
        response = await server.client.post("/graphql", content=b"x" * 5000)
        assert response.status_code == 413
        assert response.headers["content-type"] == "application/json"
        async with httpx.AsyncClient(base_url=server.url) as fresh:
            assert (await fresh.get("/healthz")).status_code == 200


async def test_subscriptions_over_the_graphql_websocket_and_their_cap(
    cluster: GraphTestCluster,
) -> None:
    subscription = (
        'subscription { gpuUpdates(nodeName: "node-1", intervalSeconds: 0.5) '
        "{ uuid processes { pid pod { name } } } }"
    )
    async with (
        serving(cluster.settings(max_subscriptions=1)) as server,
        websockets.connect(server.ws_url, subprotocols=[PROTOCOL]) as ws,
    ):
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await ws.recv())["type"] == "connection_ack"
        await ws.send(
            json.dumps({"id": "1", "type": "subscribe", "payload": {"query": subscription}})
        )
        first = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert first == {
            "id": "1",
            "type": "next",
            "payload": {
                "data": {
                    "gpuUpdates": [
                        {
                            "uuid": "GPU-node-1-0",
                            "processes": [{"pid": 2001, "pod": {"name": "trainer-0"}}],
                        }
                    ]
                }
            },
        }
        # The server allows one subscription; a second one is refused with a clear error.
        await ws.send(
            json.dumps({"id": "2", "type": "subscribe", "payload": {"query": subscription}})
        )
        while True:
            message = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if message["id"] == "2":
                break
        assert message["type"] in ("error", "next")
        text = json.dumps(message)
        assert "too many concurrent subscriptions" in text
        await ws.send(json.dumps({"id": "1", "type": "complete"}))


@pytest.mark.parametrize("gpu_series", [True, False])
async def test_the_cluster_wide_gpu_series_on_metrics_can_be_switched_off(gpu_series: bool) -> None:
    from api.app import create_app
    from api.settings import Settings
    from tests.support.graph import synthetic_cluster

    sc = synthetic_cluster(2, gpus_per_node=1, processes_per_gpu=1)
    app = create_app(Settings(metrics_gpu_series=gpu_series), sc.cluster, sc.snapshots)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        text = (await client.get("/metrics")).text
    # The server's own series stay either way; the per-pod GPU series only when on,
    # and only then does a scrape call every agent.
    assert "gpugraph_query_seconds" in text
    assert ("gpugraph_container_gpu_memory_used_bytes" in text) is gpu_series
    assert (sc.snapshots.total_calls > 0) is gpu_series


async def test_http_queries_run_compiled_and_what_the_plan_declines_runs_through_strawberry() -> (
    None
):
    from api.app import create_app
    from api.http.map_queries import SNAPSHOT_QUERY
    from api.settings import Settings
    from tests.support.graph import synthetic_cluster

    sc = synthetic_cluster(3, gpus_per_node=2, processes_per_gpu=1)
    sc.snapshots.kill("node-00001")
    app = create_app(Settings(), sc.cluster, sc.snapshots)
    counts = app.state.compiled.counts
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        mapped = (await client.post("/graphql", json={"query": SNAPSHOT_QUERY})).json()
        assert counts == {"compiled": 1, "fallback": 0}
        # The down agent: only its node's gpus are null, with the error at its path.
        nodes = mapped["data"]["nodes"]
        assert [n["gpus"] is None for n in nodes] == [False, True, False]
        assert [e["path"] for e in mapped["errors"]] == [["nodes", 1, "gpus"]]
        schema = await client.get("/graphql", params={"query": "{ __schema { types { name } } }"})
        assert schema.json()["data"]["__schema"]["types"]
        assert counts == {"compiled": 1, "fallback": 1}

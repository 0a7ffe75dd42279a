"""Limits that bound one request's work, over HTTP POST, HTTP GET and the WebSocket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from api.app import create_app
from api.metrics import Metrics
from api.settings import Settings
from tests.support.graph import (
    MemoryCluster,
    MemorySnapshots,
    node_record,
    pod_record,
    snapshot,
    synthetic_cluster,
)
from tests.support.server import GraphQLSocket, RunningServer, graphql, serve_app

TEN_ALIASES = " ".join(
    f"a{i}: pods {{ name namespace containers {{ name image }} }}" for i in range(10)
)


@dataclass
class App:
    server: RunningServer
    client: httpx.AsyncClient
    metrics: Metrics


@pytest.fixture
async def big_app() -> AsyncIterator[App]:
    """20,000 pods on 100 nodes, and a budget of 50,000 result objects."""
    cluster = MemoryCluster()
    for n in range(100):
        cluster.add_node(node_record(f"node-{n:03d}"))
        for i in range(200):
            cluster.add_pod(pod_record("ns", f"p-{n:03d}-{i:03d}", f"node-{n:03d}"))
    settings = Settings(max_result_items=50_000)
    metrics = Metrics()
    app = create_app(settings, cluster, MemorySnapshots(), metrics=metrics)
    async with (
        serve_app(app, settings) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        yield App(server, client, metrics)


def assert_refused_by_cost(response: dict[str, object], estimate: int, limit: int) -> None:
    assert response["data"] is None
    errors = response["errors"]
    assert isinstance(errors, list) and len(errors) == 1
    assert f"up to {estimate:,} result objects" in errors[0]["message"]
    assert f"limit of {limit:,}" in errors[0]["message"]
    assert errors[0]["extensions"] == {
        "code": "QUERY_TOO_COSTLY",
        "estimate": estimate,
        "limit": limit,
    }


async def test_many_aliases_of_a_big_list_are_refused_before_execution(
    big_app: App,
) -> None:
    # Each alias lists 20,000 pods and their 20,000 containers: 400,000 in all.
    refused, health = await asyncio.gather(
        graphql(big_app.client, f"{{ {TEN_ALIASES} }}"), big_app.client.get("/healthz")
    )
    assert_refused_by_cost(refused, 400_000, 50_000)
    assert health.status_code == 200
    # Within the budget, the same list is served.
    one = await graphql(big_app.client, '{ pods(namespace: "ns") { name } }')
    assert len(one["data"]["pods"]) == 20_000
    assert (await big_app.client.get("/healthz")).json() == {"status": "ok"}


async def test_a_nested_list_that_multiplies_is_refused_with_one_error(big_app: App) -> None:
    # 20,000 pods, each with its node and that node's 200 pods.
    response = await graphql(big_app.client, "{ pods { name node { pods { name } } } }")
    assert_refused_by_cost(response, 20_000 * (1 + 1 + 200), 50_000)


async def test_the_budget_counts_nodes_and_gpus_of_the_full_cluster_query() -> None:
    from graph_schema.context import GraphContext
    from graph_schema.limits import SchemaLimits
    from graph_schema.schema import build_schema

    sc = synthetic_cluster(10, gpus_per_node=8, processes_per_gpu=4)
    query = "{ nodes { name gpus { uuid processes { pid pod { name namespace } } } } }"
    # 10 nodes + 80 GPUs + 320 processes + their 320 pods.
    for limit, fits in ((730, True), (729, False)):
        schema = build_schema(SchemaLimits(max_result_items=limit))
        result = await schema.execute(
            query, context_value=GraphContext(sc.cluster, sc.snapshots, schema.state)
        )
        assert (result.errors is None) is fits, result.errors


async def test_depth_and_alias_limits_hold_over_get_and_the_websocket(big_app: App) -> None:
    deep = "{ " + "pods { node { " * 7 + "name" + " } }" * 7 + " }"
    aliased = "{ " + " ".join(f"n{i}: nodes {{ name }}" for i in range(31)) + " }"
    for query, message in ((deep, "exceeds maximum operation depth of 12"), (aliased, "aliases")):
        over_get = (await big_app.client.get("/graphql", params={"query": query})).json()
        assert over_get["data"] is None
        assert message in over_get["errors"][0]["message"]
        async with GraphQLSocket.connect(big_app.server.ws_url) as ws:
            over_ws = await ws.query(query)
        assert message in over_ws["errors"][0]["message"]
    fine = await big_app.client.get("/graphql", params={"query": "{ nodes { name } }"})
    assert len(fine.json()["data"]["nodes"]) == 100


async def test_a_query_over_the_time_limit_fails_alone_over_http_and_websocket() -> None:
    cluster = MemoryCluster()
    cluster.add_node(node_record("slow"))
    agents = MemorySnapshots(delay=60)  # answers far beyond the request's time limit
    agents.put(snapshot("slow", []))
    settings = Settings(agent_timeout=0.1, request_timeout=0.5)
    metrics = Metrics()
    app = create_app(settings, cluster, agents, metrics=metrics)
    query = '{ node(name: "slow") { name gpus { uuid } } }'
    expected = {
        "message": "the request exceeded the server's 0.5 s time limit",
        "extensions": {"code": "REQUEST_TIMEOUT"},
    }
    async with (
        serve_app(app, settings) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        over_http = await graphql(client, query)
        assert over_http["data"] is None
        assert [{k: e[k] for k in expected} for e in over_http["errors"]] == [expected]
        async with GraphQLSocket.connect(server.ws_url) as ws:
            over_ws = await ws.query(query)
            assert [{k: e[k] for k in expected} for e in over_ws["errors"]] == [expected]
            # The socket still serves what does not need the slow agent.
            assert await ws.query("{ nodes { name } }") == {"data": {"nodes": [{"name": "slow"}]}}
        metrics_text = (await client.get("/metrics")).text
    assert 'gpugraph_query_errors_total{kind="timeout"} 2.0' in metrics_text
    # Counted alike over HTTP and WebSocket: two timeouts and one good query.
    assert "gpugraph_query_seconds_count 3.0" in metrics_text


async def test_oversized_and_malformed_representations_are_refused_and_the_server_keeps_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sc = synthetic_cluster(2)
    settings = Settings(max_variable_items=1_000)
    app = create_app(settings, sc.cluster, sc.snapshots)
    query = "query($r: [_Any!]!) { _entities(representations: $r) { ... on Node { name } } }"
    many = [{"__typename": "Node", "name": f"node-{i:05d}"} for i in range(22_000)]
    async with (
        serve_app(app, settings) as server,
        httpx.AsyncClient(base_url=server.url, timeout=30) as client,
    ):
        body = {"query": query, "variables": {"r": many}}
        legacy, spec = await asyncio.gather(
            client.post("/graphql", json=body),
            client.post(
                "/graphql", json=body, headers={"accept": "application/graphql-response+json"}
            ),
        )
        assert legacy.status_code == 200 and legacy.json()["data"] is None
        (error,) = legacy.json()["errors"]
        assert error["extensions"] == {
            "code": "VARIABLES_TOO_LARGE",
            "estimate": 22_000,
            "limit": 1_000,
        }
        assert "22,000 list items" in error["message"]
        # A request error: 400 without data for clients of the GraphQL-over-HTTP spec.
        assert spec.status_code == 400 and "data" not in spec.json()
        # A malformed representation is a field error of its own, not a 500.
        broken = await graphql(client, query, {"r": [{"name": "node-00000"}, many[1]]})
        assert broken["data"] == {"_entities": [None, {"name": "node-00001"}]}
        assert "__typename must name an entity type" in broken["errors"][0]["message"]
        assert (await client.get("/healthz")).status_code == 200
        fine = await graphql(client, query, {"r": many[:3]})
        assert fine["data"]["_entities"] == [{"name": "node-00000"}, {"name": "node-00001"}, None]
    assert "Traceback" not in caplog.text and "internal error" not in caplog.text

"""One tenant's flood of history queries against the real server and a real agent's SQLite log:
the tenant waits its own turn, an admin's history answers within its deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from api.demo.cluster.manifests import pod_uid_for
from tests.support.polling import eventually_async
from tests.support.server import GIB, Gpu, GraphTestCluster, Proc, Served, serving
from tests.support.sqlite_connections import SqliteConnections

SINCE = "2000-01-01T00:00:00Z"
NAMED = f'{{ gpuHistory(since: "{SINCE}") {{ edges {{ node {{ podName }} }} }} }}'
# The admin's history of the node and its usage by namespace: reads of both kinds.
ADMIN = f"""{{
  gpuHistory(since: "{SINCE}", nodeName: "node-0") {{ edges {{ node {{ pid }} }} }}
  gpuUsage(since: "{SINCE}", groupBy: [NAMESPACE]) {{ namespace }}
}}"""
FLOOD = 16
# The tenant's queries, varied so that no two are the same request and none can share.
FLOODS = {
    "gpuUsage": [
        f'{{ gpuUsage(since: "2000-01-{day:02d}T00:00:00Z", groupBy: [POD]) {{ podName }} }}'
        for day in range(1, FLOOD + 1)
    ],
    "gpuHistory": [
        f'{{ gpuHistory(since: "2000-01-{day:02d}T00:00:00Z") {{ edges {{ node {{ podName }} }} }} }}'  # noqa: E501
        for day in range(1, FLOOD + 1)
    ],
}
# The agent reads only the tenant's records for the tenant: its statements, and no one else's.
TENANTS_READS = "p.namespace) IN ('research')"
# Longer than the test needs even on a busy machine: a read held past it would free its
# caller's slot while SQLite still holds the agent's reader.
AGENT_DEADLINE = 10.0


async def ask(server: Served, query: str, token: str) -> dict[str, Any]:
    response = await server.client.post(
        "/graphql", json={"query": query}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
async def shared_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[GraphTestCluster, SqliteConnections]]:
    """node-0: research/job-a (PID 11) and ml/job-b (PID 12) on one GPU; the agent's SQLite
    connections are recorded, so a test can hold chosen statements."""
    connections = SqliteConnections().install(monkeypatch)
    cluster = GraphTestCluster(tmp_path, history=True)
    cluster.add_node(
        "node-0",
        gpus=[Gpu(0, "GPU-0-0", processes=[(11, 3 * GIB), (12, 5 * GIB)])],
        procs=[
            Proc(11, "python", pod_uid_for("research", "job-a")),
            Proc(12, "python", pod_uid_for("ml", "job-b")),
        ],
    )
    cluster.add_pod("job-a", "research", "node-0", gpu_limit=1)
    cluster.add_pod("job-b", "ml", "node-0", gpu_limit=1)
    await cluster.start()
    yield cluster, connections
    await cluster.stop()


def pods_in(answer: dict[str, Any]) -> list[str]:
    data = answer["data"]
    if "gpuUsage" in data:
        return [row["podName"] for row in data["gpuUsage"]]
    return [edge["node"]["podName"] for edge in data["gpuHistory"]["edges"]]


@pytest.mark.parametrize("flooded", sorted(FLOODS))
async def test_a_tenants_flood_waits_its_turn_and_an_admins_history_answers_meanwhile(
    shared_gpu: tuple[GraphTestCluster, SqliteConnections], flooded: str
) -> None:
    cluster, connections = shared_gpu
    reviews = cluster.stub.reviews
    admin, tenant = reviews.token_of("admin"), reviews.token_of("research-user")
    settings = cluster.settings(
        auth_mode="kubernetes", agent_timeout=AGENT_DEADLINE, request_timeout=3 * AGENT_DEADLINE
    )
    flood_queries = FLOODS[flooded]
    async with serving(settings) as server:
        reads = server.services.pool.history_reads

        # Both callers reviewed, and the records in the log under their pods' names.
        async def named() -> bool:
            body = await ask(server, NAMED, admin)
            edges = body["data"]["gpuHistory"]["edges"]
            return sorted(e["node"]["podName"] or "" for e in edges) == ["job-a", "job-b"]

        await eventually_async(named, timeout=15, what="the records named")
        warm = flood_queries[0].replace("2000-01", "1999-12")
        assert pods_in(await ask(server, warm, tenant)) == ["job-a"]
        # Each of the tenant's reads now stalls in SQLite, holding one of the agent's readers.
        stall = connections.stall(TENANTS_READS)
        flood = [asyncio.ensure_future(ask(server, query, tenant)) for query in flood_queries]
        try:
            # The tenant's bound reaches the agent; the rest of its reads wait at the server.
            per_node = settings.max_history_reads_per_caller_per_node
            await eventually_async(
                lambda: (
                    stall.holding == per_node and reads.waiting("research-user") == FLOOD - per_node
                ),
                what="the tenant's reads held at the agent and queued at the server",
            )
            body = await ask(server, ADMIN, admin)
            # Answered while every one of the tenant's reads was still held or waiting.
            assert stall.holding == per_node and not any(f.done() for f in flood)
        finally:
            stall.release()
        answers = await asyncio.gather(*flood)
    assert "errors" not in body, body["errors"]
    assert sorted(e["node"]["pid"] for e in body["data"]["gpuHistory"]["edges"]) == [11, 12]
    assert {row["namespace"] for row in body["data"]["gpuUsage"]} == {"research", "ml"}
    # The tenant waited its turn: every query of the flood answered in full, its own pod only.
    for answer in answers:
        assert "errors" not in answer, answer["errors"]
        assert pods_in(answer) == ["job-a"]

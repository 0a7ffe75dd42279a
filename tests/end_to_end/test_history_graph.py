"""History through GraphQL: the real server, real agents keeping real SQLite logs, the stub API
server's reviews. Two tenants share a GPU; a host process sits on another."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from api.demo.cluster.manifests import pod_uid_for
from tests.end_to_end.test_auth import bearer, namespaces_in, pids_in
from tests.support.polling import eventually_async
from tests.support.server import GIB, Gpu, GraphTestCluster, Proc, Served, serving

SINCE = "2000-01-01T00:00:00Z"
RECORD = "pid processName podNamespace podName podUid pod { name } gpu { uuid } node { name } start end peakMemoryBytes meanMemoryBytes gpuSeconds"  # noqa: E501

EVERY_HISTORY_PATH = f"""
{{
  nodes {{ name historyStatus gpuHistory(since: "{SINCE}") {{ {RECORD} }}
    gpus {{ uuid hiddenHistoryCount(since: "{SINCE}") history(since: "{SINCE}") {{ {RECORD} }} }} }}
  pods {{ namespace name gpuHistory(since: "{SINCE}") {{ {RECORD} }} }}
  gpuHistory(since: "{SINCE}", first: 1000) {{ edges {{ cursor node {{ {RECORD} }} }}
    pageInfo {{ hasNextPage endCursor }} }}
  byNamespace: gpuUsage(since: "{SINCE}", groupBy: [NAMESPACE]) {{ namespace gpuSeconds }}
  byGpu: gpuUsage(since: "{SINCE}", groupBy: [GPU, NODE]) {{
    namespace gpuUuid nodeName gpuSeconds }}
  ml: gpuHistory(since: "{SINCE}", namespace: "ml") {{ edges {{ node {{ pid }} }} }}
}}
"""


@pytest.fixture
async def tenants(tmp_path: Path) -> AsyncIterator[GraphTestCluster]:
    """node-0: GPU-0-0 shared by research/job-a (PID 11) and ml/job-b (PID 12), GPU-0-1 with
    a host process (PID 13); node-1: ml/solo (PID 21); every agent keeps a log."""
    cluster = GraphTestCluster(tmp_path, history=True)
    cluster.add_node(
        "node-0",
        gpus=[
            Gpu(0, "GPU-0-0", processes=[(11, 3 * GIB), (12, 5 * GIB)]),
            Gpu(1, "GPU-0-1", processes=[(13, 1 * GIB)]),
        ],
        procs=[
            Proc(11, "python", pod_uid_for("research", "job-a")),
            Proc(12, "python", pod_uid_for("ml", "job-b")),
            Proc(13, "Xorg"),
        ],
    )
    cluster.add_node(
        "node-1",
        gpus=[Gpu(0, "GPU-1-0", processes=[(21, 2 * GIB)])],
        procs=[Proc(21, "torchrun", pod_uid_for("ml", "solo"))],
    )
    cluster.add_pod("job-a", "research", "node-0", gpu_limit=1)
    cluster.add_pod("job-b", "ml", "node-0", gpu_limit=1)
    cluster.add_pod("solo", "ml", "node-1", gpu_limit=1)
    await cluster.start()
    yield cluster
    await cluster.stop()


STATUS_QUERY = f"""{{ nodes {{ name historyStatus gpus {{ processes {{ pid }} }} }}
  gpuHistory(since: "{SINCE}") {{ edges {{ node {{ pid }} }} }} }}"""


async def ask(server: Served, query: str, token: str | None = None) -> dict[str, Any]:
    headers = bearer(token) if token else {}
    response = await server.client.post("/graphql", json={"query": query}, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def named(server: Served, token: str | None = None) -> dict[str, Any]:
    """Every history path, once the agents have been told every pod's name."""

    async def all_named() -> dict[str, Any] | None:
        body = await ask(server, EVERY_HISTORY_PATH, token)
        edges = body["data"]["gpuHistory"]["edges"]
        pods = {e["node"]["pid"]: e["node"]["podName"] for e in edges}
        return body if all(pods.get(pid) for pid in (11, 12, 21) if pid in pods) and pods else None

    body: dict[str, Any] = await eventually_async(all_named, timeout=15, what="named records")
    return body


async def test_every_history_path_answers_with_named_records(tenants: GraphTestCluster) -> None:
    async with serving(tenants.settings()) as server:
        body = await named(server)
        # Every history path, DateTime and enum arguments included, ran as a compiled plan.
        counts = server.services.app.state.compiled.counts
        assert counts["compiled"] >= 1 and counts["fallback"] == 0, counts
    assert "errors" not in body, body
    data = body["data"]
    assert {n["name"]: n["historyStatus"] for n in data["nodes"]} == {
        "node-0": "ok",
        "node-1": "ok",
    }
    edges = [e["node"] for e in data["gpuHistory"]["edges"]]
    assert sorted(e["pid"] for e in edges) == [11, 12, 13, 21]
    by_pid = {e["pid"]: e for e in edges}
    assert (by_pid[11]["podNamespace"], by_pid[11]["podName"]) == ("research", "job-a")
    assert by_pid[11]["pod"] == {"name": "job-a"} and by_pid[11]["end"] is None
    assert by_pid[13]["podName"] is None and by_pid[13]["processName"] == "Xorg"
    assert by_pid[21]["node"] == {"name": "node-1"} and by_pid[21]["gpu"] == {"uuid": "GPU-1-0"}
    assert by_pid[12]["peakMemoryBytes"] == 5 * GIB
    gpu00 = next(g for n in data["nodes"] for g in n["gpus"] if g["uuid"] == "GPU-0-0")
    assert sorted(r["pid"] for r in gpu00["history"]) == [11, 12]
    assert gpu00["hiddenHistoryCount"] == 0
    pod_a = next(p for p in data["pods"] if p["name"] == "job-a")
    assert [r["pid"] for r in pod_a["gpuHistory"]] == [11]
    assert {r["namespace"] for r in data["byNamespace"]} == {"research", "ml", None}
    assert {(r["gpuUuid"], r["nodeName"]) for r in data["byGpu"]} == {
        ("GPU-0-0", "node-0"), ("GPU-0-1", "node-0"), ("GPU-1-0", "node-1"),
    }  # fmt: skip
    assert sorted(e["node"]["pid"] for e in data["ml"]["edges"]) == [12, 21]


async def test_the_connection_pages_across_nodes_without_gaps_or_repeats(
    tenants: GraphTestCluster,
) -> None:
    async with serving(tenants.settings()) as server:
        await named(server)
        seen: list[int] = []
        after = None
        for _ in range(10):
            cursor = f', after: "{after}"' if after else ""
            page = await ask(
                server,
                f'{{ gpuHistory(since: "{SINCE}", first: 1{cursor}) '
                "{ edges { node { pid } } pageInfo { hasNextPage endCursor } } }",
            )
            connection = page["data"]["gpuHistory"]
            seen += [e["node"]["pid"] for e in connection["edges"]]
            if not connection["pageInfo"]["hasNextPage"]:
                break
            after = connection["pageInfo"]["endCursor"]
        bad = await ask(
            server,
            f'{{ gpuHistory(since: "{SINCE}", after: "nonsense") {{ edges {{ cursor }} }} }}',
        )
    assert sorted(seen) == [11, 12, 13, 21] and len(seen) == 4
    assert "not a cursor" in bad["errors"][0]["message"]


async def test_a_research_only_token_sees_nothing_of_other_namespaces_in_any_history_path(
    tenants: GraphTestCluster,
) -> None:
    reviews = tenants.stub.reviews
    async with serving(tenants.settings(auth_mode="kubernetes")) as server:
        await named(server, reviews.token_of("admin"))
        body = await ask(server, EVERY_HISTORY_PATH, reviews.token_of("research-user"))
    assert "errors" not in body, body
    data = body["data"]
    assert namespaces_in(data) == {"research"}
    assert pids_in(data) == {11}
    recorded = {e["node"]["podNamespace"] for e in data["gpuHistory"]["edges"]}
    assert recorded == {"research"}
    # Its GPU is shared: ml's record is withheld and counted.
    (gpu,) = [g for n in data["nodes"] for g in n["gpus"]]
    assert (gpu["uuid"], gpu["hiddenHistoryCount"]) == ("GPU-0-0", 1)
    assert [r["pid"] for r in gpu["history"]] == [11]
    assert [r["namespace"] for r in data["byNamespace"]] == ["research"]
    assert {r["gpuUuid"] for r in data["byGpu"]} == {"GPU-0-0"}
    assert data["ml"]["edges"] == []


async def test_history_off_and_a_corrupt_log_are_reported_while_live_data_works(
    tmp_path: Path,
) -> None:
    cluster = GraphTestCluster(tmp_path, history=True)
    broken = cluster.add_node("node-0", gpus=[Gpu(0, "GPU-0-0", processes=[(11, GIB)])],
                              procs=[Proc(11, "python")])  # fmt: skip
    cluster.add_node("node-1", gpus=[Gpu(0, "GPU-1-0")]).history_dir = None
    assert broken.history_dir is not None
    broken.history_dir.mkdir(parents=True)
    (broken.history_dir / "history.sqlite").write_bytes(b"not a database at all " * 64)
    await cluster.start()
    try:
        async with serving(cluster.settings()) as server:
            body = await ask(
                server,
                STATUS_QUERY,
            )
    finally:
        await cluster.stop()
    status = {n["name"]: n["historyStatus"] for n in body["data"]["nodes"]}
    assert "file is not a database" in status["node-0"] and status["node-1"] == "off"
    assert body["data"]["nodes"][0]["gpus"][0]["processes"] == [{"pid": 11}]
    messages = " ".join(e["message"] for e in body["errors"])
    assert "file is not a database" in messages and "history is off on node 'node-1'" in messages


async def test_a_process_naming_another_nodes_pod_borrows_neither_its_name_nor_its_pod(
    tenants: GraphTestCluster,
) -> None:
    # On node-1, a cgroup that names research/job-a, which runs on node-0.
    node1 = tenants.agents["node-1"]
    node1.add_proc(Proc(22, "python", pod_uid_for("research", "job-a")))
    node1.write_gpus([Gpu(0, "GPU-1-0", processes=[(21, 2 * GIB), (22, GIB)])])
    reviews = tenants.stub.reviews
    async with serving(tenants.settings(auth_mode="kubernetes")) as server:
        admin = await named(server, reviews.token_of("admin"))
        research = await ask(server, EVERY_HISTORY_PATH, reviews.token_of("research-user"))
    edges = {e["node"]["pid"]: e["node"] for e in admin["data"]["gpuHistory"]["edges"]}
    framed = edges[22]
    assert framed["podUid"] == pod_uid_for("research", "job-a")
    assert (framed["podNamespace"], framed["podName"], framed["pod"]) == (None, None, None)
    assert 22 not in pids_in(research["data"])

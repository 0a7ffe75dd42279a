"""Auth end to end: the real server, the stub API server's TokenReview and SubjectAccessReview.

The cluster has two tenants on one GPU (research and ml), a host process,
and a node with only ml's pod. ``research-user`` (from the stub's table) may
list pods in ``research`` only; ``admin`` may do everything.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from api.demo.cluster.apiserver.reviews import Rule, StubUser
from api.execution import GraphQLApp
from api.http.graphiql import BUILD_COMMAND, assets_present
from tests.support.polling import eventually_async
from tests.support.server import GIB, Gpu, GraphQLSocket, GraphTestCluster, Proc, serving

EVERYTHING = """
{
  nodes { name pods { namespace name } gpus { uuid hiddenProcessCount hiddenMemoryBytes
    processes { pid cmdline pod { namespace name } container { id } } } }
  pods { namespace name containers { id } gpuProcesses { pid } }
  gpus { uuid memoryUsedBytes hiddenProcessCount hiddenMemoryBytes
    processes { pid pod { namespace } gpu { processes { pid pod { namespace } } } } }
  gpuProcesses { pid cmdline pod { namespace name } }
}
"""


def namespaces_in(value: Any) -> set[str]:
    """Every ``namespace`` value anywhere in a JSON answer."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "namespace" and isinstance(item, str):
                found.add(item)
            else:
                found |= namespaces_in(item)
    elif isinstance(value, list):
        for item in value:
            found |= namespaces_in(item)
    return found


def pids_in(value: Any) -> set[int]:
    """Every ``pid`` anywhere in a JSON answer."""
    if isinstance(value, dict):
        return set().union(*(({v} if k == "pid" else pids_in(v)) for k, v in value.items()))
    if isinstance(value, list):
        return set().union(*(pids_in(v) for v in value))
    return set()


@pytest.fixture
async def tenants(tmp_path: Path) -> AsyncIterator[GraphTestCluster]:
    """node-0: one GPU shared by research/job-a (PID 11, 3 GiB) and ml/job-b (PID 12, 5 GiB),
    another with a host process (PID 13, 1 GiB); node-1: ml/solo (PID 21); node-2: idle."""
    from api.demo.cluster.manifests import pod_uid_for

    cluster = GraphTestCluster(tmp_path)
    cluster.add_node(
        "node-0",
        gpus=[
            Gpu(0, "GPU-0-0", utilization=50, processes=[(11, 3 * GIB), (12, 5 * GIB)]),
            Gpu(1, "GPU-0-1", utilization=5, processes=[(13, 1 * GIB)]),
        ],
        procs=[
            Proc(11, "python", pod_uid_for("research", "job-a")),
            Proc(12, "python", pod_uid_for("ml", "job-b")),
            Proc(13, "Xorg"),
        ],
    )
    cluster.add_node(
        "node-1",
        gpus=[Gpu(0, "GPU-1-0", utilization=9, processes=[(21, 2 * GIB)])],
        procs=[Proc(21, "torchrun", pod_uid_for("ml", "solo"))],
    )
    cluster.add_node("node-2", gpus=[Gpu(0, "GPU-2-0")])
    cluster.add_pod("job-a", "research", "node-0", gpu_limit=1)
    cluster.add_pod("job-b", "ml", "node-0", gpu_limit=1)
    cluster.add_pod("solo", "ml", "node-1", gpu_limit=1)
    await cluster.start()
    yield cluster
    await cluster.stop()


def auth_settings(cluster: GraphTestCluster, **overrides: Any) -> Any:
    return cluster.settings(auth_mode="kubernetes", **overrides)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_research_user_sees_only_research_and_admin_sees_everything(
    tenants: GraphTestCluster,
) -> None:
    reviews = tenants.stub.reviews
    async with serving(auth_settings(tenants)) as server:
        research = await server.client.post(
            "/graphql",
            json={"query": EVERYTHING},
            headers=bearer(reviews.token_of("research-user")),
        )
        admin = await server.client.post(
            "/graphql", json={"query": EVERYTHING}, headers=bearer(reviews.token_of("admin"))
        )
    assert research.status_code == 200 and admin.status_code == 200
    mine, alls = research.json(), admin.json()
    assert "errors" not in mine and "errors" not in alls, (mine, alls)
    assert namespaces_in(mine) == {"research"}
    assert pids_in(mine) == {11}
    assert namespaces_in(alls) == {"research", "ml"}
    assert pids_in(alls) == {11, 12, 13, 21}
    data = mine["data"]
    # Only the node and GPU holding research's pod; ml's process hidden but counted.
    assert [n["name"] for n in data["nodes"]] == ["node-0"]
    assert [g["uuid"] for g in data["gpus"]] == ["GPU-0-0"]
    gpu = data["gpus"][0]
    assert (gpu["hiddenProcessCount"], gpu["hiddenMemoryBytes"]) == (1, 5 * GIB)
    assert gpu["memoryUsedBytes"] == next(
        g["memoryUsedBytes"] for g in alls["data"]["gpus"] if g["uuid"] == "GPU-0-0"
    )
    # No pods/exec in research: no command line even for its own process.
    assert all(p["cmdline"] is None for p in data["gpuProcesses"])
    admin_gpu = next(g for g in alls["data"]["gpus"] if g["uuid"] == "GPU-0-0")
    assert admin_gpu["hiddenProcessCount"] == 0


async def test_direct_lookups_of_other_tenants_answer_null(tenants: GraphTestCluster) -> None:
    token = tenants.stub.reviews.token_of("research-user")
    query = """{ pod(namespace: "ml", name: "job-b") { name } node(name: "node-1") { name }
      gpu(uuid: "GPU-1-0") { uuid } pods(namespace: "ml") { name }
      gpuProcesses(namespace: "ml") { pid }
      _entities(representations: [{__typename: "Pod", namespace: "ml", name: "solo"},
        {__typename: "Node", name: "node-1"}, {__typename: "Gpu", uuid: "GPU-0-1"}]) {
        __typename } }"""
    async with serving(auth_settings(tenants)) as server:
        response = await server.client.post(
            "/graphql", json={"query": query}, headers=bearer(token)
        )
        gpu_pods = await server.client.get(
            "/gpu-pods", params={"worker_id": "job-b", "namespace": "ml"}, headers=bearer(token)
        )
        own = await server.client.get(
            "/gpu-pods", params={"worker_id": "job-a"}, headers=bearer(token)
        )
    body = response.json()
    assert "errors" not in body, body
    assert body["data"] == {
        "pod": None,
        "node": None,
        "gpu": None,
        "pods": [],
        "gpuProcesses": [],
        "_entities": [None, None, None],
    }
    assert gpu_pods.status_code == 404
    assert own.status_code == 200
    answer = own.json()
    assert set(answer["GpuInfos"]) == {"GPU-0-0"}
    assert [p["pod"] for p in answer["GpuPods"]["GPU-0-0"]["pidPods"]] == ["job-a"]


async def test_missing_or_rejected_tokens_get_401_and_an_unreachable_api_server_503(
    tenants: GraphTestCluster,
) -> None:
    async with serving(auth_settings(tenants)) as server:
        client = server.client
        missing = await client.post("/graphql", json={"query": "{ nodes { name } }"})
        wrong = await client.post(
            "/graphql", json={"query": "{ nodes { name } }"}, headers=bearer("not-a-token")
        )
        anonymous = [
            await client.get("/gpu-pods", params={"worker_id": "job-a"}),
            await client.get("/metrics"),
        ]
        health = await client.get("/healthz")
        page = await client.get("/graphql", headers={"Accept": "text/html"})
        admin = bearer(tenants.stub.reviews.token_of("admin"))
        research = bearer(tenants.stub.reviews.token_of("research-user"))
        metrics_admin = await client.get("/metrics", headers=admin)
        metrics_research = await client.get("/metrics", headers=research)
        tenants.stub.reviews.unavailable = True
        fresh = bearer(tenants.stub.reviews.token_of("research-user") + "x")
        down = await client.post("/graphql", json={"query": "{ nodes { name } }"}, headers=fresh)
        tenants.stub.reviews.unavailable = False
    for response in (missing, wrong, *anonymous):
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert health.status_code == 200
    # GraphiQL's page needs no token: the IDE, or (built without npm) how to build it.
    if assets_present():
        assert page.status_code == 200 and "graphiql" in page.text.lower()
    else:
        assert page.status_code == 503 and BUILD_COMMAND in page.text
    assert metrics_admin.status_code == 200 and "gpugraph" in metrics_admin.text
    assert metrics_research.status_code == 403
    assert down.status_code == 503


async def test_an_api_server_that_cannot_be_reached_means_503_not_a_pass(
    tenants: GraphTestCluster,
) -> None:
    async with serving(auth_settings(tenants)) as server:
        token = tenants.stub.reviews.token_of("admin")
        tenants.stub.stop()
        response = await server.client.post(
            "/graphql", json={"query": "{ nodes { name } }"}, headers=bearer(token)
        )
    assert response.status_code == 503
    assert "data" not in response.json()


async def test_a_burst_of_one_token_makes_a_handful_of_reviews(tenants: GraphTestCluster) -> None:
    reviews = tenants.stub.reviews
    headers = bearer(reviews.token_of("research-user"))
    async with serving(auth_settings(tenants)) as server:
        before = dict(reviews.counts)
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
            responses = await asyncio.gather(
                *(
                    client.post("/graphql", json={"query": "{ pods { name } }"}, headers=headers)
                    for _ in range(1000)
                )
            )
    assert {r.status_code for r in responses} == {200}
    assert all(r.json()["data"]["pods"] == [{"name": "job-a"}] for r in responses)
    made = {k: reviews.counts[k] - before.get(k, 0) for k in reviews.counts}
    assert made["tokenreviews"] == 1
    # list pods cluster-wide, list nodes, exec cluster-wide, and per namespace: a handful.
    assert made["subjectaccessreviews"] <= 8


async def test_shared_results_never_cross_callers(tenants: GraphTestCluster) -> None:
    reviews = tenants.stub.reviews
    query = {"query": "{ gpuProcesses { pid pod { namespace } } }"}
    tokens = [reviews.token_of("admin"), reviews.token_of("research-user")] * 20
    async with serving(auth_settings(tenants, snapshot_ttl=30.0)) as server:
        responses = await asyncio.gather(
            *(server.client.post("/graphql", json=query, headers=bearer(t)) for t in tokens)
        )
    for token, response in zip(tokens, responses, strict=True):
        pids = pids_in(response.json())
        assert pids == ({11, 12, 13, 21} if token == tokens[0] else {11})


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "strawberry"])
async def test_callers_of_equal_rights_are_each_told_their_own_name(
    tenants: GraphTestCluster, compiled: bool
) -> None:
    reviews = tenants.stub.reviews
    research = reviews.users["research-user"]
    # Bound to the same roles (the usual case with groups): the same scope, another name.
    bob = reviews.add_user(StubUser("bob@research", "uid-bob", research.groups, research.rules))
    names = {reviews.token_of("research-user"): "research-user", bob: "bob@research"}
    # The map's first query asks for viewer beside the data.
    whoami = {"query": "{ me: viewer { username } pods { name } }"}
    pods = {"query": "{ pods { name } }"}
    tokens = list(names) * 10
    settings = auth_settings(tenants, snapshot_ttl=30.0, compiled_execution=compiled)
    async with serving(settings) as server:
        shared = graphql_app(server).shared
        answers = await asyncio.gather(
            *(server.client.post("/graphql", json=whoami, headers=bearer(t)) for t in tokens)
        )
        before = shared.shared
        dashboards = await asyncio.gather(
            *(server.client.post("/graphql", json=pods, headers=bearer(t)) for t in tokens)
        )
        dashboards_shared = shared.shared - before
    for token, answer in zip(tokens, answers, strict=True):
        assert answer.json()["data"] == {
            "me": {"username": names[token]},
            "pods": [{"name": "job-a"}],
        }
    # Each caller's repeats still share its own answer...
    assert before == len(tokens) - len(names)
    # ...and a document that does not ask who is asking is shared by both callers.
    assert {d.json()["data"]["pods"][0]["name"] for d in dashboards} == {"job-a"}
    assert dashboards_shared == len(tokens) - 1


def graphql_app(server: Any) -> GraphQLApp:
    """The server's GraphQL view (it holds the shared executions)."""
    views = {getattr(r, "app", None) for r in server.services.app.routes}
    (view,) = (v for v in views if isinstance(v, GraphQLApp))
    return view


SUBSCRIPTION = "subscription { gpuUpdates(intervalSeconds: 0.5) { uuid processes { pid } } }"


async def test_websocket_without_a_token_or_with_a_bad_one_is_refused(
    tenants: GraphTestCluster,
) -> None:
    async with serving(auth_settings(tenants)) as server:
        for payload in ({}, {"Authorization": "Bearer nope"}):
            async with websockets.connect(
                server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]
            ) as ws:
                await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await asyncio.wait_for(ws.recv(), 10)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
        with pytest.raises(websockets.InvalidStatus) as refused:
            async with websockets.connect(
                server.ws_url,
                subprotocols=[GraphQLSocket.PROTOCOL],
                additional_headers=bearer("nope"),
            ):
                pass
        assert refused.value.response.status_code == 401


async def test_a_subscription_ends_when_its_token_is_revoked(tenants: GraphTestCluster) -> None:
    reviews = tenants.stub.reviews
    token = reviews.add_user(
        StubUser("temp", "uid-temp", ("temp",), (Rule(frozenset({"list"}), frozenset({"pods"})),))
    )
    async with (
        serving(auth_settings(tenants, auth_cache_ttl=0.6)) as server,
        websockets.connect(server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]) as ws,
    ):
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
        socket = GraphQLSocket(ws)
        op = await socket.subscribe(SUBSCRIPTION)
        first = await socket.receive(op)
        assert first["type"] == "next" and "errors" not in first["payload"], first
        # Cluster-wide list pods without list nodes: the GPUs with any process.
        assert {g["uuid"] for g in first["payload"]["data"]["gpuUpdates"]} == {
            "GPU-0-0",
            "GPU-0-1",
            "GPU-1-0",
        }
        reviews.revoke("temp")
        while True:
            message = await asyncio.wait_for(socket.receive(op), 10)
            if message["type"] != "next" or message["payload"].get("errors"):
                break
    errors = message["payload"] if message["type"] == "error" else message["payload"]["errors"]
    assert any("no longer accepted" in e["message"] for e in errors), message


async def test_websocket_token_in_the_upgrade_header(tenants: GraphTestCluster) -> None:
    token = tenants.stub.reviews.token_of("research-user")
    async with (
        serving(auth_settings(tenants)) as server,
        websockets.connect(
            server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL], additional_headers=bearer(token)
        ) as ws,
    ):
        await ws.send(json.dumps({"type": "connection_init"}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
        socket = GraphQLSocket(ws)
        op = await socket.subscribe(SUBSCRIPTION)
        message = await socket.receive(op)
    assert message["type"] == "next", message
    assert pids_in(message["payload"]) == {11}


async def test_a_subscription_to_another_tenants_pod_yields_null(tenants: GraphTestCluster) -> None:
    token = tenants.stub.reviews.token_of("research-user")
    query = """subscription { own: podGpuUsage(namespace: "research", name: "job-a",
      intervalSeconds: 0.5) { name gpuProcesses { pid } } }"""
    other = query.replace('"research", name: "job-a"', '"ml", name: "job-b"')
    async with (
        serving(auth_settings(tenants)) as server,
        websockets.connect(server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]) as ws,
    ):
        init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {token}"}}
        await ws.send(json.dumps(init))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
        socket = GraphQLSocket(ws)
        mine = await socket.receive(await socket.subscribe(query))
        theirs = await socket.receive(await socket.subscribe(other))
    assert mine["payload"]["data"]["own"] == {"name": "job-a", "gpuProcesses": [{"pid": 11}]}
    assert theirs["payload"]["data"]["own"] is None


async def test_connection_init_takes_the_authorization_key_in_any_case(
    tenants: GraphTestCluster,
) -> None:
    token = tenants.stub.reviews.token_of("research-user")
    async with serving(auth_settings(tenants)) as server:
        for key in ("authorization", "AUTHORIZATION", "Authorization"):
            async with websockets.connect(
                server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]
            ) as ws:
                init = {"type": "connection_init", "payload": {key: f"Bearer {token}"}}
                await ws.send(json.dumps(init))
                reply = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert reply["type"] == "connection_ack", (key, reply)


async def test_a_token_over_16_kib_is_refused_before_any_review(tenants: GraphTestCluster) -> None:
    reviews = tenants.stub.reviews
    huge = "x" * (16 * 1024 + 1)
    async with serving(auth_settings(tenants)) as server:
        before = dict(reviews.counts)
        response = await server.client.post(
            "/graphql", json={"query": "{ nodes { name } }"}, headers=bearer(huge)
        )
        async with websockets.connect(server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]) as ws:
            init = {"type": "connection_init", "payload": {"Authorization": f"Bearer {huge}"}}
            await ws.send(json.dumps(init))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), 10)
    assert response.status_code == 401
    assert "longer than" in response.json()["error"]
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4403
    assert dict(reviews.counts) == before, "no review was asked for"


async def test_a_stalled_api_server_and_unseen_tokens_starve_no_cached_caller(
    tenants: GraphTestCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.auth import access, tokens
    from api.auth.review_pool import REVIEW_WAITING, REVIEW_WORKERS

    # Reviews wait longer than this test runs, so what it sees does not depend on speed:
    # every review thread stays busy until the stub answers again.
    monkeypatch.setattr(tokens, "REVIEW_TIMEOUT", 120.0)
    monkeypatch.setattr(access, "REVIEW_TIMEOUT", 120.0)
    reviews = tenants.stub.reviews
    admin = {**bearer(reviews.token_of("admin")), "Accept-Encoding": "gzip"}
    query = {"query": "{ nodes { name } }"}
    async with serving(auth_settings(tenants)) as server:
        warm = await server.client.get("/metrics", headers=admin)
        assert warm.status_code == 200
        reviews.stall()
        asked = reviews.counts["tokenreviews"]
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
            flood = [
                asyncio.ensure_future(
                    client.post("/graphql", json=query, headers=bearer(f"random-{i}"))
                )
                for i in range(40)
            ]
            capacity = REVIEW_WORKERS + REVIEW_WAITING
            # Past the review pool's capacity, requests get 503 at once, with no
            # review asked, while the others' reviews are still stalled.
            refused = []
            for done in asyncio.as_completed(flood):
                refused.append(await done)
                if len(refused) == 40 - capacity:
                    break
            assert {r.status_code for r in refused} == {503}
            # Each review thread's request reaches the stalled stub when its thread runs.
            await eventually_async(
                lambda: reviews.counts["tokenreviews"] - asked >= REVIEW_WORKERS,
                what="every review thread's request at the stalled API server",
            )
            assert reviews.counts["tokenreviews"] - asked == REVIEW_WORKERS
            # A caller whose reviews are cached is answered, /metrics rendered and
            # gzipped, while every review thread waits on the API server.
            metrics = await server.client.get("/metrics", headers=admin)
            graph = await server.client.post("/graphql", json=query, headers=admin)
            assert reviews.counts["tokenreviews"] - asked == REVIEW_WORKERS
            reviews.resume()
            rest = await asyncio.gather(*flood)
    assert metrics.status_code == 200 and metrics.headers["content-encoding"] == "gzip"
    assert "gpugraph" in metrics.text
    assert graph.status_code == 200 and graph.json()["data"]["nodes"]
    # Once the API server answers, the waiting ones get its verdict (random tokens: 401).
    assert {r.status_code for r in rest} <= {401, 503}
    assert sum(r.status_code == 401 for r in rest) >= capacity


async def test_one_identity_cannot_hold_every_subscription_slot(tenants: GraphTestCluster) -> None:
    reviews = tenants.stub.reviews
    research = {"Authorization": f"Bearer {reviews.token_of('research-user')}"}
    admin = {"Authorization": f"Bearer {reviews.token_of('admin')}"}
    settings = auth_settings(tenants, max_subscriptions=6, max_subscriptions_per_caller=2)

    async def subscribe(ws: Any, payload: dict[str, str]) -> list[dict[str, Any]]:
        await ws.send(json.dumps({"type": "connection_init", "payload": payload}))
        assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
        socket = GraphQLSocket(ws)
        first = [await socket.receive(await socket.subscribe(SUBSCRIPTION)) for _ in range(2)]
        third = await socket.receive(await socket.subscribe(SUBSCRIPTION))
        return [*first, third]

    async with (
        serving(settings) as server,
        websockets.connect(server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]) as one,
        websockets.connect(server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]) as two,
        websockets.connect(server.ws_url, subprotocols=[GraphQLSocket.PROTOCOL]) as three,
    ):
        research_one = await subscribe(one, research)
        # A second socket of the same identity shares its allowance.
        await two.send(json.dumps({"type": "connection_init", "payload": research}))
        assert json.loads(await asyncio.wait_for(two.recv(), 10))["type"] == "connection_ack"
        again = GraphQLSocket(two)
        research_two = await again.receive(await again.subscribe(SUBSCRIPTION))
        admins = await subscribe(three, admin)
    assert [errors_of(m) for m in research_one[:2]] == [[], []]
    for refused in (research_one[2], research_two):
        assert ["this server allows 2 per caller" in e for e in errors_of(refused)] == [True]
    # The admin is not locked out by the research user's slots, and has its own two.
    assert [errors_of(m) for m in admins[:2]] == [[], []]
    assert errors_of(admins[2])


def errors_of(message: dict[str, Any]) -> list[str]:
    """The error messages of a subscription message (``next`` with errors, or ``error``)."""
    payload = message["payload"]
    errors = payload if message["type"] == "error" else payload.get("errors") or []
    return [e["message"] for e in errors]


async def test_a_namespace_the_caller_cannot_see_answers_as_one_that_does_not_exist(
    tenants: GraphTestCluster,
) -> None:
    token = tenants.stub.reviews.token_of("research-user")
    # node-0 runs research's job-a and ml's job-b. With its agent down, asking it for
    # ml's processes would name it in the errors: ml has pods there.
    await tenants.agents["node-0"].stop()
    answers = {}
    async with serving(auth_settings(tenants)) as server:
        for namespace in ("ml", "does-not-exist", "research"):
            query = f'{{ gpuProcesses(namespace: "{namespace}") {{ pid }} }}'
            response = await server.client.post(
                "/graphql", json={"query": query}, headers=bearer(token)
            )
            answers[namespace] = response.json()
        calls = {name: agent.calls for name, agent in tenants.agents.items()}
    # Answered before any lookup: no error naming a node, as for a namespace that does not exist.
    assert answers["ml"] == answers["does-not-exist"] == {"data": {"gpuProcesses": []}}
    # Its own namespace's node down is news to the caller.
    assert "node-0" in json.dumps(answers["research"]["errors"])
    # The agents up were never asked (research sees node-0 only).
    assert calls["node-1"] == calls["node-2"] == 0


async def test_a_costly_query_refused_tells_a_restricted_caller_nothing_of_the_clusters_size(
    tenants: GraphTestCluster,
) -> None:
    reviews = tenants.stub.reviews
    # The GPU/node chain: each level multiplies by the nodes, or GPUs per node, one sees.
    chain = "{ gpus { node { gpus { node { gpus { node { gpus { uuid } } } } } } } }"
    async with serving(auth_settings(tenants, max_result_items=2)) as server:
        answers = {}
        for user in ("admin", "research-user"):
            response = await server.client.post(
                "/graphql", json={"query": chain}, headers=bearer(reviews.token_of(user))
            )
            (error,) = response.json()["errors"]
            answers[user] = error
    admin, research = answers["admin"], answers["research-user"]
    assert admin["extensions"]["code"] == research["extensions"]["code"] == "QUERY_TOO_COSTLY"
    # The admin sees the whole cluster and is told its sizes.
    assert "3 nodes, 3 pods" in admin["message"]
    # research sees one node and one pod: its estimate is over that, and no sizes are named.
    assert "sizes" not in research["message"] and "nodes" not in research["message"]
    assert research["extensions"]["estimate"] < admin["extensions"]["estimate"]
    shown = f"up to {research['extensions']['estimate']:,} result objects"
    assert shown in research["message"]

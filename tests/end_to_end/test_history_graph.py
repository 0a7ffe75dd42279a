"""History through GraphQL: the real server, real agents keeping real SQLite logs, the stub API
server's reviews. Two tenants share a GPU; a host process sits on another."""

from __future__ import annotations

import datetime
import gc
import json
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from api.demo.cluster.manifests import pod_uid_for
from graph_schema.occupancy.cursor import Position
from graph_schema.occupancy.fan_out import HISTORY_LIST_LIMIT
from node_resolver.history.records import OccupancyRecord
from node_resolver.history.store import HistoryStore
from tests.end_to_end.test_auth import bearer, namespaces_in, pids_in
from tests.support.forged_cursors import old_style_cursor, zlib_bomb_cursor
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


def two_tenants(tmp_path: Path) -> GraphTestCluster:
    """node-0: GPU-0-0 shared by research/job-a (PID 11) and ml/job-b (PID 12), GPU-0-1 with
    a host process (PID 13); node-1: ml/solo (PID 21); every agent keeps a log (not started)."""
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
    return cluster


@pytest.fixture
async def tenants(tmp_path: Path) -> AsyncIterator[GraphTestCluster]:
    """``two_tenants``, started."""
    cluster = two_tenants(tmp_path)
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


EACH_NODES_LISTS = f"""{{
  nodes {{ name gpuHistory(since: "{SINCE}") {{ pid }} gpuEvents(since: "{SINCE}") {{ kind }}
    gpus {{ uuid processes {{ pid }} history(since: "{SINCE}") {{ pid }}
      hiddenHistoryCount(since: "{SINCE}") events(since: "{SINCE}") {{ kind }} }} }}
  pods {{ name gpuHistory(since: "{SINCE}") {{ pid }} gpuEvents(since: "{SINCE}") {{ kind }} }}
}}"""


async def test_a_node_that_cannot_answer_nulls_only_its_own_history_and_event_lists(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # node-0 answers; node-1 keeps no log; node-2's agent is down. Node.gpus is nullable so
    # that a down node leaves the other nodes standing; so are the lists read from its log.
    cluster = two_tenants(tmp_path)
    cluster.agents["node-1"].history_dir = None
    cluster.add_node("node-2", gpus=[Gpu(0, "GPU-2-0")])
    cluster.add_pod("idle", "ml", "node-2", gpu_limit=1)
    await cluster.start()
    try:
        await cluster.agents["node-2"].stop()
        async with serving(cluster.settings()) as server:
            body = await ask(server, EACH_NODES_LISTS)
            gc.collect()
    finally:
        await cluster.stop()
    nodes = {n["name"]: n for n in body["data"]["nodes"]}
    pods = {p["name"]: p for p in body["data"]["pods"]}
    assert [p["pid"] for p in nodes["node-0"]["gpuHistory"]] == [11, 12, 13]
    assert nodes["node-0"]["gpuEvents"] == [] and pods["job-a"]["gpuHistory"] == [{"pid": 11}]
    for name in ("node-1", "node-2"):
        assert (nodes[name]["gpuHistory"], nodes[name]["gpuEvents"]) == (None, None)
    # node-1's GPUs answer; only what its missing log would say is null.
    (gpu,) = nodes["node-1"]["gpus"]
    assert gpu["processes"] == [{"pid": 21}]
    assert (gpu["history"], gpu["hiddenHistoryCount"], gpu["events"]) == (None, None, None)
    assert nodes["node-2"]["gpus"] is None
    for name in ("solo", "idle"):
        assert (pods[name]["gpuHistory"], pods[name]["gpuEvents"]) == (None, None)
    failed = {tuple(e["path"][:2]) for e in body["errors"]}
    assert ("nodes", 1) in failed and ("nodes", 2) in failed
    assert all("node-0" not in e["message"] for e in body["errors"])
    # Each failure is in the answer, and none is left as a traceback in the server's log.
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []


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


# -- forged cursors, and what history tells a tenant of other tenants' records

FORGED_AFTER = (
    'query($after: String) { gpuHistory(since: "' + SINCE + '", after: $after) '
    "{ edges { cursor } } }"
)
HISTORY_PAGE = (
    "query($pod: String, $ns: String, $first: Int, $after: String) { gpuHistory(since: "
    f'"{SINCE}", podName: $pod, namespace: $ns, first: $first, after: $after) '
    "{ edges { cursor node { pid start node { name } } } pageInfo { hasNextPage endCursor } } }"
)
NOTHING = {
    "data": {"gpuHistory": {"edges": [], "pageInfo": {"hasNextPage": False, "endCursor": None}}}
}


async def page(server: Served, token: str, **variables: Any) -> dict[str, Any]:
    """One page of gpuHistory as ``token``'s caller asks it."""
    response = await server.client.post(
        "/graphql", json={"query": HISTORY_PAGE, "variables": variables}, headers=bearer(token)
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize(
    "query",
    [
        f'{{ gpuHistory(since: "{SINCE}", namespace: $name) {{ edges {{ cursor }} }} }}',
        f'{{ gpuHistory(since: "{SINCE}", podName: $name) {{ edges {{ cursor }} }} }}',
        f'{{ gpuEvents(since: "{SINCE}", namespace: $name) {{ edges {{ cursor }} }} }}',
    ],
    ids=["history-namespace", "history-pod-name", "events-namespace"],
)
async def test_a_name_no_pod_can_have_is_bad_input_not_every_agent_down(
    tenants: GraphTestCluster, query: str
) -> None:
    # 70,000 characters passed each agent's message limit, which refused it as if every
    # agent were unreachable; an empty name matched the records of no pod (and the agents
    # now refuse one). A name no pod can have is refused before any agent is asked: one
    # error, the caller's, and none of a node.
    document = "query($name: String!) " + query
    async with serving(tenants.settings()) as server:
        for name in ("n" * 70_000, ""):
            response = await server.client.post(
                "/graphql", json={"query": document, "variables": {"name": name}}
            )
            body = response.json()
            assert body["data"] is None
            [error] = body["errors"]
            assert error["extensions"]["code"] == "BAD_USER_INPUT"
            assert " characters, as in Kubernetes" in error["message"]


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "strawberry"])
async def test_forged_cursors_are_bad_user_input_and_nothing_is_inflated(
    tenants: GraphTestCluster, compiled: bool
) -> None:
    forged = {
        # 999 KiB of text that the compressed cursor of old inflated to 740 MiB.
        "bomb": zlib_bomb_cursor(),
        # JSON nested past the recursion limit once inflated (a RecursionError of old).
        "nested": old_style_cursor(b"[" * 200_000),
    }
    settings = tenants.settings(auth_mode="kubernetes", compiled_execution=compiled)
    answers: dict[str, tuple[int, dict[str, Any], int]] = {}
    async with serving(settings) as server:
        token = tenants.stub.reviews.token_of("research-user")
        for name, cursor in forged.items():
            body = {"query": FORGED_AFTER, "variables": {"after": cursor}}
            # Everything the process allocates while the request is answered, server included.
            tracemalloc.start()
            try:
                response = await server.client.post("/graphql", json=body, headers=bearer(token))
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            answers[name] = (response.status_code, response.json(), peak)
    for name, (status, body, peak) in answers.items():
        assert status == 200, (name, body)
        assert body["data"] is None, name
        (error,) = body["errors"]
        assert error["message"] == "after is not a cursor this server gave out", name
        assert error["extensions"]["code"] == "BAD_USER_INPUT", name
        # The request's own megabyte, a few copies of it; never what it would inflate to.
        assert peak < 64 << 20, (name, peak)


async def test_another_tenants_pod_name_answers_exactly_as_a_missing_one(
    tenants: GraphTestCluster,
) -> None:
    reviews = tenants.stub.reviews
    async with serving(tenants.settings(auth_mode="kubernetes")) as server:
        admin = reviews.token_of("admin")
        await named(server, admin)
        research = reviews.token_of("research-user")
        # job-b is ml's pod, on research's node and GPU, and its log has a record of it.
        ml = await page(server, admin, pod="job-b")
        answers = {
            (asked, first): await page(server, research, first=first, **asked_for)
            for first in (1, 100)
            for asked, asked_for in {
                "hidden pod": {"pod": "job-b"},
                "missing pod": {"pod": "no-such-pod"},
                "hidden namespace": {"ns": "ml"},
                "missing namespace": {"ns": "no-such-namespace"},
            }.items()
        }
    assert [e["node"]["pid"] for e in ml["data"]["gpuHistory"]["edges"]] == [12]
    assert answers == dict.fromkeys(answers, NOTHING)


async def test_paging_one_record_at_a_time_positions_only_the_tenants_own_records(
    tenants: GraphTestCluster,
) -> None:
    reviews = tenants.stub.reviews
    async with serving(tenants.settings(auth_mode="kubernetes")) as server:
        await named(server, reviews.token_of("admin"))
        research = reviews.token_of("research-user")
        pages: list[dict[str, Any]] = []
        after = None
        for _ in range(10):
            body = await page(server, research, first=1, after=after)
            assert "errors" not in body, body
            pages.append(body["data"]["gpuHistory"])
            if not pages[-1]["pageInfo"]["hasNextPage"]:
                break
            after = pages[-1]["pageInfo"]["endCursor"]
    # Its node's log also holds ml's PID 12 and the host's PID 13: neither is a page.
    assert [[e["node"]["pid"] for e in p["edges"]] for p in pages] == [[11]]
    (edge,) = pages[0]["edges"]
    assert pages[0]["pageInfo"]["endCursor"] == edge["cursor"]
    # The cursor holds the place of the record shown, and nothing else.
    position = Position.decode(edge["cursor"])
    assert position is not None and position.node_name == edge["node"]["node"]["name"]
    shown = datetime.datetime.fromisoformat(edge["node"]["start"]).timestamp()
    assert abs(position.first_seen - shown) < 1e-3


async def test_history_lists_read_only_the_tenants_records_past_the_list_limit(
    tmp_path: Path,
) -> None:
    cluster = two_tenants(tmp_path)
    # Before any of today's, as many of ml's records on research's GPU as a list holds.
    node = cluster.agents["node-0"]
    assert node.history_dir is not None
    node.history_dir.mkdir(parents=True)
    store = HistoryStore(node.history_dir, max_bytes=node.history_max_bytes)
    store.open()
    day_ago = time.time() - 86400
    store.write(
        [
            OccupancyRecord(
                gpu_uuid="GPU-0-0",
                mig_device_uuid="",
                pid=50_000 + i,
                start_ticks=i,
                boot_id="boot-0",
                first_seen=day_ago + i,
                last_seen=day_ago + i + 1,
                ended=True,
                pod_uid=pod_uid_for("ml", "job-b"),
                pod_namespace="ml",
                pod_name="job-b",
            )
            for i in range(HISTORY_LIST_LIMIT)
        ],
        [],
        now=day_ago + HISTORY_LIST_LIMIT,
    )
    store.close()
    lists = (
        f'{{ nodes {{ name gpuHistory(since: "{SINCE}") {{ pid }} '
        f'gpus {{ uuid history(since: "{SINCE}") {{ pid }} }} }} '
        f'pods {{ name gpuHistory(since: "{SINCE}") {{ pid }} }} }}'
    )
    reviews = cluster.stub.reviews
    await cluster.start()
    try:
        async with serving(cluster.settings(auth_mode="kubernetes")) as server:
            admin = reviews.token_of("admin")

            async def research_named() -> bool:
                body = await page(server, admin, ns="research")
                return [e["node"]["pid"] for e in body["data"]["gpuHistory"]["edges"]] == [11]

            await eventually_async(research_named, timeout=15, what="job-a's record named")
            body = await ask(server, lists, reviews.token_of("research-user"))
    finally:
        await cluster.stop()
    # No "more than 1000 records" from ml's, and research's own record not cut off by them.
    assert "errors" not in body, body
    assert body["data"] == {
        "nodes": [{"name": "node-0", "gpuHistory": [{"pid": 11}],
                   "gpus": [{"uuid": "GPU-0-0", "history": [{"pid": 11}]}]}],
        "pods": [{"name": "job-a", "gpuHistory": [{"pid": 11}]}],
    }  # fmt: skip


# -- a tenant's past on nodes it no longer sees

PAST_USAGE = f"""{{
  gpuUsage(since: "{SINCE}", groupBy: [POD]) {{ namespace podName gpuSeconds }}
  gpuHistory(since: "{SINCE}", podName: "lr-sweep-7") {{
    edges {{ node {{ end node {{ name }} }} }} }}
}}"""


async def test_a_tenants_finished_pod_on_a_node_it_no_longer_sees_is_counted_and_no_one_elses(
    tmp_path: Path,
) -> None:
    # As in the demo: research's lr-sweep-7 ran two hours on a node where research runs
    # nothing now (node-1, ml's), beside an ml pod of the past; node-2's agent is down, and
    # research runs nothing there either.
    cluster = two_tenants(tmp_path)
    cluster.add_node("node-2", gpus=[Gpu(0, "GPU-2-0")])
    node1 = cluster.agents["node-1"]
    assert node1.history_dir is not None
    node1.history_dir.mkdir(parents=True)
    store = HistoryStore(node1.history_dir, max_bytes=node1.history_max_bytes)
    store.open()
    day_ago = time.time() - 86400

    def finished(pid: int, namespace: str, name: str, hours: float) -> OccupancyRecord:
        return OccupancyRecord(
            gpu_uuid="GPU-1-0", mig_device_uuid="", pid=pid, start_ticks=pid, boot_id="boot-0",
            first_seen=day_ago, last_seen=day_ago + hours * 3600, ended=True,
            pod_uid=pod_uid_for(namespace, name), pod_namespace=namespace, pod_name=name,
        )  # fmt: skip

    store.write(
        [finished(7300, "research", "lr-sweep-7", 2), finished(7400, "ml", "old-ml", 3)],
        [],
        now=day_ago + 3 * 3600,
    )
    store.close()
    reviews = cluster.stub.reviews
    await cluster.start()
    try:
        await cluster.agents["node-2"].stop()
        # One read in flight per caller: the tenant's read of every node is paced as anyone's.
        settings = cluster.settings(auth_mode="kubernetes", max_history_reads_per_caller=1)
        async with serving(settings) as server:
            research = await ask(server, PAST_USAGE, reviews.token_of("research-user"))
            admin = await ask(server, PAST_USAGE, reviews.token_of("admin"))
    finally:
        await cluster.stop()
    usage = {(r["namespace"], r["podName"]): r["gpuSeconds"] for r in research["data"]["gpuUsage"]}
    # The two hours count for research, where before only the node it sees was summed.
    assert usage[("research", "lr-sweep-7")] == pytest.approx(7200)
    assert {namespace for namespace, _ in usage} == {"research"}
    (edge,) = research["data"]["gpuHistory"]["edges"]
    assert edge["node"]["node"] == {"name": "node-1"} and edge["node"]["end"] is not None
    # The answer says what it lacks, without naming the down node research cannot see.
    assert [(e["message"], e["path"]) for e in research["errors"]] == [
        ("usage unavailable from 1 node(s) this caller cannot see", ["gpuUsage"]),
        ("history unavailable from 1 node(s) this caller cannot see", ["gpuHistory"]),
    ]
    assert "node-2" not in json.dumps(research)
    # The admin is told which node, and sees both teams' pods.
    assert all("node 'node-2'" in e["message"] for e in admin["errors"])
    admin_usage = {(r["namespace"], r["podName"]) for r in admin["data"]["gpuUsage"]}
    assert {("research", "lr-sweep-7"), ("ml", "old-ml")} <= admin_usage

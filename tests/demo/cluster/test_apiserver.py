"""The stub API server speaks the Kubernetes wire format (checked with a plain HTTP client)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import orjson
import pytest
from kubernetes.client import ApiClient, CoreV1Api

from api.demo.cluster import StubApiServer, make_node, make_pod
from api.demo.cluster.apiserver.reviews import new_token
from tests.support.kube import stub_api
from tests.support.polling import eventually


def names(body: dict[str, Any]) -> list[str]:
    return [item["metadata"]["name"] for item in body["items"]]


def seeded(server: StubApiServer) -> None:
    for i in range(5):
        server.add_pod(
            make_pod(f"p{i}", "a" if i < 3 else "b", f"node-{i % 2}", labels={"app": f"x{i % 2}"})
        )
    server.add_node(make_node("node-0"))


def watch_lines(client: httpx.Client, path: str, **params: str) -> list[dict[str, Any]]:
    with client.stream("GET", path, params={"watch": "true", **params}) as response:
        assert response.status_code == 200
        assert response.headers["transfer-encoding"] == "chunked"
        return [orjson.loads(line) for line in response.iter_lines() if line]


def test_list_shape() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url) as client:
        seeded(server)
        body = client.get("/api/v1/pods").json()
        assert body["kind"] == "PodList" and body["apiVersion"] == "v1"
        assert body["metadata"]["resourceVersion"] == str(server.resource_version)
        assert "continue" not in body["metadata"]
        assert sorted(names(body)) == ["p0", "p1", "p2", "p3", "p4"]
        versions = [int(item["metadata"]["resourceVersion"]) for item in body["items"]]
        assert len(set(versions)) == 5 and max(versions) <= server.resource_version
        nodes = client.get("/api/v1/nodes").json()
        assert nodes["kind"] == "NodeList" and names(nodes) == ["node-0"]


def test_pagination_is_a_consistent_snapshot() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url) as client:
        seeded(server)
        first = client.get("/api/v1/pods", params={"limit": 2}).json()
        assert len(first["items"]) == 2 and first["metadata"]["remainingItemCount"] == 3
        server.add_pod(make_pod("late", "a"))
        server.delete_pod("a", "p0")
        seen = names(first)
        token = first["metadata"]["continue"]
        while token:
            page = client.get("/api/v1/pods", params={"limit": 2, "continue": token}).json()
            assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
            seen += names(page)
            token = page["metadata"].get("continue")
        assert sorted(seen) == ["p0", "p1", "p2", "p3", "p4"]


def test_bad_continue_token_is_410() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url) as client:
        response = client.get("/api/v1/pods", params={"limit": 2, "continue": "bm9wZTox"})
        assert response.status_code == 410
        assert response.json()["reason"] == "Expired"


def test_namespaced_list_and_selectors() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url) as client:
        seeded(server)
        assert sorted(names(client.get("/api/v1/namespaces/a/pods").json())) == ["p0", "p1", "p2"]
        selected = client.get("/api/v1/pods", params={"labelSelector": "app=x1"}).json()
        assert sorted(names(selected)) == ["p1", "p3"]
        selected = client.get("/api/v1/pods", params={"labelSelector": "app!=x1,app"}).json()
        assert sorted(names(selected)) == ["p0", "p2", "p4"]
        on_node = client.get(
            "/api/v1/pods", params={"fieldSelector": "spec.nodeName=node-1"}
        ).json()
        assert sorted(names(on_node)) == ["p1", "p3"]
        # The API server's other pod field labels are read from the object.
        server.update_pod(make_pod("p4", "b", "node-0", labels={"app": "x0"}, phase="Succeeded"))
        done = client.get("/api/v1/pods", params={"fieldSelector": "status.phase!=Running"}).json()
        assert names(done) == ["p4"]
        both = "spec.nodeName=node-0,status.phase=Running,spec.hostNetwork=false"
        assert names(client.get("/api/v1/pods", params={"fieldSelector": both}).json()) == [
            "p0",
            "p2",
        ]
        unsupported = client.get("/api/v1/pods", params={"fieldSelector": "status.hostIP=1.2.3.4"})
        assert unsupported.status_code == 400
        assert unsupported.json()["message"] == "field label not supported: status.hostIP"


def test_watch_streams_changes_after_the_version_then_ends() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url, timeout=10) as client:
        seeded(server)
        since = server.resource_version
        server.add_pod(make_pod("new", "a"))
        server.update_pod(make_pod("new", "a", phase="Succeeded"))
        server.delete_pod("a", "new")
        server.add_node(make_node("node-1"))
        events = watch_lines(client, "/api/v1/pods", resourceVersion=str(since), timeoutSeconds="1")
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "new"),
            ("MODIFIED", "new"),
            ("DELETED", "new"),
        ]
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert versions == sorted(versions) and versions[0] > since
        assert events[1]["object"]["status"]["phase"] == "Succeeded"


def test_a_watch_from_a_future_version_sends_only_the_changes_after_it() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url, timeout=10) as client:
        ahead = str(server.resource_version + 2)
        events: list[dict[str, Any]] = []
        watching = threading.Thread(
            target=lambda: events.extend(
                watch_lines(client, "/api/v1/pods", resourceVersion=ahead, timeoutSeconds="2")
            )
        )
        watching.start()
        assert eventually(lambda: server.watching("pods") == 1)
        time.sleep(0.2)  # past the watch's first look at the history
        for name in ("first", "second", "third"):
            server.add_pod(make_pod(name, "a"))
        watching.join(10)
        assert [e["object"]["metadata"]["name"] for e in events] == ["third"]


def test_watch_sends_bookmarks_only_when_asked() -> None:
    with (
        stub_api(bookmark_interval=0.2) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        seeded(server)
        rv = str(server.resource_version)
        quiet = watch_lines(client, "/api/v1/pods", resourceVersion=rv, timeoutSeconds="1")
        assert quiet == []
        marked = watch_lines(
            client,
            "/api/v1/pods",
            resourceVersion=rv,
            timeoutSeconds="1",
            allowWatchBookmarks="true",
        )
        assert marked and all(e["type"] == "BOOKMARK" for e in marked)
        assert marked[0]["object"]["kind"] == "Pod"
        assert marked[0]["object"]["metadata"]["resourceVersion"] == rv


def test_watch_from_a_compacted_version_gets_410_error_event() -> None:
    with (
        stub_api(history_limit=2) as server,
        httpx.Client(base_url=server.url, timeout=10) as client,
    ):
        seeded(server)
        events = watch_lines(client, "/api/v1/pods", resourceVersion="2", timeoutSeconds="5")
        assert len(events) == 1
        assert events[0]["type"] == "ERROR"
        assert events[0]["object"]["kind"] == "Status"
        assert events[0]["object"]["code"] == 410
        assert events[0]["object"]["reason"] == "Expired"


def test_watch_without_version_replays_current_state() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url, timeout=10) as client:
        seeded(server)
        events = watch_lines(client, "/api/v1/namespaces/b/pods", timeoutSeconds="1")
        assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in events) == [
            ("ADDED", "p3"),
            ("ADDED", "p4"),
        ]


def test_unknown_paths_and_writes_are_refused_with_status() -> None:
    with stub_api() as server, httpx.Client(base_url=server.url) as client:
        response = client.get("/api/v1/configmaps")
        assert response.status_code == 404 and response.json()["kind"] == "Status"
        assert client.post("/api/v1/pods", json={}).status_code == 405
        assert (
            client.get("/api/v1/pods", params={"watch": "1", "resourceVersion": "x"}).status_code
            == 400
        )


def test_the_official_client_deserializes_the_stub_objects() -> None:
    with stub_api() as server:
        seeded(server)
        server.add_pod(make_pod("pending", "a", None, phase="Pending", init_containers=["setup"]))
        with ApiClient(server.configuration()) as api_client:
            api = CoreV1Api(api_client)
            pods: Any = api.list_pod_for_all_namespaces()
            nodes: Any = api.list_node()
    assert len(pods.items) == 6
    running = next(p for p in pods.items if p.metadata.name == "p0")
    assert running.status.container_statuses[0].container_id.startswith("containerd://")
    assert running.metadata.managed_fields
    assert nodes.items[0].status.capacity["nvidia.com/gpu"] == "8"


def test_realistic_pod_size() -> None:
    size = len(orjson.dumps(make_pod("worker-12345", "team-7", "node-123", gpu_limit=1)))
    assert 3500 < size < 7000
    slim = len(orjson.dumps(make_pod("worker-12345", "team-7", "node-123", managed_fields=False)))
    assert slim < size / 1.5


def test_controls_reject_impossible_changes() -> None:
    with stub_api() as server:
        server.add_pod(make_pod("p", "a"))
        with pytest.raises(ValueError):
            server.add_pod(make_pod("p", "a"))
        with pytest.raises(KeyError):
            server.update_pod(make_pod("q", "a"))
        with pytest.raises(KeyError):
            server.delete_pod("a", "q")
        assert server.pod("a", "p")["metadata"]["resourceVersion"] == str(server.resource_version)  # type: ignore[index]


def test_stub_tokens_never_begin_with_a_dash() -> None:
    # A token_urlsafe string begins with "-" one time in 64, and `top --token -x`
    # would then read as a flag; real service account tokens (JWTs) never do.
    made = iter(["-first", "-second", "third"])
    assert new_token(lambda: next(made)) == "third"

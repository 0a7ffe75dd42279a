"""The real kubectl (client-go: discovery, Tables, chunked lists, watch) against the stub."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import yaml

from api.demo.cluster import StubApiServer, make_node, make_pod, write_kubeconfig
from api.demo.cluster.apiserver.tables import human_duration
from api.demo.cluster.dra_manifests import (
    ClaimDevice,
    SliceDevice,
    make_resource_claim,
    make_resource_slice,
)
from tests.support.kube import stub_api
from tests.support.kubectl import Kubectl, kubectl_binary, table

CREATED = datetime.fromisoformat("2025-01-15T08:30:00+00:00").timestamp()  # the manifests' time
AGE = 3 * 86400 + 5 * 3600  # the stub's clock, this long after every object was created
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
WATCH_TIMEOUT = 20.0


def seeded(server: StubApiServer) -> None:
    for i in range(5):
        server.add_pod(
            make_pod(f"p{i}", "a" if i < 3 else "b", f"node-{i % 2}", labels={"app": f"x{i % 2}"})
        )
    server.add_pod(make_pod("waiting", "a", None, labels={"app": "x1"}, phase="Pending"))
    server.add_node(make_node("node-0", labels={"node-role.kubernetes.io/gpu": ""}))
    down = make_node("node-1")
    down["status"]["conditions"][0]["status"] = "False"
    server.add_node(down)


@pytest.fixture
def server() -> Iterator[StubApiServer]:
    with stub_api(clock=lambda: CREATED + AGE) as server:
        seeded(server)
        yield server


@pytest.fixture
def kubectl(server: StubApiServer, tmp_path: Path) -> Kubectl:
    binary = kubectl_binary()
    kubeconfig = Path(write_kubeconfig(str(tmp_path / "kubeconfig"), server.url))
    return Kubectl(binary, kubeconfig, tmp_path / "kube-cache")


def test_get_nodes_prints_the_servers_columns(kubectl: Kubectl) -> None:
    rows = table(kubectl.run("get", "nodes"))
    assert rows == [
        {"NAME": "node-0", "STATUS": "Ready", "ROLES": "gpu", "AGE": "3d5h", "VERSION": "v1.31.2"},
        {
            "NAME": "node-1",
            "STATUS": "NotReady",
            "ROLES": "<none>",
            "AGE": "3d5h",
            "VERSION": "v1.31.2",
        },
    ]


def test_get_pods_all_namespaces_in_chunks(kubectl: Kubectl, server: StubApiServer) -> None:
    rows = table(kubectl.run("get", "pods", "-A", "--chunk-size=2"))
    # In the API server's order, by namespace then name, whatever the order of creation.
    assert [(r["NAMESPACE"], r["NAME"]) for r in rows] == [
        ("a", "p0"),
        ("a", "p1"),
        ("a", "p2"),
        ("a", "waiting"),
        ("b", "p3"),
        ("b", "p4"),
    ]
    pages = [params for path, params in server.request_log if path == "/api/v1/pods"]
    assert all(p.get("limit") == "2" for p in pages)
    assert len(pages) == 3 and "continue" not in pages[0]
    assert all(p.get("continue") for p in pages[1:])


def test_get_pods_by_namespace_and_label(kubectl: Kubectl) -> None:
    rows = table(kubectl.run("get", "pods", "-n", "a", "-l", "app=x1"))
    assert rows == [
        {"NAME": "p1", "READY": "1/1", "STATUS": "Running", "RESTARTS": "0", "AGE": "3d5h"},
        {"NAME": "waiting", "READY": "0/1", "STATUS": "Pending", "RESTARTS": "0", "AGE": "3d5h"},
    ]


def test_set_based_label_selectors(kubectl: Kubectl) -> None:
    rows = table(kubectl.run("get", "pods", "-A", "-l", "app notin (x1),app"))
    assert [r["NAME"] for r in rows] == ["p0", "p2", "p4"]
    rows = table(kubectl.run("get", "pods", "-n", "b", "-l", "app in (x0, x1)"))
    assert [r["NAME"] for r in rows] == ["p3", "p4"]
    error = kubectl.fail("get", "pods", "-A", "--field-selector", "status.hostIP=1.2.3.4")
    assert "Error from server (BadRequest)" in error
    assert error.rstrip().endswith("field label not supported: status.hostIP")


def test_get_pods_by_field_selector(kubectl: Kubectl) -> None:
    rows = table(kubectl.run("get", "pods", "-A", "--field-selector", "spec.nodeName=node-1"))
    assert [r["NAME"] for r in rows] == ["p1", "p3"]


def test_describe_node_lists_its_running_pods(kubectl: Kubectl) -> None:
    # describe selects the node's pods with spec.nodeName and status.phase field selectors.
    described = kubectl.run("describe", "node", "node-0")
    pods = described.split("Non-terminated Pods:", 1)[1].split("Allocated resources:", 1)[0]
    assert [line.split()[:2] for line in pods.splitlines()[3:] if line.strip()] == [
        ["a", "p0"],
        ["a", "p2"],
        ["b", "p4"],
    ]


def test_describe_pod_shows_its_node_and_containers(kubectl: Kubectl) -> None:
    described = kubectl.run("describe", "pod", "p1", "-n", "a")
    fields = dict(
        line.split(":", 1) for line in described.splitlines() if line and not line[0].isspace()
    )
    assert fields["Name"].strip() == "p1" and fields["Namespace"].strip() == "a"
    assert fields["Node"].strip().startswith("node-1") and fields["Status"].strip() == "Running"
    assert fields["Events"].strip() == "<none>"


def test_get_one_pod_as_yaml_is_the_stored_object(kubectl: Kubectl, server: StubApiServer) -> None:
    served = yaml.safe_load(kubectl.run("get", "pod", "p3", "-n", "b", "-o", "yaml"))
    stored = server.pod("b", "p3")
    assert stored is not None
    # kubectl leaves managedFields out unless --show-managed-fields.
    assert stored["metadata"].pop("managedFields") and served == stored
    assert table(kubectl.run("get", "node", "node-1"))[0]["STATUS"] == "NotReady"


def test_a_missing_object_is_the_servers_not_found(kubectl: Kubectl) -> None:
    error = kubectl.fail("get", "pod", "nope", "-n", "a")
    assert 'Error from server (NotFound): pods "nope" not found' in error
    error = kubectl.fail("get", "node", "nope")
    assert 'Error from server (NotFound): nodes "nope" not found' in error


def test_namespaces_are_those_holding_pods(kubectl: Kubectl) -> None:
    rows = table(kubectl.run("get", "namespaces"))
    assert rows == [
        {"NAME": name, "STATUS": "Active", "AGE": age}
        for name, age in (("a", "3d5h"), ("b", "3d5h"), ("default", "<unknown>"))
    ]
    error = kubectl.fail("get", "pod", "p0", "-n", "nowhere")
    assert 'Error from server (NotFound): namespaces "nowhere" not found' in error


def test_api_resources_lists_what_the_stub_serves(kubectl: Kubectl) -> None:
    rows = {line.split()[0]: line for line in kubectl.run("api-resources").splitlines()[1:]}
    assert set(rows) == {
        "pods",
        "nodes",
        "namespaces",
        "tokenreviews",
        "subjectaccessreviews",
        "resourceclaims",
        "resourceslices",
    }
    assert "resource.k8s.io/v1" in rows["resourceclaims"]
    assert "authentication.k8s.io/v1" in rows["tokenreviews"]
    assert "authorization.k8s.io/v1" in rows["subjectaccessreviews"]


def test_kubectl_creates_token_and_access_reviews(
    kubectl: Kubectl, server: StubApiServer, tmp_path: Path
) -> None:
    # The review groups are found through discovery, then POSTed to as on a real cluster.
    # The stub serves no OpenAPI documents, so kubectl's client-side validation is off.
    review = tmp_path / "review.json"
    token = server.reviews.token_of("research-user")
    review.write_text(
        json.dumps(
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            }
        )
    )
    answer = json.loads(kubectl.run("create", "--validate=false", "-f", str(review), "-o", "json"))
    assert answer["status"]["authenticated"] is True
    assert answer["status"]["user"]["username"] == "research-user"
    access = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "research-user",
            "resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "a"},
        },
    }
    review.write_text(json.dumps(access))
    answer = json.loads(kubectl.run("create", "--validate=false", "-f", str(review), "-o", "json"))
    assert answer["status"]["allowed"] is False


def _lines(process: subprocess.Popen[str]) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _await_row(lines: queue.Queue[str], seen: list[str], event: str, name: str) -> dict[str, str]:
    deadline = time.monotonic() + WATCH_TIMEOUT
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        seen.append(line)
        cells = line.split()
        if cells[:1] == [event] and name in cells:
            return dict(zip(seen[0].split(), cells, strict=True))
    raise AssertionError(f"no {event} {name} in kubectl's watch output: {seen}")


def test_watch_shows_changes_made_while_it_runs(kubectl: Kubectl, server: StubApiServer) -> None:
    process = subprocess.Popen(
        kubectl.command("get", "pods", "-A", "-w", "--output-watch-events"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _lines(process)
        seen: list[str] = []
        assert _await_row(lines, seen, "ADDED", "waiting")["STATUS"] == "Pending"
        assert seen[0].split()[:3] == ["EVENT", "NAMESPACE", "NAME"]
        assert server.wait_for("pods", "watch", 1, timeout=WATCH_TIMEOUT)
        server.add_pod(make_pod("late", "b", "node-0"))
        assert _await_row(lines, seen, "ADDED", "late")["NAMESPACE"] == "b"
        leaving = make_pod("late", "b", "node-0")
        leaving["metadata"]["deletionTimestamp"] = "2025-01-15T09:00:00Z"
        server.update_pod(leaving)
        assert _await_row(lines, seen, "MODIFIED", "late")["STATUS"] == "Terminating"
        server.delete_pod("b", "late")
        assert _await_row(lines, seen, "DELETED", "late")["NAME"] == "late"
    finally:
        process.kill()
        process.wait(10)
        assert process.stdout is not None and process.stderr is not None
        process.stdout.close()
        process.stderr.close()


def test_a_table_is_served_only_when_asked_for(server: StubApiServer) -> None:
    with httpx.Client(base_url=server.url) as client:
        plain = client.get("/api/v1/namespaces/a/pods").json()
        assert plain["kind"] == "PodList"
        listed = client.get(
            "/api/v1/namespaces/a/pods", params={"limit": 1}, headers={"Accept": TABLE_ACCEPT}
        ).json()
        assert listed["kind"] == "Table" and listed["apiVersion"] == "meta.k8s.io/v1"
        assert [c["name"] for c in listed["columnDefinitions"] if c["priority"] == 0] == [
            "Name",
            "Ready",
            "Status",
            "Restarts",
            "Age",
        ]
        assert listed["metadata"]["continue"] and listed["metadata"]["remainingItemCount"] == 3
        (row,) = listed["rows"]
        assert row["object"]["kind"] == "PartialObjectMetadata"
        assert row["object"]["metadata"] == plain["items"][0]["metadata"]
        whole = client.get(
            "/api/v1/nodes/node-0",
            params={"includeObject": "Object"},
            headers={"Accept": TABLE_ACCEPT},
        ).json()
        assert whole["rows"][0]["object"] == server.node("node-0")
        bad = client.get(
            "/api/v1/nodes", params={"includeObject": "All"}, headers={"Accept": TABLE_ACCEPT}
        )
        assert bad.status_code == 400 and bad.json()["reason"] == "BadRequest"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-5, "<invalid>"),
        (-1, "0s"),
        (119, "119s"),
        (130, "2m10s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (30 * 3600, "30h"),
        (3 * 86400, "3d"),
        (10 * 86400, "10d"),
        (800 * 86400, "2y70d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_read_as_kubectl_writes_them(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_get_resourceclaims_and_resourceslices(server: StubApiServer, kubectl: Kubectl) -> None:
    server.add_claim(
        make_resource_claim("a", "p0-gpu-x1", [ClaimDevice("gpu-0", "node-0")], reserved_for=["p0"])
    )
    server.add_claim(make_resource_claim("b", "pending", []))
    server.add_slice(make_resource_slice("node-0", [SliceDevice("gpu-0", "GPU-0")]))
    output = kubectl.run("get", "resourceclaims,resourceslices", "-A")
    assert "resourceclaim.resource.k8s.io/p0-gpu-x1" in output
    assert "allocated,reserved" in output and "pending" in output
    assert "resourceslice.resource.k8s.io/node-0-gpu.nvidia.com" in output
    assert "gpu.nvidia.com" in output
    claims = json.loads(kubectl.run("get", "resourceclaims", "-n", "a", "-o", "json"))
    assert [c["metadata"]["name"] for c in claims["items"]] == ["p0-gpu-x1"]
    assert claims["items"][0]["apiVersion"] == "resource.k8s.io/v1"

"""The stub API server's Services and service proxy: HTTP and WebSockets, as kube-apiserver does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect
from websockets.sync.server import Server, ServerConnection, serve

from api.demo.cluster import StubApiServer
from api.demo.cluster.apiserver.reviews import READ, Rule, StubUser

LABELS = {"app.kubernetes.io/name": "gpugraph", "app.kubernetes.io/component": "server"}
PROXY = "/api/v1/namespaces/gpugraph/services/gpugraph:http/proxy"


class Echo(BaseHTTPRequestHandler):
    """Answers every request with its method, path and headers."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body.decode(),
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture
def stub() -> Iterator[StubApiServer]:
    with StubApiServer() as server:
        yield server


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "127.0.0.1", server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def ws_echo() -> Iterator[tuple[Server, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    def handler(socket: ServerConnection) -> None:
        assert socket.request is not None
        seen.append({"path": socket.request.path, **dict(socket.request.headers.raw_items())})
        for message in socket:
            socket.send(f"echo {message!s}")

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server, seen
        server.shutdown()


def test_services_are_listed_by_label_and_fetched_by_name(stub: StubApiServer) -> None:
    stub.services.add("gpugraph", "gpugraph", ports={"http": 80}, backend=None, labels=LABELS)
    stub.services.add("other", "web", ports={"http": 80}, backend=None, labels={"app": "web"})
    selector = "app.kubernetes.io/component=server"
    listed = httpx.get(f"{stub.url}/api/v1/services", params={"labelSelector": selector}).json()
    assert listed["kind"] == "ServiceList"
    assert [(s["metadata"]["namespace"], s["metadata"]["name"]) for s in listed["items"]] == [
        ("gpugraph", "gpugraph")
    ]
    one = httpx.get(f"{stub.url}/api/v1/namespaces/gpugraph/services/gpugraph").json()
    assert one["kind"] == "Service" and one["spec"]["ports"][0]["name"] == "http"
    missing = httpx.get(f"{stub.url}/api/v1/namespaces/gpugraph/services/nope")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"


def test_the_proxy_forwards_http_without_the_callers_credential(
    stub: StubApiServer, echo: tuple[str, int]
) -> None:
    stub.services.add("gpugraph", "gpugraph", ports={"http": 80}, backend=echo, labels=LABELS)
    token = stub.reviews.token_of("admin")
    response = httpx.post(
        f"{stub.url}{PROXY}/graphql?x=1",
        content=b'{"query": "{ a }"}',
        headers={"Authorization": f"Bearer {token}", "X-Extra": "kept"},
    )
    assert response.status_code == 200, response.text
    seen = response.json()
    assert seen["method"] == "POST" and seen["path"] == "/graphql?x=1"
    assert seen["body"] == '{"query": "{ a }"}'
    assert seen["headers"]["x-extra"] == "kept"
    # The API server consumed the credential; the backend never sees it.
    assert "authorization" not in seen["headers"]


def test_the_proxy_passes_a_websocket_through_both_ways(
    stub: StubApiServer, ws_echo: tuple[Server, list[dict[str, str]]]
) -> None:
    server, seen = ws_echo
    port = server.socket.getsockname()[1]
    stub.services.add("gpugraph", "gpugraph", ports={"http": 80}, backend=("127.0.0.1", port))
    token = stub.reviews.token_of("admin")
    url = f"{stub.url.replace('http://', 'ws://')}{PROXY}/graphql"
    with connect(url, additional_headers={"Authorization": f"Bearer {token}"}) as socket:
        for text in ("one", "two"):
            socket.send(text)
            assert socket.recv(timeout=5) == f"echo {text}"
    assert seen[0]["path"] == "/graphql"
    # Header names are case-insensitive: a lower-cased credential is still one.
    assert "authorization" not in {name.lower() for name in seen[0]}


def test_the_proxy_refuses_as_rbac_would_and_says_when_nothing_serves(
    stub: StubApiServer, echo: tuple[str, int]
) -> None:
    stub.services.add("gpugraph", "gpugraph", ports={"http": 80}, backend=echo, labels=LABELS)
    stub.services.add("gpugraph", "idle", ports={"http": 80}, backend=None)
    viewer = stub.reviews.add_user(
        StubUser(
            "viewer", "uid-viewer", ("system:authenticated",), (Rule(READ, frozenset({"pods"})),)
        )
    )

    def post(path: str, token: str | None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(f"{stub.url}{path}", content=b"{}", headers=headers)

    forbidden = post(f"{PROXY}/graphql", viewer)
    assert forbidden.status_code == 403
    assert forbidden.json()["message"] == (
        'services "gpugraph:http" is forbidden: User "viewer" cannot create resource '
        '"services/proxy" in API group "" in the namespace "gpugraph"'
    )
    assert post(f"{PROXY}/graphql", "not-a-token").status_code == 401
    idle = post("/api/v1/namespaces/gpugraph/services/idle:http/proxy/graphql", None)
    assert idle.status_code == 503
    assert idle.json()["message"] == 'no endpoints available for service "idle:http"'
    research = stub.reviews.token_of("research-user")
    assert post(f"{PROXY}/graphql", research).status_code == 200

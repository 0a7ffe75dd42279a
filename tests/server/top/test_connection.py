"""How ``gpugraph top`` reaches the server: --server, a kubeconfig alone, tokens, and its errors.

Successes run in-process; failures run the real command, to see its whole
output: one line on stderr, exit code 1, no traceback.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import pytest
from websockets.sync.server import ServerConnection, serve

from api.cli import main
from api.demo.cluster import StubApiServer, write_kubeconfig
from api.demo.cluster.apiserver.reviews import READ, Rule, StubUser
from api.top.connection import (
    DEFAULT_NAMESPACE,
    DEFAULT_SERVICE,
    SERVER_LABELS,
    SERVICE_PORT,
    Endpoint,
    proxy_path,
    resolve,
)
from api.top.errors import TopError
from api.top.queries import SNAPSHOT
from api.top.transport import HttpTransport
from tests.server.top.conftest import AuthDemo, kubeconfig_of
from tests.support.demo_process import ROOT, RunningDemo, gpugraph_command
from tests.support.server import GraphTestCluster, serving

EVERY_NAMESPACE = {"inference", "ml-training", "research"}
# A cluster without nodes dials no agent; the port only has to be valid.
NO_AGENTS = 50051


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPUGRAPH_SERVER", "GPUGRAPH_TOKEN", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)


def top_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["top", *args, "-o", "json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def namespaces(document: dict[str, Any]) -> set[str]:
    return {p["namespace"] for p in document["pods"]}


def failing_top(*args: str, env: dict[str, str] | None = None) -> str:
    """Run ``gpugraph top`` expecting failure; its one line of stderr."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUGRAPH_")}
    result = subprocess.run(
        [*gpugraph_command(), "top", *args],
        cwd=ROOT,
        env={**environment, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpugraph top: error: "), result.stderr
    return lines[0]


def api_server_url(kubeconfig: Path) -> str:
    url: str = json.loads(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return url


def test_a_kubeconfig_alone_reaches_the_server_through_the_service_proxy(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    direct = top_json(capsys, "pods", "--server", demo.url)
    proxied = top_json(capsys, "pods", "--kubeconfig", str(kubeconfig_of(demo)))

    def shape(document: dict[str, Any]) -> set[tuple[Any, ...]]:
        return {
            (p["namespace"], p["name"], p["node"], p["gpusRequested"]) for p in document["pods"]
        }

    assert shape(proxied) == shape(direct) and namespaces(direct) == EVERY_NAMESPACE
    down = [d["node"] for d in proxied["downNodes"]]
    assert down == [d["node"] for d in direct["downNodes"]] == ["gpu-node-3"]


def test_kubeconfig_from_the_environment_like_kubectl(
    demo: RunningDemo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_of(demo)))
    assert namespaces(top_json(capsys, "pods")) == EVERY_NAMESPACE


def test_tokens_go_as_bearer_and_a_namespace_token_sees_its_namespace(
    auth_demo: AuthDemo,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    everything = top_json(capsys, "pods", "--server", auth_demo.url, "--token", auth_demo.admin)
    assert namespaces(everything) == EVERY_NAMESPACE
    monkeypatch.setenv("GPUGRAPH_TOKEN", auth_demo.research)
    assert namespaces(top_json(capsys, "pods", "--server", auth_demo.url)) == {"research"}
    monkeypatch.delenv("GPUGRAPH_TOKEN")
    # The kubeconfig user's own token, through the API server's proxy.
    kubeconfig = write_kubeconfig(
        str(tmp_path / "research"), api_server_url(auth_demo.kubeconfig), auth_demo.research
    )
    assert namespaces(top_json(capsys, "pods", "--kubeconfig", kubeconfig)) == {"research"}
    assert main(["top", "--kubeconfig", kubeconfig]) == 0
    gpus = capsys.readouterr().out
    assert "research/notebook-alice" in gpus
    assert "inference/" not in gpus and "ml-training/" not in gpus and "(no pod)" not in gpus


def test_a_tenant_sees_its_own_idle_allocation_flagged_as_the_admin_does(
    auth_demo: AuthDemo, capsys: pytest.CaptureFixture[str]
) -> None:
    # notebook-bob holds a GPU it runs nothing on: research is told its pod is IDLE as the
    # admin is (and sees the GPU, its pod's own).
    def flags(token: str, view: str, key: str, name: str) -> list[str]:
        document = top_json(capsys, view, "-n", "research", "--server", auth_demo.url,
                            "--token", token)  # fmt: skip
        (row,) = [r for r in document[view] if r[key] == name]
        return list(row["flags"])

    for token in (auth_demo.admin, auth_demo.research):
        assert "IDLE" in flags(token, "pods", "name", "notebook-bob")
        assert "IDLE" in flags(token, "namespaces", "namespace", "research")


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_a_missing_or_bad_token_is_401(auth_demo: AuthDemo, token: str | None) -> None:
    env = {"GPUGRAPH_TOKEN": token} if token else {}
    line = failing_top("--server", auth_demo.url, env=env)
    assert "401 unauthorized" in line and "--token" in line


def test_a_kubeconfig_without_a_token_is_401_at_the_server(auth_demo: AuthDemo) -> None:
    # The demo's kubeconfig has no user token: the API server lets it through,
    # gpugraph refuses the WebSocket's connection_init.
    line = failing_top("--kubeconfig", str(auth_demo.kubeconfig))
    assert "401 unauthorized" in line and "4403" in line


@pytest.fixture
def api_server() -> Iterator[StubApiServer]:
    with StubApiServer() as stub:
        yield stub


def test_a_kubeconfig_user_the_api_server_forbids_is_403(
    api_server: StubApiServer, demo: RunningDemo, tmp_path: Path
) -> None:
    host, port = demo.url.removeprefix("http://").split(":")
    api_server.services.add(
        DEFAULT_NAMESPACE,
        DEFAULT_SERVICE,
        ports={SERVICE_PORT: 80},
        backend=(host, int(port)),
        labels=SERVER_LABELS,
    )
    token = api_server.reviews.add_user(
        StubUser("viewer", "uid-viewer", ("viewers",), (Rule(READ, frozenset({"pods"})),))
    )
    kubeconfig = write_kubeconfig(str(tmp_path / "viewer"), api_server.url, token)
    line = failing_top("--kubeconfig", kubeconfig)
    assert "403 forbidden" in line and 'User "viewer" cannot get resource "services/proxy"' in line


def test_a_service_without_endpoints_is_not_ready(
    api_server: StubApiServer, tmp_path: Path
) -> None:
    api_server.services.add(
        DEFAULT_NAMESPACE, "gpugraph", ports={SERVICE_PORT: 80}, backend=None, labels=SERVER_LABELS
    )
    kubeconfig = write_kubeconfig(str(tmp_path / "anyone"), api_server.url)
    line = failing_top("nodes", "--kubeconfig", kubeconfig)
    assert "server not ready" in line and "no endpoints available" in line


def test_no_gpugraph_service_says_what_to_pass(api_server: StubApiServer, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(str(tmp_path / "anyone"), api_server.url)
    line = failing_top("--kubeconfig", kubeconfig)
    assert "no gpugraph Service" in line and "--server" in line


async def test_a_server_still_filling_its_cache_is_not_ready(tmp_path: Path) -> None:
    cluster = GraphTestCluster(tmp_path)
    cluster.port = NO_AGENTS
    await cluster.start()
    try:
        with cluster.stub.lists_paused():
            async with serving(cluster.settings(auth_mode="none"), wait_ready=False) as server:
                line = await in_thread("--server", server.url)
    finally:
        await cluster.stop()
    assert "server not ready" in line


async def test_a_server_that_cannot_check_tokens_is_503(tmp_path: Path) -> None:
    cluster = GraphTestCluster(tmp_path)
    cluster.port = NO_AGENTS
    await cluster.start()
    try:
        async with serving(cluster.settings(auth_mode="kubernetes")) as server:
            cluster.stub.reviews.unavailable = True
            line = await in_thread("--server", server.url, "--token", "any")
    finally:
        await cluster.stop()
    assert "server not ready" in line and "503" in line and "cannot check credentials" in line


async def in_thread(*args: str) -> str:
    """``failing_top`` in a thread, so the server in this event loop keeps answering."""
    return await asyncio.to_thread(failing_top, *args)


def test_a_kubeconfig_token_the_api_server_rejects_is_401_about_the_kubeconfig(
    api_server: StubApiServer, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(str(tmp_path / "stale"), api_server.url, "revoked-token")
    line = failing_top("--kubeconfig", kubeconfig)
    assert "401 unauthorized" in line and "check the kubeconfig's user" in line


class Answer(BaseHTTPRequestHandler):
    """Answers every POST with the class's ``body``, as JSON."""

    body = b"{}"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


class Serving(Protocol):
    """A server with a blocking loop and a way to end it (socketserver, websockets)."""

    def serve_forever(self) -> None: ...

    def shutdown(self) -> None: ...


@contextlib.contextmanager
def running(server: Serving) -> Iterator[None]:
    """``server``'s loop in a thread while inside."""
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()


@contextlib.contextmanager
def answering(body: bytes) -> Iterator[str]:
    """An HTTP server that answers every POST with ``body``; its URL."""
    handler = type("Fixed", (Answer,), {"body": body})
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server, running(server):
        yield f"http://127.0.0.1:{server.server_address[1]}"


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b'{"data": {"gpus": "x", "nodes": 3}}',
        b'{"data": {"gpus": [{"index": 0}], "nodes": []}}',
        b'{"errors": "boom"}',
    ],
    ids=["a list", "fields of other types", "a GPU without its node", "errors not a list"],
)
def test_json_of_another_shape_is_one_line(body: bytes) -> None:
    with answering(body) as url:
        line = failing_top("--server", url)
    assert "not the shape gpugraph top expects" in line


@pytest.mark.parametrize("body", [b"[1, 2]", b"null", b'"text"', b'{"errors": ["boom"]}'])
def test_json_of_another_shape_is_one_line_in_the_since_views_too(body: bytes) -> None:
    with answering(body) as url:
        line = failing_top("--server", url, "--since", "1h")
    assert "gpuUsage answer is not the expected shape" in line


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://127.0.0.1:abc", "Port could not be cast"),
        ("http://[::1", "Invalid IPv6 URL"),
        ("http://", "names no host"),
        ("http://127.0.0.1:1/?x=1", "takes no query"),
    ],
)
def test_a_server_url_that_cannot_be_asked_is_one_line(server: str, says: str) -> None:
    flag = failing_top("--server", server)
    assert says in flag and f"--server {server!r}" in flag
    # Named as it was given: no --server was passed.
    variable = failing_top(env={"GPUGRAPH_SERVER": server})
    assert says in variable and f"$GPUGRAPH_SERVER {server!r}" in variable


@pytest.mark.parametrize("token", ["two\nlines", "a b", "\t"])
def test_a_token_no_header_can_carry_is_one_line_not_a_connection_failure(token: str) -> None:
    line = failing_top("--server", "http://127.0.0.1:1", "--token", token)
    assert line.endswith("the token holds spaces or control characters: no header can carry it")


def test_a_pasted_tokens_line_break_is_dropped() -> None:
    endpoint = resolve(
        server="http://127.0.0.1:1",
        token=None,
        kubeconfig=None,
        namespace="gpugraph",
        service=None,
        environ={"GPUGRAPH_TOKEN": "t0ken\n"},
    )
    assert endpoint.token == "t0ken" and endpoint.headers == {"Authorization": "Bearer t0ken"}


def test_a_tls_failure_says_what_tls_said() -> None:
    # https:// to a plain HTTP server: the handshake fails. Its errno (1) is no reason.
    with answering(b"{}") as url:
        line = failing_top("--server", url.replace("http://", "https://"))
    assert "SSL" in line and "Operation not permitted" not in line, line


def test_a_server_error_of_several_lines_and_escapes_is_one_printable_line() -> None:
    with answering(b'{"errors": [{"message": "first\\nsecond \\u001b[2J"}]}') as url:
        line = failing_top("--server", url)
    assert line.endswith("server error: first second ?[2J")


def test_an_html_error_page_is_said_in_its_words_not_its_markup() -> None:
    # --server pointed at something that is not gpugraph: Python's own HTTP server, whose
    # 501 page for a POST is HTML, as an ingress's or a proxy's error pages are.
    class NotGpugraph(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotGpugraph)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        line = failing_top("--server", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()
    assert "answered HTTP 501: Error response Error code: 501 Message: Unsupported method " in line
    assert "<" not in line and "&#x27;" not in line


KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
clusters: [{{name: c, cluster: {{server: "{server}"{cluster}}}}}]
users: [{{name: u, user: {user}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
"""


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("clusters: [", "--kubeconfig"),
        ("just a string", "not a kubeconfig (a YAML mapping"),
        ("- a\n- b\n", "not a kubeconfig (a YAML mapping"),
        (
            KUBECONFIG.format(server="http://127.0.0.1:1", cluster="", user="{token: t}").replace(
                "current-context: c\n", ""
            ),
            "current-context",
        ),
        (
            KUBECONFIG.format(
                server="https://127.0.0.1:1",
                cluster=", certificate-authority-data: aGVsbG8K",
                user="{token: t}",
            ),
            "the TLS files for https://127.0.0.1:1",
        ),
        (
            KUBECONFIG.format(
                server="http://127.0.0.1:1",
                cluster="",
                user="{exec: {apiVersion: client.authentication.k8s.io/v1, command: /no/plugin}}",
            ),
            "the kubeconfig's user: [Errno 2] No such file or directory: '/no/plugin'",
        ),
    ],
    ids=[
        "not YAML",
        "a string",
        "a list",
        "no current-context",
        "a CA that is no PEM",
        "a missing exec plugin",
    ],
)
def test_a_kubeconfig_that_cannot_work_is_one_line(text: str, says: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(text)
    assert says in failing_top("--kubeconfig", str(kubeconfig))


@contextlib.contextmanager
def websocket(handler: Callable[[ServerConnection], None]) -> Iterator[str]:
    """A WebSocket server running ``handler`` for each connection; its http:// URL."""
    with serve(handler, "127.0.0.1", 0) as server, running(server):
        yield f"http://127.0.0.1:{server.socket.getsockname()[1]}/graphql"


def garbled(socket: ServerConnection) -> None:
    socket.recv()
    socket.send("this is not JSON")


def closed_midway(socket: ServerConnection) -> None:
    socket.recv()
    socket.send(json.dumps({"type": "connection_ack"}))
    socket.recv()
    socket.close(1001, "going away")


def restarting(socket: ServerConnection) -> None:
    # What uvicorn sends every open socket when the server shuts down.
    socket.recv()
    socket.send(json.dumps({"type": "connection_ack"}))
    socket.close(1012)


@pytest.mark.parametrize(
    ("handler", "says"),
    [
        (garbled, "does not speak graphql-transport-ws"),
        (closed_midway, "closed the connection (1001 going away)"),
        (restarting, "/graphql closed the connection (1012)"),
    ],
)
def test_a_websocket_that_breaks_the_protocol_is_a_top_error(
    handler: Callable[[ServerConnection], None], says: str
) -> None:
    with websocket(handler) as url:
        transport = HttpTransport(Endpoint(url, proxied=True))
        with pytest.raises(TopError, match=re.escape(says)):
            transport.execute(SNAPSHOT, {})


def certificate_kubeconfig(path: Path, server: str) -> str:
    """A kubeconfig whose user signs in with a client certificate, as kind's and kubeadm's do."""
    pem = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    user = {"client-certificate-data": pem.decode(), "client-key-data": pem.decode()}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kind", "cluster": {"server": server}}],
        "users": [{"name": "kind-admin", "user": user}],
        "contexts": [{"name": "kind", "context": {"cluster": "kind", "user": "kind-admin"}}],
        "current-context": "kind",
    }
    path.write_text(json.dumps(config))
    return str(path)


def test_a_client_certificate_kubeconfig_says_why_it_needs_a_token(
    auth_demo: AuthDemo, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The kubeconfig as kind writes it: an https API server and a certificate, no token.
    # (--service skips the lookup, so nothing dials this address.)
    kubeconfig = certificate_kubeconfig(tmp_path / "kind", "https://127.0.0.1:6443")
    endpoint = resolve(
        server=None, token=None, kubeconfig=kubeconfig, namespace="gpugraph", service="gpugraph"
    )
    assert endpoint.client_cert is not None and endpoint.token is None
    # Through the API server's proxy the certificate goes no further than the API
    # server, so gpugraph refuses the socket; the line says why, and what to pass.
    proxied = f"{api_server_url(auth_demo.kubeconfig)}{proxy_path('gpugraph', 'gpugraph', 'http')}"
    with pytest.raises(TopError) as refused:
        HttpTransport(replace(endpoint, url=proxied, client_cert=None)).execute(SNAPSHOT, {})
    line = str(refused.value)
    assert line.startswith("401 unauthorized by ws://") and "(4403 Forbidden)" in line
    assert "signs in with a client certificate" in line
    assert "does not pass on through its service proxy" in line
    assert 'pass --token "$(kubectl create token NAME -n NAMESPACE)"' in line
    # A token given beside the certificate travels in connection_init, and works.
    with_token = resolve(
        server=None,
        token=auth_demo.research,
        kubeconfig=kubeconfig,
        namespace="gpugraph",
        service="gpugraph",
    )
    transport = HttpTransport(replace(with_token, url=proxied, client_cert=None))
    answer = transport.execute("{ pods { namespace } }", {})
    assert {p["namespace"] for p in answer["data"]["pods"]} == {"research"}


def test_the_auth_demos_top_line_works_as_printed(auth_demo: AuthDemo) -> None:
    found = re.search(r"^  top +gpugraph top (.+)$", auth_demo.running.text(), re.M)
    assert found, auth_demo.running.text()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPUGRAPH_")}
    result = subprocess.run(
        [*gpugraph_command(), "top", "pods", *shlex.split(found[1]), "-o", "json"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    # The admin's token: every namespace.
    assert namespaces(json.loads(result.stdout)) == EVERY_NAMESPACE

"""How ``gpugraph top`` reaches the server: --server, a kubeconfig alone, tokens, and its errors.

Successes run in-process; failures run the real command, to see its whole
output: one line on stderr, exit code 1, no traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.cli import main
from api.demo.cluster import StubApiServer, write_kubeconfig
from api.demo.cluster.apiserver.reviews import READ, Rule, StubUser
from api.top.connection import DEFAULT_NAMESPACE, DEFAULT_SERVICE, SERVER_LABELS, SERVICE_PORT
from tests.cli.conftest import AuthDemo, kubeconfig_of
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

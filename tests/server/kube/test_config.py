"""Where the Kubernetes API is: --kubeconfig, else in-cluster, else the default kubeconfig."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient, CoreV1Api

from api.demo.cluster import make_node, write_kubeconfig
from api.kube.config import KubeConfigError, default_kubeconfig_path, load_kube_config
from tests.support.kube import stub_api


@pytest.fixture
def service_account(tmp_path: Path) -> dict[str, str]:
    token = tmp_path / "token"
    token.write_text("in-cluster-token")
    cert = tmp_path / "ca.crt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return {"token_file": str(token), "cert_file": str(cert)}


IN_CLUSTER_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_explicit_kubeconfig_wins_over_in_cluster(
    tmp_path: Path, service_account: dict[str, str]
) -> None:
    path = write_kubeconfig(str(tmp_path / "config"), "http://127.0.0.1:6443", token="flag-token")
    configuration = load_kube_config(path, environ=IN_CLUSTER_ENV, **service_account)
    assert configuration.host == "http://127.0.0.1:6443"
    assert configuration.api_key["BearerToken"] == "Bearer flag-token"


def test_in_cluster_when_no_flag(tmp_path: Path, service_account: dict[str, str]) -> None:
    default = write_kubeconfig(str(tmp_path / "default"), "http://127.0.0.1:1")
    env = {**IN_CLUSTER_ENV, "KUBECONFIG": default}
    configuration = load_kube_config(None, environ=env, **service_account)
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.api_key["BearerToken"].lower() == "bearer in-cluster-token"


def test_default_kubeconfig_when_not_in_cluster(
    tmp_path: Path, service_account: dict[str, str]
) -> None:
    default = write_kubeconfig(str(tmp_path / "default"), "http://127.0.0.1:7443")
    configuration = load_kube_config(None, environ={"KUBECONFIG": default}, **service_account)
    assert configuration.host == "http://127.0.0.1:7443"


def test_default_path_is_home_kube_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_kubeconfig_path({}) == str(tmp_path / ".kube" / "config")
    assert default_kubeconfig_path({"KUBECONFIG": "/a/b"}) == "/a/b"


def test_home_kube_config_is_found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(str(tmp_path / ".kube" / "config"), "http://127.0.0.1:8443")
    configuration = load_kube_config(None, environ={}, token_file=str(tmp_path / "none"))
    assert configuration.host == "http://127.0.0.1:8443"


def test_clear_error_when_nothing_works(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(KubeConfigError) as error:
        load_kube_config(None, environ={}, token_file=str(tmp_path / "none"))
    message = str(error.value)
    assert "--kubeconfig" in message and "not running in a cluster" in message
    assert str(tmp_path / ".kube" / "config") in message


def test_missing_or_broken_explicit_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="no such file"):
        load_kube_config(str(tmp_path / "missing"))
    broken = tmp_path / "broken"
    broken.write_text("clusters: [")
    with pytest.raises(KubeConfigError, match="broken"):
        load_kube_config(str(broken))


def test_in_cluster_without_token_falls_through_to_default(tmp_path: Path) -> None:
    default = write_kubeconfig(str(tmp_path / "default"), "http://127.0.0.1:9443")
    env = {**IN_CLUSTER_ENV, "KUBECONFIG": default}
    configuration = load_kube_config(None, environ=env, token_file=str(tmp_path / "missing"))
    assert configuration.host == "http://127.0.0.1:9443"


def test_a_written_kubeconfig_reaches_the_stub_server(tmp_path: Path) -> None:
    with stub_api() as server:
        server.add_node(make_node("node-0"))
        path = write_kubeconfig(str(tmp_path / "config"), server.url)
        with ApiClient(load_kube_config(path)) as client:
            nodes: Any = CoreV1Api(client).list_node()
        assert [n.metadata.name for n in nodes.items] == ["node-0"]

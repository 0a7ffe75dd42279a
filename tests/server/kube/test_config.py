"""Where the Kubernetes API is: --kubeconfig, else $KUBECONFIG, else in-cluster, else the
default kubeconfig."""

from __future__ import annotations

import os
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


def test_in_cluster_when_no_flag(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, service_account: dict[str, str]
) -> None:
    # Before ~/.kube/config: a pod's service account is what a server in a pod means.
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(str(tmp_path / ".kube" / "config"), "http://127.0.0.1:1")
    configuration = load_kube_config(None, environ=IN_CLUSTER_ENV, **service_account)
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.api_key["BearerToken"].lower() == "bearer in-cluster-token"


def test_kubeconfig_from_the_environment_wins_over_in_cluster_as_for_kubectl(
    tmp_path: Path, service_account: dict[str, str]
) -> None:
    named = write_kubeconfig(str(tmp_path / "named"), "http://127.0.0.1:6444", token="env")
    env = {**IN_CLUSTER_ENV, "KUBECONFIG": named}
    configuration = load_kube_config(None, environ=env, **service_account)
    assert configuration.host == "http://127.0.0.1:6444"
    # A file it lists that does not exist is passed over, as kubectl does.
    listed = os.pathsep.join([str(tmp_path / "missing"), named])
    configuration = load_kube_config(None, environ={**IN_CLUSTER_ENV, "KUBECONFIG": listed})
    assert configuration.host == "http://127.0.0.1:6444"
    missing = {**IN_CLUSTER_ENV, "KUBECONFIG": str(tmp_path / "missing")}
    configuration = load_kube_config(None, environ=missing, **service_account)
    assert configuration.host == "https://10.96.0.1:443"


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


def test_in_cluster_without_token_falls_through_to_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".kube").mkdir()
    write_kubeconfig(str(tmp_path / ".kube" / "config"), "http://127.0.0.1:9443")
    missing = str(tmp_path / "missing")
    configuration = load_kube_config(None, environ=IN_CLUSTER_ENV, token_file=missing)
    assert configuration.host == "http://127.0.0.1:9443"


@pytest.mark.parametrize("server", ["not a url", "ftp://x", "https://"])
def test_a_server_that_is_no_http_url_is_an_error_not_retried_for_ever(
    tmp_path: Path, server: str
) -> None:
    path = write_kubeconfig(str(tmp_path / "config"), server)
    with pytest.raises(KubeConfigError) as error:
        load_kube_config(path)
    message = str(error.value)
    assert message.startswith(f"--kubeconfig {path}: the cluster's server ")
    assert message.endswith(" is not an http(s) URL")


def test_a_user_whose_exec_plugin_fails_is_an_error_not_no_credentials(tmp_path: Path) -> None:
    # The client logs the failure and goes on without a token; kubectl stops, and so does
    # gpugraph (serve would otherwise run unauthenticated against the API server).
    path = tmp_path / "config"
    path.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "c",'
        ' "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],'
        ' "users": [{"name": "u", "user": {"exec": {"apiVersion":'
        ' "client.authentication.k8s.io/v1", "command": "/no/plugin"}}}],'
        ' "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}'
    )
    with pytest.raises(KubeConfigError) as error:
        load_kube_config(str(path))
    assert str(error.value).startswith(f"--kubeconfig {path}: the kubeconfig's user: ")
    assert "/no/plugin" in str(error.value)


def test_a_yaml_error_is_one_line(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text("clusters:\n  - name: [\n")
    with pytest.raises(KubeConfigError) as error:
        load_kube_config(str(broken))
    assert "\n" not in str(error.value) and str(error.value).startswith(f"--kubeconfig {broken}: ")


def test_a_written_kubeconfig_reaches_the_stub_server(tmp_path: Path) -> None:
    with stub_api() as server:
        server.add_node(make_node("node-0"))
        path = write_kubeconfig(str(tmp_path / "config"), server.url)
        with ApiClient(load_kube_config(path)) as client:
            nodes: Any = CoreV1Api(client).list_node()
        assert [n.metadata.name for n in nodes.items] == ["node-0"]

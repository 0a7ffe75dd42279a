"""Where the gpugraph server is: --server / GPUGRAPH_SERVER, else through kubeconfig.

Through kubeconfig the CLI goes where ``kubectl`` goes: the API server, whose
service proxy forwards ``/api/v1/namespaces/NS/services/NAME:http/proxy/graphql``
to the chart's Service (named after the release, port ``http``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import TopError

DEFAULT_NAMESPACE = "gpugraph"
DEFAULT_SERVICE = "gpugraph"
SERVICE_PORT = "http"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """The GraphQL URL, the headers every request carries, and TLS settings."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    # A CA bundle path, or whether to verify the server's certificate.
    verify: str | bool = True
    client_cert: tuple[str, str] | None = None


def graphql_url(server: str) -> str:
    """``server``'s GraphQL endpoint: the URL itself if it ends in /graphql."""
    server = server.rstrip("/")
    if not server.startswith(("http://", "https://")):
        raise TopError(f"--server {server!r}: not an http:// or https:// URL")
    return server if server.endswith("/graphql") else f"{server}/graphql"


def proxy_path(namespace: str, service: str) -> str:
    """The API server's service-proxy path to the chart's GraphQL endpoint."""
    return f"/api/v1/namespaces/{namespace}/services/{service}:{SERVICE_PORT}/proxy/graphql"


def _bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def resolve(
    *,
    server: str | None,
    token: str | None,
    kubeconfig: str | None,
    namespace: str,
    service: str,
    environ: Mapping[str, str] | None = None,
) -> Endpoint:
    """The Endpoint from flags, then environment, then kubeconfig."""
    env = os.environ if environ is None else environ
    server = server or env.get("GPUGRAPH_SERVER") or None
    token = token or env.get("GPUGRAPH_TOKEN") or None
    if server:
        return Endpoint(graphql_url(server), _bearer(token))
    return _through_kubeconfig(kubeconfig, token, namespace, service)


def _through_kubeconfig(
    kubeconfig: str | None, token: str | None, namespace: str, service: str
) -> Endpoint:
    # The Kubernetes client is slow to import; only this path needs it.
    from ..kube.config import KubeConfigError, load_kube_config

    try:
        config = load_kube_config(kubeconfig)
    except KubeConfigError as exc:
        raise TopError(f"{exc}; or pass --server URL") from None
    headers: dict[str, str] = {}
    authorization = config.get_api_key_with_prefix("authorization")
    if authorization:
        headers["Authorization"] = authorization
    if token:
        headers.update(_bearer(token))
    verify: str | bool = config.ssl_ca_cert or bool(config.verify_ssl)
    cert = (config.cert_file, config.key_file) if config.cert_file and config.key_file else None
    host = str(config.host).rstrip("/")
    return Endpoint(host + proxy_path(namespace, service), headers, verify, cert)

"""Where the gpugraph server is: --server / GPUGRAPH_SERVER, else through kubeconfig.

Through kubeconfig the CLI goes where ``kubectl`` goes: the API server, with
the kubeconfig's credentials, whose service proxy forwards
``/api/v1/namespaces/NS/services/NAME:http/proxy/graphql`` to the chart's
Service (labelled ``app.kubernetes.io/component=server``, port ``http``).

The API server removes the caller's ``Authorization`` header before it
proxies (it consumed it to authenticate the caller), so on that path the
gpugraph token cannot travel as a header: every operation goes over the
graphql-transport-ws WebSocket, which the proxy passes through, with the
token in ``connection_init``'s payload.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import KUBECONFIG_HINT, MIB, TOKEN_HINT, TopError, status_error

DEFAULT_NAMESPACE = "gpugraph"
DEFAULT_SERVICE = "gpugraph"
SERVICE_PORT = "http"
# The labels the Helm chart puts on the server's Service (and pods).
SERVER_LABELS = {"app.kubernetes.io/name": "gpugraph", "app.kubernetes.io/component": "server"}
# How long one request may take as a whole (connecting, sending, the whole answer),
# and the WebSocket's handshake up to connection_ack: a server that sends a byte at
# a time, or never acknowledges, gets no longer than this (--request-timeout).
DEFAULT_REQUEST_TIMEOUT = 30.0
# The largest answer read (an HTTP body, a WebSocket message), in MiB (--max-answer):
# a 1,000-node cluster's full answer is about 12 MB. Reading stops past it, so a
# hostile or broken server cannot take the CLI's memory (a 1 GiB answer took 4 GB).
DEFAULT_MAX_ANSWER_MIB = 256
# What this module asks of the API server in the gpugraph namespace, as RBAC
# (verb, resource): the chart's <release>-top Role grants exactly these.
API_SERVER_RIGHTS = (("get", "services/proxy"), ("list", "services"))
# A client certificate proves who the caller is to the API server only: the
# proxy forwards no identity, and gpugraph cannot check a certificate itself.
CLIENT_CERTIFICATE_HINT = (
    "the kubeconfig's user signs in with a client certificate, which the API server checks "
    "itself and does not pass on through its service proxy, so gpugraph cannot tell who you "
    'are: pass --token "$(kubectl create token NAME -n NAMESPACE)" for a ServiceAccount '
    "bound to gpugraph's viewer roles (docs/auth.md)"
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """The GraphQL URL, how to reach it, and the token gpugraph checks."""

    url: str
    # Headers of every request: gpugraph's bearer token, or the API server's credential.
    headers: dict[str, str] = field(default_factory=dict)
    # A CA bundle path, or whether to verify the server's certificate.
    verify: str | bool = True
    client_cert: tuple[str, str] | None = None
    # Sent in connection_init, where a proxy cannot strip it.
    token: str | None = None
    # Through the API server's service proxy: queries go over the WebSocket too.
    proxied: bool = False
    # What to do about a 401: how to give gpugraph a token from here.
    token_hint: str = TOKEN_HINT
    # Seconds one request (or a WebSocket's handshake) may take, all of it.
    deadline: float = DEFAULT_REQUEST_TIMEOUT
    # Bytes of the largest answer read.
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_MIB * MIB

    def ssl_context(self) -> ssl.SSLContext:
        """TLS as the kubeconfig (or the system) says: CA bundle, verification, client cert."""
        if not self.url.startswith("https://"):
            # Plain HTTP uses no TLS: skip loading the system's CAs (~20 ms of start-up).
            # Verification stays on, so this context fails closed if ever used.
            return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        cafile = self.verify if isinstance(self.verify, str) else None
        try:
            context = ssl.create_default_context(cafile=cafile)
            if self.client_cert:
                context.load_cert_chain(*self.client_cert)
        except OSError as exc:  # ssl.SSLError included: a CA or key that is no PEM
            raise TopError(f"the TLS files for {self.url}: {exc}") from None
        if self.verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


def graphql_url(server: str, given_as: str = "--server") -> str:
    """``server``'s GraphQL endpoint: the URL itself if it ends in /graphql; errors name the
    flag or variable it was ``given_as``."""
    said = f"{given_as} {server!r}"
    if not server.startswith(("http://", "https://")):
        raise TopError(f"{said}: not an http:// or https:// URL")
    try:
        parts = urllib.parse.urlsplit(server)
        parts.port  # noqa: B018 (urlsplit checks the port only when it is read)
    except ValueError as exc:
        raise TopError(f"{said}: {exc}") from None
    if not parts.hostname:
        raise TopError(f"{said}: names no host")
    if parts.query or parts.fragment:
        raise TopError(f"{said}: a server URL takes no query or fragment")
    path = parts.path.rstrip("/")
    path = path if path.endswith("/graphql") else f"{path}/graphql"
    return urllib.parse.urlunsplit(parts._replace(path=path))


def _checked_token(token: str | None) -> str | None:
    """The token as given, less the line break a pasted one brings; TopError if it cannot
    go in a header (it would read as a connection failure)."""
    if token is None:
        return None
    token = token.strip()
    if not token or not token.isprintable() or " " in token:
        raise TopError("the token holds spaces or control characters: no header can carry it")
    return token


def proxy_path(namespace: str, service: str, port: str) -> str:
    """The API server's service-proxy path to the Service's GraphQL endpoint."""
    return f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/graphql"


def bearer(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header of ``token``, or none."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def resolve(
    *,
    server: str | None,
    token: str | None,
    kubeconfig: str | None,
    namespace: str,
    service: str | None,
    environ: Mapping[str, str] | None = None,
    deadline: float = DEFAULT_REQUEST_TIMEOUT,
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_MIB * MIB,
) -> Endpoint:
    """The Endpoint from flags, then environment, then kubeconfig."""
    env = os.environ if environ is None else environ
    given_as = "--server" if server else "$GPUGRAPH_SERVER"
    server = server or env.get("GPUGRAPH_SERVER") or None
    token = _checked_token(token or env.get("GPUGRAPH_TOKEN") or None)
    if server:
        url = graphql_url(server, given_as)
        return Endpoint(
            url, bearer(token), token=token, deadline=deadline, max_answer_bytes=max_answer_bytes
        )
    return _through_kubeconfig(kubeconfig, token, namespace, service, deadline, max_answer_bytes)


def _through_kubeconfig(
    kubeconfig: str | None,
    token: str | None,
    namespace: str,
    service: str | None,
    deadline: float,
    max_answer_bytes: int,
) -> Endpoint:
    """The Endpoint of the gpugraph Service through the kubeconfig's API server."""
    # The Kubernetes client is slow to import; only this path needs it.
    from ..kube.config import KubeConfigError, load_kube_config, logged_errors

    # The client logs a failed exec plugin or token refresh and goes on without
    # credentials; kubectl stops there, and so does gpugraph top.
    with logged_errors() as failures:
        try:
            config = load_kube_config(kubeconfig)
        except KubeConfigError as exc:
            raise TopError(f"{exc}; or pass --server URL") from None
        # Exec plugins and OIDC refresh the token through this hook, as for kubectl.
        if config.refresh_api_key_hook is not None:
            config.refresh_api_key_hook(config)
    if failures:
        raise TopError(f"the kubeconfig's user: {failures[0]}")
    settings: Mapping[str, Any] = config.auth_settings()
    headers = {
        str(setting["key"]): str(setting["value"])
        for setting in settings.values()
        if setting.get("in") == "header" and setting.get("value")
    }
    authorization = headers.get("authorization")
    # The kubeconfig user's own token, unless another one is given.
    scheme, _, user_token = (authorization or "").partition(" ")
    if token is None and scheme.lower() == "bearer" and user_token:
        token = user_token
    verify: str | bool = config.ssl_ca_cert or bool(config.verify_ssl)
    cert = (config.cert_file, config.key_file) if config.cert_file and config.key_file else None
    host = str(config.host).rstrip("/")
    hint = CLIENT_CERTIFICATE_HINT if token is None and cert else TOKEN_HINT
    api = Endpoint(host, headers, verify, cert, token, True, hint, deadline, max_answer_bytes)
    name, port = (service, SERVICE_PORT) if service else find_service(api, namespace)
    return replace(api, url=host + proxy_path(namespace, name, port))


def find_service(api: Endpoint, namespace: str) -> tuple[str, str]:
    """The chart's Service in ``namespace`` and its port name, found by the chart's labels.

    A caller who may not list Services there gets the chart's default name.
    """
    # httpx loads only on this path, when the request is made.
    from .exchange import request

    selector = ",".join(f"{k}={v}" for k, v in SERVER_LABELS.items())
    url = f"{api.url}/api/v1/namespaces/{namespace}/services"
    status, body = request(
        "GET",
        url,
        deadline=api.deadline,
        max_bytes=api.max_answer_bytes,
        verify=api.ssl_context(),
        headers=api.headers,
        params={"labelSelector": selector},
        unreachable="the Kubernetes API server",
    )
    if status == 403:
        return DEFAULT_SERVICE, SERVICE_PORT
    text = body.decode("utf-8", "replace")
    if status != 200:
        # A 401 here is the API server's: the kubeconfig's credential is at fault.
        raise status_error(status, url, text, hint=KUBECONFIG_HINT)
    try:
        items: list[dict[str, Any]] = json.loads(text)["items"] or []
    except (ValueError, KeyError, TypeError):
        raise TopError(f"{url} did not answer with a ServiceList") from None
    if not items:
        raise TopError(
            f"no gpugraph Service ({selector}) in namespace {namespace} of {api.url}: "
            "pass --gpugraph-namespace, --service or --server"
        )
    if len(items) > 1:
        names = ", ".join(sorted(str(i["metadata"]["name"]) for i in items))
        raise TopError(
            f"several gpugraph Services in namespace {namespace} ({names}): pass --service"
        )
    ports = [p for p in (items[0].get("spec") or {}).get("ports") or () if isinstance(p, dict)]
    named = [str(p.get("name") or p.get("port")) for p in ports]
    port = SERVICE_PORT if SERVICE_PORT in named or not named else named[0]
    return str(items[0]["metadata"]["name"]), port

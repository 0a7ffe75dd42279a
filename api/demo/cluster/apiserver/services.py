"""Services and the API server's service proxy.

- ``GET /api/v1/services``, ``/api/v1/namespaces/{ns}/services[/{name}]``:
  ``ServiceList``/``Service`` objects, with ``labelSelector``;
- ``/api/v1/namespaces/{ns}/services/{name[:port]}/proxy/{path}``: the
  request forwarded to the Service's backend (``service_proxy``), HTTP and
  WebSocket upgrades alike, as kube-apiserver's service proxy does.

A Service here is registered with the loopback address its one backend
listens on, standing in for the endpoints of the pods it selects. Requests
with a bearer token are checked against the review table, as the real API
server authorizes ``list services`` and ``get``/``create`` on
``services/proxy``; requests without one pass, like the stub's lists.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .reviews import StubUser, TokenReviews
from .selectors import Selector
from .service_proxy import Backend, ProxiedSockets, forward_http, forward_upgrade
from .status import not_found, read_only, status
from .transport import Exchange

__all__ = ["ServiceTable", "StubService"]

SERVICES = "services"
PROXY = "proxy"


@dataclass(frozen=True, slots=True)
class StubService:
    """One Service: its ports by name, and where its (single) backend listens."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    ports: Mapping[str, int]  # port name -> Service port
    backend: Backend | None  # None: no ready endpoints
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))

    def body(self) -> dict[str, Any]:
        """The Service as the API server serves it."""
        return {
            "kind": "Service",
            "apiVersion": "v1",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "uid": self.uid,
                "resourceVersion": "1",
                "labels": dict(self.labels),
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": "10.96.0.10",
                "ports": [
                    {"name": name, "protocol": "TCP", "port": port, "targetPort": name}
                    for name, port in self.ports.items()
                ],
                "selector": dict(self.labels),
            },
            "status": {"loadBalancer": {}},
        }

    def has_port(self, port: str) -> bool:
        """Whether ``port`` (a name, a number, or "" for the only one) is one of its ports."""
        if not port:
            return len(self.ports) == 1
        return port in self.ports or port in {str(p) for p in self.ports.values()}


@dataclass(frozen=True, slots=True)
class _Target:
    namespace: str | None
    name: str | None
    port: str
    proxy_path: str | None  # set for .../proxy[/path]


def _parse(path: str) -> _Target | None:
    parts = path.strip("/").split("/")
    if parts[:2] != ["api", "v1"]:
        return None
    rest = parts[2:]
    if rest == [SERVICES]:
        return _Target(None, None, "", None)
    if len(rest) < 3 or rest[0] != "namespaces" or rest[2] != SERVICES:
        return None
    namespace, tail = rest[1], rest[3:]
    if not tail:
        return _Target(namespace, None, "", None)
    # "name", "name:port" or "scheme:name:port", as the API server accepts them.
    pieces = tail[0].split(":")
    name = pieces[1] if len(pieces) == 3 else pieces[0]
    port = pieces[-1] if len(pieces) >= 2 else ""
    if len(tail) == 1:
        return _Target(namespace, name, port, None)
    if tail[1] != PROXY:
        return None
    return _Target(namespace, name, port, "/" + "/".join(tail[2:]))


class ServiceTable:
    """The stub's Services, answering their paths; shares the review table's users."""

    def __init__(self, reviews: TokenReviews) -> None:
        self.reviews = reviews
        self._lock = threading.Lock()
        self._services: dict[tuple[str, str], StubService] = {}
        self.sockets = ProxiedSockets()

    def add(
        self,
        namespace: str,
        name: str,
        *,
        ports: Mapping[str, int],
        backend: Backend | None,
        labels: Mapping[str, str] | None = None,
    ) -> StubService:
        """Create or replace a Service whose endpoint is ``backend`` (host, port)."""
        service = StubService(namespace, name, dict(labels or {}), dict(ports), backend)
        with self._lock:
            self._services[(namespace, name)] = service
        return service

    def remove(self, namespace: str, name: str) -> None:
        """Delete a Service (its open proxied sockets stay until they end)."""
        with self._lock:
            self._services.pop((namespace, name), None)

    def handles(self, path: str) -> bool:
        """Whether ``path`` is a Service path this table answers."""
        return _parse(path) is not None

    def close(self) -> None:
        """End every proxied WebSocket (the stub is stopping)."""
        self.sockets.close_all()

    def get(self, exchange: Exchange, path: str, params: dict[str, str]) -> None:
        """Answer a GET: a list, one Service, or a proxied request (a WebSocket upgrade too)."""
        target = _parse(path)
        assert target is not None
        if target.proxy_path is not None:
            return self._proxy(exchange, target, "get", b"")
        if target.name is None:
            if not self._allowed(exchange, target.namespace, "list", SERVICES, ""):
                return
            return self._list(exchange, target.namespace, params)
        if not self._allowed(exchange, target.namespace, "get", SERVICES, target.name):
            return
        found = self._find(target)
        if found is None:
            return exchange.send_json(404, not_found(SERVICES, target.name))
        exchange.send_json(200, found.body())

    def post(self, exchange: Exchange, path: str, body: bytes) -> None:
        """Answer a POST: only proxied requests; Services themselves are read-only."""
        target = _parse(path)
        assert target is not None
        if target.proxy_path is None:
            return exchange.send_json(405, read_only())
        self._proxy(exchange, target, "create", body)

    def _find(self, target: _Target) -> StubService | None:
        with self._lock:
            return self._services.get((target.namespace or "", target.name or ""))

    def _list(self, exchange: Exchange, namespace: str | None, params: dict[str, str]) -> None:
        labels = Selector(params.get("labelSelector"), None).labels
        with self._lock:
            services = sorted(self._services.values(), key=lambda s: (s.namespace, s.name))
        items = [
            s.body()
            for s in services
            if namespace in (None, s.namespace) and labels.matches(s.labels)
        ]
        exchange.send_json(
            200,
            {
                "kind": "ServiceList",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": "1"},
                "items": items,
            },
        )

    def _proxy(self, exchange: Exchange, target: _Target, verb: str, body: bytes) -> None:
        name = target.name or ""
        label = f"{name}:{target.port}" if target.port else name
        if not self._allowed(exchange, target.namespace, verb, "services/proxy", label):
            return
        service = self._find(target)
        if service is None or not service.has_port(target.port):
            return exchange.send_json(404, not_found(SERVICES, label))
        if service.backend is None:
            message = f'no endpoints available for service "{label}"'
            return exchange.send_json(503, status(503, "ServiceUnavailable", message))
        assert target.proxy_path is not None
        query = exchange.path.partition("?")[2]
        path = target.proxy_path + (f"?{query}" if query else "")
        if "upgrade" in exchange.headers.get("Connection", "").lower():
            forward_upgrade(exchange, service.backend, path, self.sockets)
        else:
            forward_http(exchange, service.backend, path, body)

    def _allowed(
        self, exchange: Exchange, namespace: str | None, verb: str, resource: str, name: str
    ) -> bool:
        """Authorize a tokened request as RBAC would; answer 401/403 and return False if not."""
        header = exchange.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return True
        user = self.reviews.user_for(token.strip())
        if user is None:
            exchange.send_json(401, status(401, "Unauthorized", "Unauthorized"))
            return False
        if _may(user, verb, resource, namespace or ""):
            return True
        base, _, sub = resource.partition("/")
        what = f'{base} "{name}"' if name else base
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        message = (
            f'{what} is forbidden: User "{user.username}" cannot {verb} resource '
            f'"{resource}" in API group ""{where}'
        )
        details = {"name": name, "kind": base} if sub or name else {"kind": base}
        exchange.send_json(403, status(403, "Forbidden", message, details))
        return False


def _may(user: StubUser, verb: str, resource: str, namespace: str) -> bool:
    base, _, sub = resource.partition("/")
    attributes = {"verb": verb, "resource": base, "subresource": sub, "namespace": namespace}
    return any(rule.allows(attributes, False) for rule in user.rules)

"""One decision of what a connection's caller may see, for GraphQL and ``/gpu-pods`` alike."""

from __future__ import annotations

from kubernetes.client import ApiClient
from starlette.requests import Request

from api.auth import AccessReviewer, Caller, KubernetesAuth, TokenReviewer, UserInfo, request_scope
from api.auth.asgi import CALLER_KEY
from graph_schema.scope import EVERYTHING, Scope
from tests.support.graph import MemoryCluster

ML = Scope(pod_namespaces=frozenset({"ml"}))


def auth() -> KubernetesAuth:
    # Never asked: request_scope reads what the middleware already decided.
    client = ApiClient()
    return KubernetesAuth(TokenReviewer(client), AccessReviewer(client), MemoryCluster())


def request(caller: Caller | None = None) -> Request:
    scope: dict[str, object] = {"type": "http", "method": "GET", "path": "/", "headers": []}
    if caller is not None:
        scope[CALLER_KEY] = caller
    return Request(scope)


def test_without_auth_every_request_sees_everything() -> None:
    assert request_scope(request(), None) == EVERYTHING


def test_with_auth_a_request_sees_what_its_caller_may() -> None:
    checker = auth()
    caller = Caller(UserInfo("alice"), ML, checker, "token")
    assert request_scope(request(caller), checker) == ML


def test_with_auth_a_connection_without_a_caller_sees_nothing() -> None:
    # A WebSocket before its connection_init, or the GraphiQL page.
    assert request_scope(request(), auth()) == Scope()

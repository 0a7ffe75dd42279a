"""What the caller of one HTTP request or WebSocket may see: the server's one decision."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from graph_schema.scope import EVERYTHING, Scope

from .asgi import caller_of
from .callers import KubernetesAuth

__all__ = ["request_scope"]


def request_scope(connection: HTTPConnection, auth: KubernetesAuth | None) -> Scope:
    """The connection's scope: everything without auth, else its caller's, else nothing.

    With auth on, a connection without a caller is one the middleware let
    through unauthenticated (a WebSocket before its connection_init, the
    GraphiQL page): it sees nothing until it authenticates.
    """
    if auth is None:
        return EVERYTHING
    caller = caller_of(connection)
    return Scope() if caller is None else caller.scope

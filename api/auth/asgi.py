"""The ASGI side of auth: bearer tokens in, a Caller on the request (or 401/403/503) out.

Covers HTTP (``/graphql``, ``/gpu-pods``, ``/metrics``) and the WebSocket
upgrade. A WebSocket without an ``Authorization`` header is let through to
its ``connection_init``, whose payload may carry the token instead; the
GraphQL view checks it there (and refuses the socket without one). A path
that no route of the app answers is the router's 404 whoever asks: a 401
there would promise something behind a token, and answering every caller
alike tells none of them anything.
"""

from __future__ import annotations

import logging

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from ..http import cluster_map
from ..http.graphiql import STATIC_URL
from ..http.header_limits import PROBE_PATHS
from ..http.responses import json_response
from .access import GET_METRICS
from .callers import Caller, KubernetesAuth, RejectedTokenError
from .tokens import ReviewUnavailableError

__all__ = ["OPEN_PATHS", "AuthMiddleware", "authorization_param", "bearer_token", "caller_of"]

log = logging.getLogger(__name__)

# Health checks answer kubelet's probes, which carry no token; the pages and
# static assets of GraphiQL and the cluster map hold no data.
OPEN_PATHS = (*PROBE_PATHS, *cluster_map.OPEN_PAGES)
OPEN_PREFIXES = (STATIC_URL.rstrip("/") + "/", cluster_map.STATIC_URL.rstrip("/") + "/")
CALLER_KEY = "gpugraph.caller"


def bearer_token(value: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` value ("" if there is none)."""
    if not value:
        return ""
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def authorization_param(params: object) -> str | None:
    """The ``Authorization`` value of a connection_init payload, its key in any case.

    Header names are case-insensitive, and clients send either spelling. Two
    spellings with different values are ambiguous: no token is taken from them.
    """
    if not isinstance(params, dict):
        return None
    values = {
        value
        for key, value in params.items()
        if isinstance(key, str) and key.lower() == "authorization" and isinstance(value, str)
    }
    return values.pop() if len(values) == 1 else None


def caller_of(connection: HTTPConnection) -> Caller | None:
    """The Caller the middleware put on this request or socket, if any."""
    caller = connection.scope.get(CALLER_KEY)
    return caller if isinstance(caller, Caller) else None


def unauthorized(message: str) -> Response:
    """401 with the challenge RFC 6750 asks for."""
    response = json_response(401, {"error": message})
    response.headers["WWW-Authenticate"] = 'Bearer realm="gpugraph"'
    return response


def unavailable() -> Response:
    """503: the API server could not be asked, so the request is refused, not passed."""
    response = json_response(
        503, {"error": "the Kubernetes API server cannot check credentials right now"}
    )
    response.headers["Retry-After"] = "5"
    return response


def _is_ide_page(scope: AsgiScope, headers: Headers) -> bool:
    # GraphiQL's page itself (no query in the URL) holds no data; it is where a
    # person pastes a token, so it is served without one.
    return (
        scope["type"] == "http"
        and scope["method"] == "GET"
        and scope["path"] == "/graphql"
        and not scope.get("query_string")
        and "text/html" in headers.get("accept", "")
    )


def _routed(scope: AsgiScope) -> bool:
    """Whether a route of the app answers this path (by any method)."""
    routes = getattr(scope.get("app"), "routes", None)
    if routes is None:
        return True  # no app to ask: checked like any path, never let through unchecked
    return any(route.matches(scope)[0] is not Match.NONE for route in routes)


class AuthMiddleware:
    """Authenticates every request but the open ones, and authorizes ``/metrics``."""

    def __init__(self, app: ASGIApp, auth: KubernetesAuth) -> None:
        self.app = app
        self.auth = auth

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        headers = Headers(scope=scope)
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES) or _is_ide_page(scope, headers):
            await self.app(scope, receive, send)
            return
        if not _routed(scope):
            await self.app(scope, receive, send)  # the router's 404
            return
        given = set(headers.getlist("authorization"))
        if len(given) > 1:
            # Which one a proxy or the client meant is not ours to guess: neither is taken.
            response: Response | None = unauthorized("two different Authorization headers")
        else:
            token = bearer_token(given.pop() if given else None)
            if scope["type"] == "websocket" and not token:
                await self.app(scope, receive, send)  # the token may come in connection_init
                return
            response = await self._check(path, token, scope)
        if response is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await _refuse_websocket(response, scope, receive, send)
        else:
            await response(scope, receive, send)

    async def _check(self, path: str, token: str, scope: AsgiScope) -> Response | None:
        try:
            caller = await self.auth.authenticate(token)
            if path == "/metrics" and not await self.auth.may(caller.user, GET_METRICS):
                return json_response(403, {"error": "get on /metrics is not allowed"})
        except RejectedTokenError as exc:
            return unauthorized(str(exc))
        except ReviewUnavailableError:
            return unavailable()
        scope[CALLER_KEY] = caller
        return None


async def _refuse_websocket(
    response: Response, scope: AsgiScope, receive: Receive, send: Send
) -> None:
    """Answer a refused upgrade with the HTTP response where the server allows it."""
    if "websocket.http.response" in scope.get("extensions", {}):
        await response(scope, receive, send)
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.close", "code": 4401 if response.status_code == 401 else 1013})

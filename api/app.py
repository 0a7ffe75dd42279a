"""The HTTP app: GraphQL (HTTP and WebSocket), ``/gpu-pods``, health and metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import orjson
from cross_web import AsyncHTTPRequestAdapter
from graphql import GraphQLError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Lifespan
from starlette.websockets import WebSocket
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLRequestData
from strawberry.types import ExecutionResult

from graph_schema import GraphSchema, SchemaLimits, SharedState, build_schema, make_context
from graph_schema.context import Cluster, SnapshotSource

from .gpu_pods import gpu_pods_endpoint
from .graphiql import OfflineGraphiQL, graphiql_routes
from .http_limits import BodySizeLimit
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .settings import Settings

__all__ = ["GraphQLApp", "create_app"]


class GraphQLApp(OfflineGraphiQL, GraphQL[Any, None]):
    """strawberry's ASGI view with a fresh loader set per request, a time limit and metrics."""

    def __init__(
        self,
        schema: GraphSchema,
        *,
        cluster: Cluster,
        snapshots: SnapshotSource,
        metrics: Metrics,
        request_timeout: float,
        graphiql: bool,
        allowed_origins: Sequence[str] = (),
    ) -> None:
        super().__init__(
            schema,
            graphql_ide="graphiql" if graphiql else None,
            allowed_origins=allowed_origins,
        )
        self.cluster = cluster
        self.snapshots = snapshots
        self.metrics = metrics
        self.request_timeout = request_timeout
        # Server-wide: subscription slots and GPU location hints outlive requests.
        self.state: SharedState = schema.state

    async def get_context(self, request: Request | WebSocket, response: Any) -> Any:
        """A new context, and with it new dataloaders, for every request or socket."""
        return make_context(
            self.cluster, self.snapshots, self.state, request=request, response=response
        )

    async def execute_single(
        self,
        request: Request,
        request_adapter: AsyncHTTPRequestAdapter,
        sub_response: Response,
        context: Any,
        root_value: None,
        request_data: GraphQLRequestData,
    ) -> ExecutionResult:
        """Run one operation under the request time limit, recording latency and errors."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.request_timeout):
                result = await super().execute_single(
                    request, request_adapter, sub_response, context, root_value, request_data
                )
        except TimeoutError:
            self.metrics.query_errors.labels(kind="timeout").inc()
            message = f"the request exceeded the server's {self.request_timeout:g} s time limit"
            result = ExecutionResult(
                data=None,
                errors=[GraphQLError(message, extensions={"code": "REQUEST_TIMEOUT"})],
            )
        else:
            if result.errors:
                kind = "invalid" if result.data is None else "partial"
                self.metrics.query_errors.labels(kind=kind).inc()
        finally:
            self.metrics.query_seconds.observe(time.perf_counter() - started)
        return result


def _json(status: int, body: object) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def create_app(
    settings: Settings,
    cluster: Cluster,
    snapshots: SnapshotSource,
    *,
    metrics: Metrics | None = None,
    schema: GraphSchema | None = None,
    lifespan: Lifespan[Starlette] | None = None,
) -> Starlette:
    """The server's ASGI app over a Kubernetes cache and an agent snapshot source."""
    metrics = metrics if metrics is not None else Metrics()
    metrics.watch_cluster(cluster)
    if schema is None:
        schema = build_schema(
            SchemaLimits(
                max_depth=settings.max_depth,
                max_aliases=settings.max_aliases,
                max_tokens=settings.max_tokens,
                max_subscriptions=settings.max_subscriptions,
            )
        )
    graphql = GraphQLApp(
        schema,
        cluster=cluster,
        snapshots=snapshots,
        metrics=metrics,
        request_timeout=settings.request_timeout,
        graphiql=settings.graphiql,
        allowed_origins=settings.cors_origins,
    )

    async def healthz(request: Request) -> Response:
        return _json(200, {"status": "ok"})

    async def readyz(request: Request) -> Response:
        if cluster.ready:
            return _json(200, {"status": "ready"})
        return _json(
            503, {"status": "not ready", "reason": "waiting for the first list of pods and nodes"}
        )

    async def metrics_endpoint(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    gpu_pods = gpu_pods_endpoint(cluster, snapshots, timeout=settings.request_timeout)

    async def gpu_pods_counted(request: Request) -> Response:
        response = await gpu_pods(request)
        metrics.gpu_pods_requests.labels(status=str(response.status_code)).inc()
        return response

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route("/gpu-pods", gpu_pods_counted, methods=["GET"]),
        Route("/graphql", graphql),
        WebSocketRoute("/graphql", graphql),
    ]
    if settings.graphiql:
        routes.extend(graphiql_routes())
    # Outermost first: CORS headers also go on the body cap's 413.
    middleware: list[Middleware] = []
    if settings.cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(settings.cors_origins),
                allow_methods=["GET", "POST", "OPTIONS"],
                allow_headers=["Content-Type", "Authorization", "Accept"],
                max_age=600,
            )
        )
    middleware.append(Middleware(BodySizeLimit, max_bytes=settings.max_body_bytes))
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.cluster = cluster
    app.state.snapshots = snapshots
    return app

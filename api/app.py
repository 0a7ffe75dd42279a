"""The HTTP app: GraphQL (HTTP and WebSocket), ``/gpu-pods``, health and metrics."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import Lifespan

from graph_schema.admission import SizeGauge
from graph_schema.allocation_join import AllocationRules, DraCatalog
from graph_schema.cache_status import cache_age
from graph_schema.compiled.documents import CompiledDocuments
from graph_schema.interfaces import Cluster, EventSource, SnapshotSource
from graph_schema.schema import build_schema
from graph_schema.state import SharedState
from graph_schema.visibility import VisibleCluster

from .auth import AuthMiddleware, KubernetesAuth, request_scope
from .execution import (
    GraphQLApp,
    QueryMetrics,
    RequestTimeoutError,
    SharedResults,
)
from .gpu_metrics import GpuMetricsExporter
from .gpu_metrics.events import EventCounts
from .http import BodyLimits, gpu_pods_endpoint, graphiql_routes, json_response
from .http.cluster_map import map_routes
from .http.exposition import exposition_response
from .log_limits import limit_tracebacks
from .metrics import Metrics
from .settings import Settings, SettingsError

__all__ = ["GraphQLApp", "QueryMetrics", "RequestTimeoutError", "create_app"]


def readiness(cluster: Cluster) -> dict[str, object]:
    """/readyz's body once the cache has filled, with its age.

    A stale cache stays ready (200): every replica reads the same API server,
    so failing readiness would turn a late answer into none at all. The body
    and ``gpugraph_cache_staleness_seconds`` say how late, for alerts.
    """
    body: dict[str, object] = {"status": "ready"}
    age = cache_age(cluster)
    if age.seconds is not None:
        body["cacheStalenessSeconds"] = round(age.seconds, 3)
    if age.stale:
        body["status"] = "stale"
        body["reason"] = (
            f"the API server has not confirmed the cache for {age.seconds:.0f} s; "
            "answers may be out of date"
        )
    return body


def create_app(
    settings: Settings,
    cluster: Cluster,
    snapshots: SnapshotSource,
    *,
    metrics: Metrics | None = None,
    lifespan: Lifespan[Starlette] | None = None,
    auth: KubernetesAuth | None = None,
    dra: DraCatalog | None = None,
    state: SharedState | None = None,
    gauge: SizeGauge | None = None,
) -> Starlette:
    """The server's ASGI app over a Kubernetes cache and an agent snapshot source.

    With ``settings.auth_mode == "kubernetes"``, ``auth`` checks every caller
    (SettingsError without it).

    ``state`` and ``gauge`` are the server's, built by its composition root
    (``api/serve.py``), which prunes the state when nodes leave the cluster;
    without them the app builds its own, its allocation join reading ``dra``.
    """
    if settings.auth_mode == "kubernetes" and auth is None:
        raise SettingsError("--auth kubernetes needs a way to ask the Kubernetes API server")
    if settings.auth_mode == "none":
        auth = None
    metrics = metrics if metrics is not None else Metrics()
    metrics.watch_cluster(cluster)
    limit_tracebacks()
    request_timeout = settings.request_timeout
    if state is None:
        # The one allocation join's inputs, which GraphQL's objects (so /gpu-pods and
        # /metrics) read.
        state = SharedState.for_limits(
            settings.limits, AllocationRules(dra=dra, gpus=settings.gpus)
        )
    # Queries it covers skip strawberry's executor (graph_schema/compiled); its answers
    # leave only through the views below, as orjson's bytes, so they may hold parts
    # already encoded (a whole-cluster answer is not held twice).
    compiled = CompiledDocuments(encoded=True)
    schema = build_schema(
        settings.limits,
        time_limit=request_timeout,
        report=QueryMetrics(metrics),
        state=state,
        gauge=gauge,
        compiled=compiled if settings.compiled_execution else None,
    )
    graphql = GraphQLApp(
        schema,
        cluster=cluster,
        snapshots=snapshots,
        graphiql=settings.graphiql,
        allowed_origins=settings.cors_origins,
        shared=SharedResults(ttl=settings.snapshot_ttl),
        auth=auth,
        metrics=metrics,
    )

    async def healthz(request: Request) -> Response:
        return json_response(200, {"status": "ok"})

    async def readyz(request: Request) -> Response:
        if cluster.ready:
            return json_response(200, readiness(cluster))
        return json_response(
            503, {"status": "not ready", "reason": "waiting for the first list of pods and nodes"}
        )

    # GraphQL's objects of each snapshot, which /gpu-pods and /metrics reshape.
    views = schema.state.views
    gpu_metrics = GpuMetricsExporter(
        cluster,
        snapshots,
        timeout=settings.request_timeout,
        dcgm_names=settings.metrics_dcgm_names,
        views=views,
        pacer=schema.state.pacer,
    )

    # GPU health events, counted from the agents' logs (a pool reads them; other sources not).
    event_counts = EventCounts(cluster, snapshots) if isinstance(snapshots, EventSource) else None

    async def metrics_endpoint(request: Request) -> Response:
        # The GPU series are fetched first, so the server's own counters
        # include the agent calls this scrape made.
        gpus = await gpu_metrics.render() if settings.metrics_gpu_series else b""
        if settings.metrics_gpu_series and event_counts is not None:
            gpus += await event_counts.render()
        return await exposition_response(request, metrics.render() + gpus)

    def view_of(request: Request) -> VisibleCluster:
        return VisibleCluster(cluster, request_scope(request, auth))

    gpu_pods = gpu_pods_endpoint(snapshots, view_of, views, timeout=settings.request_timeout)

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
        *map_routes(graphiql=settings.graphiql),
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
    if auth is not None:
        middleware.append(Middleware(AuthMiddleware, auth=auth))
    middleware.append(
        Middleware(BodyLimits, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout)
    )
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.compiled = compiled
    app.state.cluster = cluster
    app.state.snapshots = snapshots
    return app

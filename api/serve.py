"""``gpugraph serve``: the Kubernetes cache, the agent pool and the app under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import uvicorn
from starlette.applications import Starlette

from graph_schema.admission import SizeGauge
from graph_schema.allocation_join import AllocationRules
from graph_schema.interfaces import Cluster
from graph_schema.records import NodeRecord, PodRecord
from graph_schema.state import SharedState
from node_resolver.auth import TokenFile
from node_resolver.models import NodeSnapshot
from node_resolver.version import version

from .agents.discovery import Discovery, NodeIpDiscovery, PodIpDiscovery
from .agents.pod_names import PodNamePusher
from .agents.pool import AgentPool
from .app import create_app
from .auth import kubernetes_auth
from .http.header_limits import bounded_headers, cap_warnings
from .http.uvicorn_server import UvicornServer
from .kube.cache import ClusterCache
from .kube.config import load_kube_config
from .kube.watcher import ClusterWatcher
from .lifecycle.departures import DepartedNodes
from .lifecycle.gc_tuning import gc_pauses_recorded, tune_gc_for_serving
from .lifecycle.open_files import raise_open_files_limit
from .metrics import Metrics
from .settings import Settings, SettingsError

__all__ = [
    "Services",
    "announce_when_ready",
    "build_discovery",
    "build_pool",
    "serve",
    "services_running",
    "uvicorn_config",
    "warn_if_open",
]

log = logging.getLogger(__name__)


def build_discovery(settings: Settings, cluster: Cluster) -> Discovery:
    """The agent discovery strategy ``settings`` ask for."""
    if settings.agent_discovery == "pod-ip":
        return PodIpDiscovery(
            cluster, settings.agent_namespace, settings.agent_selector, settings.agent_port
        )
    return NodeIpDiscovery(cluster, settings.agent_port)


def agent_token(settings: Settings) -> TokenFile | None:
    """The agent token file, re-read when it changes; SettingsError if unusable at start."""
    if settings.agent_token_file is None:
        return None
    try:
        return TokenFile(settings.agent_token_file)
    except ValueError as exc:
        raise SettingsError(f"--agent-token-file: {exc}") from None


def build_pool(settings: Settings, cluster: Cluster, metrics: Metrics | None = None) -> AgentPool:
    """An agent pool configured from ``settings``; SettingsError if the token file is unusable."""
    return AgentPool(
        build_discovery(settings, cluster),
        timeout=settings.agent_timeout,
        token=agent_token(settings),
        ttl=settings.snapshot_ttl,
        metrics=metrics,
        keep_warm=settings.snapshot_keep_warm,
        refresh_budget=settings.snapshot_refresh_budget,
        # Each caller's budget of history reads: one tenant's flood waits its own turn.
        history_reads_per_caller=settings.max_history_reads_per_caller,
        history_reads_per_node=settings.max_history_reads_per_caller_per_node,
    )


def _tune_gc_once_ready(cache: ClusterCache) -> None:
    """Subscribe to ``cache`` so that the collector is tuned when its first full list lands."""
    tuned = False

    def on_change(kind: str, change: str, record: PodRecord | NodeRecord | None) -> None:
        nonlocal tuned
        if change == "RELISTED" and cache.ready and not tuned:
            tuned = True
            # After the list: the records it made go to the permanent generation.
            tune_gc_for_serving()
            log.debug("cache ready: the garbage collector is tuned for serving")

    cache.subscribe(on_change)


def uvicorn_config(app: Starlette, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration for the app, with the body cap applied to WebSocket messages."""
    cap_warnings()
    return uvicorn.Config(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        log_level=settings.log_level,
        ws_max_size=settings.max_body_bytes,
        # Headers bounded in size and in time: unfinished ones are not held forever.
        http=bounded_headers(timeout=settings.header_timeout),
        # uvicorn counts the request's own connection among them.
        limit_concurrency=settings.max_connections + 1,
        # Subscriptions are long-lived; give them a moment to finish, not forever.
        timeout_graceful_shutdown=5,
        lifespan="off",
        proxy_headers=False,
    )


@dataclass(frozen=True)
class Services:
    """The running parts of a server, before (or without) its HTTP listener."""

    cache: ClusterCache
    watcher: ClusterWatcher
    pool: AgentPool
    metrics: Metrics
    app: Starlette
    # Server-wide: what every query shares (views, subscription slots, GPU hints).
    state: SharedState
    pod_names: PodNamePusher | None = None


@contextlib.asynccontextmanager
async def services_running(settings: Settings) -> AsyncIterator[Services]:
    """Start the Kubernetes watch and the agent pool; stop both on exit.

    The cache fills in the background, and ``/readyz`` answers 503 until it has.
    SettingsError (an unusable token file) is raised before anything starts.
    """
    cache = ClusterCache()
    metrics = Metrics()
    pool = build_pool(settings, cache, metrics)
    configuration = load_kube_config(str(settings.kubeconfig) if settings.kubeconfig else None)
    watcher = ClusterWatcher(cache, configuration, gpu_resources=settings.gpus)
    auth = None
    if settings.auth_mode == "kubernetes":
        auth = kubernetes_auth(
            configuration, cache, audiences=settings.auth_audiences, ttl=settings.auth_cache_ttl
        )
    # What outlives a request, built here and handed to the schema; its graph objects
    # read the one allocation join's inputs (the cached claims, the GPU resource names).
    state = SharedState.for_limits(
        settings.limits, AllocationRules(dra=cache.dra, gpus=settings.gpus)
    )
    views = state.views
    app = create_app(
        settings, cache, pool, metrics=metrics, auth=auth, state=state, gauge=SizeGauge(views)
    )
    departed = DepartedNodes(cache, pool, state, metrics, asyncio.get_running_loop())
    stop_pruning = cache.subscribe(departed.on_change)

    def build_views(node_name: str, snapshot: NodeSnapshot) -> None:
        # Kept warm, a snapshot's graph objects are built as it lands, not by the next query.
        views.gpus(node_name, snapshot, cache)

    pool.on_refreshed(build_views)
    pool.keep_warm.announce()
    # Agents learn their pods' names from the watch, so their history names pods; and the
    # shares of the DRA devices their claims consume, which the agents' accounting weighs.
    pod_names = PodNamePusher(cache, pool, asyncio.get_running_loop(), claims=cache.dra)
    metrics.watch_pod_names(pod_names)
    stop_naming = cache.subscribe(pod_names.on_change)
    stop_sharing = cache.dra.subscribe(pod_names.on_claims_change)
    pod_names.start()
    _tune_gc_once_ready(cache)
    watcher.start()
    try:
        with gc_pauses_recorded() as pauses:
            metrics.watch_gc(pauses)
            yield Services(cache, watcher, pool, metrics, app, state, pod_names)
    finally:
        log.info("shutting down: closing agent channels and the Kubernetes watch")
        stop_naming()
        stop_sharing()
        await pod_names.stop()
        stop_pruning()
        await pool.close()
        await asyncio.to_thread(watcher.stop)


def announce_when_ready(services: Services, settings: Settings) -> Callable[[], None]:
    """Log that the server waits for the API server, then "serving on ..." once its first
    list of pods and nodes has landed; returns an unsubscribe.

    The HTTP listener starts at once (probes need it), but until that list every query
    answers NOT_READY: "serving" before it would send a person to a server that shows nothing.
    """
    cache = services.cache
    once = threading.Lock()

    def announce() -> None:
        if once.acquire(blocking=False):
            log.info(
                "gpugraph %s serving on %s (auth %s)",
                version(),
                settings.listen,
                settings.auth_mode,
            )

    def on_change(kind: str, change: str, record: PodRecord | NodeRecord | None) -> None:
        if change == "RELISTED" and cache.ready:
            announce()

    log.info(
        "gpugraph %s waiting for the API server at %s (listening on %s; /readyz answers 503 "
        "until it has the cluster's pods and nodes)",
        version(),
        services.watcher.api_server,
        settings.listen,
    )
    unsubscribe = cache.subscribe(on_change)
    if cache.ready:  # the first lists landed before the subscription
        announce()
    return unsubscribe


def warn_if_open(settings: Settings) -> None:
    """Log, at start, that an ``--auth none`` server shows everything to whoever reaches it."""
    if settings.auth_mode == "none":
        log.warning(
            "--auth none: anyone who can reach %s sees every namespace's pods, nodes and GPU "
            "processes; use --auth kubernetes unless only trusted callers reach it",
            settings.listen,
        )


async def serve(settings: Settings) -> None:
    """Run the server until SIGINT/SIGTERM, then shut down gracefully."""
    warn_if_open(settings)
    # An agent channel per node: thousands of sockets on a large cluster.
    raise_open_files_limit()
    async with services_running(settings) as services:
        stop_announcing = announce_when_ready(services, settings)
        try:
            server = UvicornServer(uvicorn_config(services.app, settings))
            await server.serve()
        finally:
            stop_announcing()

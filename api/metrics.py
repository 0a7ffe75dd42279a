"""Prometheus metrics for the server, kept in a registry of their own.

A private registry (rather than prometheus_client's global one) lets several
servers live in one process, as they do in tests, without clashing names.
"""

from __future__ import annotations

import contextlib
import math

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from graph_schema.interfaces import Cluster, StalenessSource
from node_resolver.version import version

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# prometheus_client adds a *_created series (the Unix time it was made) beside every
# counter and histogram: a second series per label set that no dashboard or alert
# here reads. A process-wide switch, read at each scrape: the server's own setting.
disable_created_metrics()

_AGENT_CALL_OUTCOMES = ("ok", "error", "timeout")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0)


class Metrics:
    """Every metric the server exports, registered in one private registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.agent_calls = Counter(
            "gpugraph_agent_calls",
            "gRPC calls made to node agents, by node and outcome "
            f"({', '.join(_AGENT_CALL_OUTCOMES)}).",
            ["node", "outcome"],
            registry=r,
        )
        self.agent_call_seconds = Histogram(
            "gpugraph_agent_call_seconds",
            "Latency of gRPC calls to node agents.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.snapshot_requests = Counter(
            "gpugraph_snapshot_requests",
            "Snapshot requests by how they were served: called (a new agent call), "
            "shared (joined an in-flight call), cached (within the TTL), "
            "backoff (refused while the agent is backing off).",
            ["source"],
            registry=r,
        )
        self.agents_backing_off = Gauge(
            "gpugraph_agents_backing_off",
            "Nodes whose agent is currently skipped after repeated failures.",
            registry=r,
        )
        self.query_seconds = Histogram(
            "gpugraph_query_seconds",
            "Latency of GraphQL queries and mutations, over HTTP and WebSocket.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.query_errors = Counter(
            "gpugraph_query_errors",
            "GraphQL operations that returned errors, by kind "
            "(invalid: no data at all, partial: data plus errors, timeout).",
            ["kind"],
            registry=r,
        )
        self.gpu_pods_requests = Counter(
            "gpugraph_gpu_pods_requests",
            "Requests to /gpu-pods by HTTP status.",
            ["status"],
            registry=r,
        )
        self.cache_pods = Gauge("gpugraph_cache_pods", "Pods in the Kubernetes cache.", registry=r)
        self.cache_nodes = Gauge(
            "gpugraph_cache_nodes", "Nodes in the Kubernetes cache.", registry=r
        )
        self.cache_ready = Gauge(
            "gpugraph_cache_ready",
            "1 once the first full list of pods and nodes has landed, else 0.",
            registry=r,
        )
        self.cache_staleness = Gauge(
            "gpugraph_cache_staleness_seconds",
            "Seconds since the API server last confirmed the cache (a list, a watch "
            "event or a bookmark, for both pods and nodes); NaN before it has.",
            registry=r,
        )
        # Which release answered, for dashboards and alerts across an upgrade.
        self.build_info = Info("gpugraph_build", "The running gpugraph's version.", registry=r)
        self.build_info.info({"version": version()})

    def watch_cluster(self, cluster: Cluster) -> None:
        """Read the cache gauges from ``cluster`` at every scrape."""
        self.cache_pods.set_function(lambda: float(cluster.pod_count))
        self.cache_nodes.set_function(lambda: float(cluster.node_count))
        self.cache_ready.set_function(lambda: 1.0 if cluster.ready else 0.0)
        if isinstance(cluster, StalenessSource):
            source = cluster

            def staleness() -> float:
                seconds = source.staleness_seconds()
                return math.nan if seconds is None else seconds

            self.cache_staleness.set_function(staleness)

    def forget_node(self, node_name: str) -> None:
        """Drop the node's series (it left the cluster), so they do not pile up."""
        for outcome in _AGENT_CALL_OUTCOMES:
            with contextlib.suppress(KeyError):  # never called with this outcome
                self.agent_calls.remove(node_name, outcome)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)

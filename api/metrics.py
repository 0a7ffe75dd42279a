"""Prometheus metrics for the server, kept in a registry of their own.

A private registry (rather than prometheus_client's global one) lets several
servers live in one process, as they do in tests, without clashing names.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from graph_schema.interfaces import Cluster, StalenessSource
from node_resolver.version import version


class KeepWarmReport(Protocol):
    """What the keep-warm policy (api.agents.keep_warm.KeepWarm) tells /metrics."""

    @property
    def mode(self) -> str:
        """adaptive, fixed or off."""
        ...

    @property
    def budget(self) -> float:
        """The share of one core refreshes may use."""
        ...

    @property
    def spent_seconds(self) -> float:
        """CPU seconds spent on refreshes so far."""
        ...

    def kept_count(self) -> int:
        """Nodes kept warm now."""
        ...

    def interval(self) -> float:
        """The shortest interval between two refreshes of a node now."""
        ...


class PodNamesReport(Protocol):
    """What the pod-name pusher (api.agents.pod_names.PodNamePusher) tells /metrics."""

    @property
    def pushed(self) -> int:
        """Pod names the agents acknowledged so far."""
        ...

    def pending_nodes(self) -> int:
        """Nodes whose names are waiting to be pushed, being pushed, or tried again later."""
        ...


class GcReport(Protocol):
    """What the collector's record (api.lifecycle.GcPauses) tells /metrics."""

    @property
    def collections(self) -> list[int]:
        """Collections so far, by generation (0, 1, 2)."""
        ...

    @property
    def seconds(self) -> list[float]:
        """Seconds they held the interpreter, by generation."""
        ...


__all__ = ["CONTENT_TYPE_LATEST", "GcReport", "KeepWarmReport", "Metrics", "PodNamesReport"]

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
            "stale (past the TTL by at most the agent timeout, while a background "
            "refresh is in flight), refresh (a background refresh started), "
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

    def watch_keep_warm(self, policy: KeepWarmReport) -> None:
        """Export what the keep-warm policy decides and what it costs, read at each scrape."""
        self.registry.register(_KeepWarmCollector(policy))

    def watch_pod_names(self, pusher: PodNamesReport) -> None:
        """Export how far pushing pod names to the agents has got, read at each scrape."""
        self.registry.register(_PodNamesCollector(pusher))

    def watch_gc(self, pauses: GcReport) -> None:
        """Export the cyclic garbage collector's runs and pauses, read at each scrape."""
        self.registry.register(_GcCollector(pauses))

    def forget_node(self, node_name: str) -> None:
        """Drop the node's series (it left the cluster), so they do not pile up."""
        for outcome in _AGENT_CALL_OUTCOMES:
            with contextlib.suppress(KeyError):  # never called with this outcome
                self.agent_calls.remove(node_name, outcome)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)


class _KeepWarmCollector(Collector):
    """The keep-warm policy's decisions, so an operator sees what background refresh costs."""

    def __init__(self, policy: KeepWarmReport) -> None:
        self._policy = policy

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        """Nodes kept warm, CPU seconds spent refreshing, the interval and the budget."""
        policy = self._policy
        yield GaugeMetricFamily(
            "gpugraph_keep_warm_nodes",
            "Nodes whose snapshots are fetched in the background ahead of their next read.",
            value=float(policy.kept_count()),
        )
        yield CounterMetricFamily(
            "gpugraph_keep_warm_refresh_seconds",
            "CPU seconds the server spent on background refreshes (the call's own steps, "
            "decoding, building the graph objects).",
            value=policy.spent_seconds,
        )
        yield GaugeMetricFamily(
            "gpugraph_keep_warm_interval_seconds",
            "The shortest interval between two background refreshes of a node now: the "
            "TTL's share when the budget covers every node read, longer when it does not.",
            value=policy.interval() if policy.mode != "off" else math.nan,
        )
        yield GaugeMetricFamily(
            "gpugraph_keep_warm_budget_cores",
            "The share of one core background refreshes may use (--snapshot-refresh-budget); "
            "0 when refreshing is off or fixed by --snapshot-keep-warm.",
            value=policy.budget if policy.mode == "adaptive" else 0.0,
        )


class _GcCollector(Collector):
    """The collector's pauses: the server's Python threads wait while one runs."""

    def __init__(self, pauses: GcReport) -> None:
        self._pauses = pauses

    def collect(self) -> Iterable[CounterMetricFamily]:
        """Collections and the seconds they took, by generation."""
        collections = CounterMetricFamily(
            "gpugraph_gc_collections",
            "Runs of Python's cyclic garbage collector in the server since it started, by "
            "generation (0 young, 1 middle, 2 full).",
            labels=["generation"],
        )
        seconds = CounterMetricFamily(
            "gpugraph_gc_pause_seconds",
            "Seconds those runs took, during which they blocked the server's Python "
            "threads (queries, refreshes, scrapes), by generation.",
            labels=["generation"],
        )
        for generation, (count, spent) in enumerate(
            zip(self._pauses.collections, self._pauses.seconds, strict=True)
        ):
            collections.add_metric([str(generation)], float(count))
            seconds.add_metric([str(generation)], spent)
        yield collections
        yield seconds


class _PodNamesCollector(Collector):
    """The pod-name pusher's backlog: after a start or a relist every node waits its turn."""

    def __init__(self, pusher: PodNamesReport) -> None:
        self._pusher = pusher

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        """Nodes waiting for names, and names pushed."""
        yield GaugeMetricFamily(
            "gpugraph_pod_names_pending_nodes",
            "Nodes whose agents are waiting for pod names from this server (every node "
            "after a start or a relist, a slice at a time during a resync, and changes).",
            value=float(self._pusher.pending_nodes()),
        )
        yield CounterMetricFamily(
            "gpugraph_pod_names_pushed",
            "Pod names the agents acknowledged (their occupancy logs keep them).",
            value=float(self._pusher.pushed),
        )

"""Every ``gpugraph serve`` setting, as one dataclass."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from graph_schema.gpu_resources import DEFAULT_GPU_DRA_DRIVERS, DEFAULT_GPU_RESOURCES, GpuResources
from graph_schema.limits import (
    DEFAULT_MAX_HISTORY_READS_PER_CALLER,
    DEFAULT_MAX_HISTORY_READS_PER_CALLER_PER_NODE,
    SchemaLimits,
)
from graph_schema.selectors import LabelSelectorError, parse_label_selector
from node_resolver.address import AGENT_PORT, join_host_port

from .agents.keep_warm import DEFAULT_BUDGET

__all__ = ["AuthMode", "DiscoveryMode", "Settings", "SettingsError"]

DiscoveryMode = Literal["node-ip", "pod-ip"]
AuthMode = Literal["none", "kubernetes"]
# The query limits' defaults are the schema's, declared once in SchemaLimits.
_LIMITS = SchemaLimits()


class SettingsError(ValueError):
    """Settings that cannot work; the message names the flags and why."""


@dataclass(frozen=True)
class Settings:
    """Server configuration; the defaults are the command line's."""

    listen_host: str = "0.0.0.0"
    listen_port: int = 8000
    kubeconfig: Path | None = None
    # Agents.
    agent_discovery: DiscoveryMode = "node-ip"
    agent_port: int = AGENT_PORT
    agent_namespace: str = "gpugraph"
    agent_selector: str = "app.kubernetes.io/name=gpugraph,app.kubernetes.io/component=agent"
    agent_timeout: float = 2.0
    agent_token_file: Path | None = None
    snapshot_ttl: float = 1.0
    # Which nodes are fetched again ahead of their next read, so queries do not wait
    # for the fan-out. None (auto, the default): nodes read by repeated queries, within
    # ``snapshot_refresh_budget``; seconds: every node read within them, whatever it
    # costs; 0: only when a query asks (see docs/scaling.md).
    snapshot_keep_warm: float | None = None
    # The share of one core that auto keep-warm's background fetches may use.
    snapshot_refresh_budget: float = DEFAULT_BUDGET
    # Query limits.
    max_depth: int = _LIMITS.max_depth
    max_aliases: int = _LIMITS.max_aliases
    max_tokens: int = _LIMITS.max_tokens
    max_result_items: int = _LIMITS.max_result_items
    max_variable_items: int = _LIMITS.max_variable_items
    # HTTP limits.
    max_body_bytes: int = 1_048_576
    request_timeout: float = 10.0
    # How long a request's headers may take to arrive (their size is bounded too), and its
    # body after them.
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    # Other open connections at which a new request is answered 503 at once (kubelet's
    # probes excepted): with the limits above, what slow or idle clients can hold is
    # bounded by their number too.
    max_connections: int = 1000
    max_subscriptions: int = _LIMITS.max_subscriptions
    max_subscriptions_per_caller: int = _LIMITS.max_subscriptions_per_caller
    # History and usage reads one caller may have at the agents at once, in all and per node.
    max_history_reads_per_caller: int = DEFAULT_MAX_HISTORY_READS_PER_CALLER
    max_history_reads_per_caller_per_node: int = DEFAULT_MAX_HISTORY_READS_PER_CALLER_PER_NODE
    cors_origins: tuple[str, ...] = field(default_factory=tuple)
    graphiql: bool = True
    introspection: bool = True
    log_level: str = "info"
    # Who may see what. Open here, for programs that build Settings (tests, the
    # demo); the command line defaults to "kubernetes" (see cli.AUTH_DEFAULT).
    auth_mode: AuthMode = "none"
    auth_audiences: tuple[str, ...] = field(default_factory=tuple)
    # How long a passed review is trusted; a failed one, a sixth of that.
    auth_cache_ttl: float = 60.0
    # Also export dcgm-exporter's names (off: they collide where it runs too).
    metrics_dcgm_names: bool = False
    # The per-pod GPU series on the server's /metrics, fetched from every agent
    # per scrape; past a few hundred nodes, scrape the agents instead (docs/scaling.md).
    metrics_gpu_series: bool = True
    # Run the queries the compiled plan covers through it (off: strawberry runs all).
    compiled_execution: bool = True
    # What counts as a GPU request: resource names ("*" suffix: a family) and DRA drivers.
    gpu_resources: tuple[str, ...] = DEFAULT_GPU_RESOURCES
    gpu_dra_drivers: tuple[str, ...] = DEFAULT_GPU_DRA_DRIVERS

    @property
    def gpus(self) -> GpuResources:
        """The GPU resource names and DRA drivers, as the cache and the join read them."""
        return GpuResources(self.gpu_resources, self.gpu_dra_drivers)

    def __post_init__(self) -> None:
        # The one place where settings are checked; the command line reports
        # these messages as usage errors.
        problems = []
        for name in (
            "max_depth",
            "max_aliases",
            "max_tokens",
            "max_result_items",
            "max_variable_items",
            "max_body_bytes",
            "max_connections",
            "max_history_reads_per_caller",
            "max_history_reads_per_caller_per_node",
        ):
            if getattr(self, name) < 1:
                problems.append(f"{_flag(name)} must be at least 1")
        for name in ("agent_timeout", "request_timeout", "header_timeout", "body_timeout"):
            # Written so that NaN fails too.
            if not 0 < getattr(self, name) < math.inf:
                problems.append(f"{_flag(name)} must be positive")
        if not 0 <= self.snapshot_ttl < math.inf:
            problems.append("snapshot-ttl must not be negative")
        if self.snapshot_keep_warm is not None and not 0 <= self.snapshot_keep_warm < math.inf:
            problems.append("snapshot-keep-warm must be auto or not negative")
        if not 0 < self.snapshot_refresh_budget < math.inf:
            problems.append("snapshot-refresh-budget must be positive")
        if self.agent_timeout >= self.request_timeout:
            problems.append(
                f"agent-timeout ({self.agent_timeout:g} s) must be shorter than "
                f"request-timeout ({self.request_timeout:g} s), or one slow agent "
                "would time out whole queries instead of only its own node"
            )
        if self.max_subscriptions < 0:
            problems.append("max-subscriptions must not be negative")
        if self.max_subscriptions_per_caller < 0:
            problems.append("max-subscriptions-per-caller must not be negative")
        if not 0 < self.agent_port < 65536:
            problems.append("agent-port must be between 1 and 65535")
        if not 0 <= self.listen_port < 65536:
            problems.append("the listen port must be between 0 and 65535")
        if self.agent_discovery not in ("node-ip", "pod-ip"):
            problems.append("agent-discovery must be node-ip or pod-ip")
        elif self.agent_discovery == "pod-ip":
            try:
                parse_label_selector(self.agent_selector)
            except LabelSelectorError as exc:
                problems.append(f"agent selector: {exc}")
        if self.auth_mode not in ("none", "kubernetes"):
            problems.append("auth must be none or kubernetes")
        if not 0 < self.auth_cache_ttl < math.inf:
            problems.append("auth-cache-ttl must be positive")
        if self.auth_audiences and self.auth_mode != "kubernetes":
            problems.append("auth-audience needs --auth kubernetes")
        if self.cors_origins:
            # The same rules the WebSocket origin check applies (imported late:
            # strawberry is heavy, and `gpugraph serve --help` reads Settings' defaults).
            from graph_schema.internals import normalize_allowed_origins

            try:
                normalize_allowed_origins(self.cors_origins)
            except ValueError as exc:
                problems.append(f"cors-origin: {exc}")
        if problems:
            raise SettingsError("; ".join(problems))

    @property
    def listen(self) -> str:
        """``HOST:PORT`` as given to ``--listen``."""
        return join_host_port(self.listen_host, self.listen_port)

    @property
    def limits(self) -> SchemaLimits:
        """The schema's per-query limits these settings ask for."""
        return SchemaLimits(
            max_depth=self.max_depth,
            max_aliases=self.max_aliases,
            max_tokens=self.max_tokens,
            max_subscriptions=self.max_subscriptions,
            max_subscriptions_per_caller=self.max_subscriptions_per_caller,
            max_result_items=self.max_result_items,
            max_variable_items=self.max_variable_items,
            introspection=self.introspection,
        )


def _flag(name: str) -> str:
    return name.replace("_", "-")

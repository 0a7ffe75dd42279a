"""Where a node's agent listens, read from the Kubernetes cache.

Two strategies, as ``--agent-discovery`` names them: ``node-ip`` (the node's
InternalIP and a fixed port; the DaemonSet uses hostNetwork or a hostPort) and
``pod-ip`` (the agent pod on that node, found by label selector).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from graph_schema.interfaces import Cluster
from graph_schema.selectors import LabelSelector, parse_label_selector
from node_resolver.address import AGENT_PORT, join_host_port

__all__ = [
    "AddressUnknownError",
    "Discovery",
    "NodeIpDiscovery",
    "PodIpDiscovery",
]


class AddressUnknownError(Exception):
    """The node's agent address cannot be found; the message says why."""


class Discovery(Protocol):
    """Finds the ``host:port`` of a node's agent."""

    def address(self, node_name: str) -> str:
        """The agent's address, or AddressUnknownError."""
        ...


@dataclass(frozen=True)
class NodeIpDiscovery:
    """The agent listens on the node's InternalIP at a fixed port."""

    cluster: Cluster
    port: int = AGENT_PORT

    def address(self, node_name: str) -> str:
        """The node's InternalIP joined with the agent port."""
        node = self.cluster.node(node_name)
        if node is None:
            raise AddressUnknownError(f"node {node_name!r} is not in the cluster cache")
        if not node.internal_ip:
            raise AddressUnknownError(f"node {node_name!r} has no InternalIP address")
        return join_host_port(node.internal_ip, self.port)


class PodIpDiscovery:
    """The agent is the Running pod on the node that matches a label selector."""

    def __init__(
        self, cluster: Cluster, namespace: str, selector: str, port: int = AGENT_PORT
    ) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.selector_text = selector
        try:
            self.selector: LabelSelector = parse_label_selector(selector)
        except Exception as exc:  # LabelSelectorError is a GraphQL-facing error type
            raise ValueError(f"agent selector: {exc}") from None
        self.port = port

    def address(self, node_name: str) -> str:
        """The matching agent pod's IP joined with the agent port."""
        candidates = [
            pod
            for pod in self.cluster.pods(namespace=self.namespace, node_name=node_name)
            if self.selector.matches(pod.labels)
        ]
        running = [pod for pod in candidates if pod.phase == "Running" and pod.pod_ip]
        if not running:
            where = (
                f"matching {self.selector_text!r} in namespace {self.namespace!r} "
                f"on node {node_name!r}"
            )
            if candidates:
                raise AddressUnknownError(
                    f"{len(candidates)} agent pod(s) {where}, none Running with a pod IP"
                )
            raise AddressUnknownError(f"no agent pod {where}")
        # During a rolling update two agent pods can briefly share a node; either
        # answers, so pick deterministically to keep the channel stable.
        pod = min(running, key=lambda p: p.name)
        assert pod.pod_ip is not None
        return join_host_port(pod.pod_ip, self.port)

"""Generated clusters of any size: GPU nodes on loopback IPs and one-GPU worker pods."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .manifests import make_node, make_pod

__all__ = ["demo_cluster", "demo_nodes", "demo_pods"]


def _loopback_ip(n: int) -> str:
    return f"127.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}"


def demo_nodes(nodes: int) -> Iterator[dict[str, Any]]:
    """GPU nodes ``node-0`` ... with InternalIPs 127.0.0.2, 127.0.0.3, ... (agents on loopback)."""
    for n in range(nodes):
        yield make_node(f"node-{n}", _loopback_ip(n + 2))


def demo_pods(
    pods: int, nodes: int, *, namespaces: int = 20, managed_fields: bool = True
) -> Iterator[dict[str, Any]]:
    """``pods`` one-GPU worker pods spread round-robin over ``nodes`` nodes and ``namespaces``."""
    for i in range(pods):
        yield make_pod(
            f"worker-{i}",
            f"team-{i % namespaces}",
            f"node-{i % nodes}" if nodes else None,
            gpu_limit=1,
            labels={"app": f"job-{i // 8}", "pod-template-hash": f"{i // 8:x}"},
            managed_fields=managed_fields,
        )


def demo_cluster(
    pods: int, nodes: int, *, namespaces: int = 20, managed_fields: bool = True
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods of demo_pods() and the nodes of demo_nodes(), as lists."""
    pod_objs = list(demo_pods(pods, nodes, namespaces=namespaces, managed_fields=managed_fields))
    return pod_objs, list(demo_nodes(nodes))

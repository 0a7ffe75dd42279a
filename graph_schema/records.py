"""Slim, immutable records of the Kubernetes objects the graph needs.

The Kubernetes cache builds these from API JSON and keeps nothing else, so a
cluster of 100k pods stays small. Resolvers read them directly.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContainerRecord:
    """One container of a pod, from spec and status."""

    name: str
    image: str | None
    # Runtime prefix ("containerd://", "cri-o://", "docker://") stripped.
    container_id: str | None
    init: bool = False


@dataclass(frozen=True, slots=True)
class PodRecord:
    """The fields of a pod that the graph serves."""

    uid: str
    namespace: str
    name: str
    node_name: str | None
    phase: str | None
    pod_ip: str | None
    labels: dict[str, str]
    # Sum of the containers' nvidia.com/gpu limits; None when none asks for one.
    gpu_request: int | None
    containers: tuple[ContainerRecord, ...]
    resource_version: str = ""

    def container_with_id(self, container_id: str) -> ContainerRecord | None:
        """The container whose runtime ID (prefix stripped) is ``container_id``, if any."""
        return next((c for c in self.containers if c.container_id == container_id), None)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """The fields of a node that the graph serves."""

    name: str
    uid: str
    internal_ip: str | None
    labels: dict[str, str]
    gpu_capacity: int | None
    gpu_allocatable: int | None
    resource_version: str = ""

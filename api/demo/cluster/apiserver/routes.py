"""Which resource a URL path names: ``/api/v1/nodes/{name}``, ``/api/v1/namespaces/{ns}/pods``..."""

from __future__ import annotations

from .namespaces import NAMESPACES
from .store import DRA_GROUP, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

__all__ = ["route"]


def route(path: str, dra_version: str | None = None) -> tuple[str, str | None, str | None] | None:
    """``(resource, namespace, name)`` of a path (name None for a collection), or None.

    ``resource.k8s.io`` paths are routed only at ``dra_version``, the one version served.
    """
    parts = path.strip("/").split("/")
    if dra_version is not None and parts[:3] == ["apis", DRA_GROUP, dra_version]:
        return _dra_route(parts[3:])
    if parts[:2] != ["api", "v1"]:
        return None
    rest = parts[2:]
    if rest[:1] == [NODES] and len(rest) <= 2:
        return NODES, None, rest[1] if len(rest) == 2 else None
    if rest == [PODS]:
        return PODS, None, None
    if rest[:1] == [NAMESPACES] and len(rest) <= 2:
        return NAMESPACES, None, rest[1] if len(rest) == 2 else None
    if len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] == PODS:
        return PODS, rest[1], rest[3] if len(rest) == 4 else None
    return None


def _dra_route(rest: list[str]) -> tuple[str, str | None, str | None] | None:
    if rest[:1] == [RESOURCE_SLICES] and len(rest) <= 2:
        return RESOURCE_SLICES, None, rest[1] if len(rest) == 2 else None
    if rest == [RESOURCE_CLAIMS]:
        return RESOURCE_CLAIMS, None, None
    if len(rest) in (3, 4) and rest[0] == "namespaces" and rest[2] == RESOURCE_CLAIMS:
        return RESOURCE_CLAIMS, rest[1], rest[3] if len(rest) == 4 else None
    return None

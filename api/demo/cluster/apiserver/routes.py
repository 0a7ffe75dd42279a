"""Which resource a URL path names: ``/api/v1/nodes/{name}``, ``/api/v1/namespaces/{ns}/pods``..."""

from __future__ import annotations

from .namespaces import NAMESPACES
from .store import NODES, PODS

__all__ = ["route"]


def route(path: str) -> tuple[str, str | None, str | None] | None:
    """``(resource, namespace, name)`` of a path (name None for a collection), or None."""
    parts = path.strip("/").split("/")
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

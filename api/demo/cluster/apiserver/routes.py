"""Which resource a URL path names: ``/api/v1/pods``, ``/api/v1/namespaces/{ns}/pods``, ..."""

from __future__ import annotations

from .store import NODES, PODS

__all__ = ["route"]


def route(path: str) -> tuple[str, str | None] | None:
    """``(resource, namespace or None)`` for a collection path; None for any other path."""
    parts = path.strip("/").split("/")
    if parts[:2] != ["api", "v1"]:
        return None
    rest = parts[2:]
    if rest == [PODS]:
        return PODS, None
    if rest == [NODES]:
        return NODES, None
    if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == PODS:
        return PODS, rest[1]
    return None

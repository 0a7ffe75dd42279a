"""Namespaces, derived from the pods: every namespace a pod is in, plus ``default``.

kubectl asks for the namespace when a namespaced object is missing, to say
whether the object or its namespace is what does not exist; ``kubectl get
namespaces`` lists them. The stub keeps no namespace objects of its own, so
they are read-only and exist exactly while they hold a pod (``default``
always, as on a real cluster).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from .store import PODS, ObjectStore

__all__ = ["NAMESPACES", "namespace_body", "namespace_list_body"]

NAMESPACES = "namespaces"
_ALWAYS = "default"


def _namespaces(store: ObjectStore) -> tuple[int, dict[str, list[bytes]]]:
    """The resourceVersion and, per namespace, the raw pods in it."""
    with store.cond:
        found: dict[str, list[bytes]] = {_ALWAYS: []}
        for item in store.objects[PODS].values():
            found.setdefault(item.namespace, []).append(item.raw)
        return store.rv, found


def _namespace(name: str, pods: list[bytes], rv: int) -> dict[str, Any]:
    created = [orjson.loads(raw).get("metadata", {}).get("creationTimestamp") for raw in pods]
    metadata: dict[str, Any] = {
        "name": name,
        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"namespace/{name}")),
        "resourceVersion": str(rv),
        "labels": {"kubernetes.io/metadata.name": name},
    }
    stamps = sorted(c for c in created if isinstance(c, str))
    if stamps:  # as old as its oldest pod
        metadata["creationTimestamp"] = stamps[0]
    return {
        "kind": "Namespace",
        "apiVersion": "v1",
        "metadata": metadata,
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }


def namespace_body(store: ObjectStore, name: str) -> bytes | None:
    """The Namespace ``name`` as served, or None when no pod is in it."""
    rv, found = _namespaces(store)
    pods = found.get(name)
    return None if pods is None else orjson.dumps(_namespace(name, pods, rv))


def namespace_list_body(store: ObjectStore, params: dict[str, str]) -> bytes:
    """The ``NamespaceList`` of every namespace, in name order."""
    if params.get("labelSelector") or params.get("fieldSelector") or params.get("continue"):
        raise ValueError("the stub API server lists namespaces whole: no selectors or continue")
    rv, found = _namespaces(store)
    items = [_namespace(name, found[name], rv) for name in sorted(found)]
    return orjson.dumps(
        {
            "kind": "NamespaceList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv)},
            "items": items,
        }
    )

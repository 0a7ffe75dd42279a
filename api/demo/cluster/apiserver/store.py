"""The stub API server's objects, their resourceVersions and the watch event history."""

from __future__ import annotations

import threading
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = [
    "DRA_GROUP",
    "NODES",
    "OBJECT_KIND",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_SLICES",
    "Event",
    "ObjectStore",
    "Stored",
    "event_line",
    "stored",
]

PODS = "pods"
NODES = "nodes"
RESOURCE_CLAIMS = "resourceclaims"
RESOURCE_SLICES = "resourceslices"
DRA_GROUP = "resource.k8s.io"
OBJECT_KIND = {
    PODS: "Pod",
    NODES: "Node",
    RESOURCE_CLAIMS: "ResourceClaim",
    RESOURCE_SLICES: "ResourceSlice",
}
NAMESPACED = frozenset({PODS, RESOURCE_CLAIMS})


@dataclass(frozen=True, slots=True)
class Stored:
    """One object as served, with the fields selectors match on."""

    namespace: str
    name: str
    node_name: str
    labels: Mapping[str, str]
    raw: bytes  # the object as served, resourceVersion included


@dataclass(frozen=True, slots=True)
class Event:
    """One change in the history that watches replay."""

    rv: int
    resource: str
    type: str
    item: Stored | None
    line: bytes = b""  # sent verbatim when item is None (injected garbage)


class ObjectStore:
    """Pods and nodes by (namespace, name), one resourceVersion counter, and a bounded history.

    Every field is guarded by ``cond``; writers notify it so that open
    watches wake up and send the new events.
    """

    def __init__(self, history_limit: int, *, dra_version: str | None = "v1") -> None:
        self.history_limit = history_limit
        self.cond = threading.Condition()
        self.rv = 1
        self.objects: dict[str, dict[tuple[str, str], Stored]] = {r: {} for r in OBJECT_KIND}
        # The apiVersion each resource is served at; resource.k8s.io at one version, or none.
        self.dra_version = dra_version
        self.api_versions = {PODS: "v1", NODES: "v1"}
        if dra_version is not None:
            for resource in (RESOURCE_CLAIMS, RESOURCE_SLICES):
                self.api_versions[resource] = f"{DRA_GROUP}/{dra_version}"
        self.history: deque[Event] = deque()
        self.compacted = 0  # watches from a resourceVersion below this get 410 Gone
        self.gone_epoch = 0
        self.drop_epoch = 0
        self.stopping = False
        self.active_watches: Counter[str] = Counter()

    def write(self, resource: str, obj: Mapping[str, Any], *, create: bool) -> int:
        """Create (ADDED) or replace (MODIFIED) an object; its resourceVersion."""
        with self.cond:
            rv = self.rv + 1
            item = stored(resource, obj, rv, create=create, api_version=self.api_versions[resource])
            key = (item.namespace, item.name)
            exists = key in self.objects[resource]
            if create and exists:
                raise ValueError(f"{resource} {key} already exists")
            if not create and not exists:
                raise KeyError(f"{resource} {key} not found")
            self.rv = rv
            self.objects[resource][key] = item
            self._record(Event(rv, resource, "ADDED" if create else "MODIFIED", item))
        return rv

    def delete(self, resource: str, key: tuple[str, str]) -> int:
        """Delete an object (DELETED); the deletion's resourceVersion."""
        with self.cond:
            old = self.objects[resource].pop(key, None)
            if old is None:
                raise KeyError(f"{resource} {key} not found")
            self.rv += 1
            obj = orjson.loads(old.raw)
            item = stored(resource, obj, self.rv, create=False, api_version=obj["apiVersion"])
            self._record(Event(self.rv, resource, "DELETED", item))
            return self.rv

    def load(
        self,
        pods: Iterable[Mapping[str, Any]],
        nodes: Iterable[Mapping[str, Any]],
        *,
        assign_uids: bool,
        claims: Iterable[Mapping[str, Any]] = (),
        slices: Iterable[Mapping[str, Any]] = (),
    ) -> int:
        """Add objects in bulk without watch events; the resourceVersion they share."""
        loads = [(PODS, pods), (NODES, nodes)]
        if self.dra_version is not None:
            loads += [(RESOURCE_CLAIMS, claims), (RESOURCE_SLICES, slices)]
        with self.cond:
            self.rv += 1
            rv = self.rv
            for resource, objs in loads:
                objects = self.objects[resource]
                version = self.api_versions[resource]
                for obj in objs:
                    item = stored(resource, obj, rv, create=assign_uids, api_version=version)
                    objects[(item.namespace, item.name)] = item
            self.compacted = rv
            self.history.clear()
            self.cond.notify_all()
        return rv

    def get(self, resource: str, key: tuple[str, str]) -> dict[str, Any] | None:
        """The object as served now, if any."""
        item = self.objects[resource].get(key)
        return orjson.loads(item.raw) if item is not None else None

    def inject(self, resource: str, line: bytes) -> int:
        """Queue ``line`` for the open watches of ``resource`` only; its resourceVersion."""
        with self.cond:
            self.rv += 1
            self._record(Event(self.rv, resource, "RAW", None, line.rstrip(b"\n") + b"\n"))
            return self.rv

    def expire(self) -> None:
        """Make every resourceVersion handed out so far too old to watch from."""
        with self.cond:
            self.rv += 1
            self.compacted = self.rv
            self.history.clear()
            self.gone_epoch += 1
            self.cond.notify_all()

    def drop(self) -> None:
        """Ask every open watch to close its connection abruptly."""
        with self.cond:
            self.drop_epoch += 1
            self.cond.notify_all()

    def stop(self) -> None:
        """End every open watch and held list."""
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def _record(self, event: Event) -> None:
        self.history.append(event)
        while len(self.history) > self.history_limit:
            self.compacted = self.history.popleft().rv
        self.cond.notify_all()


def stored(
    resource: str, obj: Mapping[str, Any], rv: int, *, create: bool, api_version: str = "v1"
) -> Stored:
    """``obj`` as served at ``rv``: kind, apiVersion and metadata filled in."""
    metadata = dict(obj.get("metadata") or {})
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{OBJECT_KIND[resource]} needs metadata.name")
    if resource in NAMESPACED:
        metadata.setdefault("namespace", "default")
    if create:
        metadata.setdefault("uid", str(uuid.uuid4()))
    metadata["resourceVersion"] = str(rv)
    served = {"kind": OBJECT_KIND[resource], "apiVersion": api_version, **obj, "metadata": metadata}
    spec = obj.get("spec") or {}
    return Stored(
        namespace=metadata.get("namespace", "") if resource in NAMESPACED else "",
        name=name,
        node_name=(spec.get("nodeName") or "") if resource == PODS else "",
        labels=dict(metadata.get("labels") or {}),
        raw=orjson.dumps(served),
    )


def event_line(kind: str, item: Stored, render: Callable[[bytes], bytes] | None = None) -> bytes:
    """One watch event line carrying ``item``, as served or as ``render`` reshapes it."""
    obj = item.raw if render is None else render(item.raw)
    return b'{"type":"' + kind.encode() + b'","object":' + obj + b"}\n"

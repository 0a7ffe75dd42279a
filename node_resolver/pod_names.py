"""The names of the pods on this node, as the server sends them (the agent sees only UIDs).

The server pushes each pod's namespace, name and container names (PutPodNames)
from its watch cache; the occupancy log stores them so that a record names its
pod long after the pod, the server and the agent are gone. Kept in memory even
with the log off, for whatever on the agent labels by pod.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["MAX_PODS", "PodName", "PodNames"]

# Far above any node's pod count (kubelet's default maximum is 110), so only a
# misbehaving sender reaches it; the oldest names go first.
MAX_PODS = 20_000


@dataclass(frozen=True, slots=True)
class PodName:
    """A pod's identity: its UID, namespace and name, and its containers' names by runtime ID."""

    uid: str
    namespace: str
    name: str
    # Runtime container ID (prefix stripped) -> the container's name in the pod spec.
    containers: Mapping[str, str]


class PodNames:
    """Pod UID -> PodName; thread-safe; remembers which names changed since the last drain."""

    def __init__(self, *, max_pods: int = MAX_PODS) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, PodName] = {}
        self._changed: dict[str, PodName] = {}
        self._max_pods = max_pods
        # Bumped by every change, so readers can tell when to look names up again.
        self.version = 0

    def __len__(self) -> int:
        return len(self._by_uid)

    def get(self, uid: str) -> PodName | None:
        """The pod with ``uid``, if the server has named it."""
        return self._by_uid.get(uid)

    def all(self) -> list[PodName]:
        """Every pod named so far."""
        with self._lock:
            return list(self._by_uid.values())

    def put(self, pods: Iterable[PodName]) -> int:
        """Store ``pods`` (an upsert); returns how many were new or changed."""
        changed = 0
        with self._lock:
            for pod in pods:
                if self._by_uid.get(pod.uid) == pod:
                    continue
                self._by_uid.pop(pod.uid, None)
                self._by_uid[pod.uid] = pod
                self._changed[pod.uid] = pod
                changed += 1
            if changed:
                self.version += 1
            while len(self._by_uid) > self._max_pods:
                del self._by_uid[next(iter(self._by_uid))]
        return changed

    def load(self, pods: Iterable[PodName]) -> None:
        """Fill from storage at start, without marking anything changed."""
        with self._lock:
            for pod in pods:
                self._by_uid.setdefault(pod.uid, pod)
            self.version += 1

    def drain_changed(self) -> list[PodName]:
        """The names changed since the last drain (to persist them), forgetting them."""
        with self._lock:
            changed, self._changed = list(self._changed.values()), {}
        return changed

    def restore_changed(self, pods: Iterable[PodName]) -> None:
        """Mark ``pods`` changed again (their write failed), unless newer names arrived."""
        with self._lock:
            for pod in pods:
                self._changed.setdefault(pod.uid, pod)

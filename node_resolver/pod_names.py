"""The names of the pods on this node, as the server sends them (the agent sees only UIDs).

The server pushes each pod's namespace, name and container names (PutPodNames)
from its watch cache; the occupancy log stores them so that a record names its
pod long after the pod, the server and the agent are gone. Kept in memory even
with the log off, for whatever on the agent labels by pod.

Whoever holds the agent's token can push names, so what is held is bounded by
count and by bytes (the oldest names go first), and the names waiting to be
written are always among those held: neither grows with what is pushed, whether
or not the log can take them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["MAX_BYTES", "MAX_PODS", "DeviceShareKey", "PodName", "PodNames", "pod_bytes"]

# Far above any node's pod count (kubelet's default maximum is 110), so only a
# misbehaving sender reaches it; the oldest names go first.
MAX_PODS = 20_000
# The names held, as ``pod_bytes`` counts them: a node's real pods take a few hundred
# KiB, and the agent's memory limit (256 Mi in the chart) keeps this well inside it.
MAX_BYTES = 16 * 1024 * 1024
# Python's objects around the text, generously: the PodName, its strings' headers, its
# entries in the maps that hold it, and per container its map entry and two strings.
_POD_OVERHEAD = 512
_CONTAINER_OVERHEAD = 160
# Per device share (or MIG device): its key tuple, the value and its map entry.
_SHARE_OVERHEAD = 200

# A DRA device one of the pod's claims holds: (claim name, driver, pool, device name).
DeviceShareKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class PodName:
    """A pod's identity: its UID, namespace and name, and its containers' names by runtime ID."""

    uid: str
    namespace: str
    name: str
    # Runtime container ID (prefix stripped) -> the container's name in the pod spec.
    containers: Mapping[str, str]
    # The share of each DRA device its claims consume, where the server knows it (in (0, 1]):
    # what the device weighs in GPU-equivalents. Not stored: the server sends it again.
    device_shares: Mapping[DeviceShareKey, float] = field(default_factory=dict)
    # The MIG device UUID of each DRA device of its claims that is one, as the device's
    # ResourceSlice says (the kubelet names only its parent GPU). Not stored either.
    device_migs: Mapping[DeviceShareKey, str] = field(default_factory=dict)


def pod_bytes(pod: PodName) -> int:
    """What holding ``pod`` costs in memory, over-estimated (its text and the objects around it)."""
    size = _POD_OVERHEAD + _text(pod.uid) + _text(pod.namespace) + _text(pod.name)
    for container_id, name in pod.containers.items():
        size += _CONTAINER_OVERHEAD + _text(container_id) + _text(name)
    for key in pod.device_shares:
        size += _SHARE_OVERHEAD + sum(_text(part) for part in key)
    for key, mig in pod.device_migs.items():
        size += _SHARE_OVERHEAD + sum(_text(part) for part in key) + _text(mig)
    return size


def _text(value: str) -> int:
    # Python stores ASCII in a byte a character and anything else in up to four.
    return len(value) if value.isascii() else 4 * len(value)


class PodNames:
    """Pod UID -> PodName; thread-safe; remembers which names changed since the last drain."""

    def __init__(self, *, max_pods: int = MAX_PODS, max_bytes: int = MAX_BYTES) -> None:
        self._lock = threading.Lock()
        # Oldest first: the first to go past a bound.
        self._by_uid: OrderedDict[str, PodName] = OrderedDict()
        # Always a subset of _by_uid (a name that goes is not written either).
        self._changed: dict[str, PodName] = {}
        self._bytes = 0
        self.max_pods = max_pods
        self.max_bytes = max_bytes
        # Bumped by every change, so readers can tell when to look names up again.
        self.version = 0

    def __len__(self) -> int:
        return len(self._by_uid)

    @property
    def held_bytes(self) -> int:
        """The names held, as ``pod_bytes`` counts them."""
        return self._bytes

    @property
    def changed_count(self) -> int:
        """Names changed and not yet drained."""
        return len(self._changed)

    def get(self, uid: str) -> PodName | None:
        """The pod with ``uid``, if the server has named it."""
        return self._by_uid.get(uid)

    def all(self) -> list[PodName]:
        """Every pod named so far."""
        with self._lock:
            return list(self._by_uid.values())

    def put(self, pods: Iterable[PodName]) -> int:
        """Store ``pods`` (an upsert); returns how many were new or changed."""
        # By UID: a pod named twice in one batch is still one pod (the last name wins).
        changed: set[str] = set()
        with self._lock:
            for pod in pods:
                old = self._by_uid.get(pod.uid)
                if old == pod:
                    continue
                if old is not None:
                    self._bytes -= pod_bytes(old)
                self._by_uid[pod.uid] = pod
                self._by_uid.move_to_end(pod.uid)
                self._bytes += pod_bytes(pod)
                self._changed[pod.uid] = pod
                changed.add(pod.uid)
            if changed:
                self.version += 1
            self._evict()
        return len(changed)

    def load(self, pods: Iterable[PodName]) -> None:
        """Fill from storage at start (``pods`` oldest first), without marking anything changed.

        Names already held are newer and win; the loaded ones count as older than them.
        """
        with self._lock:
            for pod in reversed(list(pods)):
                if pod.uid in self._by_uid:
                    continue
                self._by_uid[pod.uid] = pod
                self._by_uid.move_to_end(pod.uid, last=False)
                self._bytes += pod_bytes(pod)
            self.version += 1
            self._evict()

    def _evict(self) -> None:
        while self._by_uid and (len(self._by_uid) > self.max_pods or self._bytes > self.max_bytes):
            uid, pod = self._by_uid.popitem(last=False)
            self._bytes -= pod_bytes(pod)
            self._changed.pop(uid, None)

    def drain_changed(self, max_bytes: int | None = None) -> list[PodName]:
        """The names changed since the last drain (to persist them), forgetting them.

        With ``max_bytes``, the oldest changes up to that many bytes (at least one);
        the rest wait for the next drain.
        """
        with self._lock:
            if max_bytes is None:
                changed, self._changed = list(self._changed.values()), {}
                return changed
            changed = []
            size = 0
            for pod in self._changed.values():
                size += pod_bytes(pod)
                if changed and size > max_bytes:
                    break
                changed.append(pod)
            for pod in changed:
                del self._changed[pod.uid]
        return changed

    def restore_changed(self, pods: Iterable[PodName]) -> None:
        """Mark ``pods`` changed again (their write failed), unless newer names arrived
        or they are no longer held."""
        with self._lock:
            restored = {
                pod.uid: pod
                for pod in pods
                if pod.uid not in self._changed and self._by_uid.get(pod.uid) == pod
            }
            if restored:
                # Ahead of the changes since: they are older.
                self._changed = {**restored, **self._changed}

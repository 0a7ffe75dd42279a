"""The in-memory cache of pods and nodes, with the indexes the graph reads by.

Writes come from the watch threads, reads from the event loop. A single lock
guards the indexes; every write holds it only for a few dictionary updates (a
full relist builds its new indexes outside the lock and swaps them in at
once), so readers never wait long and never see a half-applied change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from graph_schema.records import NodeRecord, PodRecord, PodSizes

from .dra_cache import DraCache
from .listeners import Listeners
from .parse import strip_runtime_prefix
from .watch_stats import WatchStats

# (kind, change, record): kind is "pod" or "node"; change is "ADDED",
# "MODIFIED", "DELETED" or "RELISTED" (record None: the whole kind was replaced).
ChangeListener = Callable[[str, str, PodRecord | NodeRecord | None], None]

_PodFilter = tuple[str | None, str | None]
_SORTED_CACHE_LIMIT = 4096

logger = logging.getLogger(__name__)


@dataclass
class CacheStats:
    """Counters of the pod and node loops."""

    pods: WatchStats = field(default_factory=WatchStats)
    nodes: WatchStats = field(default_factory=WatchStats)


def _pod_sort_key(pod: PodRecord) -> tuple[str, str]:
    return (pod.namespace, pod.name)


class _PodIndex:
    """Every pod, indexed; mutated only under the cache's lock."""

    __slots__ = ("by_container", "by_namespace", "by_node", "by_uid", "container_counts", "count")

    def __init__(self) -> None:
        self.by_namespace: dict[str, dict[str, PodRecord]] = {}
        self.by_uid: dict[str, PodRecord] = {}
        self.by_node: dict[str, dict[str, PodRecord]] = {}
        self.by_container: dict[str, PodRecord] = {}
        self.count = 0
        # Pods by how many containers they have: the most is read per query's estimate.
        self.container_counts: Counter[int] = Counter()

    @classmethod
    def build(cls, pods: Iterable[PodRecord]) -> _PodIndex:
        index = cls()
        for pod in pods:
            index.put(pod)
        return index

    def sizes(self) -> PodSizes:
        # Over the nodes and the distinct container counts, not the pods: read per query.
        most_on_a_node = max(map(len, self.by_node.values()), default=0)
        return PodSizes(self.count, most_on_a_node, max(self.container_counts, default=0))

    def get(self, namespace: str, name: str) -> PodRecord | None:
        names = self.by_namespace.get(namespace)
        return names.get(name) if names is not None else None

    def put(self, pod: PodRecord) -> PodRecord | None:
        old = self.get(pod.namespace, pod.name)
        if old is not None:
            self._unlink(old)
        else:
            self.count += 1
        self.by_namespace.setdefault(pod.namespace, {})[pod.name] = pod
        self.by_uid[pod.uid] = pod
        self.container_counts[len(pod.containers)] += 1
        if pod.node_name is not None:
            self.by_node.setdefault(pod.node_name, {})[pod.uid] = pod
        for container in pod.containers:
            if container.container_id:
                self.by_container[container.container_id] = pod
        return old

    def remove(self, namespace: str, name: str) -> PodRecord | None:
        old = self.get(namespace, name)
        if old is None:
            return None
        self._unlink(old)
        names = self.by_namespace[namespace]
        del names[name]
        if not names:
            del self.by_namespace[namespace]
        self.count -= 1
        return old

    def _unlink(self, pod: PodRecord) -> None:
        # Only drop index entries that still point at this very record: a
        # newer pod may already own the UID or container ID.
        if self.by_uid.get(pod.uid) is pod:
            del self.by_uid[pod.uid]
        containers = len(pod.containers)
        left = self.container_counts[containers] - 1
        if left:
            self.container_counts[containers] = left
        else:
            del self.container_counts[containers]
        if pod.node_name is not None:
            on_node = self.by_node.get(pod.node_name)
            if on_node is not None and on_node.get(pod.uid) is pod:
                del on_node[pod.uid]
                if not on_node:
                    del self.by_node[pod.node_name]
        for container in pod.containers:
            cid = container.container_id
            if cid and self.by_container.get(cid) is pod:
                del self.by_container[cid]


class ClusterCache:
    """Pods and nodes as last seen by the list/watch loops; implements ``Cluster``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods = _PodIndex()
        self._nodes: dict[str, NodeRecord] = {}
        self._pods_listed = False
        self._nodes_listed = False
        self._sorted_nodes: tuple[NodeRecord, ...] | None = None
        self._sorted_pods: dict[_PodFilter, tuple[PodRecord, ...]] = {}
        self._listeners: Listeners[ChangeListener] = Listeners()
        # Bumped by every change, so a sorted listing made outside the lock
        # is cached only if nothing changed while it was made.
        self._version = 0
        self._ready = threading.Event()
        self.stats = CacheStats()
        # ResourceClaims and ResourceSlices, for the allocation join.
        self.dra = DraCache()

    # -- reads (any thread) --------------------------------------------------

    @property
    def ready(self) -> bool:
        """True once the first full list of both pods and nodes has landed."""
        return self._pods_listed and self._nodes_listed

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until ready (or ``timeout`` seconds); True if ready."""
        return self._ready.wait(timeout)

    def staleness_seconds(self, now: float | None = None) -> float | None:
        """How long since the API server last confirmed both pods and nodes; None before."""
        heard = min(self.stats.pods.heard_at, self.stats.nodes.heard_at)
        if heard <= 0.0:
            return None
        return max(0.0, (time.monotonic() if now is None else now) - heard)

    @property
    def pod_count(self) -> int:
        """How many pods are cached."""
        return self._pods.count

    @property
    def node_count(self) -> int:
        """How many nodes are cached."""
        return len(self._nodes)

    def node(self, name: str) -> NodeRecord | None:
        """The node called ``name``, if cached."""
        return self._nodes.get(name)

    def nodes(self) -> Sequence[NodeRecord]:
        """Every cached node, sorted by name."""
        with self._lock:
            if self._sorted_nodes is None:
                self._sorted_nodes = tuple(sorted(self._nodes.values(), key=lambda n: n.name))
            return self._sorted_nodes

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        """The pod ``namespace/name``, if cached."""
        with self._lock:
            return self._pods.get(namespace, name)

    def pod_by_uid(self, uid: str) -> PodRecord | None:
        """The pod with this UID, if cached."""
        with self._lock:
            return self._pods.by_uid.get(uid)

    def pod_by_container_id(self, container_id: str) -> PodRecord | None:
        """The pod owning this container ID (a runtime prefix is ignored), if cached."""
        with self._lock:
            return self._pods.by_container.get(strip_runtime_prefix(container_id))

    def pods(
        self, namespace: str | None = None, node_name: str | None = None
    ) -> Sequence[PodRecord]:
        """Cached pods, optionally filtered by namespace and node, sorted by namespace/name."""
        key = (namespace, node_name)
        with self._lock:
            sorted_pods = self._sorted_pods
            found = sorted_pods.pop(key, None)
            if found is not None:
                # Last used goes last: the limit evicts the least recently used first.
                sorted_pods[key] = found
                return found
            version = self._version
            index = self._pods
            candidates: list[PodRecord]
            if node_name is not None:
                candidates = list(index.by_node.get(node_name, {}).values())
                if namespace is not None:
                    candidates = [p for p in candidates if p.namespace == namespace]
            elif namespace is not None:
                candidates = list(index.by_namespace.get(namespace, {}).values())
            else:
                candidates = list(index.by_uid.values())
        # Sorted outside the lock: sorting 100k pods would stall the watch threads.
        candidates.sort(key=_pod_sort_key)
        result = tuple(candidates)
        with self._lock:
            # Cached only if nothing changed meanwhile; a change would have
            # invalidated it before it was stored.
            if self._version == version:
                sorted_pods = self._sorted_pods
                if len(sorted_pods) >= _SORTED_CACHE_LIMIT:
                    # One listing per node is asked for as each node's snapshot is joined:
                    # at thousands of nodes those must not push out the whole cluster's.
                    del sorted_pods[next(iter(sorted_pods))]
                sorted_pods[key] = result
        return result

    def pod_sizes(self) -> PodSizes:
        """How many pods are cached, the most on one node, the most containers in one."""
        with self._lock:
            return self._pods.sizes()

    def pods_named(self, name: str) -> Sequence[PodRecord]:
        """Every cached pod called ``name``, across namespaces, sorted by namespace."""
        # One lookup per namespace: namespaces are few, and an index by name
        # would cost a dictionary per pod.
        with self._lock:
            found = [names[name] for names in self._pods.by_namespace.values() if name in names]
        found.sort(key=_pod_sort_key)
        return tuple(found)

    # -- writes (watch threads) ----------------------------------------------

    def subscribe(self, listener: ChangeListener) -> Callable[[], None]:
        """Call ``listener`` after every change (on the writing thread); returns an unsubscribe."""
        return self._listeners.add(listener)

    def replace_pods(self, pods: Iterable[PodRecord]) -> None:
        """Swap in a full list of pods at once; pods not in it are gone."""
        index = _PodIndex.build(pods)
        with self._lock:
            self._pods = index
            self._sorted_pods = {}
            self._pods_listed = True
            self._version += 1
            if self._nodes_listed:
                self._ready.set()
        self._notify("pod", "RELISTED", None)

    def replace_nodes(self, nodes: Iterable[NodeRecord]) -> None:
        """Swap in a full list of nodes at once; nodes not in it are gone."""
        by_name = {node.name: node for node in nodes}
        with self._lock:
            self._nodes = by_name
            self._sorted_nodes = None
            self._nodes_listed = True
            self._version += 1
            if self._pods_listed:
                self._ready.set()
        self._notify("node", "RELISTED", None)

    def upsert_pod(self, pod: PodRecord) -> None:
        """Add or replace one pod, keeping every index consistent."""
        with self._lock:
            old = self._pods.put(pod)
            self._invalidate_pods(old, pod)
        self._notify("pod", "ADDED" if old is None else "MODIFIED", pod)

    def delete_pod(self, namespace: str, name: str) -> PodRecord | None:
        """Remove one pod; returns what was cached, if anything."""
        with self._lock:
            old = self._pods.remove(namespace, name)
            if old is not None:
                self._invalidate_pods(old, None)
        if old is not None:
            self._notify("pod", "DELETED", old)
        return old

    def upsert_node(self, node: NodeRecord) -> None:
        """Add or replace one node."""
        with self._lock:
            old = self._nodes.get(node.name)
            self._nodes[node.name] = node
            self._sorted_nodes = None
            self._version += 1
        self._notify("node", "ADDED" if old is None else "MODIFIED", node)

    def delete_node(self, name: str) -> NodeRecord | None:
        """Remove one node; returns what was cached, if anything."""
        with self._lock:
            old = self._nodes.pop(name, None)
            if old is not None:
                self._sorted_nodes = None
                self._version += 1
        if old is not None:
            self._notify("node", "DELETED", old)
        return old

    def _invalidate_pods(self, old: PodRecord | None, new: PodRecord | None) -> None:
        self._version += 1
        stale = self._sorted_pods
        if not stale:
            return
        stale.pop((None, None), None)
        for pod in (old, new):
            if pod is None:
                continue
            stale.pop((pod.namespace, None), None)
            if pod.node_name is not None:
                stale.pop((None, pod.node_name), None)
                stale.pop((pod.namespace, pod.node_name), None)

    def _notify(self, kind: str, change: str, record: PodRecord | NodeRecord | None) -> None:
        for listener in self._listeners:
            try:
                listener(kind, change, record)
            except Exception:
                # A broken listener must not stop the watch that feeds the cache.
                logger.exception("cache listener %r failed", listener)

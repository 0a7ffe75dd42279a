"""The visibility seam: the cluster as one caller may see it.

Every resolver, loader and endpoint reads the cluster through a
``VisibleCluster``, which hands out only what the caller's ``Scope`` admits:
nodes, pods, and a node's GPUs (those running or given to the caller's pods, unless it
may list nodes) with other tenants' processes withheld. This
module is the only one that reads a ``Scope``'s rules; a layout test keeps it so.

The raw cache stays available as ``raw`` for the joins (an agent's process
is joined to its pod whoever asks; whether the caller sees it comes after).

The graph objects built from a snapshot (``views``) are shared by every
caller; a restricted caller gets copies with other tenants' processes
withheld. Their memory still counts in the GPU's totals, and the copy says
how much it hides, so a tenant learns that a GPU is shared but not by whom.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from .allocation_join import owner
from .interfaces import Cluster, StalenessSource
from .records import NodeRecord, PodRecord, PodSizes
from .scalars import Bytes
from .scope import EVERYTHING, Scope
from .types import Gpu, GpuProcess

__all__ = ["VisibleCluster"]

T = TypeVar("T")


def _process_namespace(process: GpuProcess) -> str | None:
    pod = process.pod
    return None if pod is None else pod.namespace


class VisibleCluster:
    """One caller's view of the Kubernetes cache: a ``Cluster`` that hands out only what it may see.

    Made per request (or per subscription tick); what it works out (the
    visible nodes, a node's GPU copies) is worked out once and kept.
    """

    def __init__(self, raw: Cluster, scope: Scope = EVERYTHING) -> None:
        self._raw = raw
        self._scope = scope
        # Worked out on first use: (the visible node names, None for all).
        self._node_names: tuple[frozenset[str] | None] | None = None
        self._gpus: dict[str, tuple[list[Gpu], list[Gpu]]] = {}

    @property
    def raw(self) -> Cluster:
        """The unfiltered cache, for joins only (process -> pod); never hand its records out."""
        return self._raw

    @property
    def scope(self) -> Scope:
        """The caller's scope (a key for sharing answers between equal callers)."""
        return self._scope

    # The visibility rules, for records the cache does not hold.

    def sees_namespace(self, namespace: str) -> bool:
        """Whether the caller may see pods (and their records) of ``namespace``."""
        return self._scope.sees_namespace(namespace)

    def sees_owner(self, namespace: str | None) -> bool:
        """Whether the caller may see something owned by a pod of ``namespace`` (None: no pod).

        Things in no pod (host processes, processes of pods never cached) are
        shown only to callers who may list pods cluster-wide.
        """
        if namespace is None:
            return self._scope.all_pods
        return self._scope.sees_namespace(namespace)

    def split_owned(
        self, items: Iterable[T], namespace_of: Callable[[T], str | None]
    ) -> tuple[list[T], list[T]]:
        """``items`` split into those the caller may see and those withheld, by owning namespace.

        ``namespace_of`` gives an item's pod namespace, None for an item of no
        pod. The same rule filters GPU processes, so any record owned by a pod
        (allocations, process history) is filtered exactly like them.
        """
        shown: list[T] = []
        hidden: list[T] = []
        for item in items:
            (shown if self.sees_owner(namespace_of(item)) else hidden).append(item)
        return shown, hidden

    def sees_shared(self, namespaces: Iterable[str]) -> bool:
        """Whether the caller may see something that pods of ``namespaces`` shared (a GPU
        event): one of them is its own, or it may list pods cluster-wide (then even with none).
        """
        return self._scope.all_pods or any(self._scope.sees_namespace(n) for n in namespaces)

    def owner_namespaces(self, namespace: str | None = None) -> frozenset[str] | None:
        """The namespaces whose records the caller may see, within ``namespace`` when given.

        None: every record, those of no pod too. For filters applied where the
        records are (the agents' logs), so withheld records are never read at all;
        the same rule as ``sees_owner``.
        """
        if self._scope.all_pods:
            return None if namespace is None else frozenset({namespace})
        visible = self._scope.pod_namespaces
        return visible if namespace is None else visible & {namespace}

    def sees_cmdline(self, namespace: str | None) -> bool:
        """Whether command lines of processes in ``namespace`` (None: no pod) may be shown."""
        return self._scope.sees_cmdline(namespace)

    def sees_gpu(self, gpu: Gpu, shown_processes: int) -> bool:
        """Whether ``gpu`` is visible when the caller may see ``shown_processes`` of its processes.

        With ``list nodes`` every GPU is; otherwise those running something of the caller's,
        and those given to one of its pods: a GPU its pod holds and leaves idle is its own.
        """
        if shown_processes > 0 or self._scope.all_nodes:
            return True
        table = gpu.allocations_of_node
        held = table.get().for_gpu(gpu.uuid) if table is not None else ()
        return any(a.is_gpu and self.sees_owner(owner(a)) for a in held)

    def sees_cluster_sizes(self) -> bool:
        """Whether the caller may be told the whole cluster's sizes (it sees everything)."""
        return self._scope.unrestricted

    def processes_per_gpu(self, every: int, of_namespace: Callable[[str], int]) -> int:
        """The most processes the caller may see on one GPU, counting only what it may see.

        ``every`` counts every process on a GPU, ``of_namespace`` one namespace's.
        A caller limited to some namespaces gets the sum of theirs (at least as
        many as any one GPU shows it), so its estimate never moves with other
        tenants' processes.
        """
        if self._scope.all_pods:
            return every
        return sum(of_namespace(namespace) for namespace in self._scope.pod_namespaces)

    def sees_node(self, name: str) -> bool:
        """Whether the caller may see the node called ``name``."""
        visible = self._visible_node_names()
        return visible is None or name in visible

    def history_nodes(self) -> list[str]:
        """Every node whose log may hold records the caller may see: every cached node.

        A pod's records outlive it in its node's log, so a tenant's history lies
        also on nodes that run none of its pods now, which it does not see; asking
        only those would leave its own past out without a word. Reading the rest
        reveals nothing: the agents are asked for ``owner_namespaces`` only, a
        failure of a node the caller does not see is counted, never named
        (``sees_node``), and such a node's snapshot is not the caller's to read.
        A caller who may see no record reads no node.
        """
        if not self._scope.all_pods and not self._scope.pod_namespaces:
            return []
        return [n.name for n in self._raw.nodes()]

    def _visible_node_names(self) -> frozenset[str] | None:
        # Without ``list nodes`` a caller sees the nodes that run one of its
        # pods (its processes run in its pods, so on those nodes too).
        if self._node_names is None:
            scope = self._scope
            names: frozenset[str] | None
            if scope.all_nodes:
                names = None
            elif scope.all_pods:
                names = frozenset(p.node_name for p in self._raw.pods() if p.node_name)
            else:
                names = frozenset(
                    p.node_name
                    for namespace in sorted(scope.pod_namespaces)
                    for p in self._raw.pods(namespace=namespace)
                    if p.node_name
                )
            self._node_names = (names,)
        return self._node_names[0]

    def _visible_pod(self, record: PodRecord | None) -> PodRecord | None:
        if record is None or not self._scope.sees_namespace(record.namespace):
            return None
        return record

    def _visible_pods(self, records: Sequence[PodRecord]) -> Sequence[PodRecord]:
        if self._scope.all_pods:
            return records
        namespaces = self._scope.pod_namespaces
        return [r for r in records if r.namespace in namespaces]

    # The ``Cluster`` interface, filtered.

    @property
    def ready(self) -> bool:
        """True once the cache's first full list has landed (reveals no objects)."""
        return self._raw.ready

    @property
    def pod_count(self) -> int:
        """How many pods the caller may see."""
        return len(self.pods())

    @property
    def node_count(self) -> int:
        """How many nodes the caller may see."""
        return len(self.nodes())

    def staleness_seconds(self, now: float | None = None) -> float | None:
        """The cache's age (reveals no objects); None when the cache does not track it."""
        raw = self._raw
        return raw.staleness_seconds(now) if isinstance(raw, StalenessSource) else None

    def node(self, name: str) -> NodeRecord | None:
        """The node called ``name``, if cached and visible."""
        record = self._raw.node(name)
        return record if record is not None and self.sees_node(name) else None

    def node_names_now(self) -> list[str]:
        """The nodes the caller sees in the cache as it is now, by name (``nodes`` stay as
        first worked out: one answer sees one cluster)."""
        return [n.name for n in VisibleCluster(self._raw, self._scope).nodes()]

    def nodes(self) -> Sequence[NodeRecord]:
        """Every visible cached node, sorted by name."""
        visible = self._visible_node_names()
        nodes = self._raw.nodes()
        return nodes if visible is None else [n for n in nodes if n.name in visible]

    def pod(self, namespace: str, name: str) -> PodRecord | None:
        """The pod ``namespace/name``, if cached and visible."""
        if not self._scope.sees_namespace(namespace):
            return None
        return self._raw.pod(namespace, name)

    def pod_by_uid(self, uid: str) -> PodRecord | None:
        """The visible pod with this UID, if cached."""
        return self._visible_pod(self._raw.pod_by_uid(uid))

    def pod_by_container_id(self, container_id: str) -> PodRecord | None:
        """The visible pod owning this (prefix-stripped) container ID, if cached."""
        return self._visible_pod(self._raw.pod_by_container_id(container_id))

    def pods(
        self, namespace: str | None = None, node_name: str | None = None
    ) -> Sequence[PodRecord]:
        """Visible cached pods, optionally filtered by namespace and node, sorted."""
        if namespace is not None and not self._scope.sees_namespace(namespace):
            return []
        records = self._raw.pods(namespace=namespace, node_name=node_name)
        return records if namespace is not None else self._visible_pods(records)

    def pods_named(self, name: str) -> Sequence[PodRecord]:
        """Every visible cached pod called ``name``, across namespaces."""
        return self._visible_pods(self._raw.pods_named(name))

    def pod_sizes(self) -> PodSizes:
        """The sizes of the pods the caller may see."""
        if self._scope.all_pods:
            return self._raw.pod_sizes()
        return PodSizes.of(self.pods())

    # A node's GPUs.

    def gpus(self, node_name: str, shared: list[Gpu]) -> list[Gpu]:
        """A node's shared Gpu objects as the caller sees them, copied once per view.

        Other tenants' processes are withheld; each copy counts what it hides
        (``hiddenProcessCount``, ``hiddenMemoryBytes``). Unrestricted callers get
        the shared objects themselves.
        """
        if self._scope.unrestricted:
            return shared
        cached = self._gpus.get(node_name)
        if cached is not None and cached[0] is shared:
            return cached[1]
        seen = [g for g in (self._gpu(g) for g in shared) if g is not None]
        self._gpus[node_name] = (shared, seen)
        return seen

    def _gpu(self, gpu: Gpu) -> Gpu | None:
        shown, hidden = self.split_owned(gpu.processes, _process_namespace)
        if not self.sees_gpu(gpu, len(shown)):
            return None
        processes: list[GpuProcess] = []
        copy = replace(gpu, processes=processes, hidden_process_count=len(hidden))
        copy.hidden_memory_bytes = Bytes(sum(int(p.used_memory_bytes or 0) for p in hidden))
        # The copy's processes point at the copy, so ``gpu { processes }`` stays scoped;
        # weakly, as the originals do theirs (the view holds its copies).
        copy_ref = weakref.ref(copy)
        for p in shown:
            cmdline = p.cmdline if self.sees_cmdline(_process_namespace(p)) else None
            processes.append(replace(p, gpu_ref=copy_ref, cmdline=cmdline))
        return copy

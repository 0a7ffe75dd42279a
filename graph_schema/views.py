"""Gpu and GpuProcess graph objects built from a node snapshot, once per snapshot.

The only walk of a snapshot's GPUs and processes on the server: GraphQL's
resolvers, ``/gpu-pods`` and ``/metrics`` all reshape these objects, each
caller's share through the visibility seam (``ViewCache.visible_gpus``), so a
process is joined to its pod and judged against its node's allocations once.

The cache also keeps the sizes its current snapshots report (GPUs per node,
processes per GPU), for the cost estimate: a node's figures leave when its
snapshot is replaced, released or goes unread, so one busy moment does not
raise every later estimate.
"""

from __future__ import annotations

import time
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from node_resolver.models import GpuSample, NodeSnapshot, ProcessRow, ProcessType

from .allocation_join import (
    AllocationRules,
    AllocationSource,
    AllocationTable,
    LazyTable,
    allocation_table,
)
from .errors import NodeSampleError
from .interfaces import Cluster
from .internals import to_camel_case
from .joins import NodeJoin
from .scalars import JSON
from .types import Gpu, GpuProcess, MigDevice, Pod
from .visibility import VisibleCluster


class PodJoiner:
    """Joins one node's processes to the cached pods bound to it, one Pod object per record.

    Pod objects from the node's previous build are reused while the cache
    still holds the same record, so a new snapshot allocates only what changed.
    """

    def __init__(
        self, cluster: Cluster, node_name: str, previous: dict[str, Pod] | None = None
    ) -> None:
        self.join = NodeJoin(cluster, node_name)
        self.previous = previous or {}
        self.pods: dict[str, Pod] = {}

    def pod(self, pod_uid: str | None, container_id: str | None) -> Pod | None:
        """The Pod a process belongs to, or None when its pod is not cached on this node."""
        record = self.join.pod(pod_uid, container_id)
        if record is None:
            return None
        uid = record.uid
        pod = self.pods.get(uid)
        if pod is None:
            pod = self.previous.get(uid)
            if pod is None or pod.record is not record:
                pod = Pod.from_record(record)
            self.pods[uid] = pod
        return pod


# Shared by every GPU without field errors, and without MIG devices; never mutated.
_NO_FIELD_ERRORS = JSON({})
_NO_MIG_DEVICES: list[MigDevice] = []


def build_gpu(
    sample: GpuSample,
    rows: list[ProcessRow],
    node_name: str,
    joiner: PodJoiner,
    allocations: LazyTable | None = None,
) -> Gpu:
    """One Gpu (``sample``'s own fields) with its processes (``rows``) joined to their pods
    (judged against ``allocations`` on use)."""
    table = allocations if allocations is not None else _NO_TABLE
    processes: list[GpuProcess] = []
    gpu = Gpu(
        uuid=sample.uuid,
        index=sample.index,
        name=sample.name,
        memory_total_bytes=sample.memory_total_bytes,  # type: ignore[arg-type]
        memory_used_bytes=sample.memory_used_bytes,  # type: ignore[arg-type]
        utilization_gpu=sample.utilization_gpu,
        utilization_memory=sample.utilization_memory,
        temperature_c=sample.temperature_c,
        power_usage_watts=sample.power_usage_watts,
        power_limit_watts=sample.power_limit_watts,
        mig_enabled=sample.mig_enabled,
        mig_devices=[
            MigDevice(
                index=m.index,
                uuid=m.uuid,
                memory_total_bytes=m.memory_total_bytes,  # type: ignore[arg-type]
                memory_used_bytes=m.memory_used_bytes,  # type: ignore[arg-type]
                gpu_instance_id=m.gpu_instance_id,
                compute_instance_id=m.compute_instance_id,
            )
            for m in sample.mig_devices
        ]
        if sample.mig_devices
        else _NO_MIG_DEVICES,
        error=sample.error or None,
        field_errors=(
            JSON({to_camel_case(k): v for k, v in sample.field_errors.items()})
            if sample.field_errors
            else _NO_FIELD_ERRORS
        ),
        processes=processes,
        node_name=node_name,
        allocations_of_node=table,
        process_list_complete=sample.process_list_complete(),
    )
    gpu_ref = weakref.ref(gpu)
    pod_of = joiner.pod
    append = processes.append
    type_names = _TYPE_NAMES
    for pid, kind, used, sm, mig, name, cmdline, container_id, runtime, pod_uid in rows:
        pod = pod_of(pod_uid, container_id)
        append(
            GpuProcess(
                pid=pid,
                name=name,
                process_type=type_names[kind],
                used_memory_bytes=used,  # type: ignore[arg-type]
                sm_utilization=sm,
                container_id=container_id,
                pod_uid=pod_uid,
                runtime=runtime,
                mig_device_uuid=mig,
                cmdline=cmdline,
                gpu_ref=gpu_ref,
                pod=pod,
                pod_elsewhere=(
                    pod is None
                    and (pod_uid or container_id) is not None
                    and joiner.join.elsewhere(pod_uid, container_id)
                ),
            )
        )
    return gpu


# A process type's GraphQL value, looked up rather than read from the enum: a dict
# lookup costs a third of the enum's ``value`` property, 32,000 times per 1,000 nodes.
_TYPE_NAMES = {kind: kind.value for kind in ProcessType}


# Judges every process UNKNOWN: for GPUs built without allocation data.
_NO_TABLE = LazyTable.of(AllocationTable(AllocationSource.NONE, reason="no allocation data"))


def build_gpus(
    node_name: str,
    snapshot: NodeSnapshot,
    joiner: PodJoiner,
    allocations: LazyTable | None = None,
) -> list[Gpu]:
    """Every GPU of a node's snapshot as graph objects, processes joined to pods."""
    return [
        build_gpu(sample, rows, node_name, joiner, allocations)
        for sample, rows in snapshot.sample.gpu_rows()
    ]


def gpus_by_pod(gpus: list[Gpu]) -> dict[str, list[Gpu]]:
    """Each pod's GPUs among ``gpus`` (those running a process joined to it), in their order."""
    by_pod: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        for process in gpu.processes:
            pod = process.pod
            if pod is None:
                continue
            listed = by_pod.setdefault(pod.uid, [])
            if not listed or listed[-1] is not gpu:
                listed.append(gpu)
    return by_pod


# How long a node's figures count towards the sizes after its snapshot's objects
# were built. Refused queries read no node, so without this a spike that nobody
# reads again would hold every estimate up until the node leaves the cluster.
SIZES_HORIZON_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class NodeSizes:
    """What one node's snapshot reports: its GPUs, and the most processes on one of them."""

    gpus: int
    processes_per_gpu: int
    # Namespace -> the most of its pods' processes on one of the node's GPUs.
    processes_per_gpu_of: Mapping[str, int]

    @classmethod
    def of(cls, gpus: list[Gpu]) -> NodeSizes:
        """The sizes of a node's built objects (processes as joined to their pods)."""
        most = 0
        of_namespace: dict[str, int] = {}
        # Plain loops: this runs for every snapshot built, a Counter per GPU costs 4x.
        for gpu in gpus:
            processes = gpu.processes
            most = max(most, len(processes))
            counts: dict[str, int] = {}
            for p in processes:
                pod = p.pod
                if pod is not None:
                    counts[pod.namespace] = counts.get(pod.namespace, 0) + 1
            for namespace, count in counts.items():
                if count > of_namespace.get(namespace, 0):
                    of_namespace[namespace] = count
        return cls(len(gpus), most, of_namespace)


class _Largest:
    """The largest of a multiset of counts, kept as counts come and go."""

    __slots__ = ("_counts", "value")

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()
        self.value = 0

    def __bool__(self) -> bool:
        return bool(self._counts)

    def add(self, count: int) -> None:
        self._counts[count] += 1
        self.value = max(self.value, count)

    def remove(self, count: int) -> None:
        left = self._counts[count] - 1
        if left > 0:
            self._counts[count] = left
            return
        del self._counts[count]
        if count == self.value:
            # Over the distinct counts held, not the nodes: a handful in practice.
            self.value = max(self._counts, default=0)


class SizePeaks:
    """The largest per-node sizes among the nodes' current snapshots."""

    def __init__(self) -> None:
        self._gpus = _Largest()
        self._processes = _Largest()
        self._of_namespace: dict[str, _Largest] = {}

    @property
    def gpus_per_node(self) -> int:
        """The most GPUs one node's current snapshot lists."""
        return self._gpus.value

    @property
    def processes_per_gpu(self) -> int:
        """The most processes one GPU of a current snapshot lists, whoever runs them."""
        return self._processes.value

    def processes_per_gpu_of(self, namespace: str) -> int:
        """The most processes of ``namespace``'s pods one GPU of a current snapshot lists."""
        largest = self._of_namespace.get(namespace)
        return 0 if largest is None else largest.value

    def add(self, sizes: NodeSizes) -> None:
        """Count one node's sizes in."""
        self._gpus.add(sizes.gpus)
        self._processes.add(sizes.processes_per_gpu)
        for namespace, count in sizes.processes_per_gpu_of.items():
            largest = self._of_namespace.get(namespace)
            if largest is None:
                largest = self._of_namespace[namespace] = _Largest()
            largest.add(count)

    def remove(self, sizes: NodeSizes) -> None:
        """Count one node's sizes (as added) out."""
        self._gpus.remove(sizes.gpus)
        self._processes.remove(sizes.processes_per_gpu)
        for namespace, count in sizes.processes_per_gpu_of.items():
            largest = self._of_namespace[namespace]
            largest.remove(count)
            if not largest:
                del self._of_namespace[namespace]


@dataclass(slots=True)
class _NodeViews:
    snapshot: NodeSnapshot
    gpus: list[Gpu]
    pods: dict[str, Pod]
    allocations: LazyTable
    sizes: NodeSizes
    # Built on first use: a pod's GPUs, for ``Pod.gpus`` over many pods of one node.
    by_pod: dict[str, list[Gpu]] | None = None


class ViewCache:
    """The graph objects of each node's latest snapshot, rebuilt only when it changes.

    Snapshot sources share one snapshot object across concurrent requests
    within their TTL, so keying on object identity builds each snapshot's
    objects once however many queries read it. The objects hold nothing
    request-specific; processes are joined to pods when the snapshot is
    first read, so the join is as fresh as the snapshot itself.
    """

    def __init__(
        self,
        rules: AllocationRules | None = None,
        *,
        horizon: float = SIZES_HORIZON_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # The claims and GPU names the allocation join reads.
        self.rules = rules if rules is not None else AllocationRules()
        self._by_node: dict[str, _NodeViews] = {}
        self.horizon = horizon
        self._clock = clock
        # The cost estimate's bounds for what agents report (see cost.py): the
        # sizes of the nodes in ``_counted``, each counted from when its objects
        # were built (oldest first), so expiring is O(nodes expired).
        self._peaks = SizePeaks()
        self._counted: dict[str, float] = {}

    def gpus(self, node_name: str, snapshot: NodeSnapshot, cluster: Cluster) -> list[Gpu]:
        """The Gpu objects of ``snapshot``, fetched from ``node_name``."""
        cached = self._by_node.get(node_name)
        if cached is not None and cached.snapshot is snapshot:
            if node_name not in self._counted:
                # Expired, yet handed out again: in hand now, so counted again.
                self._count(node_name, cached.sizes)
            return cached.gpus
        joiner = PodJoiner(cluster, node_name, cached.pods if cached is not None else None)
        allocations = LazyTable(node_name, snapshot, cluster, self.rules)
        gpus = build_gpus(node_name, snapshot, joiner, allocations)
        sizes = NodeSizes.of(gpus)
        counted = self._counted
        if cached is not None and node_name in counted and cached.sizes == sizes:
            # The node's figures as they were (most snapshots): only when they were
            # counted moves, to the end, as expiring reads the oldest first.
            sizes = cached.sizes
            del counted[node_name]
            counted[node_name] = self._clock()
        else:
            if cached is not None:
                self._uncount(node_name, cached.sizes)
            self._count(node_name, sizes)
        self._by_node[node_name] = _NodeViews(snapshot, gpus, joiner.pods, allocations, sizes)
        return gpus

    def visible_gpus(
        self, view: VisibleCluster, node_name: str, snapshot: NodeSnapshot
    ) -> list[Gpu]:
        """The node's GPUs as ``view``'s caller sees them; NodeSampleError when it read none.

        The one way from a snapshot to what a caller is shown, for the resolvers,
        ``/gpu-pods`` and ``/metrics`` alike: the shared objects, through the seam.
        """
        sample = snapshot.sample
        if sample.error and not sample.gpus:
            raise NodeSampleError(node_name, sample.error)
        # Joined on the whole cache: a process in another tenant's pod must not
        # pass for one of the caller's; the view withholds it afterwards.
        return view.gpus(node_name, self.gpus(node_name, snapshot, view.raw))

    def peaks(self) -> SizePeaks:
        """The largest sizes among the snapshots built within the last ``horizon`` seconds."""
        now = self._clock()
        counted = self._counted
        while counted:
            oldest = next(iter(counted))
            if now - counted[oldest] < self.horizon:
                break
            self._uncount(oldest, self._by_node[oldest].sizes)
        return self._peaks

    def most_gpus(self, node_names: Iterable[str]) -> int:
        """The most GPUs one of ``node_names`` reports, among the snapshots ``peaks`` counts:
        a restricted caller's bound, which other tenants' nodes do not move."""
        self.peaks()
        counted, by_node = self._counted, self._by_node
        return max((by_node[name].sizes.gpus for name in node_names if name in counted), default=0)

    def _count(self, node_name: str, sizes: NodeSizes) -> None:
        self._peaks.add(sizes)
        self._counted[node_name] = self._clock()

    def _uncount(self, node_name: str, sizes: NodeSizes) -> None:
        if self._counted.pop(node_name, None) is not None:
            self._peaks.remove(sizes)

    def gpus_by_pod(self, node_name: str, gpus: list[Gpu]) -> dict[str, list[Gpu]] | None:
        """``gpus_by_pod`` of the node's shared objects, built once per snapshot; None when
        ``gpus`` are not those objects (a restricted caller's copies)."""
        cached = self._by_node.get(node_name)
        if cached is None or cached.gpus is not gpus:
            return None
        if cached.by_pod is None:
            cached.by_pod = gpus_by_pod(gpus)
        return cached.by_pod

    def allocations(
        self, node_name: str, snapshot: NodeSnapshot | None, cluster: Cluster
    ) -> AllocationTable:
        """The node's allocation table: the one built with its GPUs, or (agent down) a fresh one."""
        if snapshot is None:
            return allocation_table(node_name, None, cluster, self.rules)
        self.gpus(node_name, snapshot, cluster)
        return self._by_node[node_name].allocations.get()

    def forget(self, node_name: str) -> None:
        """Drop a node's objects (e.g. when the node leaves the cluster)."""
        cached = self._by_node.pop(node_name, None)
        if cached is not None:
            self._uncount(node_name, cached.sizes)

    def node_names(self) -> set[str]:
        """The nodes whose objects are held."""
        return set(self._by_node)

"""Allocation truth: which GPU each container was given, set beside the GPU it runs on.

The one join every consumer shares (GraphQL, ``/gpu-pods``, ``/metrics``,
``top`` and the map read its results), as ``join_pod`` is for processes:

- the kubelet's PodResources answer, which the node's agent sends with its
  snapshot (device plugin IDs already mapped to GPUs, DRA devices where NVML's
  minor number could), and
- the API server's ResourceClaims of the node's pods, their devices mapped to
  GPUs through the ResourceSlices (``uuid``; a MIG device's ``parentUUID``).

Allocations match cached pods by namespace and name (PodResources has no
UID), containers by name, GPUs by UUID; a MIG device belongs to its parent
GPU. A DRA device both routes report is kept once.

How a process's verdict is decided (``docs/allocation.md`` says the same for
operators). The verdicts and the rule over a container's GPU devices are the
agent's (``node_resolver.allocation_verdicts``); the server extends that rule
with what only it knows: which resource names are GPUs, and the claims.

- ``NO_POD``: the process is in no container, or in a container of no pod.
- ``UNKNOWN``: the node has no allocation data (``NONE``); the process's pod is
  not cached (deleted since the kubelet answered); the kubelet's answer does
  not list the pod or container (it predates them); the container has a GPU
  device that matches no GPU (an unknown ID, a claim whose slice is gone); or,
  from the API alone, the pod also has device-plugin GPUs the API cannot see.
- ``ALLOCATED``: the container was given this GPU, or a MIG device on it.
- ``NOT_ALLOCATED``: every GPU device of the container is known, and none is
  this GPU.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from node_resolver.allocation_verdicts import AllocationVerdict, devices_verdict
from node_resolver.models import (
    AllocationKey,
    AllocationMechanism,
    AllocationUse,
    AllocationUseState,
    ContainerAllocations,
    GpuProcess,
    NodeAllocations,
    NodeSnapshot,
)

from .gpu_resources import GpuResources
from .interfaces import Cluster
from .records import PodRecord, ResourceClaimRecord, SliceDeviceRecord

__all__ = [
    "IDLE_USES",
    "Allocation",
    "AllocationRule",
    "AllocationRules",
    "AllocationSource",
    "AllocationTable",
    "AllocationVerdict",
    "DraCatalog",
    "LazyTable",
    "allocation_table",
    "judge_process",
    "pod_gpu_request",
    "use_shown",
]

# The uses of an allocation its holder leaves idle (idleGpuAllocations lists them).
IDLE_USES = frozenset({AllocationUse.IDLE, AllocationUse.UNUSED})


class AllocationSource(enum.Enum):
    """Where a node's allocation data comes from."""

    POD_RESOURCES = "POD_RESOURCES"
    API_ONLY = "API_ONLY"
    NONE = "NONE"


class AllocationRule(enum.Enum):
    """Which rule decided a process's verdict (and so whether to trust an alert on it)."""

    POD_RESOURCES = "POD_RESOURCES"  # the kubelet's device record (and the node's claims)
    RESOURCE_CLAIMS = "RESOURCE_CLAIMS"  # the API server's claims and slices alone
    SPEC = "SPEC"  # no allocation data: only the pod spec's GPU request counts
    NO_POD = "NO_POD"  # the process is in no pod


class DraCatalog(Protocol):
    """The cached ResourceClaims and ResourceSlices (``api.kube.dra_cache.DraCache``)."""

    @property
    def served(self) -> bool | None:
        """Whether the API server serves resource.k8s.io (None: not known yet)."""
        ...

    @property
    def claims_version(self) -> int:
        """A number that changes whenever any cached claim does."""
        ...

    def claim(self, namespace: str, name: str) -> ResourceClaimRecord | None:
        """The claim ``namespace/name``, if cached."""
        ...

    def device(self, driver: str, pool: str, device: str) -> SliceDeviceRecord | None:
        """The published device, if a cached slice has it."""
        ...

    def has_slices_on(self, node_name: str) -> bool:
        """Whether a cached slice publishes devices of ``node_name``."""
        ...


@dataclass(frozen=True, slots=True)
class AllocationRules:
    """What the join needs besides a snapshot and the pods: the claims and the GPU names."""

    dra: DraCatalog | None = None
    gpus: GpuResources = field(default_factory=GpuResources)

    def claims_version(self) -> int:
        """Changes whenever a claim ``pod_gpu_request`` may read does."""
        return self.dra.claims_version if self.dra is not None else 0


# Not frozen: a frozen dataclass's __init__ costs several times more, and tables are built
# per snapshot (never mutated after).
@dataclass(slots=True)
class Allocation:
    """One device given to one container (``container`` None: to the pod, no container named)."""

    namespace: str
    pod: str
    container: str | None
    mechanism: AllocationMechanism
    resource: str
    device_id: str
    shared: bool
    # The GPU it is on (the parent of a MIG device); None when it matches no GPU.
    gpu_uuid: str | None
    mig_device_uuid: str | None = None
    driver: str | None = None
    pool: str | None = None
    # Whether it is a GPU at all (a GPU resource name or GPU DRA driver).
    is_gpu: bool = True
    # How its holder uses it, as the node's agent judged it; None where none judged
    # (an older agent, or a claim the kubelet's answer does not list).
    use: AllocationUseState | None = None

    @property
    def pod_namespace(self) -> str:
        """The owning pod's namespace, for the visibility seam's ``split_owned``."""
        return self.namespace


def owner(allocation: Allocation) -> str:
    """Whose ``allocation`` is: the key the visibility seam's ``split_owned`` filters it by."""
    return allocation.pod_namespace


_ContainerKey = tuple[str, str, str | None]


@dataclass(slots=True)
class AllocationTable:
    """One node's allocations, indexed, and how to judge a process against them."""

    source: AllocationSource
    reason: str | None = None
    allocations: list[Allocation] = field(default_factory=list)
    by_gpu: dict[str, list[Allocation]] = field(default_factory=dict)
    by_pod: dict[tuple[str, str], list[Allocation]] = field(default_factory=dict)
    by_container: dict[_ContainerKey, list[Allocation]] = field(default_factory=dict)
    # The kubelet's listing (POD_RESOURCES only), every container it knows. Its
    # device-plugin devices are judged from these records directly and copied into
    # ``allocations`` only when a listing asks (most queries never do).
    kubelet: dict[_ContainerKey, ContainerAllocations] = field(default_factory=dict)
    # The agent's judged use of each kubelet device (``NodeAllocations.uses``).
    uses: Mapping[AllocationKey, AllocationUseState] = field(default_factory=dict)
    gpus: GpuResources = field(default_factory=GpuResources)
    # Pods on the node with a DRA claim the cache cannot show.
    unresolved_pods: set[tuple[str, str]] = field(default_factory=set)
    _plugin_indexed: bool = True
    _gpu_names: dict[str, bool] = field(default_factory=dict)

    def add(self, allocation: Allocation) -> None:
        """Index one allocation."""
        self.allocations.append(allocation)
        if allocation.gpu_uuid is not None:
            self.by_gpu.setdefault(allocation.gpu_uuid, []).append(allocation)
        pod_key = (allocation.namespace, allocation.pod)
        self.by_pod.setdefault(pod_key, []).append(allocation)
        self.by_container.setdefault((*pod_key, allocation.container), []).append(allocation)

    def rule(self, pod: PodRecord | None) -> AllocationRule:
        """The rule that decides a process's verdict on this node."""
        if pod is None:
            return AllocationRule.NO_POD
        if self.source is AllocationSource.POD_RESOURCES:
            return AllocationRule.POD_RESOURCES
        if self.source is AllocationSource.API_ONLY:
            return AllocationRule.RESOURCE_CLAIMS
        return AllocationRule.SPEC

    def verdict(
        self, pod: PodRecord | None, in_pod: bool, container: str | None, gpu_uuid: str
    ) -> AllocationVerdict:
        """The verdict for a process on ``gpu_uuid`` in ``container`` of ``pod``.

        ``in_pod`` says the agent placed the process in a pod (its cgroup path
        names one); with ``pod`` None that pod is not cached: deleted since.
        """
        if pod is None:
            return AllocationVerdict.UNKNOWN if in_pod else AllocationVerdict.NO_POD
        if self.source is AllocationSource.NONE or container is None:
            return AllocationVerdict.UNKNOWN
        key = (pod.namespace, pod.name, container)
        listed = self.kubelet.get(key)
        if self.source is AllocationSource.POD_RESOURCES and listed is None:
            return AllocationVerdict.UNKNOWN
        # (GPU UUID or None) of each GPU device: the kubelet's device-plugin ones, then DRA's.
        given = [
            d.gpu_uuid
            for d in (listed.devices if listed is not None else ())
            if d.mechanism is AllocationMechanism.DEVICE_PLUGIN and self._is_gpu(d.resource)
        ]
        given += [a.gpu_uuid for a in self.by_container.get(key, ()) if a.is_gpu]
        # The agent's rule over these devices, then what only the API server's claims tell.
        verdict = devices_verdict(given, gpu_uuid)
        if verdict is not AllocationVerdict.NOT_ALLOCATED:
            return verdict
        if key[:2] in self.unresolved_pods:
            # A claim the pod names that the cache lacks (not made yet, or already gone).
            return AllocationVerdict.UNKNOWN
        if any(a.is_gpu for a in self.by_container.get((key[0], key[1], None), ())):
            # A claim's GPU given to the pod, no container naming it: which one is unknown.
            return AllocationVerdict.UNKNOWN
        if self.source is AllocationSource.API_ONLY and (pod.gpu_request or 0) > 0:
            # Device-plugin GPUs are the kubelet's alone to know.
            return AllocationVerdict.UNKNOWN
        return AllocationVerdict.NOT_ALLOCATED

    def for_gpu(self, gpu_uuid: str) -> list[Allocation]:
        """The allocations on this GPU (or a MIG device of it)."""
        self._index_plugin()
        return self.by_gpu.get(gpu_uuid, [])

    def for_pod(self, namespace: str, name: str) -> list[Allocation]:
        """The pod's allocations, GPU or not."""
        self._index_plugin()
        return self.by_pod.get((namespace, name), [])

    def listed(self) -> list[Allocation]:
        """Every allocation of the node, the kubelet's device-plugin devices included."""
        self._index_plugin()
        return self.allocations

    def _is_gpu(self, resource: str) -> bool:
        found = self._gpu_names.get(resource)
        if found is None:
            found = self._gpu_names[resource] = self.gpus.is_gpu(resource)
        return found

    def _index_plugin(self) -> None:
        """Copy the kubelet's device-plugin devices into the listing, once."""
        if self._plugin_indexed:
            return
        self._plugin_indexed = True
        for c in self.kubelet.values():
            for d in c.devices:
                if d.mechanism is AllocationMechanism.DEVICE_PLUGIN:
                    self.add(
                        Allocation(
                            namespace=c.namespace,
                            pod=c.pod,
                            container=c.container,
                            mechanism=d.mechanism,
                            resource=d.resource,
                            device_id=d.device_id,
                            shared=d.shared,
                            gpu_uuid=d.gpu_uuid,
                            mig_device_uuid=d.mig_device_uuid,
                            is_gpu=self._is_gpu(d.resource),
                            use=self.uses.get(
                                (c.namespace, c.pod, c.container, d.resource, d.device_id)
                            ),
                        )
                    )


def _slice_gpu(device: SliceDeviceRecord | None) -> tuple[str | None, str | None]:
    """(GPU UUID, MIG UUID) of a published device; (None, None) when it names no GPU."""
    return (None, None) if device is None else device.gpu_and_mig()


def _claim_allocations(pod: PodRecord, dra: DraCatalog, gpus: GpuResources) -> Iterable[Allocation]:
    """The devices of ``pod``'s allocated claims, per container that lists the claim."""
    for pod_claim, claim_name in pod.resource_claims:
        if claim_name is None:
            continue
        claim = dra.claim(pod.namespace, claim_name)
        if claim is None:
            continue
        containers: Sequence[str | None] = [
            c.name for c in pod.containers if pod_claim in c.claims
        ] or [None]
        for device in claim.devices:
            gpu, mig = _slice_gpu(dra.device(device.driver, device.pool, device.device))
            for container in containers:
                yield Allocation(
                    namespace=pod.namespace,
                    pod=pod.name,
                    container=container,
                    mechanism=AllocationMechanism.DRA,
                    resource=f"{claim.namespace}/{claim.name}",
                    device_id=device.device,
                    shared=device.share_id is not None,
                    gpu_uuid=gpu,
                    mig_device_uuid=mig,
                    driver=device.driver,
                    pool=device.pool,
                    is_gpu=gpus.is_gpu_driver(device.driver),
                )


def _kubelet_dra(
    allocations: NodeAllocations, dra: DraCatalog | None, gpus: GpuResources
) -> Iterable[Allocation]:
    """The kubelet's DRA devices (few: device-plugin ones are judged from the records)."""
    for c in allocations.containers:
        for d in c.devices:
            if d.mechanism is not AllocationMechanism.DRA:
                continue
            gpu, mig = d.gpu_uuid, d.mig_device_uuid
            if dra is not None and d.driver and d.pool:
                # The slice knows MIG devices and other drivers' names the agent cannot map.
                published = _slice_gpu(dra.device(d.driver, d.pool, d.device_id))
                if published[0] is not None:
                    gpu, mig = published
            yield Allocation(
                namespace=c.namespace,
                pod=c.pod,
                container=c.container,
                mechanism=d.mechanism,
                resource=d.resource,
                device_id=d.device_id,
                shared=d.shared,
                gpu_uuid=gpu,
                mig_device_uuid=mig,
                driver=d.driver,
                pool=d.pool,
                is_gpu=gpus.is_gpu_driver(d.driver or ""),
                use=allocations.use_of(c, d),
            )


def _dra_key(a: Allocation) -> tuple[object, ...]:
    return (a.namespace, a.pod, a.container, a.driver, a.pool, a.device_id)


def _no_data(snapshot: NodeSnapshot | None) -> AllocationTable:
    if snapshot is None:
        reason = "the node's agent did not answer"
    elif snapshot.allocations is None:
        reason = "the node's agent sends no allocation data (an older agent)"
    else:
        reason = snapshot.allocations.reason or "the kubelet's PodResources API did not answer"
    return AllocationTable(AllocationSource.NONE, reason=reason)


def allocation_table(
    node_name: str, snapshot: NodeSnapshot | None, cluster: Cluster, rules: AllocationRules
) -> AllocationTable:
    """The node's allocations from its agent's kubelet answer and the cached claims.

    ``snapshot`` None: the agent did not answer.
    """
    dra, gpus = rules.dra, rules.gpus
    kubelet = snapshot.allocations if snapshot is not None else None
    dra_served = dra is not None and dra.served is True
    if kubelet is not None and kubelet.available:
        table = AllocationTable(AllocationSource.POD_RESOURCES, gpus=gpus)
    elif dra is not None and dra_served and dra.has_slices_on(node_name):
        # Why the kubelet's devices are missing, though the claims' are known.
        table = AllocationTable(AllocationSource.API_ONLY, _no_data(snapshot).reason, gpus=gpus)
    else:
        return _no_data(snapshot)
    merged: dict[tuple[object, ...], Allocation] = {}
    if kubelet is not None and kubelet.available:
        table.kubelet = {(c.namespace, c.pod, c.container): c for c in kubelet.containers}
        table.uses = kubelet.uses
        table._plugin_indexed = False
        for allocation in _kubelet_dra(kubelet, dra, gpus):
            merged[_dra_key(allocation)] = allocation
    for pod in cluster.pods(node_name=node_name):
        if not pod.resource_claims:
            continue
        if dra is None or not dra_served:
            table.unresolved_pods.add((pod.namespace, pod.name))
            continue
        for _, claim_name in pod.resource_claims:
            if claim_name is None or dra.claim(pod.namespace, claim_name) is None:
                table.unresolved_pods.add((pod.namespace, pod.name))
        for allocation in _claim_allocations(pod, dra, gpus):
            dra_key = _dra_key(allocation)
            known = merged.get(dra_key)
            if known is None:
                merged[dra_key] = allocation
            elif allocation.shared and not known.shared:
                # Only the claim says the device is shared; the kubelet's entry stays.
                merged[dra_key] = replace(known, shared=True)
    for allocation in merged.values():
        table.add(allocation)
    return table


def pod_gpu_request(pod: PodRecord, rules: AllocationRules) -> int | None:
    """GPU-like device-plugin requests plus the GPU devices of the pod's DRA claims.

    None when the pod asks for no GPU in any way the cache can see.
    """
    dra = rules.dra
    claimed = 0
    if dra is not None and pod.resource_claims:
        devices: set[tuple[str, str, str, str | None]] = set()
        for _, claim_name in pod.resource_claims:
            claim = dra.claim(pod.namespace, claim_name) if claim_name else None
            for d in claim.devices if claim is not None else ():
                if rules.gpus.is_gpu_driver(d.driver):
                    devices.add((d.driver, d.pool, d.device, d.share_id))
        claimed = len(devices)
    if pod.gpu_request is None and not claimed:
        return None
    return (pod.gpu_request or 0) + claimed


def judge_process(
    table: AllocationTable, pod: PodRecord | None, process: GpuProcess, gpu_uuid: str
) -> AllocationVerdict:
    """The verdict for an agent's process on ``gpu_uuid``, already joined to ``pod``."""
    ref = process.container
    container_id = ref.container_id if ref is not None else None
    container = pod.container_with_id(container_id) if pod is not None and container_id else None
    return table.verdict(
        pod,
        bool(ref is not None and ref.pod_uid),
        container.name if container is not None else None,
        gpu_uuid,
    )


class LazyTable:
    """A node's allocation table, built on first use: queries that ask no allocation field
    (the full-cluster query, most of /metrics' neighbours) never pay for the join."""

    __slots__ = ("_args", "_table")

    def __init__(
        self,
        node_name: str,
        snapshot: NodeSnapshot | None,
        cluster: Cluster,
        rules: AllocationRules,
    ) -> None:
        self._args: tuple[str, NodeSnapshot | None, Cluster, AllocationRules] | None = (
            node_name,
            snapshot,
            cluster,
            rules,
        )
        self._table: AllocationTable | None = None

    @classmethod
    def of(cls, table: AllocationTable) -> LazyTable:
        """A LazyTable over a table already built."""
        lazy = cls.__new__(cls)
        lazy._args, lazy._table = None, table
        return lazy

    def get(self) -> AllocationTable:
        """The table, built now if it was not yet."""
        table = self._table
        if table is None:
            # ``/metrics`` renders in a worker thread beside the loop's resolvers: two
            # first uses may both build it, each the same table, and one is kept.
            assert self._args is not None
            table = self._table = allocation_table(*self._args)
        return table

    def verdict(
        self, pod: PodRecord | None, in_pod: bool, container_id: str | None, gpu_uuid: str
    ) -> AllocationVerdict:
        """``AllocationTable.verdict`` for a process known by its pod and container ID."""
        container = (
            pod.container_with_id(container_id) if pod is not None and container_id else None
        )
        return self.get().verdict(
            pod, in_pod, container.name if container is not None else None, gpu_uuid
        )


def use_shown(allocation: Allocation) -> tuple[AllocationUse, float | None, float | None]:
    """(use, idle since in Unix seconds, idle seconds) as every surface shows them: UNKNOWN
    where the agent did not judge; idle since only while IDLE or UNUSED; idle seconds 0 while
    ACTIVE, None while UNKNOWN."""
    state = allocation.use
    if state is None or state.use is AllocationUse.UNKNOWN:
        return AllocationUse.UNKNOWN, None, None
    if state.use not in IDLE_USES:
        return state.use, None, 0.0
    return state.use, state.idle_since, state.idle_seconds

"""Slim, immutable records of the Kubernetes objects the graph needs.

The Kubernetes cache builds these from API JSON and keeps nothing else, so a
cluster of 100k pods stays small. Resolvers read them directly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ContainerRecord:
    """One container of a pod, from spec and status."""

    name: str
    image: str | None
    # Runtime prefix ("containerd://", "cri-o://", "docker://") stripped.
    container_id: str | None
    init: bool = False
    # The pod-level claim names this container lists in resources.claims.
    claims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodRecord:
    """The fields of a pod that the graph serves."""

    uid: str
    namespace: str
    name: str
    node_name: str | None
    phase: str | None
    pod_ip: str | None
    labels: dict[str, str]
    # Sum of the containers' nvidia.com/gpu limits; None when none asks for one.
    gpu_request: int | None
    containers: tuple[ContainerRecord, ...]
    resource_version: str = ""
    # Each spec.resourceClaims entry: (its name in the pod, the ResourceClaim's name), the
    # latter from the spec or, for a template's claim, status.resourceClaimStatuses (None
    # until the claim exists).
    resource_claims: tuple[tuple[str, str | None], ...] = ()

    def container_with_id(self, container_id: str) -> ContainerRecord | None:
        """The container whose runtime ID (prefix stripped) is ``container_id``, if any."""
        for container in self.containers:
            if container.container_id == container_id:
                return container
        return None


@dataclass(frozen=True, slots=True)
class PodSizes:
    """How many pods a cluster (or a caller's view of it) holds, for the cost estimate."""

    pods: int
    # The most pods bound to one node.
    pods_per_node: int
    # The most containers in one pod.
    containers_per_pod: int

    @classmethod
    def of(cls, pods: Iterable[PodRecord]) -> PodSizes:
        """The sizes of ``pods``, counted one by one."""
        count = 0
        per_node: Counter[str] = Counter()
        containers = 0
        for pod in pods:
            count += 1
            if pod.node_name:
                per_node[pod.node_name] += 1
            containers = max(containers, len(pod.containers))
        return cls(count, max(per_node.values(), default=0), containers)


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """The fields of a node that the graph serves."""

    name: str
    uid: str
    internal_ip: str | None
    labels: dict[str, str]
    gpu_capacity: int | None
    gpu_allocatable: int | None
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class ClaimDeviceRecord:
    """One device allocated to a ResourceClaim (status.allocation.devices.results)."""

    driver: str
    pool: str
    device: str
    # Set when the device is shared between claims (consumable capacity).
    share_id: str | None = None
    consumed_capacity: bool = False
    # What the claim consumes of the device's capacities: (capacity name, amount), amounts
    # in the quantity's base unit (bytes, counts).
    consumed: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceClaimRecord:
    """The fields of a ResourceClaim that the allocation join needs."""

    namespace: str
    name: str
    uid: str
    devices: tuple[ClaimDeviceRecord, ...]
    # status.reservedFor pods: (name, uid).
    reserved_for: tuple[tuple[str, str], ...] = ()
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class SliceDeviceRecord:
    """One device of a ResourceSlice, by the attributes that tie it to a GPU."""

    name: str
    uuid: str | None
    parent_uuid: str | None = None
    type: str | None = None
    product_name: str | None = None
    # The device's capacities (spec.devices[].capacity[name].value): (name, amount).
    capacity: tuple[tuple[str, float], ...] = ()

    def gpu_and_mig(self) -> tuple[str | None, str | None]:
        """(GPU UUID, MIG UUID): a MIG device is published with its parent GPU's UUID."""
        if self.parent_uuid:
            return self.parent_uuid, self.uuid
        return self.uuid, None


@dataclass(frozen=True, slots=True)
class ResourceSliceRecord:
    """The devices one driver publishes for one pool (usually one node)."""

    name: str
    driver: str
    pool: str
    node_name: str | None
    devices: tuple[SliceDeviceRecord, ...]
    resource_version: str = ""

"""ResourceClaims and ResourceSlices as the API server returns them (resource.k8s.io).

``version`` picks the shape: ``v1beta1`` nests a device's attributes under
``basic``; ``v1beta2`` and ``v1`` do not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .manifests import pod_uid_for

__all__ = ["ClaimDevice", "SliceDevice", "make_resource_claim", "make_resource_slice"]

_CREATED = "2025-01-15T08:30:00Z"
NVIDIA_DRIVER = "gpu.nvidia.com"


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One allocated device of a claim; ``share_id`` set for a shared (consumable) one, which
    consumes ``consumed`` of the device's capacities (20Gi of memory unless given)."""

    device: str
    pool: str
    driver: str = NVIDIA_DRIVER
    request: str = "gpu"
    share_id: str | None = None
    consumed: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One published device: NVIDIA's driver sets uuid (parentUUID for MIG), type, productName;
    ``capacity`` (name -> quantity) what claims may consume of it."""

    name: str
    uuid: str
    type: str = "gpu"
    product_name: str = "NVIDIA H200"
    parent_uuid: str | None = None
    capacity: Mapping[str, str] | None = None


def make_resource_claim(
    namespace: str,
    name: str,
    devices: Sequence[ClaimDevice],
    *,
    reserved_for: Sequence[str] = (),
    template: str | None = None,
) -> dict[str, Any]:
    """An allocated claim, reserved for the named pods (of ``namespace``)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "creationTimestamp": _CREATED,
    }
    if template is not None:
        metadata["annotations"] = {"resource.kubernetes.io/pod-claim-name": template}
    results = []
    for d in devices:
        result: dict[str, Any] = {
            "request": d.request,
            "driver": d.driver,
            "pool": d.pool,
            "device": d.device,
        }
        if d.share_id is not None:
            result["shareID"] = d.share_id
            result["consumedCapacity"] = dict(d.consumed or {"memory": "20Gi"})
        results.append(result)
    status: dict[str, Any] = {}
    if results:
        status["allocation"] = {"devices": {"results": results}}
    if reserved_for:
        status["reservedFor"] = [
            {"resource": "pods", "name": pod, "uid": pod_uid_for(namespace, pod)}
            for pod in reserved_for
        ]
    return {
        "metadata": metadata,
        "spec": {"devices": {"requests": [{"name": "gpu"}]}},
        "status": status,
    }


def _attributes(device: SliceDevice) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "uuid": {"string": device.uuid},
        "type": {"string": device.type},
        "productName": {"string": device.product_name},
    }
    if device.parent_uuid is not None:
        attributes["parentUUID"] = {"string": device.parent_uuid}
    return attributes


def make_resource_slice(
    node: str,
    devices: Sequence[SliceDevice],
    *,
    driver: str = NVIDIA_DRIVER,
    pool: str | None = None,
    version: str = "v1",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The slice a DRA driver publishes for ``node``'s devices (pool named after the node)."""
    served = []
    for device in devices:
        fields: dict[str, Any] = {"attributes": _attributes(device)}
        if device.capacity is not None:
            fields["capacity"] = {name: {"value": q} for name, q in device.capacity.items()}
        if version == "v1beta1":
            served.append({"name": device.name, "basic": fields})
        else:
            served.append({"name": device.name, **fields})
    return {
        "metadata": {
            "name": f"{node}-{driver}",
            "creationTimestamp": _CREATED,
            **(extra or {}),
        },
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
            "devices": served,
        },
    }

"""Slim records from Kubernetes API JSON.

The cache keeps only what the graph serves. Every string kept is copied out of
the parsed document, and the repeated ones (namespaces, node names, images,
label keys and values) are interned: a record that held on to the parser's own
string objects would keep the memory arenas of the whole parsed document
alive, which costs tens of kilobytes per pod instead of a few hundred bytes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from graph_schema.gpu_resources import GpuResources
from graph_schema.records import (
    ClaimDeviceRecord,
    ContainerRecord,
    NodeRecord,
    PodRecord,
    ResourceClaimRecord,
    ResourceSliceRecord,
    SliceDeviceRecord,
)

GPU_RESOURCE = "nvidia.com/gpu"
_DEFAULT_GPU_RESOURCES = GpuResources()

# Pods of one ReplicaSet or StatefulSet carry identical labels; they share one dict.
_LABEL_MEMO_LIMIT = 65_536
_label_memo: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
_EMPTY_LABELS: dict[str, str] = {}


class ParseError(ValueError):
    """A Kubernetes object lacks a field the cache needs."""


def _own(value: str) -> str:
    # encode/decode makes a fresh string object that does not share the
    # parser's allocations.
    return value.encode().decode()


def _shared(value: str) -> str:
    return sys.intern(_own(value))


def _opt_own(value: Any) -> str | None:
    return _own(value) if isinstance(value, str) and value else None


def _opt_shared(value: Any) -> str | None:
    return _shared(value) if isinstance(value, str) and value else None


def strip_runtime_prefix(container_id: str) -> str:
    """A container ID without its runtime prefix (``containerd://``, ``cri-o://``, ``docker://``…)."""
    # Any scheme: the agent only ever reports the bare ID, whatever the runtime.
    return container_id.split("://", 1)[-1]


def _labels(raw: Any) -> dict[str, str]:
    if not raw or not isinstance(raw, Mapping):
        return _EMPTY_LABELS
    key = tuple(sorted((k, v) for k, v in raw.items() if isinstance(v, str)))
    found = _label_memo.get(key)
    if found is not None:
        return found
    labels = {_shared(k): _shared(v) for k, v in key}
    if len(_label_memo) >= _LABEL_MEMO_LIMIT:
        _label_memo.clear()
    # The memo key must not hold the parser's strings either.
    _label_memo[tuple(labels.items())] = labels
    return labels


def _quantity(raw: Any) -> int | None:
    """An integer resource quantity ("2", 2); None for anything else."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str):
        try:
            return int(raw)
        except ValueError:
            return None
    return None


def _gpu_limit(container: Mapping[str, Any], gpus: GpuResources) -> int | None:
    # Each GPU-like resource the container names counts, limits first (extended
    # resources must have limit == request), else requests.
    resources = container.get("resources") or {}
    found: dict[str, int | None] = {}
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            if name not in found and isinstance(name, str) and gpus.is_gpu(name):
                found[name] = _quantity(value)
    if not found:
        return None
    counted = [n for n in found.values() if n is not None]
    return sum(counted) if counted else None


def _gpu_request(spec: Mapping[str, Any], gpus: GpuResources) -> int | None:
    # The scheduler reserves max(sum of app containers, largest init container).
    app = [_gpu_limit(c, gpus) for c in spec.get("containers") or ()]
    init = [_gpu_limit(c, gpus) for c in spec.get("initContainers") or ()]
    app_asks = [n for n in app if n is not None]
    init_asks = [n for n in init if n is not None]
    if not app_asks and not init_asks:
        return None
    return max(sum(app_asks), max(init_asks, default=0))


def _container_ids(statuses: Any) -> dict[str, str]:
    ids: dict[str, str] = {}
    for status in statuses or ():
        name = status.get("name")
        cid = status.get("containerID")
        if isinstance(name, str) and isinstance(cid, str) and cid:
            ids[name] = strip_runtime_prefix(cid)
    return ids


def _containers(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[ContainerRecord, ...]:
    out: list[ContainerRecord] = []
    for spec_key, status_key, init in (
        ("initContainers", "initContainerStatuses", True),
        ("containers", "containerStatuses", False),
    ):
        ids = _container_ids(status.get(status_key))
        for container in spec.get(spec_key) or ():
            name = container.get("name")
            if not isinstance(name, str):
                continue
            cid = ids.get(name)
            out.append(
                ContainerRecord(
                    name=_shared(name),
                    image=_opt_shared(container.get("image")),
                    container_id=_own(cid) if cid else None,
                    init=init,
                    claims=_container_claims(container),
                )
            )
    return tuple(out)


def _container_claims(container: Mapping[str, Any]) -> tuple[str, ...]:
    claims = (container.get("resources") or {}).get("claims") or ()
    return tuple(
        _shared(c["name"])
        for c in claims
        if isinstance(c, Mapping) and isinstance(c.get("name"), str)
    )


def _resource_claims(
    spec: Mapping[str, Any], status: Mapping[str, Any]
) -> tuple[tuple[str, str | None], ...]:
    generated: dict[str, str] = {}
    for entry in status.get("resourceClaimStatuses") or ():
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            claim = entry.get("resourceClaimName")
            if isinstance(claim, str) and claim:
                generated[entry["name"]] = claim
    out: list[tuple[str, str | None]] = []
    for entry in spec.get("resourceClaims") or ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        name = entry["name"]
        direct = entry.get("resourceClaimName")
        claim = direct if isinstance(direct, str) and direct else generated.get(name)
        out.append((_shared(name), _own(claim) if claim else None))
    return tuple(out)


def _metadata(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        raise ParseError(f"{kind} without metadata")
    if not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise ParseError(f"{kind} without metadata.name")
    return metadata


def pod_record(obj: Mapping[str, Any], gpus: GpuResources = _DEFAULT_GPU_RESOURCES) -> PodRecord:
    """The slim record of a pod from its API JSON; ParseError if it lacks name or UID.

    ``gpus`` names the resources counted in ``gpu_request``.
    """
    metadata = _metadata(obj, "pod")
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ParseError(f"pod {metadata['name']!r} without metadata.uid")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return PodRecord(
        uid=_own(uid),
        namespace=_shared(metadata.get("namespace") or "default"),
        name=_own(metadata["name"]),
        node_name=_opt_shared(spec.get("nodeName")),
        phase=_opt_shared(status.get("phase")),
        pod_ip=_opt_own(status.get("podIP")),
        labels=_labels(metadata.get("labels")),
        gpu_request=_gpu_request(spec, gpus),
        containers=_containers(spec, status),
        resource_version=_own(metadata.get("resourceVersion") or ""),
        resource_claims=_resource_claims(spec, status),
    )


def node_record(obj: Mapping[str, Any]) -> NodeRecord:
    """The slim record of a node from its API JSON; ParseError if it lacks a name."""
    metadata = _metadata(obj, "node")
    status = obj.get("status") or {}
    internal_ip = None
    for address in status.get("addresses") or ():
        if address.get("type") == "InternalIP" and address.get("address"):
            internal_ip = _own(address["address"])
            break
    return NodeRecord(
        name=_shared(metadata["name"]),
        uid=_own(metadata.get("uid") or ""),
        internal_ip=internal_ip,
        labels=_labels(metadata.get("labels")),
        gpu_capacity=_quantity((status.get("capacity") or {}).get(GPU_RESOURCE)),
        gpu_allocatable=_quantity((status.get("allocatable") or {}).get(GPU_RESOURCE)),
        resource_version=_own(metadata.get("resourceVersion") or ""),
    )


def claim_record(obj: Mapping[str, Any]) -> ResourceClaimRecord:
    """A ResourceClaim's allocated devices and reserving pods (any of v1, v1beta2, v1beta1)."""
    metadata = _metadata(obj, "resourceclaim")
    status = obj.get("status") or {}
    allocation = status.get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or ()
    devices = []
    for result in results:
        if not isinstance(result, Mapping):
            continue
        driver, pool, device = result.get("driver"), result.get("pool"), result.get("device")
        if not (isinstance(driver, str) and isinstance(pool, str) and isinstance(device, str)):
            raise ParseError(
                f"resourceclaim {metadata['name']!r}: a result lacks driver/pool/device"
            )
        devices.append(
            ClaimDeviceRecord(
                driver=_shared(driver),
                pool=_shared(pool),
                device=_shared(device),
                share_id=_opt_own(result.get("shareID")),
                consumed_capacity=bool(result.get("consumedCapacity")),
                consumed=_amounts(result.get("consumedCapacity"), nested=False),
            )
        )
    reserved = tuple(
        (_own(r["name"]), _own(r.get("uid") or ""))
        for r in status.get("reservedFor") or ()
        if isinstance(r, Mapping)
        and (r.get("resource") or "pods") == "pods"
        and not r.get("apiGroup")
        and isinstance(r.get("name"), str)
    )
    return ResourceClaimRecord(
        namespace=_shared(metadata.get("namespace") or "default"),
        name=_own(metadata["name"]),
        uid=_own(metadata.get("uid") or ""),
        devices=tuple(devices),
        reserved_for=reserved,
        resource_version=_own(metadata.get("resourceVersion") or ""),
    )


def quantity_amount(raw: Any) -> float | None:
    """A Kubernetes quantity ("40Gi", "500m", 132) in its base unit; None unless finite."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        return None
    try:
        amount = float(parse_quantity(raw))
    except (ValueError, ArithmeticError):
        return None
    return amount if math.isfinite(amount) else None


def _amounts(raw: Any, *, nested: bool) -> tuple[tuple[str, float], ...]:
    """(name, amount) of each readable entry of a capacity map: a claim's consumedCapacity
    (name -> quantity), or a device's capacity (``nested``: name -> {"value": quantity})."""
    if not isinstance(raw, Mapping):
        return ()
    found = []
    for name, value in raw.items():
        if nested:
            value = value.get("value") if isinstance(value, Mapping) else None
        amount = quantity_amount(value)
        if isinstance(name, str) and name and amount is not None:
            found.append((_shared(name), amount))
    return tuple(found)


def _attribute(attributes: Any, name: str) -> str | None:
    # An attribute is {"string": …} (or int/bool/version); its key may carry the driver's
    # domain ("gpu.nvidia.com/uuid").
    if not isinstance(attributes, Mapping):
        return None
    for key, value in attributes.items():
        if isinstance(key, str) and key.rsplit("/", 1)[-1] == name and isinstance(value, Mapping):
            for kind in ("string", "version"):
                found = value.get(kind)
                if isinstance(found, str) and found:
                    return _own(found)
    return None


def slice_record(obj: Mapping[str, Any]) -> ResourceSliceRecord:
    """A ResourceSlice's devices by UUID, parent UUID, type and product name.

    v1beta1 nests a device's attributes under ``basic``; v1beta2 and v1 do not.
    """
    metadata = _metadata(obj, "resourceslice")
    spec = obj.get("spec") or {}
    driver = spec.get("driver")
    pool = (spec.get("pool") or {}).get("name")
    if not isinstance(driver, str) or not isinstance(pool, str):
        raise ParseError(f"resourceslice {metadata['name']!r} without spec.driver or pool.name")
    devices = []
    for device in spec.get("devices") or ():
        if not isinstance(device, Mapping) or not isinstance(device.get("name"), str):
            continue
        attributes = device.get("attributes")
        capacity = device.get("capacity")
        basic = device.get("basic")
        if isinstance(basic, Mapping):
            attributes = basic.get("attributes") if attributes is None else attributes
            capacity = basic.get("capacity") if capacity is None else capacity
        devices.append(
            SliceDeviceRecord(
                name=_shared(device["name"]),
                uuid=_attribute(attributes, "uuid"),
                parent_uuid=_attribute(attributes, "parentUUID"),
                type=_opt_shared(_attribute(attributes, "type")),
                product_name=_opt_shared(_attribute(attributes, "productName")),
                capacity=_amounts(capacity, nested=True),
            )
        )
    return ResourceSliceRecord(
        name=_own(metadata["name"]),
        driver=_shared(driver),
        pool=_shared(pool),
        node_name=_opt_shared(spec.get("nodeName")),
        devices=tuple(devices),
        resource_version=_own(metadata.get("resourceVersion") or ""),
    )


def resource_version(obj: Any) -> str | None:
    """``metadata.resourceVersion`` of an object or list, if present."""
    if not isinstance(obj, Mapping):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    rv = metadata.get("resourceVersion")
    return rv if isinstance(rv, str) and rv else None

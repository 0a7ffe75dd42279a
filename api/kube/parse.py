"""Slim records from Kubernetes API JSON.

The cache keeps only what the graph serves. Every string kept is copied out of
the parsed document, and the repeated ones (namespaces, node names, images,
label keys and values) are interned: a record that held on to the parser's own
string objects would keep the memory arenas of the whole parsed document
alive, which costs tens of kilobytes per pod instead of a few hundred bytes.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from graph_schema.records import ContainerRecord, NodeRecord, PodRecord

GPU_RESOURCE = "nvidia.com/gpu"

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


def _gpu_limit(container: Mapping[str, Any]) -> int | None:
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        value = (resources.get(section) or {}).get(GPU_RESOURCE)
        if value is not None:
            return _quantity(value)
    return None


def _gpu_request(spec: Mapping[str, Any]) -> int | None:
    # The scheduler reserves max(sum of app containers, largest init container).
    app = [_gpu_limit(c) for c in spec.get("containers") or ()]
    init = [_gpu_limit(c) for c in spec.get("initContainers") or ()]
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
                )
            )
    return tuple(out)


def _metadata(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(metadata, Mapping):
        raise ParseError(f"{kind} without metadata")
    if not isinstance(metadata.get("name"), str) or not metadata["name"]:
        raise ParseError(f"{kind} without metadata.name")
    return metadata


def pod_record(obj: Mapping[str, Any]) -> PodRecord:
    """The slim record of a pod from its API JSON; ParseError if it lacks name or UID."""
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
        gpu_request=_gpu_request(spec),
        containers=_containers(spec, status),
        resource_version=_own(metadata.get("resourceVersion") or ""),
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


def resource_version(obj: Any) -> str | None:
    """``metadata.resourceVersion`` of an object or list, if present."""
    if not isinstance(obj, Mapping):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    rv = metadata.get("resourceVersion")
    return rv if isinstance(rv, str) and rv else None

"""Server-side printing for the stub API server: ``meta.k8s.io/v1`` Tables of pods and nodes.

kubectl's human-readable ``get`` asks for
``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
columns the server chose. The columns and cells here follow the API server's
own printers (``pkg/printers/internalversion``): NAME READY STATUS RESTARTS
AGE for pods, NAME STATUS ROLES AGE VERSION for nodes, plus the ``-o wide``
ones at priority 1. Each row carries the object as ``includeObject`` asks:
its metadata (the default), the whole object, or nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import orjson

__all__ = [
    "human_duration",
    "include_object",
    "list_table",
    "object_table",
    "wants_table",
]

_TABLE_MEDIA = ("as=table", "g=meta.k8s.io")

Cells = Callable[[Mapping[str, Any], float], list[Any]]


def wants_table(accept: str | None) -> bool:
    """Whether an Accept header asks for a ``meta.k8s.io`` Table (kubectl's human output)."""
    for media in (accept or "").lower().split(","):
        params = {p.strip() for p in media.split(";")}
        if all(p in params for p in _TABLE_MEDIA):
            return True
    return False


def include_object(params: Mapping[str, str]) -> str:
    """The ``includeObject`` asked for: ``Metadata`` (the default), ``Object`` or ``None``."""
    include = params.get("includeObject") or "Metadata"
    if include not in ("Metadata", "Object", "None"):
        raise ValueError(f'includeObject: Unsupported value: "{include}"')
    return include


def human_duration(seconds: float) -> str:
    """A duration as kubectl's AGE column writes it (apimachinery's ``HumanDuration``)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = divmod(hours // 24, 365)
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def _age(metadata: Mapping[str, Any], now: float) -> str:
    created = metadata.get("creationTimestamp")
    if not isinstance(created, str) or not created:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "<unknown>"
    return human_duration(now - then)


def _column(name: str, kind: str, description: str, priority: int = 0) -> dict[str, Any]:
    column: dict[str, Any] = {
        "name": name,
        "type": kind,
        "format": "name" if name == "Name" else "",
        "description": description,
        "priority": priority,
    }
    return column


_POD_COLUMNS = [
    _column("Name", "string", "Name must be unique within a namespace."),
    _column("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "string", "The aggregate status of the containers in this pod."),
    _column("Restarts", "string", "The number of times the containers in this pod have restarted."),
    _column("Age", "string", "CreationTimestamp is a timestamp representing the server time."),
    _column("IP", "string", "IP address allocated to the pod.", 1),
    _column("Node", "string", "Name of the Node this pod is scheduled on.", 1),
    _column("Nominated Node", "string", "The node the scheduler nominated for this pod.", 1),
    _column("Readiness Gates", "string", "Pod readiness gates that must be true.", 1),
]

_NODE_COLUMNS = [
    _column("Name", "string", "Name must be unique within a namespace."),
    _column("Status", "string", "The status of the node"),
    _column("Roles", "string", "The roles of the node"),
    _column("Age", "string", "CreationTimestamp is a timestamp representing the server time."),
    _column("Version", "string", "Kubelet Version reported by the node."),
    _column("Internal-IP", "string", "List of internal IPs in the node.", 1),
    _column("External-IP", "string", "List of external IPs in the node.", 1),
    _column("OS-Image", "string", "OS image reported by the node.", 1),
    _column("Kernel-Version", "string", "Kernel version reported by the node.", 1),
    _column("Container-Runtime", "string", "Container runtime reported by the node.", 1),
]


def _pod_status(pod: Mapping[str, Any]) -> str:
    """The STATUS cell: the phase, overridden by the reason a container is not running."""
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    running = False
    for container in reversed(status.get("containerStatuses") or []):
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        terminated = state.get("terminated")
        if waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated is not None:
            reason = terminated.get("reason") or (
                f"Signal:{terminated['signal']}"
                if terminated.get("signal")
                else f"ExitCode:{terminated.get('exitCode', 0)}"
            )
        elif "running" in state and container.get("ready"):
            running = True
    if reason == "Completed" and running:
        reason = "Running"
    if metadata.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return str(reason)


def _pod_cells(pod: Mapping[str, Any], now: float) -> list[Any]:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready") and "running" in (c.get("state") or {}))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    gates = spec.get("readinessGates") or []
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    gates_cell = (
        f"{sum(1 for g in gates if conditions.get(g.get('conditionType')) == 'True')}/{len(gates)}"
        if gates
        else "<none>"
    )
    return [
        metadata.get("name", ""),
        f"{ready}/{len(spec.get('containers') or [])}",
        _pod_status(pod),
        str(restarts),
        _age(metadata, now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gates_cell,
    ]


def _node_cells(node: Mapping[str, Any], now: float) -> list[Any]:
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    ready = {c.get("type"): c.get("status") for c in status.get("conditions") or []}.get("Ready")
    state = {"True": "Ready", "False": "NotReady"}.get(str(ready), "Unknown")
    if spec.get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = metadata.get("labels") or {}
    roles = {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")}
    roles.add(labels.get("kubernetes.io/role") or "")
    info = status.get("nodeInfo") or {}

    def addresses(kind: str) -> str:
        found = [
            a.get("address", "") for a in status.get("addresses") or [] if a.get("type") == kind
        ]
        return ",".join(found) or "<none>"

    return [
        metadata.get("name", ""),
        state,
        ",".join(sorted(roles - {""})) or "<none>",
        _age(metadata, now),
        info.get("kubeletVersion", ""),
        addresses("InternalIP"),
        addresses("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


_NAMESPACE_COLUMNS = [
    _column("Name", "string", "Name must be unique within a namespace."),
    _column("Status", "string", "The status of the namespace"),
    _column("Age", "string", "CreationTimestamp is a timestamp representing the server time."),
]


def _namespace_cells(namespace: Mapping[str, Any], now: float) -> list[Any]:
    metadata = namespace.get("metadata") or {}
    phase = (namespace.get("status") or {}).get("phase", "")
    return [metadata.get("name", ""), phase, _age(metadata, now)]


_CLAIM_COLUMNS = [
    _column("Name", "string", "Name of the claim."),
    _column("State", "string", "Whether the claim is allocated and reserved."),
    _column("Age", "string", "Time since the claim was created."),
]
_SLICE_COLUMNS = [
    _column("Name", "string", "Name of the slice."),
    _column("Node", "string", "The node whose devices it publishes."),
    _column("Driver", "string", "The DRA driver that publishes it."),
    _column("Pool", "string", "The pool of devices it belongs to."),
    _column("Age", "string", "Time since the slice was created."),
]


def _claim_cells(claim: Mapping[str, Any], now: float) -> list[Any]:
    # kube-apiserver's printer: "pending", or "allocated" and/or "reserved" joined by ",".
    status = claim.get("status") or {}
    states = [
        s
        for s, key in (("allocated", "allocation"), ("reserved", "reservedFor"))
        if status.get(key)
    ]
    metadata = claim.get("metadata") or {}
    return [metadata.get("name", ""), ",".join(states) or "pending", _age(metadata, now)]


def _slice_cells(item: Mapping[str, Any], now: float) -> list[Any]:
    metadata = item.get("metadata") or {}
    spec = item.get("spec") or {}
    return [
        metadata.get("name", ""),
        spec.get("nodeName") or "",
        spec.get("driver") or "",
        (spec.get("pool") or {}).get("name") or "",
        _age(metadata, now),
    ]


_PRINTERS: dict[str, tuple[list[dict[str, Any]], Cells]] = {
    "Pod": (_POD_COLUMNS, _pod_cells),
    "Node": (_NODE_COLUMNS, _node_cells),
    "Namespace": (_NAMESPACE_COLUMNS, _namespace_cells),
    "ResourceClaim": (_CLAIM_COLUMNS, _claim_cells),
    "ResourceSlice": (_SLICE_COLUMNS, _slice_cells),
}


def _row_object(obj: Mapping[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return dict(obj)
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def _table(
    kind: str,
    objects: list[Mapping[str, Any]],
    metadata: Mapping[str, Any],
    include: str,
    now: float,
) -> bytes:
    columns, cells = _PRINTERS[kind]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": cells(obj, now)}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    table = {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(metadata),
        "columnDefinitions": columns,
        "rows": rows,
    }
    return orjson.dumps(table)


def list_table(kind: str, list_body: bytes, include: str, now: float) -> bytes:
    """A ``PodList``/``NodeList`` body as a Table of ``kind`` rows, keeping its list metadata."""
    listed = orjson.loads(list_body)
    return _table(kind, listed.get("items") or [], listed.get("metadata") or {}, include, now)


def object_table(kind: str, raw: bytes, include: str, now: float) -> bytes:
    """One served object as a one-row Table (a single ``get`` or one watch event)."""
    obj = orjson.loads(raw)
    version = (obj.get("metadata") or {}).get("resourceVersion", "")
    return _table(kind, [obj], {"resourceVersion": version}, include, now)

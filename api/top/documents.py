"""The stable ``-o json`` / ``-o yaml`` shapes of each view (documented in docs/top.md)."""

from __future__ import annotations

from typing import Any

from .marks import Mark
from .model import (
    DownNode,
    NamespaceRow,
    NodeRow,
    PodRow,
    Snapshot,
    namespace_rows,
    node_rows,
    pod_rows,
    process_marks,
)

VERSION = "gpugraph.top/v1"


def _down(down: list[DownNode]) -> list[dict[str, Any]]:
    return [{"node": d.node, "reason": d.reason} for d in down]


def flag_words(marks: tuple[Mark, ...] | None) -> list[str] | None:
    """The ``flags`` of an entry: the words the tables show; None where they are not known."""
    return None if marks is None else [mark.word for mark in marks]


def gpus_document(snapshot: Snapshot) -> dict[str, Any]:
    """``gpugraph top -o json``: every GPU with its processes, and the down nodes."""
    return {
        "apiVersion": VERSION,
        "kind": "GpuList",
        "gpus": [
            {
                "node": g.node,
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "utilizationPercent": g.utilization,
                "memoryUsedBytes": g.memory_used,
                "memoryTotalBytes": g.memory_total,
                "temperatureC": g.temperature,
                "error": g.error,
                "flags": flag_words(g.marks),
                "pods": g.pods,
                "processes": [
                    {
                        "pid": p.pid,
                        "name": p.name,
                        "pod": None
                        if p.pod is None
                        else {"namespace": p.pod.namespace, "name": p.pod.name},
                        "container": p.container,
                        "memoryBytes": p.memory_bytes,
                        "smPercent": p.sm_percent,
                        "unrequested": p.unrequested,
                        "allocation": p.allocation,
                        "flags": flag_words(process_marks(p, g.mig)),
                    }
                    for p in g.processes
                ],
            }
            for g in snapshot.gpus
        ],
        "downNodes": _down(snapshot.down),
        "errors": list(snapshot.events.errors),
    }


def pod_entry(row: PodRow) -> dict[str, Any]:
    """One pod of ``gpugraph top pods -o json``."""
    return {
        "namespace": row.namespace,
        "name": row.name,
        "node": row.node,
        "gpusRequested": row.gpus_requested,
        "gpusUsed": row.gpus_used,
        "memoryBytes": row.memory_bytes,
        "smPercent": row.sm_percent,
        "unrequested": row.unrequested,
        "flags": flag_words(row.marks),
    }


def pods_document(snapshot: Snapshot, sort_by: str) -> dict[str, Any]:
    """``gpugraph top pods -o json``."""
    return {
        "apiVersion": VERSION,
        "kind": "PodList",
        "pods": [pod_entry(r) for r in pod_rows(snapshot, sort_by)],
        "downNodes": _down(snapshot.down),
        "errors": list(snapshot.events.errors),
    }


def node_entry(row: NodeRow) -> dict[str, Any]:
    """One node of ``gpugraph top nodes -o json``."""
    return {
        "name": row.name,
        "status": "down" if row.down_reason else "up",
        "reason": row.down_reason,
        "gpus": row.gpus,
        "utilizationPercent": row.utilization,
        "memoryUsedBytes": row.memory_used,
        "memoryTotalBytes": row.memory_total,
        "maxTemperatureC": row.max_temperature,
        "pods": row.pods,
        "processes": row.processes,
        "flags": flag_words(row.marks),
    }


def nodes_document(snapshot: Snapshot, sort_by: str) -> dict[str, Any]:
    """``gpugraph top nodes -o json``."""
    return {
        "apiVersion": VERSION,
        "kind": "NodeList",
        "nodes": [node_entry(r) for r in node_rows(snapshot, sort_by)],
        "errors": list(snapshot.events.errors),
    }


def namespace_entry(row: NamespaceRow) -> dict[str, Any]:
    """One namespace of ``gpugraph top namespaces -o json``."""
    return {
        "namespace": row.namespace,
        "pods": row.pods,
        "podsUnknown": row.pods_unknown,
        "gpusRequested": row.gpus_requested,
        "gpusUsed": row.gpus_used,
        "memoryBytes": row.memory_bytes,
        "smPercent": row.sm_percent,
        "flags": flag_words(row.marks),
    }


def namespaces_document(snapshot: Snapshot, sort_by: str) -> dict[str, Any]:
    """``gpugraph top namespaces -o json``."""
    return {
        "apiVersion": VERSION,
        "kind": "NamespaceList",
        "namespaces": [namespace_entry(r) for r in namespace_rows(snapshot, sort_by)],
        "downNodes": _down(snapshot.down),
        "errors": list(snapshot.events.errors),
    }


def document(view: str, snapshot: Snapshot, sort_by: str) -> dict[str, Any]:
    """The document of ``view`` (gpus, pods, nodes or namespaces)."""
    if view == "namespaces":
        return namespaces_document(snapshot, sort_by)
    if view == "pods":
        return pods_document(snapshot, sort_by)
    if view == "nodes":
        return nodes_document(snapshot, sort_by)
    return gpus_document(snapshot)

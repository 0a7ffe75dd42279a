"""Kubernetes ``Status`` objects: how the API server says no."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["gone_event", "not_found", "read_only", "status"]


def status(
    code: int, reason: str, message: str, details: dict[str, str] | None = None
) -> dict[str, Any]:
    """A ``Status`` object with ``status: Failure``, as the API server sends with an error code."""
    failure: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        failure["details"] = details
    return failure


def not_found(resource: str, name: str) -> dict[str, Any]:
    """The 404 Status for a missing named object, worded as the API server words it."""
    return status(
        404, "NotFound", f'{resource} "{name}" not found', {"name": name, "kind": resource}
    )


def read_only() -> dict[str, Any]:
    """The 405 Status for a write: the stub's objects are read-only."""
    return status(405, "MethodNotAllowed", "the stub API server is read-only")


def gone_event(rv: int, compacted: int) -> bytes:
    """The watch ``ERROR`` event line for a resourceVersion older than the kept history."""
    failure = status(410, "Expired", f"too old resource version: {rv} ({compacted})")
    return orjson.dumps({"type": "ERROR", "object": failure}) + b"\n"

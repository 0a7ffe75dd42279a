"""Kubernetes ``Status`` objects: how the API server says no."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["gone_event", "status"]


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``Status`` object with ``status: Failure``, as the API server sends with an error code."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def gone_event(rv: int, compacted: int) -> bytes:
    """The watch ``ERROR`` event line for a resourceVersion older than the kept history."""
    failure = status(410, "Expired", f"too old resource version: {rv} ({compacted})")
    return orjson.dumps({"type": "ERROR", "object": failure}) + b"\n"

"""JSON responses for the server's plain HTTP endpoints."""

from __future__ import annotations

import orjson
from starlette.responses import Response

__all__ = ["json_response"]


def json_response(status: int, body: object) -> Response:
    """``body`` as JSON (orjson: fast, and strict about what is serializable)."""
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")

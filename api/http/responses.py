"""JSON responses for the server's plain HTTP endpoints, and GraphQL's refusals of a request."""

from __future__ import annotations

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response

from .response_media import GRAPHQL_RESPONSE_JSON, wants_graphql_response

__all__ = ["graphql_error_response", "json_response"]


def json_response(status: int, body: object) -> Response:
    """``body`` as JSON (orjson: fast, and strict about what is serializable)."""
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def graphql_error_response(status: int, message: str, headers: Headers) -> Response:
    """A request refused before it is a GraphQL request (not JSON, another media type, no
    query): GraphQL-over-HTTP's error shape, ``{"errors": [{"message": ...}]}``, in the
    media type the request accepts."""
    media_type = GRAPHQL_RESPONSE_JSON if wants_graphql_response(headers) else "application/json"
    response = Response(
        orjson.dumps({"errors": [{"message": message}]}),
        status_code=status,
        media_type=f"{media_type}; charset=utf-8",
    )
    if status == 405:
        response.headers["allow"] = "GET, POST"
    return response

"""``application/graphql-response+json``, as the GraphQL-over-HTTP spec defines it.

With that media type accepted, a request error (the document does not parse
or validate, the variables do not coerce, or admission refuses it: errors
before execution, none of which has a path) is a 400 whose body has no
``data`` entry; anything that executed is a 200. Clients that accept only
``application/json`` keep the legacy answer: 200 with ``"data": null``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .accept import quality

__all__ = ["GRAPHQL_RESPONSE_JSON", "is_request_error", "wants_graphql_response"]

GRAPHQL_RESPONSE_JSON = "application/graphql-response+json"


def wants_graphql_response(headers: Mapping[str, str]) -> bool:
    """True when the Accept header names application/graphql-response+json with a weight above 0.

    Only naming it counts: ``*/*`` keeps the legacy ``application/json`` answer.
    """
    return quality(headers.get("accept", ""), (GRAPHQL_RESPONSE_JSON,)) > 0


def is_request_error(data: object, errors: Sequence[Any] | None) -> bool:
    """True for a result that never executed: no data and no error with a path."""
    if data is not None or not errors:
        return False
    return all(getattr(error, "path", None) is None for error in errors)

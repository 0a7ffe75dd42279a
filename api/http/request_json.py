"""Decoding GraphQL request JSON (HTTP bodies, GET variables, WebSocket messages).

orjson instead of the standard library: it refuses nesting past 1,024 levels
and invalid UTF-8 with a ``JSONDecodeError``, where ``json.loads`` recurses
into a ``RecursionError`` and a 500.

A body's Content-Type is read case-blind, as HTTP defines media types
(RFC 9110, 8.3.1): strawberry compares it as sent, so ``Application/JSON`` was
refused.
"""

from __future__ import annotations

import orjson
from cross_web import HTTPException, StarletteRequestAdapter

__all__ = ["CaseBlindContentType", "decode_json", "parse_request_json"]


class CaseBlindContentType(StarletteRequestAdapter):
    """strawberry's request adapter, its Content-Type's media type in lower case."""

    @property
    def content_type(self) -> str | None:
        """The request's Content-Type header, its media type lower-cased (parameters such as
        a multipart boundary are kept as sent)."""
        given = super().content_type
        if given is None:
            return None
        media_type, semicolon, parameters = given.partition(";")
        return media_type.lower() + semicolon + parameters


def decode_json(data: str | bytes) -> object:
    """The value ``data`` holds; ``json.JSONDecodeError`` (orjson's subclass) if it is not JSON."""
    return orjson.loads(data)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def parse_request_json(data: str | bytes) -> object:
    """A JSON object (or a list, which the view refuses as a batch); 400 for anything else."""
    try:
        value = decode_json(data)
    except orjson.JSONDecodeError as exc:
        # orjson's message names the position (or the nesting limit) on one line.
        raise HTTPException(400, f"the request is not valid JSON: {exc}") from None
    if not isinstance(value, dict | list):
        raise HTTPException(400, f"the request must be a JSON object, not {_kind(value)}")
    return value

"""Custom scalars: ``Bytes`` for byte counts beyond 32-bit ``Int``, and ``JSON``."""

from __future__ import annotations

from typing import Any, NewType

import strawberry
from graphql import GraphQLError, IntValueNode, ValueNode
from strawberry.scalars import JSON

from .internals import ScalarDefinition

__all__ = ["JSON", "Bytes", "BytesScalar"]

Bytes = NewType("Bytes", int)

# JavaScript clients read JSON numbers as doubles; beyond 2**53 they lose
# precision, but no device has that many bytes of memory.
_MAX_BYTES = 2**63 - 1


def _parse_bytes(value: Any) -> int:
    # bool is an int subclass; true/false is never a byte count.
    if isinstance(value, bool) or not isinstance(value, int):
        raise GraphQLError(f"Bytes must be a non-negative integer, got {value!r}")
    if not 0 <= value <= _MAX_BYTES:
        raise GraphQLError(f"Bytes out of range: {value}")
    return value


def _parse_bytes_literal(node: ValueNode, _variables: dict[str, Any] | None = None) -> int:
    if not isinstance(node, IntValueNode):
        raise GraphQLError("Bytes must be an integer literal", node)
    return _parse_bytes(int(node.value))


BytesScalar: ScalarDefinition = strawberry.scalar(
    name="Bytes",
    description="A count of bytes, serialized as a JSON integer (may exceed 32 bits).",
    # The agent's values are already ints; ``int`` is the cheapest serializer.
    serialize=int,
    parse_value=_parse_bytes,
    parse_literal=_parse_bytes_literal,
)

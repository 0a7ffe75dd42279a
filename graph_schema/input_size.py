"""The size of an operation's variables, measured before graphql-core coerces them.

Coercion walks every list item of every variable in one piece on the event
loop, and ``_entities`` then resolves every representation in one piece too:
22,000 representations (924 KB, inside the body limit) held the loop for
over half a second. Counting the list items of the decoded JSON is cheap,
and stops as soon as the count passes the limit, so a refusal costs next to
nothing whatever the size. Lists written into the document itself are
bounded by the token limit already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import GraphUserError

__all__ = ["VariablesTooLargeError", "check_variable_items", "count_list_items"]


class VariablesTooLargeError(GraphUserError):
    """The operation's variables hold more list items than the server accepts."""

    # Per instance: the response carries this operation's count.
    extensions: dict[str, Any]

    def __init__(self, items: int, limit: int) -> None:
        super().__init__(
            f"request refused before execution: its variables hold at least {items:,} list "
            f"items (entity representations included), over this server's limit of "
            f"{limit:,}; send them in smaller batches"
        )
        self.extensions = {"code": "VARIABLES_TOO_LARGE", "estimate": items, "limit": limit}


def count_list_items(values: Iterable[object], stop_above: int) -> int:
    """List items anywhere in ``values`` (JSON-shaped), counted until past ``stop_above``.

    Iterative, not recursive: decoded JSON may nest 1,024 levels, deeper than
    Python's recursion limit.
    """
    count = 0
    pending = list(values)
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            count += len(item)
            if count > stop_above:
                return count
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.values())
    return count


def check_variable_items(variables: Mapping[str, Any] | None, limit: int) -> None:
    """Raise VariablesTooLargeError if ``variables`` hold more than ``limit`` list items."""
    if not variables:
        return
    items = count_list_items(variables.values(), limit)
    if items > limit:
        raise VariablesTooLargeError(items, limit)

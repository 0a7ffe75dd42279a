"""Checking federation entity representations before strawberry resolves them.

strawberry's ``_entities`` resolver indexes each representation as a dict
with a known ``__typename`` and passes its other keys to the type's
``resolve_reference``: a string, an object without ``__typename``, an unknown
type name or an unexpected key would raise there, and be masked and logged
as a server fault with its traceback. Each such representation gets a
one-line error of its own instead, and the others are still resolved.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["EntityKeys", "entity_keys", "representation_problem"]


@dataclass(frozen=True, slots=True)
class EntityKeys:
    """The keys one entity type's ``resolve_reference`` takes."""

    required: frozenset[str]
    accepted: frozenset[str]


def entity_keys(types: Iterable[tuple[str, object]]) -> dict[str, EntityKeys]:
    """Entity type name -> its keys, for every (name, Python class) with ``resolve_reference``."""
    keys = {}
    for name, origin in types:
        resolve = getattr(origin, "resolve_reference", None)
        if resolve is None:
            continue
        parameters = [p for p in inspect.signature(resolve).parameters.values() if p.name != "info"]
        keys[name] = EntityKeys(
            required=frozenset(p.name for p in parameters if p.default is inspect.Parameter.empty),
            accepted=frozenset(p.name for p in parameters),
        )
    return keys


def representation_problem(
    index: int, representation: object, keys: Mapping[str, EntityKeys]
) -> str | None:
    """Why ``representation`` cannot be resolved, in one line; None if it can."""
    where = f"representation {index}"
    if not isinstance(representation, dict):
        return f"{where} must be an object with __typename and the entity's key fields"
    type_name = representation.get("__typename")
    entity = keys.get(type_name) if isinstance(type_name, str) else None
    if entity is None:
        known = ", ".join(sorted(keys))
        return f"{where}: __typename must name an entity type of this subgraph ({known})"
    given = set(representation) - {"__typename"}
    if missing := sorted(entity.required - given):
        return f"{where}: a {type_name} reference needs {', '.join(missing)}"
    if unknown := sorted(given - entity.accepted):
        return f"{where}: {type_name} has no key field {', '.join(unknown)}"
    if not all(isinstance(representation[k], str) for k in given):
        return f"{where}: {type_name}'s key fields are strings"
    return None

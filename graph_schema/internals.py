"""strawberry's and graphql-core's names that neither library documents, in one place.

The compiled path and the schema's extensions lean on a few internals of the
two libraries. Each is named here and nowhere else, with the version it was
checked against (``CHECKED_AGAINST``); ``tests/graph/test_internals.py``
exercises every one, so an upgrade that changes one fails there, naming it,
rather than in a query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphql import ExecutionResult as GraphQLExecutionResult
from graphql import GraphQLSchema
from strawberry.extensions import ParserCache, ValidationCache

# strawberry-graphql 0.341.2: the resolver wrapper's own conversion of coerced
# arguments to a resolver's values, and the argument types it unwraps.
from strawberry.types.arguments import convert_arguments
from strawberry.types.base import StrawberryMaybe, StrawberryOptional

if TYPE_CHECKING:
    from strawberry.types import ExecutionContext

__all__ = [
    "CHECKED_AGAINST",
    "FIELD_DEFINITION",
    "StrawberryMaybe",
    "StrawberryOptional",
    "answer_operation",
    "cached_parse",
    "cached_validate",
    "convert_arguments",
    "graphql_schema",
    "strawberry_schema_of",
]

# The versions every name below was read in and tested against.
CHECKED_AGAINST = {"strawberry-graphql": "0.341.2", "graphql-core": "3.3.2"}

# strawberry 0.341.2: the key of a GraphQL field's ``extensions`` that holds its
# strawberry field (``GraphQLCoreConverter.from_field``).
FIELD_DEFINITION = "strawberry-definition"


def graphql_schema(schema: Any) -> GraphQLSchema:
    """The graphql-core schema a strawberry schema built (``Schema._schema``,
    strawberry 0.341.2)."""
    built: GraphQLSchema = schema._schema
    return built


def strawberry_schema_of(schema: GraphQLSchema) -> Any:
    """The strawberry schema that built a graphql-core schema, or None
    (``GraphQLSchema._strawberry_schema``, set by strawberry 0.341.2's ``Schema.__init__``)."""
    return getattr(schema, "_strawberry_schema", None)


def answer_operation(ec: ExecutionContext, result: GraphQLExecutionResult) -> None:
    """Answer an operation from an ``on_execute`` hook, before its yield.

    strawberry 0.341.2's executing step (``Schema._execute_operation``) runs
    graphql-core only while ``execution_context.result`` is unset, and treats a
    result set there as graphql-core's own: its errors logged
    (``process_errors``), then every extension's exit sees it.
    """
    ec.result = result


def cached_parse(maxsize: int) -> Callable[..., Any]:
    """strawberry's shared LRU cache of graphql-core's ``parse`` for ``maxsize`` documents
    (``ParserCache.cached_parse_document``, strawberry 0.341.2)."""
    parse: Callable[..., Any] = ParserCache(maxsize=maxsize).cached_parse_document
    return parse


def cached_validate(maxsize: int) -> Callable[..., Any]:
    """strawberry's shared LRU cache of ``validate_document(schema, document, rules)``
    (``ValidationCache.cached_validate_document``, strawberry 0.341.2); it keys on the
    document and the rule classes, so the rules must be the same objects each time."""
    validate: Callable[..., Any] = ValidationCache(maxsize=maxsize).cached_validate_document
    return validate

"""strawberry's and graphql-core's names that neither library documents, in one place.

The compiled path, the schema's extensions and the HTTP view lean on a few
internals of the two libraries. Each is named here and nowhere else, with the
version it was checked against (``CHECKED_AGAINST``):

- a name imported from a module that does not export it (``__all__``) is
  imported here, and the rest of the code imports it from here;
- a method of strawberry's that strawberry does not document as a hook, but a
  class of ours overrides, is declared in ``OVERRIDDEN`` with the parameters
  it was checked with (the override stays with its class: it is that class's
  policy).

``tests/graph/test_internals.py`` exercises every one, and fails when a module
imports a private name past this one or overrides an undeclared method, so an
upgrade that changes one fails there, naming it, rather than in a query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cross_web import StarletteRequestAdapter
from graphql import ExecutionResult as GraphQLExecutionResult
from graphql import GraphQLSchema
from strawberry.asgi import ASGIWebSocketAdapter, GraphQL
from strawberry.extensions import ParserCache, SchemaExtension, ValidationCache
from strawberry.extensions.runner import SchemaExtensionsRunner
from strawberry.federation import Schema as FederationSchema
from strawberry.federation.schema import FederationAny
from strawberry.http.parse_content_type import parse_content_type
from strawberry.http.websocket_origin import normalize_allowed_origins
from strawberry.schema.exceptions import InvalidOperationTypeError

# strawberry-graphql 0.341.2: the resolver wrapper's own conversion of coerced
# arguments to a resolver's values, and the argument types it unwraps.
from strawberry.types.arguments import convert_arguments
from strawberry.types.base import StrawberryMaybe, StrawberryOptional
from strawberry.types.graphql import OperationType
from strawberry.types.scalar import ScalarDefinition
from strawberry.utils.str_converters import to_camel_case

if TYPE_CHECKING:
    from strawberry.types import ExecutionContext

__all__ = [
    "CHECKED_AGAINST",
    "FIELD_DEFINITION",
    "OVERRIDDEN",
    "ASGIWebSocketAdapter",
    "FederationAny",
    "InvalidOperationTypeError",
    "OperationType",
    "ScalarDefinition",
    "SchemaExtensionsRunner",
    "StrawberryMaybe",
    "StrawberryOptional",
    "answer_operation",
    "cached_parse",
    "cached_validate",
    "convert_arguments",
    "graphql_schema",
    "normalize_allowed_origins",
    "parse_content_type",
    "provided_operation_name",
    "strawberry_schema_of",
    "to_camel_case",
]

# The versions every name below was read in and tested against.
CHECKED_AGAINST = {"strawberry-graphql": "0.341.2", "graphql-core": "3.3.2", "cross-web": "0.9.0"}

# strawberry 0.341.2: the undocumented methods our subclasses override, each with
# the parameters it was checked with (an attribute, not a method: ``()``).
OVERRIDDEN: dict[type, dict[str, tuple[str, ...]]] = {
    # The HTTP view (api/execution/view.py): a 415 for a body that is not JSON, a
    # request's JSON refused with a reason, the sub-response's headers, the
    # response built from bytes, the adapter that reads a request's media type
    # case-blind (api/http/request_json.py) and the one that checks socket messages.
    GraphQL: {
        "request_adapter_class": (),
        "websocket_adapter_class": (),
        "parse_http_body": ("self", "request"),
        "parse_json": ("self", "data"),
        "get_sub_response": ("self", "request"),
        "create_response": ("self", "response_data", "sub_response"),
        "execute_single": (
            "self",
            "request",
            "request_adapter",
            "sub_response",
            "context",
            "root_value",
            "request_data",
        ),
    },
    # A request's media type, read case-blind (api/http/request_json.py).
    StarletteRequestAdapter: {"content_type": ()},
    # Each socket message, checked before strawberry's handler reads it (api/http/ws_messages.py).
    ASGIWebSocketAdapter: {"iter_json": ("self", "ignore_parsing_errors")},
    # A streamed result's partial errors (graph_schema/pipeline.py).
    SchemaExtension: {"on_stream_result": ("self", "result")},
    # The policies' own runner (graph_schema/pipeline.py, PoliciesRunner).
    SchemaExtensionsRunner: {
        "__init__": ("self", "execution_context", "extensions"),
        "operation": ("self",),
        "parsing": ("self",),
        "validation": ("self",),
        "executing": ("self",),
        "on_stream_result": ("self", "result"),
        "get_extensions_results": ("self", "ctx"),
    },
    # The schema (graph_schema/schema.py): the runner it hands each operation,
    # and a one-line error per unusable entity representation.
    FederationSchema: {
        "create_extensions_runner": ("self", "execution_context", "extensions"),
        "entities_resolver": ("self", "info", "representations"),
    },
}

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


def provided_operation_name(ec: ExecutionContext) -> str | None:
    """The operation name the request gave, or None: strawberry 0.341.2's
    ``ExecutionContext.operation_name`` falls back to the document's first operation's
    (``_provided_operation_name`` holds the request's)."""
    name: str | None = ec._provided_operation_name
    return name


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

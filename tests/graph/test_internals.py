"""Every strawberry and graphql-core internal the graph leans on still means what it did.

Each test names the internal it pins (``graph_schema/internals.py``) and the
versions it was checked against; an upgrade that renames or changes one
fails here, before a query notices.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import strawberry
import strawberry.schema.schema as strawberry_schema
from graphql import ExecutionResult, GraphQLError, GraphQLSchema, parse, specified_rules
from strawberry.asgi import GraphQL
from strawberry.extensions import SchemaExtension
from strawberry.types import ExecutionContext

import api
import graph_schema
from graph_schema import internals
from graph_schema.pipeline import PoliciesRunner
from graph_schema.schema import build_schema

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("strawberry", "graphql", "cross_web")

# What strawberry documents as its own: a view's and an extension's hooks, the
# schema's error handling, and two names imported from modules without __all__.
DOCUMENTED_HOOKS: dict[type, frozenset[str]] = {
    GraphQL: frozenset(
        {
            "__init__",
            "__call__",
            "get_context",
            "get_root_value",
            "process_result",
            "encode_json",
            "decode_json",
            "on_ws_connect",
            "render_graphql_ide",
        }
    ),
    SchemaExtension: frozenset(
        {"__init__", "on_operation", "on_parse", "on_validate", "on_execute", "resolve"}
    ),
    strawberry.federation.Schema: frozenset({"__init__", "execute", "process_errors"}),
}
DOCUMENTED_IMPORTS = {
    ("strawberry.asgi", "GraphQL"),
    ("strawberry.exceptions", "ConnectionRejectionError"),
}
# strawberry's documented modules (what they list in __all__ is theirs to keep),
# cross_web's too (strawberry's request adapters and HTTP errors); graphql-core
# documents every package one level below ``graphql``.
STRAWBERRY_MODULES = frozenset(
    {
        "cross_web",
        "strawberry",
        "strawberry.extensions",
        "strawberry.federation",
        "strawberry.http",
        "strawberry.relay",
        "strawberry.scalars",
        "strawberry.schema.config",
        "strawberry.subscriptions",
        "strawberry.types",
    }
)
# Attributes a class carries of itself (abc's, typing's), not overrides.
NOT_OVERRIDES = frozenset({"_abc_impl", "_is_protocol"})


def _an_override(name: str) -> bool:
    dunder = name.startswith("__") and name not in ("__init__", "__call__")
    return not dunder and name not in NOT_OVERRIDES


CHECKED = ", ".join(f"{name} {version}" for name, version in internals.CHECKED_AGAINST.items())


def test_the_graphql_core_schema_is_the_one_strawberry_executes_against() -> None:
    schema = build_schema()
    built = internals.graphql_schema(schema)
    assert isinstance(built, GraphQLSchema), f"Schema._schema changed since {CHECKED}"
    assert internals.strawberry_schema_of(built) is schema, (
        f"GraphQLSchema._strawberry_schema changed since {CHECKED}"
    )
    assert internals.strawberry_schema_of(GraphQLSchema()) is None


def test_a_graphql_field_keeps_its_strawberry_field_and_argument_types() -> None:
    built = internals.graphql_schema(build_schema())
    assert built.query_type is not None
    field = built.query_type.fields["pods"].extensions[internals.FIELD_DEFINITION]
    assert field.python_name == "pods", f"the field definition key changed since {CHECKED}"
    selector = next(a for a in field.arguments if a.python_name == "label_selector")
    assert isinstance(selector.type_annotation.resolve(), internals.StrawberryOptional)
    assert internals.StrawberryMaybe is not internals.StrawberryOptional


def test_convert_arguments_takes_what_the_plan_hands_it() -> None:
    parameters = inspect.signature(internals.convert_arguments).parameters
    assert list(parameters)[:1] == ["value"], f"convert_arguments changed since {CHECKED}"
    assert {"arguments", "scalar_registry", "config", "info"} <= set(parameters)


@strawberry.type
class _Query:
    @strawberry.field
    def hello(self) -> str:
        _Query.resolved += 1
        return "from graphql-core"

    resolved = 0


class _Answers(SchemaExtension):
    """Answers every operation itself, as the schema's policies do with the plan's result."""

    def on_execute(self) -> Iterator[None]:
        internals.answer_operation(
            self.execution_context, ExecutionResult(data={"hello": "from the plan"})
        )
        yield


async def test_a_result_set_before_execution_skips_graphql_cores_executor() -> None:
    schema = strawberry.Schema(query=_Query, extensions=[_Answers])
    _Query.resolved = 0
    result = await schema.execute("{ hello }")
    assert result.data == {"hello": "from the plan"} and result.errors is None
    # Over a WebSocket, strawberry streams the query through the same step.
    streamed = await schema.stream("{ hello }")
    assert isinstance(streamed, AsyncIterator)
    answers = [r async for r in streamed]
    assert [a.data for a in answers] == [{"hello": "from the plan"}]  # type: ignore[union-attr]
    assert _Query.resolved == 0, f"execution_context.result is no longer honoured ({CHECKED})"


def test_the_operation_name_a_request_gave_is_told_from_strawberrys_fallback() -> None:
    schema = strawberry.Schema(query=_Query)
    document = parse("query A { hello } query B { hello }")
    given = ExecutionContext("", schema, (), provided_operation_name="B")
    given.graphql_document = document
    fallen_back = ExecutionContext("", schema, ())
    fallen_back.graphql_document = document
    assert (given.operation_name, fallen_back.operation_name) == ("B", "A"), CHECKED
    assert internals.provided_operation_name(given) == "B"
    assert internals.provided_operation_name(fallen_back) is None


def test_the_parser_cache_hands_back_one_document_and_passes_the_token_limit() -> None:
    parse_cached = internals.cached_parse(8)
    first = parse_cached("{ hello }", max_tokens=10)
    assert parse_cached("{ hello }", max_tokens=10) is first, f"ParserCache changed ({CHECKED})"
    assert first == parse("{ hello }")
    with pytest.raises(GraphQLError, match="more than 2 tokens"):
        parse_cached("{ hello }", max_tokens=2)


def test_the_validation_cache_keys_on_the_document_and_the_rules() -> None:
    validate = internals.cached_validate(8)
    schema = internals.graphql_schema(strawberry.Schema(query=_Query))
    rules = tuple(specified_rules)
    document = parse("{ nope }")
    errors = validate(schema, document, rules)
    assert [e.message for e in errors] == ["Cannot query field 'nope' on type 'Query'."]
    # The same document and rules: strawberry's cached answer, not a new validation.
    assert validate(schema, document, rules) is errors, f"ValidationCache changed ({CHECKED})"
    assert validate(schema, parse("{ hello }"), rules) == []


async def test_strawberry_runs_the_policies_runner_and_finds_parsing_and_validation_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # graph_schema/pipeline.py leans on three more of strawberry's undocumented ways:
    # ``Schema.create_extensions_runner`` builds every operation's runner, whose
    # ``operation`` and ``executing`` it calls; and its parsing and validation steps
    # skip a document already parsed and validated (``_parse_operation_document``,
    # ``_run_validation``). An upgrade that changes one would bypass the policies'
    # runner or parse and validate twice, the answers unchanged: fail here instead.
    hooks: list[str] = []
    for hook in ("operation", "executing"):
        original = getattr(PoliciesRunner, hook)

        def counted(self: PoliciesRunner, _hook: str = hook, _original: Any = original) -> Any:
            hooks.append(_hook)
            return _original(self)

        monkeypatch.setattr(PoliciesRunner, hook, counted)
    again: list[str] = []
    validate_document = strawberry_schema.validate_document

    def parse_again(*args: Any, **kwargs: Any) -> Any:
        again.append("parse")
        return parse(*args, **kwargs)

    def validate_again(*args: Any, **kwargs: Any) -> Any:
        again.append("validate")
        return validate_document(*args, **kwargs)

    monkeypatch.setattr(strawberry_schema, "parse", parse_again)
    monkeypatch.setattr(strawberry_schema, "validate_document", validate_again)
    schema = build_schema()
    answered = await schema.execute("{ __typename }")
    assert answered.data == {"__typename": "Query"} and answered.errors is None
    refused = await schema.execute("{ nope }")
    assert refused.errors and "Cannot query field 'nope'" in refused.errors[0].message
    assert hooks == ["operation", "executing", "operation"], (
        f"create_extensions_runner or the runner's hooks changed since {CHECKED}"
    )
    assert again == [], f"strawberry parsed or validated the document again ({CHECKED})"


def test_the_names_imported_past_their_modules_still_do_what_the_code_asks() -> None:
    assert internals.parse_content_type("application/json; charset=utf-8")[0] == "application/json"
    assert internals.normalize_allowed_origins(["https://a.example"]) is not None
    with pytest.raises(ValueError):
        internals.normalize_allowed_origins(["not an origin"])
    assert internals.to_camel_case("used_memory_bytes") == "usedMemoryBytes"
    assert "operation_type" in inspect.signature(internals.InvalidOperationTypeError).parameters


@pytest.mark.parametrize(
    ("base", "name", "parameters"),
    [
        (base, name, parameters)
        for base, methods in internals.OVERRIDDEN.items()
        for name, parameters in methods.items()
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_every_declared_override_still_has_the_parameters_it_was_checked_with(
    base: type, name: str, parameters: tuple[str, ...]
) -> None:
    assert hasattr(base, name), f"{base.__qualname__}.{name} is gone since {CHECKED}"
    if parameters:
        found = tuple(inspect.signature(getattr(base, name)).parameters)
        assert found == parameters, f"{base.__qualname__}.{name} changed since {CHECKED}"


def _documented_module(module: str) -> bool:
    return module in STRAWBERRY_MODULES or (module.startswith("graphql") and module.count(".") <= 1)


def _exported(module: str, name: str) -> bool:
    if (module, name) in DOCUMENTED_IMPORTS:
        return True
    exported = getattr(importlib.import_module(module), "__all__", None)
    return _documented_module(module) and exported is not None and name in exported


def _private_imports(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in LIBRARIES:
                for alias in node.names:
                    if not _exported(node.module, alias.name):
                        yield f"from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                library = alias.name.split(".")[0] in LIBRARIES
                if library and not _documented_module(alias.name):
                    yield f"import {alias.name}"


def test_no_module_but_internals_imports_a_name_its_library_does_not_export() -> None:
    found = {
        f"{path.relative_to(ROOT)}: {line}"
        for package in ("api", "graph_schema", "node_resolver")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != ROOT / "graph_schema" / "internals.py"
        for line in _private_imports(path)
    }
    assert found == set(), "import these from graph_schema/internals.py, with their versions"
    # The scan sees what it is meant to: internals itself imports several.
    assert len(list(_private_imports(ROOT / "graph_schema" / "internals.py"))) >= 8


def _our_subclasses() -> Iterator[type]:
    for package in (api, graph_schema):
        for found in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(found.name)
            for value in vars(module).values():
                if inspect.isclass(value) and value.__module__ == module.__name__:
                    yield value


def test_our_classes_override_only_strawberrys_documented_hooks_or_declared_ones() -> None:
    undeclared = []
    subclasses = 0
    for cls in _our_subclasses():
        bases = [b for b in cls.__mro__[1:] if b.__module__.split(".")[0] in LIBRARIES]
        if not bases:
            continue
        subclasses += 1
        allowed = set().union(
            *(DOCUMENTED_HOOKS.get(b, ()) for b in bases),
            *(internals.OVERRIDDEN.get(b, {}) for b in bases),
        )
        for name in vars(cls):
            if not _an_override(name) or name in allowed:
                continue
            if any(name in vars(b) for b in bases):
                undeclared.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    assert undeclared == [], f"declare these in internals.OVERRIDDEN, checked against {CHECKED}"
    # The view, its socket adapter, the policies, their runner and the schema at least.
    assert subclasses >= 5

"""Every strawberry and graphql-core internal the graph leans on still means what it did.

Each test names the internal it pins (``graph_schema/internals.py``) and the
versions it was checked against; an upgrade that renames or changes one
fails here, before a query notices.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import strawberry
import strawberry.schema.schema as strawberry_schema
from graphql import ExecutionResult, GraphQLError, GraphQLSchema, parse, specified_rules
from strawberry.extensions import SchemaExtension

from graph_schema import internals
from graph_schema.pipeline import PoliciesRunner
from graph_schema.schema import build_schema

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

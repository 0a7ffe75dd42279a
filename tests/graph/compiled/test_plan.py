"""What the plan covers: every field of the schema compiles, but the listed few."""

from __future__ import annotations

import contextlib

import pytest
from graphql import GraphQLEnumType, GraphQLList, GraphQLNonNull, GraphQLObjectType, parse, validate
from graphql.execution.values import get_argument_values
from strawberry.types.arguments import convert_arguments

from graph_schema.compiled.plan import (
    FieldPlan,
    ListCompleter,
    ObjectCompleter,
    ObjectPlan,
    Unsupported,
    compile_operation,
)
from graph_schema.schema import build_schema

STRAWBERRY = build_schema()
SCHEMA = STRAWBERRY._schema

# Answered by strawberry by design (introspection and federation's own fields).
STRAWBERRY_ONLY = {"Query._entities", "Query._service"}

# A value for each required argument, by type name.
SAMPLES = {
    "String": '"x"',
    "ID": '"x"',
    "Int": "1",
    "Float": "1.0",
    "Boolean": "true",
    "DateTime": '"2026-12-01T00:00:00Z"',
}


def _named(output: object) -> object:
    while isinstance(output, GraphQLNonNull | GraphQLList):
        output = output.of_type
    return output


def every_field() -> list[tuple[str, str]]:
    """(type, field) for every field of every object type reachable from Query."""
    seen: dict[str, GraphQLObjectType] = {}
    stack = [SCHEMA.query_type]
    while stack:
        current = stack.pop()
        assert current is not None
        if current.name in seen:
            continue
        seen[current.name] = current
        for field in current.fields.values():
            inner = _named(field.type)
            if isinstance(inner, GraphQLObjectType) and not inner.name.startswith("_"):
                stack.append(inner)
    return [(t.name, f) for t in seen.values() for f in t.fields]


def path_to(type_name: str) -> tuple[str, str]:
    """A document prefix reaching ``type_name`` from Query, and its closing braces."""
    prefixes = {
        "Query": ("", ""),
        "Node": ("nodes { ", " }"),
        "Gpu": ("gpus { ", " }"),
        "GpuProcess": ("gpuProcesses { ", " }"),
        "Pod": ("pods { ", " }"),
        "Container": ("pods { containers { ", " } }"),
        "AgentStatus": ("nodes { agent { ", " } }"),
        "MigDevice": ("gpus { migDevices { ", " } }"),
        "CacheStatus": ("cacheStatus { ", " }"),
    }
    if type_name in prefixes:
        return prefixes[type_name]
    # A type added later: reach it through the first field that returns it.
    for owner, field in every_field():
        if _named(SCHEMA.type_map[owner].fields[field].type).name == type_name:  # type: ignore[attr-defined]
            head, tail = path_to(owner)
            return f"{head}{field}{_arguments(owner, field)} {{ ", f" }}{tail}"
    raise AssertionError(f"no way to {type_name}")


def _arguments(type_name: str, field_name: str) -> str:
    field = SCHEMA.type_map[type_name].fields[field_name]  # type: ignore[attr-defined]
    required = [
        f"{name}: {SAMPLES.get(getattr(_named(arg.type), 'name', ''), 'null')}"
        for name, arg in field.args.items()
        if isinstance(arg.type, GraphQLNonNull)
    ]
    return f"({', '.join(required)})" if required else ""


def _leaf(type_name: str, field_name: str) -> str:
    inner = _named(SCHEMA.type_map[type_name].fields[field_name].type)  # type: ignore[attr-defined]
    if isinstance(inner, GraphQLObjectType):
        return " { __typename }"
    return ""


@pytest.mark.parametrize("type_name,field_name", every_field())
def test_every_field_compiles_unless_strawberry_answers_it(type_name: str, field_name: str) -> None:
    head, tail = path_to(type_name)
    selection = field_name + _arguments(type_name, field_name) + _leaf(type_name, field_name)
    document = parse(f"{{ {head}{selection}{tail} }}")
    name = f"{type_name}.{field_name}"
    if name in STRAWBERRY_ONLY:
        with pytest.raises(Unsupported):
            compile_operation(SCHEMA, document, None, {})
        return
    # A new field the plan cannot run fails here: extend the plan, or list it above
    # (strawberry then answers every document that selects it).
    compile_operation(SCHEMA, document, None, {})


def _sample(input_type: object) -> str:
    """A literal of an argument's type: scalars as above, an enum's first value, lists."""
    if isinstance(input_type, GraphQLNonNull):
        return _sample(input_type.of_type)
    if isinstance(input_type, GraphQLList):
        return f"[{_sample(input_type.of_type)}]"
    if isinstance(input_type, GraphQLEnumType):
        return next(iter(input_type.values))
    return SAMPLES[input_type.name]  # type: ignore[attr-defined]


FIELDS_WITH_ARGUMENTS = [
    (t, f)
    for t, f in every_field()
    if SCHEMA.type_map[t].fields[f].args and f"{t}.{f}" not in STRAWBERRY_ONLY  # type: ignore[attr-defined]
]


@pytest.mark.parametrize("type_name,field_name", FIELDS_WITH_ARGUMENTS)
def test_every_field_compiles_with_all_its_arguments(type_name: str, field_name: str) -> None:
    # Optional arguments too: DateTime ranges, enum lists (gpuUsage's groupBy), cursors.
    field = SCHEMA.type_map[type_name].fields[field_name]  # type: ignore[attr-defined]
    arguments = ", ".join(f"{n}: {_sample(a.type)}" for n, a in field.args.items())
    head, tail = path_to(type_name)
    selection = f"{field_name}({arguments}){_leaf(type_name, field_name)}"
    document = parse(f"{{ {head}{selection}{tail} }}")
    assert not validate(SCHEMA, document)
    compile_operation(SCHEMA, document, None, {})


def _field_plan(plan: ObjectPlan, field_name: str) -> FieldPlan:
    """The first field plan named ``field_name``, depth first."""
    for field in plan.fields:
        if field.nodes and field.nodes[0].name.value == field_name and field.convert is not None:
            return field
        complete = field.complete
        while isinstance(complete, ListCompleter):
            complete = complete.item
        if isinstance(complete, ObjectCompleter):
            with contextlib.suppress(LookupError):
                return _field_plan(complete.plan, field_name)
    raise LookupError(field_name)


@pytest.mark.parametrize("given", ["all", "required"])
@pytest.mark.parametrize("type_name,field_name", FIELDS_WITH_ARGUMENTS)
def test_arguments_reach_the_resolver_as_strawberry_converts_them(
    type_name: str, field_name: str, given: str
) -> None:
    # Scalar arguments skip strawberry's conversion (a plain renaming); enums, lists,
    # input objects and DateTime ranges go through it. Either way the resolver must
    # get exactly the keyword arguments strawberry would hand it.
    field = SCHEMA.type_map[type_name].fields[field_name]  # type: ignore[attr-defined]
    if given == "all":
        arguments = ", ".join(f"{n}: {_sample(a.type)}" for n, a in field.args.items())
        selection = f"{field_name}({arguments}){_leaf(type_name, field_name)}"
    else:
        selection = field_name + _arguments(type_name, field_name) + _leaf(type_name, field_name)
    head, tail = path_to(type_name)
    plan = compile_operation(SCHEMA, parse(f"{{ {head}{selection}{tail} }}"), None, {})
    field_plan = _field_plan(plan, field_name)
    assert field_plan.convert is not None and field_plan.definition is not None
    values = get_argument_values(field_plan.definition, field_plan.nodes[0], None)
    expected = convert_arguments(
        values,
        field.extensions["strawberry-definition"].arguments,
        scalar_registry=STRAWBERRY.schema_converter.scalar_registry,
        config=STRAWBERRY.config,
    )
    converted = field_plan.convert(values, None)
    assert converted == expected
    assert [type(v) for v in converted.values()] == [type(v) for v in expected.values()]
    # A list comes as a copy, as strawberry copies it: graphql-core hands every request
    # that omits it the same default, which a resolver must not be able to change.
    lists = [v for v in converted.values() if isinstance(v, list)]
    assert all(value is not given for value in lists for given in values.values())

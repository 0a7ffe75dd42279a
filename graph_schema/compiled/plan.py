"""Compiling one operation of a validated document into a plan.

The plan is a tree: an ``ObjectPlan`` per selection set, a ``FieldPlan`` per
response key, and a completer per field type (leaf, object, list). Fields
are collected and merged the way graphql-core collects them (fragments
flattened, same response key merged, ``@include``/``@skip`` decided), once
per document and per combination of the directive variables.

A field is read the way strawberry reads it: a plain field is an attribute
of the object; a field with a resolver calls that very resolver. So the plan
holds no second definition of what a field means, and a field someone adds
to the schema is covered as soon as it is a plain attribute or a resolver
that reads only ``info.context`` and ``info.path``. Its arguments are
coerced by graphql-core and converted by strawberry's own
``convert_arguments`` (custom scalars such as DateTime, enums, lists, input
objects), so a resolver receives what strawberry would hand it. What the
plan cannot run raises ``Unsupported`` here, and strawberry answers:
introspection, federation's ``_entities``/``_service``, abstract types
(interfaces, unions), mutations and subscriptions, and fields with
strawberry extensions or permissions.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from graphql import (
    BooleanValueNode,
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLEnumType,
    GraphQLError,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    VariableNode,
)
from strawberry.relay import GlobalID
from strawberry.scalars import is_scalar

from ..internals import (
    FIELD_DEFINITION,
    StrawberryMaybe,
    StrawberryOptional,
    convert_arguments,
    strawberry_schema_of,
)
from ..operation import REMEMBER_WHILE

__all__ = [
    "Completer",
    "Fallback",
    "FieldPlan",
    "LeafCompleter",
    "ListCompleter",
    "ObjectCompleter",
    "ObjectPlan",
    "Unsupported",
    "compile_operation",
    "directive_variables",
    "find_operation",
]

_MAX_INT = 2**31 - 1
_MIN_INT = -(2**31)


class Unsupported(Exception):
    """The plan cannot run this operation; strawberry answers it."""


class Fallback(Exception):
    """At run time: something the plan does not reproduce exactly; strawberry answers instead."""


# ------------------------------------------------------------------ completers


@dataclass(slots=True)
class LeafCompleter:
    """A scalar: serialized as graphql-core would, with fast paths for the built-ins."""

    serialize: Callable[[Any], Any]
    nullable: bool
    may_await: bool = False
    # The scalar's name; Bytes only when it serializes with int (codegen inlines those).
    scalar: str = ""


@dataclass(slots=True)
class ObjectCompleter:
    """An object type, completed by its selection's plan."""

    plan: ObjectPlan
    nullable: bool

    @property
    def may_await(self) -> bool:
        """Whether completing it may wait (an async resolver somewhere below)."""
        return self.plan.may_await


@dataclass(slots=True)
class ListCompleter:
    """A list of items of one completer."""

    item: Completer
    nullable: bool

    @property
    def may_await(self) -> bool:
        """Whether completing an item may wait."""
        return self.item.may_await


Completer = LeafCompleter | ObjectCompleter | ListCompleter


@dataclass(slots=True)
class FieldPlan:
    """One response key of a selection set."""

    key: str
    # The field's AST nodes (for error locations) and its definition.
    nodes: tuple[FieldNode, ...]
    definition: GraphQLField | None
    complete: Completer
    # A plain field: the attribute to read. A resolver field: the resolver.
    attribute: str | None = None
    resolver: Callable[..., Any] | None = None
    takes_self: bool = False
    info_name: str | None = None
    # A resolver reading ``info`` only for what every caller shares: what says how long
    # its answer stands (``operation.remember_while``).
    remember_while: Callable[[Any], Any] | None = None
    # graphql-core's coerced arguments (by GraphQL name) -> the resolver's keyword
    # arguments, as strawberry converts them; None for a field without arguments.
    convert: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None
    # Whether one conversion may serve every call in a run: only leaves (the schema's
    # scalars and enums are immutable values); a list or an input object is converted
    # afresh per call, as strawberry does, so no resolver shares one with another.
    convert_once: bool = True
    is_async: bool = False
    # __typename: the constant answer.
    typename: str | None = None


@dataclass(slots=True)
class ObjectPlan:
    """A selection set over one object type."""

    type_name: str
    fields: list[FieldPlan] = field(default_factory=list)
    may_await: bool = False
    # The one field that may await, when it is an async resolver's (a pod's ``gpus``):
    # its coroutine fills the object's dict itself, one coroutine per object fewer.
    lone_async: FieldPlan | None = None
    # Generated for a selection of attributes and synchronous resolvers (see codegen):
    # (the object, the run's PlanInfo) -> the response dict, or its JSON (codegen.encoded).
    generated: Callable[[Any, Any], Any] | None = None


# ------------------------------------------------------------------ serializers


def _string(value: Any) -> Any:
    if type(value) is str:
        return value
    raise Fallback("not a string")


def _int(value: Any) -> Any:
    if type(value) is int and _MIN_INT <= value <= _MAX_INT:
        return value
    raise Fallback("not a 32-bit int")


def _float(value: Any) -> Any:
    if type(value) is float and math.isfinite(value):
        return value
    if type(value) is int:
        return float(value)
    raise Fallback("not a finite float")


def _boolean(value: Any) -> Any:
    if type(value) is bool:
        return value
    raise Fallback("not a boolean")


def _id(value: Any) -> Any:
    if isinstance(value, str):
        return str(value)
    raise Fallback("not an ID string")


def _enum_serializer(enum: GraphQLEnumType) -> Callable[[Any], Any]:
    serialize = enum.serialize
    # A Python enum member's name, once serialized: members live as long as their
    # class, so one is known by its identity (strawberry's serialize costs 6 us a value).
    members: dict[int, tuple[Any, Any]] = {}

    def by_name(value: Any) -> Any:
        known = members.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        try:
            name = serialize(value)
        except GraphQLError as exc:
            raise Fallback(f"{enum.name}: {exc.message}") from None
        if isinstance(value, Enum):
            members[id(value)] = (value, name)
        return name

    return by_name


def _serializer(scalar: GraphQLScalarType) -> Callable[[Any], Any]:
    builtin = {
        "String": _string,
        "Int": _int,
        "Float": _float,
        "Boolean": _boolean,
        "ID": _id,
    }.get(scalar.name)
    if builtin is not None:
        return builtin
    serialize = scalar.serialize

    def custom(value: Any) -> Any:
        serialized = serialize(value)
        if serialized is None:
            raise Fallback(f"{scalar.name} serialized to null")
        return serialized

    return custom


# ------------------------------------------------------------------ collection


def find_operation(document: DocumentNode, operation_name: str | None) -> OperationDefinitionNode:
    """The operation to run, as graphql-core picks it; Unsupported when none fits."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if operation_name is None:
        if len(operations) != 1:
            raise Unsupported("several operations and no operation name")
        return operations[0]
    for operation in operations:
        if operation.name is not None and operation.name.value == operation_name:
            return operation
    raise Unsupported(f"no operation named {operation_name!r}")


def directive_variables(document: DocumentNode) -> tuple[str, ...]:
    """Variables that ``@include``/``@skip`` read: a plan is compiled per their values."""
    names: set[str] = set()

    def visit(selection_set: SelectionSetNode | None) -> None:
        if selection_set is None:
            return
        for selection in selection_set.selections:
            for directive in selection.directives or ():
                if directive.name.value in ("include", "skip"):
                    for argument in directive.arguments or ():
                        if isinstance(argument.value, VariableNode):
                            names.add(argument.value.name.value)
            visit(getattr(selection, "selection_set", None))

    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode | FragmentDefinitionNode):
            visit(definition.selection_set)
    return tuple(sorted(names))


def _included(node: Any, values: Mapping[str, Any]) -> bool:
    for directive in node.directives or ():
        name = directive.name.value
        if name not in ("include", "skip"):
            continue
        argument = next((a for a in directive.arguments or () if a.name.value == "if"), None)
        if argument is None:
            raise Unsupported("@include/@skip without if")
        value = argument.value
        if isinstance(value, BooleanValueNode):
            condition = value.value
        elif isinstance(value, VariableNode):
            given = values.get(value.name.value)
            if type(given) is not bool:
                raise Unsupported("a directive variable that is not a boolean")
            condition = given
        else:
            raise Unsupported("an @include/@skip condition of another kind")
        if name == "skip" and condition:
            return False
        if name == "include" and not condition:
            return False
    return True


class _Collector:
    """graphql-core's field collection, for one document and one set of directive values."""

    def __init__(
        self,
        fragments: Mapping[str, FragmentDefinitionNode],
        values: Mapping[str, Any],
    ) -> None:
        self.fragments = fragments
        self.values = values

    def collect(
        self,
        type_name: str,
        selection_sets: list[SelectionSetNode],
    ) -> dict[str, list[FieldNode]]:
        fields: dict[str, list[FieldNode]] = {}
        visited: set[str] = set()
        for selection_set in selection_sets:
            self._into(type_name, selection_set, fields, visited)
        return fields

    def _into(
        self,
        type_name: str,
        selection_set: SelectionSetNode,
        fields: dict[str, list[FieldNode]],
        visited: set[str],
    ) -> None:
        for selection in selection_set.selections:
            if not _included(selection, self.values):
                continue
            if isinstance(selection, FieldNode):
                key = selection.alias.value if selection.alias else selection.name.value
                fields.setdefault(key, []).append(selection)
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                if condition is not None and condition.name.value != type_name:
                    raise Unsupported("a fragment on another type")
                self._into(type_name, selection.selection_set, fields, visited)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in visited:
                    continue
                visited.add(name)
                fragment = self.fragments.get(name)
                if fragment is None:
                    raise Unsupported(f"unknown fragment {name!r}")
                if fragment.type_condition.name.value != type_name:
                    raise Unsupported("a fragment on another type")
                self._into(type_name, fragment.selection_set, fields, visited)


# ------------------------------------------------------------------ compilation


class _Compiler:
    def __init__(self, collector: _Collector, strawberry_schema: Any) -> None:
        self.collector = collector
        self.strawberry_schema = strawberry_schema

    def object_plan(
        self, parent: GraphQLObjectType, selection_sets: list[SelectionSetNode]
    ) -> ObjectPlan:
        plan = ObjectPlan(parent.name)
        for key, nodes in self.collector.collect(parent.name, selection_sets).items():
            field_plan = self.field_plan(parent, key, nodes)
            plan.fields.append(field_plan)
        awaiting = [f for f in plan.fields if f.is_async or f.complete.may_await]
        plan.may_await = bool(awaiting)
        if len(awaiting) == 1 and awaiting[0].is_async:
            plan.lone_async = awaiting[0]
        return plan

    def field_plan(self, parent: GraphQLObjectType, key: str, nodes: list[FieldNode]) -> FieldPlan:
        name = nodes[0].name.value
        if name == "__typename":
            return FieldPlan(
                key,
                tuple(nodes),
                None,
                LeafCompleter(_string, nullable=False),
                typename=parent.name,
            )
        if name.startswith("_"):
            raise Unsupported(f"{parent.name}.{name} (introspection or federation)")
        definition = parent.fields.get(name)
        if definition is None:
            raise Unsupported(f"no field {parent.name}.{name}")
        strawberry_field = (definition.extensions or {}).get(FIELD_DEFINITION)
        if strawberry_field is None:
            raise Unsupported(f"{parent.name}.{name} is not a strawberry field")
        if strawberry_field.extensions or strawberry_field.permission_classes:
            raise Unsupported(f"{parent.name}.{name} has field extensions")
        selection_sets = [n.selection_set for n in nodes if n.selection_set is not None]
        complete = self.completer(definition.type, selection_sets)
        resolver = strawberry_field.base_resolver
        if resolver is None:
            if definition.args:
                raise Unsupported(f"{parent.name}.{name} has arguments but no resolver")
            return FieldPlan(
                key,
                tuple(nodes),
                definition,
                complete,
                attribute=strawberry_field.python_name,
            )
        return self.resolver_plan(parent, key, nodes, definition, complete, strawberry_field)

    def resolver_plan(
        self,
        parent: GraphQLObjectType,
        key: str,
        nodes: list[FieldNode],
        definition: GraphQLField,
        complete: Completer,
        strawberry_field: Any,
    ) -> FieldPlan:
        name = f"{parent.name}.{nodes[0].name.value}"
        resolver = strawberry_field.base_resolver
        if resolver.root_parameter is not None:
            raise Unsupported(f"{name} reads root")
        convert = None
        convert_once = True
        if definition.args:
            convert = self.argument_converter(name, strawberry_field.arguments)
            convert_once = all(_is_leaf(a.type) for a in definition.args.values())
        info = resolver.info_parameter
        func = resolver.wrapped_func
        if isinstance(func, staticmethod | classmethod):
            raise Unsupported(f"{name} is a static or class method")
        return FieldPlan(
            key,
            tuple(nodes),
            definition,
            complete,
            resolver=func,
            takes_self=resolver.self_parameter is not None,
            info_name=None if info is None else info.name,
            remember_while=(strawberry_field.metadata or {}).get(REMEMBER_WHILE),
            convert=convert,
            convert_once=convert_once,
            is_async=inspect.iscoroutinefunction(func),
        )

    def argument_converter(
        self, name: str, arguments: list[Any]
    ) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
        """strawberry's conversion of a field's coerced arguments to the resolver's values.

        The very function strawberry's resolver wrapper calls (``get_arguments``), with
        the schema's scalar registry and config: DateTime, enums, lists, input objects
        come out as strawberry hands them to the resolver. Where every argument is a
        scalar, that function would return the values as they are: only renamed here.
        """
        strawberry_schema = self.strawberry_schema
        if strawberry_schema is None:
            raise Unsupported(f"{name} has arguments and the schema is not strawberry's")
        converter = strawberry_schema.schema_converter
        registry = converter.scalar_registry
        config = strawberry_schema.config
        if all(_passes_through(argument.type, registry) for argument in arguments):
            # What strawberry would return, without its per-call name conversion and
            # type dispatch (a tenth of a small query's time).
            names = [(config.name_converter.from_argument(a), a.python_name) for a in arguments]

            def passed(values: dict[str, Any], info: Any) -> dict[str, Any]:
                return {python: values[name] for name, python in names if name in values}

            return passed
        convert = functools.partial(
            convert_arguments, arguments=arguments, scalar_registry=registry, config=config
        )

        def converted(values: dict[str, Any], info: Any) -> dict[str, Any]:
            return convert(values, info=info)

        return converted

    def completer(
        self, output: GraphQLOutputType, selection_sets: list[SelectionSetNode]
    ) -> Completer:
        nullable = True
        if isinstance(output, GraphQLNonNull):
            nullable = False
            output = output.of_type
        if isinstance(output, GraphQLList):
            return ListCompleter(self.completer(output.of_type, selection_sets), nullable)
        if isinstance(output, GraphQLScalarType):
            scalar = output.name if output.serialize is not int else "int"
            return LeafCompleter(_serializer(output), nullable, scalar=scalar)
        if isinstance(output, GraphQLEnumType):
            return LeafCompleter(_enum_serializer(output), nullable)
        if isinstance(output, GraphQLObjectType):
            return ObjectCompleter(self.object_plan(output, selection_sets), nullable)
        raise Unsupported(f"a field of type {output} (an interface or union)")


def _passes_through(argument_type: Any, registry: Mapping[object, Any]) -> bool:
    """Whether strawberry hands the resolver this argument's coerced value as it is:
    a scalar other than GlobalID, nullable or not (``convert_argument``'s leaf case)."""
    if isinstance(argument_type, StrawberryMaybe):
        return False  # wrapped in Some
    if isinstance(argument_type, StrawberryOptional):
        argument_type = argument_type.of_type
    return argument_type is not GlobalID and is_scalar(argument_type, registry)


def _is_leaf(input_type: Any) -> bool:
    """A scalar or enum argument (nullable or not): its converted value is immutable."""
    if isinstance(input_type, GraphQLNonNull):
        input_type = input_type.of_type
    return isinstance(input_type, GraphQLScalarType | GraphQLEnumType)


def compile_operation(
    schema: GraphQLSchema,
    document: DocumentNode,
    operation_name: str | None,
    directive_values: Mapping[str, Any],
) -> ObjectPlan:
    """The plan of the document's query operation; Unsupported when strawberry must run it."""
    operation = find_operation(document, operation_name)
    if operation.operation is not OperationType.QUERY:
        raise Unsupported(f"a {operation.operation.value}")
    root = schema.query_type
    if root is None:
        raise Unsupported("no query type")
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    collector = _Collector(fragments, directive_values)
    # Where strawberry keeps itself on the schema it built (its argument conversion).
    strawberry_schema = strawberry_schema_of(schema)
    return _Compiler(collector, strawberry_schema).object_plan(root, [operation.selection_set])

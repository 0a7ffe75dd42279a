"""The ``viewer`` root field: the caller's own name, open to every caller, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass

from graphql import get_named_type

from graph_schema.context import GraphContext
from graph_schema.identity import PER_CALLER_FIELDS, asks_who
from graph_schema.scope import EVERYTHING, Scope
from tests.support.graph import SmallWorld


@dataclass
class Someone:
    """A caller as the server's auth hands it to the graph."""

    username: str
    scope: Scope

    async def current_scope(self) -> Scope:
        return self.scope


async def test_the_viewer_is_the_caller_as_authenticated_even_with_no_rights() -> None:
    world = SmallWorld()
    nobody = Someone("system:serviceaccount:research:alice", Scope())
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=nobody.scope,
                       viewer=nobody)  # fmt: skip
    result = await world.schema.execute("{ viewer { username } nodes { name } }", context_value=ctx)
    assert result.errors is None, result.errors
    assert result.data == {
        "viewer": {"username": "system:serviceaccount:research:alice"},
        "nodes": [],
    }


async def test_a_server_that_checks_no_tokens_knows_no_name() -> None:
    world = SmallWorld()
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=EVERYTHING)
    result = await world.schema.execute("{ viewer { username } }", context_value=ctx)
    assert result.errors is None, result.errors
    assert result.data == {"viewer": {"username": None}}


def test_every_field_that_names_the_caller_is_declared_per_caller() -> None:
    schema = SmallWorld().schema._schema
    naming = {
        f"{type_name}.{field_name}"
        for type_name, graphql_type in schema.type_map.items()
        for field_name, field in getattr(graphql_type, "fields", {}).items()
        if get_named_type(field.type).name == "Identity"
    }
    assert naming == {f"Query.{name}" for name in PER_CALLER_FIELDS}


def test_a_document_asks_who_wherever_a_per_caller_field_is_written() -> None:
    for document in (
        "{ viewer { username } }",
        "{ me: viewer { username } }",
        "query { ...Who } fragment Who on Query { viewer { username } }",
        "{ nodes { name } }\n# viewer",
        "{viewer{username}}",
    ):
        assert asks_who(document), document
    for document in ("{ nodes { name } }", "{ viewers }", "{ myviewer }", "{ viewer_2 }"):
        assert not asks_who(document), document

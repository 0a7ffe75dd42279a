"""The ``viewer`` root field: the caller's own name, open to every caller, and nothing more."""

from __future__ import annotations

from dataclasses import dataclass

from graph_schema.context import GraphContext
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

"""Entity representations strawberry cannot use get a one-line error each, not a masked fault."""

from __future__ import annotations

import logging

import pytest

from graph_schema.context import GraphContext
from tests.support.graph import SmallWorld

QUERY = """query($r: [_Any!]!) {
  _entities(representations: $r) { __typename ... on Node { name } ... on Gpu { uuid } }
}"""


async def test_each_unusable_representation_is_refused_alone_and_nothing_is_logged_as_a_fault(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = SmallWorld()
    representations = [
        {"__typename": "Node", "name": "node-a"},
        "node-a",
        {"name": "node-a"},
        {"__typename": "Deployment", "name": "x"},
        {"__typename": "Gpu"},
        {"__typename": "Node", "name": "node-a", "zone": "z1"},
        {"__typename": "Node", "name": 7},
        {"__typename": "Gpu", "uuid": "GPU-node-b-0"},
    ]
    with caplog.at_level(logging.DEBUG, logger="graph_schema"):
        result = await world.schema.execute(
            QUERY,
            variable_values={"r": representations},
            context_value=GraphContext(world.cluster, world.agents, world.schema.state),
        )
    assert result.data is not None
    assert result.data["_entities"] == [
        {"__typename": "Node", "name": "node-a"},
        None, None, None, None, None, None,
        {"__typename": "Gpu", "uuid": "GPU-node-b-0"},
    ]  # fmt: skip
    errors = {tuple(e.path or ()): e.message for e in result.errors or []}
    assert errors == {
        ("_entities", 1): "representation 1 must be an object with __typename and the "
        "entity's key fields",
        ("_entities", 2): "representation 2: __typename must name an entity type of this "
        "subgraph (Gpu, Node, Pod)",
        ("_entities", 3): "representation 3: __typename must name an entity type of this "
        "subgraph (Gpu, Node, Pod)",
        ("_entities", 4): "representation 4: a Gpu reference needs uuid",
        ("_entities", 5): "representation 5: Node has no key field zone",
        ("_entities", 6): "representation 6: Node's key fields are strings",
    }
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_an_object_of_many_unknown_keys_is_refused_without_echoing_them_all() -> None:
    world = SmallWorld()
    flood = {"__typename": "Node", "name": "node-a"} | {f"k{i:04d}": "v" for i in range(2_000)}
    flood["a" * 100_000] = "v"
    result = await world.schema.execute(
        QUERY,
        variable_values={"r": [flood]},
        context_value=GraphContext(world.cluster, world.agents, world.schema.state),
    )
    (error,) = result.errors or []
    assert error.message == (
        f"representation 0: Node has no key field {'a' * 40}..., k0000, k0001, k0002, k0003 "
        "(and 1996 more)"
    )

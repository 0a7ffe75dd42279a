"""Federation v2: the SDL carries the entity keys and _entities resolves each entity."""

from __future__ import annotations

import re

from graph_schema.context import GraphContext
from graph_schema.schema import build_schema
from tests.support.graph import SmallWorld


async def test_service_sdl_carries_the_keys() -> None:
    world = SmallWorld()
    result = await world.schema.execute(
        "{ _service { sdl } }",
        context_value=GraphContext(world.cluster, world.agents, world.schema.state),
    )
    assert result.errors is None
    assert result.data is not None
    sdl = result.data["_service"]["sdl"]
    assert re.search(r'@link\(url: "https://specs\.apollo\.dev/federation/v2\.\d+"', sdl)
    assert 'type Node @key(fields: "name")' in sdl
    assert 'type Pod @key(fields: "uid") @key(fields: "namespace name")' in sdl
    assert 'type Gpu @key(fields: "uuid")' in sdl
    assert "scalar Bytes" in sdl


async def test_entities_resolve_pod_node_and_gpu() -> None:
    world = SmallWorld()
    representations = [
        {"__typename": "Pod", "uid": world.train2.uid},
        {"__typename": "Pod", "namespace": "serving", "name": "infer-1"},
        {"__typename": "Node", "name": "node-b"},
        {"__typename": "Gpu", "uuid": "GPU-node-a-0"},
        {"__typename": "Pod", "uid": "no-such-uid"},
        {"__typename": "Node", "name": "no-such-node"},
    ]
    result = await world.schema.execute(
        """query($r: [_Any!]!) {
          _entities(representations: $r) {
            __typename
            ... on Pod { namespace name gpus { uuid } }
            ... on Node { name internalIp }
            ... on Gpu { uuid node { name } processes { pod { name } } }
          }
        }""",
        variable_values={"r": representations},
        context_value=GraphContext(world.cluster, world.agents, world.schema.state),
    )
    assert result.errors is None
    assert result.data is not None
    assert result.data["_entities"] == [
        {"__typename": "Pod", "namespace": "ml", "name": "train-2",
         "gpus": [{"uuid": "GPU-node-a-0"}]},
        {"__typename": "Pod", "namespace": "serving", "name": "infer-1",
         "gpus": [{"uuid": "GPU-node-b-0"}]},
        {"__typename": "Node", "name": "node-b", "internalIp": "10.0.0.2"},
        {"__typename": "Gpu", "uuid": "GPU-node-a-0", "node": {"name": "node-a"},
         "processes": [{"pod": {"name": "train-1"}}, {"pod": {"name": "train-2"}}]},
        None,
        None,
    ]  # fmt: skip
    # The Gpu lookup and both pods' GPUs share one call per node.
    assert world.agents.calls == {"node-a": 1, "node-b": 1}


async def test_pod_reference_without_a_key_is_a_clear_error() -> None:
    world = SmallWorld()
    result = await world.schema.execute(
        'query { _entities(representations: [{__typename: "Pod", name: "x"}]) '
        "{ ... on Pod { name } } }",
        context_value=GraphContext(world.cluster, world.agents, world.schema.state),
    )
    assert result.errors is not None
    assert result.errors[0].message == "a Pod reference needs uid, or namespace and name"


def test_each_schema_has_its_own_server_state() -> None:
    a, b = build_schema(), build_schema()
    assert a.state is not b.state
    assert a.state.subscriptions is not b.state.subscriptions

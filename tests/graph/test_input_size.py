"""Variables' list items are counted, and refused past the limit, before coercion."""

from __future__ import annotations

from typing import Any

import pytest
from graphql.execution import values

from graph_schema.context import GraphContext
from graph_schema.input_size import VariablesTooLargeError, count_list_items
from graph_schema.limits import SchemaLimits
from graph_schema.schema import build_schema
from tests.support.graph import synthetic_cluster

ENTITIES = "query($r: [_Any!]!) { _entities(representations: $r) { ... on Gpu { uuid } } }"


def gpu_references(count: int) -> list[dict[str, str]]:
    return [{"__typename": "Gpu", "uuid": f"GPU-node-00000-{i}"} for i in range(count)]


def test_list_items_are_counted_at_any_depth_and_the_count_stops_past_the_limit() -> None:
    assert count_list_items([{"a": [1, 2, [3, 4]]}, "x", 7], stop_above=100) == 5
    assert count_list_items([{"a": {"b": []}}], stop_above=100) == 0
    # The top list alone is past the limit: the 22,000 dicts are never walked.
    assert count_list_items([list(range(22_000))], stop_above=10) == 22_000
    # As deep as orjson decodes (1,024), deeper than Python's recursion limit.
    deep: Any = []
    for _ in range(5_000):
        deep = [deep]
    assert count_list_items([deep], stop_above=10**6) == 5_000


async def execute(query: str, variables: dict[str, Any], limits: SchemaLimits) -> Any:
    world = synthetic_cluster(1)
    schema = build_schema(limits)
    ctx = GraphContext(world.cluster, world.snapshots, schema.state)
    result = await schema.execute(query, variable_values=variables, context_value=ctx)
    return result, world


async def test_too_many_representations_are_refused_with_the_count_and_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coerced: list[object] = []
    real = values.coerce_variable_values

    def recording(*args: Any, **kwargs: Any) -> Any:
        coerced.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(values, "coerce_variable_values", recording)
    result, world = await execute(
        ENTITIES, {"r": gpu_references(22_000)}, SchemaLimits(max_variable_items=5_000)
    )
    assert result.data is None
    (error,) = result.errors
    assert isinstance(error.original_error, VariablesTooLargeError)
    assert error.extensions == {"code": "VARIABLES_TOO_LARGE", "estimate": 22_000, "limit": 5_000}
    assert "22,000 list items" in error.message and "limit of 5,000" in error.message
    assert coerced == [], "refused before graphql-core coerces the variables"
    assert world.snapshots.total_calls == 0
    within, _ = await execute(ENTITIES, {"r": gpu_references(3)}, SchemaLimits())
    assert within.errors is None and len(coerced) == 1


async def test_at_the_limit_representations_are_resolved() -> None:
    limits = SchemaLimits(max_variable_items=8)
    result, _ = await execute(ENTITIES, {"r": gpu_references(8)}, limits)
    assert result.errors is None, result.errors
    assert len(result.data["_entities"]) == 8
    assert result.data["_entities"][0] == {"uuid": "GPU-node-00000-0"}


async def test_the_items_of_every_variable_count_together() -> None:
    result, _ = await execute(
        "query($a: [_Any!]!, $b: [_Any!]!) { x: _entities(representations: $a) { __typename } "
        "y: _entities(representations: $b) { __typename } }",
        {"a": gpu_references(6), "b": gpu_references(6)},
        SchemaLimits(max_variable_items=10),
    )
    assert result.data is None
    assert result.errors[0].extensions["estimate"] == 12

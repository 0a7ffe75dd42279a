"""The cluster map's documents pass the server's own limits at 1,000 nodes x 8 GPUs."""

from __future__ import annotations

from graphql import FieldNode, FragmentDefinitionNode, SelectionSetNode, parse

from api.http.map_queries import (
    GPU_DETAILS_QUERY,
    GPU_FIELDS,
    LIVE_SUBSCRIPTION,
    SNAPSHOT_QUERY,
    TILE_FIELDS,
)
from api.settings import Settings
from graph_schema.context import GraphContext
from graph_schema.cost import estimate
from graph_schema.limits import SchemaLimits
from graph_schema.schema import build_schema
from tests.support.graph import synthetic_cluster

NODES, GPUS, PROCESSES = 1000, 8, 4


def _limits() -> SchemaLimits:
    """The server's defaults, as `gpugraph serve` builds them."""
    return Settings().limits


async def test_the_map_is_admitted_and_answered_at_1000_nodes() -> None:
    sc = synthetic_cluster(NODES, gpus_per_node=GPUS, processes_per_gpu=PROCESSES)
    limits = _limits()
    schema = build_schema(limits)
    context = GraphContext(sc.cluster, sc.snapshots, schema.state)
    result = await schema.execute(SNAPSHOT_QUERY, context_value=context)
    assert result.errors is None
    assert result.data is not None
    nodes = result.data["nodes"]
    assert len(nodes) == NODES and sum(len(n["gpus"]) for n in nodes) == NODES * GPUS

    # The estimate the admission made, with the sizes it measured, and a margin
    # for a few more fields on the page before the default budget refuses it.
    sizes = schema.gauge.sizes(sc.cluster)
    assert (sizes.nodes, sizes.gpus_per_node, sizes.processes_per_gpu) == (NODES, GPUS, PROCESSES)
    for document in (SNAPSHOT_QUERY, LIVE_SUBSCRIPTION):
        objects = estimate(schema._schema, parse(document), sizes).objects
        assert objects * 1.25 <= limits.max_result_items, (document, objects)


async def test_the_live_subscription_ticks_every_gpu_at_1000_nodes() -> None:
    sc = synthetic_cluster(NODES, gpus_per_node=GPUS, processes_per_gpu=PROCESSES)
    schema = build_schema(_limits())
    context = GraphContext(sc.cluster, sc.snapshots, schema.state)
    stream = await schema.subscribe(
        LIVE_SUBSCRIPTION, variable_values={"interval": 0.5}, context_value=context
    )
    assert not hasattr(stream, "errors"), stream
    try:
        first = await anext(stream)
    finally:
        await stream.aclose()
    assert first.errors is None
    assert first.data is not None and len(first.data["gpuUpdates"]) == NODES * GPUS


def _fields(selection: SelectionSetNode | None) -> dict[str, object]:
    """A selection as nested dicts of field names (leaves map to an empty dict)."""
    if selection is None:
        return {}
    return {
        node.name.value: _fields(node.selection_set)
        for node in selection.selections
        if isinstance(node, FieldNode)
    }


def _fragment(text: str) -> dict[str, object]:
    (definition,) = parse(text).definitions
    assert isinstance(definition, FragmentDefinitionNode)
    return _fields(definition.selection_set)


def _within(small: dict[str, object], large: dict[str, object]) -> bool:
    return all(
        name in large and _within(sub, large[name])  # type: ignore[arg-type]
        for name, sub in small.items()
    )


def test_the_ticks_and_the_details_carry_everything_a_tile_draws() -> None:
    # The first picture asks only for the tiles' fields: a tick (or a GPU's
    # details) replaces a GPU with one that must still draw its tile.
    tile, gpu = _fragment(TILE_FIELDS), _fragment(GPU_FIELDS)
    assert _within(tile, gpu)
    # ... and asks for less than they do: the details' fields wait for a click.
    assert not _within(gpu, tile)
    assert "...MapTile" in SNAPSHOT_QUERY and "...MapGpu" not in SNAPSHOT_QUERY
    assert "...MapGpu" in LIVE_SUBSCRIPTION and "...MapGpu" in GPU_DETAILS_QUERY


async def test_the_first_picture_is_smaller_than_a_tick_at_1000_nodes() -> None:
    sc = synthetic_cluster(NODES, gpus_per_node=GPUS, processes_per_gpu=PROCESSES)
    schema = build_schema(_limits())
    context = GraphContext(sc.cluster, sc.snapshots, schema.state)
    snapshot = await schema.execute(SNAPSHOT_QUERY, context_value=context)
    assert snapshot.errors is None and snapshot.data is not None
    tile = snapshot.data["nodes"][0]["gpus"][0]
    details = await schema.execute(
        GPU_DETAILS_QUERY, variable_values={"uuid": tile["uuid"]}, context_value=context
    )
    assert details.errors is None and details.data is not None
    full = details.data["gpu"]
    assert full["name"] and full["processes"][0]["pid"]
    # The same GPU, less of it: none of the details' fields.
    assert set(tile) < set(full) and "pid" not in tile["processes"][0]
    assert {k: v for k, v in full.items() if k in tile and k != "processes"} == {
        k: v for k, v in tile.items() if k != "processes"
    }

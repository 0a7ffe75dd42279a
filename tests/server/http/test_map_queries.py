"""The cluster map's documents pass the server's own limits at 1,000 nodes x 8 GPUs."""

from __future__ import annotations

from graphql import parse

from api.http.map_queries import LIVE_SUBSCRIPTION, SNAPSHOT_QUERY
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

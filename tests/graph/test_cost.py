"""Admission by cost: the worst-case estimate, its refusal, and the width limit."""

from __future__ import annotations

import time
from typing import Any

import pytest
from graphql import GraphQLObjectType, get_named_type, is_list_type, is_object_type, parse
from graphql.type import GraphQLNonNull
from graphql.validation.rules.overlapping_fields_can_be_merged import (
    OverlappingFieldsCanBeMergedRule,
)

from graph_schema.admission import SizeGauge
from graph_schema.context import GraphContext
from graph_schema.cost import LIST_SIZES, ClusterSizes, estimate
from graph_schema.limits import SchemaLimits
from graph_schema.occupancy.fan_out import MAX_FIRST
from graph_schema.schema import build_schema
from tests.support.graph import (
    MemoryCluster,
    MemorySnapshots,
    gpu_sample,
    node_record,
    pod_record,
    process,
    snapshot,
    synthetic_cluster,
)

SCHEMA = build_schema()
GRAPHQL_SCHEMA = SCHEMA._schema
DEMO = ClusterSizes(
    nodes=4, pods=40, pods_per_node=10, gpus_per_node=8, processes_per_gpu=4, containers_per_pod=2
)
FULL_CLUSTER = """{ nodes { name gpus { uuid memoryUsedBytes utilizationGpu
  processes { pid usedMemoryBytes pod { name namespace } } } } }"""


def chain(depth: int) -> str:
    """``{ gpus { node { gpus { node ... uuid } } } }``, ``depth`` fields deep."""
    opened = ["gpus { " if i % 2 == 0 else "node { " for i in range(depth - 1)]
    leaf = "uuid" if (depth - 1) % 2 else "name"
    return "{ " + "".join(opened) + leaf + " }" * len(opened) + " }"


def cost(query: str, sizes: ClusterSizes = DEMO, **kw: Any) -> int:
    return estimate(GRAPHQL_SCHEMA, parse(query), sizes, **kw).objects


def test_every_object_list_field_has_a_size_rule() -> None:
    missing = []
    for type_ in GRAPHQL_SCHEMA.type_map.values():
        if not is_object_type(type_) or type_.name.startswith("__"):
            continue
        assert isinstance(type_, GraphQLObjectType)
        for name, field in type_.fields.items():
            inner = field.type.of_type if isinstance(field.type, GraphQLNonNull) else field.type
            lists_objects = is_list_type(inner) and is_object_type(get_named_type(field.type))
            if lists_objects and (type_.name, name) not in LIST_SIZES and name != "_entities":
                missing.append(f"{type_.name}.{name}")
    assert missing == []


def test_the_estimate_multiplies_list_sizes_and_counts_every_object() -> None:
    assert cost("{ nodes { name } }") == 4
    # Gpu.node is one object per GPU: 32 GPUs + 32 nodes.
    assert cost("{ gpus { node { name } } }") == 32 + 32
    assert cost('{ gpus(nodeName: "n1") { uuid } }') == 8
    assert cost('{ pod(namespace: "a", name: "b") { containers { name } } }') == 1 + 2
    # Aliases count separately; scalars and introspection cost nothing.
    assert cost("{ a: nodes { name } b: nodes { name } __typename }") == 8


def test_the_issue_depth_12_and_10_multipliers_are_refused_and_depth_8_fits() -> None:
    budget = SchemaLimits().max_result_items
    assert cost(chain(12)) > budget
    # Depth 10 was admitted under a budget of 200,000; its answer kept ~100 MB.
    assert cost(chain(6)) == 32 + 32 + 256 + 256 + 2048
    assert cost(chain(8)) == cost(chain(6)) + 2048 + 16_384 <= budget
    assert cost(chain(10)) == cost(chain(8)) + 16_384 + 131_072 > budget


def test_the_full_cluster_query_at_1000_nodes_fits_the_default_budget() -> None:
    sizes = ClusterSizes(
        nodes=1000,
        pods=32_000,
        pods_per_node=32,
        gpus_per_node=8,
        processes_per_gpu=4,
        containers_per_pod=2,
    )
    assert cost(FULL_CLUSTER, sizes) == 1000 + 8000 + 32_000 + 32_000
    assert cost(FULL_CLUSTER, sizes) <= SchemaLimits().max_result_items


def test_entity_representations_are_counted_from_variables_and_literals() -> None:
    query = (
        "query($r: [_Any!]!) { _entities(representations: $r) { ... on Gpu { node { name } } } }"
    )
    reps = [{"__typename": "Gpu", "uuid": f"GPU-{i}"} for i in range(22_000)]
    assert cost(query, variables={"r": reps}) == 22_000 * 2
    literal = '{ _entities(representations: [{__typename: "Node", name: "a"}, {}]) { __typename } }'
    assert cost(literal) == 2


def test_fragments_are_costed_once_so_exponential_spreads_stay_cheap() -> None:
    fragments = ["fragment F0 on Node { name pods { name } }"]
    for i in range(1, 40):
        fragments.append(
            f"fragment F{i} on Node {{ ...F{i - 1} a{i}: pods {{ node {{ ...F{i - 1} }} }} }}"
        )
    query = "{ nodes { ...F39 } } " + " ".join(fragments)
    started = time.perf_counter()
    assert cost(query) > 10**12
    assert time.perf_counter() - started < 1.0  # linear, not 2^39


def test_unknown_fields_and_cyclic_fragments_are_left_to_validation() -> None:
    assert cost("{ nosuch { a } nodes { bogus { x } } }") == 4
    cyclic = "{ nodes { ...A } } fragment A on Node { pods { node { ...A } } }"
    assert cost(cyclic) == 4 + 4 * 10 * 2


def demo_cluster() -> tuple[MemoryCluster, MemorySnapshots]:
    cluster, snapshots = MemoryCluster(), MemorySnapshots()
    for n in range(4):
        name = f"node-{n}"
        cluster.add_node(node_record(name, gpus=8))
        gpus = [gpu_sample(name, i, [process(1000 + i, 1 << 30)]) for i in range(8)]
        snapshots.put(snapshot(name, gpus))
        for p in range(3):
            cluster.add_pod(pod_record("ml", f"w-{n}-{p}", name))
    return cluster, snapshots


async def run(query: str, limits: SchemaLimits = SchemaLimits()) -> Any:  # noqa: B008
    cluster, snapshots = demo_cluster()
    schema = build_schema(limits)
    return await schema.execute(query, context_value=GraphContext(cluster, snapshots, schema.state))


def count_objects(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + sum(count_objects(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_objects(v) for v in value)
    return 0


async def test_a_refusal_names_the_estimate_and_the_limit_and_runs_nothing() -> None:
    cluster, snapshots = demo_cluster()
    schema = build_schema()
    result = await schema.execute(
        chain(12), context_value=GraphContext(cluster, snapshots, schema.state)
    )
    assert result.data is None
    (error,) = result.errors or []
    assert error.extensions is not None
    assert error.extensions["code"] == "QUERY_TOO_COSTLY"
    estimate_, limit = error.extensions["estimate"], error.extensions["limit"]
    assert limit == 150_000 and estimate_ > limit
    assert f"{estimate_:,}" in error.message and "150,000" in error.message
    assert "4 nodes" in error.message and "8 GPUs per node" in error.message
    assert snapshots.total_calls == 0, "refused before any agent is asked"


@pytest.mark.parametrize(
    "query",
    [
        chain(6),
        FULL_CLUSTER,
        "{ pods { name node { name gpus { uuid pods { name } } } containers { name } } }",
        "{ nodes { pods { gpuProcesses { pid pod { name } } gpus { uuid } } } }",
    ],
)
async def test_the_estimate_bounds_what_execution_returns(query: str) -> None:
    result = await run(query)
    assert result.errors is None, result.errors
    cluster, _ = demo_cluster()
    schema = build_schema()
    sizes = schema.gauge.sizes(cluster)
    # What was seen so far; the gauge also takes the agents' reports into account.
    sizes = ClusterSizes(
        sizes.nodes, sizes.pods, sizes.pods_per_node, 8, 4, sizes.containers_per_pod
    )
    # The response's objects, less the root's data object.
    assert count_objects(result.data) - 1 <= cost(query, sizes)


async def test_a_wide_selection_is_refused_before_validation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # graphql-core's overlap check is quadratic in a selection's width: what
    # matters is that it never sees the wide one.
    overlap_checks = 0
    check = OverlappingFieldsCanBeMergedRule.enter_selection_set

    def counted(self: OverlappingFieldsCanBeMergedRule, *args: Any) -> Any:
        nonlocal overlap_checks
        overlap_checks += 1
        return check(self, *args)

    monkeypatch.setattr(OverlappingFieldsCanBeMergedRule, "enter_selection_set", counted)
    assert (await run("{ pods { node { name } } }")).errors is None
    assert overlap_checks > 0  # the spy sees validation when it runs
    overlap_checks = 0
    wide = "{ " + "pods { node { name } } " * 700 + "}"
    result = await run(wide)
    assert result.data is None
    (error,) = result.errors or []
    assert error.extensions is not None and error.extensions["code"] == "SELECTION_TOO_WIDE"
    assert "700 fields" in error.message and "100" in error.message
    assert overlap_checks == 0, "refused after the overlap check, not before"
    # Flattened: two spreads of a 60-field fragment make 120 fields in one set.
    fields = " ".join(f"f{i}: name" for i in range(60))
    spread = "{ nodes { ...A ...B } } fragment A on Node { " + fields + " } "
    spread += "fragment B on Node { " + fields.replace("f", "g") + " }"
    result = await run(spread, SchemaLimits(max_aliases=1000))
    assert result.errors and "120 fields" in result.errors[0].message


async def test_the_sizes_follow_the_cache_and_what_agents_report() -> None:
    cluster, snapshots = demo_cluster()
    crowded = [process(5000 + i, 1 << 20) for i in range(9)]
    snapshots.put(snapshot("node-1", [gpu_sample("node-1", i, crowded) for i in range(12)]))
    now = [0.0]
    schema = build_schema()
    gauge = SizeGauge(schema.state.views, ttl=1.0, clock=lambda: now[0])
    before = gauge.sizes(cluster)
    assert (before.nodes, before.pods, before.pods_per_node) == (4, 12, 3)
    assert (before.gpus_per_node, before.processes_per_gpu) == (8, 4)  # capacity, the floor
    await schema.execute(
        "{ gpus { uuid } }", context_value=GraphContext(cluster, snapshots, schema.state)
    )
    assert gauge.sizes(cluster) == before, "reused within the TTL"
    now[0] = 1.0
    after = gauge.sizes(cluster)
    assert (after.gpus_per_node, after.processes_per_gpu) == (12, 9)


def test_depth_is_measured_as_the_depth_limit_counts_it() -> None:
    def depth(query: str) -> int:
        return estimate(GRAPHQL_SCHEMA, parse(query), DEMO).depth

    assert depth(chain(12)) == 12
    assert depth("{ nodes { ...F } } fragment F on Node { pods { name } }") == 3
    assert depth("{ __schema { types { fields { name } } } nodes { name } }") == 2


async def test_the_full_cluster_query_is_admitted_at_1000_nodes_after_the_agents_report() -> None:
    sc = synthetic_cluster(1000, gpus_per_node=8, processes_per_gpu=4)
    schema = build_schema()
    context = GraphContext(sc.cluster, sc.snapshots, schema.state)
    result = await schema.execute(FULL_CLUSTER, context_value=context)
    assert result.errors is None
    sizes = schema.gauge.sizes(sc.cluster)
    assert (sizes.nodes, sizes.gpus_per_node, sizes.processes_per_gpu) == (1000, 8, 4)
    admitted = cost(FULL_CLUSTER, sizes)
    assert admitted == 1000 + 8000 + 32_000 + 32_000 <= SchemaLimits().max_result_items


def test_an_events_page_costs_a_page_of_events_times_one_gpus_processes() -> None:
    query = """{ gpuEvents(since: "2026-12-01T00:00:00Z", first: 10) {
      edges { node { xid processes { pid pod { name } } } } } }"""
    per_edge = 2 + DEMO.processes_per_gpu * 2  # the edge, its event, each process and its pod
    assert cost(query) == 1 + MAX_FIRST * per_edge

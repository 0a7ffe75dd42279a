"""The compiled path and strawberry give the same bytes, for generated and real documents.

Every document runs through both over the same cluster, agents and caller,
and the two answers, formatted as the server formats them and encoded by
orjson, must be equal byte for byte. Where the plan declines (it returns
None), strawberry's answer is the answer, so there is nothing to compare;
the documents the map and ``top`` send must not be declined.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from graphql import (
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.http import process_result

from api.demo.queries import NO_POD, SHARED_GPU, WORKER
from api.http import map_queries
from api.top import queries as top_queries
from graph_schema.compiled.documents import CompiledDocuments
from graph_schema.context import GraphContext
from graph_schema.limits import SchemaLimits
from graph_schema.schema import GraphSchema, build_schema
from graph_schema.scope import EVERYTHING, Scope
from tests.support.graph import (
    GiB,
    MemoryCluster,
    MemorySnapshots,
    SmallWorld,
    gpu_sample,
    gpu_uuid,
    node_record,
    pod_record,
    process,
    snapshot,
    synthetic_cluster,
)

ROOT = Path(__file__).resolve().parents[3]

# Callers: everything; one namespace with its nodes; one namespace, all nodes, its
# command lines; nothing at all.
SCOPES = {
    "everything": EVERYTHING,
    "ml-only": Scope(pod_namespaces=frozenset({"ml", "ns-1"})),
    "ml-all-nodes": Scope(
        pod_namespaces=frozenset({"ml", "ns-1"}),
        all_nodes=True,
        exec_namespaces=frozenset({"ml"}),
    ),
    "nobody": Scope(),
}


class World:
    """A cluster, its agents and a schema: what both paths run over."""

    def __init__(
        self, cluster: MemoryCluster, agents: MemorySnapshots, schema: GraphSchema
    ) -> None:
        self.cluster = cluster
        self.agents = agents
        self.schema = schema
        self.compiled = CompiledDocuments(schema)

    async def both(
        self, query: str, variables: dict[str, Any] | None, scope: Scope
    ) -> tuple[bytes, bytes | None]:
        """strawberry's answer and the plan's (None where the plan declines)."""
        state = self.schema.state
        reference = await self.schema.execute(
            query,
            variable_values=variables,
            context_value=GraphContext(self.cluster, self.agents, state, scope=scope),
        )
        compiled = await self.compiled.execute(
            query, None, variables, GraphContext(self.cluster, self.agents, state, scope=scope)
        )
        expected = orjson.dumps(process_result(reference))
        return expected, None if compiled is None else orjson.dumps(process_result(compiled))


def small_world(limits: SchemaLimits = SchemaLimits()) -> World:  # noqa: B008
    """The demo-like world: shared GPU, orphan process, lost GPU, field errors; a dead
    third node, and a fourth whose agent answers but cannot read its GPUs."""
    world = SmallWorld()
    world.cluster.add_node(node_record("node-c"))
    world.cluster.add_node(node_record("node-d"))
    world.agents.put(snapshot("node-c", [gpu_sample("node-c", 0, [])]))
    world.agents.kill("node-c")
    world.agents.put(snapshot("node-d", [], error="NVML_ERROR_DRIVER_NOT_LOADED"))
    return World(world.cluster, world.agents, build_schema(limits))


def synthetic_world() -> World:
    """Six nodes of 2 GPUs x 2 processes, two agents down and one raising a bug."""
    sc = synthetic_cluster(6, gpus_per_node=2, processes_per_gpu=2)
    sc.snapshots.kill("node-00001")
    sc.snapshots.kill("node-00004", "deadline exceeded")
    sc.snapshots.break_with("node-00003", RuntimeError("a bug"))
    return World(sc.cluster, sc.snapshots, build_schema())


# ------------------------------------------------------------ generated documents

NAMES = ["node-a", "node-b", "node-c", "node-d", "node-00002", "node-00001", "missing"]
NAMESPACES = ["ml", "serving", "ns-1", "ns-2", "nowhere"]
POD_NAMES = ["train-1", "infer-1", "idle", "w-node-00002-0-0", "gone"]
UUIDS = [gpu_uuid("node-a", 0), gpu_uuid("node-b", 0), gpu_uuid("node-00002", 1), "GPU-none"]
SELECTORS = ["app=train", "app in (train,infer)", "!canary", "tier!=db", "app in ("]
ARGUMENT_VALUES: dict[str, list[str]] = {
    "name": NAMES + POD_NAMES,
    "nodeName": NAMES,
    "namespace": NAMESPACES,
    "uuid": UUIDS,
    "labelSelector": SELECTORS,
}


def _named(output: GraphQLOutputType) -> Any:
    while isinstance(output, GraphQLNonNull | GraphQLList):
        output = output.of_type
    return output


@st.composite
def selection(draw: st.DrawFn, schema: Any, type_name: str, depth: int) -> str:
    """A selection set over ``type_name``: fields, aliases, arguments, fragments, directives."""
    parent = schema.type_map[type_name]
    assert isinstance(parent, GraphQLObjectType)
    names = sorted(n for n in parent.fields if not n.startswith("_"))
    if depth <= 0:
        names = [
            n for n in names if not isinstance(_named(parent.fields[n].type), GraphQLObjectType)
        ]
        names = names or ["__typename"]
    chosen = draw(st.lists(st.sampled_from([*names, "__typename"]), min_size=1, max_size=4))
    parts = []
    for i, name in enumerate(chosen):
        text = name
        if name != "__typename":
            field = parent.fields[name]
            args = []
            for arg_name, arg in field.args.items():
                required = isinstance(arg.type, GraphQLNonNull)
                if required or draw(st.booleans()):
                    value = draw(st.sampled_from(ARGUMENT_VALUES.get(arg_name, ["x"])))
                    args.append(f"{arg_name}: {orjson.dumps(value).decode()}")
            if args:
                text += "(" + ", ".join(args) + ")"
            inner = _named(field.type)
            if isinstance(inner, GraphQLObjectType):
                text += " { " + draw(selection(schema, inner.name, depth - 1)) + " }"
        # Same-named fields with different arguments cannot merge: alias repeats.
        if chosen.count(name) > 1 or draw(st.booleans()):
            text = f"a{i}: {text}"
        directive = draw(
            st.sampled_from(["", "", "@include(if: true)", "@skip(if: true)", "@include(if: $on)"])
        )
        parts.append(f"{text} {directive}".strip())
    if draw(st.booleans()):
        # The same fields again through an inline fragment: merged, not repeated.
        parts.append(f"... on {type_name} {{ {parts[0]} }}")
    return " ".join(parts)


def documents(schema: Any) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
    """A query over the whole schema and its variables."""
    return st.tuples(
        selection(schema, "Query", 3).map(lambda body: f"query($on: Boolean!) {{ {body} }}"),
        st.fixed_dictionaries({"on": st.booleans()}),
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def assert_same(world: World, query: str, variables: dict[str, Any] | None, scope: Scope) -> bool:
    """Both answers are byte-equal; True when the plan answered (did not decline)."""
    expected, got = run(world.both(query, variables, scope))
    if got is not None:
        assert got == expected, f"{query}\n{variables}\nstrawberry: {expected!r}\ncompiled: {got!r}"
    return got is not None


_SCHEMA = build_schema()._schema


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(document=documents(_SCHEMA), scope=st.sampled_from(sorted(SCOPES)), which=st.booleans())
def test_generated_documents_answer_the_same(
    document: tuple[str, dict[str, Any]], scope: str, which: bool
) -> None:
    query, variables = document
    world = small_world() if which else synthetic_world()
    assert_same(world, query, variables, SCOPES[scope])


# ------------------------------------------------------------ the clients' documents

README_BLOCK = re.compile(r"```graphql\n(.*?)```", re.S)


def readme_examples() -> list[str]:
    """Every GraphQL example of the README and docs, and the demo's example queries."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [m for path in texts for m in README_BLOCK.findall(path.read_text())]
    demo = [
        SHARED_GPU.format(uuid=gpu_uuid("node-a", 0)),
        NO_POD.format(node="node-a"),
        WORKER.format(namespace="ml", name="train-1"),
    ]
    return [*found, *demo]


def client_documents() -> list[tuple[str, str, dict[str, Any] | None]]:
    """What the map and ``top`` send, with the variables they send it with."""
    top: list[tuple[str, str, dict[str, Any] | None]] = [
        (f"top {v}", top_queries.SNAPSHOT, v)
        for v in (
            {"withPods": False},
            {"withPods": True},
            {"withPods": True, "node": "node-a", "namespace": "ml", "selector": "app=train"},
        )
    ]
    return [
        ("map snapshot", map_queries.SNAPSHOT_QUERY, None),
        ("map gpu", map_queries.GPU_QUERY, {"uuid": gpu_uuid("node-a", 0)}),
        ("map gpu on a down node", map_queries.GPU_QUERY, {"uuid": gpu_uuid("node-c", 0)}),
        *top,
    ]


@pytest.mark.parametrize("scope", sorted(SCOPES))
@pytest.mark.parametrize(
    "name,query,variables", client_documents(), ids=[d[0] for d in client_documents()]
)
def test_the_map_and_top_documents_run_compiled_and_answer_the_same(
    name: str, query: str, variables: dict[str, Any] | None, scope: str
) -> None:
    for world in (small_world(), synthetic_world()):
        assert assert_same(world, query, variables, SCOPES[scope]), f"the plan declined {name}"


@pytest.mark.parametrize("query", readme_examples())
def test_readme_and_demo_examples_answer_the_same(query: str) -> None:
    for scope in SCOPES.values():
        assert assert_same(small_world(), query, None, scope)


# ------------------------------------------------------------ what the plan declines


@pytest.mark.parametrize(
    "query",
    [
        "{ __schema { queryType { name } } }",
        '{ _entities(representations: [{__typename: "Node", name: "node-a"}]) '
        "{ ... on Node { name } } }",
        "{ _service { sdl } }",
        "subscription { gpuUpdates { uuid } }",
        "{ nodes { name ",  # does not parse
        "{ nodes { nope } }",  # not valid
    ],
)
def test_what_the_plan_does_not_cover_falls_back_to_strawberry(query: str) -> None:
    world = small_world()
    _, got = run(world.both(query, None, EVERYTHING))
    assert got is None


def test_an_error_in_a_non_null_field_is_strawberrys_answer() -> None:
    # graphql-core nulls the parent (here: all of data); the plan leaves that to it.
    world = small_world()
    variables = {"withPods": True, "selector": "app in ("}
    expected, got = run(world.both(top_queries.SNAPSHOT, variables, EVERYTHING))
    assert got is None
    assert orjson.loads(expected)["data"] is None


def test_a_result_over_the_budget_is_strawberrys_answer() -> None:
    # Admission assumes 4 processes per GPU until an agent reports more; this GPU
    # has 10, so the operation is admitted and its execution crosses the budget.
    cluster, agents = MemoryCluster(), MemorySnapshots()
    cluster.add_node(node_record("busy", gpus=1))
    processes = []
    for k in range(10):
        pod = pod_record("ml", f"p{k}", "busy", container_ids=[f"c{k}"])
        cluster.add_pod(pod)
        processes.append(process(100 + k, GiB, container_id=f"c{k}", pod_uid=pod.uid))
    agents.put(snapshot("busy", [gpu_sample("busy", 0, processes)]))
    world = World(cluster, agents, build_schema(SchemaLimits(max_result_items=6)))
    expected, got = run(world.both("{ gpuProcesses { pid } }", None, EVERYTHING))
    assert got is None
    assert b"RESULT_TOO_LARGE" in expected


def test_a_down_agent_nulls_only_its_nodes_gpus_with_the_same_error_and_path() -> None:
    world = small_world()
    expected, got = run(world.both("{ nodes { name gpus { uuid } } }", None, EVERYTHING))
    assert got == expected
    body = orjson.loads(got)
    by_name = {n["name"]: n for n in body["data"]["nodes"]}
    assert by_name["node-c"]["gpus"] is None
    assert by_name["node-a"]["gpus"] and by_name["node-b"]["gpus"]
    paths = [e["path"] for e in body["errors"]]
    assert ["nodes", 2, "gpus"] in paths


def test_a_plan_is_compiled_once_per_document_and_directive_values() -> None:
    world = small_world()
    for on in (True, False, True, False):
        assert_same(
            world,
            "query($on: Boolean!) { nodes @include(if: $on) { name } }",
            {"on": on},
            EVERYTHING,
        )
    (entry,) = world.compiled._documents.values()
    assert set(entry.plans) == {(True,), (False,)}


def test_remembered_selections_stay_right_across_callers_and_new_snapshots() -> None:
    # The plan reuses a GPU's rendered selection while the GPU object lives: callers
    # with other rights, and a new snapshot of the node, must still get their own.
    world = small_world()
    query = map_queries.SNAPSHOT_QUERY
    for _ in range(2):
        for scope in SCOPES.values():
            assert assert_same(world, query, None, scope)
    world.agents.put(snapshot("node-b", [gpu_sample("node-b", 0, [])]))
    for scope in SCOPES.values():
        assert assert_same(world, query, None, scope)

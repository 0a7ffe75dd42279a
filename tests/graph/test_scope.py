"""The scope filter on every field path: generated query shapes never reach another tenant."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graph_schema.context import GraphContext
from graph_schema.scope import Scope
from tests.support.graph import GiB, SmallWorld, gpu_uuid

ML_ONLY = Scope(pod_namespaces=frozenset({"ml"}))
# What only other tenants (serving) or cluster-wide callers (the host process) own.
FOREIGN_PIDS = {301, 999}
FOREIGN_CONTAINERS = {"ctr-i1"}

# Leaf fields always selected, so a leak shows up in the answer.
LEAVES = {
    "Node": "name",
    "Gpu": "uuid hiddenProcessCount hiddenMemoryBytes",
    "GpuProcess": "pid podUid containerId cmdline",
    "Pod": "uid namespace name",
    "Container": "id name",
}
# Object fields of each type, and the type they lead to.
EDGES = {
    "Node": [("pods", "Pod"), ("gpus", "Gpu")],
    "Gpu": [("processes", "GpuProcess"), ("node", "Node"), ("pods", "Pod")],
    "GpuProcess": [("gpu", "Gpu"), ("pod", "Pod"), ("container", "Container")],
    "Pod": [("node", "Node"), ("containers", "Container"), ("gpuProcesses", "GpuProcess"),
            ("gpus", "Gpu")],
    "Container": [("pod", "Pod"), ("gpuProcesses", "GpuProcess")],
}  # fmt: skip
ROOTS = [
    ('node(name: "node-b")', "Node"),
    ('node(name: "node-a")', "Node"),
    ("nodes", "Node"),
    ('pod(namespace: "serving", name: "infer-1")', "Pod"),
    ('pod(namespace: "ml", name: "train-1")', "Pod"),
    ("pods", "Pod"),
    ('pods(namespace: "serving")', "Pod"),
    (f'gpu(uuid: "{gpu_uuid("node-b", 0)}")', "Gpu"),
    (f'gpu(uuid: "{gpu_uuid("node-a", 1)}")', "Gpu"),
    ("gpus", "Gpu"),
    ('gpus(nodeName: "node-b")', "Gpu"),
    ("gpuProcesses", "GpuProcess"),
    ('gpuProcesses(namespace: "serving")', "GpuProcess"),
]
ENTITIES = (
    '_entities(representations: [{__typename: "Pod", namespace: "serving", name: "infer-1"}, '
    '{__typename: "Node", name: "node-b"}, '
    f'{{__typename: "Gpu", uuid: "{gpu_uuid("node-b", 0)}"}}])'
)


def selection(type_name: str, depth: int) -> st.SearchStrategy[str]:
    """A selection set on ``type_name``: its leaves plus some edges, ``depth`` levels deep."""
    if depth == 0:
        return st.just(f"{{ {LEAVES[type_name]} }}")
    edges = EDGES[type_name]
    return st.lists(st.sampled_from(edges), max_size=3, unique=True).flatmap(
        lambda chosen: st.tuples(*(selection(t, depth - 1) for _, t in chosen)).map(
            lambda subs: (
                "{ "
                + LEAVES[type_name]
                + "".join(f" {field} {sub}" for (field, _), sub in zip(chosen, subs, strict=True))
                + " }"
            )
        )
    )


def root_query() -> st.SearchStrategy[str]:
    """A query: one or two root fields (or _entities), each with a generated selection."""

    def one(index: int) -> st.SearchStrategy[str]:
        plain = st.sampled_from(ROOTS).flatmap(
            lambda root: selection(root[1], 3).map(lambda sub: f"r{index}: {root[0]} {sub}")
        )
        entities = st.sampled_from(["Pod", "Node", "Gpu"]).flatmap(
            lambda t: selection(t, 2).map(
                lambda sub: f"r{index}: {ENTITIES} {{ ... on {t} {sub} }}"
            )
        )
        return st.one_of(plain, entities)

    return st.lists(st.integers(0, 0), min_size=1, max_size=2).flatmap(
        lambda xs: st.tuples(*(one(i) for i in range(len(xs)))).map(
            lambda fields: "{ " + " ".join(fields) + " }"
        )
    )


def walk(value: Any, key: str) -> list[Any]:
    """Every value under ``key`` anywhere in a JSON answer."""
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k == key]
        return found + [x for v in value.values() for x in walk(v, key)]
    if isinstance(value, list):
        return [x for v in value for x in walk(v, key)]
    return []


WORLD = SmallWorld()


async def run(query: str, scope: Scope) -> Any:
    ctx = GraphContext(WORLD.cluster, WORLD.agents, WORLD.schema.state, scope=scope)
    result = await WORLD.schema.execute(query, context_value=ctx)
    assert result.errors is None, (query, result.errors)
    return result.data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(root_query())
def test_no_query_shape_reaches_a_pod_outside_the_callers_namespaces(query: str) -> None:
    data = asyncio.run(run(query, ML_ONLY))
    assert set(walk(data, "namespace")) <= {"ml"}, (query, data)
    assert not set(walk(data, "pid")) & FOREIGN_PIDS, (query, data)
    assert not set(walk(data, "containerId")) & FOREIGN_CONTAINERS, (query, data)
    assert not set(walk(data, "id")) & FOREIGN_CONTAINERS, (query, data)
    assert WORLD.infer.uid not in set(walk(data, "uid")) | set(walk(data, "podUid"))
    assert all(c is None for c in walk(data, "cmdline"))
    # node-b is visible (ml/idle runs there) but its only GPU holds serving's process.
    assert gpu_uuid("node-b", 0) not in walk(data, "uuid")


def test_the_same_shapes_as_an_unrestricted_caller_reach_everything() -> None:
    query = "{ nodes { name gpus { processes { pid pod { namespace } } } } }"
    data = asyncio.run(run(query, Scope(all_pods=True, all_nodes=True, exec_all=True)))
    assert set(walk(data, "pid")) == {101, 202, 103, 999, 301}
    assert set(walk(data, "namespace")) == {"ml", "serving"}


def test_hidden_processes_still_count_and_are_reported() -> None:
    query = (
        "{ gpus { uuid memoryUsedBytes hiddenProcessCount hiddenMemoryBytes processes { pid } } }"
    )
    serving = Scope(pod_namespaces=frozenset({"serving"}))
    data = asyncio.run(run(query, serving))
    assert [g["uuid"] for g in data["gpus"]] == [gpu_uuid("node-b", 0)]
    ml = asyncio.run(run(query, ML_ONLY))["gpus"]
    side = next(g for g in ml if g["uuid"] == gpu_uuid("node-a", 1))
    # The host process on train-1's second GPU: withheld, counted.
    assert [p["pid"] for p in side["processes"]] == [103]
    assert (side["hiddenProcessCount"], side["hiddenMemoryBytes"]) == (1, 5 * GiB)
    # Cluster-wide list pods without list nodes: the host process, but not the idle GPUs.
    wide = asyncio.run(run(query, Scope(all_pods=True)))["gpus"]
    assert 999 in {p["pid"] for g in wide for p in g["processes"]}
    assert gpu_uuid("node-a", 2) not in {g["uuid"] for g in wide}


def test_command_lines_need_exec_in_the_pods_namespace() -> None:
    query = "{ gpuProcesses { pid cmdline } }"
    allowed = Scope(pod_namespaces=frozenset({"ml"}), exec_namespaces=frozenset({"ml"}))
    with_exec = {p["pid"]: p["cmdline"] for p in asyncio.run(run(query, allowed))["gpuProcesses"]}
    without = {p["pid"]: p["cmdline"] for p in asyncio.run(run(query, ML_ONLY))["gpuProcesses"]}
    assert set(with_exec) == set(without) == {101, 202, 103}
    assert all(v is None for v in without.values())
    everything = Scope(all_pods=True, all_nodes=True, exec_all=True)
    full = {p["pid"]: p["cmdline"] for p in asyncio.run(run(query, everything))["gpuProcesses"]}
    assert {pid: full[pid] for pid in with_exec} == with_exec


async def test_the_cache_status_is_open_to_every_caller_and_reveals_no_objects() -> None:
    world = SmallWorld()
    query = "{ cacheStatus { ready stale } nodes { name } }"
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=Scope())
    result = await world.schema.execute(query, context_value=ctx)
    assert result.errors is None, result.errors
    assert result.data == {"cacheStatus": {"ready": True, "stale": False}, "nodes": []}

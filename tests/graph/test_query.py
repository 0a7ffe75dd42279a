"""The graph over in-memory fakes: walks, joins, batching, scalars and filters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from graph_schema.context import GraphContext
from tests.support.graph import (
    GiB,
    SmallWorld,
    gpu_sample,
    gpu_uuid,
    node_record,
    process,
    snapshot,
    synthetic_cluster,
)


@pytest.fixture
def world() -> SmallWorld:
    return SmallWorld()


async def test_full_walk_returns_exactly_the_expected_pods(world: SmallWorld) -> None:
    data = await world.query(
        """
        query($ns: String!, $name: String!) {
          pod(namespace: $ns, name: $name) {
            node { name gpus { uuid processes { pid usedMemoryBytes pod { namespace name } } } }
          }
        }
        """,
        ns="ml",
        name="train-1",
    )
    gpus = data["pod"]["node"]["gpus"]
    assert [g["uuid"] for g in gpus] == [gpu_uuid("node-a", i) for i in range(3)]
    pods = {
        (p["pod"]["namespace"], p["pod"]["name"])
        for g in gpus
        for p in g["processes"]
        if p["pod"] is not None
    }
    assert pods == {("ml", "train-1"), ("ml", "train-2")}
    assert world.agents.calls == {"node-a": 1}


async def test_pods_sharing_a_gpu_each_show_their_own_memory(world: SmallWorld) -> None:
    data = await world.query(
        '{ gpu(uuid: "GPU-node-a-0") { pods { name } '
        "processes { pid usedMemoryBytes pod { name } } } }"
    )
    gpu = data["gpu"]
    assert [p["name"] for p in gpu["pods"]] == ["train-1", "train-2"]
    assert {p["pod"]["name"]: p["usedMemoryBytes"] for p in gpu["processes"]} == {
        "train-1": 10 * GiB,
        "train-2": 20 * GiB,
    }


async def test_orphan_process_is_listed_with_null_pod(world: SmallWorld) -> None:
    data = await world.query(
        '{ gpu(uuid: "GPU-node-a-1") { processes { pid name containerId pod { name } } pods '
        "{ name } } }"
    )
    procs = {p["pid"]: p for p in data["gpu"]["processes"]}
    assert procs[999] == {"pid": 999, "name": "Xorg", "containerId": None, "pod": None}
    assert procs[103]["pod"] == {"name": "train-1"}
    assert data["gpu"]["pods"] == [{"name": "train-1"}]


async def test_join_falls_back_to_container_id(world: SmallWorld) -> None:
    data = await world.query(
        '{ gpus(nodeName: "node-b") { processes { podUid pod { namespace name } '
        "container { id name pod { name } } } } }"
    )
    (proc,) = data["gpus"][0]["processes"]
    assert proc["podUid"] is None
    assert proc["pod"] == {"namespace": "serving", "name": "infer-1"}
    assert proc["container"] == {"id": "ctr-i1", "name": "c0", "pod": {"name": "infer-1"}}


async def test_pod_gpus_and_processes_are_its_own(world: SmallWorld) -> None:
    data = await world.query(
        """{
          pod(namespace: "ml", name: "train-1") {
            gpus { uuid }
            gpuProcesses { pid gpu { uuid } }
            containers { id gpuProcesses { pid } }
          }
          idle: pod(namespace: "ml", name: "idle") { gpus { uuid } gpuProcesses { pid } }
          pending: pod(namespace: "ml", name: "pending") { node { name } gpus { uuid } }
        }"""
    )
    pod = data["pod"]
    assert [g["uuid"] for g in pod["gpus"]] == ["GPU-node-a-0", "GPU-node-a-1"]
    assert [(p["pid"], p["gpu"]["uuid"]) for p in pod["gpuProcesses"]] == [
        (101, "GPU-node-a-0"),
        (103, "GPU-node-a-1"),
    ]
    assert pod["containers"] == [
        {"id": "ctr-t1", "gpuProcesses": [{"pid": 101}]},
        {"id": "ctr-t1-side", "gpuProcesses": [{"pid": 103}]},
    ]
    assert data["idle"] == {"gpus": [], "gpuProcesses": []}
    assert data["pending"] == {"node": None, "gpus": []}


@pytest.mark.parametrize(
    ("sizes", "query", "root", "count", "each"),
    [
        (
            (12, 3, 2),
            "{ nodes { name driverVersion agent { reachable } gpus { uuid pods { name } "
            "processes { pod { name node { gpus { uuid } } gpus { uuid } } } } } }",
            "nodes",
            12,
            lambda node: len(node["gpus"]) == 3,
        ),
        (
            (5, 2, 3),
            "{ pods { name gpus { uuid } gpuProcesses { pid } node { gpus { uuid } } "
            "containers { gpuProcesses { pid } } } }",
            "pods",
            5 * 2 * 3,
            lambda pod: len(pod["gpuProcesses"]) == 1 and len(pod["gpus"]) == 1,
        ),
    ],
    ids=["all-nodes-query", "many-pods-query"],
)
async def test_one_fetch_per_node(
    sizes: tuple[int, int, int],
    query: str,
    root: str,
    count: int,
    each: Callable[[dict[str, Any]], bool],
) -> None:
    nodes, gpus, processes = sizes
    sc = synthetic_cluster(nodes, gpus_per_node=gpus, processes_per_gpu=processes)
    result = await sc.execute(query)
    assert result.errors is None
    assert result.data is not None
    items = result.data[root]
    assert len(items) == count
    assert all(each(item) for item in items)
    assert dict(sc.snapshots.calls) == {name: 1 for name in sc.node_names}


async def test_bytes_beyond_32_bits_serialize_as_integers(world: SmallWorld) -> None:
    data = await world.query(
        '{ gpu(uuid: "GPU-node-b-0") { memoryTotalBytes memoryUsedBytes '
        "processes { usedMemoryBytes } } }"
    )
    gpu = data["gpu"]
    assert gpu["memoryTotalBytes"] == 141 * GiB > 2**31
    assert gpu["processes"][0]["usedMemoryBytes"] == 100 * GiB
    assert all(type(v) is int for v in (gpu["memoryTotalBytes"], gpu["memoryUsedBytes"]))


async def test_gpu_error_and_not_supported_metric(world: SmallWorld) -> None:
    data = await world.query(
        '{ node(name: "node-a") { gpus { index error name memoryUsedBytes powerUsageWatts '
        "powerLimitWatts fieldErrors } } }"
    )
    gpus = data["node"]["gpus"]
    # The lost GPU is still listed, with its error and no metrics.
    assert gpus[2]["error"] == "GPU_IS_LOST"
    assert gpus[2]["name"] is None and gpus[2]["memoryUsedBytes"] is None
    # An unsupported metric is null, with the reason, and is not an error.
    assert gpus[1]["powerUsageWatts"] is None
    assert gpus[1]["powerLimitWatts"] == 700.0
    assert gpus[1]["fieldErrors"] == {"powerUsageWatts": "NOT_SUPPORTED"}
    assert gpus[0]["error"] is None and gpus[0]["fieldErrors"] == {}


async def test_node_fields_and_driver_versions(world: SmallWorld) -> None:
    data = await world.query(
        "{ nodes { name internalIp labels gpuCapacity driverVersion cudaDriverVersion gpuCount "
        "pods { name } agent { address reachable error snapshotAgeSeconds } } }"
    )
    a, b = data["nodes"]
    assert a["internalIp"] == "10.0.0.1" and a["gpuCapacity"] == 8
    assert a["labels"] == {"kubernetes.io/hostname": "node-a"}
    assert (a["driverVersion"], a["cudaDriverVersion"], a["gpuCount"]) == ("550.54.15", "12.4", 3)
    assert b["cudaDriverVersion"] == "11.8"
    assert [p["name"] for p in a["pods"]] == ["train-1", "train-2"]
    assert a["agent"] == {
        "address": "node-a.agents:50051",
        "reachable": True,
        "error": None,
        "snapshotAgeSeconds": 0.25,
    }


async def test_missing_things_are_null_not_errors(world: SmallWorld) -> None:
    data = await world.query(
        '{ node(name: "nope") { name } pod(namespace: "ml", name: "nope") { name } '
        'gpu(uuid: "GPU-nope") { uuid } }'
    )
    assert data == {"node": None, "pod": None, "gpu": None}


@pytest.mark.parametrize(
    "field",
    [
        'gpus(nodeName: "nope") { uuid }',
        'gpuProcesses(nodeName: "nope") { pid }',
        'gpuProcesses(namespace: "ml", nodeName: "nope") { pid }',
        'pods(nodeName: "nope") { name }',
    ],
)
async def test_an_unknown_node_name_is_not_found_not_an_idle_node(
    world: SmallWorld, field: str
) -> None:
    # An empty list would make a typo look like a node with nothing on its GPUs.
    ctx = GraphContext(world.cluster, world.agents, world.schema.state)
    result = await world.schema.execute(f"{{ {field} }}", context_value=ctx)
    assert result.data is None
    assert result.errors is not None
    [error] = result.errors
    assert error.message == "no node named 'nope' among the nodes you may see"
    assert error.extensions == {"code": "NOT_FOUND"}
    # Refused before any agent is asked.
    assert world.agents.calls == {}


async def test_a_known_node_running_no_pod_lists_none_without_an_error(
    world: SmallWorld,
) -> None:
    world.cluster.add_node(node_record("node-c"))
    assert await world.query('{ pods(nodeName: "node-c") { name } }') == {"pods": []}


@pytest.mark.parametrize(
    "field",
    [
        'pods(namespace: "") { name }',
        'gpuProcesses(namespace: "") { pid }',
        'idleGpuAllocations(namespace: "") { deviceId }',
        f'pods(namespace: "{"n" * 64}") {{ name }}',
    ],
)
async def test_an_empty_or_overlong_namespace_is_refused_not_answered_empty(
    world: SmallWorld, field: str
) -> None:
    # No namespace has such a name: [] would read as "nothing running there".
    ctx = GraphContext(world.cluster, world.agents, world.schema.state)
    result = await world.schema.execute(f"{{ {field} }}", context_value=ctx)
    assert result.data is None and result.errors is not None
    [error] = result.errors
    assert error.message == "namespace is 1 to 63 characters, as in Kubernetes"
    assert error.extensions == {"code": "BAD_USER_INPUT"}
    assert world.agents.calls == {}


async def test_gpu_by_uuid_uses_the_hint_after_the_first_lookup(world: SmallWorld) -> None:
    await world.query('{ gpu(uuid: "GPU-nope") { uuid } }')
    # Not found anywhere: every node was asked once.
    assert world.agents.calls == {"node-a": 1, "node-b": 1}
    world.agents.calls.clear()
    data = await world.query(
        '{ a: gpu(uuid: "GPU-node-b-0") { node { name } } b: gpu(uuid: "GPU-node-b-0") { index } }'
    )
    assert data == {"a": {"node": {"name": "node-b"}}, "b": {"index": 0}}
    assert world.agents.calls == {"node-b": 1}


async def test_gpus_and_processes_filters(world: SmallWorld) -> None:
    data = await world.query(
        '{ all: gpus { uuid } b: gpus(nodeName: "node-b") { uuid } '
        'ml: gpuProcesses(namespace: "ml") { pid } '
        'mlB: gpuProcesses(namespace: "ml", nodeName: "node-b") { pid } '
        'onA: gpuProcesses(nodeName: "node-a") { pid } }'
    )
    assert [g["uuid"] for g in data["all"]] == [
        "GPU-node-a-0",
        "GPU-node-a-1",
        "GPU-node-a-2",
        "GPU-node-b-0",
    ]
    assert data["b"] == [{"uuid": "GPU-node-b-0"}]
    assert sorted(p["pid"] for p in data["ml"]) == [101, 103, 202]
    assert data["mlB"] == []
    assert sorted(p["pid"] for p in data["onA"]) == [101, 103, 202, 999]


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=train", ["pending", "train-1", "train-2"]),
        ("app==train,team", ["pending", "train-1"]),
        ("app=train,team!=nlp", ["train-1", "train-2"]),
        ("app in (infer, notebook)", ["idle", "infer-1"]),
        ("app notin (train),!tier", ["idle"]),
        ("team,!team", []),
        ("", ["idle", "infer-1", "pending", "train-1", "train-2"]),
    ],
)
async def test_pods_label_selector(world: SmallWorld, selector: str, expected: list[str]) -> None:
    data = await world.query("query($s: String) { pods(labelSelector: $s) { name } }", s=selector)
    assert sorted(p["name"] for p in data["pods"]) == expected


async def test_pods_filters_by_namespace_and_node(world: SmallWorld) -> None:
    data = await world.query(
        '{ a: pods(namespace: "ml", nodeName: "node-b") { name } '
        'b: pods(namespace: "serving") { name uid phase gpuRequest labels } }'
    )
    assert data["a"] == [{"name": "idle"}]
    assert data["b"] == [
        {
            "name": "infer-1",
            "uid": world.infer.uid,
            "phase": "Running",
            "gpuRequest": 1,
            "labels": {"app": "infer", "tier": "gpu"},
        }
    ]


async def test_malformed_label_selector_is_a_clear_error(world: SmallWorld) -> None:
    ctx = GraphContext(world.cluster, world.agents, world.schema.state)
    result = await world.schema.execute(
        '{ pods(labelSelector: "app in (a,b") { name } }', context_value=ctx
    )
    assert result.data is None
    assert result.errors is not None
    assert result.errors[0].message == "invalid labelSelector 'app in (a,b': unclosed '('"


async def test_new_snapshot_is_seen_and_pods_rejoined(world: SmallWorld) -> None:
    query = '{ gpu(uuid: "GPU-node-b-0") { memoryUsedBytes processes { pid pod { name } } } }'
    before = await world.query(query)
    assert before["gpu"]["processes"] == [{"pid": 301, "pod": {"name": "infer-1"}}]
    world.cluster.remove_pod("serving", "infer-1")
    world.agents.put(
        snapshot("node-b", [gpu_sample("node-b", 0, [process(302, GiB, container_id="ctr-i1")])])
    )
    after = await world.query(query)
    assert after["gpu"] == {"memoryUsedBytes": GiB, "processes": [{"pid": 302, "pod": None}]}

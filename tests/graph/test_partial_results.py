"""Partial results: a dead or broken agent costs only its own node's fields."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.graph import SyntheticCluster, snapshot, synthetic_cluster
from tests.support.history_agents import HistoryAgents, occupancy, open_stores


@pytest.fixture
def three_nodes() -> SyntheticCluster:
    return synthetic_cluster(3, gpus_per_node=2, processes_per_gpu=1)


async def test_dead_agent_nulls_only_its_node_with_an_error_naming_it(
    three_nodes: SyntheticCluster,
) -> None:
    sc = three_nodes
    dead = sc.node_names[1]
    sc.snapshots.kill(dead, "connection refused")
    result = await sc.execute(
        "{ nodes { name gpus { uuid processes { pod { name } } } agent { reachable error } } }"
    )
    assert result.data is not None
    nodes = result.data["nodes"]
    assert [n["gpus"] is None for n in nodes] == [False, True, False]
    assert all(len(n["gpus"]) == 2 for n in nodes if n["name"] != dead)
    assert nodes[1]["agent"] == {
        "reachable": False,
        "error": f"agent on node {dead!r} unavailable: connection refused",
    }
    assert nodes[0]["agent"] == {"reachable": True, "error": None}
    assert result.errors is not None
    (error,) = result.errors
    assert error.path == ["nodes", 1, "gpus"]
    assert dead in error.message and "connection refused" in error.message
    # One call per node, the dead one included, even though two fields needed it.
    assert dict(sc.snapshots.calls) == {name: 1 for name in sc.node_names}


async def test_pod_fields_that_need_a_dead_agent_are_null_with_errors(
    three_nodes: SyntheticCluster,
) -> None:
    sc = three_nodes
    dead = sc.node_names[0]
    sc.snapshots.kill(dead)
    pod_name = f"w-{dead}-0-0"
    result = await sc.execute(
        'query($n: String!) { pod(namespace: "ns-0", name: $n) { name gpus { uuid } '
        "gpuProcesses { pid } node { name driverVersion } } }",
        n=pod_name,
    )
    assert result.data == {
        "pod": {"name": pod_name, "gpus": None, "gpuProcesses": None,
                "node": {"name": dead, "driverVersion": None}},
    }  # fmt: skip
    assert result.errors is not None
    assert sorted(tuple(e.path or ()) for e in result.errors) == [
        ("pod", "gpuProcesses"),
        ("pod", "gpus"),
        ("pod", "node", "driverVersion"),
    ]
    assert all(dead in e.message for e in result.errors)


async def test_aggregate_lists_keep_other_nodes_and_name_the_dead_one(
    three_nodes: SyntheticCluster,
) -> None:
    sc = three_nodes
    dead = sc.node_names[2]
    sc.snapshots.kill(dead, "deadline exceeded")
    result = await sc.execute("{ gpus { uuid } gpuProcesses { pid } }")
    assert result.data is not None
    assert len(result.data["gpus"]) == 4
    assert len(result.data["gpuProcesses"]) == 4
    assert result.errors is not None
    assert sorted((tuple(e.path or ()), dead in e.message) for e in result.errors) == [
        (("gpuProcesses",), True),
        (("gpus",), True),
    ]


async def test_unexpected_fetch_failure_names_the_node_but_hides_details(
    three_nodes: SyntheticCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sc = three_nodes
    broken = sc.node_names[0]
    sc.snapshots.break_with(broken, RuntimeError("secret internal detail"))
    with caplog.at_level(logging.ERROR):
        result = await sc.execute("{ nodes { name gpus { uuid } } }")
    assert result.data is not None
    assert [n["gpus"] is None for n in result.data["nodes"]] == [True, False, False]
    assert result.errors is not None
    (error,) = result.errors
    assert error.message == f"agent on node {broken!r} unavailable: internal error (RuntimeError)"
    assert "secret" in caplog.text and "Traceback" in caplog.text


async def test_node_wide_sampling_failure_is_reported(three_nodes: SyntheticCluster) -> None:
    sc = three_nodes
    name = sc.node_names[0]
    sc.snapshots.put(snapshot(name, [], error="NVML_ERROR_DRIVER_NOT_LOADED"))
    result = await sc.execute(
        f'{{ node(name: "{name}") {{ gpus {{ uuid }} agent {{ reachable error }} }} }}'
    )
    assert result.data == {
        "node": {"gpus": None,
                 "agent": {"reachable": True, "error": "NVML_ERROR_DRIVER_NOT_LOADED"}},
    }  # fmt: skip
    assert result.errors is not None
    assert result.errors[0].message == (
        f"GPU sampling failed on node {name!r}: NVML_ERROR_DRIVER_NOT_LOADED"
    )


async def test_gpu_on_a_dead_node_reports_the_node(three_nodes: SyntheticCluster) -> None:
    sc = three_nodes
    uuid = f"GPU-{sc.node_names[1]}-0"
    # Learn where the GPU lives, then lose its node.
    first = await sc.execute("{ nodes { gpus { uuid } } }")
    assert first.errors is None
    sc.snapshots.kill(sc.node_names[1])
    result = await sc.execute(
        'query($u: String!) { gpu(uuid: $u) { uuid } other: gpu(uuid: "GPU-elsewhere") { uuid } }',
        u=uuid,
    )
    assert result.data == {"gpu": None, "other": None}
    assert result.errors is not None
    messages = {tuple(e.path or ()): e.message for e in result.errors}
    assert sc.node_names[1] in messages[("gpu",)]
    assert "agents unavailable on: " + sc.node_names[1] in messages[("other",)]


async def test_a_failed_root_field_is_the_answer_while_other_fields_fetch(
    tmp_path: Path,
) -> None:
    # A user error in gpuHistory, a non-null root field: graphql-core nulls data and cancels
    # the other root fields while they await snapshot fetches (one of a down agent). The
    # answer is that error: no CancelledError escapes the operation. (The shield that keeps
    # one cancelled caller from cancelling a shared fetch: tests/graph/test_shared_futures.py.)
    names = [f"node-{i:05d}" for i in range(3)]
    stores = open_stores(tmp_path, {n: [occupancy(f"GPU-{n}-0", 1, 0, 1)] for n in names})
    try:
        sc = synthetic_cluster(
            3, gpus_per_node=1, processes_per_gpu=1, agents=HistoryAgents(stores)
        )
        sc.snapshots.kill(names[1])
        result = await sc.execute(
            "{ nodes { gpus { uuid } } gpus { uuid } "
            'gpuHistory(since: "2026-12-01T00:00:00Z", after: "nope") { edges { cursor } } }'
        )
    finally:
        for store in stores.values():
            store.close()
    assert result.data is None
    assert result.errors is not None
    assert [e.path for e in result.errors][-1] == ["gpuHistory"]
    assert "after is not a cursor" in result.errors[-1].message
    assert not any("Cancelled" in e.message for e in result.errors)


async def test_a_pods_allocations_a_dead_agent_cannot_tell_are_an_error_not_an_empty_list(
    three_nodes: SyntheticCluster,
) -> None:
    # The pods request nvidia.com/gpu: only the node's kubelet, through its agent, knows which
    # devices they were given. "[]" alone would read as "given nothing".
    sc = three_nodes
    dead, old = sc.node_names[0], sc.node_names[1]
    sc.snapshots.kill(dead, "connection refused")
    result = await sc.execute(
        "query($d: String!, $o: String!) { "
        'd: pod(namespace: "ns-0", name: $d) { gpuRequest gpuAllocations { deviceId } } '
        'o: pod(namespace: "ns-1", name: $o) { gpuAllocations { deviceId } } }',
        d=f"w-{dead}-0-0",
        o=f"w-{old}-0-0",
    )
    assert result.data == {
        "d": {"gpuRequest": 1, "gpuAllocations": []},
        "o": {"gpuAllocations": []},
    }
    assert result.errors is not None
    assert sorted((e.path, e.message) for e in result.errors) == [
        (["d", "gpuAllocations"],
         f"the device-plugin GPUs of pod ns-0/w-{dead}-0-0 on node {dead!r} are unknown: "
         "the node's agent did not answer"),
        # An agent that sends no allocation data (these snapshots have none) says so too.
        (["o", "gpuAllocations"],
         f"the device-plugin GPUs of pod ns-1/w-{old}-0-0 on node {old!r} are unknown: "
         "the node's agent sends no allocation data (an older agent)"),
    ]  # fmt: skip

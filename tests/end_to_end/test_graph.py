"""The graph end to end: real uvicorn, the stub API server, real agents on loopback IPs."""

from __future__ import annotations

import asyncio
import gc
from types import FrameType, TracebackType
from typing import Any

import pytest

from api.demo.cluster.manifests import pod_uid_for
from tests.support.polling import eventually_async
from tests.support.server import GIB, GraphTestCluster, serving

WALK = """
query Walk($namespace: String!, $name: String!) {
  pod(namespace: $namespace, name: $name) {
    namespace
    name
    node {
      name
      gpus {
        uuid
        pods { namespace name }
        processes {
          pid
          name
          usedMemoryBytes
          pod { namespace name uid }
        }
      }
    }
  }
}
"""


async def test_the_full_walk_from_a_worker_pod_reaches_exactly_the_expected_pods(
    cluster: GraphTestCluster,
) -> None:
    async with serving(cluster.settings()) as server:
        result = await server.query(WALK, {"namespace": "ml", "name": "worker-0"})
    assert "errors" not in result, result
    pod = result["data"]["pod"]
    assert (pod["namespace"], pod["name"], pod["node"]["name"]) == ("ml", "worker-0", "node-0")
    gpus = {gpu["uuid"]: gpu for gpu in pod["node"]["gpus"]}
    assert set(gpus) == {"GPU-node-0-0", "GPU-node-0-1"}

    shared = gpus["GPU-node-0-0"]
    # Two pods share this GPU; each appears with its own process and memory.
    assert sorted(
        (p["pid"], p["name"], p["usedMemoryBytes"], p["pod"]["namespace"], p["pod"]["name"])
        for p in shared["processes"]
    ) == [
        (1001, "python", 3 * GIB, "ml", "worker-0"),
        (1002, "python", 5 * GIB, "ml", "worker-1"),
    ]
    assert {p["pod"]["uid"] for p in shared["processes"]} == {
        pod_uid_for("ml", "worker-0"),
        pod_uid_for("ml", "worker-1"),
    }
    assert sorted((p["namespace"], p["name"]) for p in shared["pods"]) == [
        ("ml", "worker-0"),
        ("ml", "worker-1"),
    ]
    # A host process and a vanished pod's process still show, with pod null.
    other = gpus["GPU-node-0-1"]
    assert sorted((p["pid"], p["usedMemoryBytes"], p["pod"]) for p in other["processes"]) == [
        (1003, 1 * GIB, None),
        (1004, 2 * GIB, None),
    ]
    assert other["pods"] == []
    # Every pod the walk reached, and nothing else.
    reached = {
        (p["pod"]["namespace"], p["pod"]["name"])
        for gpu in gpus.values()
        for p in gpu["processes"]
        if p["pod"] is not None
    }
    assert reached == {("ml", "worker-0"), ("ml", "worker-1")}


ALL_NODES = """
{
  nodes {
    name
    agent { reachable error }
    gpus {
      uuid
      utilizationGpu
      processes { pid pod { name node { name gpus { uuid } } } }
      pods { name }
    }
    pods { name gpus { uuid } gpuProcesses { pid } }
  }
  gpus { uuid }
  gpuProcesses { pid }
}
"""


async def test_a_query_over_every_node_makes_exactly_one_agent_call_per_node(
    cluster: GraphTestCluster,
) -> None:
    # TTL 0: only the request's own batching can keep calls to one per node.
    async with serving(cluster.settings(snapshot_ttl=0)) as server:
        before = cluster.calls()
        result = await server.query(ALL_NODES)
        after = cluster.calls()
    assert "errors" not in result, result
    assert [n["name"] for n in result["data"]["nodes"]] == ["node-0", "node-1", "node-2"]
    assert len(result["data"]["gpus"]) == 4
    assert sorted(p["pid"] for p in result["data"]["gpuProcesses"]) == [
        1001,
        1002,
        1003,
        1004,
        2001,
    ]
    assert {name: after[name] - before[name] for name in after} == {
        "node-0": 1,
        "node-1": 1,
        "node-2": 1,
    }


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "strawberry"])
async def test_a_node_name_that_is_not_in_the_cluster_is_not_found(
    cluster: GraphTestCluster, compiled: bool
) -> None:
    # Not an empty list: that would look like a node whose GPUs run nothing.
    async with serving(cluster.settings(compiled_execution=compiled)) as server:
        before = cluster.calls()
        for field in ("gpus", "gpuProcesses"):
            result = await server.query(f'{{ {field}(nodeName: "node-9") {{ __typename }} }}')
            assert result["data"] is None
            [error] = result["errors"]
            assert error["message"] == "no node named 'node-9' among the nodes you may see"
            assert (error["path"], error["extensions"]) == ([field], {"code": "NOT_FOUND"})
        assert cluster.calls() == before


async def test_twenty_concurrent_queries_within_the_ttl_share_one_call_per_node(
    cluster: GraphTestCluster,
) -> None:
    async with serving(cluster.settings()) as server:
        before = cluster.calls()
        # Twenty different queries (a different alias each), so each is executed on
        # its own and only the agent pool's TTL sharing can keep the calls down.
        queries = [ALL_NODES.replace("nodes", f"q{i}: nodes", 1) for i in range(20)]
        results = await asyncio.gather(*(server.query(q) for q in queries))
        after = cluster.calls()
        metrics = (await server.client.get("/metrics")).text
    assert all("errors" not in r for r in results)
    assert all(list(r["data"].values()) == list(results[0]["data"].values()) for r in results)
    assert {name: after[name] - before[name] for name in after} == {
        "node-0": 1,
        "node-1": 1,
        "node-2": 1,
    }
    for node in ("node-0", "node-1", "node-2"):
        assert f'gpugraph_agent_calls_total{{node="{node}",outcome="ok"}} 1.0' in metrics


NODES_GPUS = "{ nodes { name gpus { uuid } agent { address reachable error } } }"


async def test_a_dead_agent_costs_only_its_own_node_and_is_seen_again_after_restart(
    cluster: GraphTestCluster,
) -> None:
    async with serving(cluster.settings(snapshot_ttl=0)) as server:
        address = cluster.agents["node-1"].address
        await cluster.agents["node-1"].stop()

        result = await server.query(NODES_GPUS)

        nodes = {n["name"]: n for n in result["data"]["nodes"]}
        assert [g["uuid"] for g in nodes["node-0"]["gpus"]] == ["GPU-node-0-0", "GPU-node-0-1"]
        assert [g["uuid"] for g in nodes["node-2"]["gpus"]] == ["GPU-node-2-0"]
        assert nodes["node-1"]["gpus"] is None
        assert nodes["node-1"]["agent"]["reachable"] is False
        (error,) = result["errors"]
        assert error["path"] == ["nodes", 1, "gpus"]
        # What happened, to which node and where, then gRPC's own words.
        said = f"agent on node 'node-1' unreachable at {address}: UNAVAILABLE: "
        assert error["message"].startswith(said), error["message"]
        assert nodes["node-1"]["agent"]["error"] == error["message"]
        assert "Traceback" not in error["message"]
        # Refused at once, not waited on until the call's deadline.
        assert "deadline" not in error["message"]

        # Within the backoff, the dead node fails fast: no call is waited on.
        again = (await server.query(NODES_GPUS))["errors"][0]["message"]
        assert again.startswith(said) and "(next retry in " in again, again

        await cluster.agents["node-1"].start()

        async def node1_back() -> Any:
            later = await server.query(NODES_GPUS)
            nodes = {n["name"]: n for n in later["data"]["nodes"]}
            return "errors" not in later and nodes["node-1"]["gpus"] == [{"uuid": "GPU-node-1-0"}]

        await eventually_async(node1_back, interval=0.2, what="node-1 answering again")


async def test_federation_sdl_and_entities_over_http(cluster: GraphTestCluster) -> None:
    async with serving(cluster.settings()) as server:
        sdl_result = await server.query("{ _service { sdl } }")
        entities = await server.query(
            """
            query ($reps: [_Any!]!) {
              _entities(representations: $reps) {
                __typename
                ... on Pod { uid namespace name podNode: node { name } }
                ... on Node { name internalIp gpus { uuid } }
                ... on Gpu { uuid node { name } processes { pid pod { name } } }
              }
            }
            """,
            {
                "reps": [
                    {"__typename": "Pod", "namespace": "ml", "name": "worker-1"},
                    {"__typename": "Pod", "uid": pod_uid_for("team-b", "trainer-0")},
                    {"__typename": "Node", "name": "node-1"},
                    {"__typename": "Gpu", "uuid": "GPU-node-1-0"},
                    {"__typename": "Pod", "namespace": "ml", "name": "no-such-pod"},
                ]
            },
        )
    sdl = sdl_result["data"]["_service"]["sdl"]
    assert 'type Pod @key(fields: "uid") @key(fields: "namespace name")' in sdl
    assert 'type Node @key(fields: "name")' in sdl
    assert 'type Gpu @key(fields: "uuid")' in sdl
    assert "errors" not in entities, entities
    pod_by_name, pod_by_uid, node, gpu, missing = entities["data"]["_entities"]
    assert pod_by_name == {
        "__typename": "Pod",
        "uid": pod_uid_for("ml", "worker-1"),
        "namespace": "ml",
        "name": "worker-1",
        "podNode": {"name": "node-0"},
    }
    assert (pod_by_uid["namespace"], pod_by_uid["name"]) == ("team-b", "trainer-0")
    assert node == {
        "__typename": "Node",
        "name": "node-1",
        "internalIp": cluster.agents["node-1"].ip,
        "gpus": [{"uuid": "GPU-node-1-0"}],
    }
    assert gpu == {
        "__typename": "Gpu",
        "uuid": "GPU-node-1-0",
        "node": {"name": "node-1"},
        "processes": [{"pid": 2001, "pod": {"name": "trainer-0"}}],
    }
    assert missing is None


# Queries that fail on node-1's agent: lists over nodes and pods, one node's fields, a
# GPU search, and a field that reads the node's snapshot but answers without it.
FAILING_ON_NODE_1 = (
    "{ gpus { uuid } }",
    "{ pods { name gpuProcesses { pid } } }",
    "{ nodes { name gpus { uuid } agent { reachable error } } }",
    '{ node(name: "node-1") { name gpuCount allocationSource } }',
    '{ gpu(uuid: "GPU-node-9-9") { uuid } }',
)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "strawberry"])
async def test_queries_failing_on_a_down_node_leave_no_reference_cycles(
    cluster: GraphTestCluster, compiled: bool
) -> None:
    # An exception kept with its traceback holds the frames it passed through, and
    # they hold the operation that holds the exception: garbage only the cyclic
    # collector frees, which the server runs rarely (api/lifecycle/gc_tuning.py).
    settings = cluster.settings(snapshot_ttl=0, compiled_execution=compiled)
    async with serving(settings) as server:
        await cluster.agents["node-1"].stop()
        # Plans, parses, views and channels are made once: before counting.
        for query in FAILING_ON_NODE_1:
            await server.query(query)
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(10):
                for query in FAILING_ON_NODE_1:
                    result = await server.query(query)
                    assert "node-1" in str(result.get("errors")), (query, result)
            gc.collect()
            garbage = list(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    frames = [
        f"{o.f_code.co_name} in {o.f_code.co_filename}" for o in garbage if isinstance(o, FrameType)
    ]
    assert not frames, frames[:20]
    assert not [o for o in garbage if isinstance(o, TracebackType)]
    errors = [o for o in garbage if isinstance(o, BaseException)]
    if compiled:
        assert not errors, errors[:5]
    else:
        # graphql-core's execution context refers to itself (its async helpers are
        # its own bound methods), so each strawberry operation, failing or not, is
        # freed by the collector, and its errors with it: without their frames.
        assert all(e.__traceback__ is None for e in errors)

"""The graph follows the Kubernetes API: watch events, and relists after 410 Gone."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from api.demo.cluster.manifests import make_pod, pod_uid_for
from tests.support.polling import eventually_async
from tests.support.server import (
    GIB,
    Gpu,
    GraphTestCluster,
    Proc,
    serving,
)

GPU_OF_NODE_2 = """
{ gpu(uuid: "GPU-node-2-0") { processes { pid pod { namespace name } } } }
"""


async def test_created_and_deleted_pods_enter_and_leave_the_graph(
    cluster: GraphTestCluster,
) -> None:
    # The graph follows the watch event by event, with no polling between;
    # how fast is a benchmark's to measure, not a deadline on a busy machine.
    agent = cluster.agents["node-2"]
    uid = pod_uid_for("ml", "late-0")
    # The process exists before its pod is known: it shows with pod null.
    agent.add_proc(Proc(3001, "python", uid))
    agent.write_gpus([Gpu(0, "GPU-node-2-0", processes=[(3001, 2 * GIB)])])
    async with serving(cluster.settings(snapshot_ttl=0)) as server:

        def processes_are(expected: list[dict[str, Any]]) -> Callable[[], Awaitable[bool]]:
            async def check() -> bool:
                result = await server.query(GPU_OF_NODE_2)
                return bool(result["data"]["gpu"]["processes"] == expected)

            return check

        unowned = [{"pid": 3001, "pod": None}]
        owned = [{"pid": 3001, "pod": {"namespace": "ml", "name": "late-0"}}]
        await eventually_async(processes_are(unowned), what="the agent reporting PID 3001")

        cluster.stub.add_pod(make_pod("late-0", "ml", "node-2", gpu_limit=1))
        await eventually_async(
            processes_are(owned),
            what="the created pod joined to its GPU process",
        )
        found = await server.query('{ pod(namespace: "ml", name: "late-0") { uid nodeName } }')
        assert found["data"]["pod"] == {"uid": uid, "nodeName": "node-2"}

        cluster.stub.delete_pod("ml", "late-0")
        await eventually_async(
            processes_are(unowned),
            what="the deleted pod leaving the graph",
        )
        gone = await server.query('{ pod(namespace: "ml", name: "late-0") { uid } }')
        assert gone == {"data": {"pod": None}}


POD_NAMES = "{ pods { namespace name } }"


async def test_a_forced_410_relists_and_no_query_fails_meanwhile(
    cluster: GraphTestCluster,
) -> None:
    async with serving(cluster.settings()) as server:
        baseline = await server.query(POD_NAMES)
        assert len(baseline["data"]["pods"]) == 5
        lists_before = cluster.stub.count("pods", "list")
        failures: list[dict[str, Any]] = []
        stop = asyncio.Event()

        async def keep_querying() -> int:
            done = 0
            while not stop.is_set():
                result = await server.query(POD_NAMES)
                if "errors" in result or len(result["data"]["pods"]) < 5:
                    failures.append(result)
                done += 1
            return done

        queriers = [asyncio.create_task(keep_querying()) for _ in range(3)]
        try:
            for round_ in range(3):
                cluster.stub.expire_watches()
                # A change made while the watch is gone must arrive through the relist.
                cluster.stub.add_pod(make_pod(f"during-410-{round_}", "ml", "node-2"))
                relists = lists_before + round_ + 1
                # The check is awaited within this iteration, so it reads this round's count.
                await eventually_async(
                    lambda: cluster.stub.count("pods", "list") >= relists,  # noqa: B023
                    what="a relist of pods",
                )
            await eventually_async(
                lambda: server.services.cache.pod("ml", "during-410-2") is not None,
                what="the pod added during the last 410",
            )
        finally:
            stop.set()
            counts = await asyncio.gather(*queriers)
        assert failures == []
        assert sum(counts) > 3
        # Identical queries share results for up to the snapshot TTL, so the
        # graph may lag the cache by that much.
        wanted = {("ml", f"during-410-{i}") for i in range(3)}

        async def all_served() -> set[tuple[str, str]] | None:
            final = await server.query(POD_NAMES)
            served = {(p["namespace"], p["name"]) for p in final["data"]["pods"]}
            return served if wanted <= served else None

        served = await eventually_async(all_served, interval=0.1, what="the pods added in a 410")
        assert len(served) == 8


async def test_a_dropped_watch_stream_loses_nothing(cluster: GraphTestCluster) -> None:
    async with serving(cluster.settings()) as server:
        cluster.stub.drop_watches()
        cluster.stub.add_pod(make_pod("after-drop", "team-b", "node-1"))
        await eventually_async(
            lambda: server.services.cache.pod("team-b", "after-drop") is not None,
            timeout=5,
            what="the pod added after the watch dropped",
        )
        result = await server.query('{ pods(namespace: "team-b") { name } }')
        assert result == {"data": {"pods": [{"name": "after-drop"}, {"name": "trainer-0"}]}}

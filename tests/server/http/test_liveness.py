"""A large admitted query shares the loop: /healthz keeps answering and the time limit fires."""

from __future__ import annotations

import asyncio
import gc
import time
import warnings

import httpx
import pytest

from api.app import create_app
from api.settings import Settings
from graph_schema.interfaces import Received
from tests.support.graph import MemorySnapshots, synthetic_cluster
from tests.support.server import graphql, serve_app

NODES = 4
HELD = "node-00003"


def chain(depth: int, on_node: str | None = None) -> str:
    """``{ gpus { node { gpus ... } } }``, ``depth`` fields deep; from one node if given."""
    opened = ["gpus { " if i % 2 == 0 else "node { " for i in range(depth - 1)]
    if on_node is not None:
        opened[0] = f'gpus(nodeName: "{on_node}") {{ '
    leaf = "uuid" if (depth - 1) % 2 else "name"
    return "{ " + "".join(opened) + leaf + " }" * len(opened) + " }"


def beside_the_held_agent(query: str) -> str:
    """``query``'s fields and, beside them, the GPUs of the node whose agent is held."""
    return query.removesuffix(" }") + f' held: gpus(nodeName: "{HELD}") {{ uuid }} }}'


# A large query that cannot finish before its agent is released: 1 node's chain
# (42,000 objects at depth 10) beside the held node's GPUs.
HELD_QUERY = beside_the_held_agent(chain(10, on_node="node-00000"))


class Agents(MemorySnapshots):
    """The cluster's agents; while ``hold`` is set, HELD's agent answers only once released."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()
        self.hold = False
        self.released = asyncio.Event()

    async def fetch(self, node_name: str) -> Received:
        self.asked.set()
        if self.hold and node_name == HELD:
            await self.released.wait()
        return await super().fetch(node_name)


async def health_answers_while(task: asyncio.Task[object], client: httpx.AsyncClient) -> int:
    answered = 0
    while not task.done():
        response = await client.get("/healthz")
        assert response.status_code == 200
        answered += 1
    return answered


@pytest.mark.parametrize("compiled", [False, True], ids=["strawberry", "compiled"])
async def test_healthz_answers_throughout_a_large_query_and_the_time_limit_fires(
    compiled: bool,
) -> None:
    # The demo's size: 4 nodes x 8 GPUs. Depth 10 (168,512 objects) is over the
    # default budget; with a budget that admits it, it is the largest query to pace.
    agents = Agents()
    sc = synthetic_cluster(NODES, gpus_per_node=8, processes_per_gpu=1, agents=agents)
    # Under 60 s the whole chain runs to its end; under 0.3 s a held agent keeps the
    # query from finishing however fast the machine, so only the limit can end it.
    for timeout, query in ((60.0, chain(10)), (0.3, HELD_QUERY)):
        settings = Settings(
            request_timeout=timeout,
            agent_timeout=min(2.0, timeout / 2),
            max_result_items=200_000,
            compiled_execution=compiled,
        )
        app = create_app(settings, sc.cluster, sc.snapshots)
        agents.hold = query is HELD_QUERY
        agents.asked.clear()
        agents.released.clear()
        try:
            async with (
                serve_app(app, settings) as server,
                httpx.AsyncClient(base_url=server.url, timeout=120) as client,
                httpx.AsyncClient(base_url=server.url, timeout=120) as probe,
            ):
                began = time.thread_time()
                big = asyncio.create_task(graphql(client, query))
                await agents.asked.wait()  # the query is running
                answered = await health_answers_while(big, probe)
                result = await big
                cpu = time.thread_time() - began
                held = not agents.released.is_set()
        finally:
            agents.released.set()
        if agents.hold:
            assert held  # answered while its agent was still held: by the limit
            assert result["data"] is None
            assert result["errors"][0]["extensions"]["code"] == "REQUEST_TIMEOUT"
            assert answered >= 1
        else:
            assert "errors" not in result, result.get("errors")
            assert len(result["data"]["gpus"]) == 32
            # Without pacing the loop goes round a few dozen times in all and the probe
            # gets a handful of answers; paced, it answers throughout. Counted per CPU
            # second of the loop's thread, as a busy machine stretches the wall time
            # (and the pacer's slices with it) but not the work.
            assert answered >= 40 or answered >= 8 * cpu, (answered, cpu)


async def test_a_query_cut_off_by_the_time_limit_leaves_no_never_awaited_warnings() -> None:
    agents = Agents()
    agents.hold = True
    sc = synthetic_cluster(NODES, gpus_per_node=8, processes_per_gpu=1, agents=agents)
    settings = Settings(request_timeout=0.2, agent_timeout=0.1, max_result_items=200_000)
    app = create_app(settings, sc.cluster, sc.snapshots)
    transport = httpx.ASGITransport(app=app)
    # Recorded with the filters as they are, so the server's own filters apply.
    with warnings.catch_warnings(record=True) as heard:
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                response = await client.post("/graphql", json={"query": HELD_QUERY})
        finally:
            agents.released.set()
        # The cut-off leaves graphql-core's never-started child coroutines to the
        # cycle collector, during the request or here, once their tasks are done.
        await asyncio.sleep(0.1)
        gc.collect()
    assert response.json()["errors"][0]["extensions"]["code"] == "REQUEST_TIMEOUT"
    assert not [w for w in heard if "was never awaited" in str(w.message)]

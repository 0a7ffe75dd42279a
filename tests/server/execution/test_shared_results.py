"""Identical queries within the snapshot TTL share one execution."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import ExecutionResult, GraphQLError

from api.app import create_app
from api.execution.shared_results import SharedResults
from api.metrics import Metrics
from api.settings import Settings
from graph_schema.interfaces import Received
from graph_schema.loaders import Freshness, SnapshotLoader
from node_resolver.gpu_events.records import EventPage, EventQuery
from tests.support.clock import ManualClock
from tests.support.graph import SmallWorld, snapshot
from tests.support.history_agents import HistoryAgents, open_stores


class Executions:
    """An execution that counts its runs and answers with the run number."""

    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self) -> ExecutionResult:
        self.runs += 1
        return ExecutionResult(data={"n": self.runs})


async def test_concurrent_identical_operations_share_one_execution() -> None:
    shared = SharedResults(ttl=0.0)
    runs = 0
    release = asyncio.Event()

    async def execute() -> ExecutionResult:
        nonlocal runs
        runs += 1
        await release.wait()
        return ExecutionResult(data={"n": runs})

    waiters = [asyncio.ensure_future(shared.run("q", execute)) for _ in range(10)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*waiters)
    assert runs == 1
    assert {r.data["n"] for r in results if r.data} == {1}
    # TTL 0: nothing is kept once the execution is over.
    await shared.run("q", execute)
    assert runs == 2


async def test_results_are_reused_within_the_ttl_and_refreshed_after() -> None:
    clock = ManualClock(100.0)
    shared = SharedResults(ttl=1.0, clock=clock)
    execute = Executions()

    assert (await shared.run("q", execute)).data == {"n": 1}
    clock.now += 0.9
    assert (await shared.run("q", execute)).data == {"n": 1}
    assert (await shared.run("other", execute)).data == {"n": 2}
    clock.now += 0.2
    assert (await shared.run("q", execute)).data == {"n": 3}
    assert shared.shared == 1


async def test_total_failures_and_exceptions_are_not_kept() -> None:
    shared = SharedResults(ttl=10.0, clock=ManualClock(100.0))
    runs = 0

    async def fail() -> ExecutionResult:
        nonlocal runs
        runs += 1
        return ExecutionResult(data=None, errors=[])

    await shared.run("q", fail)
    await shared.run("q", fail)
    assert runs == 2

    async def not_ready() -> ExecutionResult:
        nonlocal runs
        runs += 1
        error = GraphQLError("still loading", extensions={"code": "NOT_READY"})
        return ExecutionResult(data={"pod": None}, errors=[error])

    await shared.run("n", not_ready)
    await shared.run("n", not_ready)
    assert runs == 4

    async def boom() -> ExecutionResult:
        raise RuntimeError("boom")

    for _ in range(2):
        try:
            await shared.run("b", boom)
        except RuntimeError:
            pass
        else:
            raise AssertionError("the exception must reach every caller")


async def test_one_caller_going_away_does_not_cancel_the_others() -> None:
    shared = SharedResults(ttl=0.0)
    release = asyncio.Event()

    async def execute() -> ExecutionResult:
        await release.wait()
        return ExecutionResult(data={"ok": True})

    first = asyncio.ensure_future(shared.run("q", execute))
    second = asyncio.ensure_future(shared.run("q", execute))
    await asyncio.sleep(0)
    first.cancel()
    release.set()
    assert (await second).data == {"ok": True}


class ClosingChannel(HistoryAgents):
    """Agents whose node-a events read is cancelled under it, as gRPC cancels the calls on
    a channel another call closes."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked = asyncio.Event()
        self.read: asyncio.Future[None] | None = None

    async def gpu_events(
        self, node_name: str, query: EventQuery, page_token: str = ""
    ) -> EventPage:
        if node_name == "node-a":
            self.read = asyncio.get_running_loop().create_future()
            self.asked.set()
            await self.read
        return await super().gpu_events(node_name, query, page_token)


@pytest.fixture
def closing(tmp_path: Path) -> Iterator[ClosingChannel]:
    stores = open_stores(tmp_path, {"node-a": [], "node-b": []})
    try:
        yield ClosingChannel(stores)
    finally:
        for store in stores.values():
            store.close()


@pytest.mark.parametrize("alone", [False, True], ids=["shared", "run-alone"])
async def test_work_cancelled_under_a_request_answers_it_503_not_a_cancellation(
    closing: ClosingChannel, alone: bool
) -> None:
    # A CancelledError out of the app reaches uvicorn, which answers 500.
    world = SmallWorld(closing)
    app = create_app(Settings(snapshot_ttl=5.0), world.cluster, world.agents)
    query = '{ gpuEvents(since: "2026-12-01T00:00:00Z") { edges { node { xid } } } }'
    # A request with extensions is executed alone, in its own task.
    body: dict[str, Any] = {"query": query, **({"extensions": {"trace": 1}} if alone else {})}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        answer = asyncio.ensure_future(client.post("/graphql", json=body))
        await closing.asked.wait()
        assert closing.read is not None
        closing.read.cancel()
        response = await answer
    assert response.status_code == 503
    assert response.json() == {
        "errors": [{"message": "the server cancelled work this request waited on; try again"}]
    }


async def test_the_app_shares_identical_queries_but_not_different_ones() -> None:
    world = SmallWorld()
    app = create_app(Settings(snapshot_ttl=5.0), world.cluster, world.agents)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        query = {"query": "{ nodes { name gpus { uuid } } }"}
        answers = await asyncio.gather(*(client.post("/graphql", json=query) for _ in range(20)))
        assert {a.status_code for a in answers} == {200}
        assert len({a.text for a in answers}) == 1
        executions = sum(world.agents.calls.values())
        assert executions == len(world.cluster.nodes())
        # Different variables are a different operation.
        one = {
            "query": "query($n: String!) { node(name: $n) { name } }",
            "variables": {"n": "node-a"},
        }
        two = {**one, "variables": {"n": "node-b"}}
        a = (await client.post("/graphql", json=one)).json()
        b = (await client.post("/graphql", json=two)).json()
        assert a["data"]["node"]["name"] == "node-a"
        assert b["data"]["node"]["name"] == "node-b"


async def test_a_result_expires_a_ttl_after_its_oldest_data_was_fetched() -> None:
    clock = ManualClock(100.0)
    shared = SharedResults(ttl=1.0, clock=clock)
    execute = Executions()

    # The execution read a snapshot the server had already held for 0.8 s.
    fetched = clock.now - 0.8
    await shared.run("q", execute, lambda: fetched)
    clock.now += 0.1
    assert (await shared.run("q", execute, lambda: fetched)).data == {"n": 1}
    clock.now += 0.2  # 1.1 s after the data was fetched: too old to hand out again
    assert (await shared.run("q", execute, lambda: fetched)).data == {"n": 2}


async def test_the_loader_records_how_long_the_server_held_a_snapshot() -> None:
    class HeldFor:
        """A source whose snapshots the server received 5 s ago."""

        async def fetch(self, node_name: str) -> Received:
            return Received(snapshot(node_name, []), held_seconds=5.0)

        def agent_address(self, node_name: str) -> str | None:
            return None

    freshness = Freshness()
    loader = SnapshotLoader(HeldFor(), {}, freshness)
    before = time.monotonic()
    await loader.load("node-a")
    after = time.monotonic()
    # Fetched 5 s before it was received, whenever within the load that was.
    assert freshness.oldest is not None
    assert before - 5.0 <= freshness.oldest <= after - 5.0


async def test_shared_answers_are_counted_in_the_query_metrics() -> None:
    world = SmallWorld()
    metrics = Metrics()
    app = create_app(Settings(snapshot_ttl=5.0), world.cluster, world.agents, metrics=metrics)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        good = {"query": "{ nodes { name } }"}
        # A partial answer (one agent down) is kept and shared too.
        world.agents.kill("node-b")
        partial = {"query": "{ gpus { uuid } }"}
        for body in (good, partial):
            answers = await asyncio.gather(*(client.post("/graphql", json=body) for _ in range(10)))
            assert {a.status_code for a in answers} == {200}
        rendered = metrics.render().decode()
    # Every request, not only the two that executed.
    assert "gpugraph_query_seconds_count 20.0" in rendered
    assert 'gpugraph_query_errors_total{kind="partial"} 10.0' in rendered

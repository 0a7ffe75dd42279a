"""The snapshot loader: one fetch per distinct node per batch, stepped in the batch's task."""

from __future__ import annotations

import asyncio
import gc

import pytest

from graph_schema.interfaces import AgentUnavailableError, Received
from graph_schema.loaders import Freshness, SnapshotLoader
from tests.support.graph import snapshot


class Recording:
    """A source that answers after a loop iteration, and remembers the task each fetch ran in."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[object] | None] = []
        self.fetched: list[str] = []

    async def fetch(self, node_name: str) -> Received:
        self.tasks.append(asyncio.current_task())
        self.fetched.append(node_name)
        await asyncio.sleep(0)
        if node_name == "down":
            raise AgentUnavailableError(node_name, "connection refused")
        return Received(snapshot(node_name, []))

    def agent_address(self, node_name: str) -> str | None:
        return None


async def test_a_batch_fetches_each_node_once_in_one_task_and_fails_only_the_dead_node() -> None:
    source = Recording()
    loader = SnapshotLoader(source, {}, Freshness())
    names = [f"node-{i}" for i in range(50)] + ["down", "node-0"]
    results = await loader.load_all(names)
    # A task per node was most of a kept-warm batch's cost: the batch steps them itself.
    assert len(set(source.tasks)) == 1 and None not in source.tasks
    assert sorted(source.fetched) == sorted(set(names))
    assert isinstance(results[50], AgentUnavailableError)
    assert all(
        isinstance(r, Received) and r.snapshot.node_name == n
        for n, r in zip(names, results, strict=True)
        if n != "down"
    )


@pytest.mark.parametrize("shielded", [True, False])
async def test_a_failure_no_field_read_is_not_logged_as_never_retrieved(shielded: bool) -> None:
    reported: list[str] = []
    asyncio.get_running_loop().set_exception_handler(
        lambda loop, context: reported.append(context["message"])
    )
    loader = SnapshotLoader(Recording(), {}, Freshness(), shielded=shielded)
    # The one field that asks for a dead node gives up before the batch answers:
    # cancelled under strawberry (its shield then forgets the loader's future), or
    # dropped by a plan handing over to strawberry. The node's failure is an answer.
    unread = loader.load("down")
    if shielded:
        unread.cancel()
    assert isinstance(await loader.load("node-0"), Received)
    del unread, loader
    gc.collect()
    assert reported == []

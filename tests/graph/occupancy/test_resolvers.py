"""The graph's history fields: a node asked for by name that the caller cannot see."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph_schema.context import GraphContext
from graph_schema.scope import EVERYTHING, Scope
from tests.support.graph import SmallWorld
from tests.support.history_agents import HistoryAgents, occupancy, open_stores

SINCE = "2026-12-01T00:00:00Z"
HISTORY = f'gpuHistory(since: "{SINCE}", nodeName: $node) {{ edges {{ node {{ pid }} }} }}'
GPUS = "gpus(nodeName: $node) { uuid }"
# No such node; nodes that run none of the caller's pods (it may not list nodes).
UNSEEN = {
    "no such node": ("node-x", EVERYTHING),
    "no such node, for a tenant": ("node-x", Scope(pod_namespaces=frozenset({"ml"}))),
    "another tenant's node": ("node-a", Scope(pod_namespaces=frozenset({"serving"}))),
    "a caller who may see nothing": ("node-a", Scope()),
}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[SmallWorld]:
    """The small world, each node's agent with a log holding a record."""
    stores = open_stores(
        tmp_path,
        {node: [occupancy(f"GPU-{node}-0", 7, 1, 2)] for node in ("node-a", "node-b")},
    )
    try:
        yield SmallWorld(agents=HistoryAgents(stores))
    finally:
        for store in stores.values():
            store.close()


async def answer(world: SmallWorld, field: str, node: str, scope: Scope) -> dict[str, Any]:
    """The response to ``{ field }`` for ``node`` as ``scope`` sees it, with the node and the
    field's name written alike, so two fields' answers compare."""
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=scope)
    result = await world.schema.execute(
        f"query($node: String) {{ {field} }}", variable_values={"node": node}, context_value=ctx
    )
    errors = [
        {"message": e.message.replace(node, "NODE"), "path": e.path, "code": e.extensions}
        for e in result.errors or []
    ]
    return {"data": result.data, "errors": errors}


@pytest.mark.parametrize(("node", "scope"), UNSEEN.values(), ids=UNSEEN.keys())
async def test_gpu_history_of_a_node_the_caller_cannot_see_is_not_found_as_gpus_is(
    world: SmallWorld, node: str, scope: Scope
) -> None:
    # Not an empty page: that would look like a node whose GPUs ran nothing.
    history = await answer(world, HISTORY, node, scope)
    assert history == {
        "data": None,
        "errors": [
            {
                "message": "no node named 'NODE' among the nodes you may see",
                "path": ["gpuHistory"],
                "code": {"code": "NOT_FOUND"},
            }
        ],
    }
    # The same answer the seam gives gpus, and no agent asked.
    gpus = await answer(world, GPUS, node, scope)
    assert gpus["errors"][0]["path"] == ["gpus"]
    gpus["errors"][0]["path"] = ["gpuHistory"]
    assert history == gpus
    assert world.agents.calls == {}


async def test_gpu_history_of_a_node_the_caller_sees_still_answers(world: SmallWorld) -> None:
    seen = await answer(world, HISTORY, "node-a", EVERYTHING)
    assert seen == {"data": {"gpuHistory": {"edges": [{"node": {"pid": 7}}]}}, "errors": []}

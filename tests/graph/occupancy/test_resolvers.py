"""The graph's history fields: a node asked for by name that the caller cannot see, and a
tenant's own history on nodes it no longer sees."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from graph_schema.context import GraphContext
from graph_schema.interfaces import AgentUnavailableError, Received
from graph_schema.limits import SchemaLimits
from graph_schema.schema import build_schema
from graph_schema.scope import EVERYTHING, Scope
from graph_schema.visibility import VisibleCluster
from node_resolver.gpu_events.records import EventProcess, GpuEvent
from node_resolver.gpu_events.records import GpuEventKind as RecordedKind
from node_resolver.history.records import HistoryPage, HistoryQuery
from node_resolver.history.store import HistoryStore
from tests.support.graph import SmallWorld
from tests.support.history_agents import HistoryAgents, at, occupancy, open_stores

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


# -- a tenant's history on a node it no longer sees

SERVING = Scope(pod_namespaces=frozenset({"serving"}))
OLD_JOB = ("serving", "old-job", "uid-old-job")
TRAIN = ("ml", "train-1", "uid-train-1")
INFER = ("serving", "infer-1", "uid-infer-1")
PAST = f"""{{
  gpuUsage(since: "{SINCE}", groupBy: [NAMESPACE, NODE]) {{ namespace nodeName gpuSeconds }}
  gpuHistory(since: "{SINCE}") {{ edges {{ node {{ pid podName node {{ name }} }} }} }}
  gpuEvents(since: "{SINCE}") {{ edges {{ node {{ xid node {{ name }} }} }} }}
}}"""


class CountedAgents(HistoryAgents):
    """``HistoryAgents`` that count snapshot fetches apart from log reads, and whose logs of
    ``history_down`` refuse GetHistory alone, with the agent's address in the error."""

    def __init__(self, stores: dict[str, HistoryStore]) -> None:
        super().__init__(stores)
        self.fetched: Counter[str] = Counter()
        self.history_down: set[str] = set()

    async def fetch(self, node_name: str) -> Received:
        self.fetched[node_name] += 1
        return await super().fetch(node_name)

    async def history_page(
        self, node_name: str, query: HistoryQuery, page_token: str = ""
    ) -> HistoryPage:
        if node_name in self.history_down:
            raise AgentUnavailableError(node_name, "refused", address="10.0.0.1:50051")
        return await super().history_page(node_name, query, page_token)


def xid(gpu_uuid: str, hours: float, code: int, *pods: tuple[str, str, str]) -> GpuEvent:
    """An XID at ``hours`` of the records' day on ``gpu_uuid``, with a process of each pod."""
    processes = tuple(
        EventProcess(100 + i, pod_namespace=ns, pod_name=name, pod_uid=uid)
        for i, (ns, name, uid) in enumerate(pods)
    )
    event = GpuEvent(at(hours), RecordedKind.XID, gpu_uuid, xid=code, processes=processes)
    event.index_pods()
    return event


@pytest.fixture
def past(tmp_path: Path) -> Iterator[SmallWorld]:
    """The small world, where serving (which sees node-b only) ran old-job on node-a for two
    hours beside ml's train-1, and an XID hit each; infer-1 ran an hour on node-b."""
    stores = open_stores(
        tmp_path,
        {
            "node-a": [
                occupancy("GPU-node-a-0", 7, 1, 3, pod=OLD_JOB),
                occupancy("GPU-node-a-1", 8, 1, 4, pod=TRAIN),
            ],
            "node-b": [occupancy("GPU-node-b-0", 9, 0, 1, pod=INFER)],
        },
    )
    stores["node-a"].write_events(
        [xid("GPU-node-a-0", 2, 79, OLD_JOB), xid("GPU-node-a-1", 2.5, 48, TRAIN)]
    )
    world = SmallWorld(agents=CountedAgents(stores))
    # A node's lists under a connection's edges cost past the default limit, not tested here.
    world.schema = build_schema(SchemaLimits(max_result_items=10_000_000))
    try:
        yield world
    finally:
        for store in stores.values():
            store.close()


async def ask_as(world: SmallWorld, query: str, scope: Scope) -> dict[str, Any]:
    """The response to ``query`` as ``scope`` sees it."""
    ctx = GraphContext(world.cluster, world.agents, world.schema.state, scope=scope)
    result = await world.schema.execute(query, context_value=ctx)
    errors = [{"message": e.message, "path": e.path} for e in result.errors or []]
    return {"data": result.data, "errors": errors}


async def test_a_tenants_past_on_a_node_it_no_longer_sees_is_read_and_nobody_elses(
    past: SmallWorld,
) -> None:
    assert not VisibleCluster(past.cluster, SERVING).sees_node("node-a")
    answer = await ask_as(past, PAST, SERVING)
    assert answer["errors"] == []
    data = answer["data"]
    # old-job's two hours count: the bill of a team is not what it runs now.
    assert data["gpuUsage"] == [
        {"namespace": "serving", "nodeName": "node-a", "gpuSeconds": 7200.0},
        {"namespace": "serving", "nodeName": "node-b", "gpuSeconds": 3600.0},
    ]
    # Its own records name the node they ran on; ml's record and XID stay out.
    assert [e["node"] for e in data["gpuHistory"]["edges"]] == [
        {"pid": 9, "podName": "infer-1", "node": {"name": "node-b"}},
        {"pid": 7, "podName": "old-job", "node": {"name": "node-a"}},
    ]
    assert [e["node"] for e in data["gpuEvents"]["edges"]] == [
        {"xid": 79, "node": {"name": "node-a"}}
    ]
    # The admin's answer is what both teams ran, as before.
    admin = await ask_as(past, PAST, EVERYTHING)
    assert {(r["namespace"], r["gpuSeconds"]) for r in admin["data"]["gpuUsage"]} == {
        ("serving", 7200.0), ("ml", 10800.0), ("serving", 3600.0),
    }  # fmt: skip


async def test_a_down_node_the_tenant_cannot_see_makes_the_answer_incomplete_without_a_name(
    past: SmallWorld,
) -> None:
    past.agents.kill("node-a", "connection refused")
    answer = await ask_as(past, PAST, SERVING)
    # node-b's part stands; the gap is said, never silent, and never names node-a.
    assert answer["data"]["gpuUsage"] == [
        {"namespace": "serving", "nodeName": "node-b", "gpuSeconds": 3600.0}
    ]
    assert answer["errors"] == [
        {"message": f"{what} unavailable from 1 node(s) this caller cannot see", "path": [path]}
        for what, path in (
            ("usage", "gpuUsage"),
            ("history", "gpuHistory"),
            ("GPU events", "gpuEvents"),
        )
    ]
    assert "node-a" not in str(answer)
    # The admin, who sees node-a, is told which node.
    admin = await ask_as(past, PAST, EVERYTHING)
    assert all("node 'node-a'" in e["message"] for e in admin["errors"]), admin["errors"]


NODE_OF_AN_EVENT = (
    f'{{ gpuEvents(since: "{SINCE}") {{ edges {{ node {{ xid node {{ name driverVersion '
    "historyStatus gpuEventStatus agent { address reachable error } gpus { uuid } gpuCount "
    "allocationSource allocationSourceReason "
    f'gpuHistory(since: "{SINCE}") {{ pid }} gpuEvents(since: "{SINCE}") {{ xid }} }} }} }} }} }}'
)


async def test_the_node_of_a_record_the_tenant_no_longer_sees_shows_only_the_tenants_own(
    past: SmallWorld,
) -> None:
    answer = await ask_as(past, NODE_OF_AN_EVENT, SERVING)
    (edge,) = answer["data"]["gpuEvents"]["edges"]
    # Its name is in the tenant's own event, and so are its records there; nothing else of
    # the node (no address, driver or GPUs), and its agent never asked for a snapshot.
    assert edge["node"]["node"] == {
        "name": "node-a",
        "driverVersion": None,
        "historyStatus": None,
        "gpuEventStatus": None,
        "agent": {
            "address": None,
            "reachable": False,
            "error": "no node named 'node-a' among the nodes you may see",
        },
        "gpus": None,
        "gpuCount": None,
        # Null, not an error that would take the tenant's own event with it.
        "allocationSource": None,
        "allocationSourceReason": None,
        "gpuHistory": [{"pid": 7}],
        "gpuEvents": [{"xid": 79}],
    }
    assert {e["message"] for e in answer["errors"]} == {
        "no node named 'node-a' among the nodes you may see"
    }
    agents = past.agents
    assert isinstance(agents, CountedAgents) and agents.fetched["node-a"] == 0


async def test_a_failing_log_of_such_a_node_says_the_gap_without_the_agents_address(
    past: SmallWorld,
) -> None:
    agents = past.agents
    assert isinstance(agents, CountedAgents)
    agents.history_down.add("node-a")
    query = (
        f'{{ gpuEvents(since: "{SINCE}") {{ edges {{ node {{ node {{ '
        f'gpuHistory(since: "{SINCE}") {{ pid }} }} }} }} }} }}'
    )
    tenant = await ask_as(past, query, SERVING)
    assert [e["message"] for e in tenant["errors"]] == [
        "history unavailable from 1 node(s) this caller cannot see"
    ]
    # The admin sees node-a, and is told where its agent was asked.
    admin = await ask_as(past, query, EVERYTHING)
    assert "10.0.0.1:50051" in admin["errors"][0]["message"]


async def test_a_node_name_the_tenant_no_longer_sees_stays_not_found(past: SmallWorld) -> None:
    # Its records there are read without nodeName (each names its node); naming the node
    # would tell which names exist, so it answers as one that does not.
    history = await answer(past, HISTORY, "node-a", SERVING)
    assert history["errors"][0]["code"] == {"code": "NOT_FOUND"}
    assert history == await answer(past, HISTORY, "node-x", SERVING)

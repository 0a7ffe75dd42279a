"""The compiled path and strawberry give the same bytes, for generated and real documents.

Every document runs through both over the same cluster, agents and caller,
and the two answers, formatted as the server formats them and encoded by
orjson, must be equal byte for byte; the map's, top's and the docs' documents
also over graphql-transport-ws, against the real app. Where the plan declines (it returns
None), strawberry's answer is the answer, so there is nothing to compare;
the documents the map and ``top`` send must not be declined.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import websockets
from graphql import (
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.http import process_result
from websockets.typing import Subprotocol

from api.app import create_app
from api.demo.history_scenario import HISTORY_QUERY
from api.demo.queries import NO_POD, SHARED_GPU, WORKER
from api.http import map_queries
from api.kube.dra_cache import DraCache
from api.settings import Settings
from api.top import gpu_hours
from api.top import queries as top_queries
from graph_schema.allocation_join import AllocationRules
from graph_schema.compiled.documents import CompiledDocuments
from graph_schema.context import GraphContext
from graph_schema.limits import SchemaLimits
from graph_schema.records import ClaimDeviceRecord, ResourceClaimRecord
from graph_schema.schema import GraphSchema, build_schema
from graph_schema.scope import EVERYTHING, Scope
from node_resolver.gpu_events.records import (
    AllocatedPod,
    EventProcess,
    GpuEvent,
    GpuEventKind,
)
from node_resolver.history.records import OccupancyRecord
from node_resolver.history.store import HistoryStore
from node_resolver.models import (
    AllocationMechanism,
    AllocationUse,
    AllocationUseState,
    ContainerAllocations,
    DeviceAllocation,
    NodeAllocations,
)
from tests.support.graph import (
    GiB,
    MemoryCluster,
    MemorySnapshots,
    SmallWorld,
    gpu_sample,
    gpu_uuid,
    node_record,
    pod_record,
    process,
    snapshot,
    synthetic_cluster,
)
from tests.support.history_agents import HistoryAgents, at, occupancy, open_stores
from tests.support.server import serve_app

ROOT = Path(__file__).resolve().parents[3]

# Callers: everything; one namespace with its nodes; one namespace, all nodes, its
# command lines; nothing at all.
SCOPES = {
    "everything": EVERYTHING,
    "ml-only": Scope(pod_namespaces=frozenset({"ml", "ns-1"})),
    "ml-all-nodes": Scope(
        pod_namespaces=frozenset({"ml", "ns-1"}),
        all_nodes=True,
        exec_namespaces=frozenset({"ml"}),
    ),
    "nobody": Scope(),
}


class World:
    """A cluster, its agents and a schema: what both paths run over.

    ``schema`` runs every operation through strawberry's executor; ``planned``
    is the same schema over the same server-wide state, with the compiled plan
    in strawberry's executing step, so both pass the same pipeline and
    policies and differ only in what executes. The plan hands back its
    selections already encoded, as it does in the server.
    """

    def __init__(
        self, cluster: MemoryCluster, agents: MemorySnapshots, schema: GraphSchema
    ) -> None:
        self.cluster = cluster
        self.agents = agents
        self.schema = schema
        self.compiled = CompiledDocuments(encoded=True)
        self.planned = build_schema(
            schema.limits, state=schema.state, gauge=schema.gauge, compiled=self.compiled
        )

    async def both(
        self, query: str, variables: dict[str, Any] | None, scope: Scope
    ) -> tuple[bytes, bytes | None]:
        """strawberry's answer and the plan's (None where the plan declines)."""
        state = self.schema.state
        reference = await self.schema.execute(
            query,
            variable_values=variables,
            context_value=GraphContext(self.cluster, self.agents, state, scope=scope),
        )
        answered = self.compiled.counts["compiled"]
        planned = await self.planned.execute(
            query,
            variable_values=variables,
            context_value=GraphContext(self.cluster, self.agents, state, scope=scope),
        )
        expected = orjson.dumps(process_result(reference))
        if self.compiled.counts["compiled"] == answered:
            return expected, None
        return expected, orjson.dumps(process_result(planned))


# Each world's agents' logs, by node; built once per module (the stores are only read).
Logs = dict[str, dict[str, HistoryStore]]


def _small_logs() -> dict[str, Sequence[OccupancyRecord]]:
    a0, a1, b0 = gpu_uuid("node-a", 0), gpu_uuid("node-a", 1), gpu_uuid("node-b", 0)
    train1 = ("ml", "train-1", "uid-ml-train-1")
    return {
        "node-a": [
            occupancy(a0, 101, 0, 2, pod=train1, container_id="ctr-t1"),
            occupancy(a0, 202, 1, 5, ended=False, pod=("ml", "train-2", "uid-ml-train-2")),
            # Another tenant on the shared GPU; its pod is gone.
            occupancy(a0, 401, 2, 3, memory=3 << 30, pod=("serving", "old", "uid-old")),
            # The same PID again, a new process (its pod deleted since).
            occupancy(a0, 101, 6, 8, pod=("ml", "gone", "uid-gone"), start_ticks=99),
            occupancy(a1, 999, 0, 24, ended=False, process_name="Xorg"),
            occupancy(a1, 555, 3, 4, pod=train1, mig_device_uuid="MIG-node-a-1-0"),
        ],
        "node-b": [
            occupancy(
                b0, 301, 0, 10, memory=100 << 30, pod=("serving", "infer-1", "uid-serving-infer-1")
            ),
            # A cgroup naming a pod bound to node-a: its live pod must not be borrowed.
            occupancy(b0, 302, 1, 2, pod=train1),
            occupancy(b0, 303, 4, 5, pod=("ns-1", "w", "uid-ns-1-w")),
        ],
        # Its agent is down: the log is there, unreachable.
        "node-c": [occupancy(gpu_uuid("node-c", 0), 7, 0, 1, pod=train1)],
        # node-d: history off (no store).
    }


def _synthetic_logs() -> dict[str, Sequence[OccupancyRecord]]:
    logs: dict[str, Sequence[OccupancyRecord]] = {}
    for n in range(6):
        node = f"node-{n:05d}"
        logs[node] = [
            occupancy(
                gpu_uuid(node, g),
                1000 + g * 100 + k,
                k,
                k + 1.5,
                ended=k == 0,
                pod=(f"ns-{n % 10}", f"w-{node}-{g}-{k}", f"uid-ns-{n % 10}-w-{node}-{g}-{k}"),
            )
            for g in range(2)
            for k in range(2)
        ]
    return logs


def _small_events() -> dict[str, list[GpuEvent]]:
    """GPU health events: an XID on node-a's shared GPU blamed on another tenant's process,
    one on its MIG device with a process in no pod, a lost GPU on node-b with its pods."""
    a0, a1, b0 = gpu_uuid("node-a", 0), gpu_uuid("node-a", 1), gpu_uuid("node-b", 0)
    train = EventProcess(101, "python", "ctr-t1", "main", "uid-ml-train-1", "ml", "train-1",
                         "ALLOCATED")  # fmt: skip
    old = EventProcess(
        401, "python", "ctr-old", "main", "uid-old", "serving", "old", "NOT_ALLOCATED"
    )
    xorg = EventProcess(999, "Xorg")
    infer = EventProcess(301, "python", "ctr-i1", "main", "uid-serving-infer-1", "serving",
                         "infer-1", "ALLOCATED")  # fmt: skip
    events = {
        "node-a": [
            GpuEvent(
                at(1),
                GpuEventKind.XID,
                a0,
                xid=13,
                culprit_pid=401,
                processes=(train, old),
                allocated=(AllocatedPod("ml", "train-1"),),
            ),
            GpuEvent(
                at(3.5),
                GpuEventKind.XID,
                a1,
                mig_device_uuid="MIG-node-a-1-0",
                xid=31,
                culprit_pid=77,
                culprit_name="gone",
                processes=(xorg,),
            ),
            GpuEvent(at(6), GpuEventKind.ECC_DOUBLE_BIT, a0, processes=(train,)),
        ],
        "node-b": [GpuEvent(at(4), GpuEventKind.GPU_LOST, b0, processes=(infer,))],
    }
    for node_events in events.values():
        for event in node_events:
            event.index_pods()
    return events


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Logs]:
    """The worlds' occupancy logs, in SQLite stores under a temporary directory."""
    directory = tmp_path_factory.mktemp("history")
    built = {
        "small": open_stores(directory / "small", _small_logs()),
        "synthetic": open_stores(directory / "synthetic", _synthetic_logs()),
    }
    for node, events in _small_events().items():
        built["small"][node].write_events(events)
    yield built
    for stores in built.values():
        for store in stores.values():
            store.close()


def small_world(logs: Logs, limits: SchemaLimits = SchemaLimits()) -> World:  # noqa: B008
    """The demo-like world: shared GPU, orphan process, lost GPU, field errors; a dead
    third node, and a fourth whose agent answers but cannot read its GPUs (history off)."""
    world = SmallWorld(HistoryAgents(logs["small"]))
    world.cluster.add_node(node_record("node-c"))
    world.cluster.add_node(node_record("node-d"))
    for name in ("node-a", "node-b"):
        received = run(world.agents.fetch(name)).snapshot
        world.agents.put(dataclasses.replace(received, history_status="ok"))
    world.agents.put(snapshot("node-c", [gpu_sample("node-c", 0, [])]))
    world.agents.kill("node-c")
    world.agents.put(
        dataclasses.replace(
            snapshot("node-d", [], error="NVML_ERROR_DRIVER_NOT_LOADED"), history_status="off"
        )
    )
    return World(world.cluster, world.agents, build_schema(limits))


def synthetic_world(logs: Logs) -> World:
    """Six nodes of 2 GPUs x 2 processes, two agents down and one raising a bug."""
    sc = synthetic_cluster(
        6, gpus_per_node=2, processes_per_gpu=2, agents=HistoryAgents(logs["synthetic"])
    )
    sc.snapshots.kill("node-00001")
    sc.snapshots.kill("node-00004", "deadline exceeded")
    sc.snapshots.break_with("node-00003", RuntimeError("a bug"))
    return World(sc.cluster, sc.snapshots, build_schema())


# ------------------------------------------------------------ generated documents

NAMES = ["node-a", "node-b", "node-c", "node-d", "node-00002", "node-00001", "missing"]
NAMESPACES = ["ml", "serving", "ns-1", "ns-2", "nowhere"]
POD_NAMES = ["train-1", "infer-1", "idle", "w-node-00002-0-0", "gone"]
UUIDS = [gpu_uuid("node-a", 0), gpu_uuid("node-b", 0), gpu_uuid("node-00002", 1), "GPU-none"]
SELECTORS = ["app=train", "app in (train,infer)", "!canary", "tier!=db", "app in ("]
STRINGS: dict[str, list[str]] = {
    "name": NAMES + POD_NAMES,
    "nodeName": NAMES,
    "namespace": NAMESPACES,
    "uuid": UUIDS,
    "labelSelector": SELECTORS,
    "podName": [*POD_NAMES, "train-2", "old", "w-node-00002-1-1"],
    "after": ["nope", ""],
}
# Moments around the logs' day (2026-12-01), one with an offset; "$since" is a variable.
MOMENTS = [
    "2026-11-30T00:00:00Z",
    "2026-12-01T01:30:00Z",
    "2026-12-01T05:00:00+02:00",
    "2026-12-01T04:00:00.5Z",
    "2027-01-01T00:00:00Z",
]
# GraphQL literals, by argument name: DateTimes, enums, ints, and variables.
LITERALS: dict[str, list[str]] = {
    "since": [*(f'"{m}"' for m in MOMENTS), "$since"],
    "until": [*(f'"{m}"' for m in MOMENTS), "null", "$since"],
    "groupBy": [
        "[NAMESPACE]",
        "[POD, NODE]",
        "[]",
        "GPU",
        "[NAMESPACE, POD, NODE, GPU]",
        "null",
        "$groupBy",
    ],
    "first": ["1", "2", "3", "0", "5000", "null"],
    "kind": ["XID", "GPU_LOST", "ECC_SINGLE_BIT", "null", '"XID"'],
    "minIdleSeconds": ["0", "3600", "7200.5", "-1", "null"],
}
# The variables a document may use, their declarations and values.
VARIABLES = {
    "on": ("Boolean!", st.booleans()),
    "since": ("DateTime!", st.sampled_from([*MOMENTS, "2026-12-01", "yesterday"])),
    "groupBy": (
        "[UsageGroupBy!]",
        st.sampled_from([None, [], ["POD"], ["NODE"], ["NAMESPACE", "GPU"], ["BOGUS"]]),
    ),
}
HISTORY_ROOTS = ["gpuHistory", "gpuUsage", "gpuEvents", "gpu", "node", "nodes", "pod", "gpus"]


def literal(draw: st.DrawFn, name: str) -> str:
    """A GraphQL literal for argument ``name``."""
    if name in LITERALS:
        return draw(st.sampled_from(LITERALS[name]))
    return orjson.dumps(draw(st.sampled_from(STRINGS.get(name, ["x"])))).decode()


def _named(output: GraphQLOutputType) -> Any:
    while isinstance(output, GraphQLNonNull | GraphQLList):
        output = output.of_type
    return output


@st.composite
def selection(
    draw: st.DrawFn,
    schema: Any,
    type_name: str,
    depth: int,
    roots: Sequence[str] | None = None,
) -> str:
    """A selection set over ``type_name``: fields, aliases, arguments, fragments, directives."""
    parent = schema.type_map[type_name]
    assert isinstance(parent, GraphQLObjectType)
    names = sorted(n for n in parent.fields if not n.startswith("_"))
    if roots is not None:
        names = [n for n in names if n in roots]
    if depth <= 0:
        names = [
            n for n in names if not isinstance(_named(parent.fields[n].type), GraphQLObjectType)
        ]
        names = names or ["__typename"]
    chosen = draw(st.lists(st.sampled_from([*names, "__typename"]), min_size=1, max_size=4))
    parts = []
    for i, name in enumerate(chosen):
        text = name
        if name != "__typename":
            field = parent.fields[name]
            args = []
            for arg_name, arg in field.args.items():
                required = isinstance(arg.type, GraphQLNonNull)
                if required or draw(st.booleans()):
                    args.append(f"{arg_name}: {literal(draw, arg_name)}")
            if args:
                text += "(" + ", ".join(args) + ")"
        # Same-named fields with different arguments cannot merge: alias repeats.
        if chosen.count(name) > 1 or draw(st.booleans()):
            text = f"a{i}: {text}"
        directive = draw(
            st.sampled_from(["", "", "@include(if: true)", "@skip(if: true)", "@include(if: $on)"])
        )
        # Directives come before the field's selection set.
        text = f"{text} {directive}".strip()
        if name != "__typename":
            inner = _named(parent.fields[name].type)
            if isinstance(inner, GraphQLObjectType):
                text += " { " + draw(selection(schema, inner.name, depth - 1)) + " }"
        parts.append(text)
    if draw(st.booleans()):
        # The same fields again through an inline fragment: merged, not repeated.
        parts.append(f"... on {type_name} {{ {parts[0]} }}")
    return " ".join(parts)


@st.composite
def documents(
    draw: st.DrawFn, schema: Any, roots: Sequence[str] | None = None
) -> tuple[str, dict[str, Any]]:
    """A query over the schema (or below ``roots``), declaring the variables it uses."""
    body = draw(selection(schema, "Query", 3, roots))
    declared: list[str] = []
    variables: dict[str, Any] = {}
    for name, (graphql_type, values) in VARIABLES.items():
        if re.search(rf"\${name}\b", body):
            declared.append(f"${name}: {graphql_type}")
            variables[name] = draw(values)
    if not declared:
        return f"query {{ {body} }}", variables
    return f"query({', '.join(declared)}) {{ {body} }}", variables


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def assert_same(world: World, query: str, variables: dict[str, Any] | None, scope: Scope) -> bool:
    """Both answers are byte-equal; True when the plan answered (did not decline)."""
    expected, got = run(world.both(query, variables, scope))
    if got is not None:
        assert got == expected, f"{query}\n{variables}\nstrawberry: {expected!r}\ncompiled: {got!r}"
    return got is not None


_SCHEMA = build_schema()._schema


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(document=documents(_SCHEMA), scope=st.sampled_from(sorted(SCOPES)), which=st.booleans())
def test_generated_documents_answer_the_same(
    logs: Logs, document: tuple[str, dict[str, Any]], scope: str, which: bool
) -> None:
    query, variables = document
    world = small_world(logs) if which else synthetic_world(logs)
    assert_same(world, query, variables, SCOPES[scope])


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    document=documents(_SCHEMA, HISTORY_ROOTS),
    scope=st.sampled_from(sorted(SCOPES)),
    which=st.booleans(),
)
def test_generated_history_documents_answer_the_same(
    logs: Logs, document: tuple[str, dict[str, Any]], scope: str, which: bool
) -> None:
    # The roots that reach the history fields (and GPUs, nodes, pods around them).
    query, variables = document
    world = small_world(logs) if which else synthetic_world(logs)
    assert_same(world, query, variables, SCOPES[scope])


GPU_EVENTS = """{
  gpuEvents(since: "2026-12-01T00:00:00Z") { edges { cursor node {
    time kind xid description migDeviceUuid gpu { uuid } node { name } hiddenProcessCount
    culprit { pid processName podName pod { name } allocation }
    processes { pid podNamespace podName podUid containerId allocation pod { name } } } }
    pageInfo { hasNextPage endCursor } }
  node(name: "node-a") { name gpuEventStatus gpuEvents(since: "2026-12-01T00:00:00Z") { kind }
    gpus { uuid events(since: "2026-12-01T00:00:00Z") { kind hiddenProcessCount } } }
  pods { name gpuEvents(since: "2026-12-01T00:00:00Z") { kind } }
}"""


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_gpu_events_answer_the_same_as_each_caller_sees_them(logs: Logs, scope: str) -> None:
    world = small_world(logs)
    assert assert_same(world, GPU_EVENTS, None, SCOPES[scope])
    expected, _ = run(world.both(GPU_EVENTS, None, SCOPES[scope]))
    edges = orjson.loads(expected)["data"]["gpuEvents"]["edges"]
    # Everyone sees the events; ml's tenant only those its pods were on, others' withheld.
    shown = {"everything": 4, "ml-only": 2, "ml-all-nodes": 2, "nobody": 0}[scope]
    assert len(edges) == shown, edges


# ------------------------------------------------------------ the clients' documents

README_BLOCK = re.compile(r"```graphql\n(.*?)```", re.S)


def readme_examples() -> list[str]:
    """Every GraphQL example of the README and docs, and the demo's example queries."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [m for path in texts for m in README_BLOCK.findall(path.read_text())]
    # An example's placeholder GPU: one of the world's, with a shared history; the
    # demo's first node: the world's.
    found = [
        m.replace('"GPU-..."', f'"{gpu_uuid("node-a", 0)}"').replace('"gpu-node-0"', '"node-a"')
        for m in found
    ]
    demo = [
        SHARED_GPU.format(uuid=gpu_uuid("node-a", 0)),
        NO_POD.format(node="node-a"),
        WORKER.format(namespace="ml", name="train-1"),
        HISTORY_QUERY.format(uuid=gpu_uuid("node-a", 0), since="2026-12-01T00:00:00Z"),
    ]
    return [*found, *demo]


def client_documents() -> list[tuple[str, str, dict[str, Any] | None]]:
    """What the map and ``top`` send, with the variables they send it with."""
    top: list[tuple[str, str, dict[str, Any] | None]] = [
        (f"top {v}", top_queries.SNAPSHOT, v)
        for v in (
            {"withPods": False},
            {"withPods": True},
            {"withPods": True, "node": "node-a", "namespace": "ml", "selector": "app=train"},
        )
    ]
    # ``top --since``: by pod, or by node (run_since's two groupings).
    since = "2026-12-01T00:00:00Z"
    top_since: list[tuple[str, str, dict[str, Any] | None]] = [
        (f"top --since {group}", gpu_hours.USAGE, {"since": since, "groupBy": [group]})
        for group in ("POD", "NODE")
    ]
    history = [
        (f"map history {uuid}", map_queries.HISTORY_QUERY, {"uuid": uuid, "since": since})
        for uuid in (gpu_uuid("node-a", 0), gpu_uuid("node-b", 0), gpu_uuid("node-c", 0))
    ]
    return [
        ("map snapshot", map_queries.SNAPSHOT_QUERY, None),
        ("map idle allocations", map_queries.IDLE_QUERY, None),
        ("map gpu", map_queries.GPU_QUERY, {"uuid": gpu_uuid("node-a", 0)}),
        ("map gpu on a down node", map_queries.GPU_QUERY, {"uuid": gpu_uuid("node-c", 0)}),
        ("map gpu details", map_queries.GPU_DETAILS_QUERY, {"uuid": gpu_uuid("node-a", 0)}),
        (
            "map gpu details on a down node",
            map_queries.GPU_DETAILS_QUERY,
            {"uuid": gpu_uuid("node-c", 0)},
        ),
        *history,
        *top,
        *top_since,
    ]


def masked(answer: bytes) -> bool:
    """Whether strawberry's answer holds a masked internal error (the plan declines those)."""
    return any(e["message"] == "Unexpected error." for e in orjson.loads(answer).get("errors", []))


def not_found(answer: bytes) -> bool:
    """Whether strawberry's answer is a node name's NOT_FOUND, which nulls all of data (an
    error in a non-null field: the plan declines those)."""
    body = orjson.loads(answer)
    codes = [e.get("extensions", {}).get("code") for e in body.get("errors", [])]
    return body["data"] is None and "NOT_FOUND" in codes


@pytest.mark.parametrize("scope", sorted(SCOPES))
@pytest.mark.parametrize(
    "name,query,variables", client_documents(), ids=[d[0] for d in client_documents()]
)
def test_the_map_and_top_documents_run_compiled_and_answer_the_same(
    logs: Logs, name: str, query: str, variables: dict[str, Any] | None, scope: str
) -> None:
    for world in (small_world(logs), synthetic_world(logs)):
        expected, got = run(world.both(query, variables, SCOPES[scope]))
        if got is None:
            # Only a bug (the synthetic world's broken agent, in a fan-out) or a node
            # the caller cannot see (--node) may decline.
            assert masked(expected) or not_found(expected), f"the plan declined {name}"
            continue
        assert got == expected, f"{name}\nstrawberry: {expected!r}\ncompiled: {got!r}"


def test_queries_over_graphql_transport_ws_run_compiled_and_answer_the_same(logs: Logs) -> None:
    # The app's schema over the world's state, served by real uvicorn: each document
    # over the WebSocket must be answered by the plan, with strawberry's answer.
    world = small_world(logs)
    documents = [*client_documents(), *((q, q, None) for q in readme_examples())]
    run(_over_websocket(world, documents))


async def _over_websocket(
    world: World, documents: Sequence[tuple[str, str, dict[str, Any] | None]]
) -> None:
    settings = Settings()
    app = create_app(
        settings, world.cluster, world.agents, state=world.schema.state, gauge=world.schema.gauge
    )
    counts = app.state.compiled.counts
    async with (
        serve_app(app, settings) as server,
        websockets.connect(server.ws_url, subprotocols=[Subprotocol("graphql-transport-ws")]) as ws,
    ):
        await ws.send(orjson.dumps({"type": "connection_init"}).decode())
        assert orjson.loads(await ws.recv())["type"] == "connection_ack"
        for n, (name, query, variables) in enumerate(documents):
            expected, by_plan = await world.both(query, variables, EVERYTHING)
            answered = counts["compiled"]
            payload = {"query": query, "variables": variables or {}}
            await ws.send(
                orjson.dumps({"id": str(n), "type": "subscribe", "payload": payload}).decode()
            )
            message = orjson.loads(await asyncio.wait_for(ws.recv(), 30))
            assert (message["id"], message["type"]) == (str(n), "next"), (name, message)
            complete = orjson.loads(await asyncio.wait_for(ws.recv(), 30))
            assert (complete["id"], complete["type"]) == (str(n), "complete")
            assert message["payload"] == orjson.loads(expected), name
            if by_plan is not None:
                assert counts["compiled"] == answered + 1, f"{name} over the WebSocket: strawberry"
    assert counts["compiled"] > len(documents) // 2


@pytest.mark.parametrize("query", readme_examples())
def test_readme_and_demo_examples_answer_the_same(logs: Logs, query: str) -> None:
    for scope in SCOPES.values():
        expected, got = run(small_world(logs).both(query, None, scope))
        # A caller who may see no node asks for one by name: NOT_FOUND, strawberry's.
        assert got == expected or (got is None and scope == Scope() and not_found(expected))


@pytest.mark.parametrize(
    "field",
    [
        "gpus(nodeName: $node) { uuid }",
        "gpuProcesses(nodeName: $node) { pid }",
        'gpuHistory(since: "2026-12-01T00:00:00Z", nodeName: $node) { edges { cursor } }',
    ],
)
def test_a_node_unknown_or_hidden_is_the_same_not_found_on_both_paths(
    logs: Logs, field: str
) -> None:
    query = f"query($node: String) {{ {field} }}"
    world = small_world(logs)
    answers = []
    # No such node; nodes that run none of the caller's pods, without list nodes.
    for node, scope in (("node-x", EVERYTHING), ("node-x", SCOPES["nobody"]),
                        ("node-c", SCOPES["ml-only"]), ("node-a", SCOPES["nobody"])):  # fmt: skip
        expected, got = run(world.both(query, {"node": node}, scope))
        # The plan leaves an error that nulls all of data to strawberry.
        assert got is None or got == expected
        answers.append(orjson.loads(expected.replace(node.encode(), b"NODE")))
    assert answers[0]["data"] is None
    assert answers[0]["errors"][0]["extensions"] == {"code": "NOT_FOUND"}
    assert all(a == answers[0] for a in answers), answers


# ------------------------------------------------------------ what the plan declines


@pytest.mark.parametrize(
    "query",
    [
        "{ __schema { queryType { name } } }",
        '{ _entities(representations: [{__typename: "Node", name: "node-a"}]) '
        "{ ... on Node { name } } }",
        "{ _service { sdl } }",
        "subscription { gpuUpdates { uuid } }",
        "{ nodes { name ",  # does not parse
        "{ nodes { nope } }",  # not valid
    ],
)
def test_what_the_plan_does_not_cover_falls_back_to_strawberry(logs: Logs, query: str) -> None:
    world = small_world(logs)
    _, got = run(world.both(query, None, EVERYTHING))
    assert got is None


def test_an_error_in_a_non_null_field_is_strawberrys_answer(logs: Logs) -> None:
    # graphql-core nulls the parent (here: all of data); the plan leaves that to it.
    world = small_world(logs)
    variables = {"withPods": True, "selector": "app in ("}
    expected, got = run(world.both(top_queries.SNAPSHOT, variables, EVERYTHING))
    assert got is None
    assert orjson.loads(expected)["data"] is None


def test_a_result_over_the_budget_is_strawberrys_answer() -> None:
    # Admission assumes 4 processes per GPU until an agent reports more; this GPU
    # has 10, so the operation is admitted and its execution crosses the budget.
    cluster, agents = MemoryCluster(), MemorySnapshots()
    cluster.add_node(node_record("busy", gpus=1))
    processes = []
    for k in range(10):
        pod = pod_record("ml", f"p{k}", "busy", container_ids=[f"c{k}"])
        cluster.add_pod(pod)
        processes.append(process(100 + k, GiB, container_id=f"c{k}", pod_uid=pod.uid))
    agents.put(snapshot("busy", [gpu_sample("busy", 0, processes)]))
    world = World(cluster, agents, build_schema(SchemaLimits(max_result_items=6)))
    expected, got = run(world.both("{ gpuProcesses { pid } }", None, EVERYTHING))
    assert got is None
    assert b"RESULT_TOO_LARGE" in expected


def test_a_down_agent_nulls_only_its_nodes_gpus_with_the_same_error_and_path(logs: Logs) -> None:
    world = small_world(logs)
    expected, got = run(world.both("{ nodes { name gpus { uuid } } }", None, EVERYTHING))
    assert got == expected
    body = orjson.loads(got)
    by_name = {n["name"]: n for n in body["data"]["nodes"]}
    assert by_name["node-c"]["gpus"] is None
    assert by_name["node-a"]["gpus"] and by_name["node-b"]["gpus"]
    paths = [e["path"] for e in body["errors"]]
    assert ["nodes", 2, "gpus"] in paths


def test_a_plan_is_compiled_once_per_document_and_directive_values(logs: Logs) -> None:
    world = small_world(logs)
    for on in (True, False, True, False):
        assert_same(
            world,
            "query($on: Boolean!) { nodes @include(if: $on) { name } }",
            {"on": on},
            EVERYTHING,
        )
    (entry,) = world.compiled._documents.values()
    assert set(entry.plans) == {(True,), (False,)}


def test_remembered_selections_stay_right_across_callers_and_new_snapshots(logs: Logs) -> None:
    # The plan reuses a GPU's rendered selection while the GPU object lives: callers
    # with other rights, and a new snapshot of the node, must still get their own.
    world = small_world(logs)
    query = map_queries.SNAPSHOT_QUERY
    for _ in range(2):
        for scope in SCOPES.values():
            assert assert_same(world, query, None, scope)
    world.agents.put(snapshot("node-b", [gpu_sample("node-b", 0, [])]))
    for scope in SCOPES.values():
        assert assert_same(world, query, None, scope)


def test_a_gpu_request_remembered_with_its_gpu_follows_the_claims_at_once(logs: Logs) -> None:
    # A GPU's tile, its pods' gpuRequest included, is remembered while the GPU object
    # lives (remember_while): a claim that changes within one snapshot shows at once.
    dra = DraCache()
    dra.served = True
    small = small_world(logs)
    world = World(
        small.cluster,
        small.agents,
        build_schema(allocation_rules=AllocationRules(dra=dra)),
    )
    pod = small.cluster.pod("ml", "train-1")  # asks for 2 GPUs itself
    assert pod is not None
    small.cluster.add_pod(dataclasses.replace(pod, resource_claims=(("gpu", "worker-gpu"),)))

    def claim(devices: int) -> None:
        dra.upsert_claim(
            ResourceClaimRecord(
                pod.namespace,
                "worker-gpu",
                "claim-uid",
                tuple(
                    ClaimDeviceRecord("gpu.nvidia.com", "node-a", f"gpu-{i}")
                    for i in range(devices)
                ),
            )
        )

    def requests() -> set[int | None]:
        expected, got = run(world.both(map_queries.SNAPSHOT_QUERY, None, EVERYTHING))
        assert got == expected  # the plan answered, byte for byte as strawberry did
        return {
            process["pod"]["gpuRequest"]
            for node in orjson.loads(got)["data"]["nodes"]
            for gpu in node["gpus"] or []
            for process in gpu["processes"]
            if process["pod"] and process["pod"]["name"] == pod.name
        }

    claim(1)
    assert requests() == {3}
    assert requests() == {3}  # remembered, and still right
    claim(3)
    assert requests() == {5}


# ------------------------------------------------------------ history: errors and pages

SINCE = "2026-11-30T00:00:00Z"


@pytest.mark.parametrize(
    "query,paths",
    [
        # History off on node-d and node-c's agent down: partial errors at the root field.
        (
            f'{{ gpuHistory(since: "{SINCE}") {{ edges {{ node {{ pid podName }} }} }} }}',
            [["gpuHistory"], ["gpuHistory"]],
        ),
        (
            f'{{ gpuUsage(since: "{SINCE}", groupBy: [NODE, GPU]) '
            "{ nodeName gpuUuid gpuSeconds } }",
            [["gpuUsage"], ["gpuUsage"]],
        ),
        # The GPU's history on a live node; the down node's GPU is not found at all.
        (
            f'{{ a: gpu(uuid: "{gpu_uuid("node-a", 0)}") {{ history(since: "{SINCE}") {{ pid }} }} '
            f'c: gpu(uuid: "{gpu_uuid("node-c", 0)}") {{ uuid }} }}',
            [["c"]],
        ),
        # Node.gpuHistory is null where the node cannot answer (node-c), the rest stand.
        (
            f'{{ nodes {{ name gpuHistory(since: "{SINCE}") {{ pid }} }} }}',
            [["nodes", 2, "gpuHistory"], ["nodes", 3, "gpuHistory"]],
        ),
    ],
)
def test_history_partial_errors_run_compiled_with_the_same_paths(
    logs: Logs, query: str, paths: list[list[str]]
) -> None:
    world = small_world(logs)
    expected, got = run(world.both(query, None, EVERYTHING))
    assert got == expected
    assert [e["path"] for e in orjson.loads(got)["errors"]] == paths


@pytest.mark.parametrize(
    "query,variables,message",
    [
        # Not a DateTime: the document is invalid (a literal) or its variables are.
        ('{ gpuUsage(since: "yesterday") { gpuSeconds } }', None, "DateTime"),
        (
            "query($s: DateTime!) { gpuUsage(since: $s) { gpuSeconds } }",
            {"s": "yesterday"},
            "DateTime",
        ),
        (
            '{ gpuUsage(since: "2026-12-01T00:00:00Z", groupBy: [BOGUS]) { gpuSeconds } }',
            None,
            "BOGUS",
        ),
        # A user error in a non-null field: graphql-core nulls the parent (here, data).
        (
            '{ gpuUsage(since: "2026-12-02T00:00:00Z", until: "2026-12-01T00:00:00Z") '
            "{ gpuSeconds } }",
            None,
            "until must be after since",
        ),
        (
            f'{{ gpuHistory(since: "{SINCE}", after: "nope") {{ edges {{ cursor }} }} }}',
            None,
            "after",
        ),
    ],
)
def test_history_errors_the_plan_cannot_reproduce_are_strawberrys(
    logs: Logs, query: str, variables: dict[str, Any] | None, message: str
) -> None:
    world = small_world(logs)
    expected, got = run(world.both(query, variables, EVERYTHING))
    assert got is None
    assert message in orjson.loads(expected)["errors"][0]["message"]


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_history_pages_run_compiled_and_answer_the_same(logs: Logs, scope: str) -> None:
    # Page through the whole log two records at a time, following endCursor.
    world = small_world(logs)
    query = (
        'query($after: String) { gpuHistory(since: "' + SINCE + '", first: 2, after: $after) '
        "{ edges { cursor node { pid podName start end node { name } pod { name } } } "
        "pageInfo { hasNextPage hasPreviousPage startCursor endCursor } } }"
    )
    after = None
    pids: list[int] = []
    for _ in range(20):
        expected, got = run(world.both(query, {"after": after}, SCOPES[scope]))
        assert got == expected
        connection = orjson.loads(got)["data"]["gpuHistory"]
        pids += [edge["node"]["pid"] for edge in connection["edges"]]
        if not connection["pageInfo"]["hasNextPage"]:
            break
        after = connection["pageInfo"]["endCursor"]
    else:
        raise AssertionError("the pages never ended")
    if scope == "everything":
        # Every record of the live agents with history, once each (node-c down, node-d off).
        assert sorted(pids) == sorted([101, 202, 401, 101, 999, 555, 301, 302, 303])


# ------------------------------------------------------------ allocations and their use


def allocation_world(logs: Logs) -> World:
    """The small world, its two live agents judging each allocation: train-1 ACTIVE on GPU 0,
    train-2 IDLE on it (a replica), idle (a notebook) UNUSED on node-b's GPU, infer-1's
    DRA device UNKNOWN, and a device of a pod the cluster no longer has, IDLE."""
    world = small_world(logs)
    state = AllocationUseState
    given = {
        "node-a": [
            ("ml", "train-1", "c0", "nvidia.com/gpu", gpu_uuid("node-a", 0),
             state(AllocationUse.ACTIVE, weight=1.0)),
            ("ml", "train-2", "c0", "nvidia.com/gpu.shared", gpu_uuid("node-a", 0) + "::1",
             state(AllocationUse.IDLE, idle_since=1_700_000_000.0, idle_seconds=3600.0)),
            ("ml", "gone", "c0", "nvidia.com/gpu", gpu_uuid("node-a", 1),
             state(AllocationUse.IDLE, idle_since=1_699_990_000.0, idle_seconds=7200.5)),
        ],
        "node-b": [
            ("ml", "idle", "c0", "nvidia.com/gpu", gpu_uuid("node-b", 0),
             state(AllocationUse.UNUSED, idle_since=1_699_000_000.0, idle_seconds=90000.0)),
            ("serving", "infer-1", "c0", "gpu.nvidia.com", "gpu-0",
             state(AllocationUse.UNKNOWN)),
        ],
    }  # fmt: skip
    for node, devices in given.items():
        containers = []
        uses = {}
        for namespace, pod, container, resource, device_id, use in devices:
            gpu = device_id.partition("::")[0] if device_id.startswith("GPU-") else None
            mechanism = (
                AllocationMechanism.DRA if resource == "gpu.nvidia.com" else
                AllocationMechanism.DEVICE_PLUGIN
            )  # fmt: skip
            device = DeviceAllocation(
                mechanism, resource, device_id, gpu_uuid=gpu or gpu_uuid(node, 0),
                shared="::" in device_id, driver="gpu.nvidia.com" if gpu is None else None,
            )  # fmt: skip
            containers.append(ContainerAllocations(namespace, pod, container, (device,)))
            uses[(namespace, pod, container, resource, device_id)] = use
        received = run(world.agents.fetch(node)).snapshot
        allocations = NodeAllocations(available=True, containers=tuple(containers), uses=uses)
        world.agents.put(dataclasses.replace(received, allocations=allocations))
    return world


ALLOCATION_FIELDS = (
    "containerName mechanism resource deviceId shared migDeviceUuid gpuUuid nodeName "
    "use idleSince idleSeconds pod { namespace name }"
)
ALLOCATION_DOCUMENTS = [
    f"{{ idleGpuAllocations {{ {ALLOCATION_FIELDS} }} }}",
    f"{{ a: idleGpuAllocations(minIdleSeconds: 7200) {{ {ALLOCATION_FIELDS} }}"
    f' b: idleGpuAllocations(namespace: "ml") {{ deviceId idleSeconds }}'
    f" c: idleGpuAllocations(minIdleSeconds: -1) {{ deviceId }} }}",
    f"{{ nodes {{ name gpus {{ uuid allocations {{ {ALLOCATION_FIELDS} }} }} }} }}",
    f"{{ pods {{ name gpuAllocations {{ {ALLOCATION_FIELDS} }} }} }}",
    '{ gpuUsage(since: "2026-12-01T00:00:00Z", groupBy: [NAMESPACE]) {'
    " namespace gpuSeconds allocatedGpuSeconds idleAllocatedGpuSeconds } }",
]


@pytest.mark.parametrize("scope", sorted(SCOPES))
@pytest.mark.parametrize("query", ALLOCATION_DOCUMENTS)
def test_allocation_use_and_idle_allocations_run_compiled_and_answer_the_same(
    logs: Logs, query: str, scope: str
) -> None:
    world = allocation_world(logs)
    expected, got = run(world.both(query, None, SCOPES[scope]))
    body = orjson.loads(expected)
    if "minIdleSeconds: -1" in query:
        # An error in a non-null field nulls data: strawberry's answer, the plan declines.
        assert got is None and body["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
        return
    assert got is not None, f"the plan declined {query}"
    assert got == expected, f"{query}\nstrawberry: {expected!r}\ncompiled: {got!r}"
    if scope == "everything" and query == ALLOCATION_DOCUMENTS[0]:
        listed = [
            (a["pod"], a["use"], a["idleSeconds"]) for a in body["data"]["idleGpuAllocations"]
        ]
        # Longest idle first; the pod no longer cached is listed, its pod null.
        assert listed == [
            ({"namespace": "ml", "name": "idle"}, "UNUSED", 90000.0),
            (None, "IDLE", 7200.5),
            ({"namespace": "ml", "name": "train-2"}, "IDLE", 3600.0),
        ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    document=documents(_SCHEMA, roots=["idleGpuAllocations", "pods", "gpus"]),
    scope=st.sampled_from(sorted(SCOPES)),
)
def test_generated_allocation_documents_answer_the_same(
    logs: Logs, document: tuple[str, dict[str, Any]], scope: str
) -> None:
    query, variables = document
    assert_same(allocation_world(logs), query, variables, SCOPES[scope])

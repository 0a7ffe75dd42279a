"""GPU health events through GraphQL: the real server under uvicorn, the stub API server and
its token reviews, and a real agent process on the fake libnvidia-ml.so.1 through the real
nvidia-ml-py, with a kernel log in /dev/kmsg's format, real gRPC and a real SQLite log."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from api.demo.cluster import StubApiServer, write_kubeconfig
from api.demo.cluster.manifests import make_node, make_pod
from api.settings import Settings
from tests.end_to_end.test_auth import bearer
from tests.end_to_end.test_gpu_events import (
    NODE,
    NOTEBOOK,
    OTHER,
    TRAINER,
    Pod,
    World,
    _xid_line,
)
from tests.end_to_end.test_subscriptions import PROTOCOL, TIMEOUT, TransportWsClient, transport_ws
from tests.support.libnvml import FakeGpu, FakeMig, FakeNode, FakeProcess
from tests.support.libnvml.events import DOUBLE_BIT_ECC, SINGLE_BIT_ECC, XID, kernel_pci
from tests.support.polling import eventually_async
from tests.support.server import GIB, Served, serving

SINCE = "2000-01-01T00:00:00Z"
PROCESS = "pid processName podNamespace podName podUid allocation pod { name }"
EVENT = (
    f"time kind xid description migDeviceUuid gpu {{ uuid }} node {{ name }} "
    f"culprit {{ {PROCESS} }} processes {{ {PROCESS} }} hiddenProcessCount"
)
EVERY_EVENT_PATH = f"""
{{
  nodes {{ name gpuEventStatus gpuEvents(since: "{SINCE}") {{ kind xid }}
    gpus {{ uuid events(since: "{SINCE}") {{ kind xid hiddenProcessCount }} }} }}
  pods {{ namespace name gpuEvents(since: "{SINCE}") {{ kind xid }} }}
  gpuEvents(since: "{SINCE}") {{ edges {{ cursor node {{ {EVENT} }} }}
    pageInfo {{ hasNextPage endCursor }} }}
}}
"""


class Cluster:
    """The stub API server with the World's node at the agent's address and its pods."""

    def __init__(self, world: World, workdir: Path, pods: list[Pod]) -> None:
        self.world = world
        self.stub = StubApiServer(bookmark_interval=0.5)
        self.kubeconfig = workdir / "kubeconfig"
        self.pods = pods

    def start(self) -> None:
        host, port = self.world.address.rsplit(":", 1)
        self.port = int(port)
        self.stub.add_node(make_node(NODE, host, gpus=2))
        for pod in self.pods:
            self.stub.add_pod(make_pod(pod.name, pod.namespace, NODE, gpu_limit=1))
        self.stub.start()
        write_kubeconfig(str(self.kubeconfig), self.stub.url)

    def settings(self, **overrides: Any) -> Settings:
        return Settings(
            listen_host="127.0.0.1",
            listen_port=0,
            kubeconfig=self.kubeconfig,
            agent_port=self.port,
            log_level="warning",
            **overrides,
        )

    def token(self, user: str) -> str:
        return self.stub.reviews.token_of(user)


@pytest.fixture
def shared(tmp_path: Path) -> Iterator[tuple[World, Cluster]]:
    """One node: GPU-shared-0 shared by ml/trainer and research/notebook, GPU-other-1 with
    ml/other-gpu; the agent started and ready, the stub API server with the three pods."""
    gpus = [
        FakeGpu(
            "GPU-shared-0",
            processes=[FakeProcess(TRAINER.pid, 3 * GIB), FakeProcess(NOTEBOOK.pid, 2 * GIB)],
        ),
        FakeGpu("GPU-other-1", processes=[FakeProcess(OTHER.pid, GIB)]),
    ]
    world = World(tmp_path, FakeNode(gpus), [TRAINER, NOTEBOOK, OTHER])
    world.start()
    world.until_ready()
    cluster = Cluster(world, tmp_path, [TRAINER, NOTEBOOK, OTHER])
    cluster.start()
    try:
        yield world, cluster
    finally:
        cluster.stub.stop()
        world.close()


def raise_xid_13(world: World) -> None:
    """An NVML XID 13 on GPU-shared-0 and the driver's kernel message blaming the trainer."""
    world.events.emit(0, XID, 13)
    world.kernel(
        2,
        _xid_line(kernel_pci(0), 13, TRAINER.pid, "python3", "Graphics SM Warp Exception"),
    )


async def ask(server: Served, query: str, token: str | None = None) -> dict[str, Any]:
    headers = bearer(token) if token else {}
    response = await server.client.post("/graphql", json={"query": query}, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def events_when(
    server: Served, done: Any, token: str | None = None, query: str = EVERY_EVENT_PATH
) -> dict[str, Any]:
    """The answer to ``query`` once ``done(its gpuEvents edges)`` holds."""

    async def landed() -> dict[str, Any] | None:
        body = await ask(server, query, token)
        edges = body.get("data", {}).get("gpuEvents", {}).get("edges", [])
        return body if done([e["node"] for e in edges]) else None

    body: dict[str, Any] = await eventually_async(landed, timeout=30, what="the events")
    return body


def _pods(processes: list[dict[str, Any]]) -> list[tuple[int, str | None, str | None]]:
    return sorted((p["pid"], p["podNamespace"], p["podName"]) for p in processes)


def _xid13(events: list[dict[str, Any]]) -> bool:
    return any(e["xid"] == 13 and e["culprit"] for e in events)


async def test_an_xid_on_a_shared_gpu_names_both_pods_and_the_culprit(
    shared: tuple[World, Cluster],
) -> None:
    world, cluster = shared
    async with serving(cluster.settings()) as server:
        raise_xid_13(world)
        body = await events_when(server, _xid13)
        # Every event path, DateTime and enum arguments included, ran as a compiled plan.
        counts = server.services.app.state.compiled.counts
        assert counts["fallback"] == 0, counts
    assert "errors" not in body, body
    data = body["data"]
    (event,) = [e["node"] for e in data["gpuEvents"]["edges"]]
    assert (event["kind"], event["xid"], event["gpu"], event["node"]) == (
        "XID",
        13,
        {"uuid": "GPU-shared-0"},
        {"name": NODE},
    )
    assert event["description"] and event["migDeviceUuid"] is None
    assert _pods(event["processes"]) == [
        (TRAINER.pid, "ml", "trainer"),
        (NOTEBOOK.pid, "research", "notebook"),
    ]
    assert {p["allocation"] for p in event["processes"]} == {"ALLOCATED"}
    assert event["culprit"]["pid"] == TRAINER.pid
    assert event["culprit"]["pod"] == {"name": "trainer"}
    assert event["hiddenProcessCount"] == 0
    (node,) = data["nodes"]
    assert node["gpuEventStatus"] == "ok"
    assert node["gpuEvents"] == [{"kind": "XID", "xid": 13}]
    by_gpu = {g["uuid"]: g["events"] for g in node["gpus"]}
    assert by_gpu == {
        "GPU-shared-0": [{"kind": "XID", "xid": 13, "hiddenProcessCount": 0}],
        "GPU-other-1": [],
    }
    by_pod = {p["name"]: p["gpuEvents"] for p in data["pods"]}
    assert by_pod == {
        "trainer": [{"kind": "XID", "xid": 13}],
        "notebook": [{"kind": "XID", "xid": 13}],
        "other-gpu": [],
    }


async def test_a_tenant_sees_only_its_own_pods_events_and_processes(
    shared: tuple[World, Cluster],
) -> None:
    world, cluster = shared
    async with serving(cluster.settings(auth_mode="kubernetes")) as server:
        raise_xid_13(world)
        world.events.emit(1, DOUBLE_BIT_ECC, 0)
        admin = cluster.token("admin")
        await events_when(server, lambda events: len(events) == 2 and _xid13(events), admin)
        body = await ask(server, EVERY_EVENT_PATH, cluster.token("research-user"))
        ml_only = await ask(
            server,
            f'{{ gpuEvents(since: "{SINCE}", namespace: "ml") {{ edges {{ node {{ xid }} }} }} }}',
            cluster.token("research-user"),
        )
    assert "errors" not in body, body
    data = body["data"]
    # Only the XID on the GPU its notebook shared; the ECC error on ml's GPU is not shown.
    (event,) = [e["node"] for e in data["gpuEvents"]["edges"]]
    assert event["xid"] == 13
    assert _pods(event["processes"]) == [(NOTEBOOK.pid, "research", "notebook")]
    assert event["hiddenProcessCount"] == 1
    # The culprit is the other tenant's process: withheld, not named.
    assert event["culprit"] is None
    assert [p["name"] for p in data["pods"]] == ["notebook"]
    assert data["pods"][0]["gpuEvents"] == [{"kind": "XID", "xid": 13}]
    gpus = [g for n in data["nodes"] for g in n["gpus"]]
    assert [(g["uuid"], g["events"]) for g in gpus] == [
        ("GPU-shared-0", [{"kind": "XID", "xid": 13, "hiddenProcessCount": 1}])
    ]
    assert ml_only == {"data": {"gpuEvents": {"edges": []}}}


async def test_the_record_survives_pod_deletion_and_a_server_restart(
    shared: tuple[World, Cluster],
) -> None:
    world, cluster = shared
    async with serving(cluster.settings()) as server:
        raise_xid_13(world)
        await events_when(server, _xid13)
    cluster.stub.delete_pod(TRAINER.namespace, TRAINER.name)
    async with serving(cluster.settings()) as server:

        async def trainer_gone() -> dict[str, Any] | None:
            body = await ask(server, EVERY_EVENT_PATH)
            names = {p["name"] for p in body["data"]["pods"]}
            return body if "trainer" not in names else None

        body = await eventually_async(trainer_gone, timeout=30, what="the pod deleted")
    (event,) = [e["node"] for e in body["data"]["gpuEvents"]["edges"]]
    assert _pods(event["processes"]) == [
        (TRAINER.pid, "ml", "trainer"),
        (NOTEBOOK.pid, "research", "notebook"),
    ]
    # The pod is gone: its name stays, its live link is null.
    culprit = event["culprit"]
    assert (culprit["podName"], culprit["pod"]) == ("trainer", None)


async def test_bad_cursors_are_bad_user_input_and_bad_ranges_a_clear_error(
    shared: tuple[World, Cluster],
) -> None:
    _, cluster = shared
    connection = f'gpuEvents(since: "{SINCE}", %s) {{ edges {{ cursor }} }}'
    async with serving(cluster.settings()) as server:
        cursors = [
            await ask(server, "{ %s }" % (connection % f'after: "{after}"'))
            for after in ("not-a-cursor", "MTpx", "x" * 600)
        ]
        others = {
            arguments: await ask(server, "{ %s }" % (connection % arguments))
            for arguments in ("first: 0", "first: 1001", 'until: "1999-01-01T00:00:00Z"')
        }
    for body in cursors:
        (error,) = body["errors"]
        assert error["message"] == "after is not a cursor this server gave out", body
        assert error["extensions"]["code"] == "BAD_USER_INPUT", body
    assert {arguments: body["errors"][0]["message"] for arguments, body in others.items()} == {
        "first: 0": "first must be between 1 and 1000",
        "first: 1001": "first must be between 1 and 1000",
        'until: "1999-01-01T00:00:00Z"': "until must be after since",
    }


async def test_the_connection_pages_events_one_at_a_time(shared: tuple[World, Cluster]) -> None:
    world, cluster = shared
    async with serving(cluster.settings()) as server:
        raise_xid_13(world)
        world.events.emit(1, DOUBLE_BIT_ECC, 0)
        await events_when(server, lambda events: len(events) == 2)
        seen: list[str] = []
        after = None
        while True:
            argument = "" if after is None else f', after: "{after}"'
            body = await ask(
                server,
                f'{{ gpuEvents(since: "{SINCE}", first: 1{argument}) {{ edges {{ node {{ kind }} }}'
                " pageInfo { hasNextPage endCursor } } }",
            )
            page = body["data"]["gpuEvents"]
            seen += [e["node"]["kind"] for e in page["edges"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
        kinds = await ask(
            server,
            f'{{ gpuEvents(since: "{SINCE}", kind: ECC_DOUBLE_BIT) '
            "{ edges { node { kind } } } }",
        )
    assert sorted(seen) == ["ECC_DOUBLE_BIT", "XID"]
    assert kinds["data"]["gpuEvents"]["edges"] == [{"node": {"kind": "ECC_DOUBLE_BIT"}}]


@pytest.fixture
def mig(tmp_path: Path) -> Iterator[tuple[World, Cluster]]:
    """A GPU in MIG mode: ml/slice-a on MIG-aaaa, research/slice-b on MIG-bbbb."""
    first = Pod("ml", "slice-a", 5001, "MIG-aaaa")
    second = Pod("research", "slice-b", 5002, "MIG-bbbb")
    gpu = FakeGpu(
        "GPU-mig-0",
        mig_mode=1,
        mig=[
            FakeMig("MIG-aaaa", gi=1, ci=0, processes=[FakeProcess(first.pid, GIB)]),
            FakeMig("MIG-bbbb", gi=2, ci=0, processes=[FakeProcess(second.pid, GIB)]),
        ],
    )
    world = World(tmp_path, FakeNode([gpu]), [first, second], kernel_log=False)
    world.start()
    world.until_ready()
    cluster = Cluster(world, tmp_path, [first, second])
    cluster.start()
    try:
        yield world, cluster
    finally:
        cluster.stub.stop()
        world.close()


async def test_an_xid_on_a_mig_device_names_only_its_pods(mig: tuple[World, Cluster]) -> None:
    world, cluster = mig
    async with serving(cluster.settings(auth_mode="kubernetes")) as server:
        world.events.emit(0, XID, 31, gi=2, ci=0)
        admin = cluster.token("admin")
        body = await events_when(server, bool, admin)
        research = await ask(server, EVERY_EVENT_PATH, cluster.token("research-user"))
    (event,) = [e["node"] for e in body["data"]["gpuEvents"]["edges"]]
    assert (event["xid"], event["gpu"]["uuid"], event["migDeviceUuid"]) == (
        31,
        "GPU-mig-0",
        "MIG-bbbb",
    )
    assert _pods(event["processes"]) == [(5002, "research", "slice-b")]
    assert event["hiddenProcessCount"] == 0
    (shown,) = [e["node"] for e in research["data"]["gpuEvents"]["edges"]]
    assert _pods(shown["processes"]) == [(5002, "research", "slice-b")]


async def test_the_subscription_yields_each_new_event(shared: tuple[World, Cluster]) -> None:
    world, cluster = shared
    query = f'subscription {{ gpuEventStream(nodeName: "{NODE}") {{ {EVENT} }} }}'
    async with serving(cluster.settings()) as server:
        pool = server.services.pool
        url = server.url.replace("http://", "ws://") + "/graphql"
        async with transport_ws(url) as client:
            op_id = await client.subscribe(query)
            # The stream has read where the log stands once it waits on the agent.
            await eventually_async(
                lambda: pool.followers(NODE) > 0, timeout=30, what="the stream following"
            )
            raise_xid_13(world)
            payload = await client.next(op_id)
            await client.complete(op_id)
    assert "errors" not in payload, payload
    event = payload["data"]["gpuEventStream"]
    assert (event["kind"], event["xid"]) == ("XID", 13)
    assert _pods(event["processes"]) == [
        (TRAINER.pid, "ml", "trainer"),
        (NOTEBOOK.pid, "research", "notebook"),
    ]


async def test_a_tenants_stream_yields_only_events_its_pods_were_hit_by(
    shared: tuple[World, Cluster],
) -> None:
    world, cluster = shared
    query = f"subscription {{ gpuEventStream {{ {EVENT} }} }}"
    async with serving(cluster.settings(auth_mode="kubernetes")) as server:
        pool = server.services.pool
        url = server.url.replace("http://", "ws://") + "/graphql"
        headers = bearer(cluster.token("research-user"))
        protocols = [Subprotocol(PROTOCOL)]
        async with connect(
            url, subprotocols=protocols, additional_headers=headers, open_timeout=TIMEOUT
        ) as socket:
            client = TransportWsClient(socket)
            await client.init()
            op_id = await client.subscribe(query)
            await eventually_async(
                lambda: pool.followers(NODE) > 0, timeout=30, what="the stream following"
            )
            # A double-bit error on the GPU only ml's pod was on, logged before the XID
            # on the GPU research's notebook shares: the stream skips it.
            world.events.emit(1, DOUBLE_BIT_ECC, 0)
            await asyncio.to_thread(
                world.follow_until,
                0,
                lambda seen: any(e.gpu_uuid == "GPU-other-1" for e in seen),
                "the error on ml's GPU",
            )
            raise_xid_13(world)
            payload = await client.next(op_id)
            await client.complete(op_id)
    assert "errors" not in payload, payload
    event = payload["data"]["gpuEventStream"]
    assert (event["kind"], event["xid"], event["gpu"]) == ("XID", 13, {"uuid": "GPU-shared-0"})
    # The other tenant's process is withheld and counted; the culprit was it, so none.
    assert _pods(event["processes"]) == [(NOTEBOOK.pid, "research", "notebook")]
    assert (event["hiddenProcessCount"], event["culprit"]) == (1, None)


async def test_the_servers_metrics_count_each_new_event_per_gpu_and_per_pod(
    shared: tuple[World, Cluster],
) -> None:
    world, cluster = shared
    # Logged before the server started: in the log, not new to the server's counters.
    world.events.emit(0, SINGLE_BIT_ECC, 0)
    await asyncio.to_thread(world.follow_until, 0, bool, "the error before the server")
    async with serving(cluster.settings()) as server:

        async def scrape() -> str:
            response = await server.client.get("/metrics")
            assert response.status_code == 200, response.text
            return response.text

        # Before any scrape: counted when the first scrape meets the node.
        raise_xid_13(world)
        await asyncio.to_thread(
            world.follow_until, 0, lambda seen: any(e.xid == 13 for e in seen), "the XID"
        )
        series = (
            'gpugraph_gpu_events_total{gpu_uuid="GPU-shared-0",kind="XID",node="gpu-node",'
            'xid="13"} 1.0'
        )
        first = await scrape()
        assert series in first
        world.events.emit(1, DOUBLE_BIT_ECC, 0)
        dbe = (
            'gpugraph_gpu_events_total{gpu_uuid="GPU-other-1",kind="ECC_DOUBLE_BIT",'
            'node="gpu-node",xid=""} 1.0'
        )

        async def counted() -> str | None:
            text = await scrape()
            return text if dbe in text else None

        text = await eventually_async(counted, timeout=30, what="the ECC error counted")
    # Each counted once, however often it is scraped.
    assert series in text
    assert "ECC_SINGLE_BIT" not in text
    for namespace, pod in (("ml", "trainer"), ("research", "notebook")):
        assert (
            f'gpugraph_pod_gpu_events_total{{kind="XID",namespace="{namespace}",pod="{pod}",'
            'xid="13"} 1.0' in text
        )
    pod_series = [line for line in text.splitlines() if line.startswith("gpugraph_pod_gpu_events")]
    assert sorted(pod_series) == sorted(
        [
            'gpugraph_pod_gpu_events_total{kind="ECC_DOUBLE_BIT",namespace="ml",pod="other-gpu",'
            'xid=""} 1.0',
            'gpugraph_pod_gpu_events_total{kind="XID",namespace="ml",pod="trainer",xid="13"} 1.0',
            'gpugraph_pod_gpu_events_total{kind="XID",namespace="research",pod="notebook",'
            'xid="13"} 1.0',
        ]
    )

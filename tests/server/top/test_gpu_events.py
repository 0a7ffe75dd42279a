"""``gpugraph top``'s GPU health events: the EVENTS flag and ``top --events``.

Against the demo cluster (the real server, real agents and their logs, the stub
API server with ``--auth``), whose first node's driver blames one inference
replica's process for XID 13 on the GPU both replicas share, and whose third
node loses its last GPU; the fourth node's agent is down. A tenant token sees
what its pods were hit by and nothing else. Then, with a fake transport at the
edge, what the server's answer cannot easily be made to say: a server that
reads no events, paging to the end and the bound on it, the watch's refresh.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any

import pytest

from api.cli import main
from api.demo.cluster.apiserver.reviews import READ, Rule, StubUser
from api.top import gpu_events, model
from api.top.gpu_events import EventFlags, fetch_hits
from api.top.marks import EVENTS
from tests.support.demo import LiveDemo, live_demo
from tests.support.polling import eventually

EVENTS_QUERY = """{ gpuEvents(since: "2000-01-01T00:00:00Z") {
  edges { node { kind gpu { uuid } node { name } processes { pod { uid } podName } } } } }"""
DOWN_NODE = "gpu-node-3"
HIT_PODS = {"inference/chat-api-0", "inference/chat-api-1", "ml-training/llm-pretrain-worker-2"}
INFERENCE_USER = StubUser(
    "inference-user",
    "uid-inference",
    ("inference", "system:authenticated"),
    (Rule(READ, frozenset({"pods"}), frozenset({"inference"})),),
)


class Cluster:
    """The demo with --auth, its tokens, and the two events it recorded."""

    def __init__(self, demo: LiveDemo) -> None:
        self.demo = demo
        self.admin = demo.token_of("admin")
        self.research = demo.token_of("research-user")
        assert demo.demo.api is not None
        self.inference = demo.demo.api.reviews.add_user(INFERENCE_USER)
        self.events: dict[str, dict[str, Any]] = eventually(
            self._both, timeout=60, interval=0.1, what="the demo's XID and lost GPU"
        )

    def _both(self) -> dict[str, dict[str, Any]] | None:
        edges = self.demo.query(EVENTS_QUERY, self.admin)["data"]["gpuEvents"]["edges"]
        found = {e["node"]["kind"]: e["node"] for e in edges}
        return found if set(found) == {"XID", "GPU_LOST"} else None


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with live_demo(auth=True, nodes=4, gpus_per_node=4, interval=0.5) as running:
        yield Cluster(running)


def top(
    capsys: pytest.CaptureFixture[str], cluster: Cluster, *args: str, token: str | None = None
) -> str:
    code = main(["top", "--server", cluster.demo.url, "--token", token or cluster.admin, *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out + err


def flagged(entries: list[dict[str, Any]], key: Any) -> set[Any]:
    return {key(e) for e in entries if e["flags"] and EVENTS.word in e["flags"]}


def test_the_flag_is_on_the_gpus_pods_and_nodes_that_had_events_and_on_no_others(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    xid, lost = cluster.events["XID"], cluster.events["GPU_LOST"]
    gpus = json.loads(top(capsys, cluster, "-o", "json"))
    assert flagged(gpus["gpus"], lambda g: g["uuid"]) == {xid["gpu"]["uuid"], lost["gpu"]["uuid"]}
    # A process row has no flag of its own for it: the pod that was hit has.
    assert all(EVENTS.word not in p["flags"] for g in gpus["gpus"] for p in g["processes"])
    # The other views: the pods that had a process on those GPUs then, and their nodes.
    pods = json.loads(top(capsys, cluster, "pods", "-o", "json"))
    assert flagged(pods["pods"], lambda p: f"{p['namespace']}/{p['name']}") == HIT_PODS
    nodes = json.loads(top(capsys, cluster, "nodes", "-o", "json"))
    assert flagged(nodes["nodes"], lambda n: n["name"]) == {"gpu-node-0", "gpu-node-2"}
    # The down node's flags stay unknown, and it blanks nothing else.
    (down,) = [n for n in nodes["nodes"] if n["name"] == DOWN_NODE]
    assert down["flags"] is None
    assert gpus["errors"] == pods["errors"] == nodes["errors"] == []
    # The tables show the same word.
    table = top(capsys, cluster, "pods")
    rows = {" ".join(line.split()[:2]): line.split() for line in table.splitlines()[1:]}
    assert "EVENTS" in rows["inference chat-api-1"] and "EVENTS" not in rows["inference embed-0"]


def test_events_lists_the_demos_events_newest_first_with_culprit_and_pods(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    out = top(capsys, cluster, "--events")
    lines = out.splitlines()
    assert lines[0].split() == [
        "TIME", "NODE", "GPU", "KIND", "XID", "CULPRIT", "PODS", "DESCRIPTION"
    ]  # fmt: skip
    lost, xid = lines[1], lines[2]
    # Newest first: the demo loses the GPU after its XID is recorded.
    assert " gpu-node-2 " in lost and " GPU_LOST " in lost
    assert "ml-training/llm-pretrain-worker-2" in lost
    assert " gpu-node-0 " in xid and " XID " in xid and " 13 " in xid
    assert "tritonserver inference/chat-api-1" in xid
    assert "inference/chat-api-0, inference/chat-api-1" in xid
    assert "Graphics engine exception" in xid
    # The GPU by its index on its node and its UUID's first digits.
    index = cluster.events["XID"]["gpu"]["uuid"][:12]
    assert f" 0 {index} " in xid
    # The node whose agent is down is said, and blanks nothing.
    (down,) = [line for line in lines if "agent down" in line]
    assert down.startswith(f"{DOWN_NODE}: agent down: ")
    assert len(lines) == 4
    # --since narrows the window; the default is the flag's 24 hours.
    assert top(capsys, cluster, "--events", "--since", "24h").splitlines()[1:3] == lines[1:3]


def test_events_json_has_the_documented_shape(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    document = json.loads(top(capsys, cluster, "--events", "-o", "json"))
    assert (
        yaml.safe_load(top(capsys, cluster, "--events", "-o", "yaml"))["events"]
        == (document["events"])
    )
    assert document["apiVersion"] == "gpugraph.top/v1" and document["kind"] == "GpuEventList"
    assert set(document) == {
        "apiVersion", "kind", "since", "events", "truncated", "downNodes", "errors"
    }  # fmt: skip
    assert document["truncated"] is False and document["errors"] == []
    assert [d["node"] for d in document["downNodes"]] == [DOWN_NODE]
    lost, xid = document["events"]
    assert set(xid) == {
        "time", "node", "gpuUuid", "gpuIndex", "migDeviceUuid", "kind", "xid", "description",
        "culprit", "processes", "pods", "hiddenProcessCount",
    }  # fmt: skip
    assert (xid["kind"], xid["xid"], xid["node"], xid["gpuIndex"]) == ("XID", 13, "gpu-node-0", 0)
    assert xid["culprit"]["name"] == "tritonserver"
    assert xid["culprit"]["pod"] == {"namespace": "inference", "name": "chat-api-1"}
    assert xid["pods"] == ["inference/chat-api-0", "inference/chat-api-1"]
    verdicts = {p["pod"]["name"]: p["allocation"] for p in xid["processes"]}
    assert verdicts == {"chat-api-0": "ALLOCATED", "chat-api-1": "NOT_ALLOCATED"}
    assert all(set(p) == {"pid", "name", "pod", "allocation"} for p in xid["processes"])
    assert (lost["kind"], lost["xid"], lost["culprit"]) == ("GPU_LOST", None, None)
    assert lost["gpuUuid"] == cluster.events["GPU_LOST"]["gpu"]["uuid"] and lost["gpuIndex"] == 3
    assert lost["time"] > xid["time"]


def test_events_filters_by_namespace_and_node(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    def kinds(*args: str) -> list[str]:
        document = json.loads(top(capsys, cluster, "--events", "-o", "json", *args))
        return [e["kind"] for e in document["events"]]

    assert kinds("-n", "inference") == ["XID"]
    assert kinds("--node", "gpu-node-2") == ["GPU_LOST"]
    assert kinds("-n", "research") == []


def test_a_tenant_sees_only_the_events_its_own_pods_were_hit_by(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    # The inference team: its XID, with both its replicas, and not the training GPU lost.
    document = json.loads(top(capsys, cluster, "--events", "-o", "json", token=cluster.inference))
    ((event),) = document["events"]
    assert (event["kind"], event["pods"]) == (
        "XID",
        ["inference/chat-api-0", "inference/chat-api-1"],
    )
    assert event["culprit"]["pod"]["name"] == "chat-api-1"
    pods = json.loads(top(capsys, cluster, "pods", "-o", "json", token=cluster.inference))
    assert flagged(pods["pods"], lambda p: p["name"]) == {"chat-api-0", "chat-api-1"}
    # research had no pod on either GPU: no event, no flag. Its events are read from every
    # node's log, so the down node it cannot see is said to be missing, never named.
    unseen = "GPU events unavailable from 1 node(s) this caller cannot see"
    out = top(capsys, cluster, "--events", token=cluster.research)
    assert out.startswith("no GPU events since ") and out.splitlines()[1:] == [unseen]
    gpus = json.loads(top(capsys, cluster, "-o", "json", token=cluster.research))
    assert gpus["gpus"] and flagged(gpus["gpus"], lambda g: g["uuid"]) == set()
    assert gpus["errors"] == [f"GPU events not known: {unseen}"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--events", "--since", "yesterday"], "--since: expected a duration such as 30d"),
        (["--events", "--since", "0h"], "--since: a duration must be positive, got '0h'"),
        (["--events", "--since", "99999999999d"], "--since: 99999999999d reaches back before"),
        (["--since", "99999999999d"], "--since: 99999999999d reaches back before"),
        (["pods", "--events"], "--events lists GPU events: it has no pods view"),
        (["--events", "--watch"], "--events lists past events: it has no --watch or -l"),
        (["--events", "--sort-by", "sm"], "--events lists events newest first"),
        # Even the order that is the live views' default: asked for, it is refused.
        (["--events", "--sort-by", "name"], "--events lists events newest first"),
        (["--events", "--node", "nope"], "no nodes match --node nope"),
    ],
)
def test_bad_input_to_events_is_one_clear_line(
    cluster: Cluster, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    code = main(["top", "--server", cluster.demo.url, "--token", cluster.admin, *args])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.startswith(f"gpugraph top: error: {said}") and err.count("\n") == 1, err


# -- at the edge: a fake transport -----------------------------------------------------


def gpu(uuid: str, node: str, *pods: str) -> dict[str, Any]:
    processes = [
        {
            "pid": 100 + n,
            "name": "python",
            "usedMemoryBytes": 1,
            "smUtilization": 1,
            "allocation": "ALLOCATED",
            "pod": {"uid": f"uid-{pod}", "namespace": "ml", "name": pod, "gpuRequest": 1},
            "container": {"name": "c"},
        }
        for n, pod in enumerate(pods)
    ]
    return {
        "uuid": uuid, "index": 0, "name": "H200", "utilizationGpu": 1, "memoryUsedBytes": 1,
        "memoryTotalBytes": 2, "temperatureC": 30, "error": None, "migEnabled": False,
        "node": {"name": node}, "processes": processes, "allocations": [],
    }  # fmt: skip


def event(uuid: str, node: str, *pods: str) -> dict[str, Any]:
    return {
        "node": {
            "time": "2026-12-05T10:00:00+00:00", "kind": "XID", "xid": 79,
            "description": "fell off the bus", "migDeviceUuid": None, "hiddenProcessCount": 1,
            "gpu": {"uuid": uuid}, "node": {"name": node}, "culprit": None,
            "processes": [
                {"pid": 1, "processName": "p", "podNamespace": "ml", "podName": pod,
                 "podUid": f"uid-{pod}", "allocation": "ALLOCATED"}
                for pod in pods
            ],
        }
    }  # fmt: skip


class FakeTransport:
    """Answers top's documents as a server would, from what the test sets."""

    def __init__(
        self,
        events: Any,
        pages: int = 1,
        gpus: list[dict[str, Any]] | None = None,
        off: tuple[str, ...] = ("node-c",),
    ):
        self.events = events
        self.pages = pages
        self.off = off
        self.gpus = gpus if gpus is not None else [gpu("GPU-a", "node-a", "hit"),
                                                   gpu("GPU-b", "node-b", "spared")]  # fmt: skip
        self.asked: list[Mapping[str, Any]] = []
        self.ticks: list[dict[str, Any]] = []

    def execute(self, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
        if "gpuEvents" not in query:
            nodes = [{"name": n, "agent": {"reachable": True}} for n in ("node-a", "node-b")]
            return {"data": {"gpus": self.gpus, "nodes": nodes}}
        self.asked.append(variables)
        if not isinstance(self.events, list):
            return dict(self.events)
        number = int(variables["after"] or 0)
        more = number + 1 < self.pages
        page = {"hasNextPage": more, "endCursor": str(number + 1)}
        connection = {"edges": self.events if number == 0 else [], "pageInfo": page}
        errors = [
            {"message": f"history is off on node '{node}'", "path": ["gpuEvents"]}
            for node in self.off
        ]
        return {"data": {"gpuEvents": connection}, "errors": errors}

    async def subscribe(
        self, query: str, variables: Mapping[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        for tick in self.ticks:
            yield tick


def run_top(transport: FakeTransport, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    from api.cli import build_parser
    from api.top.command import run

    parsed = build_parser().parse_args(["top", *args])
    code = run(parsed, transport)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out + err


def test_a_server_that_reads_no_events_costs_the_flags_not_the_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    refused = {"data": None, "errors": [{"message": "this server cannot read the agents' GPU "
                                                    "events"}]}  # fmt: skip
    out = run_top(FakeTransport(refused), capsys, "pods")
    rows = [line.split() for line in out.splitlines()[1:3]]
    assert [row[:2] for row in rows] == [["ml", "hit"], ["ml", "spared"]]
    assert all("EVENTS" not in row for row in rows)
    assert out.rstrip().endswith(
        "GPU events not known: server error: this server cannot read the agents' GPU events"
    )
    document = json.loads(run_top(FakeTransport(refused), capsys, "-o", "json"))
    assert [g["uuid"] for g in document["gpus"]] == ["GPU-a", "GPU-b"]
    assert document["errors"] == [
        "GPU events not known: server error: this server cannot read the agents' GPU events"
    ]


def test_a_node_whose_log_is_off_is_said_and_the_rest_are_flagged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    transport = FakeTransport([event("GPU-a", "node-a", "hit")])
    document = json.loads(run_top(transport, capsys, "pods", "-o", "json"))
    assert {p["name"]: p["flags"] for p in document["pods"]} == {"hit": ["EVENTS"], "spared": []}
    assert document["errors"] == ["GPU events not known: history is off on node 'node-c'"]
    # One read for the flags, on the flag's window, beside the snapshot's query.
    (asked,) = transport.asked
    assert asked["first"] == gpu_events.PAGE and asked["after"] is None


def test_a_cluster_of_logless_nodes_is_a_few_lines_not_one_per_node(
    capsys: pytest.CaptureFixture[str],
) -> None:
    off = tuple(f"node-{n}" for n in range(1000))
    transport = FakeTransport([event("GPU-a", "node-a", "hit")], off=off)
    lines = run_top(transport, capsys, "nodes").splitlines()
    assert lines[1].split()[-1] == "EVENTS" and lines[2].split()[-1] != "EVENTS"
    assert lines[3:] == [
        *(f"GPU events not known: history is off on node 'node-{n}'" for n in range(5)),
        "... and 995 more (-o json lists every one in errors)",
    ]
    document = json.loads(run_top(transport, capsys, "nodes", "-o", "json"))
    assert len(document["errors"]) == 1000


def test_events_follows_the_cursor_to_the_end_and_says_when_it_stops_short(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    transport = FakeTransport([event("GPU-a", "node-a", "hit")], pages=3)
    document = json.loads(run_top(transport, capsys, "--events", "-o", "json"))
    assert [a["after"] for a in transport.asked] == [None, "1", "2"]
    # Each GPU's index is asked once, with the first page.
    assert [a["withGpus"] for a in transport.asked] == [True, False, False]
    assert document["truncated"] is False and len(document["events"]) == 1
    # The same message on every page is said once.
    assert document["errors"] == ["history is off on node 'node-c'"]
    (row,) = document["events"]
    assert row["pods"] == ["ml/hit"] and row["hiddenProcessCount"] == 1
    monkeypatch.setattr(gpu_events, "MAX_PAGES", 2)
    endless = FakeTransport([event("GPU-a", "node-a", "hit")], pages=1000)
    document = json.loads(run_top(endless, capsys, "--events", "-o", "json"))
    assert len(endless.asked) == 2 and document["truncated"] is True
    table = run_top(endless, capsys, "--events")
    assert "more than 2,000 events: the oldest 2,000 are listed" in table
    assert "ml/hit, +1 hidden" in table


def test_the_page_is_the_servers_largest() -> None:
    from graph_schema.occupancy.fan_out import MAX_FIRST

    assert gpu_events.PAGE == MAX_FIRST


def test_a_watched_view_reads_the_events_again_each_minute_without_waiting() -> None:
    gate = threading.Event()
    answers = iter(
        [model.EventHits(gpus=frozenset({"GPU-a"})), model.EventHits(gpus=frozenset({"GPU-b"}))]
    )
    reads: list[int] = []

    def fetch() -> model.EventHits:
        reads.append(1)
        if len(reads) == 2:
            gate.wait(30)
        return next(answers)

    now = [0.0]
    flags = EventFlags(fetch, clock=lambda: now[0], every=60)
    assert flags.wait().gpus == {"GPU-a"}
    assert flags.latest().gpus == {"GPU-a"} and len(reads) == 1
    now[0] = 60
    # A new read starts; until it is in, the last answer stands, and nothing waits for it.
    assert flags.latest().gpus == {"GPU-a"}
    assert flags.latest().gpus == {"GPU-a"} and len(reads) == 2
    gate.set()
    assert flags.wait().gpus == {"GPU-b"} and flags.latest().gpus == {"GPU-b"}


def test_each_watched_frame_carries_the_latest_events() -> None:
    import asyncio

    from api.top.command import snapshots

    transport = FakeTransport([event("GPU-b", "node-b", "spared")])
    transport.ticks = [{"data": {"gpuUpdates": transport.gpus}}]
    flags = EventFlags(lambda: fetch_hits(transport, None))
    first = model.apply(
        model.Snapshot(gpus=model.gpu_rows(transport.gpus), down=[]), model.Filters()
    )

    async def frames() -> list[model.Snapshot]:
        found = []
        with pytest.raises(Exception, match="completed"):
            async for frame in snapshots(transport, model.Filters(), 1, first, flags):
                found.append(frame)
        return found

    flags.wait()
    _, tick = asyncio.run(frames())
    assert {g.uuid: g.events for g in tick.gpus} == {"GPU-a": False, "GPU-b": True}
    assert tick.events.errors == ("GPU events not known: history is off on node 'node-c'",)

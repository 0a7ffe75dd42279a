"""Hostile input against a running ``gpugraph demo``: every attack answered, nobody else stalled.

For each attack of issue 10 this prints the attack's answer time and status,
a probe client's p50/p99 latency for ``/healthz`` and for a trivial query
while the attack runs, and the server's RSS once it is answered; at the end,
the server's RSS before and after, the number of 500 responses and the number
of tracebacks in the server's log. The probe runs in a process of its own, so
the attacker's work (encoding bodies, opening sockets) does not delay it;
request bodies are encoded before each attack starts.

Then the attacks of issue 21, each against the process it targets: unfinished
huge headers against the demo; a flood of random tokens while the API server
is stopped (SIGSTOP) and a subscription-slot hog against a real ``gpugraph
serve --auth kubernetes`` whose stub API server runs in a process of its own
(the probe there carries the admin's token, so its reviews are cached, and
asks for ``/metrics`` too); unauthenticated 4 MiB messages and a health-watch
flood against a standalone ``gpugraph agent``, with a gRPC probe calling
GetSnapshot with the agent's token, and the agent's peak RSS (VmHWM).

Issue 31's usage flood runs its own ``serve --auth kubernetes`` and a real
agent whose occupancy log holds 200,000 records: research-token ``gpuUsage``
queries with varied ``since`` while the admin reads a node's history, and how
many of the admin's answered within the agent deadline.

Issue 31's name push runs a standalone agent whose occupancy log is bounded at
1 MiB and holds 314 ended records, pushes pods with the longest names (59 KB
messages) with the agent's token, then asks history pages: the largest the
log's files got, its ended records before and after, the agent's peak RSS.

Issue 31's failing queries run 45,000 queries of every pod's processes (30 of
the 40 pods are on the 3 of 4 nodes that have no agent) against a ``serve --auth
kubernetes`` through strawberry, and another through the compiled plan: the
server's RSS at each tenth of the run.

Issue 31's drip runs ``gpugraph top`` against a server that sends a byte of
its answer every 20 s: how long top ran before its deadline ended it, its
peak RSS and its one line.

Run ``python bench/hostile.py`` (the demo's size, 7 nodes and 30 GPUs,
full repetitions) or ``--small`` (fewer repetitions, for CI).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script from anywhere: the demo's launcher lives in the repository's tests package.
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
import httpx  # noqa: E402
import websockets  # noqa: E402
from websockets.typing import Subprotocol  # noqa: E402

from bench import hostile_targets  # noqa: E402
from bench.hostile_targets import rss_mb  # noqa: E402
from tests.support import demo_process, forged_cursors  # noqa: E402

TRIVIAL = '{ node(name: "gpu-node-0") { name } }'
WARM_UP = "{ nodes { name gpus { uuid } } }"


def chain(depth: int) -> str:
    """``{ gpus { node { gpus { node ... } } } }``, ``depth`` fields deep."""
    opened = ["gpus { " if i % 2 == 0 else "node { " for i in range(depth - 1)]
    leaf = "uuid" if (depth - 1) % 2 else "name"
    return "{ " + "".join(opened) + leaf + " }" * len(opened) + " }"


@dataclass
class Demo:
    process: subprocess.Popen[str]
    url: str
    output: list[str] = field(default_factory=list)

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/graphql"


def start_demo(workdir: Path) -> Demo:
    """The demo as a user runs it (``tests.support.demo_process``), once ``/readyz`` says ready."""
    running = demo_process.start_demo(workdir, "--log-level", "warning")
    process = running.process
    demo = Demo(process, running.url, running.output)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            ready = httpx.get(f"{demo.url}/readyz", timeout=2)
            if ready.status_code == 200:
                return demo
        if process.poll() is not None:
            break
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("the demo did not become ready:\n" + "".join(demo.output))


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Outcome:
    name: str
    seconds: float
    status: str
    health: list[float]
    trivial: list[float]
    # The attacked process's RSS before the attack and once it is answered.
    rss_before: float
    rss_mb: float
    # Which process: the demo, serve --auth kubernetes, or the agent.
    target: str = "demo"
    # The agent's peak RSS growth during the attack (VmHWM), in MB.
    peak_growth: float | None = None


def probe_process(url: str, token: str, conn: Connection) -> None:
    """Another client of the server, in a process of its own, so that the attacker's
    own work (encoding bodies, opening sockets) never delays it: between "start"
    and "stop" it alternates ``/healthz`` and the trivial query (with ``token``,
    also ``/metrics``, gzipped), then sends back its latencies and statuses."""
    asyncio.run(_probe(url, conn, token))


async def _probe(url: str, conn: Connection, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=headers) as client:
        while conn.recv() == "start":
            health: list[float] = []
            trivial: list[float] = []
            statuses: list[int] = []
            while not conn.poll():
                started = time.perf_counter()
                r = await client.get("/healthz")
                health.append(time.perf_counter() - started)
                statuses.append(r.status_code)
                started = time.perf_counter()
                r = await client.post("/graphql", json={"query": TRIVIAL})
                trivial.append(time.perf_counter() - started)
                statuses.append(r.status_code)
                if token:
                    started = time.perf_counter()
                    r = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
                    trivial.append(time.perf_counter() - started)
                    statuses.append(r.status_code)
                await asyncio.sleep(0.01)
            conn.recv()  # "stop"
            conn.send((health, trivial, statuses))


class Bench:
    def __init__(self, demo: Demo, client: httpx.AsyncClient, probe: Connection) -> None:
        self.demo = demo
        self.client = client
        self.probe = probe
        self.statuses: list[int] = []

    async def run(self, name: str, attack: Callable[[], Awaitable[str]]) -> Outcome:
        return await run_probed(
            name, attack, self.probe, self.demo.process.pid, "demo", self.statuses
        )

    async def post(self, body: bytes) -> str:
        """POST a body encoded beforehand; the status and the first error's code."""
        r = await self.client.post(
            "/graphql", content=body, headers={"content-type": "application/json"}
        )
        self.statuses.append(r.status_code)
        code = ""
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            code = " " + r.json()["errors"][0]["extensions"]["code"]
        return f"{r.status_code}{code}"

    async def many(self, bodies: list[bytes]) -> str:
        answers = await asyncio.gather(*(self.post(b) for b in bodies))
        return ", ".join(sorted(set(answers)))

    async def ws_messages(self, messages: list[str]) -> str:
        codes = []
        for message in messages:
            async with websockets.connect(
                self.demo.ws_url, subprotocols=[Subprotocol("graphql-transport-ws")]
            ) as ws:
                await ws.send(json.dumps({"type": "connection_init"}))
                await ws.recv()
                await ws.send(message)
                try:
                    await asyncio.wait_for(ws.recv(), 10)
                    codes.append("no close")
                except websockets.ConnectionClosed as closed:
                    codes.append(str(closed.rcvd.code) if closed.rcvd else "1006")
        return "close " + ", ".join(sorted(set(codes)))

    async def abrupt(self, protocol: str, count: int) -> str:
        accepted = 0
        for _ in range(count):
            ws = await websockets.connect(self.demo.ws_url, subprotocols=[Subprotocol(protocol)])
            accepted += ws.subprotocol == protocol
            ws.transport.abort()  # no close frame: an abrupt disconnect
        return f"{count} sent, {accepted} accepted the subprotocol"


async def run_probed(
    name: str,
    attack: Callable[[], Awaitable[str]],
    probe: Connection,
    pid: int,
    target: str,
    statuses: list[int],
) -> Outcome:
    """Run ``attack`` while ``probe`` measures; the process ``pid``'s RSS around it."""
    before, peak = rss_mb(pid), rss_mb(pid, "VmHWM")
    probe.send("start")
    await asyncio.sleep(0.05)
    started = time.perf_counter()
    status = await attack()
    seconds = time.perf_counter() - started
    probe.send("stop")
    first, second, seen = await asyncio.to_thread(probe.recv)
    statuses.extend(seen)
    growth = rss_mb(pid, "VmHWM") - peak if target == "agent" else None
    return Outcome(name, seconds, status, first, second, before, rss_mb(pid), target, growth)


ENTITIES = "query($r: [_Any!]!) { _entities(representations: $r) { ... on Gpu { uuid } } }"


def body(query: str, variables: dict[str, Any] | None = None) -> bytes:
    """A request body, encoded before the attack so that encoding it is not measured."""
    return json.dumps({"query": query, "variables": variables}).encode()


def entities(count: int) -> bytes:
    """An ``_entities`` call with ``count`` GPU representations in its variables."""
    references = [{"__typename": "Gpu", "uuid": f"GPU-{i:08d}"} for i in range(count)]
    return body(ENTITIES, {"r": references})


async def attacks(bench: Bench, small: bool) -> list[Outcome]:
    reps = 2_000 if small else 22_000
    # The most representations the default --max-variable-items admits.
    admitted_reps = 5_000
    wide_fields = "{ " + "pods { node { name } } " * 700 + "}"
    wide = body(wide_fields)
    # Ten different documents: identical ones would share one execution.
    ten_wide = [body(f"query Wide{i} {wide_fields}") for i in range(10)]
    many_references, admitted_references = entities(reps), entities(admitted_reps)
    broken = ["x", {}, {"__typename": "Gpu"}, {"__typename": "No"}]
    broken_references = body(ENTITIES, {"r": broken})
    deep = {depth: body(chain(depth)) for depth in (8, 10, 12)}
    malformed: list[bytes] = [
        b'"{ nodes { name } }"',
        b"null",
        b"12",
        b'{"query": "\xff\xfe"}',
        b"[" * 100_000 + b"]" * 100_000,
    ]
    disconnects = 60 if small else 600
    headers = 10 if small else 30
    plan: list[tuple[str, Callable[[], Awaitable[str]]]] = [
        ("depth-12 GPU/node multiplier", lambda: bench.post(deep[12])),
        ("depth-10 multiplier", lambda: bench.post(deep[10])),
        ("depth-8 multiplier (admitted)", lambda: bench.post(deep[8])),
        ("700 repeated fields", lambda: bench.post(wide)),
        ("10 x 700 repeated fields at once", lambda: bench.many(ten_wide)),
        (f"_entities with {reps:,} representations", lambda: bench.post(many_references)),
        (
            f"_entities with {admitted_reps:,} representations (admitted)",
            lambda: bench.post(admitted_references),
        ),
        ("malformed representations", lambda: bench.post(broken_references)),
        ("malformed bodies (string, null, number, UTF-8, deep)", lambda: bench.many(malformed)),
        (
            "subscription over HTTP",
            lambda: bench.post(body("subscription { gpuUpdates { uuid } }")),
        ),
        (
            "WebSocket garbage ([], null, 12, string payload)",
            lambda: bench.ws_messages(
                ["[]", "null", "12", '{"type": "subscribe", "id": "1", "payload": "x"}']
            ),
        ),
        (
            f"{disconnects} abrupt graphql-ws sockets",
            lambda: bench.abrupt("graphql-ws", disconnects),
        ),
        (
            f"{disconnects} abrupt graphql-transport-ws sockets",
            lambda: bench.abrupt("graphql-transport-ws", disconnects),
        ),
        (
            f"{headers} unfinished 8 MB headers",
            lambda: unfinished_headers(bench.demo.url, headers, 8 * 1024 * 1024),
        ),
        (
            f"{headers} unfinished small headers, then silence",
            lambda: unfinished_headers(bench.demo.url, headers, 0, slow=True),
        ),
        ("forged 999 KiB after cursor (a zlib bomb of old)", cursor_bomb(bench)),
    ]
    return [await bench.run(name, attack) for name, attack in plan]


def cursor_bomb(bench: Bench) -> Callable[[], Awaitable[str]]:
    """Issue 31: a gpuHistory cursor the compressed cursors of old inflated to 740 MiB.

    Target: answered within 100 ms as BAD_USER_INPUT, the server's RSS within +50 MB.
    """
    query = (
        'query($a: String) { gpuHistory(since: "2000-01-01T00:00:00Z", after: $a) '
        "{ edges { cursor } } }"
    )
    forged = body(query, {"a": forged_cursors.zlib_bomb_cursor()})
    return lambda: bench.post(forged)


# -- issue 21: headers, reviews with the API server stopped, subscription slots, the agent


async def unfinished_headers(url: str, count: int, size: int, *, slow: bool = False) -> str:
    """``count`` connections, each sending one header of ``size`` bytes that never ends
    (``slow``: a few bytes, then nothing); the statuses the server answers them with."""
    host, port = url.removeprefix("http://").rsplit(":", 1)

    async def one() -> str:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: ")
            chunk = b"a" * 65536
            for _ in range(0 if slow else size // len(chunk)):
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass  # closed on us mid-header: its answer, if any, is already buffered
        try:
            answer = await asyncio.wait_for(reader.read(), 60)
        except (ConnectionError, TimeoutError):
            answer = b""
        finally:
            writer.close()
        return answer.split(b" ", 2)[1].decode() if answer.startswith(b"HTTP/") else "closed"

    answers = await asyncio.gather(*(one() for _ in range(count)))
    return ", ".join(f"{a} x{answers.count(a)}" for a in sorted(set(answers)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def warm_up(url: str, token: str) -> str:
    """The admin's reviews cached (the probe's requests carry its token), /metrics rendered."""
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=bearer(token)) as client:
        for _ in range(3):
            await client.get("/metrics")
            await client.post("/graphql", json={"query": TRIVIAL})
    return ""


async def random_token_flood(url: str, stub: hostile_targets.StubProcess, count: int) -> str:
    """``count`` requests with unseen tokens while the API server is stopped."""
    limits = httpx.Limits(max_connections=count)
    stub.stall()
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
            answers = await asyncio.gather(
                *(
                    client.post(
                        "/graphql",
                        json={"query": TRIVIAL},
                        headers=bearer(f"random-{i}-{time.time()}"),
                    )
                    for i in range(count)
                ),
                return_exceptions=True,
            )
    finally:
        stub.resume()
    codes = [a.status_code if isinstance(a, httpx.Response) else type(a).__name__ for a in answers]
    return ", ".join(f"{c} x{codes.count(c)}" for c in sorted(set(codes), key=str))


async def recovered(url: str, token: str) -> str:
    """Once the API server runs again, how long until a caller not yet reviewed passes
    (it works through what queued while it was stopped; 503 until then)."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for _ in range(300):
            check = await client.post("/graphql", json={"query": TRIVIAL}, headers=bearer(token))
            if check.status_code != 503:
                return str(check.status_code)
            await asyncio.sleep(0.2)
    return "503 for 60 s"


HOG = (
    'subscription { podGpuUsage(namespace: "research", name: "nope", intervalSeconds: 60) '
    "{ name } }"
)


async def subscribe_many(ws_url: str, token: str, count: int) -> tuple[list[str], Any]:
    """Open a socket with ``token`` and ``count`` subscriptions; each first answer's
    error message ("" when it ran), and the socket (left open: it holds the slots)."""
    ws = await websockets.connect(ws_url, subprotocols=[Subprotocol("graphql-transport-ws")])
    await ws.send(json.dumps({"type": "connection_init", "payload": bearer(token)}))
    await ws.recv()
    for i in range(count):
        await ws.send(json.dumps({"type": "subscribe", "id": str(i), "payload": {"query": HOG}}))
    firsts: dict[str, str] = {}
    while len(firsts) < count:
        message = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if message.get("id") in firsts or "id" not in message:
            continue
        payload = message.get("payload") or {}
        errors = payload if message["type"] == "error" else payload.get("errors") or []
        firsts[message["id"]] = errors[0]["message"] if errors else ""
    return list(firsts.values()), ws


async def subscription_hog(ws_url: str, tokens: dict[str, str], per_socket: int) -> str:
    """The research user opens two sockets of ``per_socket`` subscriptions; then the admin
    subscribes once. How many the hog got, and whether the admin's subscription ran."""
    sockets = []
    try:
        held = 0
        for _ in range(2):
            firsts, ws = await subscribe_many(ws_url, tokens["research"], per_socket)
            sockets.append(ws)
            held += firsts.count("")
        admin, ws = await subscribe_many(ws_url, tokens["admin"], 1)
        sockets.append(ws)
    finally:
        for ws in sockets:
            await ws.close()
    return f"hog held {held} of {2 * per_socket}; admin: {admin[0] or 'subscribed'}"


GET_SNAPSHOT = "/gpugraph.agent.v1.NodeAgent/GetSnapshot"
UNLIMITED = [
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
]


async def big_unauthenticated_messages(address: str, count: int, connections: int) -> str:
    """``count`` unauthenticated 4 MiB GetSnapshot requests at once over ``connections``."""
    payload = b"\x0a" + bytes([0x80 | 0x70, 0xFF, 0xFF, 0x01]) + b"x" * (4 * 1024 * 1024 - 16)
    channels = [grpc.aio.insecure_channel(address, options=UNLIMITED) for _ in range(connections)]

    async def one(i: int) -> str:
        call = channels[i % connections].unary_unary(
            GET_SNAPSHOT, request_serializer=None, response_deserializer=None
        )
        try:
            await call(payload, timeout=30)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name
        return "OK"

    try:
        codes = await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        for channel in channels:
            await channel.close(None)
    return ", ".join(f"{c} x{codes.count(c)}" for c in sorted(set(codes)))


async def health_watch_flood(address: str, count: int) -> str:
    """``count`` health Watch streams without a token, each until its first answer: a
    flood of refusals since Watch needs the token (only Check, the kubelet's, is open)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    per_connection = 64
    channels = [
        grpc.aio.insecure_channel(address, options=UNLIMITED)
        for _ in range(-(-count // per_connection))
    ]
    try:
        watches = [
            health_pb2_grpc.HealthStub(channels[i // per_connection]).Watch(
                health_pb2.HealthCheckRequest(), timeout=30
            )
            for i in range(count)
        ]

        async def first(watch: Any) -> str:
            try:
                reply = await watch.read()
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
            return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)

        answers = await asyncio.gather(*(first(w) for w in watches))
        for watch in watches:
            watch.cancel()
    finally:
        for channel in channels:
            await channel.close(None)
    return ", ".join(f"{a} x{answers.count(a)}" for a in sorted(set(answers)))


def grpc_probe_process(address: str, token: str, conn: Connection) -> None:
    """The agent's probe, in a process of its own: between "start" and "stop" it calls
    GetSnapshot with the token and the health Check, and sends back their latencies."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from node_resolver.generated import agent_pb2, agent_pb2_grpc

    metadata = (("authorization", f"Bearer {token}"),)
    with grpc.insecure_channel(address) as channel:
        agent = agent_pb2_grpc.NodeAgentStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        while conn.recv() == "start":
            snapshots: list[float] = []
            checks: list[float] = []
            statuses: list[int] = []
            while not conn.poll():
                started = time.perf_counter()
                try:
                    agent.GetSnapshot(agent_pb2.GetSnapshotRequest(), metadata=metadata, timeout=30)
                    statuses.append(200)
                except grpc.RpcError:
                    statuses.append(0)
                snapshots.append(time.perf_counter() - started)
                started = time.perf_counter()
                health.Check(health_pb2.HealthCheckRequest(), timeout=30)
                checks.append(time.perf_counter() - started)
                time.sleep(0.01)
            conn.recv()  # "stop"
            conn.send((snapshots, checks, statuses))


def start_probe(target: Callable[..., None], *args: Any) -> tuple[Connection, Any]:
    """A probe process running ``target(*args, conn)``; our end of its pipe, and it."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=target, args=(*args, theirs), daemon=True
    )
    process.start()
    return ours, process


async def serve_attacks(
    workdir: Path, small: bool, statuses: list[int]
) -> tuple[list[Outcome], str]:
    """Issue 21's attacks on ``gpugraph serve --auth kubernetes``; its outcomes and log."""
    stub = hostile_targets.stub_api_server(workdir)
    served = hostile_targets.serve_process(stub, workdir)
    probe, process = start_probe(probe_process, served.url, stub.tokens["admin"])
    pid = served.process.pid
    try:
        ws_url = served.url.replace("http://", "ws://") + "/graphql"
        flood = 24 if small else 200
        per_socket = 30 if small else 100
        plan: list[tuple[str, Callable[[], Awaitable[str]]]] = [
            ("warm-up", lambda: warm_up(served.url, stub.tokens["admin"])),
            (
                f"{flood} random tokens, API server stopped",
                lambda: random_token_flood(served.url, stub, flood),
            ),
            (
                "API server running again: a caller not yet reviewed",
                lambda: recovered(served.url, stub.tokens["research"]),
            ),
            (
                f"subscription hog: 2 sockets x {per_socket} of one user",
                lambda: subscription_hog(ws_url, stub.tokens, per_socket),
            ),
        ]
        outcomes = [
            await run_probed(name, attack, probe, pid, "serve --auth", statuses)
            for name, attack in plan
        ]
        probe.send("exit")
        process.join(10)
    finally:
        served.stop()
        stub.stop()
    return outcomes[1:], served.output()


async def agent_attacks(
    workdir: Path, small: bool, statuses: list[int]
) -> tuple[list[Outcome], str]:
    """Issue 21's attacks on a standalone ``gpugraph agent``; its outcomes and log."""
    agent = hostile_targets.agent_process(workdir)
    probe, process = start_probe(grpc_probe_process, agent.address, hostile_targets.AGENT_TOKEN)
    pid = agent.process.pid
    try:
        watches = 200 if small else 1000
        plan: list[tuple[str, Callable[[], Awaitable[str]]]] = [
            ("warm-up", lambda: asyncio.sleep(0.5, "")),
            (
                "100 unauthenticated 4 MiB messages, 10 connections",
                lambda: big_unauthenticated_messages(agent.address, 100, 10),
            ),
            (
                "100 unauthenticated 4 MiB messages, 1 connection",
                lambda: big_unauthenticated_messages(agent.address, 100, 1),
            ),
            (
                f"{watches} health watches without a token",
                lambda: health_watch_flood(agent.address, watches),
            ),
        ]
        outcomes = [
            await run_probed(name, attack, probe, pid, "agent", statuses) for name, attack in plan
        ]
        probe.send("exit")
        process.join(10)
    finally:
        agent.stop()
    return outcomes[1:], agent.logs()


# -- issue 31: one tenant's gpuUsage flood against a real agent's occupancy log


ADMIN_HISTORY = (
    '{ gpuHistory(since: "2000-01-01T00:00:00Z", nodeName: "node-0", first: 10) '
    "{ edges { node { pid } } } }"
)


def tenant_usage(i: int, n: int) -> str:
    """The tenant's ``n``-th query from client ``i``: a ``since`` of its own, so none share."""
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(946684800 + i * 100_000 + n))
    return f'{{ gpuUsage(since: "{since}", groupBy: [POD]) {{ podName gpuSeconds }} }}'


def fill_history(directory: Path, records: int) -> None:
    """An occupancy log of ``records`` ended processes over the past week, on 8 GPUs, in
    the research namespace and 19 others (as the agent's own log names them)."""
    from node_resolver.history.records import OccupancyRecord
    from node_resolver.history.store import HistoryStore

    now = time.time()
    rows = []
    for i in range(records):
        start = now - 7 * 86400 + i * (7 * 86400 / records)
        namespace = "research" if i % 20 == 0 else f"team-{i % 20}"
        rows.append(
            OccupancyRecord(
                gpu_uuid=f"GPU-{i % 8}", mig_device_uuid="", pid=10_000 + i, start_ticks=i,
                boot_id="b", first_seen=start, last_seen=start + 300, ended=True,
                process_name="python", pod_uid=f"uid-{i % 400}", pod_namespace=namespace,
                pod_name=f"job-{i % 400}", peak_memory_bytes=1 << 30,
                last_memory_bytes=1 << 30, memory_byte_seconds=300.0 * (1 << 30),
                memory_seconds=300.0,
            )
        )  # fmt: skip
    store = HistoryStore(directory, max_bytes=1 << 30)
    store.open()
    try:
        store.write(rows, [], now)
    finally:
        store.close()


async def usage_flood_attack(url: str, tokens: dict[str, str], clients: int, seconds: float) -> str:
    """``clients`` research-token gpuUsage queries at a time for ``seconds``, each with a
    ``since`` of its own, while the admin asks node-0's history one query after another.
    How many of the admin's were answered with no error (the agent's deadline is 2 s)."""
    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        end = time.monotonic() + seconds
        tenant_answers: list[bool] = []
        admin_times: list[float] = []
        admin_answered = 0

        async def tenant(i: int) -> None:
            n = 0
            while time.monotonic() < end:
                r = await client.post(
                    "/graphql",
                    json={"query": tenant_usage(i, n)},
                    headers=bearer(tokens["research"]),
                )
                tenant_answers.append(r.status_code == 200 and "errors" not in r.json())
                n += 1

        async def admin() -> None:
            nonlocal admin_answered
            while time.monotonic() < end:
                started = time.perf_counter()
                r = await client.post(
                    "/graphql", json={"query": ADMIN_HISTORY}, headers=bearer(tokens["admin"])
                )
                admin_times.append(time.perf_counter() - started)
                answer = r.json() if r.status_code == 200 else {}
                admin_answered += "errors" not in answer and bool(answer.get("data"))

        await asyncio.gather(admin(), *(tenant(i) for i in range(clients)))
    return (
        f"admin's history {admin_answered}/{len(admin_times)} answered (slowest "
        f"{ms(max(admin_times))} ms); tenant {tenant_answers.count(True)}/{len(tenant_answers)}"
    )


async def usage_flood(workdir: Path, small: bool, statuses: list[int]) -> tuple[list[Outcome], str]:
    """Issue 31's usage flood on ``gpugraph serve --auth kubernetes`` and a real agent whose
    log holds 200,000 records (20,000 with --small); its outcome and the server's log."""
    from node_resolver.fake_nvml import write_fake_nvml
    from tests.support.agents import gpu_json, nvml_json, start_agent_process

    workdir = workdir / "usage-flood"
    workdir.mkdir()
    records = 20_000 if small else 200_000
    fill_history(workdir / "history", records)
    nvml = workdir / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(i) for i in range(8)]))
    agent = start_agent_process(
        nvml, log_path=workdir / "agent.log", node_name="node-0", host="127.0.0.2",
        interval=1.0, extra_args=["--history-dir", str(workdir / "history")],
    )  # fmt: skip
    stub = hostile_targets.stub_api_server(workdir)
    port = agent.address.rsplit(":", 1)[1]
    served = hostile_targets.serve_process(stub, workdir, "--agent-port", port)
    probe, process = start_probe(probe_process, served.url, stub.tokens["admin"])
    try:
        seconds = 3.0 if small else 10.0
        plan: list[tuple[str, Callable[[], Awaitable[str]]]] = [
            ("warm-up", lambda: warm_up(served.url, stub.tokens["admin"])),
            (
                f"16 research gpuUsage at a time for {seconds:g} s, varied since, over "
                f"{records:,} records; the admin reads node-0's history",
                lambda: usage_flood_attack(served.url, stub.tokens, 16, seconds),
            ),
        ]
        outcomes = [
            await run_probed(name, attack, probe, served.process.pid, "serve --auth", statuses)
            for name, attack in plan
        ]
        probe.send("exit")
        process.join(10)
    finally:
        served.stop()
        stub.stop()
        agent.stop()
    return outcomes[1:], served.output()


# -- issue 31: gpugraph top against a server that drips its answer a byte at a time


def top_against_drip(small: bool) -> str:
    """``gpugraph top`` against a server that sends a byte every 20 s and never ends its answer
    (httpx's timeouts are per read, so without an overall deadline top waited forever), with
    the default deadline (5 s with --small): how long the command ran, its peak RSS, its line."""
    from tests.server.top.hostile_server import Drip, Hostile, serving

    deadline = 5.0 if small else 30.0
    with serving(Hostile(http=Drip(interval=20.0))) as url:
        command = [*demo_process.gpugraph_command(), "top", "--server", url]
        command += ["--request-timeout", f"{deadline:g}"]
        started = time.monotonic()
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        assert process.stderr is not None
        said = process.stderr.read().strip()
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.monotonic() - started
    code = os.waitstatus_to_exitcode(status)
    # The deadline counts from the request; before it, Python's start-up and imports.
    met = "met" if seconds <= deadline + 1 else "**not met**"
    return (
        f"- gpugraph top against a server dripping one byte every 20 s (--request-timeout "
        f"{deadline:g}): exit {code} after {seconds:.2f} s, deadline {met} (target: the "
        f"deadline plus start-up, <= {deadline + 1:g} s); peak RSS {usage.ru_maxrss / 1024:.0f} "
        f"MB; `{said}`"
    )


# -- issue 31: pod names pushed with the agent's token, against its memory and its log's bound


NAME_PUSH_BOUND = 1 << 20
# The agent's memory limit in the chart (256 Mi), in rss_mb's units.
AGENT_LIMIT_MB = 256.0


def log_bytes(directory: Path) -> int:
    """The occupancy log's database and WAL, in bytes."""
    total = 0
    for name in ("history.sqlite", "history.sqlite-wal"):
        with contextlib.suppress(FileNotFoundError):
            total += (directory / name).stat().st_size
    return total


async def push_names(address: str, directory: Path, pods: int, reads: int, pid: int) -> str:
    """Push ``pods`` long-named pods (59 KB messages), then ask ``reads`` history pages (each
    read writes what is pending first); the largest the log's files were meanwhile, its
    ended records before and after, and the agent's peak RSS."""
    import sqlite3

    from node_resolver.generated import agent_pb2, agent_pb2_grpc
    from node_resolver.history.records import HistoryQuery
    from node_resolver.history_codec import history_request_to_proto, pod_names_to_proto
    from tests.support.pod_names import long_named_pods

    def ended() -> int:
        uri = (directory / "history.sqlite").resolve().as_uri() + "?mode=ro"
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            return int(db.execute("SELECT COUNT(*) FROM occupancy WHERE ended = 1").fetchone()[0])

    largest = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal largest
        while not done.is_set():
            largest = max(largest, log_bytes(directory))
            await asyncio.sleep(0.02)

    before = ended()
    watcher = asyncio.create_task(watch())
    metadata = (("authorization", f"Bearer {hostile_targets.AGENT_TOKEN}"),)
    codes: list[str] = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_pb2_grpc.NodeAgentStub(channel)
        for batch in long_named_pods(pods):
            request = agent_pb2.PutPodNamesRequest(pods=pod_names_to_proto(batch))
            try:
                await stub.PutPodNames(request, timeout=30, metadata=metadata)
                codes.append("OK")
            except grpc.aio.AioRpcError as exc:
                codes.append(exc.code().name)
        for _ in range(reads):
            await stub.GetHistory(history_request_to_proto(HistoryQuery(0.0, limit=1)),
                                  timeout=30, metadata=metadata)  # fmt: skip
    done.set()
    await watcher
    largest = max(largest, log_bytes(directory))
    within = "within" if largest <= 2 * NAME_PUSH_BOUND else "**over**"
    peak = rss_mb(pid, "VmHWM")
    return (
        ", ".join(f"{c} x{codes.count(c)}" for c in sorted(set(codes)))
        + f"; log at most {largest / 1024:,.0f} KiB ({within} 2x its {NAME_PUSH_BOUND >> 10:,}"
        f" KiB bound); ended records {before} → {ended()}; agent peak RSS {peak:.0f} MB"
        f" (limit {AGENT_LIMIT_MB:.0f})"
    )


async def name_push(workdir: Path, small: bool, statuses: list[int]) -> tuple[list[Outcome], str]:
    """Issue 31's name push on a standalone agent whose log is bounded at 1 MiB and holds 314
    ended records: 300 messages of 35 pods (10,500), then 70,000 pods (100 and 20,000 with
    --small); its outcomes and log."""
    from node_resolver.fake_nvml import write_fake_nvml
    from node_resolver.history.records import OccupancyRecord
    from node_resolver.history.store import HistoryStore
    from tests.support.agents import gpu_json, nvml_json, start_agent_process
    from tests.support.pod_names import PER_MESSAGE

    workdir = workdir / "name-push"
    directory = workdir / "history"
    workdir.mkdir()
    now = time.time()
    store = HistoryStore(directory, max_bytes=NAME_PUSH_BOUND)
    store.open()
    records = [
        OccupancyRecord(
            gpu_uuid=f"GPU-{i % 8}", mig_device_uuid="", pid=10_000 + i, start_ticks=i,
            boot_id="b", first_seen=now - 3600 + i, last_seen=now - 1800 + i, ended=True,
            process_name="python", pod_uid=f"uid-{i}",
        )
        for i in range(314)
    ]  # fmt: skip
    store.write(records, [], now)
    store.close()
    nvml = workdir / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(i) for i in range(8)]))
    token = workdir / "agent-token"
    token.write_text(hostile_targets.AGENT_TOKEN)
    agent = start_agent_process(
        nvml, log_path=workdir / "agent.log", token_file=token, interval=1.0,
        extra_args=["--history-dir", str(directory),
                    "--history-max-bytes", str(NAME_PUSH_BOUND)],
    )  # fmt: skip
    probe, process = start_probe(grpc_probe_process, agent.address, hostile_targets.AGENT_TOKEN)
    pid = agent.process.pid
    try:
        messages = 100 if small else 300
        many = 20_000 if small else 70_000
        reads = 50 if small else 200
        plan: list[tuple[str, Callable[[], Awaitable[str]]]] = [
            ("warm-up", lambda: asyncio.sleep(0.5, "")),
            (
                f"{messages} PutPodNames of 59 KB ({messages * PER_MESSAGE:,} pods), "
                f"then {reads} history reads; log bound 1 MiB",
                lambda: push_names(agent.address, directory, messages * PER_MESSAGE, reads, pid),
            ),
            (
                f"{many:,} pods pushed in 59 KB messages, then {reads} history reads",
                lambda: push_names(agent.address, directory, many, reads, pid),
            ),
        ]
        outcomes = [
            await run_probed(name, attack, probe, pid, "agent", statuses) for name, attack in plan
        ]
        probe.send("exit")
        process.join(10)
    finally:
        agent.stop()
    return outcomes[1:], agent.logs()


# -- issue 31: queries that fail on down nodes, and the server's RSS over a long run

# Every pod's processes: an error for each of the 30 pods on a node without an agent. Each
# worker sends its own document, so that no two requests share an execution.
FAILING = (
    "query Failing{worker} {{ pods {{ namespace name gpuProcesses {{ pid usedMemoryBytes }} }} }}"
)


async def failing_run(url: str, token: str, pid: int, count: int, workers: int = 8) -> str:
    """``count`` queries of every pod's processes, ``workers`` at a time; how many came
    back with the down nodes' errors, and the server's RSS at each tenth."""
    step = max(1, count // 10)
    samples = [rss_mb(pid)]
    sent = failed = 0
    async with httpx.AsyncClient(base_url=url, timeout=60, headers=bearer(token)) as client:

        async def worker(k: int) -> None:
            nonlocal sent, failed
            request = body(FAILING.format(worker=k))
            headers = {"Content-Type": "application/json"}
            for _ in range(count // workers):
                r = await client.post("/graphql", content=request, headers=headers)
                failed += r.status_code == 200 and "agent on node" in r.text
                sent += 1
                if sent % step == 0:
                    samples.append(rss_mb(pid))

        await asyncio.gather(*(worker(k) for k in range(workers)))
    rss = ", ".join(f"{s:.0f}" for s in samples)
    return f"{sent:,} answered, {failed:,} with the nodes' errors; RSS at each tenth, MB: {rss}"


async def failing_queries(
    workdir: Path, small: bool, statuses: list[int]
) -> tuple[list[Outcome], str]:
    """Issue 31's failing queries: 45,000 (3,000 with --small) against ``serve --auth
    kubernetes`` whose node-0 has an agent (8 GPUs, 4 processes each) and whose 3 other
    nodes have none, through strawberry and through the compiled plan, each server from
    its start; the outcomes and the servers' logs."""
    from node_resolver.fake_nvml import write_fake_nvml
    from tests.support.agents import gpu_json, nvml_json, start_agent_process

    workdir = workdir / "failing-queries"
    workdir.mkdir()
    count = 3_000 if small else 45_000
    nvml = workdir / "nvml.json"
    processes = [
        [{"pid": 4000 + 4 * i + j, "usedMemoryBytes": 1 << 30, "type": "COMPUTE"} for j in range(4)]
        for i in range(8)
    ]
    write_fake_nvml(nvml, nvml_json([gpu_json(i, processes[i]) for i in range(8)]))
    agent = start_agent_process(
        nvml, log_path=workdir / "agent.log", node_name="node-0", host="127.0.0.2", interval=1.0
    )
    port = agent.address.rsplit(":", 1)[1]
    stub = hostile_targets.stub_api_server(workdir)
    try:
        runs = [
            await failing_on(stub, workdir / path, count, statuses, "--agent-port", port, *flags)
            for path, flags in (("strawberry", ["--no-compiled-execution"]), ("compiled", []))
        ]
    finally:
        stub.stop()
        agent.stop()
    return [outcome for outcome, _ in runs], "".join(log for _, log in runs)


async def failing_on(
    stub: hostile_targets.StubProcess, workdir: Path, count: int, statuses: list[int], *flags: str
) -> tuple[Outcome, str]:
    """``failing_run`` on one server started with ``flags``; its outcome and log."""
    workdir.mkdir()
    served = hostile_targets.serve_process(stub, workdir, *flags)
    admin = stub.tokens["admin"]
    pid = served.process.pid
    probe, process = start_probe(probe_process, served.url, admin)
    path = "strawberry" if "--no-compiled-execution" in flags else "compiled"
    try:
        await run_probed(
            "warm-up", lambda: warm_up(served.url, admin), probe, pid, "serve", statuses
        )
        outcome = await run_probed(
            f"{count:,} queries failing on 3 of 4 nodes ({path})",
            lambda: failing_run(served.url, admin, pid, count),
            probe,
            pid,
            "serve --auth",
            statuses,
        )
        probe.send("exit")
        process.join(10)
    finally:
        served.stop()
    return outcome, served.output()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def report(
    outcomes: list[Outcome], before: float, after: float, statuses: list[int], logs: dict[str, str]
) -> None:
    print(f"# Hostile-input benchmark ({platform.node()}, {os.cpu_count()} CPUs)\n")
    print("Demo size: 7 nodes, 30 GPUs; request timeout 10 s; header timeout 10 s.\n")
    print(
        "| target | attack | answer ms | status | probe 1 p50 / p99 ms | probe 2 p50 / p99 ms "
        "| RSS before → after, MB | agent peak RSS growth, MB |"
    )
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for o in outcomes:
        peak = f"{o.peak_growth:+.1f}" if o.peak_growth is not None else ""
        print(
            f"| {o.target} | {o.name} | {ms(o.seconds)} | {o.status} | "
            f"{ms(pct(o.health, 0.5))} / {ms(pct(o.health, 0.99))} | "
            f"{ms(pct(o.trivial, 0.5))} / {ms(pct(o.trivial, 0.99))} | "
            f"{o.rss_before:.0f} → {o.rss_mb:.0f} | {peak} |"
        )
    worst = max(max(pct(o.health, 0.99), pct(o.trivial, 0.99)) for o in outcomes)
    peaks = [o.peak_growth for o in outcomes if o.peak_growth is not None]
    print()
    print("Probes: the demo and serve: `/healthz` / the trivial query (serve: with the admin's")
    print("token, and `/metrics` gzipped); the agent: GetSnapshot with its token / health Check.\n")
    print(f"- demo RSS before / after: {before:.0f} MB / {after:.0f} MB ({after - before:+.0f} MB)")
    print(f"- slowest attack answer: {ms(max(o.seconds for o in outcomes))} ms (target <= 11000)")
    print(f"- worst probe p99: {ms(worst)} ms (target <= 250)")
    if peaks:
        print(f"- the agent's largest peak RSS growth: {max(peaks):+.1f} MB (target <= 50)")
    print(f"- responses with status 500: {statuses.count(500)}")
    for name, log in logs.items():
        print(f"- tracebacks in the {name} log: {log.count('Traceback')}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="fewer repetitions, for CI")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpugraph-hostile-") as workdir:
        demo = start_demo(Path(workdir))
        ours, theirs = multiprocessing.Pipe()
        probe = multiprocessing.get_context("spawn").Process(
            target=probe_process, args=(demo.url, "", theirs), daemon=True
        )
        probe.start()
        try:
            async with httpx.AsyncClient(base_url=demo.url, timeout=60) as client:
                bench = Bench(demo, client, ours)
                # Warm up: the first queries build views and connect to the agents,
                # and the probe opens its connection.
                await bench.run("warm-up", lambda: bench.many([body(WARM_UP)] * 3))
                before = rss_mb(demo.process.pid)
                outcomes = await attacks(bench, args.small)
                await asyncio.sleep(1)
                after = rss_mb(demo.process.pid)
            ours.send("exit")
            probe.join(10)
        finally:
            os.killpg(demo.process.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                demo.process.wait(15)
            if demo.process.poll() is None:
                demo.process.kill()
        statuses = bench.statuses
        served, serve_log = await serve_attacks(Path(workdir), args.small, statuses)
        agent, agent_log = await agent_attacks(Path(workdir), args.small, statuses)
        flood, flood_log = await usage_flood(Path(workdir), args.small, statuses)
        logs = {"demo": "".join(demo.output), "serve": serve_log, "agent": agent_log}
        logs["usage-flood serve"] = flood_log
        names, logs["name-push agent"] = await name_push(Path(workdir), args.small, statuses)
        failing, logs["failing-queries serve"] = await failing_queries(
            Path(workdir), args.small, statuses
        )
        report(
            [*outcomes, *served, *agent, *flood, *names, *failing], before, after, statuses, logs
        )
        print(await asyncio.to_thread(top_against_drip, args.small))


if __name__ == "__main__":
    asyncio.run(main())

"""Hostile input against a running ``gpugraph demo``: every attack answered, nobody else stalled.

For each attack of issue 10 this prints the attack's answer time and status,
a probe client's p50/p99 latency for ``/healthz`` and for a trivial query
while the attack runs, and the server's RSS once it is answered; at the end,
the server's RSS before and after, the number of 500 responses and the number
of tracebacks in the server's log. The probe runs in a process of its own, so
the attacker's work (encoding bodies, opening sockets) does not delay it;
request bodies are encoded before each attack starts.

Run ``python bench/hostile.py`` (the demo's size, 4 nodes x 8 GPUs, full
repetitions) or ``--small`` (fewer repetitions, for CI).
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

import httpx  # noqa: E402
import websockets  # noqa: E402
from websockets.typing import Subprotocol  # noqa: E402

from tests.support import demo_process  # noqa: E402

TRIVIAL = '{ node(name: "gpu-node-0") { name } }'
WARM_UP = "{ nodes { name gpus { uuid } } }"


def chain(depth: int) -> str:
    """``{ gpus { node { gpus { node ... } } } }``, ``depth`` fields deep."""
    opened = ["gpus { " if i % 2 == 0 else "node { " for i in range(depth - 1)]
    leaf = "uuid" if (depth - 1) % 2 else "name"
    return "{ " + "".join(opened) + leaf + " }" * len(opened) + " }"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


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
    # The server's RSS once the attack is answered.
    rss_mb: float


def probe_process(url: str, conn: Connection) -> None:
    """Another client of the server, in a process of its own, so that the attacker's
    own work (encoding bodies, opening sockets) never delays it: between "start"
    and "stop" it alternates ``/healthz`` and the trivial query, then sends back
    its latencies and statuses."""
    asyncio.run(_probe(url, conn))


async def _probe(url: str, conn: Connection) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
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
        self.probe.send("start")
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        status = await attack()
        seconds = time.perf_counter() - started
        self.probe.send("stop")
        health, trivial, statuses = await asyncio.to_thread(self.probe.recv)
        self.statuses.extend(statuses)
        return Outcome(name, seconds, status, health, trivial, rss_mb(self.demo.process.pid))

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
    ]
    return [await bench.run(name, attack) for name, attack in plan]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}"


def report(outcomes: list[Outcome], before: float, after: float, bench: Bench, log: str) -> None:
    print(f"# Hostile-input benchmark ({platform.node()}, {os.cpu_count()} CPUs)\n")
    print("Demo size: 4 nodes x 8 GPUs; request timeout 10 s.\n")
    print(
        "| attack | answer ms | status | /healthz p50 / p99 ms | trivial query p50 / p99 ms "
        "| RSS after, MB |"
    )
    print("| --- | ---: | --- | ---: | ---: | ---: |")
    for o in outcomes:
        print(
            f"| {o.name} | {ms(o.seconds)} | {o.status} | "
            f"{ms(pct(o.health, 0.5))} / {ms(pct(o.health, 0.99))} | "
            f"{ms(pct(o.trivial, 0.5))} / {ms(pct(o.trivial, 0.99))} | {o.rss_mb:.0f} |"
        )
    worst = max(max(pct(o.health, 0.99), pct(o.trivial, 0.99)) for o in outcomes)
    print()
    print(f"- RSS before / after: {before:.0f} MB / {after:.0f} MB ({after - before:+.0f} MB)")
    print(f"- slowest attack answer: {ms(max(o.seconds for o in outcomes))} ms (target <= 11000)")
    print(f"- worst probe p99: {ms(worst)} ms (target <= 250)")
    print(f"- responses with status 500: {bench.statuses.count(500)}")
    print(f"- tracebacks in the server log: {log.count('Traceback')}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="fewer repetitions, for CI")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpugraph-hostile-") as workdir:
        demo = start_demo(Path(workdir))
        ours, theirs = multiprocessing.Pipe()
        probe = multiprocessing.get_context("spawn").Process(
            target=probe_process, args=(demo.url, theirs), daemon=True
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
        report(outcomes, before, after, bench, "".join(demo.output))


if __name__ == "__main__":
    asyncio.run(main())

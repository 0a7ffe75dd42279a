"""Hostile input against a running ``gpugraph demo``: every attack answered, nobody else stalled.

For each attack of issue 10 this prints the attack's answer time and status,
a probe client's p50/p99 latency for ``/healthz`` and for a trivial query
while the attack runs, and at the end the server's RSS before and after, the
number of 500 responses and the number of tracebacks in the server's log.

Run ``python bench/hostile.py`` (the demo's size, 4 nodes x 8 GPUs, full
repetitions) or ``--small`` (fewer repetitions, for CI).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import websockets
from websockets.typing import Subprotocol

ROOT = Path(__file__).resolve().parent.parent
TRIVIAL = '{ node(name: "gpu-node-0") { name } }'


def chain(depth: int) -> str:
    """``{ gpus { node { gpus { node ... } } } }``, ``depth`` fields deep."""
    opened = ["gpus { " if i % 2 == 0 else "node { " for i in range(depth - 1)]
    leaf = "uuid" if (depth - 1) % 2 else "name"
    return "{ " + "".join(opened) + leaf + " }" * len(opened) + " }"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
    port = free_port()
    script = Path(sys.executable).parent / "gpugraph"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "api.cli"]
    env = {**os.environ, "TMPDIR": str(workdir), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*command, "demo", "--listen", f"127.0.0.1:{port}", "--log-level", "warning"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    demo = Demo(process, f"http://127.0.0.1:{port}")
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: demo.output.extend(stdout), daemon=True).start()
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


class Bench:
    def __init__(self, demo: Demo) -> None:
        self.demo = demo
        self.statuses: list[int] = []

    async def probe(self, stop: asyncio.Event, health: list[float], trivial: list[float]) -> None:
        async with httpx.AsyncClient(base_url=self.demo.url, timeout=60) as client:
            while not stop.is_set():
                started = time.perf_counter()
                r = await client.get("/healthz")
                health.append(time.perf_counter() - started)
                self.statuses.append(r.status_code)
                started = time.perf_counter()
                r = await client.post("/graphql", json={"query": TRIVIAL})
                trivial.append(time.perf_counter() - started)
                self.statuses.append(r.status_code)
                await asyncio.sleep(0.01)

    async def run(self, name: str, attack: Callable[[], Awaitable[str]]) -> Outcome:
        health: list[float] = []
        trivial: list[float] = []
        stop = asyncio.Event()
        probe = asyncio.create_task(self.probe(stop, health, trivial))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        status = await attack()
        seconds = time.perf_counter() - started
        stop.set()
        await probe
        return Outcome(name, seconds, status, health, trivial)

    async def post(self, body: bytes | dict[str, Any], **headers: str) -> str:
        async with httpx.AsyncClient(base_url=self.demo.url, timeout=60) as client:
            if isinstance(body, dict):
                r = await client.post("/graphql", json=body)
            else:
                headers = {"content-type": "application/json", **headers}
                r = await client.post("/graphql", content=body, headers=headers)
        self.statuses.append(r.status_code)
        code = ""
        with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
            code = " " + r.json()["errors"][0]["extensions"]["code"]
        return f"{r.status_code}{code}"

    async def many(self, bodies: list[bytes | dict[str, Any]]) -> str:
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


async def attacks(bench: Bench, small: bool) -> list[Outcome]:
    reps = 2_000 if small else 22_000
    wide = {"query": "{ " + "pods { node { name } } " * 700 + "}"}
    entities = {
        "query": "query($r: [_Any!]!) { _entities(representations: $r) { ... on Gpu { uuid } } }",
        "variables": {"r": [{"__typename": "Gpu", "uuid": f"GPU-{i:08d}"} for i in range(reps)]},
    }
    malformed: list[bytes | dict[str, Any]] = [
        b'"{ nodes { name } }"',
        b"null",
        b"12",
        b'{"query": "\xff\xfe"}',
        b"[" * 100_000 + b"]" * 100_000,
    ]
    disconnects = 60 if small else 600
    plan: list[tuple[str, Callable[[], Awaitable[str]]]] = [
        ("depth-12 GPU/node multiplier", lambda: bench.post({"query": chain(12)})),
        ("depth-10 multiplier (admitted)", lambda: bench.post({"query": chain(10)})),
        ("700 repeated fields", lambda: bench.post(wide)),
        ("10 x 700 repeated fields at once", lambda: bench.many([wide] * 10)),
        (f"_entities with {reps:,} representations", lambda: bench.post(entities)),
        ("malformed bodies (string, null, number, UTF-8, deep)", lambda: bench.many(malformed)),
        (
            "subscription over HTTP",
            lambda: bench.post({"query": "subscription { gpuUpdates { uuid } }"}),
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
    print("| attack | answer ms | status | /healthz p50 / p99 ms | trivial query p50 / p99 ms |")
    print("| --- | ---: | --- | ---: | ---: |")
    for o in outcomes:
        print(
            f"| {o.name} | {ms(o.seconds)} | {o.status} | "
            f"{ms(pct(o.health, 0.5))} / {ms(pct(o.health, 0.99))} | "
            f"{ms(pct(o.trivial, 0.5))} / {ms(pct(o.trivial, 0.99))} |"
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
        try:
            bench = Bench(demo)
            # Warm up: the first queries build views and connect to the agents.
            for _ in range(3):
                await bench.post({"query": "{ nodes { name gpus { uuid } } }"})
            before = rss_mb(demo.process.pid)
            outcomes = await attacks(bench, args.small)
            await asyncio.sleep(1)
            after = rss_mb(demo.process.pid)
        finally:
            os.killpg(demo.process.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                demo.process.wait(15)
            if demo.process.poll() is None:
                demo.process.kill()
        report(outcomes, before, after, bench, "".join(demo.output))


if __name__ == "__main__":
    asyncio.run(main())

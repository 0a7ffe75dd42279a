"""A lean HTTP/1.1 load generator: many keep-alive clients on one event loop.

httpx spends several times the server's CPU per request at 100 concurrent
clients (its connection pool and its request and response models): on two
cores, a benchmark driving the server through it measures httpx. These
clients write a pre-framed request and read the response by its
Content-Length over asyncio streams, so nearly all the CPU a run spends is
the server's. It speaks only what ``gpugraph serve`` answers (uvicorn:
Content-Length bodies, no chunked encoding on these routes).
"""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

__all__ = ["LoadResult", "Request", "cpu_seconds", "process_cpu_seconds", "run_load"]

# A request: (method, path, JSON body or None).
Request = tuple[str, str, object]


@dataclass(frozen=True)
class LoadResult:
    """What ``run_load`` measured: requests per second, latencies, errors, this process's CPU."""

    requests: int
    seconds: float
    latencies: list[float]
    errors: int
    client_cpu: float

    @property
    def qps(self) -> float:
        """Requests answered per second of the run."""
        return self.requests / self.seconds


def cpu_seconds() -> float:
    """CPU time (user and system) this process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """CPU time (user and system) another process has used, from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def frame(host: str, method: str, path: str, body: object) -> bytes:
    """One HTTP/1.1 request, framed."""
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
    if body is None:
        return (head + "\r\n").encode()
    data = orjson.dumps(body)
    head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One response's status and body (Content-Length framing)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def run_load(
    base: str,
    clients: int,
    seconds: float,
    request: Callable[[int], Request],
    ok: Callable[[int, bytes], bool] = lambda status, body: status == 200,
) -> LoadResult:
    """``clients`` keep-alive connections sending ``request(n)`` for ``seconds``."""
    url = urlsplit(base)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    counter = iter(range(10**12))
    latencies: list[float] = []
    errors = 0
    connections = [await asyncio.open_connection(host, port) for _ in range(clients)]
    deadline = time.perf_counter() + seconds

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            data = frame(url.netloc, *request(next(counter)))
            start = time.perf_counter()
            writer.write(data)
            status, body = await read_response(reader)
            latencies.append(time.perf_counter() - start)
            if not ok(status, body):
                errors += 1

    cpu = cpu_seconds()
    began = time.perf_counter()
    try:
        await asyncio.gather(*(client(r, w) for r, w in connections))
    finally:
        for _, writer in connections:
            writer.close()
    elapsed = time.perf_counter() - began
    return LoadResult(len(latencies), elapsed, latencies, errors, cpu_seconds() - cpu)

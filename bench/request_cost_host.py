"""One checkout's server in this process, its app called over ASGI: CPU per batch.

Run by ``request_cost_bench.py``, once per tree and request, beside the
other trees' hosts (why: that module's docstring). It imports only the tree
it is given (``--tree``), and of it only ``api.cli`` and ``api.serve``, the
server's own wiring, so a tree from before a change runs as it shipped.
The requests are called straight into the app by a few lines of ASGI
rather than an HTTP client library: this process's CPU is what is measured,
so the caller's side must cost next to nothing and the same in every tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Message = MutableMapping[str, Any]
App = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]

WARMUP_BATCHES = 20
# Seconds the server's Kubernetes cache may take to fill before the host gives up.
READY_WITHIN = 120.0


async def call(app: App, body: bytes) -> None:
    """One POST /graphql through the app; SystemExit if its answer is not a clean 200."""
    scope: Message = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/graphql",
        "raw_path": b"/graphql",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError("unreachable")

    status = 0
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    answer = b"".join(chunks)
    if status != 200 or b'"errors"' in answer:
        raise SystemExit(f"not a clean answer ({status}): {answer[:300]!r}")


async def serve_batches(args: argparse.Namespace) -> None:
    """Start the tree's services and warm up; then, for each line on stdin, time one batch.

    Prints ``ready`` once warm, then one line per batch: the CPU this
    process spent since the last line, per request of the batch, in
    milliseconds; what ran in the background while the host waited (a
    snapshot refreshed ahead of its reads) counts too, as it does over HTTP.
    The runner alternates batches between the trees' hosts, so a slow spell
    of the machine falls on all of them alike.
    """
    from api.cli import build_parser, settings_from_args
    from api.serve import services_running

    flags = ["serve", "--kubeconfig", args.kubeconfig, "--agent-port", str(args.agent_port)]
    flags += ["--auth", "none", "--no-graphiql"]
    settings = settings_from_args(build_parser("serve").parse_args(flags))
    sent = 0

    async def batch(app: App) -> None:
        nonlocal sent
        bodies = []
        for _ in range(args.batch):
            variables = {"selector": args.selector.format(n=sent)}
            bodies.append(json.dumps({"query": args.query, "variables": variables}).encode())
            sent += 1
        await asyncio.gather(*(call(app, body) for body in bodies))

    async with services_running(settings) as services:
        try:
            async with asyncio.timeout(READY_WITHIN):
                while not services.cache.ready:
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise SystemExit(f"the server's cache was not ready in {READY_WITHIN:.0f} s") from None
        app: App = services.app
        for _ in range(WARMUP_BATCHES):
            await batch(app)
        print("ready", flush=True)
        last = time.process_time()
        while (await asyncio.to_thread(sys.stdin.readline)).strip() == "batch":
            await batch(app)
            now = time.process_time()
            print(f"{(now - last) / args.batch * 1000:.6f}", flush=True)
            last = now


def main() -> None:
    """Parse the arguments and serve batches until stdin ends."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", required=True, help="the checkout whose server to measure")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--agent-port", type=int, required=True)
    parser.add_argument("--query", required=True)
    parser.add_argument("--selector", required=True, help="the labelSelector, with {n}")
    parser.add_argument("--batch", type=int, default=100, help="requests in flight at once")
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    # Errors only: every host warning that the map's assets are not built says nothing here.
    logging.basicConfig(level=logging.ERROR)
    # The tree first, ahead of this directory: the server it measures is that tree's.
    sys.path.insert(0, args.tree)
    os.chdir(args.tree)
    asyncio.run(serve_batches(args))


if __name__ == "__main__":
    main()

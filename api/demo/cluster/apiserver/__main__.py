"""``python -m api.demo.cluster.apiserver``: a stub API server with a generated cluster."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading

from ..synthetic import demo_nodes, demo_pods
from .server import StubApiServer


def main(argv: list[str] | None = None) -> int:
    """Run a stub API server with a generated cluster until interrupted."""
    parser = argparse.ArgumentParser(
        prog="python -m api.demo.cluster.apiserver",
        description="A fake Kubernetes API server serving a generated GPU cluster.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--slim", action="store_true", help="leave out managedFields")
    args = parser.parse_args(argv)
    server = StubApiServer(host=args.host, port=args.port)
    server.load(
        pods=demo_pods(args.pods, args.nodes, managed_fields=not args.slim),
        nodes=demo_nodes(args.nodes),
    )
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with server:
        print(f"listening on {server.url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Serve an ASGI app with real uvicorn on a loopback ephemeral port, in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp


@contextmanager
def serving(app: ASGIApp, *, host: str = "127.0.0.1", timeout: float = 20.0) -> Iterator[str]:
    """Run ``app`` under uvicorn on ``host``:0 and yield its base URL."""
    config = uvicorn.Config(app, host=host, port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"uvicorn did not start on {host} within {timeout:.0f} s")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout)

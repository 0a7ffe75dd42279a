"""``gpugraph demo``'s embedded cluster, run in a background thread for client tests.

The same pieces ``gpugraph demo`` runs (stub API server, one real agent per
node on its own loopback address, the real server), on an event loop of
their own, so that a synchronous client (Playwright) can drive the page while
the test rewrites the fake GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from api.demo.gpus import fake_nvml_document
from api.demo.runner import Demo, DemoConfig
from node_resolver.fake_nvml import write_fake_nvml

__all__ = ["LiveDemo", "live_demo"]

T = TypeVar("T")


@dataclass
class LiveDemo:
    """A started demo; ``url`` is its server's base URL."""

    demo: Demo
    url: str
    loop: asyncio.AbstractEventLoop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run ``coro`` on the demo's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def freeze_gpus(self) -> None:
        """Stop the demo's waves, so only the test changes the fake GPUs from now on."""
        self.run(self.demo._stop_ticker())

    def set_gpus(self, node: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Rewrite ``node``'s fake-NVML file: its current document after ``change(gpu)``."""
        agent = next(a for a in self.demo.agents if a.node.name == node)
        document = fake_nvml_document(agent.node, 0.0)
        for gpu in document["gpus"]:
            change(gpu)
        write_fake_nvml(agent.workdir / "nvml.json", document)

    def token_of(self, user: str) -> str:
        """The token ``demo --auth`` prints for ``user`` (``admin``, ``research-user``)."""
        assert self.demo.api is not None
        token: str = self.demo.api.reviews.token_of(user)
        return token

    def query(self, query: str, token: str | None = None) -> dict[str, Any]:
        """POST ``query`` to the server; its JSON answer."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = httpx.post(
            f"{self.url}/graphql", json={"query": query}, headers=headers, timeout=30
        )
        body: dict[str, Any] = response.json()
        return body


@contextlib.contextmanager
def live_demo(**config: Any) -> Iterator[LiveDemo]:
    """A started demo (``DemoConfig`` fields as keywords; port 0 by default), stopped on exit."""
    config.setdefault("listen_port", 0)
    demo = Demo(DemoConfig(**config))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    serving: asyncio.Future[None] | None = None

    async def start() -> str:
        nonlocal serving
        await demo.start()
        serving = asyncio.ensure_future(demo.serve())
        url = await demo.wait_ready(serving)
        assert url is not None
        return demo.base_url

    async def stop() -> None:
        demo.request_stop()
        if serving is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(serving, 30)
        await demo.stop()

    try:
        url = asyncio.run_coroutine_threadsafe(start(), loop).result(120)
        yield LiveDemo(demo, url, loop)
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()

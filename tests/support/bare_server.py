"""The production app over an empty, fully listed cluster, for tests of pages and plumbing.

No agent is ever asked; the server is ready at once, with nothing in it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from api.agents.discovery import NodeIpDiscovery
from api.agents.pool import AgentPool
from api.app import create_app
from api.kube.cache import ClusterCache
from api.settings import Settings
from tests.support.server import RunningServer, serve_app

__all__ = ["bare_server", "bare_server_in_thread"]


@asynccontextmanager
async def bare_server(settings: Settings) -> AsyncIterator[RunningServer]:
    """The production app over an empty cluster (no agent is ever asked)."""
    cache = ClusterCache()
    # An empty but fully listed cluster: ready, with nothing in it.
    cache.replace_nodes([])
    cache.replace_pods([])
    pool = AgentPool(NodeIpDiscovery(cache))
    app = create_app(settings, cache, pool)
    async with serve_app(app, settings) as running:
        yield running
    await pool.close()


@contextmanager
def bare_server_in_thread(settings: Settings) -> Iterator[RunningServer]:
    """``bare_server`` on an event loop of its own in a thread, for sync clients (Playwright)."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    manager = bare_server(settings)
    try:
        server = asyncio.run_coroutine_threadsafe(manager.__aenter__(), loop).result(30)
        try:
            yield server
        finally:
            asyncio.run_coroutine_threadsafe(manager.__aexit__(None, None, None), loop).result(30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()

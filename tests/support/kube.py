"""Fixtures for the Kubernetes cache: a stub API server and a watched cache on it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from api.demo.cluster import StubApiServer
from api.kube.cache import ClusterCache
from api.kube.watcher import ClusterWatcher


@contextmanager
def stub_api(**options: Any) -> Iterator[StubApiServer]:
    """A started stub API server; bookmarks every 0.2 s unless told otherwise."""
    options.setdefault("bookmark_interval", 0.2)
    with StubApiServer(**options) as server:
        yield server


@contextmanager
def watched_cache(
    server: StubApiServer, *, wait_ready: bool = True, **options: Any
) -> Iterator[tuple[ClusterCache, ClusterWatcher]]:
    """A ClusterCache fed by a ClusterWatcher on ``server``; stopped on exit."""
    options.setdefault("backoff_initial", 0.05)
    options.setdefault("backoff_max", 0.5)
    cache = ClusterCache()
    watcher = ClusterWatcher(cache, server.configuration(), **options)
    watcher.start()
    try:
        if wait_ready:
            assert cache.wait_ready(10), "cache never became ready"
        yield cache, watcher
    finally:
        assert watcher.stop(5), "watch threads did not stop"

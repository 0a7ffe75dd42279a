"""The cache's staleness: how long since the API server last confirmed it, and what /readyz says."""

from __future__ import annotations

import time
from typing import Any

from api.app import readiness
from api.demo.cluster import make_node, make_pod
from api.kube.cache import ClusterCache
from api.metrics import Metrics
from graph_schema.cache_status import STALE_AFTER_SECONDS
from graph_schema.context import GraphContext
from graph_schema.schema import build_schema
from tests.support.graph import MemorySnapshots
from tests.support.kube import stub_api, watched_cache
from tests.support.polling import eventually


def test_staleness_stays_small_while_bookmarks_flow_and_grows_when_the_api_server_stops() -> None:
    with stub_api(bookmark_interval=0.1) as server:
        server.load(pods=[make_pod("w", "ml", "node-0")], nodes=[make_node("node-0", "10.0.0.1")])
        with watched_cache(server, backoff_max=5.0) as (cache, _):
            metrics = Metrics()
            metrics.watch_cluster(cache)
            assert eventually(lambda: (cache.staleness_seconds() or 99) < 0.5)
            assert "gpugraph_cache_staleness_seconds" in metrics.render().decode()
            fresh = cache.staleness_seconds()
            assert fresh is not None
            assert readiness(cache)["status"] == "ready"
            server.stop()
            # No more bookmarks: the cache keeps serving, and its age grows.
            assert eventually(lambda: (cache.staleness_seconds() or 0) > 1.0, timeout=10)
            later = cache.staleness_seconds()
            assert later is not None and later > fresh
            assert cache.pod_count == 1


async def cache_status(cache: ClusterCache) -> Any:
    schema = build_schema()
    result = await schema.execute(
        "{ cacheStatus { ready stalenessSeconds stale staleAfterSeconds } }",
        context_value=GraphContext(cache, MemorySnapshots(), schema.state),
    )
    assert result.errors is None, result.errors
    assert result.data is not None
    return result.data["cacheStatus"]


def test_readyz_reports_the_age_and_calls_an_old_cache_stale_but_keeps_it_ready() -> None:
    cache = ClusterCache()
    assert cache.staleness_seconds() is None
    cache.stats.pods.heard_at = 1000.0
    cache.stats.nodes.heard_at = 900.0
    assert cache.staleness_seconds(now=1000.0) == 100.0, "the older of the two counts"
    metrics = Metrics()
    metrics.watch_cluster(cache)
    cache.stats.pods.heard_at = cache.stats.nodes.heard_at = 0.0
    assert "gpugraph_cache_staleness_seconds NaN" in metrics.render().decode()
    cache.stats.pods.heard_at = cache.stats.nodes.heard_at = (
        time.monotonic() - STALE_AFTER_SECONDS - 5
    )
    body = readiness(cache)
    assert body["status"] == "stale"
    assert isinstance(body["cacheStalenessSeconds"], float)
    assert body["cacheStalenessSeconds"] > STALE_AFTER_SECONDS
    assert "out of date" in str(body["reason"])


async def test_the_cache_status_field_says_what_readyz_says() -> None:
    cache = ClusterCache()
    # Before the first list: not ready, age unknown, and the field still answers.
    assert await cache_status(cache) == {
        "ready": False,
        "stalenessSeconds": None,
        "stale": False,
        "staleAfterSeconds": STALE_AFTER_SECONDS,
    }
    cache.stats.pods.heard_at = cache.stats.nodes.heard_at = time.monotonic() - 2
    fresh = await cache_status(cache)
    assert 2 <= fresh["stalenessSeconds"] < 60 and fresh["stale"] is False
    cache.stats.pods.heard_at = cache.stats.nodes.heard_at = (
        time.monotonic() - STALE_AFTER_SECONDS - 5
    )
    old = await cache_status(cache)
    assert old["stale"] is True and readiness(cache)["status"] == "stale"
    assert old["stalenessSeconds"] > STALE_AFTER_SECONDS

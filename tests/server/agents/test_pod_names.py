"""Pod names pushed to agents from the cache's events: the real cache and pool, fake clients."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

import pytest

from api.agents.pod_names import PodNamePusher
from api.agents.pool import AgentPool
from api.kube.cache import ClusterCache
from node_resolver.pod_names import PodName
from tests.support.graph import pod_record
from tests.support.polling import eventually_async


class Addresses:
    """Every node's agent at ``<node>:1``."""

    def address(self, node_name: str) -> str:
        return f"{node_name}:1"


class Agents:
    """Fake agent clients that record the names they are sent; ``failing`` nodes refuse."""

    def __init__(self) -> None:
        self.names: dict[str, dict[str, PodName]] = {}
        self.failing: set[str] = set()

    def __call__(self, target: str, token: str | None) -> object:
        agents = self
        node = target.split(":")[0]

        class Client:
            async def put_pod_names(
                self, node_name: str, pods: list[PodName], *, timeout: float
            ) -> int:
                assert node_name == node
                if node in agents.failing:
                    raise ConnectionError("agent down")
                known = agents.names.setdefault(node, {})
                known.update({p.uid: p for p in pods})
                return len(pods)

            def close(self) -> Awaitable[None] | None:
                return None

        return Client()


@pytest.fixture
async def world() -> tuple[ClusterCache, Agents, PodNamePusher]:
    cache = ClusterCache()
    agents = Agents()
    pool = AgentPool(Addresses(), client_factory=agents)  # type: ignore[arg-type]
    pusher = PodNamePusher(cache, pool, asyncio.get_running_loop(), batch_seconds=0.01)
    cache.subscribe(pusher.on_change)
    pusher.start()
    return cache, agents, pusher


async def test_the_first_list_names_every_pod_even_before_nodes_are_listed(
    world: tuple[ClusterCache, Agents, PodNamePusher],
) -> None:
    cache, agents, pusher = world
    # Pods land first: the nodes are not listed yet.
    cache.replace_pods(
        [
            pod_record("ml", "a", "node-1", container_ids=["c" * 64]),
            pod_record("ml", "b", "node-2"),
            pod_record("ml", "pending", None),
        ]
    )
    await eventually_async(lambda: len(agents.names) == 2, what="both nodes named")
    named = agents.names["node-1"]["uid-ml-a"]
    assert (named.namespace, named.name, dict(named.containers)) == ("ml", "a", {"c" * 64: "c0"})
    # A pod added later reaches its node on its own.
    cache.upsert_pod(pod_record("research", "late", "node-2"))
    await eventually_async(lambda: "uid-research-late" in agents.names["node-2"], what="late pod")
    await pusher.stop()


async def test_a_failed_push_is_retried(
    world: tuple[ClusterCache, Agents, PodNamePusher], monkeypatch: pytest.MonkeyPatch
) -> None:
    import api.agents.pod_names as module

    monkeypatch.setattr(module, "RETRY_SECONDS", 0.05)
    cache, agents, pusher = world
    agents.failing.add("node-1")
    cache.upsert_pod(pod_record("ml", "a", "node-1"))
    await eventually_async(lambda: pusher.pushed == 0 and "node-1" not in agents.names)
    agents.failing.clear()
    await eventually_async(lambda: "node-1" in agents.names, what="the retry")
    await pusher.stop()

"""A small live gpugraph for client tests, running in a background thread.

Two fake nodes on the stub Kubernetes API server, each with a real agent
(sampler + gRPC) on its own loopback address reading a fake NVML file, behind
the production server stack (watch, cache, agent pool, app) under real
uvicorn. It all runs on its own event loop in a thread, so that a client under
test (a browser, a Node.js gateway, a WebSocket client) can drive it from
anywhere, sync or async.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from starlette.applications import Starlette
from starlette.routing import Route

from api.demo.cluster.manifests import pod_uid_for
from graph_schema.limits import SubscriptionLimiter
from tests.support.server import GIB, Gpu, GraphTestCluster, Proc, Served, serving

T = TypeVar("T")


@dataclass(frozen=True)
class PodSpec:
    """A pod of the test cluster and the one GPU process it runs."""

    namespace: str
    name: str
    node: str
    pid: int
    gpu_uuid: str
    used_bytes: int
    comm: str = "python"

    @property
    def uid(self) -> str:
        """The pod's UID."""
        return pod_uid_for(self.namespace, self.name)


NODE_A, NODE_B = "gpu-node-alpha", "gpu-node-bravo"
GPU_A0 = "GPU-a1fa0000-7e57-4c0d-9a11-00000000a000"
GPU_A1 = "GPU-a1fa0001-7e57-4c0d-9a11-00000000a001"
GPU_B0 = "GPU-b7a00000-7e57-4c0d-9a11-00000000b000"
# trainer-0 and trainer-1 share GPU_A0; a host process (no pod) sits on GPU_B0.
PODS = (
    PodSpec("ml", "trainer-0", NODE_A, 4101, GPU_A0, 20 * GIB),
    PodSpec("ml", "trainer-1", NODE_A, 4102, GPU_A0, 12 * GIB),
    PodSpec("serving", "infer-0", NODE_B, 5101, GPU_B0, 7 * GIB),
)
HOST_PID = 777


def _gpus(node: str, utilization: int) -> list[Gpu]:
    if node == NODE_A:
        return [
            Gpu(0, GPU_A0, utilization=utilization, processes=_procs_on(GPU_A0)),
            Gpu(1, GPU_A1, utilization=utilization, processes=[]),
        ]
    return [
        Gpu(0, GPU_B0, utilization=utilization, processes=[*_procs_on(GPU_B0), (HOST_PID, GIB)])
    ]


def _procs_on(uuid: str) -> list[tuple[int, int]]:
    return [(p.pid, p.used_bytes) for p in PODS if p.gpu_uuid == uuid]


def _subscriptions(app: Starlette) -> SubscriptionLimiter:
    # The GraphQL view's schema holds the server-wide subscription count.
    for route in app.routes:
        if isinstance(route, Route) and route.path == "/graphql":
            view: Any = route.endpoint
            limiter: SubscriptionLimiter = view.schema.state.subscriptions
            return limiter
    raise LookupError("the app has no /graphql route")


class LiveCluster:
    """gpugraph serving two fake GPU nodes; ``url`` is the server's base URL."""

    def __init__(
        self,
        workdir: Path,
        *,
        snapshot_ttl: float = 1.0,
        snapshot_keep_warm: float | None = None,
        max_subscriptions: int = 200,
        utilization: int = 37,
        auth: bool = False,
    ) -> None:
        self.auth = auth
        self.snapshot_ttl = snapshot_ttl
        self.snapshot_keep_warm = snapshot_keep_warm
        self.max_subscriptions = max_subscriptions
        self.kube = GraphTestCluster(workdir)
        for name in (NODE_A, NODE_B):
            procs = [Proc(p.pid, p.comm, p.uid) for p in PODS if p.node == name]
            if name == NODE_B:
                procs.append(Proc(HOST_PID, "Xorg"))
            self.kube.add_node(name, gpus=_gpus(name, utilization), procs=procs)
        for spec in PODS:
            self.kube.add_pod(
                spec.name, spec.namespace, spec.node, gpu_limit=1, labels={"app": spec.name}
            )
        self.served: Served | None = None
        self._subscriptions: SubscriptionLimiter | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._stack = contextlib.AsyncExitStack()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self.served is not None, "cluster not started"
        return self.served.url

    @property
    def ws_url(self) -> str:
        """``ws://127.0.0.1:PORT/graphql``."""
        assert self.served is not None, "cluster not started"
        return self.served.ws_url

    @property
    def active_subscriptions(self) -> int:
        """Subscriptions the server holds right now."""
        assert self._subscriptions is not None, "cluster not started"
        return self._subscriptions.active

    def agent_calls(self, node: str) -> int:
        """GetSnapshot calls the node's agent has answered."""
        return self.kube.agents[node].calls

    def set_utilization(self, node: str, percent: int) -> None:
        """Rewrite the node's fake NVML file with every GPU at ``percent`` utilization."""
        self.kube.agents[node].write_gpus(_gpus(node, percent))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run ``coro`` on the cluster's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> LiveCluster:
        """Start the stub API server, the agents and the server; returns once all serve."""
        self._thread.start()
        try:
            self.run(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server, the agents and the stub API server, then the loop."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(self._stack.aclose())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        if not self._loop.is_running():
            self._loop.close()

    async def _start(self) -> None:
        await self.kube.start()
        self._stack.push_async_callback(self.kube.stop)
        settings = self.kube.settings(
            snapshot_ttl=self.snapshot_ttl,
            snapshot_keep_warm=self.snapshot_keep_warm,
            max_subscriptions=self.max_subscriptions,
            auth_mode="kubernetes" if self.auth else "none",
        )
        self.served = await self._stack.enter_async_context(serving(settings))
        self._subscriptions = _subscriptions(self.served.services.app)


@contextlib.contextmanager
def live_cluster(workdir: Path, **options: Any) -> Iterator[LiveCluster]:
    """A started LiveCluster, stopped on exit."""
    cluster = LiveCluster(workdir, **options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()

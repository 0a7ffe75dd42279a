"""A small live gpugraph for client tests: real agents, real uvicorn, in a background thread.

Two fake nodes, each a real agent (sampler + gRPC) on its own loopback
address reading a fake NVML file, behind the production app (agent pool,
schema, GraphQL over HTTP and WebSocket) under real uvicorn. The whole thing
runs on its own event loop in a thread, so that a client under test (a
browser, a Node.js gateway, a WebSocket client) can drive it from anywhere.
Only the Kubernetes side is pre-filled: the clients never see that part.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from api.app import create_app
from api.kube.cache import ClusterCache
from api.kube.objects import container_id_for, pod_uid_for
from api.metrics import Metrics
from api.serve import build_pool
from api.settings import Settings
from graph_schema import (
    ContainerRecord,
    GraphSchema,
    NodeRecord,
    PodRecord,
    SchemaLimits,
    build_schema,
)
from tests.support.server import GIB, AgentNode, Gpu, Proc, RunningServer, serve_app

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


def _node_records(ips: dict[str, str]) -> list[NodeRecord]:
    return [
        NodeRecord(
            name=name,
            uid=f"uid-{name}",
            internal_ip=ip,
            labels={"nvidia.com/gpu.product": "NVIDIA-H200"},
            gpu_capacity=len(_gpus(name, 0)),
            gpu_allocatable=len(_gpus(name, 0)),
        )
        for name, ip in ips.items()
    ]


def _pod_records() -> list[PodRecord]:
    return [
        PodRecord(
            uid=spec.uid,
            namespace=spec.namespace,
            name=spec.name,
            node_name=spec.node,
            phase="Running",
            pod_ip=None,
            labels={"app": spec.name.rsplit("-", 1)[0]},
            gpu_request=1,
            containers=(
                ContainerRecord(
                    name="main",
                    image="nvcr.io/nvidia/pytorch:24.05-py3",
                    container_id=container_id_for(spec.uid, "main").split("://", 1)[1],
                ),
            ),
        )
        for spec in PODS
    ]


def _free_port(hosts: list[str]) -> int:
    # One agent port for every node, as node-ip discovery expects; it must be
    # free on each node's address.
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = int(probe.getsockname()[1])
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on all of {hosts}")


class LiveCluster:
    """gpugraph serving two fake GPU nodes; ``url`` is the server's base URL."""

    def __init__(
        self,
        workdir: Path,
        *,
        snapshot_ttl: float = 1.0,
        sample_interval: float = 0.1,
        max_subscriptions: int = 200,
        utilization: int = 37,
    ) -> None:
        self.workdir = workdir
        self.snapshot_ttl = snapshot_ttl
        self.sample_interval = sample_interval
        self.max_subscriptions = max_subscriptions
        self.utilization = utilization
        self.nodes: dict[str, AgentNode] = {}
        self.schema: GraphSchema | None = None
        self.server: RunningServer | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._stack = contextlib.AsyncExitStack()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self.server is not None, "cluster not started"
        return self.server.url

    @property
    def ws_url(self) -> str:
        """``ws://127.0.0.1:PORT/graphql``."""
        assert self.server is not None, "cluster not started"
        return self.server.ws_url

    @property
    def active_subscriptions(self) -> int:
        """Subscriptions the server holds right now."""
        assert self.schema is not None, "cluster not started"
        return self.schema.state.subscriptions.active

    def agent_calls(self, node: str) -> int:
        """GetSnapshot calls the node's agent has answered."""
        return self.nodes[node].calls

    def set_utilization(self, node: str, percent: int) -> None:
        """Rewrite the node's fake NVML file with every GPU at ``percent`` utilization."""
        self.nodes[node].write_gpus(_gpus(node, percent))

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run ``coro`` on the cluster's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> LiveCluster:
        """Start the agents and the server; returns once both serve."""
        self._thread.start()
        try:
            self.run(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server and the agents, then the loop."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                self.run(self._stack.aclose())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
        if not self._loop.is_running():
            self._loop.close()

    async def _start(self) -> None:
        ips = {NODE_A: "127.0.0.2", NODE_B: "127.0.0.3"}
        port = _free_port(list(ips.values()))
        for name, ip in ips.items():
            procs = [Proc(p.pid, p.comm, p.uid) for p in PODS if p.node == name]
            if name == NODE_B:
                procs.append(Proc(HOST_PID, "Xorg"))
            node = AgentNode(
                name,
                ip,
                self.workdir,
                gpus=_gpus(name, self.utilization),
                procs=procs,
                interval=self.sample_interval,
            )
            node.port = port
            await node.start()
            self._stack.push_async_callback(node.stop)
            self.nodes[name] = node
        cache = ClusterCache()
        cache.replace_nodes(_node_records(ips))
        cache.replace_pods(_pod_records())
        settings = Settings(
            agent_port=port,
            snapshot_ttl=self.snapshot_ttl,
            max_subscriptions=self.max_subscriptions,
        )
        metrics = Metrics()
        pool = build_pool(settings, cache, metrics)
        self._stack.push_async_callback(pool.close)
        self.schema = build_schema(SchemaLimits(max_subscriptions=self.max_subscriptions))
        app = create_app(settings, cache, pool, metrics=metrics, schema=self.schema)
        self.server = await self._stack.enter_async_context(serve_app(app, settings))


@contextlib.contextmanager
def live_cluster(workdir: Path, **options: Any) -> Iterator[LiveCluster]:
    """A started LiveCluster, stopped on exit."""
    cluster = LiveCluster(workdir, **options)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()

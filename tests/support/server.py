"""Fixtures for server tests: agents on loopback node IPs, and the app under real uvicorn.

Each fake node is a real agent (sampler + gRPC server) on its own loopback
address (127.0.0.2, 127.0.0.3, ...), reading a fake NVML file and a small
/proc tree whose cgroup files carry kubelet-style paths, so that its
processes map to pods the stub API server serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import websockets
from starlette.applications import Starlette
from websockets.typing import Subprotocol

from api.demo.cluster.fake_proc import kubelet_cgroup, remove_process, write_process
from api.demo.cluster.kubelet import FakeKubelet
from api.demo.cluster.manifests import container_id_for
from api.http.uvicorn_server import UvicornServer
from api.settings import Settings
from node_resolver.agent import agent_running
from node_resolver.allocation_use import AllocationJudge, IdlePolicy
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.history.log import HistoryLog, HistorySettings, read_boot_id
from node_resolver.pids import CgroupResolver
from node_resolver.pod_names import PodNames
from node_resolver.pod_resources import PodResourcesClient, PodResourcesPoller
from node_resolver.sampler import Sampler
from node_resolver.service import AgentServer

GIB = 1024**3
MIB = 1024**2


@dataclass(frozen=True)
class Proc:
    """One process on a fake node; ``pod_uid`` None makes it a host process."""

    pid: int
    comm: str
    pod_uid: str | None = None
    container: str = "main"
    start_time: int = 5000

    def cgroup(self) -> str:
        """The process's /proc/<pid>/cgroup text."""
        if self.pod_uid is None:
            return "0::/system.slice/sshd.service\n"
        container_id = container_id_for(self.pod_uid, self.container)
        return kubelet_cgroup(self.pod_uid, container_id, driver="systemd")


@dataclass
class Gpu:
    """One fake GPU and the (pid, used bytes) of the processes on it."""

    index: int
    uuid: str
    name: str = "NVIDIA H200"
    utilization: int = 50
    memory_total: int = 141 * GIB
    processes: list[tuple[int, int]] = field(default_factory=list)
    # MIG device UUIDs (MIG mode on when any); processes[i] runs on mig_of[pid] if given.
    mig_devices: list[str] = field(default_factory=list)
    mig_of: dict[int, str] = field(default_factory=dict)
    # pid -> the process's SM utilization in percent (unset: NVML gave no sample).
    sm_of: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The fake NVML file's entry for this GPU."""
        return {
            "minorNumber": self.index,
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memoryTotalBytes": self.memory_total,
            "memoryUsedBytes": sum(used for _, used in self.processes),
            "utilizationGpu": self.utilization,
            "utilizationMemory": 10,
            "temperatureC": 40,
            "powerUsageWatts": 300.0,
            "powerLimitWatts": 700.0,
            "migEnabled": bool(self.mig_devices),
            "migDevices": [
                {"index": i, "uuid": uuid, "gpuInstanceId": i + 1, "computeInstanceId": 0}
                for i, uuid in enumerate(self.mig_devices)
            ],
            "processes": [
                {
                    "pid": pid,
                    "usedMemoryBytes": used,
                    "type": "COMPUTE",
                    "migDeviceUuid": self.mig_of.get(pid),
                    **({"smUtilization": self.sm_of[pid]} if pid in self.sm_of else {}),
                }
                for pid, used in self.processes
            ],
        }


class AgentNode:
    """A real agent for one fake node, listening on ``ip`` (a loopback address)."""

    def __init__(
        self,
        name: str,
        ip: str,
        workdir: Path,
        *,
        gpus: Sequence[Gpu] = (),
        procs: Sequence[Proc] = (),
        token: str | None = None,
        interval: float = 0.1,
        history: bool = False,
        clock: Callable[[], float] = time.time,
        kubelet: Mapping[str, Any] | None = None,
        idle_after: float | None = None,
    ) -> None:
        self.name = name
        # With the kubelet: the agent judges each allocation (``--idle-after``).
        self.idle_after = idle_after
        self.sampler: Sampler | None = None
        self.poller: PodResourcesPoller | None = None
        # The sampler's clock: what the occupancy log takes for "now".
        self.clock = clock
        self.ip = ip
        # The fake kubelet's PodResources data; None: no kubelet socket at all.
        self.kubelet_data = kubelet
        self.kubelet: FakeKubelet | None = None
        self._socket_dir: Path | None = None
        self.token = token
        self.interval = interval
        self.dir = workdir / name
        self.proc_root = self.dir / "proc"
        self.proc_root.mkdir(parents=True, exist_ok=True)
        # With history on: the occupancy log's directory, and the log while running.
        self.history_dir: Path | None = self.dir / "history" if history else None
        self.history: HistoryLog | None = None
        # The log's bounds, read at each start.
        self.history_retention = 30 * 86400.0
        self.history_max_bytes = 256 << 20
        if history:
            self.set_boot_id("boot-1")
        self.nvml_path = self.dir / "nvml.json"
        self.port = 0
        self.gpus = list(gpus)
        self._server: AgentServer | None = None
        self._running: contextlib.AsyncExitStack | None = None
        self._calls_before_restart = 0
        for proc in procs:
            self.add_proc(proc)
        self.write_gpus()

    @property
    def address(self) -> str:
        """``ip:port`` once started."""
        return f"{self.ip}:{self.port}"

    @property
    def calls(self) -> int:
        """GetSnapshot calls this node's agent has answered, across restarts."""
        served = self._server.calls_served if self._server is not None else 0
        return self._calls_before_restart + served

    def add_proc(self, proc: Proc) -> None:
        """Make ``proc`` exist in the node's /proc tree."""
        write_process(
            self.proc_root,
            proc.pid,
            comm=proc.comm,
            start_time=proc.start_time,
            cgroup=proc.cgroup(),
            cmdline=(proc.comm, "--train"),
        )

    def remove_proc(self, pid: int) -> None:
        """Make ``pid`` exit."""
        remove_process(self.proc_root, pid)

    def set_boot_id(self, boot_id: str) -> None:
        """Write the node's boot ID (a new one is a reboot, to the occupancy log)."""
        path = self.proc_root / "sys" / "kernel" / "random" / "boot_id"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(boot_id + "\n")

    def write_gpus(self, gpus: Sequence[Gpu] | None = None) -> None:
        """(Re)write the fake NVML file; the agent picks changes up on its next scan."""
        if gpus is not None:
            self.gpus = list(gpus)
        write_fake_nvml(
            self.nvml_path,
            {
                "driverVersion": "550.90.07",
                "cudaDriverVersion": 12040,
                "gpus": [gpu.to_json() for gpu in self.gpus],
            },
        )

    async def start(self) -> None:
        """Start serving and sampling; returns once sampled. A restart reuses the port."""
        history = None
        pod_names = PodNames()
        judge = None
        if self.idle_after is not None and self.kubelet_data is not None:
            judge = AllocationJudge(
                node_name=self.name,
                boot_id=read_boot_id(str(self.proc_root)),
                policy=IdlePolicy(self.idle_after),
                pod_names=pod_names,
                interval=self.interval,
            )
        if self.history_dir is not None:
            settings = HistorySettings(
                self.history_dir,
                retention_seconds=self.history_retention,
                max_bytes=self.history_max_bytes,
                flush_interval=0.2,
            )
            history = HistoryLog(
                settings,
                boot_id=read_boot_id(str(self.proc_root)),
                pod_names=pod_names,
                clock=self.clock,
                allocations=judge,
            )
        self.history = history
        # A unix socket path must fit in 108 bytes; the workdir's may not.
        if self._socket_dir is None:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
        socket_path = str(self._socket_dir / "kubelet.sock")
        if self.kubelet_data is not None and self.kubelet is None:
            self.kubelet = FakeKubelet(socket_path, data=self.kubelet_data).start()
        kubelet_socket = self.kubelet.socket_path if self.kubelet is not None else socket_path
        client = PodResourcesClient(kubelet_socket)
        poller = PodResourcesPoller(
            client.list,
            interval=self.interval,
            list_replicas=client.replicas,
            # A judging agent's answers age by the clock its scans judge by.
            clock=self.clock if judge is not None else time.monotonic,
        )
        sampler = Sampler(
            FakeGpuSource(self.nvml_path),
            CgroupResolver(proc_root=str(self.proc_root)),
            node_name=self.name,
            interval=self.interval,
            clock=self.clock,
            on_scan=history.observe if history is not None else None,
            pod_resources=poller,
            judge=judge,
        )
        self.sampler, self.poller = sampler, poller
        stack = contextlib.AsyncExitStack()
        stack.callback(client.close)
        # grace=None: stopping is like a killed process, connections drop at once.
        server = await stack.enter_async_context(
            agent_running(
                sampler,
                f"{self.ip}:{self.port}",
                token=self.token,
                grace=None,
                join_timeout=5.0,
                history=history,
            )
        )
        if not await asyncio.to_thread(sampler.wait_ready, 10.0):
            await stack.aclose()
            raise RuntimeError(f"agent for {self.name} took no first sample")
        assert server.address is not None
        self.port = int(server.address.rsplit(":", 1)[1])
        self._running, self._server = stack, server

    def scan(self) -> None:
        """One scan now (by the agent's clock), with the kubelet's answer of this moment."""
        assert self.sampler is not None and self.poller is not None
        self.poller.poll()
        self.sampler.scan()

    async def stop(self) -> None:
        """Stop at once, like a killed process: connections drop, the port refuses."""
        if self._server is not None:
            self._calls_before_restart += self._server.calls_served
            self._server = None
        if self._running is not None:
            await self._running.aclose()
            self._running = None
        if self.kubelet is not None:
            self.kubelet.stop()
            self.kubelet = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None


def node_ips(count: int) -> list[str]:
    """Loopback addresses to use as node InternalIPs: 127.0.0.2, 127.0.0.3, ..."""
    return [f"127.0.0.{i + 2}" for i in range(count)]


@dataclass
class Listening:
    """A server listening at ``url`` (http://host:port)."""

    url: str

    @property
    def ws_url(self) -> str:
        """The GraphQL WebSocket URL."""
        return self.url.replace("http://", "ws://", 1) + "/graphql"


@dataclass
class RunningServer(Listening):
    """The app served by real uvicorn on a loopback port."""

    app: Starlette
    server: uvicorn.Server


@contextlib.asynccontextmanager
async def serve_app(
    app: Starlette, settings: Settings | None = None
) -> AsyncIterator[RunningServer]:
    """Serve ``app`` with the production uvicorn config on 127.0.0.1 and a free port."""
    from api.serve import uvicorn_config

    base = settings or Settings()
    config = uvicorn_config(app, replace(base, listen_host="127.0.0.1", listen_port=0))
    config.log_level = "warning"
    server = UvicornServer(config, own_signals=False)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 30
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("uvicorn exited before starting")
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start within 30 s")
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", app, server)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def graphql(
    client: httpx.AsyncClient, query: str, variables: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """POST a GraphQL query and return the decoded response (any HTTP status)."""
    body: dict[str, Any] = {"query": query}
    if variables is not None:
        body["variables"] = dict(variables)
    response = await client.post("/graphql", json=body)
    result: dict[str, Any] = response.json()
    return result


class GraphQLSocket:
    """A minimal graphql-transport-ws client: operations one at a time on one socket."""

    PROTOCOL = Subprotocol("graphql-transport-ws")

    def __init__(self, ws: websockets.ClientConnection) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(cls, url: str) -> AsyncIterator[GraphQLSocket]:
        """An acknowledged connection to the GraphQL WebSocket at ``url``."""
        async with websockets.connect(url, subprotocols=[cls.PROTOCOL]) as ws:
            await ws.send(json.dumps({"type": "connection_init"}))
            ack = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert ack["type"] == "connection_ack", ack
            yield cls(ws)

    async def subscribe(self, query: str, variables: Mapping[str, Any] | None = None) -> str:
        """Start an operation; its id."""
        op_id = str(next(self._ids))
        payload: dict[str, Any] = {"query": query}
        if variables is not None:
            payload["variables"] = dict(variables)
        await self.ws.send(json.dumps({"id": op_id, "type": "subscribe", "payload": payload}))
        return op_id

    async def receive(self, op_id: str) -> dict[str, Any]:
        """The next ``next``, ``error`` or ``complete`` message of operation ``op_id``."""
        while True:
            message: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), 10))
            if message.get("id") == op_id:
                return message

    async def query(self, query: str, variables: Mapping[str, Any] | None = None) -> Any:
        """Run a query or mutation; its ``next`` payload, or ``{"errors": [...]}`` on error."""
        op_id = await self.subscribe(query, variables)
        message = await self.receive(op_id)
        if message["type"] == "error":
            return {"errors": message["payload"]}
        assert message["type"] == "next", message
        assert (await self.receive(op_id))["type"] == "complete"
        return message["payload"]


class GraphTestCluster:
    """A stub Kubernetes API server plus one real agent per node, on loopback node IPs.

    Every agent listens on the same port at its node's InternalIP, as node-ip
    discovery expects. Pods go to the stub server; processes go to the agent's
    /proc tree and fake NVML file, so the agent maps them to those pods.
    """

    def __init__(self, workdir: Path, *, token: str | None = None, history: bool = False) -> None:
        from api.demo.cluster import StubApiServer

        self.workdir = workdir
        self.token = token
        # Agents keep an occupancy log (in their node's directory).
        self.history = history
        self.stub = StubApiServer(bookmark_interval=0.5)
        self.agents: dict[str, AgentNode] = {}
        self.kubeconfig = workdir / "kubeconfig"
        self.port = 0

    def add_node(
        self,
        name: str,
        gpus: Sequence[Gpu] = (),
        procs: Sequence[Proc] = (),
        kubelet: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AgentNode:
        """A node on the stub server with an agent (started by ``start``).

        ``kubelet`` is the node's fake kubelet PodResources data; None: no kubelet socket.
        ``options``: more of ``AgentNode``'s options (``clock``, ``interval``, ``idle_after``).
        """
        from api.demo.cluster.manifests import make_node

        ip = node_ips(len(self.agents) + 1)[-1]
        agent = AgentNode(
            name,
            ip,
            self.workdir,
            gpus=gpus,
            procs=procs,
            token=self.token,
            history=self.history,
            kubelet=kubelet,
            **options,
        )
        self.agents[name] = agent
        self.stub.add_node(make_node(name, ip, gpus=len(gpus)))
        return agent

    def add_pod(
        self, name: str, namespace: str = "default", node: str | None = None, **kw: Any
    ) -> str:
        """A pod on the stub server; returns its UID."""
        from api.demo.cluster.manifests import make_pod, pod_uid_for

        self.stub.add_pod(make_pod(name, namespace, node, **kw))
        uid: str = kw.get("uid") or pod_uid_for(namespace, name)
        return uid

    async def start(self) -> None:
        """Start the stub server and every agent (sharing the first agent's port)."""
        from api.demo.cluster import write_kubeconfig

        self.stub.start()
        write_kubeconfig(str(self.kubeconfig), self.stub.url)
        for agent in self.agents.values():
            agent.port = self.port
            await agent.start()
            self.port = agent.port

    async def stop(self) -> None:
        """Stop the agents and the stub server."""
        await asyncio.gather(*(a.stop() for a in self.agents.values()))
        self.stub.stop()

    def settings(self, **overrides: Any) -> Settings:
        """Server settings pointing at this cluster; ``overrides`` replace any field."""
        base = Settings(
            listen_host="127.0.0.1",
            listen_port=0,
            kubeconfig=self.kubeconfig,
            agent_port=self.port,
            log_level="warning",
        )
        return replace(base, **overrides)

    def calls(self) -> dict[str, int]:
        """GetSnapshot calls answered so far, per node."""
        return {name: agent.calls for name, agent in self.agents.items()}


@dataclass
class Served(Listening):
    """A full server (cache + watch + pool + app) under uvicorn, and an HTTP client for it."""

    services: Any
    client: httpx.AsyncClient

    async def query(self, query: str, variables: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """POST a GraphQL query; the decoded response."""
        return await graphql(self.client, query, variables)


@contextlib.asynccontextmanager
async def serving(settings: Settings, *, wait_ready: bool = True) -> AsyncIterator[Served]:
    """Run the production server stack for ``settings`` on a free loopback port."""
    from api.serve import services_running

    # The server tunes the collector for itself once the cache is ready; the
    # rest of the test session keeps CPython's defaults.
    thresholds = gc.get_threshold()
    try:
        async with (
            services_running(settings) as services,
            serve_app(services.app, settings) as server,
            httpx.AsyncClient(base_url=server.url, timeout=30) as client,
        ):
            if wait_ready:
                ready = await asyncio.to_thread(services.cache.wait_ready, 10.0)
                assert ready, "the cache did not fill from the stub API server in 10 s"
            yield Served(server.url, services, client)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def standard_cluster(
    workdir: Path, *, token: str | None = None, history: bool = False
) -> GraphTestCluster:
    """The cluster most server tests use (not yet started).

    - node-0: GPU-node-0-0 shared by ml/worker-0 (PID 1001, 3 GiB) and
      ml/worker-1 (PID 1002, 5 GiB); GPU-node-0-1 holds a host process (PID
      1003, 1 GiB) and a process of a pod the cluster no longer has (PID 1004,
      2 GiB).
    - node-1: GPU-node-1-0 used by team-b/trainer-0 (PID 2001, 7 GiB); also a
      second pod called worker-0, in namespace "other", with no GPU process.
    - node-2: GPU-node-2-0, idle.
    - ml/pending-0: not scheduled to any node.
    """
    from api.demo.cluster.manifests import pod_uid_for

    cluster = GraphTestCluster(workdir, token=token, history=history)
    worker0 = pod_uid_for("ml", "worker-0")
    worker1 = pod_uid_for("ml", "worker-1")
    trainer = pod_uid_for("team-b", "trainer-0")
    gone = pod_uid_for("ml", "deleted-long-ago")
    cluster.add_node(
        "node-0",
        gpus=[
            Gpu(0, "GPU-node-0-0", utilization=87, processes=[(1001, 3 * GIB), (1002, 5 * GIB)]),
            Gpu(1, "GPU-node-0-1", utilization=12, processes=[(1003, 1 * GIB), (1004, 2 * GIB)]),
        ],
        procs=[
            Proc(1001, "python", worker0),
            Proc(1002, "python", worker1),
            Proc(1003, "Xorg"),
            Proc(1004, "python", gone),
        ],
    )
    cluster.add_node(
        "node-1",
        gpus=[Gpu(0, "GPU-node-1-0", utilization=99, processes=[(2001, 7 * GIB)])],
        procs=[Proc(2001, "torchrun", trainer)],
    )
    cluster.add_node("node-2", gpus=[Gpu(0, "GPU-node-2-0", utilization=0)])
    cluster.add_pod("worker-0", "ml", "node-0", gpu_limit=1, labels={"app": "train", "job": "a"})
    cluster.add_pod("worker-1", "ml", "node-0", gpu_limit=1, labels={"app": "train", "job": "b"})
    cluster.add_pod("trainer-0", "team-b", "node-1", gpu_limit=1, labels={"app": "trainer"})
    cluster.add_pod("worker-0", "other", "node-1", labels={"app": "web"})
    cluster.add_pod("pending-0", "ml", None, gpu_limit=1, phase="Pending")
    return cluster

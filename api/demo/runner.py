"""``gpugraph demo``: a simulated GPU cluster served by the real server, in one process.

From the Kubernetes cache upward everything is the production code path: the
stub API server speaks the real list/watch wire format to the real cache, and
the real server (``api.serve.serve``) finds one real agent per node on the
node's InternalIP (127.0.0.2, 127.0.0.3, ...). Each agent reads a fake-NVML
file the demo rewrites every interval and resolves PIDs with the real cgroup
resolver on a fixture /proc tree. Only the GPUs and the API server are fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import logging
import os
import secrets
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from node_resolver.address import join_host_port
from node_resolver.agent import agent_running
from node_resolver.allocation_use import AllocationJudge, IdlePolicy
from node_resolver.cli import scan_hooks
from node_resolver.fake_nvml import FakeGpuSource, write_fake_nvml
from node_resolver.gpu_events.node_events import NodeGpuEvents
from node_resolver.history.log import read_boot_id
from node_resolver.pids import build_resolver
from node_resolver.pod_names import PodNames
from node_resolver.pod_resources import PodResourcesClient, PodResourcesPoller
from node_resolver.sampler import Sampler
from node_resolver.service import AgentServer

from ..http.cluster_map import MAP_PATH
from ..http.uvicorn_server import UvicornServer
from ..settings import Settings
from .cluster import StubApiServer, write_kubeconfig
from .cluster.kubelet import FakeKubelet
from .events_scenario import (
    EVENTS_QUERY,
    KERNEL_LOG,
    blamed_process,
    kernel_xid_line,
    lost_gpu,
    mark_lost,
    node_events,
)
from .gpus import GPU_NAME, fake_nvml_document
from .history_scenario import (
    DELETED_NODE,
    DELETED_POD,
    FINISHED_POD,
    HISTORY_QUERY,
    backfill,
    deleted_pod_uid,
    history_log,
    with_deleted_pod,
)
from .idle_scenario import IDLE_QUERY, backfill_idle
from .proc_tree import write_proc_tree
from .queries import example_queries
from .scenario import DemoCluster, DemoNode, build_cluster

__all__ = ["Demo", "DemoConfig", "DemoError", "run_demo_async"]

# sun_path is 108 bytes, NUL included.
_MAX_SOCKET_PATH = 100

log = logging.getLogger(__name__)

# How long the server may take to list the cluster and answer /readyz.
READY_TIMEOUT = 60.0


class DemoError(Exception):
    """The demo cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class DemoConfig:
    """What ``gpugraph demo`` was asked for."""

    nodes: int = 4
    gpus_per_node: int = 8
    listen_host: str = "127.0.0.1"
    listen_port: int = 8000
    interval: float = 1.0
    log_level: str = "warning"
    # Kubernetes auth through the stub's TokenReview/SubjectAccessReview; off by
    # default, so the first look needs no token.
    auth: bool = False
    # The MIG mixed, time-sliced and DRA nodes, on top of ``nodes``.
    allocation_nodes: bool = True


async def run_demo_async(config: DemoConfig, *, out: TextIO | None = None) -> int:
    """Start the cluster, serve until SIGINT/SIGTERM, then remove every trace of it."""
    stream = out if out is not None else sys.stdout
    loop = asyncio.get_running_loop()
    demo = Demo(config)
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, demo.request_stop, sig)
    serving: asyncio.Task[None] | None = None
    started = False
    try:
        await demo.start()
        started = True
        if demo.stopping.is_set():
            return 0
        serving = asyncio.create_task(demo.serve(), name="gpugraph-server")
        url = await demo.wait_ready(serving)
        if url is not None:
            print(demo.banner(url), file=stream, flush=True)
        await asyncio.wait({serving}, timeout=None)
        if not demo.stopping.is_set():
            error = None if serving.cancelled() else serving.exception()
            raise DemoError(f"the server stopped unexpectedly: {error!r}")
        return 0
    finally:
        if serving is not None:
            if not serving.done():
                serving.cancel()
            # Its outcome was reported above; here it only has to be over.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await serving
        try:
            await demo.stop()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
        if started:
            print("gpugraph demo stopped; temporary files removed", file=stream, flush=True)


@contextlib.asynccontextmanager
async def _closing_source(
    sampler: Sampler, agent: contextlib.AbstractAsyncContextManager[AgentServer]
) -> AsyncIterator[AgentServer]:
    """``agent``, then close the sampler's GPU source once the agent is stopped."""
    try:
        async with agent as server:
            yield server
    finally:
        sampler.source.close()


@dataclass
class _Agent:
    node: DemoNode
    workdir: Path
    sampler: Sampler
    server: AgentServer
    events: NodeGpuEvents | None = None


@dataclass
class Demo:
    """The running pieces of one demo: temp dir, stub API server, agents and the server."""

    config: DemoConfig
    cluster: DemoCluster = field(init=False)
    tmp: Path | None = None
    api: StubApiServer | None = None
    agents: list[_Agent] = field(default_factory=list)
    agent_port: int = 0
    listen_port: int = 0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _server: UvicornServer | None = None
    _agent_steps: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    _ticker: asyncio.Task[None] | None = None
    _started_at: float = 0.0
    # (node, GPU UUID) of the GPU the events scenario has lost, once it has.
    _lost: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        try:
            cluster = build_cluster(
                self.config.nodes,
                self.config.gpus_per_node,
                allocation_nodes=self.config.allocation_nodes,
            )
            # History's scenario: a pod that is deleted while its process runs.
            self.cluster = with_deleted_pod(cluster)
        except ValueError as exc:
            raise DemoError(str(exc)) from None

    @property
    def token_file(self) -> Path:
        assert self.tmp is not None
        return self.tmp / "agent-token"

    @property
    def kubeconfig(self) -> Path:
        """The kubeconfig for the embedded cluster: the server's, and kubectl's if wanted."""
        assert self.tmp is not None
        return self.tmp / "kubeconfig"

    async def start(self) -> None:
        """Write the fixtures and start the API server and the agents."""
        self.listen_port = _check_listen(self.config.listen_host, self.config.listen_port)
        self.tmp = Path(tempfile.mkdtemp(prefix="gpugraph-demo-"))
        self._started_at = time.monotonic()
        # The agents require a token and the server sends it, as in the Helm chart.
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32))
        self.api = StubApiServer()
        self.api.load(
            pods=self.cluster.pods,
            nodes=self.cluster.node_objects,
            claims=self.cluster.claims,
            slices=self.cluster.slices,
        )
        self.api.start()
        write_kubeconfig(str(self.kubeconfig), self.api.url)
        self._add_service()
        await self._start_agents()
        self._ticker = asyncio.create_task(self._tick(), name="gpugraph-demo-gpus")

    def _add_service(self) -> None:
        """The Service the Helm chart makes, so clients reach the server as in a cluster:
        through the API server's service proxy (``gpugraph top`` with only a kubeconfig)."""
        from ..top.connection import DEFAULT_NAMESPACE, DEFAULT_SERVICE, SERVER_LABELS, SERVICE_PORT

        assert self.api is not None
        self.api.services.add(
            DEFAULT_NAMESPACE,
            DEFAULT_SERVICE,
            ports={SERVICE_PORT: 80},
            backend=(self.loopback_host, self.listen_port),
            labels={**SERVER_LABELS, "app.kubernetes.io/instance": DEFAULT_SERVICE},
        )

    async def _start_agents(self) -> None:
        up = [n for n in self.cluster.nodes if n.agent_up]
        token = self.token_file.read_text()
        last_error: OSError | None = None
        # Every agent listens on its node's own loopback address, all on one
        # port (the server's --agent-port). A port taken on one address is retried.
        for _ in range(5):
            self.agent_port = _free_port(up[0].ip)
            try:
                for node in up:
                    self.agents.append(await self._start_agent(node, token))
                return
            except OSError as exc:
                last_error = exc
                await self._stop_agents()
        raise DemoError(f"cannot start the node agents: {last_error}")

    async def _start_agent(self, node: DemoNode, token: str) -> _Agent:
        assert self.tmp is not None
        workdir = self.tmp / "nodes" / node.name
        proc_root = workdir / "proc"
        write_proc_tree(proc_root, node.processes)
        nvml = workdir / "nvml.json"
        write_fake_nvml(nvml, fake_nvml_document(node, 0.0))
        # Each agent judges how every allocation is used, with the agent's own defaults.
        names = PodNames()
        judge = AllocationJudge(
            node_name=node.name,
            boot_id=read_boot_id(str(proc_root)),
            policy=IdlePolicy(),
            pod_names=names,
            interval=self.config.interval,
        )
        # Each agent keeps its occupancy log in the demo's temp dir; the first has a past,
        # and the allocation nodes' idle pods have been idle since before the demo.
        history = history_log(workdir, proc_root, pod_names=names, allocations=judge)
        if node is self.cluster.nodes[0]:
            await asyncio.to_thread(backfill, history, self.cluster)
        await asyncio.to_thread(backfill_idle, history, node.name, self.cluster)
        # The node's kubelet: its PodResources API on a unix socket, as the agent reads it.
        socket = str(workdir / "kubelet.sock")
        if len(socket) > _MAX_SOCKET_PATH:
            # A unix socket's path must fit in 108 bytes; a deep TMPDIR would not.
            short = tempfile.mkdtemp(prefix="gpugraph-kubelet-", dir="/tmp")
            self._agent_steps.callback(shutil.rmtree, short, ignore_errors=True)
            socket = str(Path(short) / "kubelet.sock")
        events = node_events(node, workdir, names, history, read_boot_id(str(proc_root)))
        kubelet = FakeKubelet(socket, data=node.kubelet or {"pods": []}).start()
        self._agent_steps.callback(kubelet.stop)
        client = PodResourcesClient(socket)
        self._agent_steps.callback(client.close)
        sampler = Sampler(
            FakeGpuSource(nvml),
            build_resolver("cgroup", proc_root=str(proc_root)),
            node_name=node.name,
            interval=self.config.interval,
            on_scan=scan_hooks(history, events),
            pod_resources=PodResourcesPoller(
                client.list, interval=self.config.interval, list_replicas=client.replicas
            ),
            judge=judge,
        )
        server = await self._agent_steps.enter_async_context(
            _closing_source(
                sampler,
                agent_running(
                    sampler,
                    f"{node.ip}:{self.agent_port}",
                    token=token,
                    grace=0.5,
                    join_timeout=5.0,
                    history=history,
                    events=events,
                ),
            )
        )
        return _Agent(node, workdir, sampler, server, events)

    async def _tick(self) -> None:
        """Rewrite every node's fake-NVML file each interval, so the numbers move."""
        while True:
            await asyncio.sleep(self.config.interval)
            t = time.monotonic() - self._started_at
            for agent in self.agents:
                try:
                    self._write_gpus(agent, t)
                except OSError as exc:
                    log.warning("cannot update the fake GPUs of %s: %s", agent.node.name, exc)

    def _write_gpus(self, agent: _Agent, t: float) -> None:
        document = fake_nvml_document(agent.node, t)
        if self._lost is not None and self._lost[0] == agent.node.name:
            mark_lost(document, self._lost[1])
        write_fake_nvml(agent.workdir / "nvml.json", document)

    async def raise_gpu_events(self) -> None:
        """The events scenario: the driver blames a process on the shared GPU for XID 13
        once its agent knows the pods' names, and another node's GPU is lost."""
        node, gpu_index, pid, name = blamed_process(self.cluster)
        agent = next((a for a in self.agents if a.node.name == node.name), None)
        if agent is None:
            return
        uids = [p.pod_uid for p in node.processes if p.gpu_index == gpu_index and p.pod_uid]
        deadline = time.monotonic() + READY_TIMEOUT
        while any(agent.server.pod_names.get(uid) is None for uid in uids):
            if time.monotonic() > deadline or self.stopping.is_set():
                log.warning("the agent of %s was not told the pod names in time", node.name)
                break
            await asyncio.sleep(0.1)
        recorded = agent.events.recorder.counts if agent.events is not None else None
        before = recorded.records if recorded is not None else 0
        with (agent.workdir / KERNEL_LOG).open("a") as kernel_log:
            kernel_log.write(kernel_xid_line(gpu_index, pid, name, sequence=1))
        # The XID is recorded first, so the two events always list in the same order.
        deadline = time.monotonic() + READY_TIMEOUT
        while recorded is not None and recorded.records == before:
            if time.monotonic() > deadline or self.stopping.is_set():
                break
            await asyncio.sleep(0.05)
        lost = lost_gpu(self.cluster)
        holder = next((a for a in self.agents if lost and a.node.name == lost[0]), None)
        if lost is None or holder is None or holder.events is None:
            return
        # Lost for as long as its agent takes to record it, then back: the demo's other
        # examples show every GPU, so the loss is over before the demo says it is ready.
        found = holder.events.recorder.counts.lost_gpus
        for losing in (True, False):
            self._lost = lost if losing else None
            self._write_gpus(holder, time.monotonic() - self._started_at)
            # Scanned now, not at the agents' next interval (an hour in some tests).
            await asyncio.to_thread(holder.sampler.scan)
            deadline = time.monotonic() + READY_TIMEOUT
            while (lost[1] in found) != losing and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

    async def delete_running_pod(self) -> None:
        """Delete the history scenario's pod while it runs, once its agent knows its name."""
        uid = deleted_pod_uid(self.cluster)
        first = self.cluster.nodes[DELETED_NODE].name
        agent = next((a for a in self.agents if a.node.name == first), None)
        if agent is None or self.api is None:
            return
        deadline = time.monotonic() + READY_TIMEOUT
        while agent.server.pod_names.get(uid) is None:
            if time.monotonic() > deadline or self.stopping.is_set():
                log.warning("the agent of %s was not told the pod names in time", first)
                break
            await asyncio.sleep(0.1)
        self.api.delete_pod(*DELETED_POD)

    def settings(self) -> Settings:
        """The server's settings: node-ip discovery of the agents, the token, the stub cluster."""
        assert self.tmp is not None
        return Settings(
            listen_host=self.config.listen_host,
            listen_port=self.listen_port,
            kubeconfig=self.kubeconfig,
            agent_discovery="node-ip",
            agent_port=self.agent_port,
            agent_token_file=self.token_file,
            log_level=self.config.log_level,
            auth_mode="kubernetes" if self.config.auth else "none",
        )

    async def serve(self) -> None:
        """Run the real server (cache, agent pool, app) until a stop is requested."""
        from ..serve import services_running, uvicorn_config

        settings = self.settings()
        async with services_running(settings) as services:
            self._server = UvicornServer(uvicorn_config(services.app, settings), own_signals=False)
            # A stop requested while the cache and pool were starting still counts.
            self._server.should_exit = self.stopping.is_set()
            await self._server.serve()

    def request_stop(self, sig: int = signal.SIGTERM) -> None:
        """Begin a graceful shutdown; a second Ctrl-C stops waiting for open connections."""
        server = self._server
        if server is not None:
            if server.should_exit and sig == signal.SIGINT:
                server.force_exit = True
            server.should_exit = True
        self.stopping.set()

    @property
    def loopback_host(self) -> str:
        """The host to reach the server at: a wildcard is reached on loopback."""
        # "::" listens on IPv6 only.
        host = self.config.listen_host
        return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)

    @property
    def base_url(self) -> str:
        return f"http://{join_host_port(self.loopback_host, self.listen_port)}"

    async def wait_ready(self, serving: asyncio.Task[None]) -> str | None:
        """Wait until /readyz answers 200; the GraphiQL URL, or None if stopped first."""
        url = f"{self.base_url}/readyz"
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.stopping.is_set():
                return None
            if serving.done():
                error = serving.exception() if not serving.cancelled() else None
                raise DemoError(f"the server stopped while starting: {error!r}")
            if await asyncio.to_thread(_http_ok, url):
                await self.delete_running_pod()
                await self.raise_gpu_events()
                return f"{self.base_url}/graphql"
            await asyncio.sleep(0.1)
        raise DemoError(f"the server did not become ready within {READY_TIMEOUT:g}s")

    def banner(self, graphiql_url: str) -> str:
        """What the demo prints once it is up."""
        from ..http import cluster_map, graphiql

        c = self.config
        cluster = self.cluster
        # Every node counts, the allocation nodes' smaller ones too.
        gpus = sum(len(node.gpus) for node in cluster.nodes)
        lines = [
            "",
            f"gpugraph demo: {len(cluster.nodes)} nodes, {gpus} fake {GPU_NAME} GPUs, "
            f"changing every {c.interval:g}s",
        ]
        for node in self.cluster.nodes:
            where = f"{node.ip}:{self.agent_port}"
            state = "agent up" if node.agent_up else "agent DOWN (on purpose)"
            lines.append(f"  {node.name:<14} {where:<22} {state}")
        lines += [
            "",
            f"  GPU map    {self.base_url}{MAP_PATH}",
            f"  GraphiQL   {graphiql_url}",
            f"  GraphQL    POST {graphiql_url}",
            f"  gpu-pods   {self.base_url}/gpu-pods?worker_id={self.cluster.worker[1]}",
            f"  metrics    {self.base_url}/metrics",
            f"  kubectl    kubectl --kubeconfig {self.kubeconfig} get pods -A",
            f"  top        gpugraph top --kubeconfig {self.kubeconfig}{self._top_token()}",
        ]
        if not (graphiql.assets_present() and cluster_map.assets_present()):
            lines.append(
                "  (GraphiQL's and the map's assets are not built: run `make web`; "
                "the pages explain)"
            )
        if self.config.auth and self.api is not None:
            reviews = self.api.reviews
            lines += [
                "",
                "Auth is on: send one of these as 'Authorization: Bearer <token>' (in GraphiQL:",
                'the Headers tab, {"Authorization": "Bearer <token>"}):',
                f"  admin      {reviews.token_of('admin')}",
                "             sees every namespace, node, host process and command line",
                f"  research   {reviews.token_of('research-user')}",
                "             sees only pods in research, their nodes and GPUs, no command lines;",
                "             a GPU it shares with another tenant would count their processes in",
                "             hiddenProcessCount/hiddenMemoryBytes (0 here: its GPUs are its own)",
            ]
        shared_node, shared_uuid = cluster.shared_gpu
        orphan_node, orphan_pid = cluster.orphan
        lines += [
            "",
            "What to look for:",
            f"  shared GPU    {shared_uuid} on {shared_node}, used by two pods",
            f"  no pod        PID {orphan_pid} on {orphan_node} holds GPU memory outside any pod",
            f"  unrequested   pod {'/'.join(cluster.unrequested)} uses a GPU it never requested",
            f"  agent down    {cluster.down_node}: its gpus are null, with an error naming it",
            f"  history       pod {'/'.join(FINISHED_POD)} finished an hour ago "
            f"({cluster.nodes[0].name}), {'/'.join(DELETED_POD)} was deleted while running "
            f"({cluster.nodes[DELETED_NODE].name})",
            f"  not allocated pod {'/'.join(cluster.misallocated)} runs on a GPU its kubelet did "
            "not give it (example 4)",
            "  allocations   MIG, time-sliced and DRA (template claims) nodes: "
            "kubectl get resourceclaims,resourceslices -A",
            f"  GPU events    XID 13 on {shared_uuid}, blamed on a process of one of its two "
            "pods; a GPU lost on another node (query below)",
        ]
        if cluster.idle[0]:
            lines += [
                f"  idle GPUs     pod {'/'.join(cluster.unused)} holds a GPU with no process on "
                "it (UNUSED),",
                f"                {'/'.join(cluster.idle)} holds memory at 0% SM (IDLE); "
                "query below",
            ]
        lines += ["", "Paste one of these into GraphiQL:", ""]
        for n, query in enumerate(example_queries(cluster), 1):
            lines += [f"--- example {n} ---", query, ""]
        since = datetime.datetime.fromtimestamp(time.time() - 86400, datetime.UTC)
        history_gpu = cluster.nodes[0].gpus[1].uuid
        lines += [
            "--- history ---",
            HISTORY_QUERY.format(uuid=history_gpu, since=since.strftime("%Y-%m-%dT%H:%M:%SZ")),
            "",
        ]
        if cluster.idle[0]:
            lines += ["--- idle GPUs ---", IDLE_QUERY, ""]
        started = datetime.datetime.fromtimestamp(time.time() - 3600, datetime.UTC)
        lines += [
            "--- GPU events ---",
            EVENTS_QUERY.format(since=started.strftime("%Y-%m-%dT%H:%M:%SZ")),
            "",
        ]
        lines.append("Press Ctrl-C to stop.")
        return "\n".join(lines)

    def _top_token(self) -> str:
        """With auth on, the admin's ``--token`` for the top line: the kubeconfig has no token."""
        if not (self.config.auth and self.api is not None):
            return ""
        # "=": a token may begin with "-", which argparse would take for a flag.
        return f" --token={self.api.reviews.token_of('admin')}"

    async def _stop_agents(self) -> None:
        self.agents = []
        steps, self._agent_steps = self._agent_steps, contextlib.AsyncExitStack()
        # Every step of every agent runs even if one fails.
        await steps.aclose()

    async def _stop_ticker(self) -> None:
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.cancel()
            try:
                await ticker
            except asyncio.CancelledError:
                pass
            except Exception:
                # Shutdown goes on regardless; the crash is only worth a log line.
                log.warning("the fake-GPU updater had failed", exc_info=True)

    def _stop_api(self) -> None:
        api, self.api = self.api, None
        if api is not None:
            api.stop()

    def _remove_tmp(self) -> None:
        tmp, self.tmp = self.tmp, None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    async def stop(self) -> None:
        """Stop everything started and delete the temp dir; each step runs even if one fails."""
        async with contextlib.AsyncExitStack() as steps:
            # Run last to first: the ticker, the agents, the API server, the temp dir.
            steps.callback(self._remove_tmp)
            steps.callback(self._stop_api)
            steps.push_async_callback(self._stop_agents)
            steps.push_async_callback(self._stop_ticker)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _free_port(host: str) -> int:
    """A port free on ``host`` now; DemoError when ``host`` is not a local address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                raise DemoError(
                    f"cannot bind {host}: the demo gives every node its own loopback address "
                    "(127.0.0.2, 127.0.0.3, ...), which Linux provides; elsewhere add them, "
                    "e.g. `sudo ifconfig lo0 alias 127.0.0.2 up` on macOS"
                ) from None
            raise
        port: int = sock.getsockname()[1]
        return port


def _check_listen(host: str, port: int) -> int:
    """The port to serve on (a free one for 0); DemoError if the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise DemoError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
        bound: int = sock.getsockname()[1]
        return bound

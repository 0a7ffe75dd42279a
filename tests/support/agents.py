"""Real node agents for tests: in a thread of this process, or as a subprocess.

Both serve real gRPC on a loopback address with an OS-picked port:

- ``start_agent_thread(source, ...)`` runs ``node_resolver.agent.agent_running``
  on its own event loop in a thread, so sync and async tests alike can call
  it, and exposes the sampler and server for counting scans and calls.
- ``start_agent_process(nvml_file, ...)`` runs ``python -m node_resolver``
  exactly as deployed, with a fake NVML file (or, with ``None`` and an ``env``
  from ``tests.support.libnvml.library_env``, the real NVML path through the
  fake C library) and optionally a fake /proc tree (see ``write_proc_tree``).

Both are context managers and stop the agent on exit; ``sample_of(address)``
asks either for its current sample over gRPC.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from api.demo.cluster.fake_proc import HOST_CGROUP, write_process
from node_resolver.agent import agent_running
from node_resolver.allocation_use import AllocationJudge
from node_resolver.cli import LISTENING, scan_hooks
from node_resolver.client import AgentClient
from node_resolver.gpu_events.node_events import NodeGpuEvents
from node_resolver.gpu_source import GpuSource
from node_resolver.history.log import HistoryLog
from node_resolver.models import ContainerRef, NodeSample
from node_resolver.pids import PidResolver, ResolvedProcess
from node_resolver.pod_resources import PodResourcesPoller
from node_resolver.sampler import Sampler
from node_resolver.service import AgentServer

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30.0
# A pod and one of its containers, for agents that place a process in a pod.
POD_UID = "9d1b7c44-aaaa-bbbb-cccc-000011112222"
CONTAINER_ID = "b" * 64


class CountingSource:
    """Wraps a GPU source, counting scans and failing on demand (set ``fail_with``).

    Set ``gate`` to hold every scan until the event is set (at most a minute).
    """

    def __init__(self, inner: GpuSource) -> None:
        self.inner = inner
        self.samples = 0
        self.fail_with: Exception | None = None
        self.gate: threading.Event | None = None

    def sample(self) -> NodeSample:
        """The inner source's sample, or ``fail_with`` raised."""
        if self.gate is not None:
            self.gate.wait(60)
        self.samples += 1
        if self.fail_with is not None:
            raise self.fail_with
        return self.inner.sample()

    def close(self) -> None:
        """Close the inner source."""
        self.inner.close()


# -- PID resolution without a real host ---------------------------------------


class StaticResolver:
    """A PidResolver over a fixed table; PIDs missing from it count as exited."""

    def __init__(self, processes: Mapping[int, ResolvedProcess] | None = None) -> None:
        self.processes = dict(processes or {})
        self.calls = 0

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        """Resolve the PIDs the table knows."""
        self.calls += 1
        return {pid: self.processes[pid] for pid in pids if pid in self.processes}

    def close(self) -> None:
        """Nothing to release."""


class AllAliveResolver:
    """A PidResolver that finds every PID alive, in no container, named ``proc-<pid>``."""

    def resolve(self, pids: Collection[int]) -> dict[int, ResolvedProcess]:
        """Resolve every PID."""
        return {pid: ResolvedProcess(pid, 1, f"proc-{pid}", None, None) for pid in pids}

    def close(self) -> None:
        """Nothing to release."""


def sample_of(address: str, token: str | None = None) -> NodeSample:
    """The agent at ``address``'s current sample, over a real gRPC call (from sync tests)."""

    async def once() -> NodeSample:
        async with AgentClient(address, token=token) as client:
            return (await client.get_snapshot(timeout=10)).sample

    return asyncio.run(once())


def resolved(
    pid: int,
    name: str = "python",
    *,
    container_id: str | None = None,
    pod_uid: str | None = None,
    runtime: str = "containerd",
    cmdline: str | None = None,
) -> ResolvedProcess:
    """A ResolvedProcess, in a container when ``container_id`` is given."""
    container = ContainerRef(container_id, runtime, pod_uid) if container_id else None
    return ResolvedProcess(pid, 1000 + pid, name, cmdline, container)


# -- a fake /proc tree ----------------------------------------------------------


@dataclass(frozen=True)
class FakeProc:
    """One process in a fake /proc tree."""

    comm: str = "python"
    # The /proc/<pid>/cgroup content; the default is a host process (cgroup v2 root).
    cgroup: str = HOST_CGROUP
    cmdline: Sequence[str] = ("python", "train.py")
    start_time: int = 4242


def write_proc_tree(root: Path, processes: Mapping[int, FakeProc]) -> Path:
    """Lay out ``<root>/<pid>/{stat,comm,cgroup,cmdline,task}`` like the kernel's /proc."""
    root.mkdir(parents=True, exist_ok=True)
    for pid, proc in processes.items():
        write_process(
            root,
            pid,
            comm=proc.comm,
            start_time=proc.start_time,
            cgroup=proc.cgroup,
            cmdline=proc.cmdline,
        )
    return root


# -- an agent in a thread ---------------------------------------------------------


class AgentThread:
    """A running in-process agent; ``address`` is HOST:PORT."""

    def __init__(
        self,
        sampler: Sampler,
        server: AgentServer,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread,
        stopping: asyncio.Event,
    ) -> None:
        assert server.address is not None, "the server is listening"
        self.sampler = sampler
        self.server = server
        self.address: str = server.address
        self._loop = loop
        self._thread: threading.Thread | None = thread
        self._stopping = stopping

    def stop(self) -> None:
        """Stop serving and sampling; safe to call twice."""
        if self._thread is None:
            return
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(timeout=20)
        self._thread = None

    def __enter__(self) -> AgentThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_agent_thread(
    source: GpuSource,
    *,
    node_name: str = "node-a",
    resolver: PidResolver | None = None,
    host: str = "127.0.0.1",
    token: str | Callable[[], str] | None = None,
    interval: float = 0.2,
    wait_serving: bool = True,
    history: HistoryLog | None = None,
    pod_resources: PodResourcesPoller | None = None,
    metrics: bool = False,
    metrics_token: str | None = None,
    judge: AllocationJudge | None = None,
    clock: Callable[[], float] = time.time,
    events: NodeGpuEvents | None = None,
) -> AgentThread:
    """Run ``agent_running`` for ``source`` on ``host``, a free port, in a thread.

    Returns once health reports SERVING (a first sample exists), or with
    ``wait_serving=False`` once listening. With ``metrics``, the node's
    ``/metrics`` is served on another free port (``server.metrics.address``).
    """
    sampler = Sampler(
        source,
        resolver or AllAliveResolver(),
        node_name=node_name,
        interval=interval,
        on_scan=scan_hooks(history, events),
        pod_resources=pod_resources,
        judge=judge,
        clock=clock,
    )
    loop = asyncio.new_event_loop()
    started: Future[tuple[AgentServer, asyncio.Event]] = Future()

    async def serve() -> None:
        stopping = asyncio.Event()
        try:
            async with agent_running(
                sampler,
                f"{host}:0",
                token=token,
                grace=0.5,
                join_timeout=10,
                history=history,
                events=events,
                metrics_listen=f"{host}:0" if metrics else None,
                metrics_token=(lambda: metrics_token) if metrics_token else None,
            ) as server:
                started.set_result((server, stopping))
                await stopping.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            raise

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(serve())
        except BaseException:
            pass  # a failed start reaches the caller through ``started``
        finally:
            loop.close()

    thread = threading.Thread(target=run, name=f"agent-{node_name}", daemon=True)
    thread.start()
    server, stopping = started.result(timeout=STARTUP_TIMEOUT)
    agent = AgentThread(sampler, server, loop, thread, stopping)
    if wait_serving:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not server.serving:
            if time.monotonic() > deadline:
                agent.stop()
                raise RuntimeError(f"agent {agent.address} did not report SERVING in time")
            time.sleep(0.01)
    return agent


# -- an agent subprocess -------------------------------------------------------


class AgentProcess:
    """A running ``python -m node_resolver``; ``address`` is HOST:PORT."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path
        self.address = ""

    def logs(self) -> str:
        """Everything the agent wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 20.0) -> int:
        """Send SIGTERM and wait for the exit status (SIGKILL if it hangs)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        return self.process.returncode

    def __enter__(self) -> AgentProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def agent_command(*args: str) -> list[str]:
    """The command line that runs the agent from this checkout."""
    return [sys.executable, "-m", "node_resolver", *args]


def agent_env(**extra: str) -> dict[str, str]:
    """An environment in which ``python -m node_resolver`` imports this checkout."""
    env = dict(os.environ)
    env.pop("GPUGRAPH_NVML_FAKE", None)
    env.pop("NODE_NAME", None)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{REPO_ROOT}{os.pathsep}{path}" if path else str(REPO_ROOT)
    env.update(extra)
    return env


def start_agent_process(
    nvml_file: str | os.PathLike[str] | None,
    *,
    log_path: Path,
    node_name: str = "node-a",
    host: str = "127.0.0.1",
    proc_root: str | os.PathLike[str] | None = None,
    pid_resolver: str = "cgroup",
    token_file: str | os.PathLike[str] | None = None,
    interval: float = 0.2,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> AgentProcess:
    """Start the agent CLI on ``host`` at a free port; returns once health reports SERVING.

    ``nvml_file`` None leaves ``--nvml-fake`` out: the agent then loads NVML.
    """
    args = [
        "--node-name", node_name,
        "--listen", f"{host}:0",
        "--pid-resolver", pid_resolver,
        "--interval", str(interval),
    ]  # fmt: skip
    if nvml_file is not None:
        args += ["--nvml-fake", os.fspath(nvml_file)]
    if proc_root is not None:
        args += ["--proc-root", os.fspath(proc_root)]
    if token_file is not None:
        args += ["--token-file", os.fspath(token_file)]
    args += list(extra_args)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            agent_command(*args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=dict(env) if env is not None else agent_env(),
        )
    agent = AgentProcess(process, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if not agent.address:
            for line in agent.logs().splitlines():
                if LISTENING in line:
                    agent.address = line.split(LISTENING, 1)[1].split()[0]
        if agent.address and _health_serving(agent.address):
            return agent
        if process.poll() is not None:
            raise RuntimeError(f"agent exited with {process.returncode}:\n{agent.logs()}")
        time.sleep(0.05)
    agent.stop()
    raise RuntimeError(f"agent not SERVING within {STARTUP_TIMEOUT}s:\n{agent.logs()}")


def _health_serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def gpu_json(index: int, processes: Sequence[Mapping[str, Any]] = (), **fields: Any) -> dict:
    """One GPU of a fake NVML file, with plausible H200 metrics unless overridden."""
    gpu: dict[str, Any] = {
        "index": index,
        "uuid": f"GPU-{index:08d}-0000-0000-0000-000000000000",
        "name": "NVIDIA H200",
        "memoryTotalBytes": 150754820096,
        "memoryUsedBytes": 2147483648,
        "utilizationGpu": 87,
        "utilizationMemory": 40,
        "temperatureC": 55,
        "powerUsageWatts": 350.5,
        "powerLimitWatts": 700.0,
        "processes": list(processes),
    }
    gpu.update(fields)
    return gpu


def nvml_json(gpus: Sequence[Mapping[str, Any]], **fields: Any) -> dict:
    """A whole fake NVML file's content."""
    data: dict[str, Any] = {
        "driverVersion": "550.90.07",
        "cudaDriverVersion": 12040,
        "gpus": list(gpus),
    }
    data.update(fields)
    return data

"""The processes ``bench/hostile.py`` attacks besides the demo, each in a process of its own.

- ``stub_api_server``: the stub Kubernetes API server with the demo's users, in
  a process that the bench can stop (SIGSTOP) as the issue did;
- ``serve_process``: a real ``gpugraph serve --auth kubernetes`` against it;
- ``agent_process``: a real ``gpugraph agent`` with a token file.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import httpx

from api.demo.cluster import StubApiServer, make_pod, write_kubeconfig
from api.demo.cluster.synthetic import demo_nodes, demo_pods
from node_resolver.fake_nvml import write_fake_nvml
from tests.support.agents import AgentProcess, gpu_json, nvml_json, start_agent_process
from tests.support.demo_process import free_port

ROOT = Path(__file__).resolve().parent.parent


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident set (``VmHWM``: its peak so far), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def _run_stub(kubeconfig: str, conn: Connection) -> None:
    stub = StubApiServer()
    # And one pod of the research user's, so that it sees node-0 (the usage flood).
    research = make_pod("job-0", "research", "node-0", gpu_limit=1, managed_fields=False)
    stub.load(pods=[*demo_pods(40, 4, managed_fields=False), research], nodes=demo_nodes(4))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with stub:
        write_kubeconfig(kubeconfig, stub.url)
        conn.send(
            {
                "admin": stub.reviews.token_of("admin"),
                "research": stub.reviews.token_of("research-user"),
            }
        )
        done.wait()


@dataclass
class StubProcess:
    """The stub API server's process, its kubeconfig and the demo users' tokens."""

    process: multiprocessing.process.BaseProcess
    kubeconfig: str
    tokens: dict[str, str]

    def stall(self) -> None:
        """Stop the process: connections are accepted by the kernel and never answered."""
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        """Let it run again."""
        assert self.process.pid is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        """End it."""
        self.resume()
        self.process.terminate()
        self.process.join(10)


def stub_api_server(workdir: Path) -> StubProcess:
    """Start the stub API server in a process of its own; returns once it serves."""
    ours, theirs = multiprocessing.Pipe()
    kubeconfig = str(workdir / "kubeconfig")
    process = multiprocessing.get_context("spawn").Process(
        target=_run_stub, args=(kubeconfig, theirs), daemon=True
    )
    process.start()
    if not ours.poll(60):
        process.kill()
        raise RuntimeError("the stub API server did not start")
    return StubProcess(process, kubeconfig, ours.recv())


@dataclass
class ServeProcess:
    """``gpugraph serve`` in its own process, its URL and its output."""

    process: subprocess.Popen[str]
    url: str
    log_path: Path

    def output(self) -> str:
        """Everything it wrote so far."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGINT, then kill if it does not stop."""
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()


def serve_process(stub: StubProcess, workdir: Path, *flags: str) -> ServeProcess:
    """A real ``gpugraph serve --auth kubernetes`` on the stub; returns once ``/readyz`` is 200."""
    port = free_port()
    log_path = workdir / "serve.log"
    with open(log_path, "w") as log:
        argv = [sys.executable, "-m", "api.cli", "serve", "--listen", f"127.0.0.1:{port}"]
        argv += ["--kubeconfig", stub.kubeconfig, "--agent-port", str(free_port())]
        argv += ["--log-level", "warning", "--auth", "kubernetes", *flags]
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    served = ServeProcess(process, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(f"{served.url}/readyz", timeout=2).status_code == 200:
                return served
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    served.stop()
    raise RuntimeError("gpugraph serve did not become ready:\n" + served.output())


AGENT_TOKEN = "hostile-bench-agent-token"


def agent_process(workdir: Path) -> AgentProcess:
    """A real ``gpugraph agent`` (8 fake GPUs) that requires ``AGENT_TOKEN``."""
    nvml = workdir / "nvml.json"
    write_fake_nvml(nvml, nvml_json([gpu_json(i) for i in range(8)]))
    token = workdir / "agent-token"
    token.write_text(AGENT_TOKEN)
    return start_agent_process(nvml, log_path=workdir / "agent.log", token_file=token, interval=1.0)


def scratch() -> tempfile.TemporaryDirectory[str]:
    """A temporary directory for one run's files."""
    return tempfile.TemporaryDirectory(prefix="gpugraph-hostile-")

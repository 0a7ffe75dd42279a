"""``gpugraph demo`` as a user runs it: a subprocess in a session of its own, read as it prints.

For the demo's own tests, the ``gpugraph top`` tests and the Prometheus end
to end tests. ``tests.support.demo`` runs the same cluster in a thread instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = [
    "GPUS",
    "NODES",
    "ROOT",
    "STARTUP_TIMEOUT",
    "STOP_TIMEOUT",
    "RunningDemo",
    "demo",
    "free_port",
    "gpugraph_command",
    "ready_demo",
    "start_demo",
]

ROOT = Path(__file__).resolve().parents[2]
# The size of the demo the ``demo`` fixture runs.
NODES = 4
GPUS = 4
STARTUP_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


def gpugraph_command() -> list[str]:
    script = Path(sys.executable).parent / "gpugraph"
    return [str(script)] if script.exists() else [sys.executable, "-m", "api.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RunningDemo:
    process: subprocess.Popen[str]
    url: str
    tmpdir: Path
    output: list[str]
    reader: threading.Thread

    def text(self) -> str:
        return "".join(self.output)

    def all_output(self) -> str:
        """Everything the demo printed, once it has exited."""
        self.reader.join(STOP_TIMEOUT)
        return self.text()

    def query(self, query: str) -> dict[str, Any]:
        response = httpx.post(f"{self.url}/graphql", json={"query": query}, timeout=10)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body


def start_demo(
    tmp_path: Path, *extra: str, command: Sequence[str] = (), cwd: Path = ROOT
) -> RunningDemo:
    """``gpugraph demo`` (``command``, by default this checkout's) on a free port."""
    port = free_port()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [*(command or gpugraph_command()), "demo", "--listen", f"127.0.0.1:{port}", *extra],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    output: list[str] = []
    assert process.stdout is not None
    stdout = process.stdout
    reader = threading.Thread(target=lambda: output.extend(stdout), daemon=True)
    reader.start()
    return RunningDemo(process, f"http://127.0.0.1:{port}", tmpdir, output, reader)


@contextlib.contextmanager
def ready_demo(
    tmp_path: Path, *extra: str, command: Sequence[str] = (), cwd: Path = ROOT
) -> Iterator[RunningDemo]:
    """A demo past its banner; killed, with its whole session, if still running on exit."""
    running = start_demo(tmp_path, *extra, command=command, cwd=cwd)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while "Press Ctrl-C to stop." not in running.text():
            if running.process.poll() is not None:
                pytest.fail(f"demo exited with {running.process.returncode}:\n{running.text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"demo not up after {STARTUP_TIMEOUT:g}s:\n{running.text()}")
            time.sleep(0.1)
        yield running
    finally:
        if running.process.poll() is None:
            os.killpg(running.process.pid, signal.SIGKILL)
            running.process.wait(10)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningDemo]:
    with ready_demo(
        tmp_path_factory.mktemp("demo"),
        "--nodes",
        str(NODES),
        "--gpus-per-node",
        str(GPUS),
        "--interval",
        "0.5",
    ) as running:
        yield running

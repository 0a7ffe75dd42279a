"""Run the real Apollo Gateway (``gateway.mjs`` under Node.js) against given subgraphs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty, Queue
from typing import IO

HERE = Path(__file__).resolve().parent
GATEWAY_SCRIPT = HERE / "gateway.mjs"
INSTALL_COMMAND = "cd tests/federation && npm ci"
# package.json's engines: the gateway's packages need Node.js 20 or newer.
MIN_NODE_MAJOR = 20


@dataclass
class GatewayError(Exception):
    """The gateway did not come up; ``errors`` holds each composition error's message."""

    message: str
    errors: list[str] = field(default_factory=list)
    output: str = ""

    def __str__(self) -> str:
        lines = [f"Apollo Gateway failed: {self.message}"]
        lines += [f"  - {error}" for error in self.errors]
        if self.output:
            lines += ["gateway output:", self.output.rstrip()]
        return "\n".join(lines)


def gateway_missing() -> str | None:
    """Why the gateway cannot run here, or None when Node.js and its packages are installed."""
    node = shutil.which("node")
    if node is None:
        return "Node.js (`node`) is not on PATH"
    version = _node_version(node)
    if version is None:
        return f"cannot tell the version of Node.js at {node} (`node --version` failed)"
    if int(version.split(".")[0]) < MIN_NODE_MAJOR:
        return (
            f"Node.js at {node} is v{version}; the gateway needs {MIN_NODE_MAJOR} or newer "
            "(.ci/run installs one)"
        )
    if not (HERE / "node_modules" / "@apollo" / "gateway" / "package.json").is_file():
        return f"the gateway's npm packages are not installed; run `{INSTALL_COMMAND}`"
    return None


def _node_version(node: str) -> str | None:
    """``node --version`` without the leading v, e.g. "20.18.0"; None if it cannot be read."""
    try:
        result = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = result.stdout.strip().removeprefix("v")
    if result.returncode != 0 or not version.split(".")[0].isdigit():
        return None
    return version


def _pump(stream: IO[str], lines: Queue[str | None], sink: list[str]) -> None:
    for line in iter(stream.readline, ""):
        sink.append(line)
        lines.put(line)
    lines.put(None)


@contextmanager
def running_gateway(
    subgraphs: Mapping[str, str], *, timeout: float = 90.0, introspection_token: str | None = None
) -> Iterator[str]:
    """Start the gateway composing ``subgraphs`` (name -> URL) and yield its URL.

    It forwards each request's Authorization header to the subgraphs; with
    ``introspection_token`` it also authenticates the introspection it composes from.

    Raises GatewayError carrying the composition errors if it cannot compose.
    """
    specs = [f"{name}={url}" for name, url in subgraphs.items()]
    env = dict(os.environ)
    # The gateway's HTTP client honours proxy variables; subgraphs are on loopback.
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    if introspection_token is not None:
        env["GATEWAY_INTROSPECTION_AUTHORIZATION"] = f"Bearer {introspection_token}"
    process = subprocess.Popen(
        ["node", str(GATEWAY_SCRIPT), "--host", "127.0.0.1", "--port", "0", *specs],
        cwd=HERE,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout_lines: Queue[str | None] = Queue()
    stdout_seen: list[str] = []
    stderr_seen: list[str] = []
    threads = [
        threading.Thread(target=_pump, args=(process.stdout, stdout_lines, stdout_seen)),
        threading.Thread(target=_pump, args=(process.stderr, Queue(), stderr_seen)),
    ]
    for thread in threads:
        thread.daemon = True
        thread.start()
    try:
        url = _await_url(stdout_lines, timeout, lambda: _log_text(stdout_seen, stderr_seen))
        yield url
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for thread in threads:
            thread.join(timeout=5)


def _log_text(stdout: list[str], stderr: list[str]) -> str:
    # The JSON status line is already in the error itself; keep only the logs.
    return "".join([line for line in stdout if _parse(line) is None] + stderr)


def _parse(line: str) -> dict[str, object] | None:
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _await_url(lines: Queue[str | None], timeout: float, output: Callable[[], str]) -> str:
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise GatewayError(f"no URL within {timeout:.0f} s", output=output())
        try:
            line = lines.get(timeout=remaining)
        except Empty:
            continue
        if line is None:
            raise GatewayError("gateway exited before serving", output=output())
        message = _parse(line)
        if message is None:
            continue  # the gateway's own log lines
        if "url" in message:
            return str(message["url"])
        if "error" in message:
            items = message.get("errors")
            errors = [
                str(item.get("message", item)) if isinstance(item, dict) else str(item)
                for item in (items if isinstance(items, list) else [])
            ]
            raise GatewayError(str(message["error"]), errors, output=output())

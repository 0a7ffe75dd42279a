"""A real Prometheus and promtool (Debian's ``prometheus`` package) for tests.

Tests that need them call ``require_prometheus()``: a machine without the
package skips them, and CI (GPUGRAPH_REQUIRE_ALL=1) fails instead.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from . import require

__all__ = ["Prometheus", "promtool", "require_prometheus", "running_prometheus"]

STARTUP_TIMEOUT = 60.0


def require_prometheus() -> None:
    """Skip (or, under GPUGRAPH_REQUIRE_ALL=1, fail) without prometheus and promtool."""
    missing = [tool for tool in ("prometheus", "promtool") if shutil.which(tool) is None]
    require(
        not missing,
        f"{' and '.join(missing)} not installed (apt-get install prometheus)",
    )


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool; the completed process, whatever its exit status."""
    return subprocess.run(
        ["promtool", *args], input=stdin, capture_output=True, text=True, timeout=60
    )


@dataclass
class Prometheus:
    """A running Prometheus and its HTTP API."""

    url: str
    process: subprocess.Popen[bytes]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector; fails on a query error."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=30)
        body = response.json()
        assert body.get("status") == "success", (promql, body)
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets."""
        response = httpx.get(f"{self.url}/api/v1/targets", timeout=30)
        targets: list[dict[str, Any]] = response.json()["data"]["activeTargets"]
        return targets


@contextmanager
def running_prometheus(
    workdir: Path, port: int, scrape_configs: list[dict[str, Any]], *, interval: str = "1s"
) -> Iterator[Prometheus]:
    """Prometheus scraping ``scrape_configs`` every ``interval``, stopped on exit."""
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": scrape_configs,
    }
    config_file = workdir / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}"
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config_file}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if process.poll() is not None:
                raise AssertionError(
                    f"prometheus exited with {process.returncode}:\n"
                    + (workdir / "prometheus.log").read_text()
                )
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"prometheus not ready after {STARTUP_TIMEOUT:g} s")
            time.sleep(0.1)
        yield Prometheus(url, process)
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()

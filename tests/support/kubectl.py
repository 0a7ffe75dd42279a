"""The real kubectl (client-go) as a test client: found on PATH, run against a kubeconfig."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from . import require

MIN_KUBECTL = (1, 28)
KUBECTL_TIMEOUT = 30.0


def _version(binary: str) -> tuple[int, int] | None:
    try:
        done = subprocess.run(
            [binary, "version", "--client", "-o", "json"],
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT,
            check=False,
        )
        client = json.loads(done.stdout)["clientVersion"]
    except (OSError, subprocess.TimeoutExpired, ValueError, KeyError):
        return None
    major, minor = (re.match(r"\d+", str(client.get(k, ""))) for k in ("major", "minor"))
    return (int(major[0]), int(minor[0])) if major and minor else None


def kubectl_binary() -> str:
    """The kubectl on PATH, if it is 1.28 or newer; skips (or fails under REQUIRE_ALL) otherwise."""
    binary = shutil.which("kubectl")
    require(binary is not None, "kubectl is not on PATH (.ci/run installs one)")
    assert binary is not None
    version = _version(binary)
    wanted = ".".join(map(str, MIN_KUBECTL))
    require(
        version is not None and version >= MIN_KUBECTL,
        f"kubectl on PATH is {version}, older than {wanted}",
    )
    return binary


@dataclass(frozen=True)
class Kubectl:
    """kubectl with a fixed kubeconfig and its own discovery cache."""

    binary: str
    kubeconfig: Path
    cache_dir: Path

    def command(self, *args: str) -> list[str]:
        """The full command line for ``kubectl ARGS``."""
        return [
            self.binary,
            "--kubeconfig",
            str(self.kubeconfig),
            "--cache-dir",
            str(self.cache_dir),
            *args,
        ]

    def run(self, *args: str) -> str:
        """Run ``kubectl ARGS``; its stdout, asserting it exited 0."""
        return self._run(args, succeeds=True)

    def fail(self, *args: str) -> str:
        """Run ``kubectl ARGS`` expecting it to fail; its stderr."""
        return self._run(args, succeeds=False)

    def _run(self, args: tuple[str, ...], *, succeeds: bool) -> str:
        done = subprocess.run(
            self.command(*args),
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT,
            check=False,
        )
        if succeeds:
            assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
            return done.stdout
        assert done.returncode != 0, f"kubectl {' '.join(args)} succeeded: {done.stdout}"
        return done.stderr


def table(output: str) -> list[dict[str, str]]:
    """kubectl's human output as rows keyed by column header (cells hold no spaces here)."""
    lines = [line.split() for line in output.splitlines() if line.strip()]
    if not lines:
        return []
    header, *rows = lines
    return [dict(zip(header, row, strict=True)) for row in rows]

"""``kubectl gpugraph``: kubectl's plugin convention, and the krew package of its launcher."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from tests.support.kubectl import kubectl_binary

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(sys.executable).parent
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def package() -> ModuleType:
    spec = importlib.util.spec_from_file_location("krew_package", ROOT / "tools/krew/package.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kubectl_runs_the_installed_plugin(tmp_path: Path) -> None:
    kubectl = kubectl_binary()
    env = {**os.environ, "PATH": f"{SCRIPTS}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [kubectl, "gpugraph", "top", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: gpugraph top")


def test_the_krew_archive_is_reproducible_and_the_manifest_names_it(tmp_path: Path) -> None:
    krew = package()
    archive, manifest = krew.build(tmp_path / "one")
    again, _ = krew.build(tmp_path / "two")
    assert archive.read_bytes() == again.read_bytes()
    plugin = yaml.safe_load(manifest.read_text())
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin" and plugin["metadata"]["name"] == "gpugraph"
    [platform] = plugin["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/{plugin['spec']['version']}/{archive.name}")
    with tarfile.open(archive) as tar:
        member = tar.getmember(platform["bin"])
        assert member.mode == 0o755
        # Extraction filters came with Python 3.11.4; Debian 12's python3 is 3.11.2.
        safely: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(tmp_path / "installed", **safely)
    launcher = tmp_path / "installed" / platform["bin"]

    def run(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(launcher), "top", "--help"],
            env={**os.environ, "PATH": path},
            capture_output=True,
            text=True,
            timeout=60,
        )

    found = run(f"{SCRIPTS}{os.pathsep}{SYSTEM_PATH}")
    assert found.returncode == 0 and found.stdout.startswith("usage: gpugraph top")
    missing = run(SYSTEM_PATH)
    assert missing.returncode == 127 and "pipx install gpugraph" in missing.stderr

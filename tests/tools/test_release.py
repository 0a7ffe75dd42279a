"""The release: the wheel a user installs runs from a fresh venv, and the image build pushes.

The wheel is built from this checkout and installed into a new venv with no
access to the checkout. Its dependencies come from the test venv's
site-packages, put on the new venv's path after its own; that directory's
.pth files (among them the checkout's editable install) are not run from
there, so ``api`` and friends can only come from the wheel. No network.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.support import require_on_path
from tests.support.demo_process import STOP_TIMEOUT, ready_demo
from tests.support.project import project_version

ROOT = Path(__file__).resolve().parents[2]


def release_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_dist", ROOT / "tools/release/dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The release builds in isolated environments from PyPI; here the test venv's
    # setuptools (the same pin) builds it, offline.
    dist = release_tool()
    built = dist.build(tmp_path_factory.mktemp("dist"), wheel_only=True, isolation=False)
    (found,) = [p for p in built if p.suffix == ".whl"]
    assert dist.missing_from(found) == []
    return found


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv with only the wheel installed in it."""
    home = tmp_path_factory.mktemp("installed")
    root = home / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
         "--no-deps", "--no-index", str(wheel)],
        check=True,
    )  # fmt: skip
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "test-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    yield root


def run(venv: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command of the venv, run away from the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(venv / "bin" / argv[0]), *argv[1:]],
        cwd=venv.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_wheel_holds_the_generated_code_the_license_and_the_built_assets(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert "node_resolver/generated/agent_pb2.py" in names
    assert f"gpugraph-{project_version()}.dist-info/licenses/LICENSE" in names
    for asset in ("api/static/map/manifest.json", "api/static/graphiql/manifest.json"):
        assert (asset in names) == (ROOT / asset).exists(), asset
    assert not any(n.startswith(("tests/", "bench/", "tools/")) for n in names)


def test_the_installed_command_is_the_wheels_not_the_checkouts(venv: Path) -> None:
    version = run(venv, "gpugraph", "--version")
    assert (version.returncode, version.stdout) == (0, f"gpugraph {project_version()}\n")
    where = run(
        venv,
        "python",
        "-c",
        "import api, node_resolver.generated.agent_pb2 as pb; print(api.__file__, pb.__file__)",
    )
    assert where.returncode == 0, where.stderr
    for path in where.stdout.split():
        assert Path(path).is_relative_to(venv) and not Path(path).is_relative_to(ROOT), path


def test_the_installed_demo_serves_and_stops(venv: Path, tmp_path: Path) -> None:
    with ready_demo(
        tmp_path, "--nodes", "3", "--gpus-per-node", "2", command=[str(venv / "bin" / "gpugraph")],
        cwd=venv.parent,
    ) as demo:  # fmt: skip
        answer = demo.query("{ nodes { name } }")
        assert "gpu-node-0" in [n["name"] for n in answer["data"]["nodes"]]
        metrics = httpx.get(f"{demo.url}/metrics", timeout=10).text
        assert f'gpugraph_build_info{{version="{project_version()}"}} 1.0' in metrics
        # The map's assets came with the wheel when this checkout had built them.
        built = (ROOT / "api/static/map/manifest.json").exists()
        assert httpx.get(f"{demo.url}/map", timeout=10).status_code == (200 if built else 503)
        demo.process.send_signal(signal.SIGTERM)
        assert demo.process.wait(STOP_TIMEOUT) == 0


def test_the_image_is_built_for_both_platforms_and_pushed() -> None:
    require_on_path("make", "apt-get install make")
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "release-image", "IMAGE=registry.example/gpugraph"],
        cwd=ROOT,
        # Run from `make test`, the outer make's MAKEFLAGS would print directory lines.
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert dry[:3] == ["docker", "buildx", "build"]
    assert dry[dry.index("--platform") + 1] == "linux/amd64,linux/arm64"
    assert dry[dry.index("--tag") + 1] == f"registry.example/gpugraph:{project_version()}"
    assert "--push" in dry and dry[-1] == "."

"""Installing from the clone, as the README and docs/operations.md say, with nothing published.

The commands are read from the documents themselves, so a change to either
the docs or what they run shows here. The command-line install runs the
README's block as written, in bash, from a copy of the tree into a fresh
venv, with pip fetching the dependencies (its cache and configuration are
the user's); the image's commands run as ``make -n`` and a render of the
chart with the README's values, since building an image needs a Docker
engine the suite does not assume.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm

from tests.support import require, require_on_path
from tests.support.chart import chart as chart
from tests.support.chart import render
from tests.support.kubectl import kubectl_binary
from tests.support.project import ROOT

README = ROOT / "README.md"
OPERATIONS = ROOT / "docs" / "operations.md"
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
# How long pip may take to fetch, build and install everything, on a slow link.
INSTALL_TIMEOUT = 900


def sh_blocks(document: Path) -> list[str]:
    """Every ```sh block of ``document``."""
    return SH_BLOCK.findall(document.read_text())


def block_with(document: Path, line: str) -> str:
    """The one ```sh block of ``document`` with a command starting ``line``."""
    found = [b for b in sh_blocks(document) if any(x.startswith(line) for x in b.splitlines())]
    assert len(found) == 1, f"{document.name}: {len(found)} blocks run {line!r}"
    return found[0]


def commands(block: str) -> list[list[str]]:
    """The block's commands, as words, without comments."""
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def user_environment(home: Path) -> dict[str, str]:
    """This process's environment for a user whose home is ``home``: pip keeps the real
    user's configuration (its index) and cache; nothing of the test's venv leaks in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    }
    real_home = Path.home()
    env.setdefault("XDG_CONFIG_HOME", str(real_home / ".config"))
    env.setdefault("XDG_CACHE_HOME", str(real_home / ".cache"))
    env["HOME"] = str(home)
    return env


def pip_can_download(env: dict[str, str], where: Path) -> bool:
    """Whether pip reaches its package index (PyPI, or the one configured): one small wheel."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--retries", "0",
             "--timeout", "15", "--dest", str(where), "-q", "h11"],
            env=env, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def clone_of_the_tree(into: Path) -> Path:
    """The files a clone of this checkout has (tracked, and new ones not ignored), copied."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def test_the_readmes_install_from_the_clone_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    block = block_with(README, "pip install .")
    home = tmp_path / "home"
    home.mkdir()
    env = user_environment(home)
    require(
        pip_can_download(env, tmp_path / "probe"),
        "pip cannot download from its package index: installing from the clone needs it",
    )
    kubectl = kubectl_binary()
    # The python3 the README runs: this interpreter's own (>= 3.11), not the test venv's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(Path(sys._base_executable).resolve())  # type: ignore[attr-defined]
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(kubectl).parent), os.defpath])
    clone = clone_of_the_tree(tmp_path / "gpugraph")
    done = subprocess.run(
        ["bash", "-e", "-c", block], cwd=clone, env=env, capture_output=True, text=True,
        timeout=INSTALL_TIMEOUT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # Both helps: `gpugraph --help`, and kubectl running the plugin for `kubectl gpugraph`.
    assert done.stdout.count("usage: gpugraph [-h] [--version] COMMAND") == 2, done.stdout
    # The package came from the copy into the venv, not from this checkout.
    venvs = [p.parent.parent for p in home.glob("*/bin/kubectl-gpugraph")]
    assert len(venvs) == 1, sorted(home.rglob("kubectl-gpugraph"))
    where = subprocess.run(
        [str(venvs[0] / "bin" / "python"), "-c", "import api; print(api.__file__)"],
        cwd=home, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(venvs[0]), where


def dry_run(argv: list[str]) -> list[list[str]]:
    """What ``make`` would run for ``argv`` (``make ...`` as the docs write it), as words."""
    require_on_path("make", "apt-get install make")
    assert argv[0] == "make", argv
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", *argv[1:]],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return [shlex.split(line) for line in out.splitlines() if line.strip()]


def chart_values(helm_install: list[str]) -> dict[str, Any]:
    """The values a ``helm install ... --set a.b=c`` sets."""
    values: dict[str, Any] = {}
    for flag, assignment in itertools.pairwise(helm_install):
        if flag == "--set":
            path, _, value = assignment.partition("=")
            *parents, leaf = path.split(".")
            node = values
            for key in parents:
                node = node.setdefault(key, {})
            node[leaf] = value
    return values


def images(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Every (image, pull policy) of the rendered workloads' containers."""
    return {
        (c["image"], c["imagePullPolicy"])
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def built(plan: list[list[str]]) -> str:
    """The tag ``docker build`` gives in a dry run."""
    (build,) = [words for words in plan if "docker" in words and "build" in words]
    return build[build.index("--tag") + 1]


def test_the_readmes_image_is_the_one_its_chart_install_runs(chart: helm.Chart) -> None:
    block = commands(block_with(README, "helm install"))
    (make,) = [c for c in block if c[0] == "make"]
    (install,) = [c for c in block if c[:2] == ["helm", "install"]]
    plan = dry_run(make)
    image = built(plan)
    # Loaded into the kind cluster the README names, and pushed nowhere.
    kind = dict(a.split("=", 1) for a in make[1:] if "=" in a)["KIND_CLUSTER"]
    assert ["kind", "load", "docker-image", image, "--name", kind] in plan
    assert not any("push" in words or "--push" in words for words in plan)
    values = chart_values(install)
    assert images(render(chart, values)) == {(image, "IfNotPresent")}


def test_every_way_docs_operations_loads_the_image_matches_its_chart_values(
    chart: helm.Chart,
) -> None:
    # The table's rows: a cluster, how its nodes get the image, the chart's values.
    rows = [
        line
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("|") and "`make local-image" in line
    ]
    assert len(rows) >= 4, rows
    for row in rows:
        make = shlex.split(re.findall(r"`(make local-image[^`]*)`", row)[0])
        plan = dry_run(make)
        install = shlex.split(re.findall(r"`(--set image\.repository=[^`]*)`", row)[0])
        values = chart_values(install)
        image = built(plan)
        assert images(render(chart, values)) == {(image, "IfNotPresent")}, row
        pushes = [w for w in plan if w[:2] == ["docker", "push"]]
        assert pushes == ([["docker", "push", image]] if "PUSH=1" in make else []), row


def test_make_says_what_it_installs_before_pip_goes_quiet(tmp_path: Path) -> None:
    # The real recipe, with pip replaced by an echo: what the user sees, in order.
    require_on_path("make", "apt-get install make")
    venv = tmp_path / "venv"
    venv.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "--silent", "install", f"VENV={venv}",
         f"PY={sys.executable}", "PIP_INSTALL=echo PIP-RUNS"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"Installing gpugraph and its dependencies into {venv}"), lines
    assert "takes a minute or so" in lines[0]
    assert lines[1:] == ["PIP-RUNS -e ."]

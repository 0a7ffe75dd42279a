"""The image's recipe, checked without a Docker engine: what it installs, builds and runs as."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import cast

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support import require_on_path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    image: str
    name: str | None
    platform: str | None = None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [i.args for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Split a Dockerfile into stages of (keyword, args), with continuations joined."""
    logical: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or not line:
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "dangling line continuation"

    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        word, _, rest = line.partition(" ")
        keyword, args = word.upper(), rest.strip()
        if keyword == "ARG" and not stages:
            name, _, default = args.partition("=")
            global_args[name] = default
        elif keyword == "FROM":
            image = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], args)
            parts = image.split()
            platform = (
                parts.pop(0).partition("=")[2] if parts[0].startswith("--platform=") else None
            )
            alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(image=parts[0], name=alias, platform=platform))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append(Instruction(keyword, args))
    return stages


STAGES = parse_dockerfile((ROOT / "Dockerfile").read_text())
BY_NAME = {s.name: s for s in STAGES if s.name}


def constraints() -> dict[str, Version]:
    pins: dict[str, Version] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt: {line!r} is not pinned with =="
        key = canonicalize_name(name)
        assert key not in pins, f"constraints.txt pins {name} twice"
        pins[key] = Version(version)
    return pins


PINS = constraints()


def requirement_closure(roots: list[str]) -> set[str]:
    """Every distribution the roots need on this platform, from the installed metadata."""
    env = cast(dict[str, str], default_environment())
    seen: set[tuple[str, str]] = set()  # (distribution, extra or "")
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        key = canonicalize_name(req.name)
        for extra in {"", *req.extras}:
            if (key, extra) in seen:
                continue
            seen.add((key, extra))
            for dep in metadata.requires(key) or []:
                child = Requirement(dep)
                if child.marker is None or child.marker.evaluate({**env, "extra": extra}):
                    todo.append(child)
    return {key for key, _ in seen}


def test_base_images_are_pinned_by_tag() -> None:
    assert len(STAGES) >= 3, "expected web, builder and runtime stages"
    for stage in STAGES:
        if stage.image in BY_NAME:
            continue
        tag = stage.image.partition(":")[2]
        assert tag and tag != "latest", f"{stage.image} is not pinned"
        # A full version, not a floating major like 3.11 or 20.
        assert re.match(r"^\d+\.\d+\.\d+", tag), f"{stage.image} should name a patch release"
    runtime = STAGES[-1]
    assert runtime.image.startswith("python:3.11") and "slim" in runtime.image
    assert BY_NAME["web"].image.startswith("node:20")


def test_only_the_python_stages_are_built_per_target_platform() -> None:
    # The web stage's output is platform-independent JavaScript: build it natively
    # once instead of under emulation for every --platform.
    assert BY_NAME["web"].platform == "$BUILDPLATFORM"
    assert BY_NAME["builder"].platform is None and STAGES[-1].platform is None


def test_build_dependencies_are_pinned_too() -> None:
    builder = BY_NAME["builder"]
    env = " ".join(builder.all("ENV"))
    for variable in ("PIP_CONSTRAINT", "PIP_BUILD_CONSTRAINT"):
        assert f"{variable}=/src/constraints.txt" in env, f"the builder does not set {variable}"
    assert "/src" in builder.all("WORKDIR")
    for spec in PYPROJECT["build-system"]["requires"]:
        req = Requirement(spec)
        key = canonicalize_name(req.name)
        assert key in PINS, f"build requirement {req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(PINS[key]), f"{req.name}=={PINS[key]} is outside {spec}"


def test_web_assets_are_built_and_baked_in() -> None:
    from api.http.cluster_map import DEFAULT_STATIC_DIR as MAP_DIR
    from api.http.graphiql import DEFAULT_STATIC_DIR as GRAPHIQL_DIR

    web = BY_NAME["web"]
    copies = web.all("COPY")
    assert any("web/package-lock.json" in c for c in copies), "npm ci needs the lock file"
    runs = web.all("RUN")
    assert any(shlex.split(r)[:2] == ["npm", "ci"] for r in runs)
    builder = BY_NAME["builder"]
    baked = [shlex.split(c) for c in builder.all("COPY") if c.startswith("--from=web")]
    # GraphiQL's copied bundles and the map's esbuild bundle, each into the
    # folder its page reads.
    expected = []
    for script, static_dir in (("build.mjs", GRAPHIQL_DIR), ("map/build.mjs", MAP_DIR)):
        build = next(shlex.split(r) for r in runs if f"node {script}" in r)
        assert build[:2] == ["node", script]
        static = static_dir.relative_to(ROOT).as_posix()
        expected.append(["--from=web", build[2], f"./{static}"])
    assert baked == expected
    assert any("web/map" in c for c in copies), "the map's sources reach the web stage"
    # The copies land before the install, so the package data carries the assets.
    order = [(i.keyword, i.args) for i in builder.instructions]
    install_at = next(n for n, (k, a) in enumerate(order) if k == "RUN" and "pip install" in a)
    assert all(n < install_at for n, (k, a) in enumerate(order) if a.startswith("--from=web"))
    package_data = PYPROJECT["tool"]["setuptools"]["package-data"]["api"]
    for asset in ("static/graphiql/graphiql.min.js", "static/map/map.js"):
        assert any(fnmatch.fnmatch(asset, p) for p in package_data), asset


def test_install_matches_pyproject() -> None:
    builder = BY_NAME["builder"]
    install = next(r for r in builder.all("RUN") if "pip install" in r)
    words = shlex.split(install.split("&&")[0])
    assert words[1:] == ["install", "-c", "constraints.txt", "."]

    copied = {shlex.split(c)[0] for c in builder.all("COPY") if not c.startswith("--from")}
    sources = {word for c in builder.all("COPY") for word in shlex.split(c)[:-1]}
    assert copied  # sanity: the parser saw the COPY lines
    # LICENSE: setuptools puts it in the installed dist-info, as in the wheel.
    needed = {"pyproject.toml", "constraints.txt", "LICENSE", PYPROJECT["project"]["readme"]}
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    needed |= {p.rstrip("*") for p in packages}
    assert needed <= sources, f"the builder does not copy {needed - sources}"


def test_dockerignore_keeps_what_the_build_copies() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(path: str) -> bool:
        parts = Path(path).parts
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        return any(
            fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix, pattern.removeprefix("**/"))
            for pattern in patterns
            for prefix in prefixes
        )

    for stage in STAGES:
        for copy in stage.all("COPY"):
            if copy.startswith("--from"):
                continue
            for source in shlex.split(copy)[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: no such file"
                assert not ignored(source), f".dockerignore drops {source}, which COPY needs"
    for heavy in (".venv", ".git", "web/node_modules", "api/static/graphiql", "api/static/map"):
        assert ignored(heavy), f"{heavy} should stay out of the build context"


def test_every_runtime_dependency_is_pinned_within_pyproject_ranges() -> None:
    for spec in PYPROJECT["project"]["dependencies"]:
        req = Requirement(spec)
        key = canonicalize_name(req.name)
        assert key in PINS, f"{req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(PINS[key], prereleases=True), (
            f"constraints.txt pins {req.name}=={PINS[key]}, outside pyproject's {req.specifier}"
        )


def test_dev_extras_are_pinned_within_pyproject_ranges() -> None:
    for spec in PYPROJECT["project"]["optional-dependencies"]["dev"]:
        req = Requirement(spec)
        key = canonicalize_name(req.name)
        assert key in PINS, f"dev dependency {req.name} is not pinned in constraints.txt"
        assert req.specifier.contains(PINS[key], prereleases=True)


def test_the_whole_runtime_closure_is_pinned_to_what_is_installed() -> None:
    # The image resolves transitive dependencies too (uvicorn[standard] pulls
    # uvloop, httptools, ...); every one must be pinned, and to the version the
    # test suite ran against.
    closure = requirement_closure(PYPROJECT["project"]["dependencies"])
    unpinned = sorted(set(closure) - set(PINS))
    assert unpinned == [], f"not pinned in constraints.txt: {unpinned}"
    for name in closure:
        installed = Version(metadata.version(name))
        assert installed == PINS[name], f"{name}: installed {installed}, pinned {PINS[name]}"


def test_runtime_stage_runs_non_root_with_the_gpugraph_entrypoint() -> None:
    runtime = STAGES[-1]
    users = runtime.all("USER")
    assert users, "the runtime stage must set USER"
    user = users[-1].split(":")[0]
    assert user not in ("0", "root")
    adds = " ".join(runtime.all("RUN"))
    assert f"--uid {user}" in adds, "the runtime user should exist in /etc/passwd"
    # Only the built virtualenv comes over; no compilers or node_modules.
    froms = [shlex.split(c) for c in runtime.all("COPY")]
    assert froms == [["--from=builder", "/opt/gpugraph", "/opt/gpugraph"]]
    assert json.loads(runtime.all("ENTRYPOINT")[-1]) == ["gpugraph"]
    assert any("/opt/gpugraph/bin" in env for env in runtime.all("ENV"))


def test_chart_runs_the_image_as_its_non_root_user() -> None:
    # The chart's server runs as the uid the image creates.
    values = (ROOT / "charts" / "gpugraph" / "values.yaml").read_text()
    user = STAGES[-1].all("USER")[-1].split(":")[0]
    assert f"runAsUser: {user}" in values


def test_entrypoint_help_lists_the_three_roles() -> None:
    script = Path(sys.executable).parent / "gpugraph"
    if not script.exists():
        pytest.fail(f"console script missing: {script}; install with pip install -e .")
    result = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    for command in ("agent", "serve", "demo"):
        assert re.search(rf"\b{command}\b", result.stdout), f"{command} missing from --help"


def test_ci_script_installs_what_the_tests_need_and_runs_the_readme_command() -> None:
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK), ".ci/run must be executable"
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    text = script.read_text()
    for package in ("containerd", "runc", "busybox-static", "chromium"):
        assert re.search(rf"\b{package}\b", text), f".ci/run does not install {package}"
    # Debian bookworm's nodejs is 18, too old for the federation gateway.
    assert "want_package nodejs" not in text
    assert "export GPUGRAPH_REQUIRE_ALL=1" in text
    steps = re.findall(r"^(?:timeout .*?)?make (\S+)$", text, flags=re.M)
    assert steps == ["test", "bench-small"]


def test_make_test_runs_every_check() -> None:
    require_on_path("make", "apt-get install make")
    dry = subprocess.run(
        ["make", "-n", "-B", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    plan = dry.stdout
    for step in (
        "pip install -q -c constraints.txt -e '.[dev]'",
        "ruff check .",
        "ruff format --check .",
        "/mypy",
        "tools/gen_proto.py --check",
        "-m pytest",
    ):
        assert step in plan, f"make test does not run {step!r}"


def test_make_demo_creates_the_venv_installs_and_runs_the_demo(tmp_path: Path) -> None:
    require_on_path("make", "apt-get install make")
    venv = tmp_path / "venv"
    dry = subprocess.run(
        ["make", "-n", "-B", "demo", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0, dry.stderr
    plan = dry.stdout
    creates = plan.index(f"-m venv {venv}")
    installs = plan.index(f"{venv}/bin/python -m pip install -q -c constraints.txt -e .")
    runs = plan.index(f"{venv}/bin/gpugraph demo")
    assert creates < installs < runs


def test_bench_small_runs_benchmarks_that_exist() -> None:
    require_on_path("make", "apt-get install make")
    dry = subprocess.run(
        ["make", "-n", "bench-small"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    scripts = re.findall(r"(bench/\S+\.py)", dry.stdout)
    assert scripts, "bench-small runs no benchmark"
    for script in scripts:
        assert (ROOT / script).is_file(), f"make bench-small runs missing {script}"


def test_every_benchmark_runs_in_ci_and_is_in_the_readmes_table() -> None:
    require_on_path("make", "apt-get install make")
    readme = (ROOT / "bench" / "README.md").read_text()
    table = set(re.findall(r"^\| `(bench/\S+\.py)` \|", readme, flags=re.M))
    for target in ("bench-small", "bench"):
        dry = subprocess.run(
            ["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert dry.returncode == 0, dry.stderr
        runs = set(re.findall(r"(bench/\S+\.py)", dry.stdout))
        # A benchmark CI never runs stops working unnoticed.
        for script in sorted(ROOT.glob("bench/*_bench.py")):
            name = str(script.relative_to(ROOT))
            assert name in runs, f"make {target} does not run {name}"
            assert name in table, f"bench/README.md's table of benchmarks lacks {name}"


def ci_setup(first: str, last: str, installs_to: str, home: Path) -> str:
    """The part of .ci/run from the line starting ``first`` to the one holding ``last``.

    ``installs_to`` (``VAR=/opt/...``) is pointed at ``home`` instead.
    """
    text = (ROOT / ".ci" / "run").read_text()
    start = text.index(f"\n{first}")
    end = text.index("\n", text.index(last, start))
    block = text[start:end]
    assert installs_to in block
    variable = installs_to.split("=", 1)[0]
    return block.replace(installs_to, f"{variable}={home}")


def ci_node_setup(node_home: Path) -> str:
    """The part of .ci/run that provides Node.js, installing into ``node_home``."""
    return ci_setup("NODE_MAJOR=", 'echo "using node', "NODE_HOME=/opt/gpugraph-node", node_home)


def fake_tools(directory: Path, **lines: str) -> None:
    """Executables in ``directory``, each printing its one line (``name=line``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, line in lines.items():
        script = directory / name
        script.write_text(f"#!/bin/sh\necho '{line}'\n")
        script.chmod(0o755)


def fake_node(directory: Path, version: str) -> None:
    fake_tools(directory, node=f"v{version}", npm="10.8.2")


@pytest.mark.parametrize(
    ("system_version", "expected"),
    [("18.20.4", "v20.18.0"), ("20.19.5", "v20.19.5"), ("22.3.0", "v22.3.0")],
)
def test_ci_script_uses_the_system_node_only_when_it_is_20_or_newer(
    tmp_path: Path, system_version: str, expected: str
) -> None:
    # NODE_HOME already holds the Node 20 that .ci/run installs, so nothing is downloaded.
    node_home = tmp_path / "node-home"
    fake_node(node_home / "bin", "20.18.0")
    fake_node(tmp_path / "system", system_version)
    script = f"set -euo pipefail\n{ci_node_setup(node_home)}\nnode --version\n"
    path = f"{tmp_path / 'system'}:/usr/bin:/bin"
    result = subprocess.run(
        ["bash", "-c", script],
        env={"PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == expected
    assert "installing Node.js" not in result.stdout


def ci_kubectl_setup(kubectl_home: Path) -> str:
    """The part of .ci/run that provides kubectl, installing into ``kubectl_home``."""
    return ci_setup(
        "KUBECTL_MINOR=",
        'echo "using $(kubectl',
        "KUBECTL_HOME=/opt/gpugraph-kubectl",
        kubectl_home,
    )


def fake_kubectl(directory: Path, version: str) -> None:
    fake_tools(directory, kubectl=f"Client Version: v{version}")


@pytest.mark.parametrize(
    ("system_version", "expected"),
    [(None, "v1.37.1"), ("1.20.15", "v1.37.1"), ("1.28.0", "v1.28.0"), ("1.32.4", "v1.32.4")],
)
def test_ci_script_uses_the_system_kubectl_only_when_it_is_1_28_or_newer(
    tmp_path: Path, system_version: str | None, expected: str
) -> None:
    # KUBECTL_HOME already holds the kubectl that .ci/run installs, so nothing is downloaded.
    kubectl_home = tmp_path / "kubectl-home"
    fake_kubectl(kubectl_home / "bin", "1.37.1")
    if system_version is not None:
        fake_kubectl(tmp_path / "system", system_version)
    script = f"set -euo pipefail\n{ci_kubectl_setup(kubectl_home)}\n"
    # Only the tools the block uses, so a kubectl installed on this machine stays out.
    tools = tmp_path / "tools"
    tools.mkdir()
    for tool in ("sed", "head"):
        found = shutil.which(tool)
        assert found is not None
        (tools / tool).symlink_to(found)
    result = subprocess.run(
        [shutil.which("bash") or "bash", "-c", script],
        env={"PATH": f"{tmp_path / 'system'}:{tools}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == f"using Client Version: {expected}"
    assert "installing kubectl" not in result.stdout


@pytest.mark.parametrize(
    ("version", "problem"),
    [("18.20.4", "v18.20.4; the gateway needs 20 or newer"), ("20.18.0", "npm packages")],
)
def test_gateway_reports_a_node_too_old_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, problem: str
) -> None:
    from tests.federation import gateway

    fake_node(tmp_path, version)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(gateway, "HERE", tmp_path)  # and no node_modules there
    missing = gateway.gateway_missing()
    assert missing is not None and problem in missing


def test_a_venv_without_pip_is_removed_with_a_clear_error(tmp_path: Path) -> None:
    require_on_path("make", "apt-get install make")
    # python3 without python3-venv (Debian): `-m venv` fails after making an interpreter.
    python = tmp_path / "python3"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -m ] && [ "$2" = venv ]; then\n'
        '  mkdir -p "$3/bin"\n'
        '  printf "#!/bin/sh\\nexit 1\\n" > "$3/bin/python"; chmod +x "$3/bin/python"\n'
        "  echo 'ensurepip is not available' >&2; exit 1\n"
        "fi\n"
    )
    python.chmod(0o755)
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["make", f"VENV={venv}", f"PYTHON={python}", f"{venv}/bin/python"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "python3-venv" in result.stderr
    assert not venv.exists(), "a broken venv would make the next make skip creating it"

"""Build gpugraph's wheel and sdist for a release, and check them before they are uploaded.

``python tools/release/dist.py`` runs ``python -m build`` (the sdist, then the
wheel from it, in isolated environments pinned by constraints.txt) into
``dist/``, ``twine check --strict`` on both, and checks that the wheel holds
what the installed command needs: the generated protobuf code, the license,
and the browser assets of GraphiQL and the map where this checkout has built
them (``make web``). Then ``twine upload dist/gpugraph-<version>*``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
# Built by `make web`; ignored by git, so a wheel has them only if they were built first.
BROWSER_ASSETS = ("api/static/graphiql/manifest.json", "api/static/map/manifest.json")
ALWAYS = (
    "node_resolver/generated/agent_pb2.py",
    "node_resolver/generated/agent_pb2_grpc.py",
    "api/cli.py",
)


class ReleaseError(Exception):
    """A build or check that failed; the message says which."""


def version() -> str:
    """The version pyproject.toml declares."""
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def build(out: Path, *, wheel_only: bool = False, isolation: bool = True) -> list[Path]:
    """Build into ``out``; the paths of this version's wheel (and sdist)."""
    command = [sys.executable, "-m", "build", "--outdir", str(out)]
    command += ["--wheel"] if wheel_only else []
    command += [] if isolation else ["--no-isolation"]
    # The build backend (setuptools) comes from the same pins as everything else.
    env = {
        **os.environ,
        "PIP_CONSTRAINT": str(CONSTRAINTS),
        "PIP_BUILD_CONSTRAINT": str(CONSTRAINTS),
    }
    done = subprocess.run(
        [*command, str(ROOT)], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ReleaseError(f"python -m build failed:\n{done.stdout}{done.stderr}")
    built = sorted(out.glob(f"gpugraph-{version()}*"))
    if not any(p.suffix == ".whl" for p in built):
        raise ReleaseError(f"python -m build made no wheel in {out}")
    return built


def check(paths: list[Path]) -> None:
    """``twine check --strict``: the metadata and README that PyPI would show."""
    done = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ReleaseError(f"twine check failed:\n{done.stdout}{done.stderr}")


def missing_from(wheel: Path) -> list[str]:
    """What the wheel should hold and does not."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    wanted = [*ALWAYS, *(a for a in BROWSER_ASSETS if (ROOT / a).exists())]
    missing = [name for name in wanted if name not in names]
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        missing.append("*.dist-info/licenses/LICENSE")
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="default: dist/")
    args = parser.parse_args()
    try:
        paths = build(args.out)
        check(paths)
        wheel = next(p for p in paths if p.suffix == ".whl")
        if missing := missing_from(wheel):
            raise ReleaseError(f"{wheel.name} lacks {', '.join(missing)}")
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    if not all((ROOT / a).exists() for a in BROWSER_ASSETS):
        print("release: warning: GraphiQL's and the map's assets are not built (make web)")
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

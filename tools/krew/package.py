"""Build the krew package of ``kubectl gpugraph``: the launcher archive and its manifest.

``python tools/krew/package.py --out DIR`` writes ``kubectl-gpugraph-vX.Y.Z.tar.gz``
(the launcher, byte-for-byte reproducible) and ``gpugraph.yaml``,
the krew Plugin manifest naming the archive's release URL and sha256. Attach
the archive to the GitHub release vX.Y.Z, then submit the manifest to krew-index
(or install it locally: ``kubectl krew install --manifest=gpugraph.yaml
--archive=kubectl-gpugraph-vX.Y.Z.tar.gz``).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import tarfile
import tomllib
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
LAUNCHER = HERE / "kubectl-gpugraph"
RELEASES = "https://github.com/gpugraph/gpugraph/releases/download"

DESCRIPTION = """\
Shows which pod, and which process inside it, uses each GPU of the cluster,
like kubectl top and nvidia-smi: kubectl gpugraph top, top pods, top nodes,
with -o json|yaml and a live --watch. It asks the gpugraph server (the
gpugraph Helm chart) through the API server's service proxy, with the
kubeconfig's credentials.

Requires: the gpugraph command, a Python package (Python >= 3.11), installed
with `pipx install gpugraph`; this plugin is a launcher for it. And the
gpugraph server installed in the cluster (helm install gpugraph
charts/gpugraph -n gpugraph --create-namespace).
"""


def version() -> str:
    """The package version, from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def archive_bytes() -> bytes:
    """The launcher as a tar.gz with fixed owners and times."""
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as compressed,
        tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        data = LAUNCHER.read_bytes()
        info = tarfile.TarInfo(LAUNCHER.name)
        info.size, info.mode, info.mtime = len(data), 0o755, 0
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def manifest(tag: str, sha256: str) -> dict[str, object]:
    """The krew Plugin manifest for the archive of release ``tag``."""
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": "gpugraph"},
        "spec": {
            "version": tag,
            "homepage": "https://github.com/gpugraph/gpugraph",
            "shortDescription": "Which pod and process uses each GPU, like kubectl top",
            "description": DESCRIPTION,
            "caveats": "Needs the gpugraph command on PATH: pipx install gpugraph "
            "(Python >= 3.11).\n",
            "platforms": [
                {
                    "selector": {
                        "matchExpressions": [
                            {"key": "os", "operator": "In", "values": ["linux", "darwin"]}
                        ]
                    },
                    "uri": f"{RELEASES}/{tag}/kubectl-gpugraph-{tag}.tar.gz",
                    "sha256": sha256,
                    "bin": LAUNCHER.name,
                    "files": [{"from": LAUNCHER.name, "to": "."}],
                }
            ],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, as krew-index manifests are written."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _string)


def build(out: Path) -> tuple[Path, Path]:
    """Write the archive and the manifest into ``out``; their paths."""
    tag = f"v{version()}"
    data = archive_bytes()
    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"kubectl-gpugraph-{tag}.tar.gz"
    archive.write_bytes(data)
    plugin = out / "gpugraph.yaml"
    document = manifest(tag, hashlib.sha256(data).hexdigest())
    plugin.write_text(yaml.dump(document, Dumper=_Dumper, sort_keys=False))
    return archive, plugin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "krew")
    args = parser.parse_args()
    for path in build(args.out):
        print(path)


if __name__ == "__main__":
    main()

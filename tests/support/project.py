"""The project as pyproject.toml declares it: what the installed package must report."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def project_version() -> str:
    """``project.version`` from pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return str(project["version"])

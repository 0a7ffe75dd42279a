"""What ``pip install gpugraph`` may resolve to: no nvidia-ml-py release known to misread NVML."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# 12.535.77 reads 32-byte process entries, which only early R535 drivers write: against
# every other driver it invents PIDs and loses real ones. 11.495.46 and older misread the
# process lists of R510 and later drivers (wookayin/gpustat#116).
KNOWN_BAD = ["12.535.77", "11.495.46", "11.470.66", "11.450.51"]
# The first release after 12.535.77 (24-byte entries again), and the pinned one.
KNOWN_GOOD = ["12.535.108", "12.535.161", "13.615.71"]


def requirement(name: str) -> Requirement:
    """The runtime requirement on ``name`` in pyproject.toml."""
    for text in PYPROJECT["project"]["dependencies"]:
        parsed = Requirement(text)
        if parsed.name == name:
            return parsed
    raise AssertionError(f"{name} is not a runtime dependency")


@pytest.mark.parametrize("version", KNOWN_BAD)
def test_known_bad_nvidia_ml_py_releases_are_refused(version: str) -> None:
    assert not requirement("nvidia-ml-py").specifier.contains(version)


@pytest.mark.parametrize("version", KNOWN_GOOD)
def test_good_nvidia_ml_py_releases_are_admitted(version: str) -> None:
    assert requirement("nvidia-ml-py").specifier.contains(version)


def pinned(name: str) -> str:
    """The version constraints.txt pins ``name`` to."""
    lines = (ROOT / "constraints.txt").read_text().split()
    pins = dict(line.split("==", 1) for line in lines if "==" in line)
    return pins[name]


def test_the_pinned_nvidia_ml_py_satisfies_the_requirement() -> None:
    assert requirement("nvidia-ml-py").specifier.contains(pinned("nvidia-ml-py"))


def test_the_nvml_tests_run_the_pinned_nvidia_ml_py() -> None:
    # The fake libnvidia-ml.so.1 is exercised through this installed release.
    assert metadata.version("nvidia-ml-py") == pinned("nvidia-ml-py")


def test_the_nvml_docs_name_the_same_minimum() -> None:
    (floor,) = [s.version for s in requirement("nvidia-ml-py").specifier if s.operator == ">="]
    doc = (ROOT / "docs" / "nvml.md").read_text()
    named = re.search(r"nvidia-ml-py (\d+\.\d+\.\d+) or newer", doc)
    assert named is not None, "docs/nvml.md names no minimum nvidia-ml-py version"
    assert Version(named.group(1)) == Version(floor)

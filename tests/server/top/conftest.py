"""The CLI tests run against the same embedded demo cluster as tests/demo, open or with --auth."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.demo_process import NODES, RunningDemo, ready_demo
from tests.support.demo_process import demo as demo


@dataclass
class AuthDemo:
    """``gpugraph demo --auth``: its URL, kubeconfig and the two tokens it prints."""

    running: RunningDemo
    admin: str
    research: str

    @property
    def url(self) -> str:
        return self.running.url

    @property
    def kubeconfig(self) -> Path:
        return kubeconfig_of(self.running)


def banner_value(running: RunningDemo, label: str) -> str:
    """The value after ``label`` on its banner line."""
    found = re.search(rf"^  {label} +(\S+)$", running.text(), re.M)
    assert found, running.text()
    return found[1]


def kubeconfig_of(running: RunningDemo) -> Path:
    """The kubeconfig the demo prints for kubectl and gpugraph top."""
    found = re.search(r"^  top +gpugraph top --kubeconfig (\S+)", running.text(), re.M)
    assert found, running.text()
    return Path(found[1])


@pytest.fixture(scope="module")
def auth_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthDemo]:
    with ready_demo(
        tmp_path_factory.mktemp("auth-demo"),
        "--auth",
        "--nodes",
        str(NODES),
        "--gpus-per-node",
        "2",
        "--interval",
        "0.5",
    ) as running:
        yield AuthDemo(running, banner_value(running, "admin"), banner_value(running, "research"))

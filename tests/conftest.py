"""Pytest configuration shared by every test module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from api.execution.view import quiet_cut_off_executions
from tests.support.server import GraphTestCluster, standard_cluster


def pytest_configure(config: pytest.Config) -> None:
    # Filters added while pytest collects or runs a test last only that long;
    # the server's own filters are added here once, as serving adds them at import.
    quiet_cut_off_executions()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[GraphTestCluster]:
    """The standard three-node test cluster: stub API server and real agents on loopback."""
    cluster = standard_cluster(tmp_path)
    await cluster.start()
    yield cluster
    await cluster.stop()

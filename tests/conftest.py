"""Pytest configuration shared by every test module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from api.execution.view import quiet_cut_off_executions
from tests.support.server import GraphTestCluster, standard_cluster

# Property tests check behaviour, not speed (bench/ measures that): no
# per-example deadline, and no health check that fails because generating
# examples is slow, as both are on a busy machine.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")


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

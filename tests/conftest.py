"""Pytest configuration shared by every test module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.server import GraphTestCluster, standard_cluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[GraphTestCluster]:
    """The standard three-node test cluster: stub API server and real agents on loopback."""
    cluster = standard_cluster(tmp_path)
    await cluster.start()
    yield cluster
    await cluster.stop()

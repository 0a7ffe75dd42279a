"""Shared test helpers.

Tests that need an outside tool (a real containerd, a browser, Prometheus,
kubectl, a C compiler, Node.js, make) ask for it through ``require`` or a
helper that calls it, and skip on a machine without it; CI sets
GPUGRAPH_REQUIRE_ALL=1 so such a skip fails instead. tests/layout/
test_outside_tools.py finds a test that uses one without asking.
"""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRE_ALL = os.environ.get("GPUGRAPH_REQUIRE_ALL") == "1"


def require(available: bool, reason: str) -> None:
    """Skip the calling test when ``available`` is false, or fail under GPUGRAPH_REQUIRE_ALL=1."""
    if available:
        return
    if REQUIRE_ALL:
        pytest.fail(f"GPUGRAPH_REQUIRE_ALL=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_on_path(tool: str, install: str) -> str:
    """The path of ``tool`` on PATH; without it, skip (or fail), saying how to ``install`` it."""
    found = shutil.which(tool)
    require(found is not None, f"{tool} is not on PATH ({install})")
    assert found is not None
    return found

"""Shared test helpers.

Tests that need a real containerd, a browser or Node.js skip on a machine
without them; CI sets GPUGRAPH_REQUIRE_ALL=1 so such a skip fails instead.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ALL = os.environ.get("GPUGRAPH_REQUIRE_ALL") == "1"


def require(available: bool, reason: str) -> None:
    """Skip the calling test when ``available`` is false, or fail under GPUGRAPH_REQUIRE_ALL=1."""
    if available:
        return
    if REQUIRE_ALL:
        pytest.fail(f"GPUGRAPH_REQUIRE_ALL=1 but {reason}", pytrace=False)
    pytest.skip(reason)

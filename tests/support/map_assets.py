"""Whether the cluster map's browser bundles are built, for the tests that load them."""

from __future__ import annotations

import api.http.cluster_map as cluster_map
from api.http.offline_assets import BUILD_COMMAND
from tests.support import require

__all__ = ["require_map_assets"]


def require_map_assets() -> None:
    """Skip (or fail under GPUGRAPH_REQUIRE_ALL=1) until ``make web`` has built the map."""
    require(
        cluster_map.assets_present(),
        f"the cluster map's assets are not built; run `{BUILD_COMMAND}`",
    )

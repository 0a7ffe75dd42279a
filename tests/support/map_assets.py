"""Whether the cluster map's browser bundles are built, for the tests that load them."""

from __future__ import annotations

import api.http.cluster_map as cluster_map
from api.http.offline_assets import BUILD_COMMAND, all_present
from tests.support import require

__all__ = ["require_map_assets"]


def require_map_assets() -> None:
    """Skip (or fail under GPUGRAPH_REQUIRE_ALL=1) until ``make web`` has built the map."""
    require(
        all_present(cluster_map.DEFAULT_STATIC_DIR, cluster_map.ASSET_FILES),
        f"the cluster map's assets are not built; run `{BUILD_COMMAND}`",
    )

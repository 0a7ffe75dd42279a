"""The cluster map: every GPU of the cluster on one page, live, served by the server itself.

The page is a client of the public API like any other: one GraphQL query for
the first picture, then one ``graphql-transport-ws`` subscription. Its script
and stylesheet are built from npm packages at build time (``make web``, into
``api/static/map/``) and served from here, so it works air-gapped. The page
holds no data, so it and its assets load without a token; with auth on, the
script asks for one and sends it with every request.
"""

from __future__ import annotations

import functools
import html
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .map_queries import (
    EVENTS_QUERY,
    GPU_DETAILS_QUERY,
    GPU_QUERY,
    HISTORY_QUERY,
    IDLE_QUERY,
    LIVE_SUBSCRIPTION,
    SNAPSHOT_QUERY,
)
from .offline_assets import (
    STATIC_ROOT,
    all_present,
    asset_page,
    build_into_command,
    script_json,
    static_mount,
)

__all__ = [
    "ASSET_FILES",
    "DEFAULT_STATIC_DIR",
    "MAP_PATH",
    "OPEN_PAGES",
    "STATIC_URL",
    "assets_present",
    "map_config",
    "map_routes",
]

MAP_PATH = "/map"
STATIC_URL = "/static/map"
DEFAULT_STATIC_DIR = STATIC_ROOT / "map"
# Must match the names web/map/build.mjs writes. The page links these two...
ASSET_FILES = ("map.js", "map.css")
# ...and carries this one inline.
BOOT_FILE = "map-boot.js"
_BUILT = (*ASSET_FILES, BOOT_FILE)
# Pages that hold no data: served without a token (the map asks for one itself).
OPEN_PAGES = ("/", MAP_PATH)
# The subscription's tick the page asks for; it stretches it on large clusters.
INTERVAL_SECONDS = 2.0

_PAGE = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<script type="application/json" id="gpugraph-map-config">{config}</script>
<script nonce="{nonce}">{boot}</script>
<link rel="stylesheet" href="{static}/map.css">
</head>
<body>
<div id="gpugraph-map"><p class="boot">Loading the cluster map&hellip;</p></div>
<script src="{static}/map.js" defer></script>
</body>
</html>
"""


def assets_present(static_dir: Path | None = None) -> bool:
    """True when the map's built files (scripts, stylesheet) are in ``static_dir``."""
    return all_present(DEFAULT_STATIC_DIR if static_dir is None else static_dir, _BUILT)


def map_config(*, graphql_path: str = "/graphql", graphiql: bool = True) -> dict[str, object]:
    """What the page's script is told: where the API is, and the documents to send."""
    return {
        "graphqlPath": graphql_path,
        "graphiqlPath": graphql_path if graphiql else None,
        "intervalSeconds": INTERVAL_SECONDS,
        "queries": {
            "snapshot": SNAPSHOT_QUERY,
            "live": LIVE_SUBSCRIPTION,
            "gpu": GPU_QUERY,
            "details": GPU_DETAILS_QUERY,
            "history": HISTORY_QUERY,
            "idle": IDLE_QUERY,
            "events": EVENTS_QUERY,
        },
    }


def build_into(static_dir: Path) -> str:
    """The build command that writes the map's assets straight into ``static_dir``."""
    return build_into_command("map/build.mjs", static_dir)


def _boot_script(static_dir: Path) -> str:
    """The inlined script that sends the first query, as the build wrote it."""
    path = static_dir / BOOT_FILE
    return _read_boot(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_boot(path: Path, mtime_ns: int) -> str:
    # Read once per build (``mtime_ns`` keys a rebuild); "</" is kept from closing the element.
    return path.read_text(encoding="utf-8").replace("</", "<\\/")


def map_response(
    *, static_dir: Path, static_url: str, graphiql: bool, title: str = "gpugraph: GPU map"
) -> HTMLResponse:
    """The map page (200), or a page saying how to build its assets (503)."""

    def render(nonce: str) -> str:
        return _PAGE.format(
            title=html.escape(title),
            static=html.escape(static_url.rstrip("/")),
            config=script_json(map_config(graphiql=graphiql)),
            nonce=html.escape(nonce),
            boot=_boot_script(static_dir),
        )

    return asset_page(
        render,
        static_dir,
        _BUILT,
        what="Cluster map",
        title=title,
        build_into=build_into(static_dir),
        note="The GraphQL API itself works at <code>/graphql</code>.",
    )


def map_routes(
    *, graphiql: bool, static_dir: Path | None = None, static_url: str = STATIC_URL
) -> list[BaseRoute]:
    """``GET /`` (a redirect), ``GET /map`` and the map's assets."""
    directory = DEFAULT_STATIC_DIR if static_dir is None else static_dir

    async def page(request: Request) -> Response:
        return map_response(static_dir=directory, static_url=static_url, graphiql=graphiql)

    async def root(request: Request) -> Response:
        return RedirectResponse(MAP_PATH, status_code=307)

    return [
        Route("/", root, methods=["GET"]),
        Route(MAP_PATH, page, methods=["GET"]),
        *static_mount(
            static_url,
            directory,
            _BUILT,
            what="Cluster map",
            build_into=build_into(directory),
            name="map-static",
        ),
    ]

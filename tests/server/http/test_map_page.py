"""The cluster map's page and assets over HTTP: served locally, open without a token, or
a page saying how to build them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

import api.http.cluster_map as cluster_map
from api.http.cluster_map import ASSET_FILES, MAP_PATH, STATIC_URL
from api.http.map_queries import (
    EVENTS_QUERY,
    GPU_DETAILS_QUERY,
    GPU_QUERY,
    HISTORY_QUERY,
    IDLE_QUERY,
    LIVE_SUBSCRIPTION,
    SNAPSHOT_QUERY,
)
from api.http.offline_assets import BUILD_COMMAND
from api.settings import Settings
from tests.support.bare_server import bare_server
from tests.support.map_assets import require_map_assets


def _config(page: str) -> dict[str, object]:
    found = re.search(
        r'<script type="application/json" id="gpugraph-map-config">(.*?)</script>', page
    )
    assert found is not None
    config: dict[str, object] = json.loads(found.group(1))
    return config


async def test_root_redirects_to_the_map_and_every_asset_comes_from_this_host() -> None:
    require_map_assets()
    async with (
        bare_server(Settings()) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        root = await client.get("/")
        assert root.status_code == 307 and root.headers["location"] == MAP_PATH
        page = await client.get(MAP_PATH)
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "connect-src 'self'" in csp
        # One inline script, the first query's, allowed by this response's nonce only.
        nonce = re.search(r"'nonce-([^']+)'", csp)
        assert nonce is not None
        assert re.findall(r'<script nonce="([^"]+)">', page.text) == [nonce.group(1)]
        urls = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        urls = [u for u in urls if not u.startswith("data:")]
        assert sorted(u.rsplit("/", 1)[1] for u in urls) == sorted(ASSET_FILES)
        for url in urls:
            assert url.startswith(f"{STATIC_URL}/"), url
            asset = await client.get(url)
            assert asset.status_code == 200 and len(asset.content) > 1000, url
        # The page is told the documents it sends: declared once, on the server.
        config = _config(page.text)
        assert config["queries"] == {
            "snapshot": SNAPSHOT_QUERY,
            "live": LIVE_SUBSCRIPTION,
            "gpu": GPU_QUERY,
            "details": GPU_DETAILS_QUERY,
            "history": HISTORY_QUERY,
            "idle": IDLE_QUERY,
            "events": EVENTS_QUERY,
        }
        assert config["graphiqlPath"] == "/graphql"


async def test_without_graphiql_the_map_links_nowhere() -> None:
    require_map_assets()
    async with (
        bare_server(Settings(graphiql=False)) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        page = await client.get(MAP_PATH)
        assert page.status_code == 200
        assert _config(page.text)["graphiqlPath"] is None


@pytest.fixture
def no_assets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the server at an empty asset folder, as after a plain pip install."""
    empty = tmp_path / "map-not-built"
    empty.mkdir()
    monkeypatch.setattr(cluster_map, "DEFAULT_STATIC_DIR", empty)
    return empty


async def test_missing_assets_page_says_how_to_build(no_assets: Path) -> None:
    async with (
        bare_server(Settings()) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        page = await client.get(MAP_PATH)
        assert page.status_code == 503
        assert "Cluster map assets are not built" in page.text
        assert BUILD_COMMAND in page.text and "npm ci" in page.text
        assert f"node map/build.mjs {no_assets}" in page.text
        assert "<script" not in page.text
        asset = await client.get(f"{STATIC_URL}/map.js")
        assert asset.status_code == 404 and BUILD_COMMAND in asset.text
        api = await client.post("/graphql", json={"query": "{ nodes { name } }"})
        assert api.json() == {"data": {"nodes": []}}

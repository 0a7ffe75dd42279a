"""GraphiQL served offline, driven in Debian's headless Chromium with the internet cut off.

Every request the page makes outside 127.0.0.1/localhost is aborted and
recorded; the IDE must still render, autocomplete from introspection, run a
query against a live gpugraph, and stream a subscription over the same host.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

import api.http.graphiql as graphiql
from api.http.graphiql import ASSET_FILES, BUILD_COMMAND, STATIC_URL, assets_present
from api.settings import Settings
from tests.federation.cluster import GPU_A0, GPU_B0, NODE_A, NODE_B, PODS, live_cluster
from tests.support import require
from tests.support.bare_server import bare_server, bare_server_in_thread
from tests.support.browser import TIMEOUT_MS, chromium, require_chromium, select_all
from tests.support.browser import screenshot as _screenshot
from tests.support.polling import eventually

pytestmark = pytest.mark.browser


def _require_assets() -> None:
    require(assets_present(), f"GraphiQL assets are not built; run `{BUILD_COMMAND}`")


EDITOR = ".graphiql-query-editor .CodeMirror"
# CodeMirror renders only the lines in view, so text is read from its model.
RESPONSE = ".graphiql-response .CodeMirror"


def _editor_text(page: Any) -> str:
    text: str = page.evaluate("sel => document.querySelector(sel).CodeMirror.getValue()", EDITOR)
    return text


def _type_query(page: Any, query: str, operation: str) -> None:
    """Replace the editor's text by typing, and wait until GraphiQL has parsed it."""
    page.click(EDITOR)
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(query)
    # GraphiQL re-parses the document (and picks the operation to run) after a
    # short debounce; it stores the result, which is the signal it is done.
    page.wait_for_function(
        """([query, operation]) =>
            localStorage.getItem('graphiql:query') === query &&
            localStorage.getItem('graphiql:operationName') === operation""",
        arg=[query, operation],
        timeout=TIMEOUT_MS,
    )


def _run_and_wait(page: Any, *needles: str) -> str:
    """Click run; return the response pane's text once it contains every needle."""
    page.click(".graphiql-execute-button")
    return _wait_for_response(page, *needles)


def _wait_for_response(page: Any, *needles: str) -> str:
    page.wait_for_function(
        """([sel, needles]) => {
            const pane = document.querySelector(sel);
            const text = pane === null ? "" : pane.CodeMirror.getValue();
            return needles.every((n) => text.includes(n));
        }""",
        arg=[RESPONSE, list(needles)],
        timeout=TIMEOUT_MS,
    )
    text: str = page.evaluate("sel => document.querySelector(sel).CodeMirror.getValue()", RESPONSE)
    return text


WALK_QUERY = """query TrainerWalk {
  pod(namespace: "ml", name: "trainer-0") {
    uid
    node {
      name
      gpus {
        uuid
        processes { pid usedMemoryBytes pod { name } }
      }
    }
  }
}"""

LIVE_SUBSCRIPTION = (
    f'subscription Live {{ gpuUpdates(nodeName: "{NODE_B}", intervalSeconds: 0.5) '
    "{ uuid utilizationGpu } }"
)


def test_graphiql_renders_offline_queries_and_streams(tmp_path: Path) -> None:
    require_chromium()
    _require_assets()
    trainer0, trainer1 = PODS[0], PODS[1]
    with (
        live_cluster(tmp_path / "cluster", utilization=37) as cluster,
        chromium(tmp_path / "profile") as browser,
    ):
        page = browser.page
        page.goto(f"{cluster.url}/graphql", timeout=TIMEOUT_MS)
        page.wait_for_selector(EDITOR, timeout=TIMEOUT_MS)
        assert page.title() == "gpugraph"

        # It opens with the ready example query, and running it shows the
        # fake cluster's GPUs, processes and pods: data only the backend has.
        assert "nodes {" in _editor_text(page)
        text = _run_and_wait(page, GPU_A0, GPU_B0)
        assert NODE_A in text and NODE_B in text
        assert trainer0.name in text and trainer1.name in text
        _screenshot(page, tmp_path, "graphiql.png")

        # Autocompletion comes from the server's schema via introspection.
        page.click(EDITOR)
        page.keyboard.press("Control+A")
        page.keyboard.press("Delete")
        page.keyboard.type("{ gpuProc")
        hint = page.wait_for_selector(".CodeMirror-hint", timeout=TIMEOUT_MS)
        assert hint is not None
        hints = select_all(page, ".CodeMirror-hint", "els => els.map(e => e.innerText)")
        assert "gpuProcesses" in hints
        page.keyboard.press("Escape")

        # A query typed into the editor: the worker pod -> node -> GPUs -> processes walk.
        _type_query(page, WALK_QUERY, "TrainerWalk")
        text = _run_and_wait(page, trainer0.uid, GPU_A0)
        assert f'"pid": {trainer0.pid}' in text and f'"pid": {trainer1.pid}' in text
        assert f'"usedMemoryBytes": {trainer0.used_bytes}' in text
        assert GPU_B0 not in text  # another node's GPU has no business here

        # A subscription runs over a WebSocket to the same host and follows
        # the fake NVML file as it changes.
        _type_query(page, LIVE_SUBSCRIPTION, "Live")
        _run_and_wait(page, GPU_B0, '"utilizationGpu": 37')
        cluster.set_utilization(NODE_B, 88)
        _wait_for_response(page, '"utilizationGpu": 88')
        assert cluster.active_subscriptions == 1
        assert browser.websockets == [cluster.ws_url]
        _screenshot(page, tmp_path, "graphiql-subscription.png")
        # The run button stops it; the server lets go of it.
        page.click(".graphiql-execute-button")
        eventually(
            lambda: cluster.active_subscriptions == 0, what="subscription released", interval=0.05
        )

    assert browser.blocked == [], f"the page tried to leave the host: {browser.blocked}"
    assert browser.problems == []


def _script_and_style_urls(page_html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', page_html)


async def test_page_loads_every_asset_from_this_host() -> None:
    _require_assets()
    async with (
        bare_server(Settings()) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        response = await client.get("/graphql", headers={"Accept": "text/html"})
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        csp = response.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "connect-src 'self'" in csp
        urls = [u for u in _script_and_style_urls(response.text) if not u.startswith("data:")]
        assert sorted(u.rsplit("/", 1)[1] for u in urls) == sorted(ASSET_FILES)
        for url in urls:
            assert url.startswith(f"{STATIC_URL}/"), url  # same host, never a CDN
            asset = await client.get(url)
            assert asset.status_code == 200, url
            assert len(asset.content) > 1000
        # API clients asking for JSON still get GraphQL, not the page.
        api = await client.post("/graphql", json={"query": "{ nodes { name } }"})
        assert api.json() == {"data": {"nodes": []}}


async def test_no_graphiql_serves_neither_page_nor_assets() -> None:
    async with (
        bare_server(Settings(graphiql=False)) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        page = await client.get("/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 404
        asset = await client.get(f"{STATIC_URL}/graphiql.min.js")
        assert asset.status_code == 404
        api = await client.post("/graphql", json={"query": "{ nodes { name } }"})
        assert api.json() == {"data": {"nodes": []}}


@pytest.fixture
def no_assets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the server at an empty asset folder, as after a plain pip install."""
    empty = tmp_path / "static-not-built"
    empty.mkdir()
    monkeypatch.setattr(graphiql, "DEFAULT_STATIC_DIR", empty)
    return empty


async def test_missing_assets_page_says_how_to_build(no_assets: Path) -> None:
    async with (
        bare_server(Settings()) as server,
        httpx.AsyncClient(base_url=server.url) as client,
    ):
        page = await client.get("/graphql", headers={"Accept": "text/html"})
        assert page.status_code == 503
        assert "GraphiQL assets are not built" in page.text
        assert BUILD_COMMAND in page.text and "npm ci" in page.text
        assert str(no_assets) in page.text
        # An installed copy is told to build into the folder it actually reads.
        assert f"node build.mjs {no_assets}" in page.text
        assert "<script" not in page.text  # nothing that could render blank
        asset = await client.get(f"{STATIC_URL}/graphiql.min.js")
        assert asset.status_code == 404
        assert BUILD_COMMAND in asset.text
        # The API itself is unaffected.
        api = await client.post("/graphql", json={"query": "{ nodes { name } }"})
        assert api.json() == {"data": {"nodes": []}}


def test_missing_assets_page_renders_in_the_browser(no_assets: Path, tmp_path: Path) -> None:
    require_chromium()
    with bare_server_in_thread(Settings()) as server, chromium(tmp_path / "profile") as browser:
        page = browser.page
        response = page.goto(f"{server.url}/graphql", timeout=TIMEOUT_MS)
        assert response is not None and response.status == 503
        heading = page.inner_text("h1", timeout=TIMEOUT_MS)
        assert heading == "GraphiQL assets are not built"
        assert BUILD_COMMAND in page.inner_text("body")
        _screenshot(page, tmp_path, "graphiql-missing-assets.png")
    assert browser.blocked == []


def test_graphiql_sends_a_pasted_token_with_queries_and_subscriptions(tmp_path: Path) -> None:
    require_chromium()
    _require_assets()
    with (
        live_cluster(tmp_path / "cluster", utilization=41, auth=True) as cluster,
        chromium(tmp_path / "profile") as browser,
    ):
        token = cluster.kube.stub.reviews.token_of("admin")
        page = browser.page
        # The page itself loads without a token: it is where one is pasted.
        page.goto(f"{cluster.url}/graphql", timeout=TIMEOUT_MS)
        page.wait_for_selector(EDITOR, timeout=TIMEOUT_MS)
        # Without a token the query is refused (401, no data).
        _type_query(page, WALK_QUERY, "TrainerWalk")
        _run_and_wait(page, "no bearer token")
        # Paste it into the Headers tab, as a person would.
        page.get_by_role("button", name="Headers").click()
        headers = ".graphiql-editor-tool .graphiql-editor:not(.hidden) .CodeMirror"
        page.click(headers)
        page.keyboard.insert_text(f'{{"Authorization": "Bearer {token}"}}')
        text = _run_and_wait(page, PODS[0].uid, GPU_A0)
        assert "no bearer token" not in text
        # A subscription's socket carries it in connection_init.
        _type_query(page, LIVE_SUBSCRIPTION, "Live")
        _run_and_wait(page, GPU_B0, '"utilizationGpu": 41')
        assert cluster.active_subscriptions == 1
        page.click(".graphiql-execute-button")
        eventually(
            lambda: cluster.active_subscriptions == 0, what="subscription released", interval=0.05
        )
    assert browser.blocked == []
    # The refused query's 401 is the only console error the page may show.
    assert all("401" in problem for problem in browser.problems), browser.problems

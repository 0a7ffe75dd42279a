"""The cluster map, driven in Debian's headless Chromium against the embedded demo cluster.

The demo's real server, agents and stub API server run in a background
thread; every request the page makes outside 127.0.0.1/localhost is aborted
and recorded. What the page shows is checked against what the GraphQL API
answers, and the fake GPUs are rewritten under it to see the page follow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from api.demo.cluster import StubApiServer
from api.demo.runner import Demo
from api.http.cluster_map import MAP_PATH, STATIC_URL
from api.http.map_queries import GPU_QUERY, SNAPSHOT_QUERY
from tests.support.browser import (
    TIMEOUT_MS,
    Browser,
    chromium,
    require_chromium,
    screenshot,
    select_all,
)
from tests.support.demo import LiveDemo, live_demo
from tests.support.map_assets import require_map_assets

pytestmark = pytest.mark.browser

NODES, GPUS = 3, 4


@pytest.fixture(scope="module")
def demo() -> Iterator[LiveDemo]:
    # Every test here drives the map in Chromium: ask before starting the demo.
    require_chromium()
    require_map_assets()
    with live_demo(
        nodes=NODES, gpus_per_node=GPUS, interval=0.5, allocation_nodes=False
    ) as running:
        yield running


def _open_map(browser: Browser, url: str) -> Any:
    page = browser.page
    response = page.goto(f"{url}/", timeout=TIMEOUT_MS)
    assert response is not None and response.status == 200
    assert page.url == f"{url}{MAP_PATH}"  # / redirects to the map
    page.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
    return page


def _wait_ticks(page: Any, count: int) -> None:
    page.wait_for_function(
        "n => Number(document.documentElement.dataset.ticks || 0) >= n",
        arg=count,
        timeout=TIMEOUT_MS,
    )


def _up_gpus(demo: LiveDemo, token: str | None = None) -> dict[str, str]:
    body = demo.query("{ nodes { name gpus { uuid } } }", token)
    return {g["uuid"]: n["name"] for n in body["data"]["nodes"] for g in n["gpus"] or []}


def _tile_selector(uuid: str) -> str:
    return f'.tile[data-uuid="{uuid}"]'


def _tile(page: Any, uuid: str) -> Any:
    return page.locator(_tile_selector(uuid))


def _pod_colours(page: Any, uuid: str) -> list[str]:
    """The colours of a tile's pod segments, read in one evaluation (``select_all``):
    a detached segment, redrawn by a tick meanwhile, has no computed colour."""
    colours: list[str] = select_all(
        page,
        f"{_tile_selector(uuid)} .seg.pod",
        "els => els.map(e => getComputedStyle(e).backgroundColor)",
    )
    return colours


def _only_local(browser: Browser, url: str) -> None:
    assert browser.blocked == [], f"the page tried to leave the host: {browser.blocked}"
    assert all(u.startswith(url) for u in browser.requested), browser.requested
    assert browser.websockets == [url.replace("http:", "ws:") + "/graphql"]
    assert browser.problems == []


def test_every_gpu_of_the_up_nodes_is_a_tile_and_the_down_node_is_greyed(
    demo: LiveDemo, tmp_path: Path
) -> None:
    cluster = demo.demo.cluster
    truth = _up_gpus(demo)
    assert len(truth) == (NODES - 1) * GPUS
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)
        _wait_ticks(page, 1)
        shown = select_all(
            page,
            ".tile[data-uuid]",
            "els => els.map(e => [e.dataset.uuid, e.getAttribute('aria-label')])",
        )
        assert {uuid for uuid, _ in shown} == set(truth)
        for uuid, label in shown:
            # Screen readers (and tests) find each GPU by UUID and node.
            assert uuid in label and truth[uuid] in label
            node = page.locator(f'section[data-node="{truth[uuid]}"]')
            assert node.locator(f'.tile[data-uuid="{uuid}"]').count() == 1

        # The down node: greyed, with the agent's error as the reason.
        down = page.locator(f'section[data-node="{cluster.down_node}"]')
        assert "down" in (down.get_attribute("class") or "")
        reason = down.locator(".n-status").inner_text()
        # Said once: the reason follows without "agent on node '...'" again.
        assert reason.startswith("agent down: unreachable at ") and cluster.down_node not in reason
        assert "UNAVAILABLE" in reason  # gRPC's own text follows, for whoever digs
        slots = down.locator(".tile")
        assert slots.count() == GPUS  # its nvidia.com/gpu capacity, as placeholders
        assert "grayscale" in select_all(
            page,
            f'section[data-node="{cluster.down_node}"] .tile',
            "els => getComputedStyle(els[0]).filter",
        )
        status = page.inner_text("#status")
        assert f"{NODES - 1}/{NODES} nodes up" in status and status.startswith("live")
        screenshot(page, tmp_path, "map.png")
    _only_local(browser, demo.url)


def test_shared_gpu_shows_two_pods_and_the_orphan_is_unattributed(
    demo: LiveDemo, tmp_path: Path
) -> None:
    cluster = demo.demo.cluster
    _, shared_uuid = cluster.shared_gpu
    orphan_node, orphan_pid = cluster.orphan
    body = demo.query(
        f'{{ gpuProcesses(nodeName: "{orphan_node}") {{ pid usedMemoryBytes gpu {{ uuid }} }} }}'
    )
    orphan = next(p for p in body["data"]["gpuProcesses"] if p["pid"] == orphan_pid)
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)
        shared = _tile(page, shared_uuid)
        pods = select_all(
            page, f"{_tile_selector(shared_uuid)} .seg.pod", "els => els.map(e => e.dataset.pod)"
        )
        assert pods == ["inference/chat-api-0", "inference/chat-api-1"]
        colours = _pod_colours(page, shared_uuid)
        assert len(set(colours)) == 2  # one colour per pod
        assert shared.locator(".m-shared").count() == 1

        tile = _tile(page, orphan["gpu"]["uuid"])
        assert tile.locator(".seg.pod").count() == 0
        unattributed = tile.locator(".seg.nopod")
        assert unattributed.count() == 1 and tile.locator(".m-nopod").count() == 1
        found = re.fullmatch(r"no pod: (\d+\.\d) GiB", unattributed.get_attribute("title") or "")
        assert found is not None
        # The demo's memory moves by a few percent between the query and the page.
        assert float(found.group(1)) == pytest.approx(orphan["usedMemoryBytes"] / 1024**3, rel=0.05)
        assert "repeating-linear-gradient" in select_all(
            page,
            f"{_tile_selector(orphan['gpu']['uuid'])} .seg.nopod",
            "els => getComputedStyle(els[0]).backgroundImage",
        )
        # Hover shows its processes: the orphan PID, with no pod.
        tile.hover()
        details = page.locator("#details")
        details.locator(f"text={orphan_pid}").wait_for(timeout=TIMEOUT_MS)
        assert "no pod" in details.inner_text()

        # The same tile's colour for a pod is the same on the next load.
        page.reload()
        page.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
        assert _pod_colours(page, shared_uuid) == colours
    assert browser.blocked == [] and browser.problems == []


def test_details_opened_before_the_first_tick_fetch_the_gpus_processes(
    demo: LiveDemo, tmp_path: Path
) -> None:
    orphan_node, orphan_pid = demo.demo.cluster.orphan
    body = demo.query(f'{{ gpuProcesses(nodeName: "{orphan_node}") {{ pid gpu {{ uuid }} }} }}')
    orphan_uuid = next(
        p["gpu"]["uuid"] for p in body["data"]["gpuProcesses"] if p["pid"] == orphan_pid
    )
    with chromium(tmp_path / "profile") as browser:
        page = browser.page
        # A socket that never answers: no tick brings the details.
        page.route_web_socket(re.compile(r".*/graphql$"), lambda ws: None)
        sent: list[str] = []
        page.on("request", lambda r: sent.append(r.post_data or "") if r.method == "POST" else None)
        page = _open_map(browser, demo.url)
        # The first picture holds what the tiles draw, and no PID.
        assert page.evaluate(
            """() => [...window.gpugraphMap.model.gpus.values()].every((e) =>
                e.gpu.name === undefined && e.gpu.processes.every((p) => p.pid === undefined))"""
        )
        _tile(page, orphan_uuid).click()
        details = page.locator("#details")
        details.locator("td", has_text=str(orphan_pid)).wait_for(timeout=TIMEOUT_MS)
        assert "no pod" in details.inner_text()
        assert sum("MapGpuDetails" in s for s in sent) == 1
        assert page.evaluate("() => document.documentElement.dataset.ticks") is None
    assert browser.blocked == [] and browser.problems == []


def test_clicking_a_pod_highlights_its_gpus_on_every_node(demo: LiveDemo, tmp_path: Path) -> None:
    namespace, name = demo.demo.cluster.worker
    body = demo.query(
        "{ pods { namespace name gpus { uuid node { name } } } }",
    )
    pods = {f"{p['namespace']}/{p['name']}": p for p in body["data"]["pods"]}
    worker = pods[f"{namespace}/{name}"]
    expected = {g["uuid"] for g in worker["gpus"]}
    assert len(expected) == GPUS - 2  # the worker's GPUs on node 0
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)
        page.click(f'#pods .pod-link[data-pod="{namespace}/{name}"]')
        lit = select_all(page, ".tile.hl", "els => els.map(e => e.dataset.uuid)")
        assert set(lit) == expected
        assert page.locator(".nodes.highlighting").count() == 1
        summary = page.inner_text("#pod-selected")
        assert f"{len(expected)} GPUs on {worker['gpus'][0]['node']['name']}" in summary

        # Every pod: the highlight is exactly its GPUs, across all nodes.
        for key, pod in pods.items():
            if not pod["gpus"]:
                continue
            page.click(f'#pods .pod-link[data-pod="{key}"]')
            lit = select_all(page, ".tile.hl", "els => els.map(e => e.dataset.uuid)")
            assert set(lit) == {g["uuid"] for g in pod["gpus"]}, key
        screenshot(page, tmp_path, "map-highlight.png")
        # Escape clears it.
        page.keyboard.press("Escape")
        assert page.locator(".tile.hl").count() == 0
    assert browser.blocked == [] and browser.problems == []


def test_filters_and_keyboard(demo: LiveDemo, tmp_path: Path) -> None:
    cluster = demo.demo.cluster
    _, shared_uuid = cluster.shared_gpu
    truth = _up_gpus(demo)
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)

        def visible() -> set[str]:
            found: list[str] = select_all(
                page,
                ".tile[data-uuid]",
                "els => els.filter(e => !e.hidden).map(e => e.dataset.uuid)",
            )
            return set(found)

        page.select_option("#f-only", "shared")
        assert visible() == {shared_uuid}
        page.select_option("#f-only", "unrequested")
        notebook = next(
            uuid
            for uuid in truth
            if "research/notebook-alice" in (_tile(page, uuid).get_attribute("aria-label") or "")
        )
        assert visible() == {notebook}
        page.select_option("#f-only", "unattributed")
        # The orphan's GPU, and the GPU of the pod deleted while running (history's scenario).
        unattributed = visible()
        assert len(unattributed) == 2
        assert {truth[u] for u in unattributed} == {"gpu-node-0", "gpu-node-1"}
        page.select_option("#f-only", "")
        page.select_option("#f-ns", "research")
        assert visible() == {notebook}
        page.select_option("#f-ns", "")
        page.fill("#f-node", "gpu-node-1")
        assert visible() == {u for u, n in truth.items() if n == "gpu-node-1"}
        # Enter in the field filters in place: no form submission, no navigation.
        page.press("#f-node", "Enter", no_wait_after=True)
        assert visible() == {u for u, n in truth.items() if n == "gpu-node-1"}
        assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1
        page.fill("#f-node", "")
        assert visible() == set(truth)

        # Keyboard: Tab reaches the first tile; arrows move; Enter pins its details.
        first = page.locator(".tile[data-uuid]").first
        page.focus("#graphiql-link")  # the header's last control
        page.keyboard.press("Tab")
        focused = page.evaluate("() => document.activeElement.dataset.uuid")
        assert focused == first.get_attribute("data-uuid")
        page.keyboard.press("ArrowRight")
        second = page.evaluate("() => document.activeElement.dataset.uuid")
        assert second == page.locator(".tile[data-uuid]").nth(1).get_attribute("data-uuid")
        page.keyboard.press("ArrowDown")
        below = page.evaluate("() => document.activeElement.dataset.uuid")
        assert truth[below] == "gpu-node-1"  # same column, next node
        page.keyboard.press("Enter")
        assert page.locator(f'.tile.pinned[data-uuid="{below}"]').count() == 1
        assert below in page.inner_text("#details")
        page.keyboard.press("Escape")
        assert page.locator(".tile.pinned").count() == 0
    assert browser.blocked == [] and browser.problems == []


def test_a_change_of_the_fake_gpus_shows_without_a_reload(demo: LiveDemo, tmp_path: Path) -> None:
    cluster = demo.demo.cluster
    shared_node, shared_uuid = cluster.shared_gpu
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)
        page.evaluate("() => { window.sameDocument = true; }")
        tile = _tile(page, shared_uuid)
        demo.freeze_gpus()

        def hot(gpu: dict[str, Any]) -> None:
            if gpu["uuid"] == shared_uuid:
                gpu["temperatureC"] = 97
                gpu["utilizationGpu"] = 3

        # New numbers: the same elements, updated in place.
        demo.set_gpus(shared_node, hot)
        tile.locator(".t-temp", has_text="97\u00b0C").wait_for(timeout=TIMEOUT_MS)
        assert tile.locator(".t-util").inner_text() == "3%"
        assert "97\u00b0C" in (tile.get_attribute("aria-label") or "")
        assert tile.locator(".m-mig").count() == 0

        def split(gpu: dict[str, Any]) -> None:
            hot(gpu)
            if gpu["uuid"] == shared_uuid:
                gpu["migEnabled"] = True
                gpu["processes"] = gpu["processes"][:1]  # chat-api-1 is gone

        # A new marker and one pod fewer: the tile is drawn anew.
        demo.set_gpus(shared_node, split)
        tile.locator(".m-mig").wait_for(timeout=TIMEOUT_MS)
        pods = tile.locator(".seg.pod").evaluate_all("els => els.map(e => e.dataset.pod)")
        assert pods == ["inference/chat-api-0"]
        assert tile.locator(".m-shared").count() == 0
        assert "MIG enabled" in (tile.get_attribute("aria-label") or "")

        def lost(gpu: dict[str, Any]) -> None:
            split(gpu)
            if gpu["uuid"] == shared_uuid:
                gpu["error"] = "GPU is lost"

        # A failing GPU says so on its tile; its node's other GPUs are unaffected.
        demo.set_gpus(shared_node, lost)
        tile.locator(".m-err").wait_for(timeout=TIMEOUT_MS)
        assert tile.locator(".m-err").get_attribute("title") == "GPU error: GPU is lost"
        node = page.locator(f'section[data-node="{shared_node}"]')
        assert node.locator(".tile.down").count() == 0
        assert node.locator(".m-err").count() == 1
        # The same document, one socket, no request but the first load's, its GPU events' and
        # its idle allocations' (each asked again once a minute).
        assert page.evaluate("() => window.sameDocument") is True
        assert len([u for u in browser.requested if "/graphql" in u]) == 3
        screenshot(page, tmp_path, "map-live.png")
        # Back to the demo's own GPUs, for the tests that share this demo.
        demo.set_gpus(shared_node, lambda gpu: None)
        tile.locator(".m-shared").wait_for(timeout=TIMEOUT_MS)
        assert tile.locator(".m-err").count() == 0
    _only_local(browser, demo.url)


def test_an_agent_that_stops_greys_its_node_without_a_reload(tmp_path: Path) -> None:
    require_chromium()
    require_map_assets()
    with (
        live_demo(nodes=NODES, gpus_per_node=2, interval=0.5) as demo,
        chromium(tmp_path / "profile") as browser,
    ):
        page = _open_map(browser, demo.url)
        _wait_ticks(page, 1)
        agent = demo.demo.agents[0]
        node = page.locator(f'section[data-node="{agent.node.name}"]')
        assert "down" not in (node.get_attribute("class") or "")
        demo.run(agent.server.stop(0))
        page.wait_for_selector(f'section.down[data-node="{agent.node.name}"]', timeout=TIMEOUT_MS)
        reason = node.locator(".n-status").inner_text()
        assert reason.startswith("agent down: ") and agent.node.name not in reason
        # Its tiles stay, greyed, with their last numbers; the other node's do not.
        tiles = node.locator(".tile[data-uuid]")
        assert tiles.count() == 2
        assert all(
            "down" in (c or "") for c in tiles.evaluate_all("els => els.map(e => e.className)")
        )
        assert "agent down" in (tiles.first.get_attribute("aria-label") or "")
        assert page.locator(".tile.down[data-uuid]").count() == 2
        assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1
        screenshot(page, tmp_path, "map-agent-lost.png")
    assert browser.blocked == [] and browser.problems == []


def test_a_gpus_panel_shows_who_held_it_in_the_last_24_hours(
    demo: LiveDemo, tmp_path: Path
) -> None:
    # The orphan's GPU: the backfilled pod that finished an hour ago, and the orphan itself.
    orphan_node, orphan_pid = demo.demo.cluster.orphan
    body = demo.query(f'{{ gpuProcesses(nodeName: "{orphan_node}") {{ pid gpu {{ uuid }} }} }}')
    uuid = next(p["gpu"]["uuid"] for p in body["data"]["gpuProcesses"] if p["pid"] == orphan_pid)
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)
        _tile(page, uuid).click()
        strip = page.locator("#details .history-strip")
        strip.wait_for(timeout=TIMEOUT_MS)
        titles = strip.locator(".seg").evaluate_all("els => els.map(e => e.title)")
        legend = page.locator("#details .history-legend").inner_text()
    assert any(t.startswith("research/lr-sweep-7, PID 7300,") for t in titles), titles
    assert any(f"PID {orphan_pid}," in t and t.endswith("now UTC") for t in titles), titles
    assert "research/lr-sweep-7" in legend and "(no pod)" in legend
    assert browser.blocked == []


def test_the_pages_html_sends_the_first_query_without_waiting_for_the_bundle(
    demo: LiveDemo, tmp_path: Path
) -> None:
    with chromium(tmp_path / "profile") as browser:
        page = browser.page
        # A tab signed in earlier; the bundle never arrives.
        page.add_init_script("sessionStorage.setItem('gpugraph.map.token', 'tab-token')")
        page.route(f"**{STATIC_URL}/map.js", lambda route: route.abort())
        with page.expect_request(f"{demo.url}/graphql", timeout=TIMEOUT_MS) as sent:
            page.goto(f"{demo.url}{MAP_PATH}", timeout=TIMEOUT_MS)
        request = sent.value
        assert request.method == "POST"
        assert request.headers["authorization"] == "Bearer tab-token"
        body = request.post_data_json
        assert body["operationName"] == "ClusterMap" and body["query"] == SNAPSHOT_QUERY
        answer = request.response()
        assert answer is not None and answer.status == 200
        names = {n["name"] for n in answer.json()["data"]["nodes"]}
        assert len(names) == NODES
    assert browser.blocked == []


def test_graphiql_link_opens_the_gpus_query(demo: LiveDemo, tmp_path: Path) -> None:
    _, shared_uuid = demo.demo.cluster.shared_gpu
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)
        _tile(page, shared_uuid).click()
        link = page.locator("#details a.graphiql")
        with browser.context.expect_page() as opened:
            link.click()
        ide = opened.value
        ide.wait_for_selector(".graphiql-query-editor .CodeMirror", timeout=TIMEOUT_MS)
        text = ide.evaluate(
            "() => document.querySelector('.graphiql-query-editor .CodeMirror')"
            ".CodeMirror.getValue()"
        )
        assert text == GPU_QUERY
        ide.click(".graphiql-execute-button")
        ide.wait_for_function(
            """uuid => {
                const pane = document.querySelector('.graphiql-response .CodeMirror');
                const text = pane === null ? "" : pane.CodeMirror.getValue();
                return text.includes(`"uuid": "${uuid}"`) && text.includes("chat-api-0");
            }""",
            arg=shared_uuid,
            timeout=TIMEOUT_MS,
        )
    assert browser.blocked == []


def test_with_auth_the_map_asks_for_a_token_and_shows_what_it_may_see(tmp_path: Path) -> None:
    require_chromium()
    require_map_assets()
    with (
        live_demo(
            nodes=NODES, gpus_per_node=GPUS, interval=0.5, auth=True, allocation_nodes=False
        ) as demo,
        chromium(tmp_path / "profile") as browser,
    ):
        reviews = demo.demo.api.reviews  # type: ignore[union-attr]
        research = reviews.token_of("research-user")
        # The page and its assets need no token; the data does.
        for path in (MAP_PATH, f"{STATIC_URL}/map.js", f"{STATIC_URL}/map.css"):
            assert httpx.get(f"{demo.url}{path}").status_code == 200, path
        assert (
            httpx.post(f"{demo.url}/graphql", json={"query": "{ nodes { name } }"}).status_code
            == 401
        )

        page = browser.page
        page.goto(f"{demo.url}{MAP_PATH}", timeout=TIMEOUT_MS)
        prompt = page.locator("#auth")
        prompt.wait_for(state="visible", timeout=TIMEOUT_MS)
        screenshot(page, tmp_path, "map-auth.png")
        # A wrong token brings the prompt back, saying so.
        page.fill("#auth-token", "not-a-token")
        page.click("#auth-form button[type=submit]")
        page.locator("#auth-error", has_text="refused").wait_for(timeout=TIMEOUT_MS)
        assert prompt.is_visible()

        page.fill("#auth-token", research)
        page.click("#auth-form button[type=submit]")
        page.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
        _wait_ticks(page, 2)  # the socket's connection_init carried the token
        truth = _up_gpus(demo, research)
        shown = select_all(page, ".tile[data-uuid]", "els => els.map(e => e.dataset.uuid)")
        assert set(shown) == set(truth) and set(truth.values()) == {"gpu-node-1"}
        text = page.inner_text("body")
        assert "research/notebook-alice" in text
        assert "ml-training" not in text and "inference" not in text
        assert page.evaluate("() => sessionStorage.getItem('gpugraph.map.token')") == research

        # The server goes away: the page says so and fades the tiles, stale.
        demo.demo.request_stop()
        page.wait_for_selector('#status[data-state="reconnecting"]', timeout=TIMEOUT_MS)
        assert page.locator(".nodes.stale").count() == 1
        screenshot(page, tmp_path, "map-stale.png")
    assert browser.blocked == []


@contextlib.contextmanager
def _signed_in_with_short_reviews(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[StubApiServer, Any, str]]:
    """The map of an auth demo whose reviews are kept for a second, signed in as research-user.

    The subscription re-checks its caller once the reviews expire, so what
    happens to the token shows within a few ticks.
    """
    require_chromium()
    require_map_assets()
    settings = Demo.settings
    monkeypatch.setattr(
        Demo, "settings", lambda demo: dataclasses.replace(settings(demo), auth_cache_ttl=1.0)
    )
    with (
        live_demo(
            nodes=NODES, gpus_per_node=2, interval=0.5, auth=True, allocation_nodes=False
        ) as demo,
        chromium(tmp_path / "profile") as browser,
    ):
        api = demo.demo.api
        assert api is not None
        token = api.reviews.token_of("research-user")
        page = browser.page
        page.goto(f"{demo.url}{MAP_PATH}", timeout=TIMEOUT_MS)
        page.locator("#auth").wait_for(state="visible", timeout=TIMEOUT_MS)
        page.fill("#auth-token", token)
        page.click("#auth-form button[type=submit]")
        _wait_ticks(page, 2)
        assert page.locator("#auth").is_hidden()
        yield api, page, token
    assert browser.blocked == []


def test_a_token_revoked_mid_subscription_brings_the_prompt_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _signed_in_with_short_reviews(tmp_path, monkeypatch) as (api, page, _):
        api.reviews.revoke("research-user")
        page.locator("#auth").wait_for(state="visible", timeout=TIMEOUT_MS)
        assert "no longer accepts" in page.inner_text("#auth-error")
        assert page.evaluate("() => sessionStorage.getItem('gpugraph.map.token')") is None
        # The ending result is not read as the user's one node going down.
        assert page.locator("section.node").count() == 1
        assert page.locator("section.node.down").count() == 0


def test_while_tokens_cannot_be_checked_the_map_keeps_its_token_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _signed_in_with_short_reviews(tmp_path, monkeypatch) as (api, page, token):
        # The API server answers reviews with 503: the subscription ends, and its
        # new socket is refused (4403) as for a bad token; but the token was not
        # refused, so the page must not ask for another.
        api.reviews.unavailable = True
        page.locator("#banner", has_text="cannot check credentials").wait_for(timeout=TIMEOUT_MS)
        assert page.locator("#auth").is_hidden()
        assert page.evaluate("() => sessionStorage.getItem('gpugraph.map.token')") == token
        screenshot(page, tmp_path, "map-no-reviews.png")
        # Back: the same token, live again, with no prompt in between.
        api.reviews.unavailable = False
        page.wait_for_selector("#banner[hidden]", state="attached", timeout=TIMEOUT_MS)
        page.wait_for_selector('#status[data-state="live"]', timeout=TIMEOUT_MS)
        assert page.locator("#auth").is_hidden()


# Markup in every string the API hands the page. Kubernetes names cannot hold
# it, but NVML's product names and agents' error messages can, and the page
# must not depend on the server's validation to stay inert.
HOSTILE = "<img src=x class=injected>\"'&"


def test_names_and_messages_from_the_api_are_text_never_markup(
    demo: LiveDemo, tmp_path: Path
) -> None:
    cluster = demo.demo.cluster
    _, shared_uuid = cluster.shared_gpu
    with chromium(tmp_path / "profile") as browser:
        page = _open_map(browser, demo.url)
        _wait_ticks(page, 1)
        # A tick through the page's own path, with markup in every string field;
        # the server's ticks are stopped so that none redraws it before the checks.
        page.evaluate(
            """([uuid, evil, down]) => {
                const map = window.gpugraphMap;
                map.stopLive();
                const gpus = [...map.model.gpus.values()].map((e) => e.gpu);
                const gpu = gpus.find((g) => g.uuid === uuid);
                gpu.name = evil;
                gpu.error = evil;
                gpu.processes = [{
                    pid: 4242,
                    usedMemoryBytes: 2 ** 30,
                    smUtilization: 5,
                    container: { name: evil },
                    pod: { namespace: evil, name: evil, gpuRequest: 0 },
                }];
                const error = { message: `agent on node '${down}' unavailable: ${evil}` };
                map.applyTick({ data: { gpuUpdates: gpus }, errors: [error] });
            }""",
            [shared_uuid, HOSTILE, cluster.down_node],
        )
        tile = _tile(page, shared_uuid)
        tile.click()
        details = page.inner_text("#details")
        assert HOSTILE in details  # GPU name, error, pod and container, as text
        assert f"{HOSTILE}/{HOSTILE}" in page.inner_text("#pods")
        # Its namespace, new with this tick, is offered by the filter at once.
        options = select_all(page, "#f-ns option", "els => els.map(e => e.value)")
        assert HOSTILE in options
        assert HOSTILE in page.inner_text(f'section[data-node="{cluster.down_node}"] .n-status')
        assert HOSTILE in (tile.get_attribute("aria-label") or "")
        assert tile.locator(".seg.pod").first.get_attribute("data-pod") == f"{HOSTILE}/{HOSTILE}"
        # The pod is still a pod: selecting it highlights its GPU.
        page.locator("#pods .pod-link", has_text=f"{HOSTILE}/{HOSTILE}").click()
        assert "hl" in (tile.get_attribute("class") or "")
        assert page.locator("img, .injected").count() == 0
    assert browser.blocked == []

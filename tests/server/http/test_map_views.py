"""The cluster map's views in Debian's headless Chromium: colours, filters, shared links, widths.

Against the embedded demo cluster, as ``test_cluster_map``; screenshots of
the map at 1400 and 800 px wide go to ``test-output/``.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from api.demo.history_scenario import DELETED_NODE
from api.http.cluster_map import MAP_PATH
from tests.server.http.test_cluster_map import _open_map, _tile, _up_gpus, _wait_ticks
from tests.support.browser import TIMEOUT_MS, chromium, require_chromium, screenshot, select_all
from tests.support.demo import LiveDemo, live_demo
from tests.support.map_assets import require_map_assets
from tests.support.polling import eventually

pytestmark = pytest.mark.browser

NODES, GPUS = 4, 4
WIDE, NARROW = (1400, 900), (800, 600)
# Where a click pins a tile: its corner, not a pod's part of its bar (which selects the pod).
CORNER = {"x": 4, "y": 4}


@pytest.fixture(scope="module")
def demo() -> Iterator[LiveDemo]:
    require_chromium()
    require_map_assets()
    with live_demo(
        nodes=NODES, gpus_per_node=GPUS, interval=0.5, allocation_nodes=False
    ) as running:
        yield running


def _lab(css: str) -> tuple[float, float, float]:
    """CIELAB (D65) of a computed ``rgb(r, g, b)`` colour."""
    found = re.fullmatch(r"rgb\((\d+), (\d+), (\d+)\)", css)
    assert found is not None, css

    def linear(c: float) -> float:
        return ((c + 0.055) / 1.055) ** 2.4 if c > 0.04045 else c / 12.92

    r, g, b = (linear(int(found[i]) / 255) for i in (1, 2, 3))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _distance(first: str, second: str) -> float:
    return math.dist(_lab(first), _lab(second))


def _visible_tiles(page: Any) -> set[str]:
    found: list[str] = select_all(
        page,
        ".tile[data-uuid]",
        "els => els.filter(e => e.checkVisibility()).map(e => e.dataset.uuid)",
    )
    return set(found)


def _visible_pods(page: Any) -> set[str]:
    found: list[str] = select_all(
        page, "#pods li", "els => els.filter(e => !e.hidden).map(e => e.dataset.pod)"
    )
    return set(found)


def _pods_by_node(demo: LiveDemo) -> dict[str, set[str]]:
    body = demo.query("{ gpus { node { name } processes { pod { namespace name } } } }")
    nodes: dict[str, set[str]] = {}
    for gpu in body["data"]["gpus"]:
        pods = nodes.setdefault(gpu["node"]["name"], set())
        pods.update(
            f"{p['pod']['namespace']}/{p['pod']['name']}" for p in gpu["processes"] if p["pod"]
        )
    return nodes


# Before any script of the page: the nodes drawn in each frame, until every tile is.
FRAMES_PROBE = """(() => {
    window.__frames = [];
    const frame = () => {
        const sections = [...document.querySelectorAll("#nodes > section")];
        if (sections.length) window.__frames.push(sections.map((s) => s.dataset.node));
        if (!document.documentElement.dataset.rendered) requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
})()"""


def test_the_first_picture_draws_the_nodes_in_view_and_the_rest_follow(
    demo: LiveDemo, tmp_path: Path
) -> None:
    names = {n["name"] for n in demo.query("{ nodes { name } }")["data"]["nodes"]}
    # Room for about one node: the rest are below the fold.
    with chromium(tmp_path / "profile", viewport=(800, 260)) as browser:
        page = browser.page
        page.add_init_script(FRAMES_PROBE)
        page.goto(f"{demo.url}{MAP_PATH}", timeout=TIMEOUT_MS)
        page.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
        frames: list[list[str]] = page.evaluate("() => window.__frames")
        first_picture = frames[0]
        assert 0 < len(first_picture) < NODES, frames
        # The first nodes, in the map's order, and then all of them, in the same order.
        drawn = select_all(page, "#nodes > section", "els => els.map(e => e.dataset.node)")
        assert drawn == first_picture + drawn[len(first_picture) :]
        assert set(drawn) == names and len(drawn) == NODES
        assert page.locator(".tile[data-uuid]").count() == len(_up_gpus(demo))
        assert browser.problems == []


def test_the_pods_of_one_node_have_colours_of_their_own(demo: LiveDemo, tmp_path: Path) -> None:
    with chromium(tmp_path / "profile", viewport=WIDE) as browser:
        page = _open_map(browser, demo.url)
        segments: list[tuple[str, str, str]] = select_all(
            page,
            ".seg.pod",
            "els => els.map(e => [e.closest('section').dataset.node, e.dataset.pod,"
            " getComputedStyle(e).backgroundColor])",
        )
        swatches: dict[str, str] = dict(
            select_all(
                page,
                "#pods .pod-link",
                "els => els.map(e => [e.dataset.pod,"
                " getComputedStyle(e.querySelector('.swatch')).backgroundColor])",
            )
        )
    by_node: dict[str, dict[str, str]] = {}
    for node, pod, colour in segments:
        assert by_node.setdefault(node, {}).setdefault(pod, colour) == colour  # one per pod
        assert swatches[pod] == colour  # the list's swatch is the tile's colour
    assert by_node.keys() == _pods_by_node(demo).keys()
    for node, colours in by_node.items():
        # Apart to the eye, not only as strings: at least 30 in CIELAB (CIE76).
        for (a, first), (b, second) in itertools.combinations(colours.items(), 2):
            assert _distance(first, second) >= 30, (node, a, first, b, second)
    assert len(by_node["gpu-node-0"]) == 3  # two inference replicas and a training worker
    assert browser.problems == []


def test_a_filter_that_matches_nothing_says_so_and_filters_the_pods_too(
    demo: LiveDemo, tmp_path: Path
) -> None:
    pods = _pods_by_node(demo)
    with chromium(tmp_path / "profile", viewport=WIDE) as browser:
        page = _open_map(browser, demo.url)
        empty = page.locator("#empty")
        assert empty.is_hidden()
        page.fill("#f-node", "nope")
        empty.wait_for(state="visible", timeout=TIMEOUT_MS)
        assert "Nothing matches" in empty.inner_text()
        assert _visible_tiles(page) == set() and _visible_pods(page) == set()
        assert page.locator("#pods-empty").is_visible()
        screenshot(page, tmp_path, "map-nothing-matches.png")
        page.click("#clear-filters")
        assert page.input_value("#f-node") == "" and empty.is_hidden()
        assert _visible_tiles(page) == set(_up_gpus(demo))
        # One node: its GPUs, and only its pods in the list.
        page.fill("#f-node", "gpu-node-1")
        assert empty.is_hidden()
        assert _visible_pods(page) == pods["gpu-node-1"]
        page.fill("#f-node", "")
        page.select_option("#f-only", "shared")
        assert _visible_pods(page) == {"inference/chat-api-0", "inference/chat-api-1"}
        page.select_option("#f-only", "")
        assert _visible_pods(page) == set().union(*pods.values())
    assert browser.problems == []


def test_only_unattributed_keeps_the_down_node_visible_and_marked(
    demo: LiveDemo, tmp_path: Path
) -> None:
    down = demo.demo.cluster.down_node
    orphan_node, _ = demo.demo.cluster.orphan
    with chromium(tmp_path / "profile", viewport=WIDE) as browser:
        page = _open_map(browser, demo.url)
        section = page.locator(f'section[data-node="{down}"]')
        marker = section.locator(".n-unknown")
        assert marker.is_hidden()  # without filters a down node is simply down
        page.select_option("#f-only", "unattributed")
        assert section.is_visible() and "unknown" in (section.get_attribute("class") or "")
        assert marker.is_visible() and marker.inner_text() == "unknown"
        # Its slots say nothing either way: hidden. The matches: the orphan's GPU, and
        # the GPU of the pod deleted while it ran (once the demo has deleted it).
        assert section.locator(".tile").evaluate_all("els => els.every(e => e.hidden)")
        truth = _up_gpus(demo)
        deleted_node = demo.demo.cluster.nodes[DELETED_NODE].name

        def both_shown() -> set[str] | None:
            shown = _visible_tiles(page)
            return shown if {truth[uuid] for uuid in shown} == {orphan_node, deleted_node} else None

        shown = eventually(both_shown, what="the two GPUs with memory outside any pod")
        assert len(shown) == 2
        screenshot(page, tmp_path, "map-only-unattributed.png")
    assert browser.problems == []


def test_filters_and_the_selection_live_in_the_url(demo: LiveDemo, tmp_path: Path) -> None:
    _, shared_uuid = demo.demo.cluster.shared_gpu
    with chromium(tmp_path / "profile", viewport=WIDE) as browser:
        page = _open_map(browser, demo.url)
        entries = page.evaluate("() => history.length")
        page.select_option("#f-ns", "inference")
        page.fill("#f-node", "node-0")
        _tile(page, shared_uuid).click(position=CORNER)
        page.click('#pods .pod-link[data-pod="inference/chat-api-1"]')
        shared = page.url
        query = parse_qs(urlsplit(shared).query)
        assert query == {
            "ns": ["inference"],
            "node": ["node-0"],
            "gpu": [shared_uuid],
            "pod": ["inference/chat-api-1"],
        }
        # Back goes to the page that linked here, not through every click.
        assert page.evaluate("() => history.length") == entries

        # The link, opened afresh, shows the same view.
        other = browser.context.new_page()
        other.goto(shared, timeout=TIMEOUT_MS)
        other.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
        assert other.input_value("#f-ns") == "inference"
        assert other.input_value("#f-node") == "node-0"
        assert _visible_tiles(other) == {shared_uuid}
        classes = set((_tile(other, shared_uuid).get_attribute("class") or "").split())
        assert {"pinned", "hl"} <= classes
        assert shared_uuid in other.inner_text("#details")
        pressed = other.locator('#pods .pod-link[aria-pressed="true"]')
        assert pressed.get_attribute("data-pod") == "inference/chat-api-1"

        # Clearing the view clears the link.
        other.keyboard.press("Escape")
        assert parse_qs(urlsplit(other.url).query) == {"ns": ["inference"], "node": ["node-0"]}
        other.click("#f-node")
        other.fill("#f-node", "")
        other.select_option("#f-ns", "")
        assert other.url == f"{demo.url}{MAP_PATH}"
    assert browser.problems == []


def _in_view(page: Any, selector: str) -> bool:
    inside: bool = page.eval_on_selector(
        selector,
        """el => { const r = el.getBoundingClientRect();
            return r.top >= 0 && r.left >= 0 && r.height > 0
              && r.bottom <= innerHeight && r.right <= innerWidth; }""",
    )
    return inside


def _lines(page: Any, selector: str) -> list[int]:
    """How many lines of text each element matching ``selector`` takes."""
    lines: list[int] = select_all(
        page,
        selector,
        """els => els.map(e => { const range = document.createRange();
            range.selectNodeContents(e); return range.getClientRects().length; })""",
    )
    return lines


@pytest.mark.parametrize("viewport", [WIDE, NARROW], ids=["1400px", "800px"])
def test_the_details_stay_in_view_and_pids_stay_on_one_line(
    demo: LiveDemo, tmp_path: Path, viewport: tuple[int, int]
) -> None:
    orphan_node, orphan_pid = demo.demo.cluster.orphan
    _, shared_uuid = demo.demo.cluster.shared_gpu
    with chromium(tmp_path / "profile", viewport=viewport) as browser:
        page = _open_map(browser, demo.url)
        _wait_ticks(page, 1)
        # The first GPU and the last (the board scrolled to its end): the details beside both.
        for tile in (page.locator(".tile[data-uuid]").first, page.locator(".tile[data-uuid]").last):
            tile.click(position=CORNER)
            assert (tile.get_attribute("data-uuid") or "") in page.inner_text("#details")
            assert _in_view(page, "#details") and _in_view(page, ".tile.pinned")
        # The orphan's PID has five digits; the shared GPU's rows name two pods.
        orphan = page.locator(f'section[data-node="{orphan_node}"] .tile[data-uuid]').nth(1)
        orphan.click(position=CORNER)
        page.locator("#details td", has_text=str(orphan_pid)).wait_for(timeout=TIMEOUT_MS)
        assert _lines(page, "#details .procs td:first-child") == [1]
        _tile(page, shared_uuid).click(position=CORNER)
        page.locator("#details .procs tbody tr").nth(1).wait_for(timeout=TIMEOUT_MS)
        assert _lines(page, "#details .procs td:first-child") == [1, 1]
        # Memory and SM too: numbers never break.
        assert set(_lines(page, "#details .procs td:nth-child(n+3)")) == {1}
        assert _in_view(page, "#details")
        screenshot(page, tmp_path, f"map-{viewport[0]}.png", full_page=False)
    assert browser.problems == []


def test_signed_in_the_map_names_the_caller_and_signs_out(tmp_path: Path) -> None:
    require_chromium()
    require_map_assets()
    with (
        live_demo(nodes=3, gpus_per_node=2, interval=0.5, auth=True) as demo,
        chromium(tmp_path / "profile", viewport=NARROW) as browser,
    ):
        reviews = demo.demo.api.reviews  # type: ignore[union-attr]
        page = browser.page
        page.goto(f"{demo.url}{MAP_PATH}", timeout=TIMEOUT_MS)
        page.locator("#auth").wait_for(state="visible", timeout=TIMEOUT_MS)
        assert page.locator("#viewer").is_hidden()
        page.fill("#auth-token", reviews.token_of("research-user"))
        page.click("#auth-form button[type=submit]")
        page.wait_for_selector("html[data-rendered]", timeout=TIMEOUT_MS)
        viewer = page.locator("#viewer")
        viewer.wait_for(state="visible", timeout=TIMEOUT_MS)
        # The name the TokenReview gave the token, as the server read it.
        assert viewer.inner_text() == "Signed in as research-user"
        body = demo.query("{ viewer { username } }", reviews.token_of("research-user"))
        assert body["data"]["viewer"] == {"username": "research-user"}
        assert page.locator(".tile[data-uuid]").count() > 0
        screenshot(page, tmp_path, "map-signed-in.png", full_page=False)

        page.click("#sign-out")
        page.locator("#auth").wait_for(state="visible", timeout=TIMEOUT_MS)
        assert page.inner_text("#auth-error") == ""
        assert page.evaluate("() => sessionStorage.getItem('gpugraph.map.token')") is None
        # What the token showed is gone with it.
        assert page.locator(".tile").count() == 0 and page.locator("#pods li").count() == 0
        assert viewer.is_hidden() and page.locator("#sign-out").is_hidden()
        # Signed in again (as admin this time): the name follows the token.
        page.fill("#auth-token", reviews.token_of("admin"))
        page.click("#auth-form button[type=submit]")
        page.locator("#viewer", has_text="Signed in as admin").wait_for(timeout=TIMEOUT_MS)
    # The first load's 401 (no token yet) is the one console error.
    assert browser.blocked == []
    assert [p for p in browser.problems if "401" not in p] == []

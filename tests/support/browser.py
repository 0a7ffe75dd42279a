"""Debian's headless Chromium through Playwright, with every non-loopback request blocked.

Pages under test must work air-gapped: each request the page makes outside
127.0.0.1/localhost is aborted and recorded, so a test can assert there was
none. Screenshots go to the test's temp folder and to ``test-output/`` (kept
by CI as artefacts).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.support import require

__all__ = [
    "CHROMIUM",
    "OUTPUT_DIR",
    "TIMEOUT_MS",
    "Browser",
    "chromium",
    "require_chromium",
    "screenshot",
    "select_all",
]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO_ROOT = Path(__file__).resolve().parents[2]
OUTPUT_DIR = REPO_ROOT / "test-output"
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
TIMEOUT_MS = 30_000


def require_chromium() -> None:
    """Skip (or fail under GPUGRAPH_REQUIRE_ALL=1) without Chromium and Playwright."""
    require(CHROMIUM.is_file(), f"Debian chromium is not installed at {CHROMIUM}")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        require(False, "the playwright Python package is not installed")


def select_all(page: Any, selector: str, function: str) -> Any:
    """JavaScript ``els => ...`` over the elements matching ``selector``, in one evaluation.

    Playwright's ``eval_on_selector_all`` finds the elements and calls the
    function in two round trips: a live tick in between can redraw a tile and
    leave the test holding elements no longer in the document.
    """
    return page.evaluate(
        f"selector => ({function})([...document.querySelectorAll(selector)])", selector
    )


@dataclass
class Browser:
    """A page in a fresh headless Chromium profile, with outside requests blocked."""

    page: Any
    context: Any
    blocked: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    websockets: list[str] = field(default_factory=list)


@contextmanager
def chromium(profile: Path, *, viewport: tuple[int, int] = (1400, 900)) -> Iterator[Browser]:
    """Headless Debian Chromium via Playwright; only loopback requests go through."""
    from playwright.sync_api import Route, sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_FLAGS,
            headless=True,
            viewport={"width": viewport[0], "height": viewport[1]},
        )
        try:
            page = context.pages[0] if context.pages else context.new_page()
            browser = Browser(page, context)

            def gate(route: Route) -> None:
                url = route.request.url
                browser.requested.append(url)
                host = urlsplit(url).hostname
                if url.startswith("data:") or host in LOCAL_HOSTS:
                    route.continue_()
                else:
                    browser.blocked.append(url)
                    route.abort("blockedbyclient")

            context.route("**/*", gate)
            page.on("pageerror", lambda exc: browser.problems.append(f"page error: {exc}"))
            page.on(
                "console",
                lambda msg: (
                    browser.problems.append(f"console {msg.type}: {msg.text}")
                    if msg.type == "error"
                    else None
                ),
            )
            page.on("websocket", lambda ws: browser.websockets.append(ws.url))
            yield browser
        finally:
            context.close()


def screenshot(page: Any, tmp_path: Path, name: str, *, full_page: bool = True) -> Path:
    """Save a screenshot in ``tmp_path`` and copy it to ``test-output/``."""
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=full_page)
    OUTPUT_DIR.mkdir(exist_ok=True)
    shutil.copyfile(path, OUTPUT_DIR / name)
    return path

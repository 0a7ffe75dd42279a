"""What every browser page the server serves shares: its own assets, and nothing from outside.

GraphiQL and the cluster map load bundles built from npm packages at build
time (``make web``) from a folder of the server's own; a strict Content
Security Policy keeps them from reaching anything but this origin. Without
the bundles, their URLs answer with how to build them.
"""

from __future__ import annotations

import html
import json
import logging
import secrets
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "BUILD_COMMAND",
    "BUILD_STEPS",
    "STATIC_ROOT",
    "MissingAssets",
    "all_present",
    "asset_page",
    "build_into_command",
    "script_json",
    "static_mount",
]

logger = logging.getLogger(__name__)

STATIC_ROOT = Path(__file__).resolve().parent.parent / "static"
BUILD_COMMAND = "make web"
# What `make web` runs; spelled out for installs without the Makefile.
BUILD_STEPS = "cd web && npm ci && npm run build"


def all_present(directory: Path, files: Sequence[str]) -> bool:
    """True when every one of ``files`` is in ``directory``."""
    return all((directory / name).is_file() for name in files)


def script_json(value: object) -> str:
    """``value`` as JSON safe inside a ``<script>`` element."""
    # json.dumps output is valid JS; escaping "<" keeps "</script>" in a string inert.
    return json.dumps(value).replace("<", "\\u003c")


def content_security_policy(nonce: str) -> str:
    """Only this origin, so a page that slipped back to a CDN fails loudly in the browser."""
    return (
        "default-src 'self'; "
        f"script-src 'self' 'nonce-{nonce}'; "
        "style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; "
        "connect-src 'self'; worker-src 'self' blob:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
    )


def build_into_command(script: str, static_dir: Path) -> str:
    """The build command that writes one page's assets straight into ``static_dir``."""
    return f"cd web && npm ci && node {script} {shlex.quote(str(static_dir))}"


_MISSING = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}: {what} assets not built</title>
<style nonce="{nonce}">
body {{ font-family: system-ui, sans-serif; max-width: 46rem; margin: 3rem auto; padding: 0 1rem;
        line-height: 1.5; }}
pre {{ background: #f3f3f3; padding: .75rem 1rem; border-radius: 4px; }}
</style>
</head>
<body>
<h1>{what} assets are not built</h1>
<p>This server serves {what} from its own files so that it works without internet access,
and those files are missing from <code>{static_dir}</code>. Build them from a checkout of
gpugraph (needs Node.js and npm):</p>
<pre>{build_command}</pre>
<p>or, without make:</p>
<pre>{build_steps}</pre>
<p>Both build into the checkout. For a copy installed with <code>pip install</code>, build
straight into the folder this server reads:</p>
<pre>{build_into}</pre>
<p>then restart the server. The container image already includes them.</p>
<p>{note}</p>
</body>
</html>
"""


def missing_assets_html(
    *, what: str, title: str, nonce: str, static_dir: Path, build_into: str, note: str
) -> str:
    """A page, without scripts, saying that ``what``'s assets are missing and how to build them.

    ``note`` is HTML, written by the caller.
    """
    return _MISSING.format(
        what=html.escape(what),
        title=html.escape(title),
        nonce=html.escape(nonce),
        static_dir=html.escape(str(static_dir)),
        build_command=html.escape(BUILD_COMMAND),
        build_steps=html.escape(BUILD_STEPS),
        build_into=html.escape(build_into),
        note=note,
    )


def asset_page(
    render: Callable[[str], str],
    directory: Path,
    files: Sequence[str],
    *,
    what: str,
    title: str,
    build_into: str,
    note: str,
) -> HTMLResponse:
    """``render(nonce)``'s page (200), or one saying how to build ``files`` while missing (503).

    Either way under a fresh nonce's Content Security Policy, and never cached.
    """
    nonce = secrets.token_urlsafe(16)
    status = 200
    if all_present(directory, files):
        body = render(nonce)
    else:
        status = 503
        body = missing_assets_html(
            what=what,
            title=title,
            nonce=nonce,
            static_dir=directory,
            build_into=build_into,
            note=note,
        )
    return HTMLResponse(
        body,
        status_code=status,
        headers={
            "Content-Security-Policy": content_security_policy(nonce),
            "Cache-Control": "no-store",
        },
    )


class MissingAssets:
    """ASGI app answering every asset request with a 404 that says how to build them."""

    def __init__(self, message: str) -> None:
        self.message = message

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await PlainTextResponse(self.message, status_code=404)(scope, receive, send)


def static_mount(
    url: str, directory: Path, files: Sequence[str], *, what: str, build_into: str, name: str
) -> list[BaseRoute]:
    """A mount serving ``directory`` at ``url``, or saying how to build it while it is missing."""
    if all_present(directory, files):
        app: ASGIApp = StaticFiles(directory=directory)
    else:
        logger.warning(
            "%s assets missing from %s; their page in a browser shows how to build them (%s)",
            what,
            directory,
            BUILD_COMMAND,
        )
        app = MissingAssets(
            f"{what} assets are not built (nothing in {directory}); run `{BUILD_COMMAND}` "
            f"in a checkout, or `{build_into}` for an installed copy, and restart the server.\n"
        )
    return [Mount(url.rstrip("/"), app=app, name=name)]

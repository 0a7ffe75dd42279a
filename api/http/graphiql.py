"""GraphiQL served from the server itself, so the IDE works on an air-gapped cluster.

strawberry's own page pulls React and GraphiQL from a public CDN. This page
loads the same bundles from ``/static/graphiql/``; they are npm packages
copied there at build time (``make web``). Without them, the page says how to
build them instead of rendering blank.
"""

from __future__ import annotations

import html
import json
import logging
import secrets
import shlex
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "ASSET_FILES",
    "BUILD_COMMAND",
    "DEFAULT_STATIC_DIR",
    "EXAMPLE_QUERY",
    "STATIC_URL",
    "OfflineGraphiQL",
    "assets_present",
    "graphiql_html",
    "graphiql_response",
    "graphiql_routes",
]

logger = logging.getLogger(__name__)

DEFAULT_STATIC_DIR = Path(__file__).resolve().parent.parent / "static" / "graphiql"
STATIC_URL = "/static/graphiql"
BUILD_COMMAND = "make web"
# What `make web` runs; spelled out for installs without the Makefile.
BUILD_STEPS = "cd web && npm ci && npm run build"
# Must match the names web/build.mjs writes.
ASSET_FILES = (
    "react.production.min.js",
    "react-dom.production.min.js",
    "graphiql.min.js",
    "graphiql.min.css",
)

EXAMPLE_QUERY = """\
# Which pod, and which process inside it, is using each GPU?
# Press the run button (or Ctrl-Enter). Ctrl-Space autocompletes.
query GpuUsage {
  nodes {
    name
    gpuCapacity
    gpus {
      uuid
      name
      utilizationGpu
      memoryUsedBytes
      memoryTotalBytes
      processes {
        pid
        name
        usedMemoryBytes
        pod {
          namespace
          name
        }
      }
    }
  }
}

# Live numbers, one update per interval:
# subscription Live {
#   gpuUpdates(intervalSeconds: 2) { uuid utilizationGpu memoryUsedBytes }
# }
"""


def assets_present(static_dir: Path | None = None) -> bool:
    """True when every bundle the page loads is in ``static_dir``."""
    directory = DEFAULT_STATIC_DIR if static_dir is None else static_dir
    return all((directory / name).is_file() for name in ASSET_FILES)


def _script_json(value: object) -> str:
    # json.dumps output is valid JS; escaping "<" keeps "</script>" in a query inert.
    return json.dumps(value).replace("<", "\\u003c")


_PAGE = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>{title}</title>
<link rel="stylesheet" href="{static}/graphiql.min.css">
<style nonce="{nonce}">
html, body, #graphiql {{ height: 100%; margin: 0; overflow: hidden; }}
</style>
</head>
<body>
<div id="graphiql">Loading GraphiQL&hellip;</div>
<script src="{static}/react.production.min.js"></script>
<script src="{static}/react-dom.production.min.js"></script>
<script src="{static}/graphiql.min.js"></script>
<script nonce="{nonce}">
(function () {{
  var path = window.location.pathname;
  var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  // The Headers tab's headers go with every HTTP request; a subscription's
  // socket sends them as its connection_init payload (where the server reads
  // an Authorization header), so one fetcher per set of headers.
  var fetchers = {{}};
  function fetcher(params, options) {{
    var headers = (options && options.headers) || {{}};
    var key = JSON.stringify(headers);
    if (!fetchers[key]) {{
      fetchers[key] = GraphiQL.createFetcher({{
        url: path,
        subscriptionUrl: scheme + "//" + window.location.host + path,
        wsConnectionParams: headers,
      }});
    }}
    return fetchers[key](params, options);
  }}
  ReactDOM.createRoot(document.getElementById("graphiql")).render(
    React.createElement(GraphiQL, {{
      fetcher: fetcher,
      defaultQuery: {query},
      defaultEditorToolsVisibility: true,
      shouldPersistHeaders: false,
    }})
  );
}})();
</script>
</body>
</html>
"""

_MISSING = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}: GraphiQL assets not built</title>
<style nonce="{nonce}">
body {{ font-family: system-ui, sans-serif; max-width: 46rem; margin: 3rem auto; padding: 0 1rem;
        line-height: 1.5; }}
pre {{ background: #f3f3f3; padding: .75rem 1rem; border-radius: 4px; }}
</style>
</head>
<body>
<h1>GraphiQL assets are not built</h1>
<p>This server serves GraphiQL from its own files so that it works without internet access,
and those files are missing from <code>{static_dir}</code>. Build them from a checkout of
gpugraph (needs Node.js and npm):</p>
<pre>{build_command}</pre>
<p>or, without make:</p>
<pre>{build_steps}</pre>
<p>Both build into the checkout. For a copy installed with <code>pip install</code>, build
straight into the folder this server reads:</p>
<pre>{build_into}</pre>
<p>then restart the server. The container image already includes them.</p>
<p>The GraphQL API itself works: POST queries to this URL, or open a WebSocket
(<code>graphql-transport-ws</code>) here for subscriptions.</p>
</body>
</html>
"""


def _csp(nonce: str) -> str:
    # Only this origin, so a page that slipped back to a CDN fails loudly in the browser.
    return (
        "default-src 'self'; "
        f"script-src 'self' 'nonce-{nonce}'; "
        f"style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; "
        "connect-src 'self'; worker-src 'self' blob:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'self'"
    )


def build_into(static_dir: Path) -> str:
    """The build command that writes the assets straight into ``static_dir``."""
    return f"cd web && npm ci && node build.mjs {shlex.quote(str(static_dir))}"


def graphiql_html(
    *,
    static_url: str = STATIC_URL,
    static_dir: Path | None = None,
    default_query: str = EXAMPLE_QUERY,
    title: str = "gpugraph",
    nonce: str = "",
) -> str:
    """The GraphiQL page, or a page saying how to build its assets when they are missing."""
    directory = DEFAULT_STATIC_DIR if static_dir is None else static_dir
    if not assets_present(directory):
        return _MISSING.format(
            title=html.escape(title),
            nonce=html.escape(nonce),
            static_dir=html.escape(str(directory)),
            build_command=html.escape(BUILD_COMMAND),
            build_steps=html.escape(BUILD_STEPS),
            build_into=html.escape(build_into(directory)),
        )
    return _PAGE.format(
        title=html.escape(title),
        nonce=html.escape(nonce),
        static=html.escape(static_url.rstrip("/")),
        query=_script_json(default_query),
    )


def graphiql_response(
    *,
    static_url: str = STATIC_URL,
    static_dir: Path | None = None,
    default_query: str = EXAMPLE_QUERY,
    title: str = "gpugraph",
) -> HTMLResponse:
    """The GraphiQL page as a response: 200, or 503 with build instructions without assets."""
    nonce = secrets.token_urlsafe(16)
    directory = DEFAULT_STATIC_DIR if static_dir is None else static_dir
    body = graphiql_html(
        static_url=static_url,
        static_dir=directory,
        default_query=default_query,
        title=title,
        nonce=nonce,
    )
    status = 200 if assets_present(directory) else 503
    return HTMLResponse(
        body,
        status_code=status,
        headers={"Content-Security-Policy": _csp(nonce), "Cache-Control": "no-store"},
    )


class _MissingAssets:
    """ASGI app answering every asset request with a 404 that says how to build them."""

    def __init__(self, static_dir: Path) -> None:
        self.static_dir = static_dir

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = (
            f"GraphiQL assets are not built (nothing in {self.static_dir}); "
            f"run `{BUILD_COMMAND}` in a checkout, or `{build_into(self.static_dir)}` "
            "for an installed copy, and restart the server.\n"
        )
        await PlainTextResponse(message, status_code=404)(scope, receive, send)


def graphiql_routes(
    static_dir: Path | None = None, *, static_url: str = STATIC_URL
) -> list[BaseRoute]:
    """Routes serving the GraphiQL bundles at ``static_url``; mount them when the IDE is on."""
    directory = DEFAULT_STATIC_DIR if static_dir is None else static_dir
    if assets_present(directory):
        app: ASGIApp = StaticFiles(directory=directory)
    else:
        logger.warning(
            "GraphiQL assets missing from %s; GET /graphql in a browser shows how to build "
            "them (%s)",
            directory,
            BUILD_COMMAND,
        )
        app = _MissingAssets(directory)
    return [Mount(static_url.rstrip("/"), app=app, name="graphiql-static")]


class OfflineGraphiQL:
    """Mixin for strawberry's ASGI ``GraphQL`` view: the offline page instead of the CDN one.

    Put it first in the bases (``class App(OfflineGraphiQL, GraphQL): ...``); set
    ``graphiql_static_dir`` / ``graphiql_static_url`` on the class or instance to move the
    assets. Turning the IDE off stays strawberry's ``graphql_ide=None``.
    """

    graphiql_static_dir: Path | None = None
    graphiql_static_url: str = STATIC_URL
    graphiql_default_query: str = EXAMPLE_QUERY

    async def render_graphql_ide(self, request: Request) -> Response:
        """The offline GraphiQL page (strawberry calls this for browser GETs)."""
        return graphiql_response(
            static_url=self.graphiql_static_url,
            static_dir=self.graphiql_static_dir,
            default_query=self.graphiql_default_query,
        )

"""GraphiQL served from the server itself, so the IDE works on an air-gapped cluster.

strawberry's own page pulls React and GraphiQL from a public CDN. This page
loads the same bundles from ``/static/graphiql/``; they are npm packages
copied there at build time (``make web``). Without them, the page says how to
build them instead of rendering blank. A link can open it with a query of its
own: ``/graphql#query=...&variables=...``.
"""

from __future__ import annotations

import html
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute

from .offline_assets import (
    BUILD_COMMAND,
    STATIC_ROOT,
    all_present,
    asset_page,
    build_into_command,
    script_json,
    static_mount,
)

__all__ = [
    "ASSET_FILES",
    "BUILD_COMMAND",
    "DEFAULT_STATIC_DIR",
    "EXAMPLE_QUERY",
    "STATIC_URL",
    "OfflineGraphiQL",
    "assets_present",
    "graphiql_response",
    "graphiql_routes",
]

DEFAULT_STATIC_DIR = STATIC_ROOT / "graphiql"
STATIC_URL = "/static/graphiql"
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
    return all_present(directory, ASSET_FILES)


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
  // Links from other pages (the cluster map) open a query here as
  // #query=...&variables=...: the fragment never reaches the server.
  var shared = new URLSearchParams(window.location.hash.slice(1));
  ReactDOM.createRoot(document.getElementById("graphiql")).render(
    React.createElement(GraphiQL, {{
      fetcher: fetcher,
      defaultQuery: {query},
      query: shared.get("query") || undefined,
      variables: shared.get("variables") || undefined,
      defaultEditorToolsVisibility: true,
      shouldPersistHeaders: false,
    }})
  );
}})();
</script>
</body>
</html>
"""


def build_into(static_dir: Path) -> str:
    """The build command that writes the assets straight into ``static_dir``."""
    return build_into_command("build.mjs", static_dir)


def graphiql_response(
    *,
    static_url: str = STATIC_URL,
    static_dir: Path | None = None,
    default_query: str = EXAMPLE_QUERY,
    title: str = "gpugraph",
) -> HTMLResponse:
    """The GraphiQL page (200), or a page saying how to build its assets (503)."""
    directory = DEFAULT_STATIC_DIR if static_dir is None else static_dir

    def render(nonce: str) -> str:
        return _PAGE.format(
            title=html.escape(title),
            nonce=html.escape(nonce),
            static=html.escape(static_url.rstrip("/")),
            query=script_json(default_query),
        )

    return asset_page(
        render,
        directory,
        ASSET_FILES,
        what="GraphiQL",
        title=title,
        build_into=build_into(directory),
        note="The GraphQL API itself works: POST queries to this URL, or open a WebSocket "
        "(<code>graphql-transport-ws</code>) here for subscriptions.",
    )


def graphiql_routes(
    static_dir: Path | None = None, *, static_url: str = STATIC_URL
) -> list[BaseRoute]:
    """Routes serving the GraphiQL bundles at ``static_url``; mount them when the IDE is on."""
    directory = DEFAULT_STATIC_DIR if static_dir is None else static_dir
    return static_mount(
        static_url,
        directory,
        ASSET_FILES,
        what="GraphiQL",
        build_into=build_into(directory),
        name="graphiql-static",
    )


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

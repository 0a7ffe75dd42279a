"""``/metrics`` responses: the text exposition, gzipped when the scraper accepts it.

At 1,000 nodes the GPU series are tens of megabytes of highly repetitive text;
Prometheus asks for gzip, which shrinks them about sixfold (bench/README.md).
Compressing runs in a worker thread, like the rendering, so it does not hold
the event loop.
"""

from __future__ import annotations

import asyncio
import gzip

from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import Response

from .accept import quality

__all__ = ["accepts_gzip", "exposition_response"]

# Fastest level: most of the gain at a fraction of the cost of the default 9.
GZIP_LEVEL = 1


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an Accept-Encoding header allows gzip (``gzip;q=0`` refuses it, ``*`` allows it)."""
    return quality(accept_encoding, ("gzip", "x-gzip"), wildcard="*") > 0


async def exposition_response(request: Request, body: bytes) -> Response:
    """``body`` (Prometheus text format) as the response, gzipped if the request accepts it."""
    headers = {"Vary": "Accept-Encoding"}
    if accepts_gzip(request.headers.get("accept-encoding", "")):
        body = await asyncio.to_thread(gzip.compress, body, GZIP_LEVEL)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type=CONTENT_TYPE_LATEST, headers=headers)

"""``/metrics`` bodies: gzipped exactly when the scraper accepts gzip."""

from __future__ import annotations

import gzip

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from api.http.exposition import accepts_gzip, exposition_response

BODY = b"# HELP x An example.\n# TYPE x gauge\nx 1.0\n" * 1000


@pytest.mark.parametrize(
    ("header", "gzip_ok"),
    [
        ("gzip", True),
        ("identity,gzip,deflate", True),  # what Prometheus sends
        ("GZIP;q=0.5", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0", False),
        ("gzip;q=oops", False),
        ("gzip;q=0.000", False),
        ("x-gzip;q=0.001", True),
        ("*", True),
        ("gzip;q=0, *", False),
        ("deflate, br", False),
        ("", False),
    ],
)
def test_accepts_gzip(header: str, gzip_ok: bool) -> None:
    assert accepts_gzip(header) is gzip_ok


async def test_the_body_is_gzipped_only_when_accepted() -> None:
    async def endpoint(request: Request) -> Response:
        return await exposition_response(request, BODY)

    app = Starlette(routes=[Route("/metrics", endpoint)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        zipped = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert plain.content == BODY and "content-encoding" not in plain.headers
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.content == BODY  # httpx decodes it
    assert int(zipped.headers["content-length"]) == len(gzip.compress(BODY, 1)) < len(BODY) / 10
    assert zipped.headers["content-type"] == plain.headers["content-type"]
    assert plain.headers["content-type"].startswith("text/plain; version=")
    assert zipped.headers["vary"] == "Accept-Encoding"

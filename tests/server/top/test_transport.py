"""``gpugraph top``'s HTTP transport against a real HTTP server: what it parses and refuses."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from api.top.connection import Endpoint
from api.top.errors import TopError
from api.top.transport import HttpTransport


@contextmanager
def answering(body: bytes) -> Iterator[str]:
    """A real HTTP server answering every POST with 200 and ``body``: its /graphql URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/graphql"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_answer_is_parsed_with_its_non_ascii_names() -> None:
    body = '{"data": {"nodes": [{"name": "nœud-ü", "agent": {"reachable": true}}]}}'
    with answering(body.encode()) as url:
        answer = HttpTransport(Endpoint(url)).execute("{ nodes { name } }", {})
    assert answer == {"data": {"nodes": [{"name": "nœud-ü", "agent": {"reachable": True}}]}}


@pytest.mark.parametrize("body", [b"<html>gateway</html>", b"", b'{"data": ', b"\xff\xfe"])
def test_an_answer_that_is_not_json_is_a_clear_error(body: bytes) -> None:
    with answering(body) as url, pytest.raises(TopError, match="did not answer with JSON"):
        HttpTransport(Endpoint(url)).execute("{ nodes { name } }", {})

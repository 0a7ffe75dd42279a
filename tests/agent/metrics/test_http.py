"""The agent's /metrics listener: only GET /metrics and /healthz, bounded in size, time and
connections, over real sockets."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

from node_resolver.metrics.http import MAX_HEAD_BYTES, MetricsHttpServer

BODY = b"# TYPE x gauge\nx 1\n"


class Served:
    """A MetricsHttpServer on its own loop in a thread, and how often it rendered."""

    def __init__(self, listen: str = "127.0.0.1:0", **options: object) -> None:
        self.renders = 0
        self.body: bytes | None = BODY
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def render() -> bytes | None:
            self.renders += 1
            return self.body

        async def start() -> None:
            self.server = MetricsHttpServer(render, **options)  # type: ignore[arg-type]
            self.address = await self.server.start(listen)
            ready.set()

        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)
        ready.wait(30)
        _, _, port = self.address.rpartition(":")
        self.host_port = ("127.0.0.1", int(port))

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()

    def connect(self) -> socket.socket:
        sock = socket.create_connection(self.host_port, timeout=30)
        return sock

    def exchange(self, request: bytes) -> bytes:
        """Send ``request`` and read the whole answer (the server closes after one)."""
        with closing(self.connect()) as sock:
            sock.sendall(request)
            return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def closed_unanswered(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (reset or not) without answering a request on it."""
    try:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        return read_all(sock) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


@contextmanager
def served(listen: str = "127.0.0.1:0", **options: object) -> Iterator[Served]:
    running = Served(listen, **options)
    try:
        yield running
    finally:
        running.stop()


def test_only_get_metrics_and_healthz() -> None:
    with served() as s:
        ok = s.exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status(ok) == 200 and ok.endswith(b"\r\n\r\n" + BODY)
        assert b"Connection: close" in ok
        assert status(s.exchange(b"GET /metrics?name[]=x HTTP/1.1\r\nHost: x\r\n\r\n")) == 200
        assert status(s.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")) == 200
        assert status(s.exchange(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
        assert status(s.exchange(b"GET /metrics/../etc HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
        post = s.exchange(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        assert status(post) == 405 and b"Allow: GET" in post
        assert status(s.exchange(b"not http at all\r\n\r\n")) == 400
        assert s.renders == 2


def test_before_the_first_scan_a_scrape_fails_rather_than_reading_empty() -> None:
    with served() as s:
        s.body = None
        assert status(s.exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) == 503


def test_headers_past_the_bound_are_refused_unrendered() -> None:
    with served(token=lambda: "t") as s:
        big = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n"
        assert status(s.exchange(big)) == 431
        two = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n"
        assert status(s.exchange(two + b"Authorization: Bearer t\r\n\r\n")) == 401
        assert s.renders == 0
        assert status(s.exchange(two + b"\r\n")) == 200


def test_a_client_that_stalls_is_cut_off() -> None:
    with served(timeout=0.5) as s, closing(s.connect()) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        assert read_all(sock) == b""  # closed by the server, unanswered
        assert s.renders == 0


def test_connections_past_the_bound_are_closed_unread() -> None:
    with served(max_connections=2) as s:
        held = [s.connect() for _ in range(2)]
        try:
            # Each held connection has sent a byte, so the server has taken it.
            for sock in held:
                sock.sendall(b"G")
            with closing(s.connect()) as extra:
                assert closed_unanswered(extra)
        finally:
            for sock in held:
                sock.close()
        assert s.renders == 0
        # Freed slots serve again.
        assert status(s.exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")) == 200


@pytest.mark.skipif(not socket.has_dualstack_ipv6(), reason="no dual-stack IPv6 on this kernel")
def test_the_charts_any_address_serves_ipv4_too() -> None:
    # The chart listens on [::]:PORT, as the agent's gRPC port does; pod IPs are often IPv4.
    with served(listen="[::]:0") as s:
        assert s.address.startswith("[::]:")
        assert status(s.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")) == 200


def test_the_any_address_serves_ipv4_where_the_kernel_has_no_ipv6(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A node booted with ipv6.disable=1: no AF_INET6 socket at all. The chart's [::] must
    # still serve the scrape, as the agent's gRPC port does there.
    real = socket.create_server

    def no_ipv6(address: tuple[str, int], *, family: int = socket.AF_INET, **kw: object) -> object:
        if family == socket.AF_INET6:
            raise OSError(errno.EAFNOSUPPORT, "Address family not supported by protocol")
        return real(address, family=family, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "has_dualstack_ipv6", lambda: False)
    monkeypatch.setattr(socket, "create_server", no_ipv6)
    with served(listen="[::]:0") as s:
        assert s.address.startswith("0.0.0.0:")
        assert status(s.exchange(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")) == 200

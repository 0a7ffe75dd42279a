"""Bearer-token authentication for the agent's gRPC server.

With a token configured, every call must carry ``authorization: Bearer
<token>`` metadata (the scheme in any case, as RFC 6750 allows) or it is
refused with UNAUTHENTICATED. The standard health service's Check stays open
so kubelet probes and load balancers need no secret; its Watch, a stream that
holds a connection for as long as the caller likes, needs the token.

``TokenFile`` follows a token file as it changes, so a rotated Kubernetes
Secret takes effect without a restart.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

log = logging.getLogger(__name__)

# Open without a token: a single answer, so it cannot hold a connection.
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
# How often, at most, TokenFile looks at the file for a change.
TOKEN_CHECK_SECONDS = 5.0


def read_token_file(path: str | Path) -> str:
    """The token in ``path`` with surrounding whitespace removed; empty is an error."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read token file {path}: {exc}") from exc
    if not token:
        raise ValueError(f"token file {path} is empty")
    return token


def bearer_metadata(token: str) -> tuple[tuple[str, str]]:
    """Call metadata that carries ``token``."""
    return (("authorization", f"Bearer {token}"),)


class TokenFile:
    """The token in a file, re-read when the file changes; a bad new version keeps the old."""

    def __init__(
        self,
        path: str | Path,
        *,
        check_seconds: float = TOKEN_CHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self._check_seconds = check_seconds
        self._clock = clock
        self._version = self._stat()
        # Raises ValueError: at startup an unreadable or empty file is fatal.
        self._token = read_token_file(self.path)
        self._checked_at = clock()

    def current(self) -> str:
        """The token to expect now."""
        now = self._clock()
        if now - self._checked_at >= self._check_seconds:
            self._checked_at = now
            self._reload()
        return self._token

    def _stat(self) -> tuple[int, int, int] | None:
        # A Secret volume swaps a symlink, so the inode changes even when the mtime does not.
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ino, st.st_size)

    def _reload(self) -> None:
        version = self._stat()
        if version == self._version:
            return
        self._version = version
        try:
            token = read_token_file(self.path)
        except ValueError as exc:
            log.warning("%s; still expecting the previous token", exc)
            return
        if token != self._token:
            self._token = token
            log.info("token file %s changed; expecting the new token", self.path)


class BearerTokenInterceptor(aio.ServerInterceptor):
    """Refuses every call but a health Check unless it carries the right bearer token."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not token:
            raise ValueError("empty token")
        self._token = token if callable(token) else (lambda: token)

    def authorized(self, metadata: Any) -> bool:
        """True when ``metadata`` holds the expected authorization header."""
        for key, value in metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else bytes(value)
                scheme, _, credentials = given.partition(b" ")
                if scheme.lower() != b"bearer":
                    return False
                expected = self._token().encode()
                # Constant-time, so the comparison does not leak how much of a guess matched.
                return hmac.compare_digest(credentials.lstrip(b" "), expected)
        return False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """Pass health checks and authorized calls through; answer the rest UNAUTHENTICATED."""
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method == HEALTH_CHECK:
            return handler
        if self.authorized(handler_call_details.invocation_metadata):
            return handler
        return _refusal(handler)


async def _deny(context: aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")


def _refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same call shape as ``handler`` that only refuses."""
    options = {
        # No deserializer: the refusal never parses the caller's bytes, so an
        # unauthenticated caller cannot make the agent decode (or choke on) a payload.
        "request_deserializer": None,
        "response_serializer": handler.response_serializer,
    }

    async def unary(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await _deny(context)

    async def streaming(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await _deny(context)
        # Never reached; the yield makes this an async generator, as streaming handlers are.
        yield

    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary, **options)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming, **options)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary, **options)
    return grpc.stream_stream_rpc_method_handler(streaming, **options)

"""Bearer-token authentication for the agent's gRPC server.

With a token configured, every call must carry ``authorization: Bearer
<token>`` metadata or it is refused with UNAUTHENTICATED. The standard health
service stays open so kubelet probes and load balancers need no secret.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

HEALTH_SERVICE_PREFIX = "/grpc.health.v1.Health/"


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


class BearerTokenInterceptor(aio.ServerInterceptor):
    """Refuses every call but health checks unless it carries the right bearer token."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("empty token")
        self._expected = f"Bearer {token}".encode()

    def authorized(self, metadata: Any) -> bool:
        """True when ``metadata`` holds the expected authorization header."""
        for key, value in metadata or ():
            if key == "authorization":
                given = value.encode() if isinstance(value, str) else bytes(value)
                # Constant-time, so the comparison does not leak how much of a guess matched.
                return hmac.compare_digest(given, self._expected)
        return False

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        if handler is None or method.startswith(HEALTH_SERVICE_PREFIX):
            return handler
        if self.authorized(handler_call_details.invocation_metadata):
            return handler
        return _refusal(handler)


async def _deny(context: aio.ServicerContext[Any, Any]) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid bearer token")


def _refusal(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same call shape as ``handler`` that only refuses."""
    options = {
        "request_deserializer": handler.request_deserializer,
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

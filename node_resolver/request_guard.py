"""Malformed request payloads are the caller's mistake: INVALID_ARGUMENT, no traceback.

gRPC decodes a request with the method's deserializer before the servicer
runs; a payload that does not decode makes grpc log the DecodeError with its
stack trace and answer UNKNOWN. This interceptor wraps each unary-request
method's deserializer, so a payload that does not decode is answered
INVALID_ARGUMENT with a one-line reason and nothing is logged.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

__all__ = ["MalformedRequestGuard"]


class _Malformed:
    """Stands in for a request whose bytes did not decode."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:
            return _Malformed(f"{type(exc).__name__}: {exc}")

    return decode


class MalformedRequestGuard(aio.ServerInterceptor):
    """Answers undecodable unary requests INVALID_ARGUMENT instead of logging a traceback."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """The same handler, with a deserializer that cannot raise (unary requests only)."""
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:
            return handler
        options = {
            "request_deserializer": _safe(handler.request_deserializer),
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            # Typed as sync by the stubs; under grpc.aio the behaviours are coroutines.
            inner: Any = handler.unary_unary

            async def unary(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
                await _refuse_malformed(request, context)
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, **options)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _guard_streaming(handler.unary_stream), **options
            )
        return handler


def _guard_streaming(inner: Any) -> Any:
    """A server-streaming behaviour of the same kind as ``inner``.

    grpc.aio takes either an async generator (``yield`` each response) or a
    coroutine (``await context.write(...)``), such as the health service's Watch;
    the guard must be the same kind or grpc cannot drive it.
    """
    if inspect.isasyncgenfunction(inner):

        async def generated(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            await _refuse_malformed(request, context)
            async for item in inner(request, context):
                yield item

        return generated

    async def written(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await _refuse_malformed(request, context)
        return await inner(request, context)

    return written


async def _refuse_malformed(request: Any, context: aio.ServicerContext[Any, Any]) -> None:
    if isinstance(request, _Malformed):
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {request.reason}"
        )

"""Malformed request payloads are the caller's mistake: INVALID_ARGUMENT, no traceback.

gRPC decodes a request with the method's deserializer before the servicer
runs; a payload that does not decode makes grpc log the DecodeError with its
stack trace and answer UNKNOWN. This interceptor wraps each method's
deserializer, so a payload that does not decode (the request of a unary
method, or any message on a stream) is answered INVALID_ARGUMENT with a
one-line reason and nothing is logged.
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
    """Answers undecodable requests INVALID_ARGUMENT instead of logging a traceback."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        """The same handler, with a deserializer that cannot raise."""
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        options = {
            "request_deserializer": _safe(handler.request_deserializer),
            "response_serializer": handler.response_serializer,
        }
        # Typed as sync by the stubs; under grpc.aio the behaviours are coroutines or
        # async generators.
        behaviour: Any
        if handler.unary_unary is not None:
            behaviour = handler.unary_unary
            return grpc.unary_unary_rpc_method_handler(_same_kind(behaviour, _checked), **options)
        if handler.unary_stream is not None:
            behaviour = handler.unary_stream
            return grpc.unary_stream_rpc_method_handler(_same_kind(behaviour, _checked), **options)
        if handler.stream_unary is not None:
            behaviour = handler.stream_unary
            return grpc.stream_unary_rpc_method_handler(
                _same_kind(behaviour, _each_checked), **options
            )
        behaviour = handler.stream_stream
        return grpc.stream_stream_rpc_method_handler(
            _same_kind(behaviour, _each_checked), **options
        )


def _same_kind(inner: Any, check: Any) -> Any:
    """A behaviour of the same kind as ``inner`` that hands it ``check``'s view of its
    request (a request, or a stream of them).

    grpc.aio takes either an async generator (``yield`` each response) or a
    coroutine (``return`` the response, or ``await context.write(...)``, as the
    health service's Watch does); the guard must be the same kind or grpc cannot
    drive it.
    """
    if inspect.isasyncgenfunction(inner):

        async def generated(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
            async for item in inner(await check(request, context), context):
                yield item

        return generated

    async def returned(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        return await inner(await check(request, context), context)

    return returned


async def _checked(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
    """The request, refused first if it did not decode."""
    await _refuse_malformed(request, context)
    return request


async def _each_checked(requests: Any, context: aio.ServicerContext[Any, Any]) -> Any:
    """The stream of requests, which ends the call at the first one that did not decode."""

    async def each() -> Any:
        async for request in requests:
            await _refuse_malformed(request, context)
            yield request

    return each()


async def _refuse_malformed(request: Any, context: aio.ServicerContext[Any, Any]) -> None:
    if isinstance(request, _Malformed):
        await context.abort(
            grpc.StatusCode.INVALID_ARGUMENT, f"malformed request: {request.reason}"
        )

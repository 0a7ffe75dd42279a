"""One HTTP request under a deadline for the whole exchange and a limit on its answer.

httpx's own timeouts are per read: a server sending a byte every 20 s kept the
CLI waiting forever. Here the deadline covers connecting, sending and the
answer's last byte, and the answer is read as it arrives, reading stopping
past the limit: a 1 GiB answer read whole took the CLI to 4 GB.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Mapping
from typing import Any

import httpx

from .errors import TopError, deadline_error, too_large_error

__all__ = ["reason", "request"]


def reason(exc: BaseException) -> str:
    """Why a connection failed: the innermost OS error's words where there is one.

    httpx's asynchronous client wraps "[Errno 111] Connection refused" as "All
    connection attempts failed"; the cause says which.
    """
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            # Its errno (1, "Operation not permitted") is not what went wrong: its text is.
            return cause.strerror or str(cause)
        if isinstance(cause, OSError) and cause.errno is not None and cause.strerror:
            # The C library's words ("Connection refused"), not asyncio's "Connect call failed".
            words = os.strerror(cause.errno) if cause.errno > 0 else cause.strerror
            return f"[Errno {cause.errno}] {words}"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


def request(
    method: str,
    url: str,
    *,
    deadline: float,
    max_bytes: int,
    verify: ssl.SSLContext,
    headers: Mapping[str, str],
    body: Mapping[str, Any] | None = None,
    params: Mapping[str, str] | None = None,
    unreachable: str = "the gpugraph server",
) -> tuple[int, bytearray]:
    """The status and body of one request, all of it within ``deadline`` seconds and the body
    at most ``max_bytes``; TopError otherwise, naming ``unreachable`` when it cannot connect."""
    exchange = _request(method, url, deadline, max_bytes, verify, headers, body, params)
    try:
        return asyncio.run(exchange)
    except (TimeoutError, httpx.TimeoutException):
        raise deadline_error(url, deadline) from None
    except httpx.HTTPError as exc:
        raise TopError(f"cannot reach {unreachable} at {url}: {reason(exc)}") from None


async def _request(
    method: str,
    url: str,
    deadline: float,
    max_bytes: int,
    verify: ssl.SSLContext,
    headers: Mapping[str, str],
    body: Mapping[str, Any] | None,
    params: Mapping[str, str] | None,
) -> tuple[int, bytearray]:
    async with (
        asyncio.timeout(deadline),
        httpx.AsyncClient(verify=verify, timeout=deadline) as client,
        client.stream(method, url, json=body, params=params, headers=headers) as response,
    ):
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_bytes:
            raise too_large_error(url, max_bytes)
        answer = bytearray()
        async for chunk in response.aiter_bytes():
            answer += chunk
            if len(answer) > max_bytes:
                raise too_large_error(url, max_bytes)
        return response.status_code, answer

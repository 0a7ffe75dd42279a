"""The server's tracebacks, rate-limited by the limiter the agent uses too."""

from __future__ import annotations

from node_resolver import log_limits
from node_resolver.log_limits import TracebackRateLimit

__all__ = ["TRACEBACK_LOGGERS", "limit_tracebacks"]

# Where the serving path logs tracebacks: uvicorn's "Exception in ASGI
# application" and the schema's internal errors.
TRACEBACK_LOGGERS = ("uvicorn.error", "graph_schema.schema", "strawberry.ws.task")


def limit_tracebacks(limit: TracebackRateLimit | None = None) -> TracebackRateLimit:
    """Install one shared limit on the serving path's loggers (once; later calls reuse it)."""
    return log_limits.limit_tracebacks(TRACEBACK_LOGGERS, limit)

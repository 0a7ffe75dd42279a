"""Rate-limited tracebacks: a flood of failing requests must not flood the log.

Client mistakes get no traceback at all (they are 4xx answers or clean close
codes); a traceback is logged only for a real server fault, and at most
``burst`` of them per ``window`` seconds. Past that, the record is logged
without its stack trace and says how many were left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

__all__ = ["AGENT_LOGGERS", "TracebackRateLimit", "limit_tracebacks"]

# Where the agent logs tracebacks: grpc's "Unexpected error raised by servicer
# method", and the agent's own scan and encoding failures. A logger's filter
# does not apply to its children, so each logger is named.
AGENT_LOGGERS = (
    "grpc._cython.cygrpc",
    "grpc.aio._server",
    "node_resolver.service",
    "node_resolver.sampler",
    "node_resolver.nvml",
    "node_resolver.metrics.http",
)


class TracebackRateLimit(logging.Filter):
    """Lets ``burst`` tracebacks through per ``window`` seconds; strips the rest."""

    def __init__(
        self, burst: int = 5, window: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self._clock = clock
        self._window_start = clock()
        self._shown = 0
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record; drop the stack trace of those over the limit."""
        if not record.exc_info:
            return True
        now = self._clock()
        if now - self._window_start >= self.window:
            self._window_start, self._shown = now, 0
        if self._shown < self.burst:
            self._shown += 1
            return True
        self.suppressed += 1
        error = record.exc_info[1]
        record.exc_info = None
        record.exc_text = None
        detail = str(error).replace("%", "%%")  # record.args still apply to msg
        record.msg = f"{record.msg} ({type(error).__name__}: {detail}; traceback left out, "
        record.msg += f"over {self.burst} per {self.window:g} s)"
        return True


def limit_tracebacks(
    loggers: Sequence[str], limit: TracebackRateLimit | None = None
) -> TracebackRateLimit:
    """Install one shared limit on ``loggers`` (once; later calls reuse it)."""
    for name in loggers:
        for existing in logging.getLogger(name).filters:
            if isinstance(existing, TracebackRateLimit):
                return existing
    shared = limit if limit is not None else TracebackRateLimit()
    for name in loggers:
        logging.getLogger(name).addFilter(shared)
    return shared

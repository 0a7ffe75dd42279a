"""Rate-limited tracebacks, shared by the agent and the server."""

from __future__ import annotations

import logging

from node_resolver.log_limits import TracebackRateLimit


def test_tracebacks_past_the_burst_are_logged_without_their_stack() -> None:
    now = [0.0]
    limit = TracebackRateLimit(burst=2, window=60.0, clock=lambda: now[0])
    records = []
    for i in range(5):
        try:
            raise RuntimeError(f"fault {i} at 100%")
        except RuntimeError as exc:
            record = logging.LogRecord("x", logging.ERROR, "f", 1, "boom %s", ("a",), None)
            record.exc_info = (type(exc), exc, exc.__traceback__)
        assert limit.filter(record)
        records.append(record)
    assert [r.exc_info is not None for r in records] == [True, True, False, False, False]
    assert "fault 4 at 100%" in records[4].getMessage() and "left out" in records[4].getMessage()
    assert limit.suppressed == 3
    now[0] = 61.0
    try:
        raise RuntimeError("later")
    except RuntimeError as exc:
        late = logging.LogRecord("x", logging.ERROR, "f", 1, "boom", (), None)
        late.exc_info = (type(exc), exc, exc.__traceback__)
    limit.filter(late)
    assert late.exc_info is not None, "a new window shows tracebacks again"

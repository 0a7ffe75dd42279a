"""The one ``uvicorn.Server`` the project runs: who owns SIGINT/SIGTERM is a choice."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

import uvicorn

__all__ = ["UvicornServer"]


class UvicornServer(uvicorn.Server):
    """uvicorn whose signals either only start the shutdown or belong to the caller.

    With ``own_signals`` (``gpugraph serve``) a signal only starts the shutdown and
    is not re-raised afterwards: uvicorn would otherwise re-raise it once it has
    stopped serving, killing the process before the agent channels and the watch
    are closed. Without it (the demo, the tests) uvicorn installs no handlers at
    all, since whoever embeds it already owns SIGINT and SIGTERM.
    """

    def __init__(self, config: uvicorn.Config, *, own_signals: bool = True) -> None:
        super().__init__(config)
        self._own_signals = own_signals

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Install the graceful handlers for the duration of ``serve``, or none."""
        if not self._own_signals:
            yield
            return
        loop = asyncio.get_running_loop()

        def handle(sig: signal.Signals) -> None:
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True  # a second ^C: stop waiting for connections
            self.should_exit = True

        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, handle, sig)
        try:
            yield
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

"""Every SQLite connection the code under test opens, kept, to make its disk small or a query slow.

``SqliteConnections.install(monkeypatch)`` wraps ``sqlite3.connect``: each
connection opened afterwards is still a real SQLite connection, recorded in
``opened``, with a trace callback through which a test can hold chosen
statements (``stall``). ``fill_disk`` caps every connection's database at the
pages it has (``PRAGMA max_page_count``), so the next write that needs a page
gets SQLite's own "database or disk is full", with no small file system or
root; ``free_disk`` lifts the cap.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

__all__ = ["SqliteConnections", "Stall"]

# The most a stalled statement waits, so that a failing test cannot hang the run.
STALL_LIMIT_SECONDS = 60.0


class Stall:
    """Holds every statement containing ``marker`` at its start, until ``release``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self._released = threading.Event()
        self._held = threading.Condition()
        self.holding = 0

    def trace(self, statement: str) -> None:
        """The connections' trace callback: hold a matching statement."""
        if self.marker not in statement or self._released.is_set():
            return
        with self._held:
            self.holding += 1
            self._held.notify_all()
        try:
            self._released.wait(STALL_LIMIT_SECONDS)
        finally:
            with self._held:
                self.holding -= 1

    def wait_holding(self, count: int, timeout: float = 30.0) -> bool:
        """Wait until ``count`` statements are held at once; False if they never are."""
        with self._held:
            return self._held.wait_for(lambda: self.holding >= count, timeout)

    def release(self) -> None:
        """Let every held statement (and every later one) run."""
        self._released.set()


class SqliteConnections:
    """The connections opened since ``install``, and what tests do to them."""

    def __init__(self) -> None:
        self.opened: list[sqlite3.Connection] = []
        self.read_only = 0
        self._stalls: list[Stall] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> SqliteConnections:
        """Record every connection opened from now on (until the test ends)."""
        real = sqlite3.connect

        def connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
            connection = real(*args, **kwargs)
            if kwargs.get("uri") and "mode=ro" in str(args[0] if args else kwargs["database"]):
                self.read_only += 1
            connection.set_trace_callback(self._trace)
            self.opened.append(connection)
            return connection

        monkeypatch.setattr(sqlite3, "connect", connect)
        return self

    def _trace(self, statement: str) -> None:
        for stall in list(self._stalls):
            stall.trace(statement)

    def stall(self, marker: str) -> Stall:
        """Hold statements containing ``marker`` from now on, until the stall is released."""
        stall = Stall(marker)
        self._stalls.append(stall)
        return stall

    def fill_disk(self) -> None:
        """No database may grow by another page, as if its disk were full."""
        for connection in self._open():
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            connection.execute(f"PRAGMA max_page_count = {pages}")

    def free_disk(self) -> None:
        """Room again."""
        for connection in self._open():
            connection.execute("PRAGMA max_page_count = 1073741823")

    def _open(self) -> list[sqlite3.Connection]:
        still = []
        for connection in self.opened:
            try:
                connection.total_changes  # noqa: B018 (raises once closed)
            except sqlite3.ProgrammingError:
                continue
            still.append(connection)
        return still

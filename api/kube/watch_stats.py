"""Counters of one resource's list and watch loop."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WatchStats"]


@dataclass
class WatchStats:
    """Counters of one resource's list and watch loop."""

    lists: int = 0  # full lists that landed in the cache
    relists: int = 0  # of those, the ones after the first (410 Gone or a failed resume)
    watches: int = 0  # watch requests that were answered
    watch_restarts: int = 0  # watches resumed from the last resourceVersion after ending
    events: int = 0  # ADDED / MODIFIED / DELETED events applied
    bookmarks: int = 0
    bad_events: int = 0  # malformed watch lines or list items that were skipped
    errors: int = 0  # failed requests (connection errors, non-2xx, ERROR events)
    # When the API server last said anything (a list, a watch answer, an event or
    # a bookmark), on time.monotonic(); 0.0 until it first does. Not a counter.
    heard_at: float = 0.0

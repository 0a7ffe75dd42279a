"""The occupancy log: one record per process lifetime on a GPU, kept on the node.

``OccupancyTracker`` folds every scan into in-memory records; ``HistoryStore``
keeps them in SQLite (WAL mode, bounded by age and by size); ``HistoryLog``
ties the two together with a writer thread that flushes in batches.
"""

from __future__ import annotations

from .durations import parse_duration
from .log import HistoryLog, HistorySettings
from .records import HistoryQuery, OccupancyRecord, UsageGroup, UsageQuery, UsageRow
from .store import HistoryStore

__all__ = [
    "HistoryLog",
    "HistoryQuery",
    "HistorySettings",
    "HistoryStore",
    "OccupancyRecord",
    "UsageGroup",
    "UsageQuery",
    "UsageRow",
    "parse_duration",
]
